//===- SliceBatch.cpp - mimo-slice-batch ----------------------------------===//
//
// Every module reads its data-parallel lane's samples of the global
// microbatch (docs/data.md): lane k of D takes samples [k·B/D, (k+1)·B/D).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/Locations.h"
#include "runtime/plan/ShapeRules.h"

#include "mlir/IR/Builders.h"

namespace mimo {

#define GEN_PASS_DEF_SLICEBATCH
#include "passes/Passes.h.inc"

namespace {

class SliceBatchPass : public impl::SliceBatchBase<SliceBatchPass> {
public:
  void runOnOperation() override {
    bool ok = true;
    getOperation().walk([&](ir::ModelOp model) {
      ir::MicrobatchOp batch = model.getMicrobatch();
      if (!batch)
        return;
      int64_t samples = static_cast<int64_t>(batch.getMicroBatchSize());
      for (mlir::Operation &op : model.getBody().front()) {
        ir::GridOp grid;
        llvm::StringRef name;
        if (auto encoder = llvm::dyn_cast<ir::EncoderOp>(op)) {
          grid = encoder.getGridOp();
          name = encoder.getSymName();
        } else if (auto language = llvm::dyn_cast<ir::LanguageOp>(op)) {
          grid = language.getGridOp();
          name = language.getSymName();
        } else {
          continue;
        }
        // Already sliced (the pass is idempotent) or not on a grid.
        if (!grid || op.getOperand(0).getDefiningOp<ir::DpSliceOp>())
          continue;
        int64_t lanes = grid.getParallel().getDp();
        mlir::Location loc = ir::fieldLoc(grid.getLoc(), "dp");
        if (std::string problem = microBatchRule(
                describeModule(name.str(), llvm::isa<ir::LanguageOp>(op)),
                samples, lanes);
            !problem.empty()) {
          mlir::emitError(loc) << problem;
          ok = false;
          continue;
        }
        mlir::OpBuilder builder(&op);
        auto slice = builder.create<ir::DpSliceOp>(
            loc, ir::BatchType::get(&getContext()), op.getOperand(0), grid,
            mlir::FlatSymbolRefAttr::get(&getContext(), name),
            builder.getI64IntegerAttr(lanes),
            builder.getI64IntegerAttr(samples / lanes));
        op.setOperand(0, slice);
      }
    });
    if (!ok)
      signalPassFailure();
  }
};

} // namespace
} // namespace mimo
