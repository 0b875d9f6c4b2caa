//===- PlanFile.h - The plan file: write, load, validate -------*- C++ -*-===//
//
// docs/plan.md: one versioned JSON document with the model config, the grids,
// the communicator groups, the bridges, the schedule, the sharding and the
// per-role instruction streams. The loader trusts nothing: it re-derives the
// topology from the embedded model and rejects any field that disagrees,
// then re-verifies the programs (send/receive matching, no deadlock).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_PLAN_PLANFILE_H
#define MIMO_RUNTIME_PLAN_PLANFILE_H

#include "runtime/config/ModelConfig.h"
#include "runtime/json/Diagnostic.h"
#include "runtime/plan/Plan.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mimo {

struct Plan {
  ModelConfig config;
  Topology topology;
  std::vector<Program> programs;
  /// Program index of each rank.
  std::vector<int32_t> rankProgram;
};

/// The shape checks of docs/model-json.md, docs/data.md, docs/plan.md that make
/// a model trainable (heads, ffn and vocabulary divisible by tp, layers by pp,
/// the micro-batch by every dp, the sequence by the CP/SP factor, encoder cp 1,
/// no dense mask with CP), with JSON pointers into model.json.
/// mimo-assign-grids reports the same at IR locations when compiling; the plan
/// loader checks them again because a plan's embedded model can be edited.
std::vector<Diagnostic> modelShapeErrors(const ModelConfig &config);

/// The topology a model compiles to (grids, bridges, stages, sharding),
/// from the same formulas the passes use. Fails with a message when the
/// layout or the bridge lanes are invalid (the compiler reports those with
/// locations first).
std::optional<Topology> buildTopology(const ModelConfig &config,
                                      std::string *error);

/// A whole plan from a model: topology and programs. Used by tests and
/// benchmarks that skip the MLIR pipeline; mimoc builds the same plan
/// through the passes.
std::optional<Plan> buildPlan(const ModelConfig &config, std::string *error);

/// The plan document (docs/plan.md).
nlohmann::ordered_json planToJson(const Plan &plan);
/// Sections of it, shared with `mimoc explain`.
nlohmann::ordered_json bridgeJson(const Topology &topology,
                                  const BridgeTopology &bridge);
nlohmann::ordered_json scheduleJson(const Topology &topology);
nlohmann::ordered_json shardsJson(const Topology &topology);
nlohmann::ordered_json instrJson(const Topology &topology, const Instr &instr);

struct PlanLoadResult {
  std::optional<Plan> plan;
  std::vector<Diagnostic> diagnostics;
};

/// Parses and validates a plan document; `fileName` names it in messages.
PlanLoadResult loadPlan(std::string_view text, std::string_view fileName);
PlanLoadResult loadPlanDocument(const nlohmann::json &document,
                                std::string_view fileName);

/// The first place where `found` differs from `expected`, below JSON
/// pointer `pointer`: the place and what differs there.
std::optional<std::pair<std::string, std::string>>
jsonDifference(const nlohmann::json &expected, const nlohmann::json &found,
               const std::string &pointer);

/// Whether `document` looks like a plan (has "format": "mimo-plan").
bool isPlanDocument(const nlohmann::json &document);

} // namespace mimo

#endif // MIMO_RUNTIME_PLAN_PLANFILE_H
