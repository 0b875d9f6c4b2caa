//===- PlanFromIR.cpp - The plan file's contents from the final IR --------===//

#include "codegen/PlanFromIR.h"

#include "passes/TopologyFromIR.h"

namespace mimo {

mlir::FailureOr<Plan> planFromIR(ir::ModelOp model, const ModelConfig &config) {
  mlir::FailureOr<PlanParts> parts = readPlanParts(model);
  if (mlir::failed(parts))
    return mlir::failure();
  Plan plan;
  plan.config = config;
  plan.topology = std::move(parts->topology);
  plan.programs = std::move(parts->programs.programs);
  plan.rankProgram = std::move(parts->rankProgram);
  return plan;
}

} // namespace mimo
