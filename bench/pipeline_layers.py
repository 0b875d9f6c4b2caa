#!/usr/bin/env python3
"""Uneven pipeline stages (docs/model-json.md `pipeline_layers`) on a
LLaVA-like model at full scale (bench/models/llava-8b.json: a CLIP ViT-L/14
tower at 336 pixels, output_layer -2, feeding a Llama 3 8B: 128256-token
vocabulary, GQA 8 of 32, language TP4 x PP4 x DP2 with SP): `mimoc
simulate` of every split of the language model's 32 layers over its 4
stages (6 to 10 layers each), with the device profile given, against the
even split; then what `mimoc tune` picks on the same ranks. Last, measured
on this machine's CPU: a small language model whose head is as costly as
a few layers (8 layers, vocabulary 32768), PP2 on the local backend,
trained even and with the split simulate finds best on the CPU profile,
each 8 steps, the median step after two, in turn three rounds.

usage: pipeline_layers.py [BUILD_DIR] [--profile FILE] [--out FILE]
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def simulate(mimoc, model, profile):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(model, f)
    try:
        out = subprocess.run([mimoc, "simulate", f.name, "--profile", profile,
                              "--format=json"], capture_output=True, text=True,
                             check=True).stdout
    finally:
        os.unlink(f.name)
    result = json.loads(out)
    stages = {}
    for role in result["roles"]:
        name = role["role"]
        if name.startswith("language/pp"):
            stage = int(name.split("/")[1][2:])
            stages[stage] = max(stages.get(stage, 0), role["busy_fraction"])
    return result["step_seconds"], [stages[s] for s in sorted(stages)]


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def measure(mimoc, run, work, model, rounds=3):
    """{split: median step seconds}, each split trained in turn."""
    times = {}
    for r in range(rounds):
        for key, m in model.items():
            path = os.path.join(work, f"m{len(key)}-{key}.json")
            json.dump(m, open(path, "w"))
            plan = path + ".plan"
            metrics = path + ".jsonl"
            subprocess.run([mimoc, "compile", "-q", path, "-o", plan], check=True)
            subprocess.run([run, plan, "--steps", "8", "--metrics", metrics],
                           check=True, capture_output=True)
            steps = [json.loads(l)["seconds"] for l in open(metrics)][2:]
            times.setdefault(key, []).append(median(steps))
    return {k: median(v) for k, v in times.items()}


def cpu_section(build):
    mimoc = os.path.join(build, "bin", "mimoc")
    run = os.path.join(build, "bin", "mimo-run")
    small = {"version": 1, "name": "head-heavy", "seed": 1,
             "batch": {"micro_batch_size": 4, "num_microbatches": 8, "seq_length": 128},
             "modules": [{"name": "language", "kind": "language",
                          "arch": {"vocab_size": 32768, "hidden_size": 128,
                                   "num_layers": 8, "num_heads": 4,
                                   "ffn_hidden_size": 512},
                          "parallel": {"pp": 2}}],
             "data": {"source": "synthetic", "text_only_fraction": 1.0},
             "train": {"steps": 8}}
    with tempfile.TemporaryDirectory() as work:
        predicted = {}
        for first in range(1, 8):
            m = json.loads(json.dumps(small))
            m["modules"][0]["pipeline_layers"] = [first, 8 - first]
            predicted[first] = simulate(mimoc, m, "cpu")[0]
        best = min(predicted, key=predicted.get)
        uneven = json.loads(json.dumps(small))
        uneven["modules"][0]["pipeline_layers"] = [best, 8 - best]
        even_predicted = simulate(mimoc, small, "cpu")[0]
        measured = measure(mimoc, run, work, {"even": small, "uneven": uneven})
    return [
        "## Measured on the CPU", "",
        "A language model of 8 layers with a 32768-token vocabulary (hidden 128),"
        " PP2 on the local backend, 8 microbatches of 4 x 128 tokens; the median"
        " step of 8 (after two) in 3 rounds taken in turn. The split is the one"
        " `mimoc simulate --profile cpu` predicts fastest.", "",
        "| split | predicted (cpu profile) | measured | measured / even |",
        "|---|---:|---:|---:|",
        f"| even (4+4) | {even_predicted * 1e3:.0f} ms | {measured['even'] * 1e3:.0f} ms | 1.00 |",
        f"| {best}+{8 - best} | {predicted[best] * 1e3:.0f} ms | "
        f"{measured['uneven'] * 1e3:.0f} ms | {measured['uneven'] / measured['even']:.2f} |",
        ""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--profile", default=os.path.join(HERE, "results", "profile-h100.json"))
    ap.add_argument("--out")
    args = ap.parse_args()
    mimoc = os.path.join(args.build, "bin", "mimoc")
    base = json.load(open(os.path.join(HERE, "models", "llava-8b.json")))
    lm = base["modules"][1]
    layers, pp = lm["arch"]["num_layers"], lm["parallel"]["pp"]

    rows = []
    even_step, even_busy = simulate(mimoc, base, args.profile)
    for split in itertools.product(range(6, 11), repeat=pp):
        if sum(split) != layers:
            continue
        model = json.loads(json.dumps(base))
        model["modules"][1]["pipeline_layers"] = list(split)
        step, busy = simulate(mimoc, model, args.profile)
        rows.append((step, max(busy) - min(busy), list(split), busy))
    rows.sort()
    best = rows[0]
    tight = min(rows, key=lambda r: (r[1], r[0]))

    world = base["modules"][0]["parallel"]["dp"] + 4 * 4 * 2
    tune = subprocess.run([mimoc, "tune", os.path.join(HERE, "models", "llava-8b.json"),
                           "--world", str(world), "--profile", args.profile,
                           "--top", "5"], capture_output=True, text=True)

    def pct(b):
        return " / ".join(f"{100 * x:.1f}%" for x in b)

    lines = [
        "# Uneven pipeline stages: simulate and tune",
        "",
        f"`python3 bench/pipeline_layers.py` with `--profile {os.path.relpath(args.profile, os.path.join(HERE, '..'))}`"
        f" on `bench/models/llava-8b.json` ({world} ranks: the tower DP{base['modules'][0]['parallel']['dp']},"
        f" the language model TP4 x PP4 x DP2 with SP, {base['batch']['num_microbatches']} microbatches).",
        f"Every split of the {layers} layers over {pp} stages with 6 to 10 each ({len(rows)} splits) was simulated.",
        "",
        "| split | predicted step | vs even | busy by stage (pp0 .. pp3) | spread |",
        "|---|---:|---:|---|---:|",
        f"| even (8+8+8+8) | {even_step * 1e3:.0f} ms | 1.000 | {pct(even_busy)} | {100 * (max(even_busy) - min(even_busy)):.1f} points |",
    ]
    for label, r in (("fastest", best), ("most even", tight)):
        lines.append(f"| {label}: {'+'.join(map(str, r[2]))} | {r[0] * 1e3:.0f} ms | "
                     f"{r[0] / even_step:.3f} | {pct(r[3])} | {100 * r[1]:.1f} points |")
    lines += ["", "The head (128256 x 4096, its loss and their backward) sits on the last",
              "stage: with as many layers as the others it is the busiest; giving it",
              "fewer evens the stages out.", "",
              f"`mimoc tune bench/models/llava-8b.json --world {world} --profile ...` (top 5):", "",
              "```", tune.stdout.strip(), "```", ""]
    lines += cpu_section(args.build)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
