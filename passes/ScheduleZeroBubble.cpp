//===- ScheduleZeroBubble.cpp - mimo-schedule-zero-bubble -----------------===//
//
// ZB-H1 over the multi-module 1F1B (docs/plan.md, zero bubble): every
// pipelined stage of a model that asks for it gets its `weight_lag` from
// the shared formula (runtime/schedule/Formulas.h zeroBubbleLag), which the
// program builder (runtime/plan/Programs.cpp) turns into split backwards
// and deferred `mimo.weight_grad` instructions.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "passes/TopologyFromIR.h"

#include "mlir/IR/Builders.h"

namespace mimo {

#define GEN_PASS_DEF_SCHEDULEZEROBUBBLE
#include "passes/Passes.h.inc"

namespace {

class ScheduleZeroBubblePass
    : public impl::ScheduleZeroBubbleBase<ScheduleZeroBubblePass> {
public:
  void runOnOperation() override {
    bool ok = true;
    getOperation().walk([&](ir::ModelOp model) {
      // The stages' lags from the shared rule (runtime/plan/Roles.cpp
      // assignStages), matched to the mimo.stage ops by module and pp.
      mlir::FailureOr<std::optional<Topology>> read =
          scheduledTopology(model, [](const PipelineSchedule &schedule) {
            return schedule.splitsBackward();
          });
      if (mlir::failed(read)) {
        ok = false;
        return;
      }
      if (!*read)
        return;
      std::optional<Topology> &topology = *read;
      assignStages(*topology);
      mlir::Builder builder(&getContext());
      for (ir::StageOp op : model.getBody().getOps<ir::StageOp>())
        for (const StageTopology &stage : topology->stages)
          if (topology->modules[stage.module].name == op.getModule() &&
              stage.pp == static_cast<int64_t>(op.getPp()) &&
              stage.weightLag >= 0)
            op.setWeightLagAttr(builder.getI64IntegerAttr(stage.weightLag));
    });
    if (!ok)
      signalPassFailure();
  }
};

} // namespace
} // namespace mimo
