#!/usr/bin/env bash
# examples/slurm/train.sbatch run as Slurm would (docs/gpu.md): a stub srun
# (records its options, launches the tasks with mpirun on this machine) and
# a stub scontrol (records requeues). A job that ends trains and saves; a
# job signalled with SIGUSR1 (Slurm's --signal), or with SIGTERM to the
# script and the tasks (the time limit, preemption), saves, exits 3 and
# requeues itself; the requeued job resumes from the checkpoint, also on
# another number of tasks (re-planned).
# usage: slurm_template.sh BIN_DIR EXAMPLES_DIR
set -uo pipefail
source "$(dirname "$0")/cli_common.sh"

stubs=$work/stubs
mkdir -p "$stubs"
cat >"$stubs/srun" <<'STUB'
#!/usr/bin/env bash
# srun [--options...] PROGRAM ARGS...: the options to srun.log, then the
# tasks as mpirun's processes (this PID becomes mpirun's: srun.pid).
options=()
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do options+=("$1"); shift; done
echo "${options[*]}" >>"$SLURM_STUB_DIR/srun.log"
echo $$ >"$SLURM_STUB_DIR/srun.pid"
echo $PPID >"$SLURM_STUB_DIR/script.pid"
tasks=$SLURM_NTASKS
for option in "${options[@]}"; do
  case $option in --ntasks=*) tasks=${option#--ntasks=} ;; esac
done
exec mpirun -np "$tasks" "$@"
STUB
cat >"$stubs/scontrol" <<'STUB'
#!/usr/bin/env bash
echo "$*" >>"$SLURM_STUB_DIR/scontrol.log"
STUB
chmod +x "$stubs/srun" "$stubs/scontrol"
export PATH=$stubs:$PATH SLURM_STUB_DIR=$stubs SLURM_NTASKS=8 SLURM_JOB_NUM_NODES=1
"$bin/mimoc" compile -q "$examples/vlm-fan-in.json" -o "$work/plan.json" || fail "compile"
sbatch=$examples/slurm/train.sbatch
grep -q '^#SBATCH --signal=USR1@' "$sbatch" && grep -q '^#SBATCH --requeue' "$sbatch" &&
  pass "the template asks for SIGUSR1 before the limit and for requeueing" ||
  fail "the template's #SBATCH lines"
job() { # JOB_ID STEPS TAG: the template as that job (metrics-TAG.jsonl)
  SLURM_JOB_ID=$1 PLAN=$work/plan.json CKPT=${JOB_CKPT:-$work/ckpt} \
    MIMO_RUN=$bin/mimo-run MIMOC=$bin/mimoc METRICS=$work/metrics-$3.jsonl \
    MIMO_RUN_ARGS="--steps $2" bash "$sbatch"
}

job 11 2 a >"$work/job11.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(cat "$work/ckpt/latest")" = "step-2" ] &&
  grep -q -- "--mpi=pmix" "$stubs/srun.log" && [ ! -e "$stubs/scontrol.log" ] &&
  pass "a job that ends: trained 2 steps through srun --mpi=pmix, saved, no requeue" ||
  { cat "$work/job11.out"; fail "job 11 (rc $rc)"; }

job 12 400 b >"$work/job12.out" 2>&1 &
pid=$!
wait_for_steps "$work/metrics-b.jsonl" 1
kill -USR1 "$(cat "$stubs/srun.pid")"
wait $pid
rc=$?
last=$(sed -n 's/^step-//p' "$work/ckpt/latest")
[ $rc -eq 3 ] && [ "$last" -ge 3 ] && [ "$last" -lt 400 ] &&
  grep -q "requeue 12" "$stubs/scontrol.log" &&
  pass "SIGUSR1: step $last saved, exit 3, the job requeued itself" ||
  { cat "$work/job12.out"; fail "job 12 (rc $rc, latest step-$last)"; }

job 12 $((last + 1)) c >"$work/job12b.out" 2>&1 &&
  grep -q "\"step\": *$((last + 1))" "$work/metrics-c.jsonl" &&
  [ "$(cat "$work/ckpt/latest")" = "step-$((last + 1))" ] &&
  pass "the requeued job resumes at step $((last + 1))" ||
  { cat "$work/job12b.out"; fail "the requeued job"; }

# The time limit or a preemption with GraceTime: Slurm sends SIGTERM to
# every task and to the batch script. The script outlives it (it would die
# at once by default and never requeue), the ranks save and exit 3, and the
# job requeues itself.
JOB_CKPT=$work/term/ckpt job 14 400 t >"$work/job14.out" 2>&1 &
pid=$!
wait_for_steps "$work/metrics-t.jsonl" 1
kill -TERM "$(cat "$stubs/script.pid")" $(pgrep -P "$(cat "$stubs/srun.pid")")
wait $pid
rc=$?
last=$(sed -n 's/^step-//p' "$work/term/ckpt/latest" 2>/dev/null)
[ $rc -eq 3 ] && [ -n "$last" ] && grep -q "requeue 14" "$stubs/scontrol.log" &&
  grep -q "mimo: SIGTERM" "$work/job14.out" &&
  pass "SIGTERM to the script and the tasks: step $last saved, exit 3, requeued" ||
  { cat "$work/job14.out"; fail "job 14 (rc $rc, latest step-$last)"; }

# Re-planning on another allocation: preempted on 8 ranks, the requeued job
# gets 4 tasks, then 6; each finds its layout (mimoc tune), resumes the
# checkpoint in it, and trains on as the uninterrupted 8-rank run (1e-5).
export JOB_CKPT=$work/replan/ckpt MODEL=$examples/vlm-fan-in.json
job 21 400 r8 >"$work/job21.out" 2>&1 &
pid=$!
wait_for_steps "$work/metrics-r8.jsonl" 1
kill -USR1 "$(cat "$stubs/srun.pid")"
wait $pid
k=$(sed -n 's/^step-//p' "$JOB_CKPT/latest")
SLURM_NTASKS=4 job 21 $((k + 1)) r4 >"$work/job21-4.out" 2>&1 &&
  SLURM_NTASKS=6 job 21 $((k + 2)) r6 >"$work/job21-6.out" 2>&1 &&
  grep -q "re-planning for 4" "$work/job21-4.out" && grep -q "re-planning for 6" "$work/job21-6.out" &&
  mpirun -np 8 "$bin/mimo-run" "$work/plan.json" --steps $((k + 2)) \
    --metrics "$work/whole.jsonl" >"$work/whole.out" 2>&1 &&
  python3 - "$work" $((k + 1)) <<'PY' &&
import json, sys
work, k1 = sys.argv[1], int(sys.argv[2])
def steps(path):
    return {l["step"]: l for l in map(json.loads, open(path)) if "loss" in l}
whole = steps(f"{work}/whole.jsonl")
for tag, step in (("r4", k1), ("r6", k1 + 1)):
    got = steps(f"{work}/metrics-{tag}.jsonl")[step]
    for key in ("loss", "grad_norm"):
        rel = abs(got[key] - whole[step][key]) / abs(whole[step][key])
        assert rel <= 1e-5, (tag, step, key, got[key], whole[step][key])
PY
  pass "preempted at step $k on 8 ranks, resumed on 4 and then 6: re-planned, as the 8-rank run to 1e-5" ||
  { cat "$work/job21.out" "$work/job21-4.out" "$work/job21-6.out"; fail "re-plan (step $k)"; }
# Round 3: the re-plan ran with the GPU's profile (it used the CPU's and
# found nothing fits) and this allocation's nodes.
grep -q "device: NVIDIA H100" "$work/replan/replans/tune-4.txt" &&
  grep -q '"devices_per_node"' "$work/replan/replans/cluster-4.json" &&
  pass "the re-plan uses the GPU profile (PROFILE) and the allocation's nodes" ||
  { cat "$work/replan/replans/tune-4.txt"; fail "re-plan profile"; }
unset JOB_CKPT MODEL

# Rank 0's refusal of an output (metrics over the plan it reads) ends
# every rank at once, not after --timeout.
start=$(date +%s)
SLURM_JOB_ID=13 PLAN=$work/plan.json CKPT=$work/ckpt MIMO_RUN=$bin/mimo-run \
  METRICS=$work/plan.json MIMO_RUN_ARGS="--steps 9 --timeout 60" \
  bash "$sbatch" >"$work/job13.out" 2>&1
rc=$? took=$(($(date +%s) - start))
[ $rc -eq 1 ] && [ $took -lt 30 ] && grep -q "the output is the input" "$work/job13.out" &&
  pass "a refused --metrics under srun: exit 1 in ${took} s" ||
  { cat "$work/job13.out"; fail "refused output under srun (rc $rc, ${took} s)"; }

finish
