#!/usr/bin/env python3
"""Training a ~1.3B-parameter language model on one GPU: mimo against
PyTorch eager (docs/gpu.md GPU benchmarks; run by scripts/gpu-check.sh).

The model (bench/models/lm-1b.json): hidden 2048, 22 layers, 16 heads,
SwiGLU 5632, vocabulary 32000, sequence 2048, 4 micro-batches of 2
sequences per step (16,384 tokens; PyTorch accumulates the same four),
precision bf16, AdamW. mimo trains its plan (compiled beforehand:
scripts/gpu-bundle.sh) with `mimo-run --device cuda`; the same model and
optimizer run in PyTorch eager (bench/pytorch_twin.py: bf16 autocast with
F.scaled_dot_product_attention, and fp32) in the same run. Reported:
tokens/s, model TFLOP/s and MFU against the GPU's dense bf16 peak, the
ratio mimo / PyTorch, and the peak device memory of mimo's step (what its
device allocated at most, `peak_bytes` of the metrics; nvidia-smi's view,
the CUDA context included, beside it) against the memory plan's estimate
(`mimoc explain`). Then where mimo's step goes: a second, traced run
(`--trace`: on the GPU every kernel, GEMM and copy is timed with CUDA
events) summed by kernel over its last step.

usage: bench/train_1b.py --build DIR --plan PLAN.json [--explain EXPLAIN.json]
                         [--steps N] [--timeout S] [--out FILE.md]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Dense bf16 tensor-core peaks (TFLOP/s), by the GPU's name.
BF16_PEAK = {"H100": 989.4, "H200": 989.4, "A100": 312.0}


def gpu_name():
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, check=True).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown GPU"


class MemorySampler:
    """Peak memory.used of GPU 0 (MiB) every 0.2 s while running."""

    def __init__(self):
        self.peak = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            try:
                used = subprocess.run(
                    ["nvidia-smi", "--query-gpu=memory.used",
                     "--format=csv,noheader,nounits", "-i", "0"],
                    capture_output=True, text=True, timeout=5).stdout.strip()
                self.peak = max(self.peak, int(used.splitlines()[0]))
            except (OSError, ValueError, IndexError,
                    subprocess.TimeoutExpired):
                pass
            self.stop.wait(0.2)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def model_shape(plan):
    config = json.load(open(plan))["model"]
    language = [m for m in config["modules"] if m["kind"] == "language"][0]
    return language["arch"], config["batch"]


def run_mimo(args, work):
    metrics = os.path.join(work, "mimo.jsonl")
    with MemorySampler() as memory:
        start = time.time()
        done = subprocess.run(
            [os.path.join(args.build, "bin", "mimo-run"), args.plan,
             "--device", "cuda", "--steps", str(args.steps),
             "--metrics", metrics],
            capture_output=True, text=True, timeout=args.timeout)
        wall = time.time() - start
    if done.returncode != 0:
        # The error line, not the usage text that may follow it.
        errors = [line for line in done.stderr.splitlines() if "error" in line]
        raise RuntimeError("mimo-run failed (%d): %s" % (
            done.returncode, (errors[0] if errors else done.stderr)[-800:]))
    steps = [json.loads(line) for line in open(metrics)]
    later = steps[1:] or steps
    return {
        "tokens_per_s": statistics.median(s["tokens_per_s"] for s in later),
        "tflops": statistics.median(s["tflops"] for s in later),
        "seconds": statistics.median(s["seconds"] for s in later),
        "loss": [round(s["loss"], 4) for s in steps],
        "peak_mib": memory.peak, "wall": wall,
        "peak_bytes": max(s.get("peak_bytes", -1) for s in steps),
    }


def kind_of(name):
    if name.startswith("gemm"):
        return "GEMMs (cuBLASLt)"
    if "attention" in name:
        return "attention"
    if name in ("copy", "upload", "memset"):
        return "copies and memsets"
    if name.startswith("adamw"):
        return "AdamW"
    return "norms, RoPE, activations, residuals, loss, packing"


def kernel_breakdown(args, work, top=15):
    """Runs 2 traced steps; the last step's device kernels by name and kind
    (lines of markdown), or a line saying why there are none."""
    trace = os.path.join(work, "mimo.trace.json")
    done = subprocess.run(
        [os.path.join(args.build, "bin", "mimo-run"), args.plan,
         "--device", "cuda", "--steps", "2", "--trace", trace],
        capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0 or not os.path.exists(trace):
        return ["- traced run failed (%d): %s" % (
            done.returncode, done.stderr.strip()[-300:])]
    events = json.load(open(trace))["traceEvents"]
    steps = sorted(e["ts"] for e in events
                   if e.get("cat") == "step" and e.get("pid") == 0)
    kernels = [e for e in events if e.get("cat") == "kernel"
               and e.get("pid") == 0 and (not steps or e["ts"] >= steps[-1])]
    if not kernels:
        return ["- the traced run has no device kernel times"]
    first = min(e["ts"] for e in kernels)
    last = max(e["ts"] + e["dur"] for e in kernels)
    busy = sum(e["dur"] for e in kernels)
    by_name, by_kind = {}, {}
    for e in kernels:
        calls, us = by_name.get(e["name"], (0, 0.0))
        by_name[e["name"]] = (calls + 1, us + e["dur"])
        by_kind[kind_of(e["name"])] = by_kind.get(kind_of(e["name"]),
                                                  0.0) + e["dur"]
    span = last - first
    lines = ["", "### Where mimo's step goes (rank 0, the traced run's last "
             "step, CUDA events around every launch)", "",
             "Kernels busy %.1f ms of the %.1f ms from the step's first "
             "kernel to its last (%.1f%% in gaps between kernels)." % (
                 busy / 1e3, span / 1e3, 100 * (1 - busy / span) if span else 0),
             "", "| kind | ms | share of kernel time |", "|---|---:|---:|"]
    for kind, us in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        lines.append("| %s | %.1f | %.1f%% |" % (kind, us / 1e3,
                                                 100 * us / busy))
    lines += ["", "| kernel | calls | ms | share | mean us |",
              "|---|---:|---:|---:|---:|"]
    for name, (calls, us) in sorted(by_name.items(),
                                    key=lambda kv: -kv[1][1])[:top]:
        lines.append("| %s | %d | %.2f | %.1f%% | %.1f |" % (
            name, calls, us / 1e3, 100 * us / busy, us / calls))
    return lines


def run_twin(args, arch, batch, dtype, attention):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "pytorch_twin.py"),
           "--device", "cuda", "--dtype", dtype, "--attention", attention,
           "--hidden", str(arch["hidden_size"]),
           "--layers", str(arch["num_layers"]),
           "--heads", str(arch["num_heads"]),
           "--ffn", str(arch["ffn_hidden_size"]),
           "--vocab", str(arch["vocab_size"]),
           "--seq", str(batch["seq_length"]),
           "--batch", str(batch["micro_batch_size"]),
           "--microbatches", str(batch.get("num_microbatches", 1)),
           "--steps", str(args.steps)]
    done = subprocess.run(cmd, capture_output=True, text=True,
                          timeout=args.timeout)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build-gpu"))
    parser.add_argument("--plan", required=True)
    parser.add_argument("--explain")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--timeout", type=int, default=400)
    parser.add_argument("--out")
    args = parser.parse_args()
    arch, batch = model_shape(args.plan)
    name = gpu_name()
    peak = next((v for k, v in BF16_PEAK.items() if k in name), None)
    lines = ["## Training a ~1.3B language model on one GPU: mimo vs PyTorch "
             "eager", "",
             "`python3 bench/train_1b.py --steps %d` on %s; model: hidden %d, "
             "%d layers, %d heads, FFN %d, vocabulary %d, sequence %d, %d "
             "sequences per step (%d micro-batches), AdamW." % (
                 args.steps, name, arch["hidden_size"], arch["num_layers"],
                 arch["num_heads"], arch["ffn_hidden_size"],
                 arch["vocab_size"], batch["seq_length"],
                 batch["micro_batch_size"] * batch.get("num_microbatches", 1),
                 batch.get("num_microbatches", 1)),
             ""]
    breakdown = []
    with tempfile.TemporaryDirectory() as work:
        try:
            mimo = run_mimo(args, work)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            mimo = {"error": str(e)[-400:]}
        if "error" not in mimo:
            try:
                breakdown = kernel_breakdown(args, work)
            except (OSError, ValueError, KeyError,
                    subprocess.TimeoutExpired) as e:
                breakdown = ["- kernel breakdown failed: %s" % e]
    twins = {(d, a): run_twin(args, arch, batch, d, a)
             for d, a in (("bf16", "sdpa"), ("fp32", "sdpa"))}
    flops_per_token = None
    if "tflops" in mimo:
        flops_per_token = mimo["tflops"] * 1e12 / mimo["tokens_per_s"]

    def mfu(tokens_per_s):
        if not peak or not flops_per_token:
            return "n/a"
        return "%.1f%%" % (100 * tokens_per_s * flops_per_token / 1e12 / peak)

    lines += ["| run | tokens/s | model TFLOP/s | MFU (bf16 peak %s) | peak "
              "memory |" % ("%.0f" % peak if peak else "unknown"),
              "|---|---:|---:|---:|---:|"]
    if "error" in mimo:
        lines.append("| mimo (precision bf16: bf16 GEMMs, tensor-core attention) | failed: "
                     "%s | | | |" % mimo["error"].replace("\n", " "))
    else:
        lines.append("| mimo (precision bf16: bf16 GEMMs, tensor-core attention) | %.0f | "
                     "%.1f | %s | %.1f GiB (allocated; nvidia-smi %.1f GiB) "
                     "|" % (mimo["tokens_per_s"], mimo["tflops"],
                            mfu(mimo["tokens_per_s"]),
                            mimo["peak_bytes"] / 2**30,
                            mimo["peak_mib"] / 1024))
    for (dtype, attention), twin in twins.items():
        label = "PyTorch eager, %s%s, SDPA attention" % (
            dtype, " autocast" if dtype == "bf16" else " (TF32 off)")
        if "error" in twin:
            lines.append("| %s | failed: %s | | | |" % (label, twin["error"]))
            continue
        tflops = (twin["tokens_per_s"] * flops_per_token / 1e12
                  if flops_per_token else float("nan"))
        lines.append("| %s | %.0f | %.1f | %s | %.1f GiB (allocated) |" % (
            label, twin["tokens_per_s"], tflops, mfu(twin["tokens_per_s"]),
            twin["peak_bytes"] / 2**30))
    lines.append("")
    if "error" not in mimo:
        for (dtype, _), twin in twins.items():
            if "error" not in twin:
                lines.append("- mimo / PyTorch eager %s: %.2fx tokens/s" % (
                    dtype, mimo["tokens_per_s"] / twin["tokens_per_s"]))
        lines.append("- mimo's losses: %s; step %.2f s" % (
            mimo["loss"], mimo["seconds"]))
        if args.explain:
            estimate = json.load(open(args.explain))["ranks"][0]["memory"]
            lines.append("- mimo's peak device memory %.1f GiB allocated vs "
                         "the memory plan's %.1f GiB (ratio %.2f)" % (
                             mimo["peak_bytes"] / 2**30,
                             estimate["total_bytes"] / 2**30,
                             mimo["peak_bytes"] / estimate["total_bytes"]))
    lines += breakdown
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
