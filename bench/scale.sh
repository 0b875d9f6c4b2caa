#!/usr/bin/env bash
# The tools at scale (issue: 2^20 ranks within 60 s and 2 GB each): a
# three-module model (language TP8·CP2·PP4 with SP and DP d, an images
# encoder TP8·DP4d and an audio encoder TP4·DP8d, both fanning in; world
# 128·d) compiled by mimoc, explained, simulated, and loaded by mimo-run
# (which refuses it on the memory check right after the plan's checks:
# the load is all it does). One row per world size and tool: wall seconds
# and peak resident memory (GNU time), one run each.
#   bench/scale.sh [BUILD_DIR] [MAX_LOG2] (default build, 20)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
max=${2:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model() { # D OUT
  python3 - "$1" "$2" <<'PY'
import json, sys
d = int(sys.argv[1])
def enc(name, i, tp, dp, off):
    return {"name": name, "kind": "encoder", "special_token_id": i,
            "arch": {"feature_dim": 64, "hidden_size": 256, "num_layers": 2,
                     "num_heads": 8, "ffn_hidden_size": 1024},
            "parallel": {"tp": tp, "dp": dp, "rank_offset": off}}
m = {"version": 1, "name": "scale",
     "batch": {"micro_batch_size": 8 * d, "num_microbatches": 8, "seq_length": 256},
     "modules": [enc("images", 1000, 8, 4 * d, 0), enc("audio", 1001, 4, 8 * d, 32 * d),
                 {"name": "language", "kind": "language",
                  "arch": {"vocab_size": 4096, "hidden_size": 512, "num_layers": 8,
                           "num_heads": 8, "ffn_hidden_size": 2048},
                  "parallel": {"tp": 8, "cp": 2, "pp": 4, "dp": d,
                               "sequence_parallel": True, "rank_offset": 64 * d}}]}
json.dump(m, open(sys.argv[2], "w"))
PY
}
measure() { # LABEL COMMAND...: "seconds peak_MiB"
  local out=$work/time.txt
  /usr/bin/time -f "%e %M" -o "$out" "$@" >/dev/null 2>&1 || true
  tail -1 "$out" | awk '{printf "%9.1f %9.0f", $1, $2 / 1024}'
}
printf "%8s %-10s %9s %9s\n" ranks tool seconds peak_MiB
for log2 in $(seq 14 "$max"); do
  d=$(( (1 << log2) / 128 ))
  model "$d" "$work/m.json"
  printf "%8s %-10s %s\n" $((1 << log2)) compile "$(measure "$build/bin/mimoc" compile -q "$work/m.json" -o "$work/p.json")"
  printf "%8s %-10s %s\n" $((1 << log2)) explain "$(measure "$build/bin/mimoc" explain "$work/p.json")"
  printf "%8s %-10s %s\n" $((1 << log2)) simulate "$(measure "$build/bin/mimoc" simulate "$work/p.json")"
  printf "%8s %-10s %s\n" $((1 << log2)) load "$(measure "$build/bin/mimo-run" "$work/p.json")"
done
