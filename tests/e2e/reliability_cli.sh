#!/usr/bin/env bash
# End-to-end checks of what surrounds the readers (docs/runtime.md
# "Outputs and inputs"): outputs never replace a device, a pipe or a link's
# target's link; an output naming an input is refused before any work;
# outputs are checked before training.
# usage: reliability_cli.sh BIN_DIR EXAMPLES_DIR
set -uo pipefail
source "$(dirname "$0")/cli_common.sh"

"$bin/mimoc" compile -q "$examples/vlm-fan-in.json" -o "$work/plan.json" || fail "compile"
plan=$work/plan.json

# 1. Devices and pipes are written in place. A null device of our own
# (mknod needs root; elsewhere a FIFO with a reader stands in), reached
# directly and through a link: it stays a device.
if mknod "$work/null" c 1 3 2>/dev/null && echo x >"$work/null" 2>/dev/null; then
  ln -s "$work/null" "$work/null-link"
  for target in "$work/null" "$work/null-link"; do
    "$bin/mimo-run" "$plan" --steps 1 --trace "$target" --metrics "$target" >/dev/null 2>"$work/device.err"
    rc=$?
    [ $rc -eq 0 ] && [ -c "$work/null" ] && ! ls "$work"/null.* >/dev/null 2>&1 &&
      pass "--trace and --metrics $(basename "$target"): exit 0, still a device" ||
      { cat "$work/device.err"; ls -l "$work"; fail "device output (rc $rc)"; }
  done
  "$bin/mimoc" compile -q "$examples/vlm-fan-in.json" -o "$work/null" &&
    [ -c "$work/null" ] && pass "mimoc -o a device: still a device" || fail "mimoc -o device"
else
  echo "skip: no mknod here (not root): the device case"
fi
# /dev/stdout prints the plan (a pipe's other name: opened, not replaced).
"$bin/mimoc" compile -q "$examples/vlm-fan-in.json" -o /dev/stdout |
  python3 -c "import json,sys; assert json.load(sys.stdin)['format'] == 'mimo-plan'" &&
  pass "mimoc -o /dev/stdout prints the plan" || fail "mimoc -o /dev/stdout"
# A FIFO with a reader gets the output; one without a reader is refused at
# once instead of blocking.
mkfifo "$work/fifo"
(timeout 20 cat "$work/fifo" >"$work/fifo.out") &
reader=$!
timeout 20 "$bin/mimoc" compile -q "$examples/vlm-fan-in.json" -o "$work/fifo"
wait $reader
python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$work/fifo.out" && [ -p "$work/fifo" ] &&
  pass "a FIFO with a reader receives the plan and stays a FIFO" || fail "FIFO output"
timeout 20 "$bin/mimoc" compile -q "$examples/vlm-fan-in.json" -o "$work/fifo" 2>"$work/fifo.err"
rc=$?
[ $rc -eq 1 ] && grep -q "FIFO that nothing reads" "$work/fifo.err" &&
  pass "a FIFO nobody reads: exit 1 at once" || { cat "$work/fifo.err"; fail "FIFO without reader (rc $rc)"; }

# 2. A link to a file: the file is replaced, the link stays.
echo old >"$work/real.json"
ln -s real.json "$work/link.json"
"$bin/mimoc" compile -q "$examples/vlm-fan-in.json" -o "$work/link.json" &&
  [ -L "$work/link.json" ] && grep -q mimo-plan "$work/real.json" &&
  pass "an output through a link writes the file, the link stays" || fail "link output"

# 3. An output that names an input is refused before any work, the input
# intact: the plan, the model, the jsonl dataset (also through a link).
python3 "$here/jsonl_model.py" "$examples/vlm-fan-in.json" "$work" 3
"$bin/mimoc" compile -q "$work/jsonl.json" -o "$work/jsonl.plan.json" || fail "compile jsonl"
sum=$(md5sum <"$work/data.jsonl")
ln -s data.jsonl "$work/data-link.jsonl"
for flag in --metrics --trace; do
  for target in "$work/data.jsonl" "$work/data-link.jsonl" "$work/jsonl.plan.json"; do
    "$bin/mimo-run" "$work/jsonl.plan.json" --steps 1 $flag "$target" >/dev/null 2>"$work/in.err"
    rc=$?
    [ $rc -eq 1 ] && grep -q "the output is the input" "$work/in.err" &&
      [ "$(md5sum <"$work/data.jsonl")" = "$sum" ] && grep -q mimo-plan "$work/jsonl.plan.json" &&
      pass "$flag $(basename "$target"): exit 1, the input intact" ||
      { cat "$work/in.err"; fail "$flag naming an input (rc $rc)"; }
  done
done
cp "$examples/vlm-fan-in.json" "$work/model.json"
"$bin/mimoc" compile -q "$work/model.json" -o "$work/model.json" 2>"$work/self.err"
rc=$?
[ $rc -eq 1 ] && grep -q "the output is the input" "$work/self.err" &&
  cmp -s "$work/model.json" "$examples/vlm-fan-in.json" &&
  pass "mimoc compile -o its own model: exit 1, the model intact" || { cat "$work/self.err"; fail "compile over model"; }

# 4. Outputs are checked before training: an unwritable trace fails at once.
start=$(date +%s)
"$bin/mimo-run" "$plan" --steps 50 --trace "$work/no/such/dir/t.json" >"$work/late.out" 2>"$work/late.err"
rc=$?
[ $rc -eq 1 ] && grep -q "does not exist" "$work/late.err" && ! grep -q "^step" "$work/late.out" &&
  pass "a trace in a missing folder: exit 1 before the first step" || { cat "$work/late.err"; fail "late trace (rc $rc)"; }
"$bin/mimo-run" "$plan" --steps 1 --trace "$work" 2>"$work/dir.err" >/dev/null
[ $? -eq 1 ] && grep -q "is a directory" "$work/dir.err" && pass "a trace that is a directory: exit 1" ||
  { cat "$work/dir.err"; fail "trace directory"; }

# 5. Re-saving a step into the folder that holds it (a run resumed from an
# older step): killed at any point, `latest` names a complete checkpoint
# of that step, which resumes; nothing of the re-save is left over.
ck=$work/ck
"$bin/mimo-run" "$plan" --device cpu --steps 4 --save "$ck" --save-every 2 \
  --metrics "$work/whole.jsonl" >/dev/null || fail "the run to re-save"
for k in 1 2 3 4 0; do
  rm -rf "$work/re" && cp -r "$ck" "$work/re"
  MIMO_TEST_KILL_IN_RESAVE=$k "$bin/mimo-run" "$plan" --device cpu --steps 4 \
    --load "$work/re/step-2" --save "$work/re" --save-every 2 >/dev/null 2>&1
  rc=$?
  latest=$(cat "$work/re/latest")
  "$bin/mimo-run" "$plan" --device cpu --steps 5 --load "$work/re" \
    --metrics "$work/after.jsonl" >"$work/after.out" 2>&1
  rc2=$?
  python3 -c "import json,sys
a=[json.loads(l) for l in open(sys.argv[1])]
assert [x['step'] for x in a] == [5], a" "$work/after.jsonl" 2>/dev/null &&
    [ $rc2 -eq 0 ] &&
    { [ -f "$work/re/$latest/state.json" ] || [ -f "$work/re/${latest%.resave}/state.json" ]; } &&
    { [ $k -ne 0 ] || { [ $rc -eq 0 ] && [ "$latest" = step-4 ] && ! ls -d "$work/re/"*.resave 2>/dev/null; }; } &&
    pass "re-save of step 4 killed at point $k (rc $rc): latest '$latest' resumes" ||
    { cat "$work/after.out"; ls "$work/re"; fail "re-save killed at point $k (rc $rc, latest $latest)"; }
done

# 5b. Another run's checkpoint (another model name) is refused naming the
# key; --load-other-run starts from it on purpose.
python3 -c "import json,sys; m=json.load(open(sys.argv[1])); m['name']='other'
json.dump(m, open(sys.argv[2],'w'))" "$examples/vlm-fan-in.json" "$work/other.json"
"$bin/mimoc" compile -q "$work/other.json" -o "$work/other.plan.json" || fail "compile other"
"$bin/mimo-run" "$work/other.plan.json" --device cpu --steps 5 --load "$ck" >/dev/null 2>"$work/other.err"
rc=$?
[ $rc -eq 1 ] && grep -q "state.json: /model: error: the checkpoint is of model 'vlm-fan-in', this is 'other'" "$work/other.err" &&
  "$bin/mimo-run" "$work/other.plan.json" --device cpu --steps 5 --load "$ck" --load-other-run 2>&1 |
  grep -q "^step 5/5" &&
  pass "another run's checkpoint: exit 1 naming /model; --load-other-run trains from it" ||
  { cat "$work/other.err"; fail "another run's checkpoint (rc $rc)"; }

# 6. Inputs that would block or never end are refused at once (a FIFO or
# a device as the plan, the data, a checkpoint's latest or state.json, a
# profile), and huge ones without reading them whole.
expect_refusal() { # NAME PATTERN COMMAND...
  local name=$1 pattern=$2
  shift 2
  timeout 30 "$@" >"$work/refused.out" 2>"$work/refused.err"
  local rc=$?
  [ $rc -eq 1 ] && grep -q -- "$pattern" "$work/refused.err" && [ "$(wc -c <"$work/refused.err")" -lt 2000 ] &&
    pass "$name: exit 1" || { head -c 600 "$work/refused.err"; fail "$name (rc $rc)"; }
}
mkfifo "$work/in.fifo"
expect_refusal "a FIFO as the plan" "the plan is a FIFO" "$bin/mimo-run" "$work/in.fifo"
expect_refusal "/dev/zero as the plan" "the plan is a character device" "$bin/mimo-run" /dev/zero
expect_refusal "a FIFO as --profile" "is a FIFO" "$bin/mimoc" simulate "$plan" --profile "$work/in.fifo"
mkdir -p "$work/fifodata"
python3 "$here/jsonl_model.py" "$examples/vlm-fan-in.json" "$work/fifodata" 4
"$bin/mimoc" compile -q "$work/fifodata/jsonl.json" -o "$work/fifodata/plan.json" || fail "compile fifodata"
rm "$work/fifodata/data.jsonl" && mkfifo "$work/fifodata/data.jsonl"
expect_refusal "a FIFO as the jsonl data" "the jsonl data is a FIFO" "$bin/mimo-run" "$work/fifodata/plan.json" --steps 1
for part in latest step-4/state.json; do
  rm -rf "$work/bad" && cp -r "$ck" "$work/bad" && rm "$work/bad/$part" && mkfifo "$work/bad/$part"
  expect_refusal "a FIFO as the checkpoint's $part" "is a FIFO" \
    "$bin/mimo-run" "$plan" --device cpu --steps 6 --load "$work/bad"
done
rm -rf "$work/bad" && cp -r "$ck" "$work/bad"
python3 -c "open('$work/bad/latest','w').write('step-' + '9' * 10000000)"
expect_refusal "a 10 MB latest" "more than the 4096 bytes" \
  "$bin/mimo-run" "$plan" --device cpu --steps 6 --load "$work/bad"
rm -rf "$work/bad" && cp -r "$ck" "$work/bad" && truncate -s 2G "$work/bad/step-4/state.json"
expect_refusal "a 2 GB state.json" "more than the 1.0 MiB" \
  "$bin/mimo-run" "$plan" --device cpu --steps 6 --load "$work/bad"

# 7. Not finite: features of 3.4e38 make the loss NaN. The run stops
# before the update (exit 2, one message naming the step and the first
# non-finite gradient), locally and under mpirun; --on-nonfinite skip
# trains on with no update (the weights stay the initial ones).
mkdir -p "$work/nan"
python3 "$here/jsonl_model.py" "$examples/vlm-fan-in.json" "$work/nan" 5
python3 - "$work/nan" <<'PY'
import json, sys
d = sys.argv[1]
lines = [json.loads(l) for l in open(f"{d}/data.jsonl")]
for s in lines:
    if "images" in s:
        s["images"]["features"] = [[3.4e38] * len(r) for r in s["images"]["features"]]
open(f"{d}/data.jsonl", "w").write("".join(json.dumps(s) + "\n" for s in lines))
PY
"$bin/mimoc" compile -q "$work/nan/jsonl.json" -o "$work/nan/plan.json" || fail "compile nan"
"$bin/mimo-run" "$work/nan/plan.json" --steps 3 --metrics "$work/nan/m.jsonl" >"$work/nan/out" 2>"$work/nan/err"
rc=$?
[ $rc -eq 2 ] && [ "$(grep -c "step 1: the loss is" "$work/nan/err")" -eq 1 ] &&
  grep -q "the first non-finite gradient is '[a-z_.0-9]*' (rank [0-9]" "$work/nan/err" &&
  ! grep -q "^step 1/3" "$work/nan/out" && [ ! -s "$work/nan/m.jsonl" ] &&
  pass "a NaN loss: exit 2 before the update, naming the step and the gradient" ||
  { cat "$work/nan/err"; fail "NaN stop (rc $rc)"; }
mpirun -np 8 "$bin/mimo-run" "$work/nan/plan.json" --steps 3 --timeout 60 >"$work/nan/mpi.out" 2>&1
rc=$?
[ $rc -ne 0 ] && [ "$(grep -c "step 1: the loss is" "$work/nan/mpi.out")" -eq 1 ] &&
  pass "a NaN loss under mpirun -np 8: exit $rc, the message once" ||
  { cat "$work/nan/mpi.out"; fail "NaN stop under mpirun (rc $rc)"; }
"$bin/mimo-run" "$work/nan/plan.json" --steps 2 --on-nonfinite skip --metrics "$work/nan/skip.jsonl" \
  --save "$work/nan/ck" --save-every 1 >"$work/nan/skip.out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "skipped (not finite: no update)" "$work/nan/skip.out" &&
  python3 -c "import json,sys
l=[json.loads(x) for x in open(sys.argv[1])]
assert [x.get('skipped') for x in l] == [True, True], l" "$work/nan/skip.jsonl" &&
  cmp -s "$work/nan/ck/step-1/model.safetensors" "$work/nan/ck/step-2/model.safetensors" &&
  cmp -s "$work/nan/ck/step-1/optimizer.safetensors" "$work/nan/ck/step-2/optimizer.safetensors" &&
  "$bin/mimo-run" "$work/nan/plan.json" --steps 3 --on-nonfinite skip --load "$work/nan/ck" >/dev/null 2>&1 &&
  pass "--on-nonfinite skip: exit 0, steps marked skipped, no update (steps 1 and 2 saved alike, finite)" ||
  { cat "$work/nan/skip.out"; fail "skip (rc $rc)"; }

# 8. A checkpoint holding NaN is refused, naming the file and the tensor.
rm -rf "$work/bad" && cp -r "$ck" "$work/bad"
python3 - "$work/bad/step-4/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
name = sorted(k for k in header if k != "__metadata__")[0]
begin = 8 + n + header[name]["data_offsets"][0]
data[begin + 4:begin + 8] = struct.pack("<f", float("nan"))
open(path, "wb").write(bytes(data))
print(name)
PY
"$bin/mimo-run" "$plan" --device cpu --steps 6 --load "$work/bad" >/dev/null 2>"$work/badnan.err"
rc=$?
[ $rc -ne 0 ] && grep -q "step-4/model.safetensors: error: tensor '.*' holds nan at \[0, 1\]" "$work/badnan.err" &&
  pass "a checkpoint tensor holding NaN: exit $rc naming the file and tensor" ||
  { cat "$work/badnan.err"; fail "NaN checkpoint (rc $rc)"; }

# 9. Under ulimit -v the run is refused at once when its address space
# would not fit (OpenBLAS retried its 128 MiB buffer forever at 100% CPU),
# and runs when it does; a rank stuck computing ends the process within
# --timeout of the failure it causes.
if [ -n "${MIMO_SANITIZED:-}" ]; then
  echo "skip: ulimit -v (a sanitizer's shadow memory takes terabytes of address space)"
else
  (ulimit -v 600000; timeout 60 "$bin/mimo-run" "$plan" --device cpu --steps 2 >/dev/null 2>"$work/ulimit.err")
  rc=$?
  [ $rc -eq 1 ] && grep -q "ulimit -v (RLIMIT_AS) limits this process to .*OpenBLAS" "$work/ulimit.err" &&
    pass "ulimit -v too small: exit 1 at once, naming the limit" || { cat "$work/ulimit.err"; fail "ulimit -v (rc $rc)"; }
  (ulimit -v 3000000; timeout 120 "$bin/mimo-run" "$plan" --device cpu --steps 2 --threads 1 >/dev/null 2>"$work/ulimit2.err")
  rc=$?
  [ $rc -eq 0 ] && pass "ulimit -v large enough: trains" || { cat "$work/ulimit2.err"; fail "ulimit -v 3 GB (rc $rc)"; }
fi
limit=3
[ -n "${MIMO_SANITIZED:-}" ] && limit=30
start=$(date +%s)
MIMO_TEST_HANG=3:2 timeout 300 "$bin/mimo-run" "$plan" --device cpu --steps 3 --timeout $limit >/dev/null 2>"$work/hang.err"
rc=$? took=$(( $(date +%s) - start ))
[ $rc -eq 2 ] && [ $took -lt $((limit * 10)) ] && grep -q "rank(s) 3 did not stop within --timeout" "$work/hang.err" &&
  pass "a rank stuck computing: exit 2 in ${took} s naming it" || { cat "$work/hang.err"; fail "stuck rank (rc $rc, ${took} s)"; }
# With no failure to wait on (the only rank stuck, as every rank could be),
# an instruction running past twice --timeout ends the run the same way.
start=$(date +%s)
MIMO_TEST_HANG=0:2 timeout 300 "$bin/mimo-run" "$plan" --reference --device cpu --steps 3 --timeout $limit >/dev/null 2>"$work/hang1.err"
rc=$? took=$(( $(date +%s) - start ))
[ $rc -eq 2 ] && [ $took -lt $((limit * 10)) ] &&
  grep -q "rank 0 (step 2, instruction 0: .*) has run longer than twice --timeout" "$work/hang1.err" &&
  pass "the only rank stuck computing: exit 2 in ${took} s naming it and its instruction" ||
  { cat "$work/hang1.err"; fail "all ranks stuck (rc $rc, ${took} s)"; }

# Preemption (docs/runtime.md): SIGTERM (or SIGINT, SIGUSR1) lets every rank
# finish its step, saves it and exits 3; the run resumes from there. Under
# mpirun, SIGUSR1 to mpirun reaches every rank (Open MPI forwards it). A
# second signal exits at once with 128 + the signal.
# $1: tag, $2: signal, $3...: the command, which writes $work/$1.jsonl.
signal_after_two_steps() {
  local tag=$1 sig=$2
  shift 2
  "$@" >"$work/$tag.out" 2>&1 &
  local pid=$!
  wait_for_steps "$work/$tag.jsonl" 2
  kill -"$sig" $pid
  wait $pid
}
signal_after_two_steps term TERM "$bin/mimo-run" "$plan" --device cpu --steps 400 \
  --save "$work/pre" --metrics "$work/term.jsonl"
rc=$?
last=$(grep -c '"loss"' "$work/term.jsonl")
[ $rc -eq 3 ] && [ "$last" -ge 2 ] && [ "$last" -lt 400 ] &&
  [ "$(cat "$work/pre/latest")" = "step-$last" ] &&
  grep -q "stopped by a signal after step $last; saved $work/pre/step-$last" "$work/term.out" &&
  pass "SIGTERM: step $last finished and saved, exit 3" ||
  { cat "$work/term.out"; fail "SIGTERM (rc $rc, $last steps)"; }
"$bin/mimo-run" "$plan" --device cpu --steps $((last + 1)) --load "$work/pre" \
  --metrics "$work/resume.jsonl" >"$work/resume.out" 2>&1 &&
  grep -q "\"step\": *$((last + 1))" "$work/resume.jsonl" &&
  pass "the run resumes at step $((last + 1))" || { cat "$work/resume.out"; fail "resume after SIGTERM"; }
signal_after_two_steps usr1 USR1 mpirun -np 8 "$bin/mimo-run" "$plan" --steps 400 \
  --save "$work/pre-mpi" --metrics "$work/usr1.jsonl"
rc=$?
last=$(grep -c '"loss"' "$work/usr1.jsonl")
[ $rc -eq 3 ] && [ "$last" -lt 400 ] && [ "$(cat "$work/pre-mpi/latest")" = "step-$last" ] &&
  pass "mpirun, SIGUSR1: every rank stopped after step $last, saved, exit 3" ||
  { cat "$work/usr1.out"; fail "mpirun SIGUSR1 (rc $rc, $last steps)"; }
# Twice: at once.
"$bin/mimo-run" "$plan" --device cpu --steps 400 --metrics "$work/twice.jsonl" >"$work/twice.out" 2>&1 &
pid=$!
wait_for_steps "$work/twice.jsonl" 1
kill -INT $pid
sleep 0.05
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] && pass "a second SIGINT exits at once (130)" ||
  { cat "$work/twice.out"; fail "second signal (rc $rc)"; }

# Round 3: a dataset whose loss mask hides every token trained at loss 0
# without a word: now each step's metrics say targets 0 and a warning
# names the first such step.
mkdir -p "$work/masked"
python3 - "$work/data.jsonl" "$work/masked/data.jsonl" <<'PY'
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        sample = json.loads(line)
        sample["loss_mask"] = [0] * len(sample["input_ids"])
        out.write(json.dumps(sample) + "\n")
PY
cp "$work/jsonl.json" "$work/masked/jsonl.json"
"$bin/mimoc" compile -q "$work/masked/jsonl.json" -o "$work/masked/plan.json" &&
  "$bin/mimo-run" "$work/masked/plan.json" --device cpu --steps 2 \
    --metrics "$work/masked/m.jsonl" >/dev/null 2>"$work/masked.err"
rc=$?
[ $rc -eq 0 ] && grep -q "step 1 has no token to learn from" "$work/masked.err" &&
  [ "$(grep -c 'no token to learn from' "$work/masked.err")" = 1 ] &&
  grep -q '"targets":0' "$work/masked/m.jsonl" &&
  pass "every token masked: targets 0 in the metrics, one warning" ||
  { cat "$work/masked.err"; fail "all-masked data (rc $rc)"; }

# Round 3: Ctrl-C twice on mpirun makes it leave at once; its ranks must
# not train and save on as orphans.
mpirun -np 8 "$bin/mimo-run" "$plan" --device cpu --steps 100000 \
  --save "$work/orphans" --save-every 1 --metrics "$work/orphans.jsonl" \
  >"$work/orphans.out" 2>&1 &
pid=$!
wait_for_steps "$work/orphans.jsonl" 2
kill -INT $pid
sleep 0.05
kill -INT $pid
wait $pid
sleep 2
left=$(pgrep -f -- "--save $work/orphans" | wc -l)
latest=$(cat "$work/orphans/latest" 2>/dev/null)
sleep 2
[ "$left" = 0 ] && [ "$(cat "$work/orphans/latest" 2>/dev/null)" = "$latest" ] &&
  pass "Ctrl-C twice on mpirun: no rank trains on after mpirun has gone" ||
  { cat "$work/orphans.out"; pkill -f -- "--save $work/orphans"; fail "orphan ranks ($left left)"; }

# And whatever ends the launcher (here a stand-in killed with -9, the rank
# believing itself under mpirun): the rank notices and stops at once.
bash -c 'OMPI_COMM_WORLD_SIZE=1 "$0" "$1" --device cpu --backend local \
  --steps 100000 --save "$2" --metrics "$2.jsonl" >"$2.out" 2>&1 & wait' \
  "$bin/mimo-run" "$plan" "$work/orphan1" &
launcher=$!
wait_for_steps "$work/orphan1.jsonl" 1
kill -KILL $launcher
wait $launcher 2>/dev/null
sleep 1.5
left=$(pgrep -f -- "--save $work/orphan1" | wc -l)
[ "$left" = 0 ] && grep -q "mpirun (the launcher) has exited" "$work/orphan1.out" &&
  pass "the launcher killed: its rank stops at once, saying why" ||
  { cat "$work/orphan1.out"; pkill -f -- "--save $work/orphan1"; fail "orphan rank ($left left)"; }

# Round 3: two runs saving into one folder: the second is refused at once,
# naming the first; the first trains on.
"$bin/mimo-run" "$plan" --device cpu --steps 100000 --save "$work/shared-save" \
  --metrics "$work/first.jsonl" >"$work/first.out" 2>&1 &
first=$!
wait_for_steps "$work/first.jsonl" 1
"$bin/mimo-run" "$plan" --device cpu --steps 2 --save "$work/shared-save" \
  >"$work/second.out" 2>&1
rc=$?
kill -0 $first 2>/dev/null && alive=yes || alive=no
kill -TERM $first; wait $first
[ $rc -eq 1 ] && [ $alive = yes ] &&
  grep -q "is being saved into by another mimo-run (pid $first" "$work/second.out" &&
  pass "a second run saving into the same folder: exit 1 naming the first" ||
  { cat "$work/second.out"; fail "one folder, two runs (rc $rc)"; }
"$bin/mimo-run" "$plan" --device cpu --steps 1 --save "$work/shared-save2" >/dev/null 2>&1 &&
  "$bin/mimo-run" "$plan" --device cpu --steps 2 --save "$work/shared-save2" \
    --load "$work/shared-save2" >/dev/null 2>&1 &&
  pass "the folder is free again once its run has ended" || fail "lock released"

# One --save folder for every rank: a rank that does not see the file rank 0
# wrote there (an unshared disk: MIMO_TEST_UNSHARED_RANK) is named, exit 1,
# before any step.
MIMO_TEST_UNSHARED_RANK=5 mpirun -np 8 "$bin/mimo-run" "$plan" --steps 1 \
  --save "$work/unshared" >"$work/unshared.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "rank 5 does not see the file rank 0 wrote there" "$work/unshared.out" &&
  [ ! -e "$work/unshared/latest" ] && [ ! -e "$work/unshared/.mimo-shared-folder-check" ] &&
  pass "a --save folder rank 5 does not share: exit 1 naming it, nothing trained" ||
  { cat "$work/unshared.out"; fail "unshared --save (rc $rc)"; }

# Under mpirun each rank checks its share of a jsonl file's lines (docs/data.md):
# a bad line (the 30th: rank 29 mod 8 = 5 checks it) stops every rank at
# once, exit 1, and the rank that found it names it.
python3 - "$work/shares.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        ids = [(i * 7 + k) % 900 for k in range(64)]
        if i == 29:
            ids[3] = 5000  # outside the vocabulary
        f.write(json.dumps({"input_ids": ids}) + "\n")
PY
python3 - "$examples/vlm-fan-in.json" "$work/shares.json" "$work/shares.jsonl" <<'PY'
import json, sys
model = json.load(open(sys.argv[1]))
model["data"] = {"source": "jsonl", "path": sys.argv[3]}
json.dump(model, open(sys.argv[2], "w"))
PY
"$bin/mimoc" compile -q "$work/shares.json" -o "$work/shares.plan.json" 2>/dev/null
# mimoc checks the first record only; the run checks them all.
start=$(date +%s)
mpirun -np 8 "$bin/mimo-run" "$work/shares.plan.json" --steps 1 --timeout 60 \
  >"$work/shares.out" 2>&1
rc=$? took=$(($(date +%s) - start))
[ $rc -eq 1 ] && [ $took -lt 30 ] &&
  grep -q "shares.jsonl:30: /input_ids/3: error: expected a token id in \[0, 1024), found 5000" "$work/shares.out" &&
  pass "mpirun: rank 5's share of the jsonl has a bad line: every rank exit 1 in ${took} s, the line named" ||
  { cat "$work/shares.out"; fail "jsonl shares under mpirun (rc $rc, ${took} s)"; }

finish
