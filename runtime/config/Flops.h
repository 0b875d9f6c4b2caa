//===- Flops.h - Model FLOPs of a training step ----------------*- C++ -*-===//
//
// The one count of model FLOPs (the metrics' `tflops`, docs/runtime.md;
// `mimoc explain`'s `model_flops_per_step`): the multiply-adds of the model's
// matrix products, 2 FLOPs each, forward plus backward = 3 x forward (the usual
// MFU convention: no recomputation, no elementwise work, the causal mask's
// skipped half not counted). A module with frozen parameters (`freeze`)
// counts the work done: a frozen weight makes no weight gradient, and a
// frozen bottom of an encoder's first stage runs no backward at all.
//
// Per token, forward: language layers 2 (4 H^2 + 3 H F), head 2 H V;
// encoder patch 2 D H, layers 2 (4 H^2 + 2 H F), projection 2 (H O + O^2).
// Attention, forward, per layer: 4 H per (query, key) pair attended:
// S (S + 1) / 2 pairs per causal sequence, c^2 per encoder sample of c
// tokens.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CONFIG_FLOPS_H
#define MIMO_RUNTIME_CONFIG_FLOPS_H

#include "runtime/config/ModelConfig.h"

#include <cstdint>
#include <vector>

namespace mimo {

/// Forward FLOPs of the language module over `sequences` causal sequences
/// whose lengths sum to `tokens` and whose S (S + 1) / 2 sum to `pairs`.
double languageForwardFlops(const ModuleConfig &language, double tokens,
                            double pairs);

/// Forward FLOPs of an encoder over `tokens` modality tokens whose samples'
/// squared counts sum to `squares`; `outputHidden` is the language's hidden
/// size (the projection's width).
double encoderForwardFlops(const ModuleConfig &encoder, int64_t outputHidden,
                           double tokens, double squares);

/// E[c] and E[c^2] of the modality-token count c of one sample for the
/// `encoder`-th encoder (model order): its synthetic [min, max] range taken
/// uniformly, zero for text-only samples; files: seq_length / 8 (a stated
/// guess).
struct TokenMoments {
  double mean = 0, square = 0;
};
TokenMoments expectedModalityTokens(const ModelConfig &config, size_t encoder);

/// E[x] and E[x^2] of x uniform over the integers [min, max].
TokenMoments uniformMoments(int64_t min, int64_t max);

/// E[L] and E[L^2] of a language sample's length L in tokens: packed
/// synthetic samples are uniform in [seq_length / 4, seq_length] (exec/
/// Data.cpp) and a packed row holds only their tokens; otherwise every
/// sample is seq_length long (the padding computed too).
TokenMoments expectedSampleLength(const ModelConfig &config);

/// Each module's training FLOPs of a step (model order), counted as
/// modelFlopsPerStep counts them; they sum to it.
std::vector<double> moduleFlopsPerStep(const ModelConfig &config);

/// Training FLOPs of a step, as the model and batch settings predict it:
/// every sample seq_length tokens (the padding counted), each encoder's
/// synthetic token count at its expected value (files: seq_length / 8 per
/// sample and encoder, a stated guess).
double modelFlopsPerStep(const ModelConfig &config);

} // namespace mimo

#endif // MIMO_RUNTIME_CONFIG_FLOPS_H
