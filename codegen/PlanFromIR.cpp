//===- PlanFromIR.cpp - The plan file's contents from the final IR --------===//

#include "codegen/PlanFromIR.h"

#include "passes/TopologyFromIR.h"
#include "runtime/plan/BuildTopology.h"

namespace mimo {

mlir::FailureOr<Plan> planFromIR(ir::ModelOp model, const ModelConfig &config) {
  mlir::FailureOr<PlanParts> parts = readPlanParts(model);
  if (mlir::failed(parts))
    return mlir::failure();
  // The IR's topology and model.json's come from the one builder
  // (runtime/plan/BuildTopology.h); a difference is a compiler bug, caught
  // here rather than as a plan the runtime refuses.
  std::string error;
  std::optional<Topology> expected = buildTopology(config, &error);
  if (!expected)
    return model.emitError(error), mlir::failure();
  if (std::optional<std::string> difference =
          topologyDifference(*expected, parts->topology))
    return model.emitError("internal error: the compiled topology differs "
                           "from model.json's at ")
               << *difference << "; please report it",
           mlir::failure();
  Plan plan;
  plan.config = config;
  plan.topology = std::move(parts->topology);
  plan.programs = std::move(parts->programs.programs);
  plan.rankProgram = std::move(parts->rankProgram);
  return plan;
}

} // namespace mimo
