//===- Training.h - Training runs the e2e tests share -----------*- C++ -*-===//
//
// A scratch folder for checkpoints, and a run of a model from nothing or
// resumed from a checkpoint, on the local backend.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_TESTS_E2E_TRAINING_H
#define MIMO_TESTS_E2E_TRAINING_H

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/exec/Executor.h"
#include "tests/e2e/Layouts.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

} // namespace mimo::test

#endif // MIMO_TESTS_E2E_TRAINING_H
