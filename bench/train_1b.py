#!/usr/bin/env python3
"""Training a ~1.3B-parameter language model on one GPU: mimo against
PyTorch eager and torch.compile (docs/gpu.md GPU benchmarks; run by
scripts/gpu-check.sh).

The model (bench/models/lm-1b.json): hidden 2048, 22 layers, 16 heads,
SwiGLU 5632, vocabulary 32000, sequence 2048, 4 micro-batches of 2
sequences per step (16,384 tokens; PyTorch accumulates the same four),
precision bf16, AdamW. mimo trains its plan (compiled beforehand:
scripts/gpu-bundle.sh) with `mimo-run --device cuda`; the same model and
optimizer run in PyTorch eager (bench/pytorch_twin.py: bf16 autocast with
F.scaled_dot_product_attention, and fp32), and the bf16 one through
torch.compile, in the same run (SPEC §23 measures mimo against both).
Reported: tokens/s, model TFLOP/s and MFU against the GPU's dense bf16
peak, the ratios mimo / PyTorch, and the peak device memory of mimo's step
(what its device allocated at most, `peak_bytes` of the metrics;
nvidia-smi's view, the CUDA context included, beside it) against the
memory plan's estimate (`mimoc explain`). Then where each step goes:
mimo's from a second, traced run (`--trace`: on the GPU every kernel, GEMM
and copy is timed with CUDA events) summed by kernel over its last step;
PyTorch's (eager bf16 and torch.compile) from torch.profiler over one step
after the timed ones, its 20 kernels of most self time. A torch.compile
that fails (no Triton, a graph break that raises, the time limit) is
reported as not measured, with the reason; the rest stands.

usage: bench/train_1b.py --build DIR --plan PLAN.json [--explain EXPLAIN.json]
                         [--steps N] [--timeout S] [--out FILE.md]
                         [--json FILE]
  --json FILE  the headline figures: {"mfu_1b" (mimo's, a fraction of the
               bf16 peak), "vs_pytorch_eager_bf16", "vs_torch_compile" (mimo's
               tokens/s over PyTorch's), "mimo_step_s", "eager_step_s",
               "compile_step_s" (median steps after the first), "errors"
               (what failed, by run)}; null where not measured.
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


def run_twin(args, arch, batch, dtype, compiled=False, profile=False):
    """PyTorch's run of the model (bench/pytorch_twin.py, SDPA attention):
    its JSON, or {"error": reason}."""
    cmd = [sys.executable, os.path.join(ROOT, "bench", "pytorch_twin.py"),
           "--device", "cuda", "--dtype", dtype, "--attention", "sdpa",
           "--hidden", str(arch["hidden_size"]),
           "--layers", str(arch["num_layers"]),
           "--heads", str(arch["num_heads"]),
           "--ffn", str(arch["ffn_hidden_size"]),
           "--vocab", str(arch["vocab_size"]),
           "--seq", str(batch["seq_length"]),
           "--batch", str(batch["micro_batch_size"]),
           "--microbatches", str(batch.get("num_microbatches", 1)),
           "--steps", str(args.steps)]
    cmd += ["--compile"] if compiled else []
    cmd += ["--profile"] if profile else []
    try:
        done = subprocess.run(cmd, capture_output=True, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": "not done in %d s (--timeout)" % args.timeout}
    last = (done.stdout.strip().splitlines() or [""])[-1]
    try:
        out = json.loads(last)
    except ValueError:
        out = None
    if done.returncode != 0 or not isinstance(out, dict):
        if isinstance(out, dict) and "error" in out:
            return out
        lines = done.stderr.strip().splitlines()
        return {"error": "exit %d: %s" % (done.returncode,
                                          (lines or ["no output"])[-1][-300:])}
    return out


def step_seconds(twin):
    """The median step after the first (the first compiles, warms up)."""
    steps = twin["steps"][1:] or twin["steps"]
    return statistics.median(s["seconds"] for s in steps)


def torch_kernels(label, twin):
    """Lines of markdown: the PyTorch run's kernels of one step
    (torch.profiler), or a line saying why there are none."""
    if "kernels_error" in twin:
        return ["", "- %s: no kernel profile: %s" % (label,
                                                      twin["kernels_error"])]
    if not twin.get("kernels"):
        return []
    total = twin["kernel_ms"]
    lines = ["", "### Where PyTorch's step goes (%s; torch.profiler over one "
             "step after the timed ones, the 20 kernels of most self time)" %
             label, "",
             "Kernels busy %.1f ms in that step." % total, "",
             "| kernel | calls | ms | share | mean us |",
             "|---|---:|---:|---:|---:|"]
    for k in twin["kernels"]:
        name = k["name"].replace("|", "/")
        if len(name) > 100:
            name = name[:97] + "..."
        lines.append("| %s | %d | %.2f | %.1f%% | %.1f |" % (
            name, k["calls"], k["ms"], 100 * k["ms"] / total if total else 0,
            1e3 * k["ms"] / k["calls"] if k["calls"] else 0))
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build-gpu"))
    parser.add_argument("--plan", required=True)
    parser.add_argument("--explain")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--timeout", type=int, default=400)
    parser.add_argument("--out")
    parser.add_argument("--json")
    args = parser.parse_args()
    arch, batch = model_shape(args.plan)
    name = gpu_name()
    peak = next((v for k, v in BF16_PEAK.items() if k in name), None)
    lines = ["## Training a ~1.3B language model on one GPU: mimo vs PyTorch "
             "eager and torch.compile", "",
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
    # PyTorch's runs, torch.compile last (the longest, and the one most
    # likely to fail: its row then says why).
    twins = {}
    twins["eager_bf16"] = run_twin(args, arch, batch, "bf16", profile=True)
    twins["eager_fp32"] = run_twin(args, arch, batch, "fp32")
    twins["compile_bf16"] = run_twin(args, arch, batch, "bf16", compiled=True,
                                     profile=True)
    labels = {
        "eager_bf16": "PyTorch eager, bf16 autocast, SDPA attention",
        "compile_bf16": "PyTorch torch.compile, bf16 autocast, SDPA attention",
        "eager_fp32": "PyTorch eager, fp32 (TF32 off), SDPA attention"}
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
    for key in ("eager_bf16", "compile_bf16", "eager_fp32"):
        label, twin = labels[key], twins[key]
        if "error" in twin:
            lines.append("| %s | failed: %s | | | |" % (
                label, str(twin["error"]).replace("|", "/")))
            continue
        tflops = (twin["tokens_per_s"] * flops_per_token / 1e12
                  if flops_per_token else float("nan"))
        lines.append("| %s | %.0f | %.1f | %s | %.1f GiB (allocated) |" % (
            label, twin["tokens_per_s"], tflops, mfu(twin["tokens_per_s"]),
            twin["peak_bytes"] / 2**30))
    lines.append("")
    if "error" not in mimo:
        for key in ("eager_bf16", "compile_bf16", "eager_fp32"):
            if "error" not in twins[key]:
                lines.append("- mimo / %s: %.2fx tokens/s" % (
                    labels[key].split(", SDPA")[0],
                    mimo["tokens_per_s"] / twins[key]["tokens_per_s"]))
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
    lines += torch_kernels("eager bf16", twins["eager_bf16"])
    lines += torch_kernels("torch.compile bf16", twins["compile_bf16"])
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(headline(mimo, twins, peak), f, indent=2)
            f.write("\n")


def headline(mimo, twins, peak):
    """The figures gpu-check's summary takes (bench/gpu_summary.py)."""
    ok = "error" not in mimo

    def ratio(key):
        twin = twins[key]
        if not ok or "error" in twin:
            return None
        return mimo["tokens_per_s"] / twin["tokens_per_s"]

    def step(key):
        return None if "error" in twins[key] else step_seconds(twins[key])

    errors = {key: str(twin["error"]) for key, twin in twins.items()
              if "error" in twin}
    if not ok:
        errors["mimo"] = mimo["error"]
    return {"mfu_1b": mimo["tflops"] / peak if ok and peak else None,
            "vs_pytorch_eager_bf16": ratio("eager_bf16"),
            "vs_torch_compile": ratio("compile_bf16"),
            "mimo_step_s": mimo["seconds"] if ok else None,
            "eager_step_s": step("eager_bf16"),
            "compile_step_s": step("compile_bf16"),
            "errors": errors}


if __name__ == "__main__":
    main()
