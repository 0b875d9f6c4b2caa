#!/usr/bin/env bash
# The GPU check (docs/gpu.md): on a machine with a GPU, builds the runtime with
# CUDA, runs the GPU tests (ctest -L gpu: every CUDA op against the CPU,
# every example and test layout on --device cuda against the CPU and CUDA
# references, bitwise reproducibility, faults), checks and times attention
# on both backends (mimo's kernels, cuDNN) beside PyTorch SDPA's, runs
# mimo-run itself on every example plan on cuda against --reference, runs
# the GPU benchmarks, measures the device profile (mimo-run --calibrate:
# bench/results/profile-<device>.json, for mimoc simulate/tune), and writes
# bench/results/gpu-<device>.md (device, driver, date, commit, every
# figure) and gpu-<device>.json (the headline figures: bench/gpu_summary.py).
# About 10 minutes on one H100.
#
# usage: scripts/gpu-check.sh [PHASE ...]
#   phases: build tests attention examples nccl hf bench report (default:
#   all, in order). On the device machine (one call at most 10 minutes) run
#   them as three calls, each carrying .gpu-bundle: "build tests",
#   "attention examples nccl hf", "bench report" (docs/gpu.md). hf: the
#   machine's transformers loads mimo's --export-hf folders (a LLaVA, a
#   Qwen2; made by scripts/gpu-bundle.sh) and its loss on a batch must be
#   mimo's (bench/hf_client.py, 1e-4). attention:
#   mimo-cuda-ops-check --only attention (both backends against the CPU's
#   reference), then gpu_bench --only attention and bench/attention_sdpa.py
#   (PyTorch SDPA's flash and cuDNN backends), one table of the two; the
#   cuDNN of the nvidia-cudnn Python package PyTorch brings (and NVRTC,
#   which cuDNN compiles its kernels with) is put on LD_LIBRARY_PATH for
#   every phase. A phase that needs the build runs
#   it first when build-gpu/ is missing (a fresh machine); examples and
#   bench keep what they finished and skip it when called again, so a call
#   cut off at its limit resumes (MIMO_GPU_CHECK_FRESH=1 redoes all). nccl: a one-rank plan on --backend nccl against --reference,
#   and an injected fault's exit 2 (NCCL from the CUDA toolkit, or the
#   nvidia-nccl Python package PyTorch brings).
#   Each phase logs to $MIMO_GPU_BUILD/gpu-check/ (default build-gpu/), so
#   the phases can run in separate commands on a machine that stays up
#   (e.g. "build tests", then "examples bench report"); `report` assembles
#   whatever the logs hold. With $OUT set, every phase's log is copied
#   there as soon as the phase ends, and the report and its JSON too.
#   MIMO_GPU_CMAKE_ARGS: more cmake options (e.g. to build, on a machine
#   that has them, without MPI, OpenBLAS, GoogleTest and the system json,
#   as a GPU machine would).
#   MIMO_GPU_CHECK_DEVICE=cpu: a dry run of the whole script on a machine
#   without a GPU, the CPU standing in for it (the benchmarks are skipped).
#
# Needs: nvcc, cmake, ninja, python3 (examples, attention, bench, report;
# PyTorch for the attention and 1B baselines). Where
# nlohmann-json is not installed, run scripts/gpu-bundle.sh first on a
# machine that has it (and mimoc, for the example plans) and bring the
# .gpu-bundle/ folder along.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${MIMO_GPU_BUILD:-build-gpu}
logs=$build/gpu-check
mkdir -p "$logs"
phases=("$@")
[ ${#phases[@]} -gt 0 ] || phases=(build tests attention examples nccl hf bench report)
jobs=$(nproc 2>/dev/null || echo 4)
gpu=${MIMO_GPU_CHECK_DEVICE:-cuda}
fresh=${MIMO_GPU_CHECK_FRESH:-0}
status=0
# The GPU's own architecture (an A100 is 80, an H100 90), else both.
arch=${MIMO_CUDA_ARCHITECTURES:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')}
[ -n "$arch" ] || arch="80;90"

note() { echo "gpu-check: $*"; }
# Copies a phase's log to $OUT (the device tool returns what is there).
keep() { [ -n "${OUT:-}" ] && cp "$@" "$OUT/" 2>/dev/null; return 0; }
has_phase() { local p; for p in "${phases[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }
elapsed() { echo $(( $(date +%s) - $1 )); }

# NCCL: the toolkit's, else the one of the nvidia-nccl Python package
# (header for the build, library for the runs: mimo opens it with dlopen).
ncclroot=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null || true)
if [ -n "$ncclroot" ] && [ -d "$ncclroot/lib" ]; then
  export LD_LIBRARY_PATH="$ncclroot/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# cuDNN, which mimo's cudnn attention opens with dlopen at first use: the
# one of the nvidia-cudnn Python package PyTorch brings, first (as NCCL).
# cuDNN compiles its attention kernels with NVRTC when it builds a plan:
# the toolkit's, else the Python packages' (nvidia/cuda_nvrtc, or
# nvidia/cu13 for CUDA 13), after whatever the path holds already, so the
# CUDA libraries mimo and PyTorch load stay theirs.
cudnnroot=$(python3 -c "import nvidia.cudnn as c; print(list(c.__path__)[0])" 2>/dev/null || true)
if [ -n "$cudnnroot" ] && [ -d "$cudnnroot/lib" ]; then
  export LD_LIBRARY_PATH="$cudnnroot/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvrtc=(/usr/local/cuda/lib64)
while IFS= read -r dir; do
  nvrtc+=("$dir/cuda_nvrtc/lib" "$dir/cu13/lib")
done < <(python3 -c "import nvidia; print('\n'.join(nvidia.__path__))" 2>/dev/null)
for dir in "${nvrtc[@]}"; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir"
done

# A later phase on a machine without the build (a fresh one) builds first.
if ! has_phase build && [ ! -x "$build/bin/mimo-run" ] &&
  { has_phase tests || has_phase attention || has_phase examples || has_phase nccl ||
    has_phase bench; }; then
  note "no build in $build: building first"
  phases=(build "${phases[@]}")
fi
if [ ! -d .gpu-bundle ] && { has_phase examples || has_phase nccl || has_phase bench; }; then
  note "no .gpu-bundle/ here: run scripts/gpu-bundle.sh on a development machine and carry .gpu-bundle along (it is git-ignored, so it travels only when named)"
fi

if has_phase build; then
  t0=$(date +%s)
  json=()
  [ -f /usr/include/nlohmann/json.hpp ] || json=(-DMIMO_JSON_INCLUDE_DIR="$root/.gpu-bundle/include")
  if [ ! -f /usr/local/cuda/include/nccl.h ] && [ -f "$ncclroot/include/nccl.h" ]; then
    json+=(-DMIMO_NCCL_INCLUDE_DIR="$ncclroot/include")
  fi
  # Warnings stay warnings here: the GPU machine's host compiler may be
  # newer than the development machines' (where they are errors).
  { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DMIMO_BUILD_COMPILER=OFF -DMIMO_ENABLE_CUDA=ON -DMIMO_WERROR=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="$arch" "${json[@]}" \
      ${MIMO_GPU_CMAKE_ARGS:-} &&
    cmake --build "$build" -j "$jobs"; } >"$logs/build.log" 2>&1
  rc=$?
  echo "$rc $(elapsed $t0)" >"$logs/build.status"
  keep "$logs/build.log"
  if [ $rc -ne 0 ]; then
    tail -40 "$logs/build.log"; note "build failed (log: $logs/build.log)"; exit 1
  fi
  note "built for sm_$arch in $(elapsed $t0) s"
fi

# Nothing to check without a usable GPU (the probe says why).
if [ "$gpu" = cpu ]; then
  note "dry run: the CPU stands in for the GPU"
elif has_phase tests || has_phase attention || has_phase examples || has_phase bench; then
  # The probe runs a kernel and a GEMM: a build without this GPU's
  # architecture stops here, not in every check.
  "$build/bin/mimo-cuda-ops-check" --probe
  rc=$?
  if [ $rc -eq 77 ]; then
    note "no usable GPU here: nothing checked, no report written"; exit 2
  elif [ $rc -ne 0 ]; then
    note "the GPU is there but this build cannot run on it (sm_$arch): see the line above"; exit 1
  fi
fi

if has_phase tests; then
  t0=$(date +%s)
  ctest --test-dir "$build" -L gpu -V >"$logs/tests.log" 2>&1
  rc=$?
  echo "$rc $(elapsed $t0)" >"$logs/tests.status"
  keep "$logs/tests.log"
  sed -E 's/^[0-9]+: //' "$logs/tests.log" | grep -E "^FAIL|checks passed|tests passed|skipped" | tail -30
  [ $rc -eq 0 ] || { status=1; note "GPU tests failed (log: $logs/tests.log)"; }
  note "GPU tests: rc $rc in $(elapsed $t0) s"
fi

if has_phase attention; then
  # docs/gpu.md: attention on both backends (mimo's kernels; cuDNN's fused
  # flash attention, found through LD_LIBRARY_PATH above) against the CPU's
  # bf16 and fp32 reference, then their TFLOP/s beside PyTorch SDPA's flash
  # and cuDNN backends in the same run, bf16, causal, sequence 2k-8k, head
  # dimension 64 and 128. Each part is bounded, so the phase stays under
  # 10 minutes and a part that hangs still leaves its log.
  t0=$(date +%s)
  rc=0
  rm -f "$logs/attention-mimo.json" "$logs/attention-torch.json" # this run's only
  if [ "$gpu" = cpu ]; then
    echo "dry run: attention's backends need a GPU; not run" >"$logs/attention-check.log"
    : >"$logs/attention.md"
  else
    timeout 300 "$build/bin/mimo-cuda-ops-check" --only attention >"$logs/attention-check.log" 2>&1 ||
      { rc=1; note "attention check failed (log: $logs/attention-check.log)"; }
    timeout 120 "$build/bin/gpu_bench" --only attention --json "$logs/attention-mimo.json" \
      >"$logs/attention.md" 2>&1 || { rc=1; note "gpu_bench --only attention failed"; }
    echo >>"$logs/attention.md"
    timeout 120 python3 bench/attention_sdpa.py --json "$logs/attention-torch.json" \
      >>"$logs/attention.md" 2>"$logs/attention-torch.log" ||
      { rc=1; note "bench/attention_sdpa.py failed"; tail -5 "$logs/attention-torch.log"; }
    python3 bench/attention_table.py "$logs/attention-mimo.json" "$logs/attention-torch.json" \
      >>"$logs/attention.md"
  fi
  # A dry run leaves the phase "not run" in the report.
  [ "$gpu" = cpu ] || echo "$rc $(elapsed $t0)" >"$logs/attention.status"
  [ $rc -eq 0 ] || status=1
  keep "$logs/attention-check.log" "$logs/attention.md"
  grep -E "^FAIL|checks passed|^dry run" "$logs/attention-check.log" | tail -20
  cat "$logs/attention.md"
  note "attention: rc $rc in $(elapsed $t0) s"
fi

if has_phase examples; then
  # mimo-run itself: each example plan (compiled by mimoc on the
  # development machine: scripts/gpu-bundle.sh) on cuda vs --reference on
  # the CPU and on cuda, 3 steps, loss and grad norm within 1e-4.
  t0=$(date +%s)
  : >"$logs/examples.log"
  out="$logs/examples"
  [ "$fresh" = 1 ] && rm -rf "$out"
  mkdir -p "$out"
  plans=(.gpu-bundle/plans/*.plan.json)
  if [ ! -f "${plans[0]}" ]; then
    echo "no plans in .gpu-bundle/plans (run scripts/gpu-bundle.sh)" >>"$logs/examples.log"
    plans=()
  fi
  # The CPU references (one core each; plain-loop GEMMs without OpenBLAS)
  # all at once in the background, the GPU runs meanwhile.
  # A plan already run (both GPU runs exit 0, the CPU reference written)
  # is not run again: a call cut off at its limit resumes.
  done_before() {
    [ "$(tr -d '\n' <"$out/$1.cuda.rc" 2>/dev/null)" = "00" ] &&
      [ -s "$out/$1.ref-cpu.jsonl" ] && [ -s "$out/$1.cuda.jsonl" ]
  }
  pids=()
  for plan in "${plans[@]}"; do
    name=$(basename "$plan" .plan.json)
    done_before "$name" && continue
    "$build/bin/mimo-run" "$plan" --steps 3 --device cpu --reference \
      --metrics "$out/$name.ref-cpu.jsonl" >"$out/$name.ref-cpu.out" 2>&1 &
    pids+=($!)
  done
  for plan in "${plans[@]}"; do
    name=$(basename "$plan" .plan.json)
    done_before "$name" && continue
    "$build/bin/mimo-run" "$plan" --steps 3 --device "$gpu" --metrics "$out/$name.cuda.jsonl" \
      >"$out/$name.cuda.out" 2>&1
    echo $? >"$out/$name.cuda.rc"
    "$build/bin/mimo-run" "$plan" --steps 3 --device "$gpu" --reference \
      --metrics "$out/$name.ref-cuda.jsonl" >"$out/$name.ref-cuda.out" 2>&1
    echo $? >>"$out/$name.cuda.rc"
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  ok=0 total=0
  for plan in "${plans[@]}"; do
    name=$(basename "$plan" .plan.json)
    total=$((total + 1))
    if [ "$(tr -d '\n' <"$out/$name.cuda.rc")" = "00" ] &&
      python3 tests/e2e/compare_metrics.py "$out/$name.cuda.jsonl" "$out/$name.ref-cpu.jsonl" 3 1e-4 \
        >>"$logs/examples.log" 2>&1 &&
      python3 tests/e2e/compare_metrics.py "$out/$name.ref-cuda.jsonl" "$out/$name.ref-cpu.jsonl" 3 1e-4 \
        >>"$logs/examples.log" 2>&1 &&
      # On a GPU every step's metrics carry its MFU (docs/runtime.md).
      python3 -c "import json,sys
for l in map(json.loads, open(sys.argv[1])):
    assert sys.argv[2] == 'cpu' or 0 < l['mfu'] < 1, l" "$out/$name.cuda.jsonl" "$gpu" \
        >>"$logs/examples.log" 2>&1; then
      ok=$((ok + 1))
      echo "ok   $name: $(grep -o 'step 3/3.*' "$out/$name.cuda.out") (cuda); cuda and cuda --reference match the cpu --reference" >>"$logs/examples.log"
    else
      status=1
      { echo "FAIL $name"; tail -3 "$out/$name".*.out; } >>"$logs/examples.log"
    fi
  done
  echo "$ok of $total examples match" >>"$logs/examples.log"
  echo "$([ "$ok" = "$total" ] && [ "$total" -gt 0 ] && echo 0 || echo 1) $(elapsed $t0)" >"$logs/examples.status"
  keep "$logs/examples.log"
  cat "$logs/examples.log"
fi

if has_phase nccl; then
  # docs/gpu.md nccl at world size 1 (a machine with one GPU cannot hold two
  # ranks of one NCCL communicator): the one-rank plan trains like its
  # reference, and an injected fault ends the run with exit 2.
  t0=$(date +%s)
  out="$logs/nccl"
  mkdir -p "$out"
  plan=.gpu-bundle/nccl/single.plan.json
  rc=0
  if [ "$gpu" = cpu ]; then
    echo "dry run: the nccl backend needs a GPU; not run" >"$logs/nccl.log"
  elif [ ! -f "$plan" ]; then
    echo "FAIL no $plan (run scripts/gpu-bundle.sh)" >"$logs/nccl.log"; rc=1
  else
    : >"$logs/nccl.log"
    "$build/bin/mimo-run" "$plan" --steps 3 --device cpu --reference \
      --metrics "$out/ref.jsonl" >"$out/ref.out" 2>&1
    "$build/bin/mimo-run" "$plan" --steps 3 --backend nccl \
      --metrics "$out/nccl.jsonl" --trace "$out/nccl.trace.json" >"$out/nccl.out" 2>&1
    r=$?
    if [ $r -eq 0 ] && python3 tests/e2e/compare_metrics.py "$out/nccl.jsonl" "$out/ref.jsonl" 3 1e-4 \
        >>"$logs/nccl.log" 2>&1; then
      echo "ok   one rank on --backend nccl matches --reference: $(grep -o 'step 3/3.*' "$out/nccl.out")" >>"$logs/nccl.log"
    else
      rc=1; { echo "FAIL --backend nccl (rc $r)"; tail -5 "$out/nccl.out"; } >>"$logs/nccl.log"
    fi
    MIMO_INJECT_FAULT=0:2 "$build/bin/mimo-run" "$plan" --steps 3 --backend nccl \
      >"$out/fault.out" 2>&1
    r=$?
    if [ $r -eq 2 ] && grep -q "injected fault" "$out/fault.out"; then
      echo "ok   injected fault under nccl: exit 2, $(grep -o 'rank 0 failed.*' "$out/fault.out" | head -1)" >>"$logs/nccl.log"
    else
      rc=1; { echo "FAIL injected fault under nccl (rc $r)"; tail -5 "$out/fault.out"; } >>"$logs/nccl.log"
    fi
    # Preemption under nccl (docs/runtime.md): SIGTERM once two steps are
    # logged ends the run with exit 3 and its step saved from the GPU;
    # --save --load resumes there and its next two steps match the same
    # steps of an uninterrupted run.
    rm -rf "$out/ck" "$out/pre.jsonl" "$out/resumed.jsonl"
    "$build/bin/mimo-run" "$plan" --steps 100000 --backend nccl --save "$out/ck" \
      --metrics "$out/pre.jsonl" >"$out/pre.out" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
      [ "$({ wc -l <"$out/pre.jsonl"; } 2>/dev/null || echo 0)" -ge 2 ] && break
      kill -0 $pid 2>/dev/null || break
      sleep 0.1
    done
    kill -TERM $pid 2>/dev/null
    wait $pid
    r=$?
    n=$(grep -o 'stopped by a signal after step [0-9]*' "$out/pre.out" | grep -o '[0-9]*$')
    if [ $r -eq 3 ] && [ -n "$n" ] && [ -d "$out/ck/step-$n" ] &&
      "$build/bin/mimo-run" "$plan" --steps $((n + 2)) --backend nccl --save "$out/ck" \
        --load "$out/ck" --metrics "$out/resumed.jsonl" >"$out/resumed.out" 2>&1 &&
      "$build/bin/mimo-run" "$plan" --steps $((n + 2)) --backend nccl \
        --metrics "$out/straight.jsonl" >"$out/straight.out" 2>&1 &&
      python3 - "$out/resumed.jsonl" "$out/straight.jsonl" $n >>"$logs/nccl.log" 2>&1 <<'PY'
import json, sys
resumed = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
straight = {l["step"]: l for l in map(json.loads, open(sys.argv[2])) if l}
n = int(sys.argv[3])
assert [l["step"] for l in resumed] == [n + 1, n + 2], resumed
for l in resumed:
    for key in ("loss", "grad_norm"):
        ref = straight[l["step"]][key]
        assert abs(l[key] - ref) <= 1e-6 * max(abs(ref), 1e-12), (l, ref)
PY
    then
      echo "ok   SIGTERM under nccl: exit 3 after step $n, saved; --load resumed steps $((n + 1))-$((n + 2)) match an uninterrupted run" >>"$logs/nccl.log"
    else
      rc=1; { echo "FAIL preemption under nccl (rc $r, step ${n:-none})"; tail -3 "$out/pre.out" "$out/resumed.out" 2>/dev/null; } >>"$logs/nccl.log"
    fi
  fi
  # A dry run leaves the phase "not run" in the report.
  [ "$gpu" = cpu ] || echo "$rc $(elapsed $t0)" >"$logs/nccl.status"
  [ $rc -eq 0 ] || status=1
  keep "$logs/nccl.log"
  cat "$logs/nccl.log"
fi

if has_phase hf; then
  # docs/pretrained.md, a real client: transformers loads the exported folders and
  # computes the loss mimo computed from them (bench/hf_client.py check).
  t0=$(date +%s)
  rc=0
  rm -f "$logs/hf.json"
  if [ ! -d .gpu-bundle/hf-client ]; then
    echo "FAIL no .gpu-bundle/hf-client (run scripts/gpu-bundle.sh)" >"$logs/hf.md"; rc=1
  else
    timeout 300 python3 bench/hf_client.py check .gpu-bundle/hf-client \
      --json "$logs/hf.json" >"$logs/hf.md" 2>"$logs/hf.log"
    rc=$?
    [ $rc -eq 0 ] || tail -5 "$logs/hf.log"
  fi
  # Without transformers (rc 2, a dry run's machine) the phase is not run.
  [ $rc -eq 2 ] || echo "$rc $(elapsed $t0)" >"$logs/hf.status"
  [ $rc -eq 0 ] || [ $rc -eq 2 ] || status=1
  keep "$logs/hf.md" "$logs/hf.json"
  cat "$logs/hf.md"
  note "hf: rc $rc in $(elapsed $t0) s"
fi

if has_phase bench && [ "$gpu" != cpu ]; then
  # Each part is skipped when its result is there from an earlier call
  # (unless MIMO_GPU_CHECK_FRESH=1), so a call cut off at its limit resumes.
  t0=$(date +%s)
  todo() { [ "$fresh" = 1 ] || [ ! -s "$1" ]; }
  if todo "$logs/bench.status"; then
    "$build/bin/gpu_bench" >"$logs/bench.md" 2>&1
    rc=$?
    echo "$rc $(elapsed $t0)" >"$logs/bench.status"
  fi
  read -r rc _ <"$logs/bench.status"
  keep "$logs/bench.md"
  cat "$logs/bench.md"
  [ "$rc" = 0 ] || { status=1; note "benchmarks failed"; }
  # The device profile mimoc simulate and mimoc tune take (docs/tune.md),
  # before the longer benchmarks: a call cut off at its limit still has it.
  if todo "$logs/profile.json"; then
    "$build/bin/mimo-run" --calibrate --device cuda -o "$logs/profile.json" ||
      { status=1; note "mimo-run --calibrate failed"; }
  fi
  keep "$logs/profile.json"
  # Overlapped gradient buckets against one all-reduce after the backward.
  if todo "$logs/overlap.md"; then
    python3 bench/overlap.py --build "$build" --device cuda --plans .gpu-bundle/overlap \
      --rounds 2 --steps 4 \
      --out "$logs/overlap.md" >"$logs/overlap.log" 2>&1 ||
      { status=1; note "overlap benchmark failed"; tail -5 "$logs/overlap.log"; }
  fi
  keep "$logs/overlap.md"
  # A ~1.3B language model: mimo against PyTorch eager (bf16 and fp32).
  if [ -f .gpu-bundle/1b/lm-1b.plan.json ] && todo "$logs/train-1b.md"; then
    python3 bench/train_1b.py --build "$build" --plan .gpu-bundle/1b/lm-1b.plan.json \
      --explain .gpu-bundle/1b/explain.json --steps 4 --timeout 240 \
      --out "$logs/train-1b.md" --json "$logs/train-1b.json" >"$logs/train-1b.log" 2>&1 ||
      { status=1; note "1B benchmark failed"; tail -5 "$logs/train-1b.log"; }
  fi
  keep "$logs/train-1b.md" "$logs/train-1b.json"
  # The same model with recomputation (selective, full): peak memory, step.
  if [ -f .gpu-bundle/1b/lm-1b-full.plan.json ] && todo "$logs/recompute.md"; then
    { echo "## Recomputation on the ~1.3B model (bench/recompute_gpu.sh)"; echo
      bench/recompute_gpu.sh "$build" "$gpu"; } >"$logs/recompute.md" 2>&1 ||
      { status=1; note "recomputation benchmark failed"; }
  fi
  keep "$logs/recompute.md"
fi

if has_phase report; then
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
  memory=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader 2>/dev/null | head -1)
  count=$(nvidia-smi -L 2>/dev/null | wc -l)
  [ -n "$name" ] || name="unknown GPU"
  slug=$(echo "$name" | tr 'A-Z' 'a-z' | grep -oE '[a-z][0-9]{3,4}' | head -1)
  [ -n "$slug" ] || slug=$(echo "$name" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
  # The bundle's commit (made with the tree here); a device copy's git may
  # be another's.
  commit=$(cat .gpu-bundle/commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
  report=bench/results/gpu-$slug.md
  summary=bench/results/gpu-$slug.json
  # not a GPU's figures
  [ "$gpu" = cpu ] && report=$logs/gpu-dry-run.md && summary=$logs/gpu-dry-run.json
  stamp=$(date -u '+%Y-%m-%d %H:%M UTC')
  if [ "$gpu" != cpu ] && [ -f "$logs/profile.json" ]; then
    cp "$logs/profile.json" "bench/results/profile-$slug.json"
    keep "bench/results/profile-$slug.json"
  fi
  mkdir -p "$(dirname "$report")"
  phase_line() {
    local f=$logs/$1.status
    if [ -f "$f" ]; then read -r rc secs <"$f"; echo "- $1: $([ "$rc" = 0 ] && echo passed || echo "FAILED (rc $rc)") in ${secs} s"
    else echo "- $1: not run"; fi
  }
  {
    echo "# GPU check: $name"
    echo
    echo "Written by \`scripts/gpu-check.sh\`; every figure below was measured in that run."
    echo
    echo "- device: $name ($count visible, $memory), driver $driver"
    echo "- CUDA: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | head -1)"
    echo "- commit: $commit"
    echo "- date: $stamp"
    echo "- host: $(nproc) cores"
    echo
    echo "## Phases"
    echo
    for p in build tests attention examples nccl hf bench; do phase_line $p; done
    echo
    echo "## GPU tests (\`ctest -L gpu\`)"
    echo
    echo '```'
    if [ -f "$logs/tests.log" ]; then
      # Every check's line (ctest -V prefixes each with the test's number).
      sed -E 's/^[0-9]+: //' "$logs/tests.log" |
        grep -E "^(ok  |FAIL|seed |mimo-cuda-[a-z-]+: |[A-Za-z0-9]+: cuda )"
    else
      echo "not run"
    fi
    echo '```'
    echo
    echo "## Attention: both backends against the CPU reference (\`mimo-cuda-ops-check --only attention\`)"
    echo
    echo '```'
    if [ -f "$logs/attention-check.log" ]; then
      grep -E "^(ok  |FAIL|seed |dry run|mimo-cuda-[a-z-]+: )" "$logs/attention-check.log" ||
        tail -5 "$logs/attention-check.log"
    else
      echo "not run"
    fi
    echo '```'
    echo
    [ -s "$logs/attention.md" ] && cat "$logs/attention.md" || echo "Attention benchmarks: not run"
    echo
    echo "## mimo-run on every example: cuda vs --reference"
    echo
    echo '```'
    [ -f "$logs/examples.log" ] && cat "$logs/examples.log" || echo "not run"
    echo '```'
    echo
    echo "## nccl backend (one rank)"
    echo
    echo '```'
    [ -f "$logs/nccl.log" ] && cat "$logs/nccl.log" || echo "not run"
    echo '```'
    echo
    echo "## A real client: transformers loads mimo's --export-hf"
    echo
    [ -f "$logs/hf.status" ] && cat "$logs/hf.md" || echo "not run"
    echo
    [ -f "$logs/bench.md" ] && cat "$logs/bench.md" || echo "Benchmarks: not run"
    echo
    [ -f "$logs/overlap.md" ] && sed 's/^# /## /' "$logs/overlap.md" || echo "Overlap benchmark: not run"
    echo
    [ -f "$logs/train-1b.md" ] && cat "$logs/train-1b.md" || echo "1B training benchmark: not run"
    echo
    [ -f "$logs/recompute.md" ] && cat "$logs/recompute.md" || echo "Recomputation benchmark: not run"
    echo
    if [ -f "$logs/profile.json" ]; then
      echo "Device profile for \`mimoc simulate/tune --profile\`: bench/results/profile-$slug.json"
    else
      echo "Device profile: not measured"
    fi
    echo
    echo "Headline figures (docs/gpu.md; null: not measured in this run): $summary"
  } >"$report"
  note "wrote $report"
  # The headline figures of this run beside it, from the phases' JSON.
  python3 bench/gpu_summary.py --logs "$logs" --device "$name" --commit "$commit" \
    --date "$stamp" -o "$summary" || { status=1; note "bench/gpu_summary.py failed"; }
  note "wrote $summary"
  if [ -n "${OUT:-}" ]; then
    cp "$report" "$summary" "$OUT/" 2>/dev/null
    tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$build" gpu-check 2>/dev/null
  fi
fi
exit $status
