#!/usr/bin/env bash
# End-to-end checks of the cost model's tools (docs/tune.md):
#   mimo-run --calibrate -> mimoc simulate --profile -> mimoc tune -o BEST ->
#   mimoc compile BEST -> mimo-run trains it; bad input exits 1 naming it.
# Timings are not asserted here (bench/simulate_vs_measured.sh does that).
# usage: mimoc_tune_cli.sh BIN_DIR EXAMPLES_DIR
set -uo pipefail
bin=$(cd "$1" && pwd) examples=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# 1. Calibrate this machine's CPU.
"$bin/mimo-run" --calibrate -o "$work/cpu.json" --device cpu 2>"$work/cal.err" &&
  python3 - "$work/cpu.json" <<'PY' && pass "mimo-run --calibrate writes a measured profile" || { cat "$work/cal.err"; fail "calibrate"; }
import json, sys
p = json.load(open(sys.argv[1]))
assert p["format"] == "mimo-profile" and p["measured"] is True, p
assert len(p["gemm_tflops"]) >= 5 and all(r > 0 for _, r in p["gemm_tflops"])
assert p["memory_gbs"] > 0 and p["link"]["bandwidth_gbs"] > 0
assert p["compute_scale"] > 0 and p["layer_overhead_us"] >= 0
assert p["collective_gbs"] > 0  # the CPU's all-reduce rate
PY

# 2. Simulate an example with it: report, JSON and trace.
"$bin/mimoc" compile -q "$examples/vlm-fan-in.json" -o "$work/vlm.plan.json" || fail "compile"
"$bin/mimoc" simulate "$work/vlm.plan.json" --profile "$work/cpu.json" \
  --trace "$work/sim.trace.json" >"$work/sim.out" 2>&1 &&
  grep -q "predicted step:" "$work/sim.out" && grep -q "(measured)" "$work/sim.out" &&
  grep -q "critical path" "$work/sim.out" &&
  python3 -c "import json,sys; t=json.load(open(sys.argv[1])); \
assert any(e.get('cat')=='critical' for e in t['traceEvents'])" "$work/sim.trace.json" &&
  pass "mimoc simulate --profile --trace" || { cat "$work/sim.out"; fail "simulate"; }

# 3. Tune for 4 ranks; the best layout compiles and trains to the losses of
#    --reference (docs/runtime.md), on this machine's profile and on the H100
#    estimate (which picks another layout).
here=$(cd "$(dirname "$0")" && pwd)
for profile in "$work/cpu.json" h100; do
  "$bin/mimoc" tune "$examples/vlm-fan-in.json" --world 4 --profile "$profile" \
    -o "$work/best.json" >"$work/tune.out" 2>&1 && grep -q "^  1 " "$work/tune.out" &&
    "$bin/mimoc" compile -q "$work/best.json" -o "$work/best.plan.json" &&
    "$bin/mimo-run" "$work/best.plan.json" --device cpu --steps 2 \
      --metrics "$work/best.jsonl" >"$work/best.out" 2>&1 &&
    "$bin/mimo-run" "$work/best.plan.json" --device cpu --steps 2 --reference \
      --metrics "$work/ref.jsonl" >>"$work/best.out" 2>&1 &&
    python3 "$here/compare_metrics.py" "$work/best.jsonl" "$work/ref.jsonl" 2 &&
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['world_size'])" \
      "$work/best.plan.json" | grep -qx 4 &&
    pass "mimoc tune --profile $(basename "$profile") -o BEST: 4 ranks, trains to --reference's losses" ||
    { cat "$work/tune.out" "$work/best.out"; fail "tune ($profile)"; }
done

# 4. A model whose data file is relative to it: the best layout, written
#    elsewhere, still finds the data (tune writes the path absolute).
mkdir -p "$work/models" "$work/out"
python3 "$here/jsonl_model.py" "$examples/vlm-fan-in.json" "$work/models" 5
(cd "$work" && "$bin/mimoc" tune models/jsonl.json --world 2 --profile h100 -o out/best.json \
  >/dev/null 2>"$work/jt.err") &&
  "$bin/mimoc" compile -q "$work/out/best.json" -o "$work/out/best.plan.json" 2>>"$work/jt.err" &&
  "$bin/mimo-run" "$work/out/best.plan.json" --device cpu --steps 1 >/dev/null 2>>"$work/jt.err" &&
  pass "tune -o elsewhere keeps the model's data file" || { cat "$work/jt.err"; fail "tune data path"; }

# 5. Bad input: exit 1 with the file and what to do.
"$bin/mimoc" simulate "$work/vlm.plan.json" --profile nosuch >/dev/null 2>"$work/e1"
[ $? -eq 1 ] && grep -q "nosuch: error: no such profile" "$work/e1" &&
  pass "an unknown profile: exit 1" || { cat "$work/e1"; fail "unknown profile"; }
python3 - "$work/cpu.json" "$work/bad.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["gemm_tflops"][1][0] = 1
p["memory_gbs"] = "fast"
json.dump(p, open(sys.argv[2], "w"))
PY
"$bin/mimoc" simulate "$work/vlm.plan.json" --profile "$work/bad.json" >/dev/null 2>"$work/e2"
[ $? -eq 1 ] && grep -q "bad.json: /gemm_tflops/1: error: sizes must ascend" "$work/e2" &&
  grep -q "bad.json: /memory_gbs: error" "$work/e2" &&
  pass "a bad profile: exit 1 naming each pointer" || { cat "$work/e2"; fail "bad profile"; }
echo '{"format": "mimo-cluster", "version": 1, "devices_per_node": 0, "links": {}}' >"$work/c.json"
"$bin/mimoc" tune "$examples/vlm-fan-in.json" --world 4 --cluster "$work/c.json" >/dev/null 2>"$work/e3"
[ $? -eq 1 ] && grep -q "c.json: /devices_per_node: error" "$work/e3" &&
  grep -q "c.json: /links/same_device: error: missing required key" "$work/e3" &&
  pass "a bad cluster: exit 1 naming each pointer" || { cat "$work/e3"; fail "bad cluster"; }
"$bin/mimoc" tune "$examples/vlm-fan-in.json" --world 4 --memory 0.000001 >/dev/null 2>"$work/e6"
[ $? -eq 1 ] && grep -q "none fits in" "$work/e6" && grep -q "(--memory GiB)" "$work/e6" &&
  pass "--memory below every layout: exit 1 saying so" || { cat "$work/e6"; fail "--memory"; }
"$bin/mimoc" tune "$examples/vlm-fan-in.json" --world 1024 >/dev/null 2>"$work/e4"
[ $? -eq 1 ] && grep -q "vlm-fan-in.json: error: no layout of 1024 ranks" "$work/e4" &&
  pass "an impossible world: exit 1 saying why" || { cat "$work/e4"; fail "impossible world"; }
"$bin/mimo-run" --calibrate >/dev/null 2>"$work/e5"
[ $? -eq 1 ] && grep -q "needs -o FILE" "$work/e5" &&
  pass "--calibrate without -o: exit 1" || { cat "$work/e5"; fail "calibrate without -o"; }

# Round 3: tune aborted (SIGABRT) on a model that names the interleaved
# schedule; it keeps the schedule, and its best layout compiles.
python3 - "$examples/vlm-fan-in.json" "$work/il.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["batch"]["schedule"] = "interleaved"
for mod in m["modules"]:
    if mod["kind"] == "language":
        mod["parallel"]["virtual_stages"] = 2
json.dump(m, open(sys.argv[2], "w"))
PY
"$bin/mimoc" tune "$work/il.json" --world 8 --top 3 -o "$work/il-best.json" >"$work/il.out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "interleaved (2 virtual stages)" "$work/il.out" &&
  "$bin/mimoc" compile -q "$work/il-best.json" -o "$work/il-best.plan.json" &&
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); assert m['batch']['schedule']=='interleaved'" "$work/il-best.json" &&
  pass "mimoc tune of an interleaved model: exit 0, the schedule kept, the best compiles" ||
  { cat "$work/il.out"; fail "tune interleaved (rc $rc)"; }

echo "$failures failure(s)"
[ $failures -eq 0 ]
