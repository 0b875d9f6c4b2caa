//===- ShapeRules.h - The divisibility rules of a layout -------*- C++ -*-===//
//
// The one statement of each rule that makes a module's shapes fit its grid:
// heads, FFN width and vocabulary divisible by tp, layers by pp, the global
// micro-batch by every dp, the sequence by the CP/SP sharding factor,
// encoder cp 1, no dense mask under CP. Each returns the problem's message
// ("" when the rule holds); mimo-assign-grids, mimo-slice-batch and
// mimo-shard-sequence report it at the IR location of the field, the plan
// loader at its JSON pointer, with the same words. A module's
// `pipeline_layers` replaces "layers by pp" with pipelineLayersRule
// (config/Parameters.h, below this room: model.json's reader states it too).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_PLAN_SHAPERULES_H
#define MIMO_RUNTIME_PLAN_SHAPERULES_H

#include <cstdint>
#include <string>

namespace mimo {

/// "encoder 'images'" or "language module 'language'".
std::string describeModule(const std::string &name, bool language);

/// `quantity` (an arch field, e.g. num_heads) divisible by `dim` (tp, pp).
std::string divisibleRule(const std::string &module,
                          const std::string &quantity, int64_t value,
                          const std::string &dim, int64_t size);

/// The global micro-batch splits evenly over the module's dp lanes.
std::string microBatchRule(const std::string &module, int64_t microBatchSize,
                           int64_t dp);

/// Context parallelism is for the language module only.
std::string encoderCpRule(const std::string &module, int64_t cp);

/// seq_length divisible by the CP zigzag / SP scatter factor (unpacked).
std::string sequenceShardRule(const std::string &module, int64_t seqLength,
                              int64_t cp, int64_t tp, bool sequenceParallel);

/// A dense mask cannot be split into zigzag chunks.
std::string denseMaskRule(const std::string &module, int64_t cp);

} // namespace mimo

#endif // MIMO_RUNTIME_PLAN_SHAPERULES_H
