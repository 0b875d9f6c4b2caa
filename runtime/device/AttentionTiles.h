//===- AttentionTiles.h - The tile plan of one attention call ---*- C++ -*-===//
//
// The one description of how attention is cut into tiles, read by every
// device: the CPU's BLAS panels (cpu/Attention.cpp) and the CUDA device's
// fused kernels (FlashBodies.h). A call's queries and keys carry a position
// and a segment (a sample, a packed sequence, or a sample's padding); query
// i may attend key j iff they share a segment and, when causal, kpos[j] <=
// qpos[i] (the reference, cpu/Kernels.h). So, on the host, once per call's
// token set (a micro-batch's every layer shares it):
//
//  1. Regroup by segment: a query only meets keys of its own segment, and
//     the segments of an [S, B] lane are interleaved token by token.
//  2. Within a segment, order queries and keys by position (CP zigzag and
//     gathered keys arrive out of order). Then the keys a query may attend
//     are a prefix of its segment's keys, ending at queryEnd: one number
//     per query is the whole mask, causal or not, dense or packed.
//  3. Cut each segment's queries into blocks of kQueryBlock (the forward
//     and dq: a block meets the keys up to its last query's end, so causal
//     work is about half) and its keys into blocks of kKeyBlock (dk and dv:
//     a block meets the queries whose end passes its first key, a suffix).
//
// Everything lands in one int64 array, so a device takes the plan in one
// upload; a PlanView names its parts where the device reads them. Every
// output row belongs to exactly one block: no atomics, and each sum runs
// in a fixed order, so results are bitwise reproducible.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_ATTENTIONTILES_H
#define MIMO_RUNTIME_DEVICE_ATTENTIONTILES_H

#include <cstdint>
#include <vector>

namespace mimo::device::tiles {

inline constexpr int64_t kQueryBlock = 64;
inline constexpr int64_t kKeyBlock = 64;
/// Fields of a block: first (ordered) row, rows, first and end (ordered)
/// index of the other side it meets.
inline constexpr int64_t kBlockFields = 4;

/// The mask in the form fused-attention libraries take (cuDNN's): `batch`
/// segments of `seqQ` queries and `seqK` keys each, ordered query s of
/// segment b the token b * qStrideBatch + s * qStrideSeq (keys likewise
/// with their strides), every key attended (full) or, when `causal`, keys
/// 0..s (seqQ == seqK: the diagonal at the top left). A lane of samples
/// [S, B] interleaved token by token is batch B, strides 1 and B. batch
/// == 0: the plan is not of this form (packed samples of unequal lengths,
/// padding, CP's zigzag halves, keys no query sees): only mimo's kernels
/// take it.
struct DenseMask {
  int64_t batch = 0, seqQ = 0, seqK = 0;
  int64_t qStrideBatch = 0, qStrideSeq = 0, kStrideBatch = 0, kStrideSeq = 0;
  bool causal = false;
  bool dense() const { return batch > 0; }
};

/// A plan's arrays in a device's memory (the host's for the CPU).
///  - queryOrder[Tq]: query tokens, by segment, each segment by position;
///  - keyOrder[Tk]: key tokens likewise; keys of segments without queries
///    last;
///  - queryEnd[Tq]: ordered query i attends ordered keys [b, queryEnd[i]),
///    b its segment's first key (== b: no key; o = 0, lse = -inf);
///  - queryBlocks[queryBlockCount][4]: first query, rows, first key, end
///    key (its last query's end);
///  - keyBlocks[keyBlockCount][4]: first key, rows, first query, end query
///    (the queries that attend any of its keys; none: dk = dv = 0).
struct PlanView {
  const int64_t *queryOrder = nullptr, *keyOrder = nullptr, *queryEnd = nullptr,
                *queryBlocks = nullptr, *keyBlocks = nullptr;
  int64_t Tq = 0, Tk = 0, queryBlockCount = 0, keyBlockCount = 0;
  DenseMask dense;
};

/// The plan on the host: counts and the packed array
/// [queryOrder | keyOrder | queryEnd | queryBlocks | keyBlocks].
struct Plan {
  int64_t Tq = 0, Tk = 0, queryBlockCount = 0, keyBlockCount = 0;
  std::vector<int64_t> packed;
  DenseMask dense;

  /// The views of `packed` copied to `device` (or of packed itself).
  PlanView view(const int64_t *device) const;
  PlanView hostView() const { return view(packed.data()); }
  /// (query, key) pairs the mask allows: the work attention does.
  int64_t pairs() const;
};

/// The plan of queries (qpos, qseg)[Tq] against keys (kpos, kseg)[Tk].
Plan plan(const int64_t *qpos, const int64_t *qseg, const int64_t *kpos,
          const int64_t *kseg, int64_t Tq, int64_t Tk, bool causal);

} // namespace mimo::device::tiles

#endif // MIMO_RUNTIME_DEVICE_ATTENTIONTILES_H
