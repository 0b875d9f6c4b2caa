#!/usr/bin/env bash
# The sanitizer jobs of CI (docs/limits.md), each in its own build directory:
#   asan  the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer
#         (UBSan halts on the first report, so the test fails), build-asan/
#   tsan  the runtime's threaded tests (local backend, communicators,
#         executor, training) under ThreadSanitizer, build-tsan/: runtime
#         only, no MPI (its library is not instrumented), no OpenMP (its
#         runtime is not either, and would report false races)
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
    # The suite but two tests that only train every layout again (the GPU
    # checks' CPU dry run of the layouts, and the NCCL posting-order check):
    # their own logic runs in the release job, the layouts' trainings here.
    ctest --test-dir build-asan --output-on-failure --no-tests=error \
      -j "$(nproc)" --timeout 1500 \
      -E '^(gpu-checks-dry-run-train|NcclOrder\.)'
    ;;
  tsan)
    cmake -S . -B build-tsan "${common[@]}" -DMIMO_SANITIZE=thread \
      -DMIMO_BUILD_COMPILER=OFF -DMIMO_WITH_MPI=OFF \
      -DCMAKE_DISABLE_FIND_PACKAGE_OpenMP=ON >/dev/null
    cmake --build build-tsan -j "$(nproc)"
    # Every runtime test: communicators, executor, training, checkpoints and
    # the end-to-end layouts on the local backend (threads). The GPU checks'
    # CPU dry runs repeat those trainings ten times slower, and the training
    # recipes (frozen parts, parameter groups) run the same threads as the
    # layouts, and so do the layouts that vary only the architecture (GQA,
    # biases, tied embeddings, vision towers, uneven stages), bf16 (the
    # layouts again with other arithmetic on the same threads: 9 of TSan's
    # 16 minutes), the recomputation check (nine runs of three layouts
    # again; the layout that recomputes stays), the NCCL posting-order
    # check (every layout again, 6 minutes; Overlap.* keeps the bucket
    # channels' threads under TSan), the memory plan's tests (the same
    # layouts again, measuring what shadow memory distorts) and the
    # distributed optimizer's comparisons and checkpoints (its scattered
    # buckets' threads stay: GradBuckets.*), ring CP's memory at 4096 tokens
    # and its packed and bf16 comparisons (RingCp.EqualsAllGather keeps the
    # ring's threads and channel), the two four-stage language pipelines
    # (the two-stage ones run the same threads), and the tests that train
    # the layouts again to compare something other than threads (held-out
    # evaluation, data order, checkpoint resumes and reshards, the chunked
    # head, zero bubble and interleaved against 1F1B: 7 minutes each alone;
    # their colocated layouts stay, and the interleaved ones beside them):
    # all left to ASan.
    ctest --test-dir build-tsan --output-on-failure --no-tests=error \
      -j "$(nproc)" --timeout 1500 \
      -E '^(gpu-checks-dry-run|NcclOrder\.|Recipes\.|Recompute\.|MemoryPlan\.|Bf16\.|DistributedOptimizer\.|Evaluation\.|DataOrder\.|ChunkedHead\.|ZeroBubble\.|Interleaved\.|Checkpoint\.(ShardedBf16|ReshardsTheDistributed|ResumesBitIdentically|ReshardsBetweenPipeline|ATiedEmbedding)|RingCp\.(KeepsLess|EqualsAllGatherPacked)|Layouts/Equivalence\.MatchesReference/(Llama3|MultiQuery|Biases|Tied|Clip|Siglip|Uneven|LanguagePp4|ZeroBubbleLanguagePp4|InterleavedLanguagePp4|InterleavedTied))'
    ;;
  *)
    echo "sanitizers.sh: unknown job '$job'; use asan or tsan" >&2
    exit 1
    ;;
  esac
  echo "sanitizers.sh: $job passed in $(($(date +%s) - start)) s"
done
