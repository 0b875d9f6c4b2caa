//===- ShardSequence.cpp - mimo-shard-sequence ----------------------------===//
//
// The language first stage's inputs under context and sequence parallelism
// (docs/plan.md): the embedding becomes explicit (mimo.embed, mimo.targets),
// then CP zigzag-shards embeddings, labels and loss mask, and SP scatters
// the embeddings over the TP group.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/Locations.h"
#include "runtime/plan/ShapeRules.h"
#include "runtime/plan/Topology.h"

#include "mlir/IR/Builders.h"

namespace mimo {

#define GEN_PASS_DEF_SHARDSEQUENCE
#include "passes/Passes.h.inc"

/// docs/plan.md: the zigzag and SP scatter need seq_length to divide; CP cannot
/// take a dense mask. Errors at the batch field, with a note at the grid.
mlir::LogicalResult checkSequenceSharding(ir::GridOp grid,
                                          ir::MicrobatchOp batch,
                                          llvm::StringRef module) {
  ir::ParallelAttr p = grid.getParallel();
  bool ok = true;
  bool sequenceParallel = p.isSequenceParallel();
  int64_t seqLength = static_cast<int64_t>(batch.getSeqLength());
  std::string problem = sequenceShardRule(module.str(), seqLength, p.getCp(),
                                          p.getTp(), sequenceParallel);
  if (!batch.getPacking() && !problem.empty()) {
    mlir::InFlightDiagnostic diag =
        mlir::emitError(ir::fieldLoc(batch.getLoc(), "seq_length")) << problem;
    diag.attachNote(grid.getLoc()) << "the language module's parallel grid";
    ok = false;
  }
  if (p.getCp() > 1 &&
      batch.getAttentionMask() == ir::AttentionMaskKind::Dense) {
    mlir::InFlightDiagnostic diag =
        mlir::emitError(ir::fieldLoc(batch.getLoc(), "attention_mask"))
        << denseMaskRule(module.str(), p.getCp());
    diag.attachNote(ir::fieldLoc(grid.getLoc(), "cp")) << "cp is set here";
    ok = false;
  }
  return mlir::success(ok);
}

namespace {

class ShardSequencePass : public impl::ShardSequenceBase<ShardSequencePass> {
public:
  void runOnOperation() override {
    bool ok = true;
    getOperation().walk([&](ir::ModelOp model) {
      if (mlir::failed(shard(model)))
        ok = false;
    });
    if (!ok)
      signalPassFailure();
  }

private:
  mlir::LogicalResult shard(ir::ModelOp model) {
    ir::LanguageOp language = model.getLanguage();
    ir::MicrobatchOp batch = model.getMicrobatch();
    if (!language || !batch || language.getEmbeddings() ||
        !language.getGridOp())
      return mlir::success();
    ir::GridOp grid = language.getGridOp();
    ir::ParallelAttr p = grid.getParallel();
    int64_t cp = p.getCp(), tp = p.getTp();
    bool sp = p.isSequenceParallel() && tp > 1;
    bool packing = batch.getPacking();
    int64_t factor = sequenceShardFactor(cp, tp, p.isSequenceParallel());
    if (mlir::failed(checkSequenceSharding(
            grid, batch,
            ("language module '" + language.getSymName() + "'").str())))
      return mlir::failure();
    mlir::MLIRContext *context = &getContext();
    mlir::OpBuilder builder(language);
    mlir::Location loc = language.getLoc();
    int64_t hidden = static_cast<int64_t>(language.getArch().getHiddenSize());
    auto symbol = mlir::FlatSymbolRefAttr::get(context, language.getSymName());
    mlir::Value embeddings = builder.create<ir::EmbedOp>(
        loc, ir::HiddenType::get(context, hidden), language.getBatch(),
        language.getModalityInputs(), grid, symbol, language.getModalities());
    mlir::Value targets = builder.create<ir::TargetsOp>(
        loc, ir::TargetsType::get(context), language.getBatch(), grid);
    if (cp > 1) {
      mlir::Location cpLoc = ir::fieldLoc(grid.getLoc(), "cp");
      auto shardOf = [&](mlir::Value value, int64_t seqDim) -> mlir::Value {
        return builder.create<ir::CpShardOp>(
            cpLoc, value.getType(), value, builder.getStringAttr("zigzag"),
            builder.getI64IntegerAttr(cp), builder.getI64IntegerAttr(seqDim),
            builder.getBoolAttr(packing), builder.getI64IntegerAttr(factor));
      };
      embeddings = shardOf(embeddings, 0);
      targets = shardOf(targets, 1);
    }
    if (sp)
      embeddings = builder.create<ir::SpScatterOp>(
          ir::fieldLoc(grid.getLoc(), "sequence_parallel"),
          embeddings.getType(), embeddings, builder.getI64IntegerAttr(tp),
          builder.getI64IntegerAttr(0));
    auto sharded = builder.create<ir::LanguageOp>(
        loc, language.getLoss().getType(), language.getSymNameAttr(),
        language.getBatch(), mlir::ValueRange(), embeddings, targets, grid,
        language.getModalities(), language.getArch(),
        language.getTiedEmbeddingsAttr(), language.getExpertParallelAttr(),
        language.getExpertTensorParallelAttr());
    language.getLoss().replaceAllUsesWith(sharded.getLoss());
    language.erase();
    return mlir::success();
  }
};

} // namespace
} // namespace mimo
