//===- Limits.h - The largest sizes mimo accepts ---------------*- C++ -*-===//
//
// One source of truth for every bound a reader enforces (docs/limits.md): the
// compiler refuses at compile time what the runtime could not run, and no
// product of accepted sizes overflows 64 bits (every element count below
// kMaxElements, so a count times 8 bytes times a few buffers stays far from
// 2^63).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SUPPORT_LIMITS_H
#define MIMO_RUNTIME_SUPPORT_LIMITS_H

#include <cstdint>

namespace mimo {

/// Ranks of a world (and of any one grid dimension).
inline constexpr int64_t kMaxRanks = int64_t(1) << 20;
/// Microbatches per step: the runtime's message tags hold 14 bits.
inline constexpr int64_t kMaxMicrobatches = 16384;
/// Modules of a model: the message tags hold 7 bits.
inline constexpr int64_t kMaxModules = 128;
/// Chunks of layers per pipeline rank (virtual_stages): the message tags
/// hold 3 bits beside the module's 7.
inline constexpr int64_t kMaxVirtualStages = 8;
/// Samples of a global microbatch.
inline constexpr int64_t kMaxMicroBatchSize = int64_t(1) << 20;
/// Positions of a sequence.
inline constexpr int64_t kMaxSeqLength = int64_t(1) << 24;
/// hidden_size and feature_dim.
inline constexpr int64_t kMaxWidth = int64_t(1) << 20;
/// ffn_hidden_size.
inline constexpr int64_t kMaxFfnWidth = int64_t(1) << 22;
/// vocab_size (token ids are stored as 32-bit integers by Megatron's data).
inline constexpr int64_t kMaxVocab = (int64_t(1) << 31) - 1;
/// num_layers.
inline constexpr int64_t kMaxLayers = int64_t(1) << 16;
/// Optimizer steps, warm-up and decay steps.
inline constexpr int64_t kMaxSteps = int64_t(1) << 40;
/// The elements of any one tensor, and the parameters of any one module:
/// 2^50 fp32 values are 4 PiB, beyond every machine.
inline constexpr int64_t kMaxElements = int64_t(1) << 50;

/// Values per member from which an fp32 sum over more than two members
/// runs as a reduce-scatter and an all-gather (Comm::allReduceSum; the
/// cost model prices it so).
inline constexpr int64_t kSplitAllReduce = 16384;

} // namespace mimo

#endif // MIMO_RUNTIME_SUPPORT_LIMITS_H
