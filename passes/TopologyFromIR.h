//===- TopologyFromIR.h - Read a model's topology out of its IR -*- C++ -*-===//
//
// The passes after mimo-insert-bridges, codegen and explain work on the
// MLIR-free mimo::Topology (runtime/plan/Plan.h). These functions read it
// from the ops the earlier passes left: grids, bridges, stages, programs.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_PASSES_TOPOLOGYFROMIR_H
#define MIMO_PASSES_TOPOLOGYFROMIR_H

#include "ir/MimoOps.h"
#include "runtime/plan/Plan.h"

#include "mlir/Support/LogicalResult.h"

namespace mimo {

/// What must already be in the IR.
enum class TopologyParts : unsigned {
  Grids = 0,   // modules, layout, batch sizes, sharding
  Bridges = 1, // + mimo.bridge ops
  Stages = 2,  // + mimo.stage ops and total_stages
};

/// Reads the model's topology; emits an error (naming the pass to run
/// first) and fails when a required part is missing.
mlir::FailureOr<Topology> readTopology(ir::ModelOp model, TopologyParts parts);

/// The grids' topology of a model whose `mimo.microbatch` asks for
/// `schedule`, for a pass that refines `mimo-schedule-1f1b`'s stages (the
/// zero-bubble and interleaved passes): std::nullopt when the model asks
/// for another schedule, failure (reported on the model) when it has no
/// `mimo.stage` yet or its grids do not read.
mlir::FailureOr<std::optional<Topology>>
scheduledTopology(ir::ModelOp model, llvm::StringRef schedule);

/// The model's mimo.program ops as programs, with the op of every
/// instruction (for diagnostics).
struct ProgramsFromIR {
  std::vector<Program> programs;
  std::vector<ir::ProgramOp> programOps;
  std::vector<std::vector<mlir::Operation *>> instrOps;
};
mlir::FailureOr<ProgramsFromIR> readPrograms(ir::ModelOp model,
                                             const Topology &topology);

/// The topology, the programs and each rank's program: everything
/// mimo-verify-plan checks and codegen writes.
struct PlanParts {
  Topology topology;
  ProgramsFromIR programs;
  std::vector<int32_t> rankProgram;
};
mlir::FailureOr<PlanParts> readPlanParts(ir::ModelOp model);

} // namespace mimo

#endif // MIMO_PASSES_TOPOLOGYFROMIR_H
