//===- InsertBridges.cpp - mimo-insert-bridges ----------------------------===//
//
// A mimo.bridge on every encoder -> language edge, with the mode, leaders,
// routes and broadcast groups of docs/plan.md (or the gather groups of a
// colocated bridge, docs/plan.md), all from the shared formulas of
// runtime/plan/Plan.h.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/Locations.h"
#include "passes/TopologyFromIR.h"

#include "mlir/IR/Builders.h"

namespace mimo {

#define GEN_PASS_DEF_INSERTBRIDGES
#include "passes/Passes.h.inc"

namespace {

mlir::ArrayAttr groupsAttr(mlir::Builder &builder,
                           const std::vector<std::vector<int64_t>> &groups) {
  llvm::SmallVector<mlir::Attribute> list;
  for (const std::vector<int64_t> &group : groups)
    list.push_back(builder.getDenseI64ArrayAttr(group));
  return builder.getArrayAttr(list);
}

class InsertBridgesPass : public impl::InsertBridgesBase<InsertBridgesPass> {
public:
  void runOnOperation() override {
    bool ok = true;
    getOperation().walk([&](ir::ModelOp model) {
      if (mlir::failed(insert(model)))
        ok = false;
    });
    if (!ok)
      signalPassFailure();
  }

private:
  mlir::LogicalResult insert(ir::ModelOp model) {
    ir::LanguageOp language = model.getLanguage();
    if (!language || language.getModalityInputs().empty())
      return mlir::success();
    mlir::FailureOr<Topology> topology =
        readTopology(model, TopologyParts::Grids);
    if (mlir::failed(topology))
      return mlir::failure();
    size_t lm = topology->modules.size() - 1;
    mlir::OpBuilder builder(language);
    bool ok = true;
    for (mlir::OpOperand &operand : language.getModalityInputsMutable()) {
      auto encoder = operand.get().getDefiningOp<ir::EncoderOp>();
      if (!encoder)
        continue; // already bridged
      size_t src = 0;
      while (src < lm && topology->modules[src].name != encoder.getSymName())
        ++src;
      std::string error;
      std::optional<BridgeTopology> bridge =
          makeBridge(*topology, src, lm, &error);
      if (!bridge) {
        mlir::InFlightDiagnostic diag =
            mlir::emitError(ir::fieldLoc(encoder.getGridOp().getLoc(), "dp"))
            << "cannot bridge encoder '" << encoder.getSymName()
            << "' to the language module: " << error;
        diag.attachNote(ir::fieldLoc(language.getGridOp().getLoc(), "dp"))
            << "the language module's grid";
        ok = false;
        continue;
      }
      ir::SplitSizesOp sizes;
      for (ir::SplitSizesOp candidate :
           model.getBody().getOps<ir::SplitSizesOp>())
        if (candidate.getModality() == encoder.getSymName())
          sizes = candidate;
      if (!sizes) {
        encoder.emitError("no mimo.split_sizes for modality '")
            << encoder.getSymName()
            << "'; run mimo-propagate-split-sizes before mimo-insert-bridges";
        ok = false;
        continue;
      }
      std::vector<int64_t> routes;
      for (const BridgeRoute &route : bridge->routes) {
        routes.push_back(route.from);
        routes.push_back(route.to);
      }
      bool colocated = bridge->mode == BridgeMode::Colocated;
      auto op = builder.create<ir::BridgeOp>(
          encoder.getLoc(), operand.get().getType(), operand.get(), sizes,
          mlir::FlatSymbolRefAttr::get(&getContext(), encoder.getSymName()),
          mlir::FlatSymbolRefAttr::get(&getContext(), language.getSymName()),
          ir::BridgeModeKindAttr::get(&getContext(), ir::toIR(bridge->mode)),
          builder.getI64IntegerAttr(bridge->ratio),
          builder.getI64IntegerAttr(bridge->tensorNdim),
          builder.getI64IntegerAttr(bridge->batchDim),
          builder.getDenseI64ArrayAttr(bridge->srcLeaders),
          builder.getDenseI64ArrayAttr(bridge->dstLeaders),
          builder.getDenseI64ArrayAttr(routes),
          groupsAttr(builder, bridge->srcBroadcastGroups),
          groupsAttr(builder, bridge->dstBroadcastGroups),
          colocated ? ir::ColocatedDirectionAttr::get(
                          &getContext(),
                          *ir::symbolizeColocatedDirection(bridge->direction))
                    : ir::ColocatedDirectionAttr(),
          colocated ? groupsAttr(builder, bridge->gatherGroups)
                    : mlir::ArrayAttr());
      operand.set(op.getOutput());
    }
    return mlir::success(ok);
  }
};

} // namespace
} // namespace mimo
