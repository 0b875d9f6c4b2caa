//===- Schedule1F1B.cpp - mimo-schedule-1f1b ------------------------------===//
//
// Places every (module, pipeline stage) in the multi-module 1F1B
// (docs/plan.md, schedule) with the shared formulas
// (runtime/schedule/Formulas.h via assignStages).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/Locations.h"
#include "passes/TopologyFromIR.h"

#include "mlir/IR/Builders.h"

namespace mimo {

#define GEN_PASS_DEF_SCHEDULE1F1B
#include "passes/Passes.h.inc"

namespace {

class Schedule1F1BPass : public impl::Schedule1F1BBase<Schedule1F1BPass> {
public:
  void runOnOperation() override {
    bool ok = true;
    getOperation().walk([&](ir::ModelOp model) {
      if (!model.getBody().getOps<ir::StageOp>().empty())
        return;
      mlir::FailureOr<Topology> topology =
          readTopology(model, TopologyParts::Grids);
      if (mlir::failed(topology)) {
        ok = false;
        return;
      }
      // The schedule's stages and warm-ups; mimo-schedule-zero-bubble
      // and mimo-schedule-interleaved add weight lags and chunks.
      assignStages(*topology);
      mlir::OpBuilder builder(model.getBody().front().getTerminator());
      llvm::SmallVector<mlir::Location> gridLocs;
      for (ir::EncoderOp encoder : model.getEncoders())
        gridLocs.push_back(encoder.getGridOp().getLoc());
      gridLocs.push_back(model.getLanguage().getGridOp().getLoc());
      int64_t mbs = topology->microbatches;
      for (const StageTopology &stage : topology->stages)
        builder.create<ir::StageOp>(
            ir::fieldLoc(gridLocs[stage.module], "pp"),
            mlir::FlatSymbolRefAttr::get(&getContext(),
                                         topology->modules[stage.module].name),
            builder.getI64IntegerAttr(stage.pp),
            builder.getI64IntegerAttr(stage.stage),
            builder.getI64IntegerAttr(stage.warmup),
            builder.getI64IntegerAttr(mbs - stage.warmup),
            builder.getI64IntegerAttr(stage.warmup),
            /*weight_lag=*/mlir::IntegerAttr(),
            /*virtual_stages=*/mlir::IntegerAttr());
      model.setTotalStagesAttr(
          builder.getI64IntegerAttr(topology->totalStages));
    });
    if (!ok)
      signalPassFailure();
  }
};

} // namespace
} // namespace mimo
