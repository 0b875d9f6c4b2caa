//===- LowerToRanks.cpp - mimo-lower-to-ranks -----------------------------===//
//
// One mimo.program per role, from the shared program builder
// (runtime/plan/Plan.h: buildPrograms), fed with the topology the earlier
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

/// The typed op of one instruction, built through its builder.
void createInstruction(mlir::OpBuilder &b, mlir::Location loc, const Instr &in,
                       llvm::StringRef module) {
  uint64_t mb = static_cast<uint64_t>(std::max<int32_t>(in.mb, 0));
  uint64_t bridge = static_cast<uint64_t>(std::max<int32_t>(in.index, 0));
  mlir::IntegerAttr chunk =
      in.chunk ? b.getI64IntegerAttr(in.chunk) : mlir::IntegerAttr();
  switch (in.op) {
  case InstrOp::Forward:
    b.create<ir::ForwardOp>(loc, module, mb, chunk);
    return;
  case InstrOp::Backward:
    b.create<ir::BackwardOp>(loc, module, mb, chunk);
    return;
  case InstrOp::WeightGrad:
    b.create<ir::WeightGradOp>(loc, module, mb, chunk);
    return;
  case InstrOp::Shard:
    b.create<ir::ShardInstrOp>(loc, module, mb, chunk);
    return;
  case InstrOp::Unshard:
    b.create<ir::UnshardOp>(loc, module, mb, chunk);
    return;
  case InstrOp::SendAct:
    b.create<ir::SendActOp>(loc, module, mb, chunk);
    return;
  case InstrOp::RecvAct:
    b.create<ir::RecvActOp>(loc, module, mb, chunk);
    return;
  case InstrOp::SendGrad:
    b.create<ir::SendGradOp>(loc, module, mb, chunk);
    return;
  case InstrOp::RecvGrad:
    b.create<ir::RecvGradOp>(loc, module, mb, chunk);
    return;
  case InstrOp::BridgeSend:
    b.create<ir::BridgeSendOp>(loc, bridge, mb, in.posted);
    return;
  case InstrOp::BridgeRecv:
    b.create<ir::BridgeRecvOp>(loc, bridge, mb, in.posted);
    return;
  case InstrOp::BridgeBroadcast:
    b.create<ir::BridgeBroadcastOp>(loc, bridge, mb);
    return;
  case InstrOp::BridgeSendGrad:
    b.create<ir::BridgeSendGradOp>(loc, bridge, mb, in.posted);
    return;
  case InstrOp::BridgeRecvGrad:
    b.create<ir::BridgeRecvGradOp>(loc, bridge, mb, in.posted);
    return;
  case InstrOp::BridgeBroadcastGrad:
    b.create<ir::BridgeBroadcastGradOp>(loc, bridge, mb);
    return;
  case InstrOp::ColocatedForward:
    b.create<ir::ColocatedForwardOp>(loc, bridge, mb);
    return;
  case InstrOp::ColocatedBackward:
    b.create<ir::ColocatedBackwardOp>(loc, bridge, mb);
    return;
  case InstrOp::ReduceGrads:
    b.create<ir::ReduceGradsOp>(loc, module);
    return;
  case InstrOp::OptimizerStep:
    b.create<ir::OptimizerStepOp>(loc);
    return;
  }
}

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
        llvm::StringRef module = info.operand == InstrOperand::Module
                                     ? topology->modules[in.index].name
                                     : llvm::StringRef();
        createInstruction(inExchange ? exchangeBody : body, loc, in, module);
        if (!in.fused)
          inExchange = false;
      }
    }
    return mlir::success();
  }
};

} // namespace
} // namespace mimo
