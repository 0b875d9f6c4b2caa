//===- PlanFromIR.cpp - The plan file's contents from the final IR --------===//

#include "codegen/PlanFromIR.h"

#include "passes/TopologyFromIR.h"

namespace mimo {

mlir::FailureOr<Plan> planFromIR(ir::ModelOp model, const ModelConfig &config) {
  mlir::FailureOr<Topology> topology =
      readTopology(model, TopologyParts::Stages);
  if (mlir::failed(topology))
    return mlir::failure();
  mlir::FailureOr<ProgramsFromIR> programs = readPrograms(model, *topology);
  if (mlir::failed(programs))
    return mlir::failure();
  std::string error;
  std::optional<std::vector<int32_t>> rankProgram =
      assignPrograms(*topology, programs->programs, &error);
  if (!rankProgram)
    return model.emitError(error), mlir::failure();
  Plan plan;
  plan.config = config;
  plan.topology = std::move(*topology);
  plan.programs = std::move(programs->programs);
  plan.rankProgram = std::move(*rankProgram);
  return plan;
}

} // namespace mimo
