#!/usr/bin/env bash
# docs/runtime.md: tokens/s of a distributed run against its --reference run on the
# same machine, in the same invocation. The reference is pinned to one core.
# usage: bench/train_throughput.sh [--build DIR] [EXAMPLE ...]
#        (default: build/, every example)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin
if [ "${1:-}" = "--build" ]; then bin=$2/bin; shift 2; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
examples=("$@")
[ ${#examples[@]} -gt 0 ] || examples=(vlm-fan-in vlm-fan-out vlm-colocated vlm-colocated-pp2 avlm lm-cp2-sp packed-thd)
steps=${STEPS:-3}
rate() { # metrics file -> mean tokens/s over steps 2.. (step 1 warms up)
  python3 -c "import json,sys
r=[json.loads(l) for l in open(sys.argv[1])][1:] or [json.loads(l) for l in open(sys.argv[1])]
print(sum(x['tokens'] for x in r)/sum(x['seconds'] for x in r))" "$1"
}
printf '%-14s %6s %16s %18s %8s\n' model ranks 'tokens/s (dist)' 'tokens/s (ref,1c)' ratio
for name in "${examples[@]}"; do
  "$bin/mimoc" compile "examples/$name.json" -o "$work/$name.plan.json"
  world=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['world_size'])" "$work/$name.plan.json")
  "$bin/mimo-run" "$work/$name.plan.json" --steps "$steps" --metrics "$work/d.jsonl" >/dev/null
  taskset -c 0 "$bin/mimo-run" "$work/$name.plan.json" --steps "$steps" --reference --threads 1 \
    --metrics "$work/r.jsonl" >/dev/null
  d=$(rate "$work/d.jsonl"); r=$(rate "$work/r.jsonl")
  printf '%-14s %6s %16.0f %18.0f %8.2f\n' "$name" "$world" "$d" "$r" \
    "$(python3 -c "print($d/$r)")"
done
