#!/usr/bin/env bash
# Fuzzes every reader (docs/limits.md) with libFuzzer under ASan + UBSan: builds
# tests/fuzz/ with clang into build-fuzz/ and runs each target for SECONDS
# (default 600), JOBS targets at a time (default: the number of cores).
# The corpus grows in build-fuzz/corpus/TARGET, seeded from
# tests/fuzz/corpus/TARGET; a crash is copied to tests/fuzz/crashes/TARGET/,
# where ctest replays it on every build once committed with its fix.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   targets: model-json plan jsonl indexed safetensors checkpoint-state hf-folder
#            feature-file
# Needs clang and libFuzzer (Debian: clang-19 libfuzzer-19-dev).
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
((${#targets[@]})) ||
  targets=(model-json plan jsonl indexed safetensors checkpoint-state hf-folder
    feature-file)
jobs=${JOBS:-$(nproc)}

cxx=""
for candidate in clang++-19 clang++; do
  if command -v "$candidate" >/dev/null; then cxx=$candidate; break; fi
done
if [ -z "$cxx" ]; then
  echo "fuzz.sh: no clang++; install clang-19 and libfuzzer-19-dev" >&2
  exit 1
fi
cc=${cxx/clang++/clang}
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" \
  -DMIMO_FUZZ=ON -DMIMO_SANITIZE=address,undefined -DMIMO_BUILD_COMPILER=OFF \
  -DMIMO_ENABLE_CUDA=OFF -DMIMO_WITH_MPI=OFF -DMIMO_WERROR=OFF \
  -DCMAKE_DISABLE_FIND_PACKAGE_OpenMP=ON >/dev/null || exit 1
cmake --build build-fuzz -j "$(nproc)" \
  --target $(printf 'mimo-fuzz-%s ' "${targets[@]}") || exit 1

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=detect_leaks=1:allow_user_poisoning=0 # see scripts/sanitizers.sh
run() {
  local target=$1
  local corpus=build-fuzz/corpus/$target crashes=tests/fuzz/crashes/$target
  mkdir -p "$corpus" "$crashes"
  build-fuzz/tests/fuzz/mimo-fuzz-"$target" "$corpus" "tests/fuzz/corpus/$target" \
    -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -max_len=65536 \
    -artifact_prefix="$crashes/" -print_final_stats=1 \
    >"build-fuzz/$target.log" 2>&1
  local rc=$?
  local runs
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "build-fuzz/$target.log" |
    grep -o '[0-9]*$')
  local found
  found=$(find "$crashes" -type f -newer "build-fuzz/$target.log.start" | wc -l)
  echo "fuzz.sh: $target: ${runs:-?} executions in ${seconds} s, exit $rc," \
    "$found new crash(es) in $crashes"
}
pids=()
for target in "${targets[@]}"; do
  touch "build-fuzz/$target.log.start"
  run "$target" &
  pids+=($!)
  while (($(jobs -rp | wc -l) >= jobs)); do sleep 1; done
done
wait "${pids[@]}"
