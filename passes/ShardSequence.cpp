//===- ShardSequence.cpp - mimo-shard-sequence ----------------------------===//
//
// The language first stage's inputs under context and sequence parallelism
// (SPEC §4.5): the embedding becomes explicit (mimo.embed, mimo.targets),
// then CP zigzag-shards embeddings, labels and loss mask, and SP scatters
// the embeddings over the TP group.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/Locations.h"
#include "runtime/core/Topology.h"

#include "mlir/IR/Builders.h"

namespace mimo {

#define GEN_PASS_DEF_SHARDSEQUENCE
#include "passes/Passes.h.inc"

/// SPEC §4.5: the zigzag and SP scatter need seq_length to divide; CP cannot
/// take a dense mask. Errors at the batch field, with a note at the grid.
mlir::LogicalResult checkSequenceSharding(ir::GridOp grid,
                                          ir::MicrobatchOp batch,
                                          llvm::StringRef module) {
  ir::ParallelAttr p = grid.getParallel();
  bool ok = true;
  bool sequenceParallel = p.isSequenceParallel();
  int64_t factor = sequenceShardFactor(p.getCp(), p.getTp(), sequenceParallel);
  int64_t seqLength = static_cast<int64_t>(batch.getSeqLength());
  if (!batch.getPacking() && seqLength % factor != 0) {
    std::string why =
        p.getCp() > 1 && sequenceParallel
            ? "2*cp*tp with cp " + std::to_string(p.getCp()) + " and tp " +
                  std::to_string(p.getTp())
        : p.getCp() > 1
            ? "2*cp with cp " + std::to_string(p.getCp())
            : "tp " + std::to_string(p.getTp()) + " with sequence parallelism";
    int64_t next = (seqLength / factor + 1) * factor;
    mlir::InFlightDiagnostic diag =
        mlir::emitError(ir::fieldLoc(batch.getLoc(), "seq_length"))
        << "seq_length " << seqLength << " is not divisible by " << factor
        << " (" << why << ") for the sequence sharding of " << module
        << "; use a multiple of " << factor << " such as " << next;
    diag.attachNote(grid.getLoc()) << "the language module's parallel grid";
    ok = false;
  }
  if (p.getCp() > 1 &&
      batch.getAttentionMask() == ir::AttentionMaskKind::Dense) {
    mlir::InFlightDiagnostic diag =
        mlir::emitError(ir::fieldLoc(batch.getLoc(), "attention_mask"))
        << "attention_mask \"dense\" cannot be used with cp " << p.getCp()
        << " of " << module
        << " (context parallelism shards the sequence in zigzag chunks); use "
           "\"causal\" or packing, or set cp to 1";
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
        language.getModalities(), language.getArch());
    language.getLoss().replaceAllUsesWith(sharded.getLoss());
    language.erase();
    return mlir::success();
  }
};

} // namespace
} // namespace mimo
