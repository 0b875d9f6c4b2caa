#!/usr/bin/env bash
# Training recipes on the CPU (docs/model-json.md `freeze`): LLaVA stage 1
# (the vision tower's body and the language model frozen, the projector
# trained), stage 2 (the language model trained too) and a tower frozen
# whole (forward only: the language model trained alone) against full
# training of the same model. Per recipe: the median step time of steps
# 2..N and the peak device bytes (mimo-run's metrics), the memory plan's
# largest rank (mimoc explain --json) and simulate's predicted step, and
# each as a ratio to full training.
#   bench/recipes.sh [BUILD_DIR] [STEPS] (default build, 6)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-6}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
base = {"version": 1, "name": "recipe", "seed": 7,
        "batch": {"micro_batch_size": 4, "num_microbatches": 4, "seq_length": 256},
        "modules": [
            {"name": "images", "kind": "encoder", "special_token_id": 8000,
             "arch": {"feature_dim": 192, "hidden_size": 256, "num_layers": 4,
                      "num_heads": 4, "ffn_hidden_size": 1024},
             "parallel": {"dp": 2}},
            {"name": "language", "kind": "language",
             "arch": {"vocab_size": 8192, "hidden_size": 512, "num_layers": 4,
                      "num_heads": 8, "ffn_hidden_size": 1536},
             "parallel": {"tp": 2}}],
        "data": {"tokens_per_sample": {"images": [64, 64]}},
        "train": {"lr": 1e-3, "weight_decay": 0.1}}
recipes = {"full": ({}, {}),
           "stage1": ({"freeze": "encoder_body"}, {"freeze": True}),
           "stage2": ({"freeze": "encoder_body", "lr_mult": 0.1}, {}),
           "frozen-tower": ({"freeze": True}, {})}
for name, (enc, lm) in recipes.items():
    m = json.loads(json.dumps(base))
    m["modules"][0].update(enc)
    m["modules"][1].update(lm)
    json.dump(m, open(f"{work}/{name}.json", "w"))
PY
printf "| recipe | step s (measured) | ratio | step s (simulate) | ratio | peak MiB (measured) | ratio | peak MiB (plan) | ratio |\n"
printf "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
for recipe in full stage1 stage2 frozen-tower; do
  "$build/bin/mimoc" compile -q "$work/$recipe.json" -o "$work/$recipe.plan.json"
  "$build/bin/mimo-run" "$work/$recipe.plan.json" --steps "$steps" \
    --metrics "$work/$recipe.metrics.jsonl" >/dev/null
  "$build/bin/mimoc" explain "$work/$recipe.plan.json" --json >"$work/$recipe.explain.json"
  "$build/bin/mimoc" simulate "$work/$recipe.plan.json" --format json >"$work/$recipe.sim.json"
done
python3 - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
rows = {}
for recipe in ("full", "stage1", "stage2", "frozen-tower"):
    steps = [json.loads(l) for l in open(f"{work}/{recipe}.metrics.jsonl")]
    seconds = statistics.median(s["seconds"] for s in steps[1:])
    peak = max(s["peak_bytes"] for s in steps) / 2**20
    plan = max(r["memory"]["total_bytes"] for r in json.load(open(f"{work}/{recipe}.explain.json"))["ranks"]) / 2**20
    predicted = json.load(open(f"{work}/{recipe}.sim.json"))["step_seconds"]
    rows[recipe] = (seconds, predicted, peak, plan)
full = rows["full"]
for recipe, r in rows.items():
    print(f"| {recipe} | {r[0]:.3f} | {r[0]/full[0]:.2f} | {r[1]:.3f} | {r[1]/full[1]:.2f} "
          f"| {r[2]:.1f} | {r[2]/full[2]:.2f} | {r[3]:.1f} | {r[3]/full[3]:.2f} |")
PY
