#!/usr/bin/env bash
# Activation recomputation on a GPU (docs/model.md Recomputation): the ~1.3B
# model of bench/train_1b.py (bf16, 22 layers, 4 microbatches of 2 x 2048
# tokens, one rank) trained 4 steps with recompute none, selective and full
# (plans from scripts/gpu-bundle.sh, .gpu-bundle/1b/); prints each run's
# peak device bytes, median step (steps 2-4) and whether its losses equal
# the run without recomputation bit for bit.
# usage: bench/recompute_gpu.sh BUILD_DIR [DEVICE]   (default cuda)
set -uo pipefail
build=${1:?usage: bench/recompute_gpu.sh BUILD_DIR [DEVICE]}
device=${2:-cuda}
dir=.gpu-bundle/1b
work=$(mktemp -d)
echo "| recompute | peak device memory | vs none | median step (2-4) | vs none | losses |"
echo "|---|---:|---:|---:|---:|---|"
for mode in none selective full; do
  plan=$dir/lm-1b-$mode.plan.json
  [ "$mode" = none ] && plan=$dir/lm-1b.plan.json
  "$build/bin/mimo-run" "$plan" --steps 4 --device "$device" \
    --metrics "$work/$mode.jsonl" >"$work/$mode.out" 2>&1 ||
    { echo "| $mode | failed: $(tail -1 "$work/$mode.out") | | | | |"; continue; }
  python3 - "$work" "$mode" <<'PY'
import json, sys
work, mode = sys.argv[1], sys.argv[2]
def load(m):
    return [json.loads(l) for l in open(f"{work}/{m}.jsonl") if l.strip()]
run, none = load(mode), load("none")
peak = max(l["peak_bytes"] for l in run)
step = sorted(l["seconds"] for l in run[1:])[len(run[1:]) // 2]
peak0 = max(l["peak_bytes"] for l in none)
step0 = sorted(l["seconds"] for l in none[1:])[len(none[1:]) // 2]
same = [l["loss"] for l in run] == [l["loss"] for l in none]
print(f"| {mode} | {peak / 2**30:.2f} GiB | {peak / peak0:.2f} | {step * 1e3:.0f} ms | "
      f"{step / step0:.2f} | {'bit for bit' if same else 'DIFFER'} |")
PY
done
rm -rf "$work"
