//===- MemoryPlan.h - What each rank keeps in memory -----------*- C++ -*-===//
//
// docs/tune.md: per rank, the parameters it holds and the bytes of their
// weights, gradients and AdamW moments (fp32, each parameter padded to 64
// values as the stages lay them out), and the peak of its transient bytes:
// the activations its forwards keep for their backwards while 1F1B has
// microbatches in flight (two bytes a value under precision "bf16", which
// keeps them packed), plus the largest working set of one backward, or
// the staging of the gradient all-reduce, whichever is larger. The
// distributed optimizer keeps the moments of 1/(dp·cp) of the values. Token
// counts are those of the batch settings (each sample seq_length tokens;
// encoders at their expected modality-token counts, as config/Flops.h).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_COST_MEMORYPLAN_H
#define MIMO_RUNTIME_COST_MEMORYPLAN_H

#include "runtime/config/ModelConfig.h"
#include "runtime/plan/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mimo {

struct RankMemory {
  /// The parameters the rank holds, and of them those that train (not
  /// frozen).
  int64_t params = 0, trainableParams = 0;
  int64_t paramBytes = 0, gradBytes = 0, optimizerBytes = 0;
  int64_t activationBytes = 0;
  int64_t totalBytes = 0;
};

/// The last language stage computes its head, the loss and their gradient
/// in chunks of rows holding at most this many bytes of fp32 logits (and
/// as many of their gradient), so no step keeps logits for every token.
inline constexpr int64_t kLogitChunkBytes = int64_t(32) << 20;

/// The gradient buckets' size by default (mimo-run --grad-bucket-mb): the
/// DP x CP reduction runs in pieces of this many bytes beside the backward
/// (docs/gpu.md overlap), as the cost model assumes.
inline constexpr int64_t kGradBucketBytes = int64_t(25) << 20;

/// The rows of one chunk, out of `rows`, at `vocabLocal` logits a row.
inline int64_t logitChunkRows(int64_t rows, int64_t vocabLocal,
                              int64_t chunkBytes = kLogitChunkBytes) {
  const int64_t perRow = 4 * (vocabLocal > 0 ? vocabLocal : 1);
  const int64_t fit = chunkBytes / perRow > 0 ? chunkBytes / perRow : 1;
  return rows < fit ? (rows > 0 ? rows : 1) : fit;
}

/// Under precision "bf16" the head's input and weight gradients run as one
/// GEMM each over a group of chunks, their bf16 logit gradients kept for
/// the group: a micro-batch's rows unless these would pass this many
/// bytes (the GEMMs' K is then the group's rows, not a chunk's).
inline constexpr int64_t kHeadGradientBytes = int64_t(512) << 20;

/// The rows of one such group (a multiple of chunkRows, or all `rows`).
inline int64_t headGradientRows(int64_t rows, int64_t vocabLocal,
                                int64_t chunkRows,
                                int64_t groupBytes = kHeadGradientBytes) {
  const int64_t perRow = 2 * (vocabLocal > 0 ? vocabLocal : 1);
  const int64_t chunks = groupBytes / perRow / chunkRows;
  const int64_t fit = (chunks > 0 ? chunks : 1) * chunkRows;
  return rows < fit ? (rows > 0 ? rows : 1) : fit;
}

/// The estimate of every rank (index = rank).
std::vector<RankMemory> memoryPlan(const Topology &topology,
                                   const ModelConfig &config);

/// "1.5 GiB", "312 MiB".
std::string formatBytes(double bytes);

} // namespace mimo

#endif // MIMO_RUNTIME_COST_MEMORYPLAN_H
