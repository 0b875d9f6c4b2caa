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
#include "runtime/plan/BuildTopology.h"
#include "runtime/plan/Plan.h"

#include "mlir/Support/LogicalResult.h"

namespace mimo {

/// What the IR says the topology is a function of (its grids, modules
/// and mimo.microbatch); emits an error when the IR lacks one.
mlir::FailureOr<TopologySource> readTopologySource(ir::ModelOp model);

/// The model's topology up to `parts`: buildTopology of
/// readTopologySource, the one builder model.json's topology comes from.
/// The IR's mimo.bridge and mimo.stage ops (which the passes wrote from the
/// same builder) must agree with it; emits an error naming the pass to run
/// (again) and fails when a part is missing or disagrees.
mlir::FailureOr<Topology> readTopology(ir::ModelOp model, TopologyParts parts);

/// The grids' topology of a model whose `mimo.microbatch` asks for a
/// schedule for which `applies` holds, for a pass that refines
/// `mimo-schedule-1f1b`'s stages (the zero-bubble and interleaved passes):
/// std::nullopt for other schedules, failure (reported on the model) when
/// it has no `mimo.stage` yet or its grids do not read.
mlir::FailureOr<std::optional<Topology>>
scheduledTopology(ir::ModelOp model,
                  bool (*applies)(const PipelineSchedule &schedule));

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
