//===- PlanFromIR.h - The plan file from the final IR -----------*- C++ -*-===//
//
// Codegen (docs/plan.md): after mimo-verify-plan, the IR holds everything the
// plan file needs: grids, bridges, stages, sharding and per-role programs.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_CODEGEN_PLANFROMIR_H
#define MIMO_CODEGEN_PLANFROMIR_H

#include "ir/MimoOps.h"
#include "runtime/plan/PlanFile.h"

#include "mlir/Support/LogicalResult.h"

namespace mimo {

/// The plan of the (single) compiled model in `module`; `config` is the
/// model.json it came from (embedded in the plan). Emits errors on IR that
/// has not been through the whole pipeline.
mlir::FailureOr<Plan> planFromIR(ir::ModelOp model, const ModelConfig &config);

} // namespace mimo

#endif // MIMO_CODEGEN_PLANFROMIR_H
