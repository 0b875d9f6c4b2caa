//===- ParamGroups.h - What AdamW updates, and how -------------*- C++ -*-===//
//
// docs/model.md "Optimizer": a module's frozen parameters (`freeze`) are
// never updated and take no share of the gradient norm; weight decay skips
// biases and norm weights (parameters of one row) unless
// `train.decay_all`; a module's `lr_mult` scales its learning rate. A
// stage's parameters live in flat buffers (model/Model.h), so each setting
// covers stretches of them: one AdamW call per stretch.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_EXEC_PARAMGROUPS_H
#define MIMO_RUNTIME_EXEC_PARAMGROUPS_H

#include "runtime/config/ModelConfig.h"
#include "runtime/model/Model.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace mimo::exec {

/// A stretch [begin, end) of a stage's flat buffers updated with one
/// setting.
struct OptimizerRun {
  int64_t begin = 0, end = 0;
  bool decay = true;
  bool operator==(const OptimizerRun &o) const {
    return begin == o.begin && end == o.end && decay == o.decay;
  }
};

struct ParamGroups {
  /// What AdamW updates, adjacent stretches of one setting merged.
  std::vector<OptimizerRun> trainable;
  /// Stretches of frozen parameters (after the trainable ones: no moments,
  /// no gradient of their own, model/Model.h); their values never change.
  std::vector<std::pair<int64_t, int64_t>> frozen;
  /// This rank's elements of each kind.
  int64_t trainableElements = 0, frozenElements = 0;
};

/// Whether Megatron's rule decays a parameter of `globalRows` rows.
inline bool decayed(int64_t globalRows, const TrainConfig &train) {
  return train.decayAll || globalRows > 1;
}

/// The groups of a stage's parameters (named "module.local") of `module`.
/// With no weight decay configured every trainable stretch is one run.
ParamGroups paramGroups(const std::vector<Param> &params,
                        const ModuleConfig &module, const TrainConfig &train);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_EXEC_PARAMGROUPS_H
