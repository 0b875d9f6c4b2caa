#!/usr/bin/env bash
# The sanitizer jobs of CI (docs/limits.md), each in its own build directory:
#   asan  the suite under AddressSanitizer + UndefinedBehaviorSanitizer
#         (UBSan halts on the first report, so the test fails), but the
#         tests that only train layouts again, build-asan/
#   tsan  the runtime's unit tests and its threads' trainings (local
#         backend, communicators, channels, executor) under
#         ThreadSanitizer, build-tsan/: runtime only, no MPI (its library
#         is not instrumented), no OpenMP (its runtime is not either, and
#         would report false races)
# Both builds compile all but the CPU kernels (-O3) and the verifier and
# simulator (-O1) at -O0 (cmake/MimoTarget.cmake, runtime/CMakeLists.txt):
# the tests spend their time in the kernels.
# Usage: scripts/sanitizers.sh [asan] [tsan]   (default: both). Run
# scripts/setup.sh first (it installs the packages).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=("$@")
((${#jobs[@]})) || jobs=(asan tsan)

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DMIMO_ENABLE_CUDA=OFF
  -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir "${launcher[@]}")
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# allocator_may_return_null: the tests ask for impossible sizes on purpose
# and expect the nothrow allocation to fail (not ASan to abort).
# allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons a new slab and
# unpoisons each allocation only where its inline code is compiled with
# ASan (our passes, through MLIR's headers); Debian's libMLIR allocates from
# the same slabs uninstrumented, so whichever side starts a slab decides,
# and a report follows wherever the two mix (a slab our code started,
# filled by libMLIR). ASan's own checks are unaffected.
export ASAN_OPTIONS=detect_leaks=1:strict_init_order=1:allocator_may_return_null=1:allow_user_poisoning=0
# Processes started by mpirun (and only those) skip the leak check: Open
# MPI keeps its own allocations until exit by design, and unloads its
# plugins before LeakSanitizer looks, so no suppression can name them. The
# same code runs leak-checked on the local backend.
export OMPI_MCA_mca_base_env_list="ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:allow_user_poisoning=0"
# Tests whose measurements shadow memory distorts (peak RSS) skip them.
export MIMO_SANITIZED=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

for job in "${jobs[@]}"; do
  start=$(date +%s)
  case "$job" in
  asan)
    cmake -S . -B build-asan "${common[@]}" -DMIMO_SANITIZE=address,undefined \
      -DMIMO_REQUIRE_ALL_TESTS=ON >/dev/null
    cmake --build build-asan -j "$(nproc)"
    echo "sanitizers.sh: asan built in $(($(date +%s) - start)) s"
    # Every unit, pass, fuzz-replay and script test (the CLI's faults, flags
    # and bad inputs among them: what the sanitizers are for), and every
    # end-to-end test that runs code no other one runs. Left to the release
    # job: the tests that train layouts again only to compare something
    # other than the code's own behaviour, whose code the layouts here run
    # once each: the GPU checks' CPU dry run of the layouts, the NCCL
    # posting-order check, the examples under mpirun against --reference
    # (mpirun's ranks run the layouts' code; mpi-comm-check keeps the MPI
    # backend here), zero bubble and interleaved against 1F1B, the
    # distributed optimizer, bf16 and recomputation against their plain
    # layouts, the memory plan's measurements, data order across layouts,
    # frozen parts on every layout, the bf16 masters' and pipeline-split
    # checkpoints, and the fp32 architecture layouts (GQA, MQA, biases, tied
    # heads, vision towers: Bf16.ArchitecturesMatchTheirReference runs each
    # of them here).
    ctest --test-dir build-asan --output-on-failure --no-tests=error \
      -j "$(nproc)" --timeout 1500 \
      -E '^(gpu-checks-dry-run-train|NcclOrder\.|mimo-run-cli-trainings|Interleaved\.|ZeroBubble\.|DistributedOptimizer\.|Bf16\.Layouts|Recompute\.|MemoryPlan\.|DataOrder\.|Recipes\.EveryLayout|Checkpoint\.(ShardedBf16|ReshardsBetween)|Layouts/Equivalence\.MatchesReference/(Llama3|MultiQuery|Biases|Tied|Clip|Siglip))'
    ;;
  tsan)
    cmake -S . -B build-tsan "${common[@]}" -DMIMO_SANITIZE=thread \
      -DMIMO_BUILD_COMPILER=OFF -DMIMO_WITH_MPI=OFF \
      -DCMAKE_DISABLE_FIND_PACKAGE_OpenMP=ON >/dev/null
    cmake --build build-tsan -j "$(nproc)"
    echo "sanitizers.sh: tsan built in $(($(date +%s) - start)) s"
    # Every unit test of the runtime (communicators, channels, executor,
    # bounded exit, gradient buckets; not the GPU checks' CPU dry runs: the
    # layouts and the ops again, ten times slower), then the end-to-end
    # tests that run each kind of thread the runtime starts: the bucket
    # channels (Overlap.*), ring CP's channel, a fault stopping every rank,
    # and the layouts that between them run every pattern of messages
    # between rank threads (fan-in with TP, SP, PP and an encoder at DP4;
    # fan-out; colocated, alone and under PP2 with each schedule; CP across
    # a bridge and with THD packing; the distributed optimizer's scattered
    # buckets; expert parallelism's rows between DP lanes inside a layer).
    # The other trainings run the same threads in other arithmetic, data or
    # checkpoints, left to the release and ASan jobs.
    ctest --test-dir build-tsan --output-on-failure --no-tests=error \
      -j "$(nproc)" --timeout 1500 -LE e2e -E '^gpu-checks-dry-run'
    ctest --test-dir build-tsan --output-on-failure --no-tests=error \
      -j "$(nproc)" --timeout 1500 -L e2e \
      -R '^(Overlap\.|RingCp\.EqualsAllGather$|Runtime\.|Layouts/Equivalence\.MatchesReference/(FanInEncoderDp4ToLanguageTp2Pp2WithSp|FanOutEncoderTp2Pp2ToLanguageDp4|Colocated|ColocatedLanguagePp2|ZeroBubbleColocatedLanguagePp2|InterleavedColocatedLanguagePp2|ContextParallelAcrossABridgeWithSp|PackedThdWithCp2|DistributedOptimizerColocatedTiedPp2|MoeEp2FanOutDp4)$)'
    ;;
  *)
    echo "sanitizers.sh: unknown job '$job'; use asan or tsan" >&2
    exit 1
    ;;
  esac
  echo "sanitizers.sh: $job passed in $(($(date +%s) - start)) s"
done
