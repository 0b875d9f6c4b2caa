#!/usr/bin/env python3
"""Activation recomputation (docs/model.md Recomputation) measured on the
CPU: a 16-layer language model on one rank, trained with recompute none,
selective, full with recompute_layers 8, and full, each for 6 steps. For
each: the peak bytes mimo-run reports (`peak_bytes` in its metrics) less
the parameters, gradients and AdamW state (`mimoc explain`'s memory), i.e.
the activations, beside the memory plan's activation bytes; and the median
step time (after two), in turn over 3 rounds. The losses must be equal bit
for bit.

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
    text = "\n".join(lines)
    print(text)
    if args.out:
        open(args.out, "w").write(text)
    return 0 if base_act / full >= 3 and all(r[3] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
