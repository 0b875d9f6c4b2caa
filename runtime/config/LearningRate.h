//===- LearningRate.h - The learning rate of each step ---------*- C++ -*-===//
//
// docs/runtime.md (Megatron's warmup then decay, counted from step 1), the one
// formula the executor, the checkpoint state and the tests use:
//   t <= W:             lr * t / W
//   cosine / linear:    min + (lr - min) * f((t - W) / D) for W < t <= W + D,
//                       f(x) = (1 + cos(pi x)) / 2 or 1 - x; min after
//   constant:           lr after the warmup
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CONFIG_LEARNINGRATE_H
#define MIMO_RUNTIME_CONFIG_LEARNINGRATE_H

#include "runtime/config/ModelConfig.h"

#include <cmath>
#include <cstdint>

namespace mimo {

/// The learning rate of 1-based step `step`.
inline double learningRate(const TrainConfig &train, int64_t step) {
  const LrSchedule &s = train.lrSchedule;
  const double t = static_cast<double>(step);
  if (s.warmupSteps > 0 && step <= s.warmupSteps)
    return train.lr * t / static_cast<double>(s.warmupSteps);
  if (s.decay == "constant")
    return train.lr;
  double after = t - static_cast<double>(s.warmupSteps);
  if (after > static_cast<double>(s.decaySteps))
    return s.minLr;
  double x = after / static_cast<double>(s.decaySteps);
  double f = s.decay == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * x)) : 1.0 - x;
  return s.minLr + (train.lr - s.minLr) * f;
}

} // namespace mimo

#endif // MIMO_RUNTIME_CONFIG_LEARNINGRATE_H
