#!/usr/bin/env bash
# End-to-end CLI checks of mimo-run (README.md, docs/runtime.md, docs/limits.md):
#   mimoc compile -> mimo-run (local) and mpirun -np N mimo-run (mpi) match
#   mimo-run --reference; injected faults and a killed rank end every rank
#   with a message naming it; bad input exits 1.
# usage: mimo_run_cli.sh BIN_DIR EXAMPLES_DIR [trainings|checks]
#   trainings: sections 1-1g (the examples and schedules under mpirun
#   against --reference); checks: sections 2 on (faults, bad input, flags,
#   data formats, the memory plan); both when not given. CTest runs the two
#   halves as two tests, side by side.
set -uo pipefail
part=${3:-all}
source "$(dirname "$0")/cli_common.sh"

compile() { "$bin/mimoc" compile -q "$examples/$1.json" -o "$work/$1.plan.json" || fail "compile $1"; }

# mpi_matches NAME NP PATTERN WHAT: $work/NAME.json compiles to a plan that
# holds PATTERN, and 3 steps of it under mpirun -np NP match --reference.
mpi_matches() {
  local name=$1 np=$2 pattern=$3 what=$4
  "$bin/mimoc" compile -q "$work/$name.json" -o "$work/$name.plan.json" &&
    grep -q "$pattern" "$work/$name.plan.json" &&
    "$bin/mimo-run" "$work/$name.plan.json" --steps 3 --reference \
      --metrics "$work/$name.ref.jsonl" >/dev/null &&
    mpirun -np "$np" "$bin/mimo-run" "$work/$name.plan.json" --steps 3 \
      --metrics "$work/$name.mpi.jsonl" >"$work/$name.mpi.out" 2>&1 &&
    python3 "$here/compare_metrics.py" "$work/$name.mpi.jsonl" "$work/$name.ref.jsonl" &&
    pass "$what: mpirun -np $np matches --reference" ||
    { cat "$work/$name.mpi.out" 2>/dev/null; fail "$what under mpirun"; }
}

if [ "$part" != checks ]; then
# 1. Local and MPI runs match the reference.
for name in vlm-fan-in lm-cp2-sp; do
  compile $name
  plan=$work/$name.plan.json
  "$bin/mimo-run" "$plan" --steps 3 --reference --metrics "$work/$name.ref.jsonl" >/dev/null ||
    fail "$name --reference"
  "$bin/mimo-run" "$plan" --steps 3 --metrics "$work/$name.local.jsonl" \
    --trace "$work/$name.trace.json" >"$work/$name.local.out" || fail "$name local run"
  python3 "$here/compare_metrics.py" "$work/$name.local.jsonl" "$work/$name.ref.jsonl" &&
    pass "$name local matches --reference" || fail "$name local vs reference"
  grep -q '^step 3/3  loss' "$work/$name.local.out" || fail "$name: no per-step line"
  python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['traceEvents']; \
assert any(e.get('name','').startswith('forward') for e in t); \
assert len({e['pid'] for e in t}) >= 6" "$work/$name.trace.json" &&
    pass "$name trace has every rank's instructions" || fail "$name trace"
  world=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['world_size'])" "$plan")
  mpirun -np "$world" "$bin/mimo-run" "$plan" --steps 3 --metrics "$work/$name.mpi.jsonl" \
    >"$work/$name.mpi.out" 2>&1 || { cat "$work/$name.mpi.out"; fail "$name mpirun"; }
  python3 "$here/compare_metrics.py" "$work/$name.mpi.jsonl" "$work/$name.ref.jsonl" &&
    pass "$name mpirun -np $world matches --reference" || fail "$name mpi vs reference"
done
plan=$work/vlm-fan-in.plan.json

# 1b. Every other example under mpirun matches its reference too (the
# LLaVA stages with their frozen parts, LoRA's and the mixture of experts'
# among them: its routing statistics summed over DP between processes).
for name in vlm-fan-out vlm-colocated vlm-colocated-pp2 avlm packed-thd llava-stage1 llava-stage2 llava-lora moe-vlm; do
  compile $name
  p=$work/$name.plan.json
  world=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['world_size'])" "$p")
  "$bin/mimo-run" "$p" --steps 3 --reference --metrics "$work/$name.ref.jsonl" >/dev/null &&
    mpirun -np "$world" "$bin/mimo-run" "$p" --steps 3 --metrics "$work/$name.mpi.jsonl" \
      >"$work/$name.mpi.out" 2>&1 &&
    python3 "$here/compare_metrics.py" "$work/$name.mpi.jsonl" "$work/$name.ref.jsonl" &&
    pass "$name mpirun -np $world matches --reference" ||
    { cat "$work/$name.mpi.out"; fail "$name under mpirun"; }
done

# 1c. Uneven pipeline stages (pipeline_layers), recomputation and the
# distributed optimizer under mpirun: the language model's three stages
# hold 2, 1 and 1 of its layers, each stage's first recomputes whole; the
# encoder recomputes its activations and shards its optimizer over DP4.
python3 - "$examples/vlm-fan-in.json" "$work/uneven.json" <<'PY'
import json, sys
model = json.load(open(sys.argv[1]))
model["modules"][1]["parallel"] = {"tp": 2, "pp": 3, "sequence_parallel": True,
                                   "rank_offset": 4}
model["modules"][1]["pipeline_layers"] = [2, 1, 1]
model["modules"][1]["recompute"] = "full"
model["modules"][1]["recompute_layers"] = 1
model["modules"][0]["recompute"] = "selective"
model["modules"][0]["distributed_optimizer"] = True
json.dump(model, open(sys.argv[2], "w"))
PY
"$bin/mimoc" compile -q "$work/uneven.json" -o "$work/uneven.plan.json" &&
  "$bin/mimo-run" "$work/uneven.plan.json" --steps 3 --reference \
    --metrics "$work/uneven.ref.jsonl" >/dev/null &&
  mpirun -np 10 "$bin/mimo-run" "$work/uneven.plan.json" --steps 3 \
    --metrics "$work/uneven.mpi.jsonl" >"$work/uneven.mpi.out" 2>&1 &&
  python3 "$here/compare_metrics.py" "$work/uneven.mpi.jsonl" "$work/uneven.ref.jsonl" &&
  pass "pipeline_layers [2, 1, 1], recomputation, distributed optimizer: mpirun -np 10 matches --reference" ||
  { cat "$work/uneven.mpi.out" 2>/dev/null; fail "pipeline_layers and recompute under mpirun"; }

# 1d. The distributed optimizer under mpirun (docs/model.md): AdamW's
# moments sharded over CP2 x DP2 (THD packing) and the encoder's DP2; the
# checkpoint it saves after step 2 resumes on one rank, replicated.
python3 - "$examples/packed-thd.json" "$work/zero.json" <<'PY'
import json, sys
model = json.load(open(sys.argv[1]))
for module in model["modules"]:
    module["distributed_optimizer"] = True
json.dump(model, open(sys.argv[2], "w"))
PY
"$bin/mimoc" compile -q "$work/zero.json" -o "$work/zero.plan.json" &&
  "$bin/mimo-run" "$work/zero.plan.json" --steps 3 --reference \
    --metrics "$work/zero.ref.jsonl" >/dev/null &&
  mpirun -np 6 "$bin/mimo-run" "$work/zero.plan.json" --steps 3 --save "$work/zero.ck" \
    --save-every 2 --metrics "$work/zero.mpi.jsonl" >"$work/zero.mpi.out" 2>&1 &&
  python3 "$here/compare_metrics.py" "$work/zero.mpi.jsonl" "$work/zero.ref.jsonl" &&
  "$bin/mimo-run" "$work/zero.plan.json" --steps 3 --reference --load "$work/zero.ck/step-2" \
    --metrics "$work/zero.resumed.jsonl" >/dev/null &&
  tail -n 1 "$work/zero.ref.jsonl" >"$work/zero.ref3.jsonl" &&
  python3 "$here/compare_metrics.py" "$work/zero.resumed.jsonl" "$work/zero.ref3.jsonl" 1 &&
  pass "distributed optimizer: mpirun -np 6 matches --reference; its checkpoint resumes on one rank" ||
  { cat "$work/zero.mpi.out" 2>/dev/null; fail "distributed optimizer under mpirun"; }

# 1e. Zero bubble under mpirun (docs/plan.md): the encoder's stage and the
# language model's four hold back their weight gradients; the mpi backend
# posts the split programs' standalone sends, and the losses and norms
# are --reference's.
python3 - "$examples/vlm-fan-in.json" "$work/zb.json" <<'PY'
import json, sys
model = json.load(open(sys.argv[1]))
model["modules"][1]["parallel"] = {"pp": 4, "rank_offset": 4}
model["batch"]["schedule"] = "zero_bubble"
json.dump(model, open(sys.argv[2], "w"))
PY
mpi_matches zb 8 '"weight_grad"' "zero bubble"

# 1f. Interleaved 1F1B under mpirun (docs/plan.md): four language stages of
# two chunks each behind an encoder; the messages that wrap from the last
# stage to the first carry their chunk in the tag, and the losses and norms
# are --reference's.
python3 - "$examples/vlm-fan-in.json" "$work/il.json" <<'PY'
import json, sys
model = json.load(open(sys.argv[1]))
model["modules"][1]["parallel"] = {"pp": 4, "rank_offset": 4,
                                   "virtual_stages": 2}
model["modules"][1]["arch"]["num_layers"] = 8
model["batch"]["schedule"] = "interleaved"
json.dump(model, open(sys.argv[2], "w"))
PY
mpi_matches il 8 '"chunk":1' "interleaved"

# 1g. Zero bubble across modules under mpirun (docs/plan.md): colocated,
# four language stages; every rank posts its encoder outputs (MPI_Isend)
# and the first stage takes each just before its language forward, the
# first stage posts each microbatch's bridge gradients as its backward
# makes them, every stage runs the encoder's backward in its cool-down,
# and the losses and norms are --reference's.
python3 - "$examples/vlm-colocated-pp2.json" "$work/xm.json" <<'PY'
import json, sys
model = json.load(open(sys.argv[1]))
model["modules"][1]["parallel"] = {"tp": 1, "pp": 4, "dp": 2}
model["batch"]["schedule"] = "zero_bubble"
model["batch"]["num_microbatches"] = 8
json.dump(model, open(sys.argv[2], "w"))
PY
mpi_matches xm 8 '"posted":true' "zero bubble across modules"
fi

if [ "$part" != trainings ]; then
[ -f "$work/vlm-fan-in.plan.json" ] || compile vlm-fan-in
plan=$work/vlm-fan-in.plan.json

# 1h. --strict (docs/runtime.md): the local backend under NCCL's rules
# trains as --reference; with the mpi backend it is refused.
"$bin/mimo-run" "$plan" --steps 2 --strict --metrics "$work/strict.jsonl" >/dev/null 2>&1 &&
  "$bin/mimo-run" "$plan" --steps 2 --reference --metrics "$work/strict.ref.jsonl" >/dev/null 2>&1 &&
  python3 "$here/compare_metrics.py" "$work/strict.jsonl" "$work/strict.ref.jsonl" 2 &&
  pass "--strict: the local backend under NCCL's rules matches --reference" ||
  fail "--strict against --reference"
"$bin/mimo-run" "$plan" --steps 1 --strict --backend mpi >/dev/null 2>"$work/strict.err"
rc=$?
[ $rc -eq 1 ] && grep -q -- "--strict is the local backend's" "$work/strict.err" &&
  pass "--strict --backend mpi: exit 1 naming the fix" ||
  { cat "$work/strict.err"; fail "--strict with mpi (rc $rc)"; }

# 2. An injected fault: every rank stops, exit 2, the message names the rank,
# and the run ends well before the 20 s communication timeout (the failure
# is propagated, not waited out: faults never hang).
start=$(date +%s)
MIMO_INJECT_FAULT=5:2 "$bin/mimo-run" "$plan" --steps 3 --timeout 20 >/dev/null 2>"$work/fault.err"
rc=$? took=$(($(date +%s) - start))
[ $rc -eq 2 ] && [ $took -lt 15 ] &&
  grep -q "rank 5 failed at the start of step 2" "$work/fault.err" &&
  pass "local injected fault: exit 2 in ${took}s, names rank 5" ||
  { cat "$work/fault.err"; fail "local injected fault (rc $rc, ${took}s)"; }
start=$(date +%s)
MIMO_INJECT_FAULT=5:2 mpirun -np 8 "$bin/mimo-run" "$plan" --steps 3 --timeout 20 \
  --trace "$work/mfault.trace.json" >"$work/mfault.out" 2>&1
rc=$? took=$(($(date +%s) - start))
# The failing rank writes its own trace before the job is aborted.
[ $rc -ne 0 ] && [ $took -lt 15 ] &&
  grep -q "rank 5 failed at the start of step 2" "$work/mfault.out" &&
  python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['traceEvents']; \
assert any(e.get('name','').startswith('forward') for e in t), t[:3]" "$work/mfault.trace.rank5.json" &&
  pass "mpi injected fault: exit $rc in ${took}s, names rank 5, rank 5's trace written" ||
  { cat "$work/mfault.out"; fail "mpi injected fault (rc $rc, ${took}s)"; }

# 2b. The metrics file keeps every completed step of a failed run (each
# line flushed as its step ends), and the trace is written too.
MIMO_INJECT_FAULT=5:3 "$bin/mimo-run" "$plan" --steps 4 --timeout 20 \
  --metrics "$work/fault.jsonl" --trace "$work/fault.trace.json" >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] && python3 -c "import json,sys
lines=[json.loads(l) for l in open(sys.argv[1])]
# Step 2 may not complete: rank 0 can still be in its last collective when
# rank 5 fails at the start of step 3.
assert [l['step'] for l in lines] in ([1], [1, 2]), lines
for l in lines: assert {'lr','tokens_per_s','tflops','loss','grad_norm'} <= set(l), l
t=json.load(open(sys.argv[2]))['traceEvents']
assert any(e.get('name') == 'step 3' for e in t), 'no step 3 marker'
assert any('bytes_sent' in e.get('args', {}) for e in t), 'no message arguments'" \
  "$work/fault.jsonl" "$work/fault.trace.json" &&
  pass "a failed run keeps its completed steps' metrics and writes its trace" ||
  fail "metrics / trace after a failure (rc $rc)"
"$bin/mimo-run" "$plan" --steps 1 --metrics /nonexistent/dir/m.jsonl >/dev/null 2>"$work/mpath.err"
rc=$?
[ $rc -eq 1 ] && grep -q -- "--metrics: /nonexistent/dir/m.jsonl: error: the folder .* does not exist" "$work/mpath.err" &&
  pass "an unwritable metrics path: exit 1 before training" ||
  { cat "$work/mpath.err"; fail "metrics path (rc $rc)"; }

# 3. Killing one rank's process under mpirun ends the job. Only this job's
# processes are looked at and ended (never others' runs of mimo-run).
descendants() {
  local child
  for child in $(pgrep -P "$1" || true); do
    echo "$child"
    descendants "$child"
  done
}
mpirun -np 8 "$bin/mimo-run" "$plan" --steps 1000 --timeout 20 >"$work/kill.out" 2>&1 &
job=$!
victim=""
for _ in $(seq 1 100); do
  for pid in $(descendants $job); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=3'; then
      victim=$pid
    fi
  done
  [ -n "$victim" ] && grep -q '^step 1/' "$work/kill.out" && break
  sleep 0.2
done
started=$(descendants $job)
if [ -n "$victim" ]; then
  kill -9 "$victim"
  waited=0
  while kill -0 $job 2>/dev/null && [ $waited -lt 60 ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 $job 2>/dev/null; then
    kill -9 $job; fail "mpirun still running 60 s after rank 3 was killed"
  else
    wait $job; rc=$?
    [ $rc -ne 0 ] && grep -qi "rank 3" "$work/kill.out" &&
      pass "killed rank 3: mpirun exit $rc within ${waited}s, names rank 3" ||
      { tail -20 "$work/kill.out"; fail "killed rank (rc $rc)"; }
  fi
else
  kill -9 $job 2>/dev/null; fail "could not find rank 3's process"
fi
# The job's processes, recorded while it ran, that are somehow still alive.
for pid in $started; do kill -9 "$pid" 2>/dev/null || true; done

# 4. Bad input: exit 1, a clear message.
mpirun -np 4 "$bin/mimo-run" "$plan" --steps 1 >"$work/np.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "needs 8 ranks but mpirun started 4 processes" "$work/np.out" &&
  pass "mpirun -np 4 of an 8-rank plan: exit $rc" || { cat "$work/np.out"; fail "np mismatch"; }
python3 -c "import json,sys; p=json.load(open(sys.argv[1])); p['version']=99; \
json.dump(p, open(sys.argv[2],'w'))" "$plan" "$work/v99.json"
"$bin/mimo-run" "$work/v99.json" --steps 1 >/dev/null 2>"$work/v99.err"
rc=$?
[ $rc -eq 1 ] && grep -q "/version" "$work/v99.err" && pass "plan of another version: exit 1" ||
  { cat "$work/v99.err"; fail "bad version (rc $rc)"; }

python3 -c "import json,sys; p=json.load(open(sys.argv[1])); p['model']['precision']='bf16'; \
json.dump(p, open(sys.argv[2],'w'))" "$plan" "$work/bf16.json"
# bf16 (emulated on the CPU) under mpirun matches its bf16 reference
# within 1e-2 (docs/gpu.md).
"$bin/mimo-run" "$work/bf16.json" --steps 3 --reference --metrics "$work/bf16.ref.jsonl" \
  >/dev/null 2>"$work/bf16.err" &&
  mpirun -np 8 "$bin/mimo-run" "$work/bf16.json" --steps 3 --metrics "$work/bf16.mpi.jsonl" \
    >"$work/bf16.out" 2>&1 &&
  python3 "$here/compare_metrics.py" "$work/bf16.mpi.jsonl" "$work/bf16.ref.jsonl" 3 1e-2 &&
  pass "bf16 under mpirun -np 8 matches its bf16 reference" ||
  { cat "$work/bf16.err" "$work/bf16.out"; fail "bf16 under mpirun"; }

# --device cuda: trains where a GPU is usable; elsewhere exit 1 saying why
# (no driver, no device, or a build without CUDA), never an abort.
"$bin/mimo-run" "$plan" --steps 1 --device cuda >"$work/cuda.out" 2>"$work/cuda.err"
rc=$?
if [ $rc -eq 0 ]; then
  grep -q "cuda device" "$work/cuda.out" && pass "--device cuda trains on this GPU machine" ||
    { cat "$work/cuda.out"; fail "--device cuda banner"; }
else
  [ $rc -eq 1 ] && grep -q "error: --device cuda: no usable GPU: " "$work/cuda.err" &&
    pass "--device cuda without a usable GPU: exit 1, $(head -c 120 "$work/cuda.err")" ||
    { cat "$work/cuda.err"; fail "--device cuda without a GPU (rc $rc)"; }
fi
"$bin/mimo-run" "$plan" --steps 1 --backend nccl >/dev/null 2>"$work/nccl.err"
rc=$?
# No GPU here (CI): the nccl backend says why it cannot start (no GPU, or
# a build without NCCL) and exits 1.
[ $rc -eq 1 ] && grep -Eq "error: --backend nccl( needs a GPU per rank: |: mimo-run was built without NCCL)" "$work/nccl.err" &&
  pass "--backend nccl without a GPU: exit 1, $(head -c 100 "$work/nccl.err")" ||
  { cat "$work/nccl.err"; fail "nccl (rc $rc)"; }
"$bin/mimo-run" "$plan" --steps 1 --backend nccl --device cpu >/dev/null 2>"$work/ncclcpu.err"
rc=$?
[ $rc -eq 1 ] && grep -Eq "moves GPU memory|built without NCCL" "$work/ncclcpu.err" &&
  pass "--backend nccl --device cpu: exit 1" || { cat "$work/ncclcpu.err"; fail "nccl cpu (rc $rc)"; }
"$bin/mimo-run" "$plan" --steps 1 --grad-bucket-mb -1 >/dev/null 2>"$work/bucket.err"
rc=$?
[ $rc -eq 1 ] && grep -q "grad-bucket-mb expects" "$work/bucket.err" &&
  pass "--grad-bucket-mb -1: exit 1" || { cat "$work/bucket.err"; fail "bucket flag (rc $rc)"; }
# Overlap is off by default on the CPU and on with --overlap: the trace's
# comm threads hold the sends posted ahead and the gradient buckets; every
# metrics line has the step's peak device memory and its rank.
"$bin/mimo-run" "$plan" --steps 1 --trace "$work/off.trace.json" >/dev/null 2>&1 &&
  "$bin/mimo-run" "$plan" --steps 1 --overlap --grad-bucket-mb 0.01 \
    --trace "$work/on.trace.json" --metrics "$work/on.jsonl" >/dev/null 2>&1 &&
  python3 -c "import json,sys
comm = lambda f: [e for e in json.load(open(f))['traceEvents'] if e.get('cat') == 'comm']
assert not comm(sys.argv[1]), 'comm events without --overlap'
names = {e['name'].split(' ')[0] for e in comm(sys.argv[2])}
assert {'send_act', 'grad'} <= names, names
m = json.loads(open(sys.argv[3]).readline())
assert m['peak_bytes'] > 0 and 0 <= m['peak_rank'] < 8, m
assert len(m['peak_bytes_by_rank']) == 8 and max(m['peak_bytes_by_rank']) == m['peak_bytes'], m
busy = m['compute_seconds_by_rank']
assert len(busy) == 8 and all(0 < b < m['seconds'] * 1.5 for b in busy), m
assert m['targets'] > 0, m" \
    "$work/off.trace.json" "$work/on.trace.json" "$work/on.jsonl" &&
  pass "--overlap: sends and buckets on the comm threads (off by default on cpu); peak_bytes in the metrics" ||
  fail "--overlap trace or peak_bytes"
mpirun -np 8 "$bin/mimo-run" "$plan" --steps 1 --device cuda >"$work/mcuda.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "error: --device cuda" "$work/mcuda.out" &&
  pass "--device cuda under mpirun: exit $rc" || { cat "$work/mcuda.out"; fail "cuda under mpirun (rc $rc)"; }

# --backend mpi started without mpirun says how to launch it.
"$bin/mimo-run" "$plan" --steps 1 --backend mpi >/dev/null 2>"$work/nompirun.err"
rc=$?
[ $rc -eq 1 ] && grep -q "launch it as \`mpirun -np 8 mimo-run .*--allow-run-as-root --oversubscribe" \
  "$work/nompirun.err" &&
  pass "--backend mpi without mpirun: exit 1, says how to launch" ||
  { cat "$work/nompirun.err"; fail "mpi without mpirun (rc $rc)"; }

# --help and --version: what the tool does, its flags, an example; the
# version, the commit and what was built in.
"$bin/mimo-run" --help >"$work/help.out" && grep -q "^FLAGS" "$work/help.out" &&
  grep -q "^EXAMPLES" "$work/help.out" && grep -q -- "--load PATH" "$work/help.out" &&
  pass "mimo-run --help" || { cat "$work/help.out"; fail "mimo-run --help"; }
"$bin/mimo-run" --version >"$work/version.out" &&
  grep -q "^mimo-run (mimo) [0-9]" "$work/version.out" &&
  grep -q "commit:  [0-9a-f]\{7,\}\|commit:  unknown" "$work/version.out" &&
  grep -q "built with: .*MPI" "$work/version.out" &&
  pass "mimo-run --version" || { cat "$work/version.out"; fail "mimo-run --version"; }

# --threads: intra-op threads of a rank; the numbers do not depend on it.
"$bin/mimo-run" "$plan" --steps 1 --threads 0 >/dev/null 2>"$work/threads.err"
rc=$?
[ $rc -eq 1 ] && grep -q "threads expects" "$work/threads.err" &&
  pass "--threads 0: exit 1" || { cat "$work/threads.err"; fail "--threads 0 (rc $rc)"; }
"$bin/mimo-run" "$plan" --steps 2 --reference --device cpu --threads 1 --metrics "$work/t1.jsonl" >/dev/null &&
  "$bin/mimo-run" "$plan" --steps 2 --reference --device cpu --threads 2 --metrics "$work/t2.jsonl" \
    >"$work/t2.out" &&
  grep -q "2 threads per rank" "$work/t2.out" &&
  python3 -c "import json,sys
a=[json.loads(l) for l in open(sys.argv[1])]; b=[json.loads(l) for l in open(sys.argv[2])]
assert [(x['loss'],x['grad_norm']) for x in a] == [(x['loss'],x['grad_norm']) for x in b], (a, b)" \
    "$work/t1.jsonl" "$work/t2.jsonl" &&
  pass "--threads 2 gives the bits of --threads 1" || fail "--threads 1 vs 2"

MIMO_INJECT_FAULT=1:9 "$bin/mimo-run" "$plan" --steps 3 >/dev/null 2>"$work/step.err"
rc=$?
[ $rc -eq 1 ] && grep -q "names step 9 but the run has 3 steps" "$work/step.err" &&
  pass "fault step outside the run: exit 1" || { cat "$work/step.err"; fail "fault step (rc $rc)"; }
mpirun -np 2 "$bin/mimo-run" "$plan" --backend local --steps 1 >"$work/lm.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "backend local runs every rank as a thread" "$work/lm.out" &&
  pass "--backend local under mpirun: exit $rc" || { cat "$work/lm.out"; fail "local under mpirun (rc $rc)"; }

# 5. jsonl data, and a sample whose features disagree with its tokens.
python3 "$here/jsonl_model.py" "$examples/vlm-fan-in.json" "$work" 3
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
bad = json.loads(open(f"{work}/data.jsonl").readline())
bad["input_ids"][0:3] = [1000, 1000, 1000]
bad.setdefault("images", {"features": []})
with open(f"{work}/bad.jsonl", "w") as f:
    f.write(json.dumps({"input_ids": [1, 2, 3]}) + "\n" + json.dumps(bad) + "\n")
PY
"$bin/mimoc" compile "$work/jsonl.json" -o "$work/jsonl.plan.json" || fail "compile jsonl model"
"$bin/mimo-run" "$work/jsonl.plan.json" --steps 3 --metrics "$work/jsonl.local.jsonl" >/dev/null &&
  "$bin/mimo-run" "$work/jsonl.plan.json" --steps 3 --reference --metrics "$work/jsonl.ref.jsonl" >/dev/null &&
  python3 "$here/compare_metrics.py" "$work/jsonl.local.jsonl" "$work/jsonl.ref.jsonl" &&
  pass "jsonl data trains and matches --reference" || fail "jsonl run"
cp "$work/bad.jsonl" "$work/data.jsonl"
"$bin/mimo-run" "$work/jsonl.plan.json" --steps 1 >/dev/null 2>"$work/jsonl.err"
rc=$?
[ $rc -eq 1 ] && grep -q "data.jsonl:2: /images/features: error: the sample has" "$work/jsonl.err" &&
  pass "jsonl features disagreeing with the tokens: exit 1, file:line and pointer" ||
  { cat "$work/jsonl.err"; fail "jsonl error (rc $rc)"; }

# 6. Megatron's indexed dataset, written here the way preprocess_data.py
# writes it (an independent writer): a language model trains from it on 4
# ranks (TP2 x DP2) like its reference, with held-out evaluations.
python3 - "$work" <<'PY'
import json, struct, sys, random
work = sys.argv[1]
rnd = random.Random(5)
def write(prefix, docs):
    pointers, offset = [], 0
    with open(prefix + ".bin", "wb") as b:
        for d in docs:
            b.write(struct.pack("<%dH" % len(d), *d))
            pointers.append(offset)
            offset += 2 * len(d)
    with open(prefix + ".idx", "wb") as i:
        i.write(b"MMIDIDX\x00\x00")
        i.write(struct.pack("<Q", 1))
        i.write(struct.pack("<B", 8))  # uint16
        i.write(struct.pack("<Q", len(docs)))
        i.write(struct.pack("<Q", len(docs) + 1))
        i.write(struct.pack("<%di" % len(docs), *[len(d) for d in docs]))
        i.write(struct.pack("<%dq" % len(docs), *pointers))
        i.write(struct.pack("<%dq" % (len(docs) + 1), *range(len(docs) + 1)))
for name in ("corpus", "heldout"):
    write(f"{work}/{name}", [[rnd.randrange(1024) for _ in range(rnd.randint(20, 300))]
                             for _ in range(40)])
model = {"version": 1, "name": "indexed-lm",
         "batch": {"micro_batch_size": 4, "num_microbatches": 2, "seq_length": 64},
         "modules": [{"name": "language", "kind": "language",
                      "arch": {"vocab_size": 1024, "hidden_size": 64, "num_layers": 2,
                               "num_heads": 4, "ffn_hidden_size": 128},
                      "parallel": {"tp": 2, "dp": 2}}],
         "data": {"source": "indexed", "path": "corpus", "eval_path": "heldout"},
         "train": {"steps": 3, "eval_every": 3}}
json.dump(model, open(f"{work}/indexed.json", "w"))
PY
(cd / && "$bin/mimoc" compile "$work/indexed.json" -o "$work/indexed.plan.json") &&
  "$bin/mimo-run" "$work/indexed.plan.json" --metrics "$work/indexed.jsonl" >/dev/null &&
  "$bin/mimo-run" "$work/indexed.plan.json" --reference --metrics "$work/indexed.ref.jsonl" >/dev/null &&
  python3 "$here/compare_metrics.py" "$work/indexed.jsonl" "$work/indexed.ref.jsonl" &&
  python3 -c "import json,sys
a=[json.loads(l) for l in open(sys.argv[1])]; b=[json.loads(l) for l in open(sys.argv[2])]
assert 'eval_loss' in a[2] and abs(a[2]['eval_loss'] - b[2]['eval_loss']) <= 1e-5 * b[2]['eval_loss'], (a[2], b[2])" \
    "$work/indexed.jsonl" "$work/indexed.ref.jsonl" &&
  pass "Megatron indexed data (paths relative to model.json) trains and evaluates like --reference" ||
  fail "indexed dataset run"

# 7. The memory plan (docs/tune.md): an oversized layout is refused at once,
# and the estimate of a run is within 25% of its measured peak memory.
cat >"$work/huge.json" <<'EOF'
{"version": 1, "name": "huge", "batch": {"micro_batch_size": 8, "num_microbatches": 4, "seq_length": 4096},
 "modules": [{"name": "language", "kind": "language",
   "arch": {"vocab_size": 128000, "hidden_size": 16384, "num_layers": 126, "num_heads": 128, "ffn_hidden_size": 53248},
   "parallel": {"tp": 8, "pp": 2}}]}
EOF
"$bin/mimoc" compile "$work/huge.json" -o "$work/huge.plan.json" || fail "compile huge"
start=$(date +%s%N)
"$bin/mimo-run" "$work/huge.plan.json" --device cpu >/dev/null 2>"$work/huge.err"
rc=$? ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ $rc -eq 1 ] && [ $ms -lt 1000 ] && grep -q "error: the layout needs about .* but only .* is available" "$work/huge.err" &&
  pass "an oversized layout: exit 1 in ${ms} ms with the estimate" ||
  { cat "$work/huge.err"; fail "oversized layout (rc $rc, ${ms} ms)"; }
# Under mpirun each process checks its own rank and all agree: every one
# exits 1, and the refusal is printed once.
mpirun -np 16 "$bin/mimo-run" "$work/huge.plan.json" --backend mpi --device cpu \
  >"$work/huge-mpi.out" 2>&1
rc=$?
n=$(grep -c "error: the layout needs about" "$work/huge-mpi.out")
[ $rc -eq 1 ] && [ "$n" -eq 1 ] &&
  pass "an oversized layout under mpirun -np 16: every rank exit 1, one refusal" ||
  { cat "$work/huge-mpi.out"; fail "oversized layout under mpirun (rc $rc, $n refusals)"; }
cat >"$work/lm.json" <<'EOF'
{"version": 1, "name": "lm", "batch": {"micro_batch_size": 4, "num_microbatches": 1, "seq_length": 512},
 "modules": [{"name": "language", "kind": "language",
   "arch": {"vocab_size": 8192, "hidden_size": 512, "num_layers": 4, "num_heads": 8, "ffn_hidden_size": 1536}}]}
EOF
if [ -n "${MIMO_SANITIZED:-}" ]; then
  echo "skip: the memory estimate vs the peak RSS (sanitizers' shadow memory)"
else
"$bin/mimoc" compile "$work/lm.json" -o "$work/lm.plan.json" &&
  "$bin/mimoc" explain "$work/lm.plan.json" --json >"$work/lm.explain.json" &&
  python3 - "$bin/mimo-run" "$work/lm.plan.json" "$work/lm.explain.json" <<'PY' &&
import json, resource, subprocess, sys
subprocess.run([sys.argv[1], sys.argv[2], "--device", "cpu", "--threads", "1", "--steps", "2"],
               check=True, stdout=subprocess.DEVNULL)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
estimate = json.load(open(sys.argv[3]))["ranks"][0]["memory"]["total_bytes"]
print(f"estimate {estimate / 2**20:.0f} MiB, measured peak {peak / 2**20:.0f} MiB")
assert abs(estimate - peak) <= 0.25 * peak, (estimate, peak)
PY
  pass "the memory estimate is within 25% of the measured peak" ||
  fail "memory estimate vs peak"
fi
# An allocation that fails anyway (a device fuller than measured: here
# capped by MIMO_TEST_CPU_MEMORY) stops the run with exit 2, naming the rank,
# the instruction and the bytes.
MIMO_TEST_CPU_MEMORY=20000000 "$bin/mimo-run" "$plan" --device cpu --steps 2 \
  --timeout 20 >/dev/null 2>"$work/oom.err"
rc=$?
[ $rc -eq 2 ] &&
  grep -q "rank [0-9] failed at step 1, instruction [0-9]* (.*): out of host memory allocating [0-9]* bytes" "$work/oom.err" &&
  pass "an allocation failure: exit 2 naming rank, instruction and bytes" ||
  { cat "$work/oom.err"; fail "allocation failure (rc $rc)"; }

# 8. Checkpoints (docs/checkpoints.md): readable by an independent safetensors reader,
# the same tensors from two layouts; a run killed while saving leaves the
# previous checkpoint, which resumes; bad checkpoints are refused.
ck=$work/ck ck2=$work/ck2
"$bin/mimo-run" "$plan" --device cpu --steps 2 --save "$ck" --metrics "$work/ck.jsonl" >/dev/null &&
  mpirun -np 8 "$bin/mimo-run" "$plan" --steps 2 --save "$ck2" >/dev/null 2>&1 &&
  python3 "$here/read_safetensors.py" "$ck/step-2/model.safetensors" \
    "$ck2/step-2/model.safetensors" >"$work/st.out" &&
  python3 "$here/read_safetensors.py" "$ck/step-2/optimizer.safetensors" \
    "$ck2/step-2/optimizer.safetensors" >/dev/null &&
  grep -q "^language.embedding \[1024, 128\]$" "$work/st.out" &&
  grep -q "^language.layers.0.attn_norm \[128\]$" "$work/st.out" &&
  pass "checkpoints read by an independent safetensors reader; local and mpirun write the same tensors" ||
  { cat "$work/st.out"; fail "checkpoint files"; }
MIMO_TEST_KILL_DURING_SAVE=3 "$bin/mimo-run" "$plan" --device cpu --steps 4 --save "$work/killed" \
  --save-every 1 >/dev/null 2>&1
rc=$?
[ $rc -ne 0 ] && [ "$(cat "$work/killed/latest")" = "step-2" ] && [ -d "$work/killed/step-3.tmp" ] &&
  "$bin/mimo-run" "$plan" --device cpu --steps 4 --load "$work/killed" \
    --metrics "$work/resumed.jsonl" >"$work/resumed.out" &&
  grep -q "^step 3/4" "$work/resumed.out" &&
  "$bin/mimo-run" "$plan" --device cpu --steps 4 --metrics "$work/whole.jsonl" >/dev/null &&
  python3 -c "import json,sys
a=[json.loads(l) for l in open(sys.argv[1])]; b=[json.loads(l) for l in open(sys.argv[2])][2:]
assert [(x['step'],x['loss'],x['grad_norm']) for x in a] == [(x['step'],x['loss'],x['grad_norm']) for x in b], (a, b)" \
    "$work/resumed.jsonl" "$work/whole.jsonl" &&
  pass "killed while saving step 3: latest stays step-2, which resumes bit-identically" ||
  fail "kill during save (rc $rc)"
"$bin/mimo-run" "$plan" --device cpu --steps 2 --load "$ck" >/dev/null 2>"$work/done.err"
rc=$?
[ $rc -eq 1 ] && grep -q "holds step 2: nothing is left to train with --steps 2" "$work/done.err" &&
  pass "a checkpoint at the last step: exit 1, raise --steps" || { cat "$work/done.err"; fail "load at end (rc $rc)"; }
cp -r "$ck" "$work/cut" && truncate -s -100 "$work/cut/step-2/model.safetensors"
"$bin/mimo-run" "$plan" --device cpu --steps 3 --load "$work/cut" >/dev/null 2>"$work/cut.err"
rc=$?
[ $rc -eq 1 ] && grep -q "step-2/model.safetensors: error: .*truncated" "$work/cut.err" &&
  pass "a truncated checkpoint file: exit 1 naming the file" || { cat "$work/cut.err"; fail "truncated (rc $rc)"; }
cp -r "$ck" "$work/extra" && python3 - "$work/extra/step-2/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = open(path, "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
body = data[8 + n:]
header["language.stray"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(body), len(body) + 4]}
text = json.dumps(header).encode()
open(path, "wb").write(struct.pack("<Q", len(text)) + text + body + bytes(4))
PY
"$bin/mimo-run" "$plan" --device cpu --steps 3 --load "$work/extra" >/dev/null 2>"$work/extra.err"
rc=$?
[ $rc -eq 1 ] && grep -q "tensor 'language.stray' is not a parameter of this model" "$work/extra.err" &&
  pass "an extra tensor: exit 1 naming it" || { cat "$work/extra.err"; fail "extra tensor (rc $rc)"; }

# The requeue idiom: --save DIR --load DIR starts fresh while DIR holds no
# checkpoint (a step-N.tmp left by a kill is none), then resumes from it.
mkdir -p "$work/requeue/step-1.tmp"
"$bin/mimo-run" "$plan" --device cpu --steps 2 --save "$work/requeue" \
  --load "$work/requeue" >"$work/rq1.out" 2>&1 &&
  grep -q "no checkpoint in .*requeue yet: starting fresh" "$work/rq1.out" &&
  [ "$(cat "$work/requeue/latest")" = "step-2" ] &&
  "$bin/mimo-run" "$plan" --device cpu --steps 3 --save "$work/requeue" \
    --load "$work/requeue" >"$work/rq2.out" 2>&1 &&
  grep -q "resuming from .*step-2 (step 2)" "$work/rq2.out" &&
  grep -q "^step 3/3" "$work/rq2.out" &&
  pass "--save DIR --load DIR: a fresh start, then a resume" ||
  { cat "$work/rq1.out" "$work/rq2.out"; fail "requeue idiom"; }

# docs/pretrained.md's worked example as a user runs it: its Hugging Face
# folders written beside a copy of the model.json, LLaVA stage 1 from a
# Llama 3.1 and a SigLIP (relative init paths), matching --reference and
# under mpirun; then both modules exported and stage 2 started from them.
numpy_python=""
for py in /usr/bin/python3 python3; do
  if "$py" -c "import numpy" 2>/dev/null; then numpy_python=$py; break; fi
done
if [ -z "$numpy_python" ]; then
  fail "pretrained example: no python3 with numpy (scripts/setup.sh installs python3-numpy)"
else
  pre=$work/pretrained
  mkdir -p "$pre"
  cp "$examples/pretrained/llava-siglip.json" "$examples/pretrained/make-folders.py" "$pre/"
  "$numpy_python" "$pre/make-folders.py" >/dev/null &&
    "$bin/mimoc" compile -q "$pre/llava-siglip.json" -o "$work/llava-siglip.plan.json" &&
    "$bin/mimo-run" "$work/llava-siglip.plan.json" --steps 2 --reference \
      --metrics "$work/ls.ref.jsonl" >/dev/null &&
    mpirun -np 2 "$bin/mimo-run" "$work/llava-siglip.plan.json" --steps 2 \
      --metrics "$work/ls.mpi.jsonl" --save "$work/ls-save" >"$work/ls.out" 2>&1 &&
    python3 "$here/compare_metrics.py" "$work/ls.mpi.jsonl" "$work/ls.ref.jsonl" 2 &&
    pass "pretrained example: stage 1 from Hugging Face folders, mpirun matches --reference" ||
    { cat "$work/ls.out"; fail "pretrained example"; }
  # One LLaVA folder out (docs/pretrained.md): the pretrained bos/eos ids and
  # max_position_embeddings kept, integers integers, the generation,
  # tokenizer and image processor configs copied; stage 2 starts from it.
  "$bin/mimo-run" "$work/llava-siglip.plan.json" --load "$work/ls-save" \
    --export-hf "$pre/out" >"$work/ls-export.out" 2>&1 &&
    grep -q "exported LLaVA (modules 'images', 'language')" "$work/ls-export.out" &&
    python3 - "$pre" <<'PY' &&
import json, os, sys
pre = sys.argv[1]
c = json.load(open(f"{pre}/out/config.json"))
t, v = c["text_config"], c["vision_config"]
want = [(c["architectures"], ["LlavaForConditionalGeneration"]),
        (c["image_token_index"], 1000), (c["vision_feature_layer"], -2),
        (c["vision_feature_select_strategy"], "full"),
        (c["projector_hidden_act"], "gelu"), (c["image_seq_length"], 16),
        (t["bos_token_id"], 1001), (t["eos_token_id"], 1002),
        (t["max_position_embeddings"], 512),
        (type(t["rope_scaling"]["original_max_position_embeddings"]), int),
        (v["model_type"], "siglip_vision_model"), (v["image_size"], 56)]
bad = [(got, exp) for got, exp in want if got != exp]
assert not bad, bad
for name in ("generation_config.json", "tokenizer_config.json",
             "preprocessor_config.json"):
    assert os.path.isfile(f"{pre}/out/{name}"), name
assert json.load(open(f"{pre}/out/generation_config.json"))["top_p"] == 0.9
model = json.load(open(f"{pre}/llava-siglip.json"))
for module in model["modules"]:
    module["init"]["from"] = "out"  # one folder starts both modules
model["modules"][1].pop("freeze")  # stage 2: the language model trains
json.dump(model, open(f"{pre}/stage2.json", "w"))
PY
    "$bin/mimoc" compile -q "$pre/stage2.json" -o "$work/stage2.plan.json" &&
    "$bin/mimo-run" "$work/stage2.plan.json" --steps 2 >"$work/ls2.out" 2>&1 &&
    pass "pretrained example: exported as one LLaVA folder, stage 2 starts from it" ||
    { cat "$work/ls-export.out" "$work/ls2.out"; fail "pretrained example export"; }
  # --export-hf-per-module: today's folder per module.
  "$bin/mimo-run" "$work/llava-siglip.plan.json" --load "$work/ls-save" \
    --export-hf "$pre/per-module" --export-hf-per-module >"$work/ls-pm.out" 2>&1 &&
    [ -f "$pre/per-module/images/config.json" ] &&
    [ -f "$pre/per-module/language/tokenizer_config.json" ] &&
    [ "$(ls -A "$pre/per-module")" = "$(printf 'images\nlanguage')" ] &&
    pass "--export-hf-per-module: a folder per module" ||
    { cat "$work/ls-pm.out"; ls -A "$pre/per-module"; fail "export per module"; }
  # Round 3: --export-hf is all or nothing. A folder that is not empty
  # there: exit 1 before anything is written.
  mkdir -p "$pre/again" && echo '{}' >"$pre/again/config.json"
  "$bin/mimo-run" "$work/llava-siglip.plan.json" --load "$work/ls-save" \
    --export-hf "$pre/again" >"$work/ls-again.out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && [ "$(ls -A "$pre/again")" = "config.json" ] &&
    [ -z "$(ls -A "$pre" | grep partial)" ] &&
    grep -q "again: error: it exists" "$work/ls-again.out" &&
    pass "--export-hf over a folder that is not empty: exit 1, nothing written" ||
    { cat "$work/ls-again.out"; ls -A "$pre/again"; fail "export all or nothing (rc $rc)"; }
  # Under mpirun one rank exports (every rank used to, into the same folder).
  mpirun -np 2 "$bin/mimo-run" "$work/llava-siglip.plan.json" --load "$work/ls-save" \
    --export-hf "$pre/mpi-out" >"$work/ls-mpi-export.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] && [ -f "$pre/mpi-out/config.json" ] &&
    [ -f "$pre/mpi-out/model.safetensors" ] &&
    [ "$(grep -c "exported LLaVA" "$work/ls-mpi-export.out")" = 1 ] &&
    pass "--export-hf under mpirun -np 2: one rank exports, exit 0" ||
    { cat "$work/ls-mpi-export.out"; fail "export under mpirun (rc $rc)"; }
  # A checkpoint holding a NaN is not exported (--load refuses it too).
  cp -r "$work/ls-save" "$work/ls-nan"
  python3 - "$work/ls-nan/$(cat "$work/ls-save/latest")/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    name = next(k for k in header if k != "__metadata__")
    f.seek(8 + n + header[name]["data_offsets"][0])
    f.write(struct.pack("<f", float("nan")))
PY
  "$bin/mimo-run" "$work/llava-siglip.plan.json" --load "$work/ls-nan" \
    --export-hf "$pre/nan-out" >"$work/ls-nan.out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && grep -q "not finite" "$work/ls-nan.out" &&
    [ -z "$(ls -A "$pre/nan-out" 2>/dev/null)" ] &&
    pass "--export-hf of a checkpoint holding a NaN: exit 1, nothing written" ||
    { cat "$work/ls-nan.out"; ls -A "$pre/nan-out"; fail "NaN export (rc $rc)"; }
fi

fi

finish
