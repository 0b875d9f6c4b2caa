//===- LowerToRanks.cpp - mimo-lower-to-ranks -----------------------------===//
//
// One mimo.program per role, from the shared program builder
// (runtime/core/Plan.h: buildPrograms), fed with the topology the earlier
// passes put in the IR (grids, bridges, stages).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "passes/TopologyFromIR.h"

#include "mlir/IR/Builders.h"

namespace mimo {

#define GEN_PASS_DEF_LOWERTORANKS
#include "passes/Passes.h.inc"

namespace {

class LowerToRanksPass : public impl::LowerToRanksBase<LowerToRanksPass> {
public:
  void runOnOperation() override {
    bool ok = true;
    getOperation().walk([&](ir::ModelOp model) {
      if (!model.getBody().getOps<ir::ProgramOp>().empty())
        return;
      if (mlir::failed(lower(model)))
        ok = false;
    });
    if (!ok)
      signalPassFailure();
  }

private:
  mlir::LogicalResult lower(ir::ModelOp model) {
    mlir::FailureOr<Topology> topology =
        readTopology(model, TopologyParts::Stages);
    if (mlir::failed(topology))
      return mlir::failure();
    ProgramSet set = buildPrograms(*topology);
    std::vector<int64_t> counts(set.programs.size(), 0);
    for (int32_t program : set.rankProgram)
      ++counts[static_cast<size_t>(program)];

    // Instructions point at the op they run: a module or a bridge.
    llvm::SmallVector<mlir::Location> moduleLocs;
    for (ir::EncoderOp encoder : model.getEncoders())
      moduleLocs.push_back(encoder.getLoc());
    moduleLocs.push_back(model.getLanguage().getLoc());
    llvm::SmallVector<mlir::Location> bridgeLocs;
    for (ir::BridgeOp bridge : model.getBody().getOps<ir::BridgeOp>())
      bridgeLocs.push_back(bridge.getLoc());

    mlir::MLIRContext *context = &getContext();
    mlir::OpBuilder builder(model.getBody().front().getTerminator());
    for (size_t p = 0; p < set.programs.size(); ++p) {
      const Program &program = set.programs[p];
      auto op = builder.create<ir::ProgramOp>(
          model.getLoc(), builder.getStringAttr(program.role),
          builder.getI64IntegerAttr(counts[p]));
      mlir::OpBuilder body =
          mlir::OpBuilder::atBlockEnd(&op.getBody().emplaceBlock());
      mlir::OpBuilder exchangeBody(context);
      bool inExchange = false;
      for (const Instr &in : program.instrs) {
        const InstrInfo &info = instrInfo(in.op);
        if (in.fused && !inExchange) {
          auto exchange = body.create<ir::ExchangeOp>(model.getLoc());
          exchangeBody =
              mlir::OpBuilder::atBlockEnd(&exchange.getBody().emplaceBlock());
          inExchange = true;
        }
        mlir::Location loc =
            info.operand == InstrOperand::Module   ? moduleLocs[in.index]
            : info.operand == InstrOperand::Bridge ? bridgeLocs[in.index]
                                                   : model.getLoc();
        mlir::OperationState state(loc,
                                   (llvm::Twine("mimo.") + info.name).str());
        if (info.operand == InstrOperand::Module)
          state.addAttribute("module",
                             mlir::FlatSymbolRefAttr::get(
                                 context, topology->modules[in.index].name));
        if (info.operand == InstrOperand::Bridge)
          state.addAttribute("bridge", body.getI64IntegerAttr(in.index));
        if (info.hasMicrobatch)
          state.addAttribute("mb", body.getI64IntegerAttr(in.mb));
        (inExchange ? exchangeBody : body).create(state);
        if (!in.fused)
          inExchange = false;
      }
    }
    return mlir::success();
  }
};

} // namespace
} // namespace mimo
