//===- SimulateReport.h - mimoc simulate's inputs and report ---*- C++ -*-===//
//
// `mimoc simulate PLAN.json [--profile P] [--cluster C] [--trace T]`: the
// predicted step of a plan (cost/Simulate.h) as a report: step time, idle
// share (the pipeline bubble), MFU, each role's busy fraction and the
// critical path. Also reads the profile and cluster arguments that
// `mimoc tune` shares.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_CODEGEN_SIMULATEREPORT_H
#define MIMO_CODEGEN_SIMULATEREPORT_H

#include "runtime/cost/CostModel.h"
#include "runtime/cost/Simulate.h"
#include "runtime/plan/PlanFile.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace mimo {

/// A built-in profile name ("cpu", "h100", "h200") or a profile file from
/// `mimo-run --calibrate`. Fails with a message naming the file and the
/// JSON pointer.
std::optional<DeviceProfile> loadProfile(const std::string &nameOrPath,
                                         std::string *error);
/// A cluster file (docs/tune.md), or the profile's default when empty.
std::optional<ClusterConfig> loadCluster(const std::string &path,
                                         const DeviceProfile &profile,
                                         std::string *error);

/// {model, profile, cluster, world_size, microbatches, step_seconds,
/// idle_share, model_flops_per_step, mfu, roles[] (ranks, busy fraction,
/// finish), ranks[] (every rank), critical_path[]}.
nlohmann::ordered_json simulationJson(const Plan &plan,
                                      const Simulation &simulation,
                                      const CostModel &costs);

/// The report for a terminal.
std::string renderSimulationText(const nlohmann::ordered_json &report);

/// Predicted MFU: model FLOPs per step over step time x ranks x peak.
double predictedMfu(const ModelConfig &config, int64_t worldSize,
                    double stepSeconds, const DeviceProfile &profile);

} // namespace mimo

#endif // MIMO_CODEGEN_SIMULATEREPORT_H
