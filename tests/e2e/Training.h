//===- Training.h - Training runs the e2e tests share -----------*- C++ -*-===//
//
// A scratch folder for checkpoints, a run of a model from nothing or
// resumed from a checkpoint, and a layout against its one-rank reference,
// on the local backend.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_TESTS_E2E_TRAINING_H
#define MIMO_TESTS_E2E_TRAINING_H

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/exec/Executor.h"
#include "tests/e2e/Layouts.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include <unistd.h>

namespace mimo::test {

/// A fresh directory under the system's temporary directory.
inline std::string scratchDir(const std::string &name) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("mimo-" + name + "-" + std::to_string(::getpid())))
                        .string();
  std::filesystem::remove_all(dir);
  return dir;
}

inline exec::RunResult trainFrom(const nlohmann::json &model, int64_t steps,
                                 const std::string &saveDir = "",
                                 const std::string &loadDir = "") {
  Plan plan = planOf(model);
  exec::RunOptions options;
  options.steps = steps;
  options.timeoutSeconds = 120;
  options.saveDir = saveDir;
  if (!loadDir.empty()) {
    std::string error;
    std::optional<exec::Checkpoint> checkpoint =
        exec::openCheckpoint(loadDir, plan.config, error);
    EXPECT_TRUE(checkpoint) << error;
    if (checkpoint)
      options.resume =
          std::make_shared<const exec::Checkpoint>(std::move(*checkpoint));
  }
  return exec::runLocal(plan, options);
}

/// Runs `plan` and its one-rank reference (docs/runtime.md; with
/// `referenceOptions` when given, else `options`); both must succeed.
inline void
runWithReference(const Plan &plan, const exec::RunOptions &options,
                 exec::RunResult &distributed, exec::RunResult &reference,
                 const exec::RunOptions *referenceOptions = nullptr) {
  distributed = exec::runLocal(plan, options);
  ASSERT_EQ(distributed.exitCode, 0) << distributed.error;
  std::string error;
  std::optional<Plan> single = exec::referencePlan(plan.config, &error);
  ASSERT_TRUE(single) << error;
  ASSERT_EQ(single->topology.worldSize, 1);
  reference =
      exec::runLocal(*single, referenceOptions ? *referenceOptions : options);
  ASSERT_EQ(reference.exitCode, 0) << reference.error;
}

/// Trains `model` distributed (with `options`) and as the reference for 3
/// steps and compares every step (relative `tolerance`: 1e-5 in fp32,
/// docs/runtime.md; 1e-2 in bf16, docs/gpu.md).
inline void expectMatchesReference(const nlohmann::json &model,
                                   int64_t expectedWorld,
                                   double tolerance = 1e-5,
                                   exec::RunOptions options = {}) {
  Plan plan = planOf(model);
  ASSERT_EQ(plan.topology.worldSize, expectedWorld);
  options.steps = 3;
  options.timeoutSeconds = 120;
  exec::RunOptions defaults; // the reference's
  defaults.steps = 3;
  defaults.timeoutSeconds = 120;
  exec::RunResult distributed, reference;
  ASSERT_NO_FATAL_FAILURE(
      runWithReference(plan, options, distributed, reference, &defaults));
  ASSERT_EQ(distributed.steps.size(), 3u);
  ASSERT_EQ(reference.steps.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    const exec::StepMetrics &d = distributed.steps[s], &r = reference.steps[s];
    EXPECT_TRUE(std::isfinite(d.loss) && d.loss > 0) << d.loss;
    EXPECT_LE(relative(d.loss, r.loss), tolerance)
        << "step " << s + 1 << ": loss " << d.loss << " vs reference "
        << r.loss;
    EXPECT_LE(relative(d.gradNorm, r.gradNorm), tolerance)
        << "step " << s + 1 << ": grad norm " << d.gradNorm << " vs reference "
        << r.gradNorm;
    EXPECT_EQ(d.tokens, r.tokens);
    // Sparse layers: the aux loss too (the global microbatch's routing
    // statistics, whatever the layout).
    EXPECT_EQ(d.auxLoss.has_value(), r.auxLoss.has_value());
    if (d.auxLoss && r.auxLoss) {
      EXPECT_LE(relative(*d.auxLoss, *r.auxLoss), tolerance)
          << "step " << s + 1 << ": aux loss " << *d.auxLoss << " vs reference "
          << *r.auxLoss;
    }
  }
  // Training moves: the first loss is that of an untrained model, about
  // ln V (uniform over the vocabulary), and three steps lower it.
  double lnV = std::log(double(plan.config.language().vocabSize));
  EXPECT_NEAR(distributed.steps[0].loss, lnV, 0.15 * lnV);
  EXPECT_LT(distributed.steps[2].loss, distributed.steps[0].loss - 0.02)
      << "the loss does not fall: " << distributed.steps[0].loss << " -> "
      << distributed.steps[2].loss;
}

} // namespace mimo::test

#endif // MIMO_TESTS_E2E_TRAINING_H
