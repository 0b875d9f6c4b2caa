#!/usr/bin/env python3
"""Activation recomputation (docs/model.md Recomputation) measured on the
CPU: a 16-layer language model on one rank, trained with recompute none,
selective, full with recompute_layers 8, and full, each for 6 steps. For
each: the peak bytes mimo-run reports (`peak_bytes` in its metrics) less
the parameters, gradients and AdamW state (`mimoc explain`'s memory), i.e.
the activations, beside the memory plan's activation bytes; and the median
step time (after two), in turn over 3 rounds. The losses must be equal bit
for bit.

Then the distributed optimizer (docs/model.md): an 8-layer language model
with a 16384-token vocabulary at DP4 and at CP2 x DP2 (4 ranks, local
backend), replicated and sharded: the optimizer bytes per rank of the
memory plan, the measured peak of the largest rank, the step time, and the
losses (equal bit for bit; gradient norms within 1e-9).

A section from "## On a GPU" on in an existing --out file is kept.

usage: memory.py [BUILD_DIR] [--out FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = {
    "version": 1, "name": "lm-16", "seed": 3,
    "batch": {"micro_batch_size": 4, "num_microbatches": 2, "seq_length": 512},
    "modules": [{"name": "language", "kind": "language",
                 "arch": {"vocab_size": 2048, "hidden_size": 256,
                          "num_layers": 16, "num_heads": 8,
                          "ffn_hidden_size": 1024},
                 "parallel": {}}],
    "data": {"source": "synthetic", "text_only_fraction": 1.0},
    "train": {"steps": 6},
}
ZERO_MODEL = {
    "version": 1, "name": "lm-zero", "seed": 3,
    "batch": {"micro_batch_size": 8, "num_microbatches": 2, "seq_length": 256},
    "modules": [{"name": "language", "kind": "language",
                 "arch": {"vocab_size": 16384, "hidden_size": 256,
                          "num_layers": 8, "num_heads": 8,
                          "ffn_hidden_size": 1024},
                 "parallel": {}}],
    "data": {"source": "synthetic", "text_only_fraction": 1.0},
    "train": {"steps": 6},
}
ZERO_GRIDS = [("dp 4", {"dp": 4}, "fp32"), ("cp 2 x dp 2", {"cp": 2, "dp": 2}, "fp32"),
              ("dp 4, bf16", {"dp": 4}, "bf16")]
VARIANTS = [("none", None), ("selective", None), ("full, 8 of 16 layers", 8),
            ("full", -1)]


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    mimoc = os.path.join(args.build, "bin", "mimoc")
    run = os.path.join(args.build, "bin", "mimo-run")
    rows = {}
    with tempfile.TemporaryDirectory() as work:
        plans = {}
        for label, layers in VARIANTS:
            model = json.loads(json.dumps(MODEL))
            lm = model["modules"][0]
            if label != "none":
                lm["recompute"] = label.split(",")[0]
            if layers and layers > 0:
                lm["recompute_layers"] = layers
            path = os.path.join(work, f"{len(plans)}.json")
            json.dump(model, open(path, "w"))
            plan = path + ".plan"
            subprocess.run([mimoc, "compile", "-q", path, "-o", plan], check=True)
            explain = json.loads(subprocess.run(
                [mimoc, "explain", plan, "--format=json", "--rank", "0"],
                capture_output=True, text=True, check=True).stdout)
            memory = explain["memory"] if "memory" in explain else explain["ranks"][0]["memory"]
            plans[label] = (plan, memory)
        times, peaks, losses = {}, {}, {}
        for _ in range(args.rounds):
            for label, (plan, memory) in plans.items():
                metrics = plan + ".jsonl"
                subprocess.run([run, plan, "--metrics", metrics, "--threads", "1"],
                               check=True, capture_output=True)
                lines = [json.loads(l) for l in open(metrics)]
                times.setdefault(label, []).append(median([l["seconds"] for l in lines[2:]]))
                peaks[label] = max(l["peak_bytes"] for l in lines)
                losses[label] = [l["loss"] for l in lines]
        for label, (plan, memory) in plans.items():
            static = memory["param_bytes"] + memory["grad_bytes"] + memory["optimizer_bytes"]
            rows[label] = (peaks[label] - static, memory["activation_bytes"],
                           median(times[label]), losses[label] == losses["none"])
    mib = 1 << 20
    base_act, _, base_time, _ = rows["none"]
    lines = [
        "# Activation recomputation: memory and time (CPU)", "",
        "`python3 bench/memory.py`: a 16-layer language model (hidden 256, 8 heads,"
        " FFN 1024, vocabulary 2048) on one rank, 2 microbatches of 4 x 512 tokens,"
        " one thread; activations = mimo-run's `peak_bytes` less the parameters,"
        " gradients and AdamW state; the plan's figure is `mimoc explain`'s"
        " `activation_bytes`. Step: the median (after two of 6 steps) over"
        f" {args.rounds} rounds taken in turn.", "",
        "| recompute | activations (measured) | plan | measured / none | step | step / none | losses equal to none |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for label, _ in VARIANTS:
        act, plan_act, step, same = rows[label]
        lines.append(f"| {label} | {act / mib:.1f} MiB | {plan_act / mib:.1f} MiB | "
                     f"{act / base_act:.2f} | {step * 1e3:.0f} ms | {step / base_time:.2f} | "
                     f"{'bit for bit' if same else 'NO'} |")
    full = rows["full"][0]
    lines += ["", f"Full recomputation keeps {base_act / full:.1f}x less activation memory"
              " than none (target: at least 3x).", ""]
    zero_lines, zero_ok = distributed_optimizer(mimoc, run, args.rounds)
    lines += zero_lines
    text = "\n".join(lines)
    if args.out and os.path.exists(args.out):
        kept = open(args.out).read()
        at = kept.find("## On a GPU")
        if at >= 0:
            text += "\n" + kept[at:]
    print(text)
    if args.out:
        open(args.out, "w").write(text)
    ok = base_act / full >= 3 and all(r[3] for r in rows.values()) and zero_ok
    return 0 if ok else 1


def distributed_optimizer(mimoc, run, rounds):
    """The distributed optimizer's section of the results and whether its
    checks held (optimizer bytes 1/(dp·cp), losses equal)."""
    mib = 1 << 20
    lines = [
        "## The distributed optimizer (CPU)", "",
        "The same script: an 8-layer language model (hidden 256, 8 heads, FFN"
        " 1024, vocabulary 16384: {params:.1f} M parameters) on 4 ranks (local backend,"
        " one thread each), 2 microbatches of 8 x 256 tokens, with"
        " `distributed_optimizer` off and on. Optimizer bytes: the memory"
        " plan's AdamW moments per rank (`mimoc explain`); peak: mimo-run's"
        " `peak_bytes` (the largest rank) beside the plan's; step: the median"
        f" (after two of 6 steps) over {rounds} rounds taken in turn.", "",
        "| grid | optimizer | optimizer bytes / rank (plan) | sharded / replicated |"
        " weights / rank (plan) | peak (measured) | peak (plan) | step | step / replicated | losses |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    ok = True
    params = 0
    drops = []
    with tempfile.TemporaryDirectory() as work:
        for grid_label, grid, precision in ZERO_GRIDS:
            plans = {}
            for sharded in (False, True):
                model = json.loads(json.dumps(ZERO_MODEL))
                lm = model["modules"][0]
                lm["parallel"] = grid
                model["precision"] = precision
                if sharded:
                    lm["distributed_optimizer"] = True
                path = os.path.join(work, f"zero{len(plans)}.json")
                json.dump(model, open(path, "w"))
                plan = path + ".plan"
                subprocess.run([mimoc, "compile", "-q", path, "-o", plan], check=True)
                explain = json.loads(subprocess.run(
                    [mimoc, "explain", plan, "--format=json"],
                    capture_output=True, text=True, check=True).stdout)
                memory = [r["memory"] for r in explain["ranks"]]
                params = explain["modules"][0]["trainable_params"] / 1e6
                plans[sharded] = (plan, memory)
            times, peaks, steps = {}, {}, {}
            for _ in range(rounds):
                for sharded, (plan, _) in plans.items():
                    metrics = plan + ".jsonl"
                    subprocess.run([run, plan, "--metrics", metrics, "--threads", "1"],
                                   check=True, capture_output=True)
                    got = [json.loads(l) for l in open(metrics)]
                    times.setdefault(sharded, []).append(
                        median([l["seconds"] for l in got[2:]]))
                    peaks[sharded] = max(l["peak_bytes"] for l in got)
                    steps[sharded] = got
            optimizer = {k: max(m["optimizer_bytes"] for m in plans[k][1]) for k in plans}
            weights = {k: max(m["param_bytes"] for m in plans[k][1]) for k in plans}
            plan_peak = {k: max(m["total_bytes"] for m in plans[k][1]) for k in plans}
            ratio = optimizer[True] / optimizer[False]
            same = all(a["loss"] == b["loss"] and
                       abs(a["grad_norm"] - b["grad_norm"]) <= 1e-9 * b["grad_norm"]
                       for a, b in zip(steps[True], steps[False]))
            members = 1
            for n in grid.values():
                members *= n
            ok = ok and same and abs(ratio - 1 / members) < 0.01
            drops.append((grid_label, (peaks[False] - peaks[True]) / mib,
                          (optimizer[False] - optimizer[True]) / mib,
                          (weights[False] - weights[True]) / mib))
            for sharded in (False, True):
                lines.append(
                    f"| {grid_label} | {'sharded' if sharded else 'replicated'} | "
                    f"{optimizer[sharded] / mib:.1f} MiB | "
                    f"{optimizer[sharded] / optimizer[False]:.3f} | "
                    f"{weights[sharded] / mib:.1f} MiB | "
                    f"{peaks[sharded] / mib:.1f} MiB | {plan_peak[sharded] / mib:.1f} MiB | "
                    f"{median(times[sharded]) * 1e3:.0f} ms | "
                    f"{median(times[sharded]) / median(times[False]):.2f} | "
                    f"{'-' if not sharded else ('equal' if same else 'DIFFER')} |")
    lines[2] = lines[2].format(params=params)
    bf16 = [d for d in drops if "bf16" in d[0]]
    lines += ["", "Each rank keeps 1/(dp·cp) of the AdamW moments (the pieces of"
              " each reduced range differ by at most a value), and under bf16 of"
              " the fp32 masters. The measured peak falls by " +
              ", ".join(f"{d:.0f} MiB at {g}" for g, d, _, _ in drops) +
              f"; the moments by {drops[0][2]:.0f} MiB" +
              (f" (and the bf16 masters by {bf16[0][3]:.0f} MiB)" if bf16 else "") +
              ": the rest is the CPU's reduce-scatter, which stages one piece"
              " from each member where the all-reduce staged whole buffers (the"
              " memory plan counts both).", ""]
    return lines, ok


if __name__ == "__main__":
    sys.exit(main())
