//===- PropagateSplitSizes.cpp - mimo-propagate-split-sizes ---------------===//
//
// One mimo.split_sizes per modality: per-sample token counts of the global
// microbatch, which both ends of the modality's bridge fold into piece
// sizes (docs/plan.md). Counting from the global batch on both sides replaces
// the reference's runtime shape handshake and makes the backward split
// exact for unequal counts.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/Locations.h"

#include "mlir/IR/Builders.h"

#include "llvm/ADT/StringSet.h"

namespace mimo {

#define GEN_PASS_DEF_PROPAGATESPLITSIZES
#include "passes/Passes.h.inc"

namespace {

class PropagateSplitSizesPass
    : public impl::PropagateSplitSizesBase<PropagateSplitSizesPass> {
public:
  void runOnOperation() override {
    getOperation().walk([&](ir::ModelOp model) {
      ir::MicrobatchOp batch = model.getMicrobatch();
      ir::LanguageOp language = model.getLanguage();
      if (!batch || !language || !language.getGridOp())
        return;
      llvm::StringSet<> done;
      for (ir::SplitSizesOp sizes : model.getBody().getOps<ir::SplitSizesOp>())
        done.insert(sizes.getModality());
      int64_t samples = static_cast<int64_t>(batch.getMicroBatchSize());
      int64_t dstLanes = language.getGridOp().getParallel().getDp();
      mlir::OpBuilder builder(batch->getBlock(),
                              std::next(batch->getIterator()));
      for (ir::EncoderOp encoder : model.getEncoders()) {
        if (done.contains(encoder.getSymName()) || !encoder.getGridOp())
          continue;
        auto sizes = builder.create<ir::SplitSizesOp>(
            ir::fieldLoc(encoder.getLoc(), "special_token_id"),
            ir::SplitSizesType::get(&getContext()), batch.getBatch(),
            mlir::FlatSymbolRefAttr::get(&getContext(), encoder.getSymName()),
            builder.getI64IntegerAttr(
                static_cast<int64_t>(encoder.getSpecialTokenId())),
            builder.getI64IntegerAttr(samples),
            builder.getI64IntegerAttr(
                encoder.getGridOp().getParallel().getDp()),
            builder.getI64IntegerAttr(dstLanes));
        builder.setInsertionPointAfter(sizes);
      }
    });
  }
};

} // namespace
} // namespace mimo
