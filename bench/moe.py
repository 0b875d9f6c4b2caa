#!/usr/bin/env python3
"""The mixture-of-experts example on the CPU (docs/model.md "Mixture of
experts"): examples/moe-vlm.json (a Qwen3-MoE-like language model, 8
experts of width 128, top 2, at TP2 x PP2 x DP2 with expert parallelism 2
behind a tower at DP2; 10 ranks as threads), the same at ep 1, and the
model made dense with the same active width (ffn_hidden_size = top_k x
expert width, so a token meets as many MLP weights), each trained for 6
steps. For each: the median step
(after two) over the rounds, taken in turn, `mimoc simulate --profile
cpu`'s prediction, the parameters and the peak bytes.

usage: moe.py [BUILD_DIR] [--out FILE] [--rounds N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "moe-vlm.json")


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def variants():
    moe = json.load(open(EXAMPLE))
    moe["train"]["steps"] = 6
    replicated = json.loads(json.dumps(moe))
    replicated["modules"][1]["parallel"].pop("ep")
    dense = json.loads(json.dumps(replicated))
    arch = dense["modules"][1]["arch"]
    e = arch.pop("moe")
    arch["ffn_hidden_size"] = e["top_k"] * e["expert_ffn_hidden_size"]
    return [("moe-vlm.json (8 experts, top 2, ep 2)", moe),
            ("the same at ep 1 (every expert on every rank)", replicated),
            ("dense, same active width", dense)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    mimoc = os.path.join(args.build, "bin", "mimoc")
    run = os.path.join(args.build, "bin", "mimo-run")
    mib = 1 << 20
    with tempfile.TemporaryDirectory() as work:
        plans = {}
        for i, (label, model) in enumerate(variants()):
            path = os.path.join(work, f"{i}.json")
            json.dump(model, open(path, "w"))
            plan = path + ".plan"
            subprocess.run([mimoc, "compile", "-q", path, "-o", plan], check=True)
            explain = json.loads(subprocess.run(
                [mimoc, "explain", plan, "--format=json"], capture_output=True,
                text=True, check=True).stdout)
            simulate = json.loads(subprocess.run(
                [mimoc, "simulate", plan, "--profile", "cpu", "--format=json"],
                capture_output=True, text=True, check=True).stdout)
            lm = explain["modules"][1]
            params = lm["trainable_params"] + lm["frozen_params"]
            active = (lm["moe"] or {}).get("active_params", params)
            plans[label] = (plan, simulate["step_seconds"], params, active)
        times, peaks, aux = {}, {}, {}
        for _ in range(args.rounds):
            for label, (plan, *_rest) in plans.items():
                metrics = plan + ".jsonl"
                subprocess.run([run, plan, "--metrics", metrics, "--device", "cpu"],
                               check=True, capture_output=True)
                got = [json.loads(l) for l in open(metrics)]
                times.setdefault(label, []).append(
                    median([l["seconds"] for l in got[2:]]))
                peaks[label] = max(l["peak_bytes"] for l in got)
                aux[label] = [l.get("aux_loss") for l in got]
    lines = [
        "# Mixture of experts on the CPU", "",
        "`python3 bench/moe.py`: `examples/moe-vlm.json` (language model:"
        " hidden 128, 4 layers, every one sparse: 8 SwiGLU experts of width"
        " 128, top 2, Qwen3's q/k norms; TP2 x PP2 x DP2 with SP on ranks"
        " 2-9 and ep 2, a tower at DP2 on ranks 0-1; 4 microbatches of 8 x"
        " 128 tokens), 10 ranks as threads of one process on this machine's"
        " cores, beside the same at ep 1 and the model made dense with FFN"
        " width 256 (top_k x expert width: a token meets as many MLP"
        " weights). Step:"
        f" the median after two of 6 steps, over {args.rounds} rounds taken"
        " in turn; predicted: `mimoc simulate --profile cpu` (the committed"
        " CPU profile, which assumes one core per rank).", "",
        "| model | language parameters | active per token | step (measured) |"
        " step (simulate) | measured / dense | peak rank bytes |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    labels = list(plans)
    dense = median(times[labels[-1]])
    for label in labels:
        _, predicted, params, active = plans[label]
        step = median(times[label])
        lines.append(
            f"| {label} | {params / 1e6:.2f} M | {active / 1e6:.2f} M | "
            f"{step * 1e3:.0f} ms | {predicted * 1e3:.0f} ms | {step / dense:.2f} | "
            f"{peaks[label] / mib:.1f} MiB |")
    first = [a for a in aux[labels[0]] if a is not None]
    lines += ["", f"The sparse model's `aux_loss` over the 6 steps: "
              + ", ".join(f"{a:.5f}" for a in first) + ".", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        open(args.out, "w").write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
