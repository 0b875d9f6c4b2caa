//===- VerifyPlan.cpp - mimo-verify-plan ----------------------------------===//
//
// Proves the programs in the IR correct with the shared simulator
// (runtime/plan/Plan.h: verifyPrograms): every instruction applies to its
// rank, every send meets exactly one matching receive, and the simulated
// streams run to the end. Problems are reported at the instructions.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "passes/TopologyFromIR.h"

namespace mimo {

#define GEN_PASS_DEF_VERIFYPLAN
#include "passes/Passes.h.inc"

namespace {

class VerifyPlanPass : public impl::VerifyPlanBase<VerifyPlanPass> {
public:
  void runOnOperation() override {
    bool ok = true;
    getOperation().walk([&](ir::ModelOp model) {
      if (mlir::failed(verify(model)))
        ok = false;
    });
    if (!ok)
      signalPassFailure();
  }

private:
  mlir::LogicalResult verify(ir::ModelOp model) {
    mlir::FailureOr<PlanParts> parts = readPlanParts(model);
    if (mlir::failed(parts))
      return mlir::failure();
    const ProgramsFromIR &programs = parts->programs;
    std::vector<PlanProblem> problems =
        verifyPrograms(parts->topology, programs.programs, parts->rankProgram);
    for (const PlanProblem &problem : problems) {
      mlir::Operation *anchor = model;
      if (!problem.places.empty() && problem.places[0].instr >= 0)
        anchor =
            programs
                .instrOps[problem.places[0].program][problem.places[0].instr];
      mlir::InFlightDiagnostic diag = anchor->emitError(problem.message);
      for (size_t i = 1; i < problem.places.size(); ++i) {
        const PlanProblem::Place &place = problem.places[i];
        if (place.instr < 0)
          continue;
        diag.attachNote(programs.instrOps[place.program][place.instr]->getLoc())
            << "rank " << place.rank << " is here (program '"
            << programs.programs[place.program].role << "')";
      }
    }
    return mlir::success(problems.empty());
  }
};

} // namespace
} // namespace mimo
