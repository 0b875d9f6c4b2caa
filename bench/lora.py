#!/usr/bin/env python3
"""LoRA against full fine-tuning (docs/model.md "LoRA"), measured on the
CPU: an 8-layer language model on one rank trained whole, and with LoRA
r=16 (alpha 32) on every linear of its layers, each for 6 steps. For each:
the trainable parameters and the plan's weight, gradient and AdamW bytes
(`mimoc explain`), the peak bytes mimo-run reports (`peak_bytes`) beside
the plan's total, and the median step time (after two), the variants in
turn over the rounds.

usage: lora.py [BUILD_DIR] [--out FILE] [--rounds N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = {
    "version": 1, "name": "lm-lora", "seed": 3,
    "batch": {"micro_batch_size": 4, "num_microbatches": 2, "seq_length": 256},
    "modules": [{"name": "language", "kind": "language",
                 "arch": {"vocab_size": 8192, "hidden_size": 256,
                          "num_layers": 8, "num_heads": 8,
                          "ffn_hidden_size": 1024},
                 "parallel": {}}],
    "data": {"source": "synthetic", "text_only_fraction": 1.0},
    "train": {"steps": 6},
}
VARIANTS = [("full fine-tuning", None),
            ("LoRA r=16, all-linear", {"r": 16, "alpha": 32,
                                       "targets": "all-linear"})]


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    mimoc = os.path.join(args.build, "bin", "mimoc")
    run = os.path.join(args.build, "bin", "mimo-run")
    mib = 1 << 20
    with tempfile.TemporaryDirectory() as work:
        plans = {}
        for label, lora in VARIANTS:
            model = json.loads(json.dumps(MODEL))
            if lora:
                model["modules"][0]["lora"] = lora
            path = os.path.join(work, f"{len(plans)}.json")
            json.dump(model, open(path, "w"))
            plan = path + ".plan"
            subprocess.run([mimoc, "compile", "-q", path, "-o", plan], check=True)
            explain = json.loads(subprocess.run(
                [mimoc, "explain", plan, "--format=json"],
                capture_output=True, text=True, check=True).stdout)
            plans[label] = (plan, explain["ranks"][0]["memory"],
                            explain["modules"][0]["trainable_params"])
        times, peaks, losses = {}, {}, {}
        for _ in range(args.rounds):
            for label, (plan, _, _) in plans.items():
                metrics = plan + ".jsonl"
                subprocess.run([run, plan, "--metrics", metrics, "--threads", "2",
                                "--device", "cpu"], check=True, capture_output=True)
                got = [json.loads(l) for l in open(metrics)]
                times.setdefault(label, []).append(median([l["seconds"] for l in got[2:]]))
                peaks[label] = max(l["peak_bytes"] for l in got)
                losses[label] = [l["loss"] for l in got]
    lines = [
        "# LoRA against full fine-tuning (CPU)", "",
        "`python3 bench/lora.py`: an 8-layer language model (hidden 256, 8 heads,"
        " FFN 1024, vocabulary 8192) on one rank, 2 microbatches of 4 x 256 tokens,"
        " two threads; trained whole, and with LoRA r=16 (alpha 32) on every"
        " linear of its layers (the embedding, norms and head frozen). Plan:"
        " `mimoc explain`'s memory; peak: mimo-run's `peak_bytes`; step: the"
        f" median (after two of 6 steps) over {args.rounds} rounds taken in turn.", "",
        "| variant | trainable parameters | weights (plan) | gradients (plan) |"
        " AdamW (plan) | peak (plan) | peak (measured) | step | step / full |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = VARIANTS[0][0]
    for label, _ in VARIANTS:
        _, memory, trainable = plans[label]
        lines.append(
            f"| {label} | {trainable / 1e6:.2f} M | {memory['param_bytes'] / mib:.1f} MiB | "
            f"{memory['grad_bytes'] / mib:.1f} MiB | {memory['optimizer_bytes'] / mib:.1f} MiB | "
            f"{memory['total_bytes'] / mib:.1f} MiB | {peaks[label] / mib:.1f} MiB | "
            f"{median(times[label]) * 1e3:.0f} ms | "
            f"{median(times[label]) / median(times[base]):.2f} |")
    lora = VARIANTS[1][0]
    saved = peaks[base] - peaks[lora]
    lines += ["", f"LoRA keeps {saved / mib:.1f} MiB less at its peak "
              f"({peaks[lora] / peaks[base]:.2f}x of full fine-tuning's): the"
              " gradients and moments of the base are gone (the base's weights"
              " stay, and so do the activations, which the adapters' inputs"
              " need). The step keeps the base's input-gradient GEMMs and"
              " drops its weight-gradient ones.", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        open(args.out, "w").write(text)
    return 0 if peaks[lora] < peaks[base] and losses[lora][-1] < losses[lora][0] else 1


if __name__ == "__main__":
    sys.exit(main())
