//===- InterleavedOrder.h - Interleaved 1F1B, in lockstep ------*- C++ -*-===//
//
// docs/plan.md "Interleaved 1F1B". A pipeline of P ranks holds v chunks of
// the layers each (virtual stage chunk x P + stage). Every rank runs its
// chunks' forwards and backwards in Megatron's order (forward k: chunk
// (k mod Pv) / P of microbatch (k / Pv) P + k mod P; backward k: the chunks
// reversed; warm-up min(2 (P - stage - 1) + (v - 1) P, Mv) forwards, then
// one forward and one backward at a time, then the remaining backwards).
//
// The messages go in lockstep: in step t each rank runs the next work of
// its order whose input arrived in an earlier step (at most one forward and
// one backward), then posts one batch: what it computed, and the receives
// of exactly what its neighbours send in step t. Every batch of step t
// meets only batches of step t, so no plan of this shape can deadlock
// however the ranks' orders differ, which the verifier confirms. With equal
// forwards and backwards a rank idles (P - 1) / (vM + P - 1) of the step.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SCHEDULE_INTERLEAVEDORDER_H
#define MIMO_RUNTIME_SCHEDULE_INTERLEAVEDORDER_H

#include <cstdint>
#include <vector>

namespace mimo {

/// One forward or backward of a chunk, or a pipeline message of it.
struct ChunkWork {
  enum Kind : uint8_t {
    Forward,
    Backward,
    SendAct,
    RecvAct,
    SendGrad,
    RecvGrad
  };
  Kind kind;
  int32_t chunk, mb;
};

/// One lockstep step of a rank: its work (a forward, a backward, or both in
/// that order), then its batch of messages (sends, then receives); either
/// may be empty.
struct InterleavedStep {
  std::vector<ChunkWork> work, messages;
};

/// Every stage's steps for `stages` ranks, `chunks` chunks each and
/// `microbatches` (a multiple of `stages`). Steps run in lockstep: step t of
/// every stage belongs together.
std::vector<std::vector<InterleavedStep>>
interleavedSteps(int64_t stages, int64_t chunks, int64_t microbatches);

/// The most microbatches of each chunk whose forward stage `stage` has run
/// and whose backward it has not (the activations it keeps), one entry per
/// chunk.
std::vector<int64_t> interleavedHeld(int64_t stages, int64_t chunks,
                                     int64_t microbatches, int64_t stage);

/// Forward k's chunk and microbatch in Megatron's order (backward k:
/// chunk reversed).
int32_t interleavedChunk(int64_t k, int64_t stages, int64_t chunks,
                         bool forward);
int32_t interleavedMicrobatch(int64_t k, int64_t stages, int64_t chunks);

} // namespace mimo

#endif // MIMO_RUNTIME_SCHEDULE_INTERLEAVEDORDER_H
