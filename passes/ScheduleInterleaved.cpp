//===- ScheduleInterleaved.cpp - mimo-schedule-interleaved ----------------===//
//
// Interleaved 1F1B (docs/plan.md): the language module's stages of a model
// that asks for it get `virtual_stages`, and the encoders ahead of them run
// every forward first, both from the shared rule (runtime/plan/Roles.cpp
// assignStages, with the language module's chunks); the program builder
// (runtime/plan/Programs.cpp, schedule/InterleavedOrder.h) turns them into the
// chunks' lockstep order.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "passes/TopologyFromIR.h"

#include "mlir/IR/Builders.h"

namespace mimo {

#define GEN_PASS_DEF_SCHEDULEINTERLEAVED
#include "passes/Passes.h.inc"

namespace {

class ScheduleInterleavedPass
    : public impl::ScheduleInterleavedBase<ScheduleInterleavedPass> {
public:
  void runOnOperation() override {
    bool ok = true;
    getOperation().walk([&](ir::ModelOp model) {
      mlir::FailureOr<std::optional<Topology>> read =
          scheduledTopology(model, [](const PipelineSchedule &schedule) {
            return schedule.chunked();
          });
      if (mlir::failed(read)) {
        ok = false;
        return;
      }
      if (!*read)
        return;
      std::optional<Topology> &topology = *read;
      ir::MicrobatchOp batch = model.getMicrobatch();
      const size_t lm = topology->languageIndex();
      // The chunks come from the mimo.microbatch (readTopologySource).
      const int64_t chunks = topology->modules[lm].virtualStages;
      const int64_t pp = topology->modules[lm].grid.size(Dim::PP);
      if (pp < 2 ||
          topology->microbatches % topology->schedule->microbatchMultiple(pp)) {
        batch.emitOpError("the interleaved schedule needs a language "
                          "pipeline (pp >= 2) and microbatches in groups of "
                          "pp, found pp ")
            << pp << " and " << topology->microbatches << " microbatches";
        ok = false;
        return;
      }
      assignStages(*topology);
      mlir::Builder builder(&getContext());
      for (ir::StageOp op : model.getBody().getOps<ir::StageOp>())
        for (const StageTopology &stage : topology->stages) {
          if (topology->modules[stage.module].name != op.getModule() ||
              stage.pp != static_cast<int64_t>(op.getPp()))
            continue;
          if (stage.module == lm)
            op.setVirtualStagesAttr(builder.getI64IntegerAttr(chunks));
          const int64_t M = topology->microbatches;
          op.setWarmupAttr(builder.getI64IntegerAttr(stage.warmup));
          op.setSteadyAttr(builder.getI64IntegerAttr(M - stage.warmup));
          op.setCooldownAttr(builder.getI64IntegerAttr(stage.warmup));
        }
    });
    if (!ok)
      signalPassFailure();
  }
};

} // namespace
} // namespace mimo
