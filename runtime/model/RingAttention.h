//===- RingAttention.h - Context parallelism's ring ------------*- C++ -*-===//
//
// docs/model.md "Context parallelism", `cp_comm: "ring"` (Transformer
// Engine's p2p): each CP rank's keys and values travel around the CP group,
// one block a step, while the rank computes the attention of its queries
// over the block in hand (the block's own tile plan: the same positions
// and segments as the all-gathered keys, so zigzag balance, THD packing and
// causal masks are those of all_gather). The forward merges the blocks'
// outputs by their log-sum-exps (Device::attentionMerge); the backward runs
// each block's flash backward with the merged output and log-sum-exp (exact:
// softmax's normaliser is global), summing dq in place while each block's
// dk and dv travel with it and come home after the last step. A rank holds
// its own block and at most two others (the one in hand and the one
// arriving); with a channel (comm/Channel.h) each transfer runs while the
// attention of the block before it computes.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_MODEL_RINGATTENTION_H
#define MIMO_RUNTIME_MODEL_RINGATTENTION_H

#include "runtime/comm/Channel.h"
#include "runtime/model/Model.h"
#include "runtime/model/ModelOps.h"

#include <vector>

namespace mimo::exec {

using ops::AttentionPlan;

/// One rank's place in the ring and how its attention reads a block.
struct Ring {
  Device *dev = nullptr;
  comm::Comm *comm = nullptr;
  /// Posts the transfers, overlapped (null: each step's transfer blocks).
  comm::Channel *channel = nullptr;
  /// The CP group (world ranks, CP-rank order) and this rank's index.
  std::vector<int64_t> group;
  int64_t own = 0;
  /// The tag of every ring message (their order pairs them).
  int64_t tag = 0;
  bool bf16 = false;
  /// Query heads and key-value groups (this rank's TP share), their size.
  int64_t heads = 0, kvHeads = 0, headDim = 0;
};

/// The attention of this rank's queries q [Tq, heads x d] (bf16 bits under
/// bf16) over every CP rank's keys and values, whose block r has the tile
/// plan blocks[r] (queries against CP rank r's keys); k, v are this rank's
/// block [Tk, KV groups x d]. Writes o (fp32, or bf16 bits) and lse
/// [heads, Tq].
void ringAttentionForward(const Ring &ring,
                          const std::vector<AttentionPlan> &blocks,
                          const Tensor &q, const Tensor &k, const Tensor &v,
                          int64_t Tq, Tensor &o, Tensor &lse);

/// Its backward from dout (as o): dq [Tq, heads x d] and this rank's
/// block's dk, dv [Tk, KV groups x d], summed over every rank's queries;
/// fp32.
void ringAttentionBackward(const Ring &ring,
                           const std::vector<AttentionPlan> &blocks,
                           const Tensor &q, const Tensor &k, const Tensor &v,
                           const Tensor &o, const Tensor &lse,
                           const Tensor &dout, int64_t Tq, Tensor &dq,
                           Tensor &dk, Tensor &dv);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_MODEL_RINGATTENTION_H
