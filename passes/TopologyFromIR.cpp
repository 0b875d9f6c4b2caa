//===- TopologyFromIR.cpp - Read a model's topology out of its IR ---------===//

#include "passes/TopologyFromIR.h"

#include "runtime/plan/Topology.h"

#include "mlir/IR/BuiltinAttributes.h"

namespace mimo {

using mlir::failure;

namespace {

std::vector<int64_t> toVector(llvm::ArrayRef<int64_t> values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

std::vector<std::vector<int64_t>> toGroups(mlir::ArrayAttr groups) {
  std::vector<std::vector<int64_t>> result;
  for (mlir::Attribute group : groups)
    result.push_back(
        toVector(llvm::cast<mlir::DenseI64ArrayAttr>(group).asArrayRef()));
  return result;
}

int64_t moduleIndex(const Topology &topology, llvm::StringRef name) {
  for (size_t i = 0; i < topology.modules.size(); ++i)
    if (topology.modules[i].name == name)
      return static_cast<int64_t>(i);
  return -1;
}

} // namespace

mlir::FailureOr<Topology> readTopology(ir::ModelOp model, TopologyParts parts) {
  Topology topology;
  ir::LanguageOp language = model.getLanguage();
  ir::MicrobatchOp batch = model.getMicrobatch();
  if (!language || !batch || !language.getGridOp())
    return model.emitError("the model needs a language module on a grid and "
                           "a microbatch"),
           failure();
  int64_t lmHidden = static_cast<int64_t>(language.getArch().getHiddenSize());
  for (ir::EncoderOp encoder : model.getEncoders()) {
    if (!encoder.getGridOp())
      return encoder.emitError("the encoder's grid must be a mimo.grid"),
             failure();
    ModuleTopology m;
    m.name = encoder.getSymName().str();
    m.grid = encoder.getGridOp().getGridArithmetic();
    m.hidden = static_cast<int64_t>(encoder.getArch().getHiddenSize());
    m.outputHidden = lmHidden;
    m.specialTokenId = static_cast<int64_t>(encoder.getSpecialTokenId());
    m.forwardOnly = encoder.getForwardOnly();
    topology.modules.push_back(std::move(m));
  }
  ModuleTopology lm;
  lm.name = language.getSymName().str();
  lm.isLanguage = true;
  lm.grid = language.getGridOp().getGridArithmetic();
  lm.hidden = lm.outputHidden = lmHidden;
  topology.modules.push_back(lm);

  std::vector<RankSpan> spans;
  for (const ModuleTopology &m : topology.modules)
    spans.push_back({m.grid.rankOffset(), m.grid.endRank()});
  LayoutResult layout = classifyLayout(spans);
  if (layout.problem)
    return model.emitError("the module spans do not tile the world; run "
                           "mimo-assign-grids for the details"),
           failure();
  topology.layout = layout.layout;
  topology.worldSize = layout.worldSize;
  topology.microbatches = static_cast<int64_t>(batch.getNumMicrobatches());
  topology.microBatchSize = static_cast<int64_t>(batch.getMicroBatchSize());
  topology.seqLength = static_cast<int64_t>(batch.getSeqLength());
  topology.zeroBubble = batch.getSchedule() == "zero_bubble";
  topology.interleaved = batch.getSchedule() == "interleaved";
  ir::ParallelAttr p = language.getGridOp().getParallel();
  topology.shard = makeShard(p.getCp(), p.getTp(), p.isSequenceParallel(),
                             batch.getPacking());

  if (parts >= TopologyParts::Bridges) {
    for (ir::BridgeOp op : model.getBody().getOps<ir::BridgeOp>()) {
      BridgeTopology bridge;
      int64_t src = moduleIndex(topology, op.getSrc());
      int64_t dst = moduleIndex(topology, op.getDst());
      if (src < 0 || dst < 0)
        return op.emitOpError("names a module the model does not have"),
               failure();
      bridge.src = static_cast<size_t>(src);
      bridge.dst = static_cast<size_t>(dst);
      bridge.mode = ir::fromIR(op.getMode());
      bridge.ratio = static_cast<int64_t>(op.getRatio());
      bridge.tensorNdim = static_cast<int64_t>(op.getTensorNdim());
      bridge.batchDim = static_cast<int64_t>(op.getBatchDim());
      bridge.srcLeaders = toVector(op.getSrcLeaders());
      bridge.dstLeaders = toVector(op.getDstLeaders());
      llvm::ArrayRef<int64_t> routes = op.getRoutes();
      for (size_t i = 0; i + 1 < routes.size(); i += 2)
        bridge.routes.push_back({routes[i], routes[i + 1]});
      bridge.srcBroadcastGroups = toGroups(op.getSrcBroadcastGroups());
      bridge.dstBroadcastGroups = toGroups(op.getDstBroadcastGroups());
      if (auto direction = op.getDirection())
        bridge.direction = ir::stringifyColocatedDirection(*direction).str();
      if (auto groups = op.getGatherGroups())
        bridge.gatherGroups = toGroups(*groups);
      // The peers of every rank follow from the leaders; they must be the
      // ones the grids give.
      const Grid &sg = topology.modules[bridge.src].grid;
      const Grid &dg = topology.modules[bridge.dst].grid;
      if (bridge.mode != BridgeMode::Colocated &&
          (bridge.srcLeaders != sourceLeaders(sg) ||
           bridge.dstLeaders != destinationLeaders(dg) ||
           bridge.routes != bridgeRoutes(bridge.srcLeaders, bridge.dstLeaders)))
        return op.emitOpError("leaders or routes disagree with the grids of "
                              "@")
                   << op.getSrc() << " and @" << op.getDst()
                   << "; rerun mimo-insert-bridges",
               failure();
      topology.bridges.push_back(std::move(bridge));
    }
    if (topology.bridges.size() + 1 != topology.modules.size())
      return model.emitError("expected one mimo.bridge per encoder, found ")
                 << topology.bridges.size()
                 << "; run mimo-insert-bridges first",
             failure();
  }
  if (parts >= TopologyParts::Stages) {
    auto total = model.getTotalStages();
    if (!total)
      return model.emitError("the model has no total_stages; run "
                             "mimo-schedule-1f1b first"),
             failure();
    topology.totalStages = static_cast<int64_t>(*total);
    for (ir::StageOp op : model.getBody().getOps<ir::StageOp>()) {
      int64_t m = moduleIndex(topology, op.getModule());
      if (m < 0)
        return op.emitOpError("names a module the model does not have"),
               failure();
      StageTopology stage;
      stage.module = static_cast<size_t>(m);
      stage.pp = static_cast<int64_t>(op.getPp());
      stage.stage = static_cast<int64_t>(op.getStage());
      stage.warmup = static_cast<int64_t>(op.getWarmup());
      if (auto lag = op.getWeightLag())
        stage.weightLag = static_cast<int64_t>(*lag);
      // mimo-schedule-interleaved's chunks of the language layers.
      if (auto chunks = op.getVirtualStages())
        topology.modules[static_cast<size_t>(m)].virtualStages =
            static_cast<int64_t>(*chunks);
      topology.stages.push_back(stage);
    }
    for (size_t m = 0; m < topology.modules.size(); ++m)
      for (int64_t pp = 0; pp < topology.modules[m].grid.size(Dim::PP); ++pp)
        if (!topology.stageOf(m, pp))
          return model.emitError("no mimo.stage for @")
                     << topology.modules[m].name << " pp " << pp
                     << "; run mimo-schedule-1f1b first",
                 failure();
  }
  return topology;
}

mlir::FailureOr<std::optional<Topology>>
scheduledTopology(ir::ModelOp model, llvm::StringRef schedule) {
  ir::MicrobatchOp batch = model.getMicrobatch();
  if (!batch || batch.getSchedule() != schedule)
    return std::optional<Topology>();
  if (model.getBody().getOps<ir::StageOp>().empty())
    return model.emitError("the model has no mimo.stage; run "
                           "mimo-schedule-1f1b first"),
           failure();
  mlir::FailureOr<Topology> topology =
      readTopology(model, TopologyParts::Grids);
  if (mlir::failed(topology))
    return failure();
  return std::optional<Topology>(std::move(*topology));
}

mlir::FailureOr<ProgramsFromIR> readPrograms(ir::ModelOp model,
                                             const Topology &topology) {
  ProgramsFromIR result;
  for (ir::ProgramOp program : model.getBody().getOps<ir::ProgramOp>()) {
    Program p;
    p.role = program.getRole().str();
    std::vector<mlir::Operation *> ops;
    auto add = [&](mlir::Operation &op, bool fused) -> mlir::LogicalResult {
      auto instr = llvm::dyn_cast<ir::InstructionOp>(op);
      if (!instr)
        return op.emitOpError("is not an instruction");
      Instr in;
      in.op = instr.getInstr();
      in.fused = fused;
      in.posted = op.hasAttr("posted");
      if (auto module = op.getAttrOfType<mlir::FlatSymbolRefAttr>("module")) {
        int64_t index = moduleIndex(topology, module.getValue());
        if (index < 0)
          return op.emitOpError("names module @")
                 << module.getValue() << ", which the model does not have";
        in.index = static_cast<int32_t>(index);
      }
      if (auto bridge = op.getAttrOfType<mlir::IntegerAttr>("bridge")) {
        if (bridge.getInt() >= static_cast<int64_t>(topology.bridges.size()))
          return op.emitOpError("names bridge ")
                 << bridge.getInt() << " but the model has "
                 << topology.bridges.size();
        in.index = static_cast<int32_t>(bridge.getInt());
      }
      if (auto mb = op.getAttrOfType<mlir::IntegerAttr>("mb")) {
        if (mb.getInt() >= topology.microbatches)
          return op.emitOpError("names microbatch ")
                 << mb.getInt() << " of " << topology.microbatches;
        in.mb = static_cast<int32_t>(mb.getInt());
      }
      if (auto chunk = op.getAttrOfType<mlir::IntegerAttr>("chunk")) {
        const int64_t chunks =
            in.index >= 0
                ? topology.modules[static_cast<size_t>(in.index)].virtualStages
                : 1;
        if (chunk.getInt() >= chunks)
          return op.emitOpError("names chunk ")
                 << chunk.getInt() << " of " << chunks
                 << " (the module's virtual_stages)";
        in.chunk = static_cast<int32_t>(chunk.getInt());
      }
      p.instrs.push_back(in);
      ops.push_back(&op);
      return mlir::success();
    };
    for (mlir::Operation &op : program.getBody().front()) {
      if (auto exchange = llvm::dyn_cast<ir::ExchangeOp>(op)) {
        mlir::Block &body = exchange.getBody().front();
        for (mlir::Operation &inner : body)
          if (mlir::failed(add(inner, &inner != &body.back())))
            return failure();
        continue;
      }
      if (mlir::failed(add(op, false)))
        return failure();
    }
    result.programs.push_back(std::move(p));
    result.programOps.push_back(program);
    result.instrOps.push_back(std::move(ops));
  }
  return result;
}

mlir::FailureOr<PlanParts> readPlanParts(ir::ModelOp model) {
  mlir::FailureOr<Topology> topology =
      readTopology(model, TopologyParts::Stages);
  if (mlir::failed(topology))
    return failure();
  mlir::FailureOr<ProgramsFromIR> programs = readPrograms(model, *topology);
  if (mlir::failed(programs))
    return failure();
  if (programs->programs.empty())
    return model.emitError("the model has no mimo.program; run "
                           "mimo-lower-to-ranks first"),
           failure();
  std::string error;
  std::optional<std::vector<int32_t>> rankProgram =
      assignPrograms(*topology, programs->programs, &error);
  if (!rankProgram)
    return model.emitError(error), failure();
  std::vector<int64_t> counts(programs->programs.size(), 0);
  for (int32_t program : *rankProgram)
    ++counts[static_cast<size_t>(program)];
  for (size_t p = 0; p < counts.size(); ++p) {
    ir::ProgramOp op = programs->programOps[p];
    if (static_cast<int64_t>(op.getRanks()) != counts[p])
      return op.emitOpError("says ") << static_cast<int64_t>(op.getRanks())
                                     << " ranks have the role '" << op.getRole()
                                     << "', but " << counts[p] << " do",
             failure();
  }
  return PlanParts{std::move(*topology), std::move(*programs),
                   std::move(*rankProgram)};
}

} // namespace mimo
