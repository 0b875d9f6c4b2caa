#!/usr/bin/env bash
# Every phase of scripts/gpu-check.sh in one call of a device machine with a
# time budget (docs/gpu.md): the build, then the GPU tests beside the
# examples and nccl phases (they share the GPU; the CPU references use the
# host's cores), then the attention phase and the benchmarks in the time
# left, alone on the GPU; the report, its JSON, the profile and a tarball
# of every log go to $OUT whatever happens. On one
# H100 the whole check took 283 s (bench/results/gpu-h100.md).
# usage: scripts/gpu-check-one-call.sh [BUDGET_SECONDS]   (default 530)
# Run scripts/gpu-bundle.sh first and carry .gpu-bundle.
cd "$(dirname "$0")/.."
o=${OUT:-/tmp/gpu-check-out}
mkdir -p "$o"
unset OUT
t0=$(date +%s)
budget=${1:-530}
left() { echo $(($budget - ($(date +%s) - t0))); }
finish() {
  scripts/gpu-check.sh report 2>&1 | tail -2
  cp bench/results/gpu-*.md bench/results/gpu-*.json bench/results/profile-*.json "$o/" 2>/dev/null
  tar -czf "$o/logs.tgz" -C build-gpu gpu-check 2>/dev/null
  echo "one call: $(($(date +%s) - t0)) s"
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv
nvcc --version | tail -2
scripts/gpu-check.sh build 2>&1 | tail -45
[ -x build-gpu/bin/mimo-run ] || {
  cp build-gpu/gpu-check/build.log "$o/"
  exit 1
}
echo "== built at $(($(date +%s) - t0)) s"
timeout $(($(left) - 150)) scripts/gpu-check.sh examples nccl hf >/tmp/ex.out 2>&1 &
ex=$!
timeout $(($(left) - 150)) scripts/gpu-check.sh tests 2>&1 | tail -40
wait $ex
tail -30 /tmp/ex.out
pkill -f mimo-cuda-; pkill -x mimo-run; pkill -x ctest; sleep 1
echo "== checks done at $(($(date +%s) - t0)) s"
l=$(left)
[ "$l" -gt 20 ] && timeout "$l" scripts/gpu-check.sh attention bench 2>&1 | tail -80
pkill -x mimo-run; pkill -x gpu_bench
finish
