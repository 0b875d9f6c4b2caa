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

mlir::FailureOr<TopologySource> readTopologySource(ir::ModelOp model) {
  TopologySource source;
  ir::LanguageOp language = model.getLanguage();
  ir::MicrobatchOp batch = model.getMicrobatch();
  if (!language || !batch || !language.getGridOp())
    return model.emitError("the model needs a language module on a grid and "
                           "a microbatch"),
           failure();
  for (ir::EncoderOp encoder : model.getEncoders()) {
    if (!encoder.getGridOp())
      return encoder.emitError("the encoder's grid must be a mimo.grid"),
             failure();
    TopologySource::Module m;
    m.name = encoder.getSymName().str();
    m.grid = encoder.getGridOp().getGridArithmetic();
    m.hidden = static_cast<int64_t>(encoder.getArch().getHiddenSize());
    m.specialTokenId = static_cast<int64_t>(encoder.getSpecialTokenId());
    m.forwardOnly = encoder.getForwardOnly();
    if (auto ep = encoder.getExpertParallel()) { // a sparse encoder
      m.sparse = true;
      m.ep = static_cast<int64_t>(*ep);
    }
    if (auto etp = encoder.getExpertTensorParallel())
      m.etp = static_cast<int64_t>(*etp);
    source.modules.push_back(std::move(m));
  }
  TopologySource::Module lm;
  lm.name = language.getSymName().str();
  lm.isLanguage = true;
  lm.grid = language.getGridOp().getGridArithmetic();
  lm.hidden = static_cast<int64_t>(language.getArch().getHiddenSize());
  lm.tieEmbeddings = language.getTiedEmbeddings();
  lm.sequenceParallel = language.getGridOp().getParallel().isSequenceParallel();
  if (auto chunks = batch.getVirtualStages())
    lm.virtualStages = static_cast<int64_t>(*chunks);
  if (auto ep = language.getExpertParallel()) { // a sparse language model
    lm.sparse = true;
    lm.ep = static_cast<int64_t>(*ep);
  }
  if (auto etp = language.getExpertTensorParallel())
    lm.etp = static_cast<int64_t>(*etp);
  source.modules.push_back(std::move(lm));
  source.microbatches = static_cast<int64_t>(batch.getNumMicrobatches());
  source.microBatchSize = static_cast<int64_t>(batch.getMicroBatchSize());
  source.seqLength = static_cast<int64_t>(batch.getSeqLength());
  if (auto name = batch.getSchedule()) {
    source.schedule = findSchedule(name->str());
    if (!source.schedule)
      return batch.emitOpError("asks for schedule \"")
                 << *name << "\", which this mimo does not have",
             failure();
  }
  source.packing = batch.getPacking();
  return source;
}

namespace {

/// The bridges the IR's mimo.bridge ops describe, in op order.
mlir::FailureOr<std::vector<BridgeTopology>>
bridgesInIR(ir::ModelOp model, const Topology &topology) {
  std::vector<BridgeTopology> bridges;
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
    bridges.push_back(std::move(bridge));
  }
  return bridges;
}

/// The stages the IR's mimo.stage ops describe, in the order of `built`'s
/// (matched by module and pp).
mlir::FailureOr<std::vector<StageTopology>> stagesInIR(ir::ModelOp model,
                                                       const Topology &built) {
  std::vector<StageTopology> stages;
  for (const StageTopology &expected : built.stages) {
    const std::string &name = built.modules[expected.module].name;
    ir::StageOp found;
    for (ir::StageOp op : model.getBody().getOps<ir::StageOp>())
      if (op.getModule() == name &&
          static_cast<int64_t>(op.getPp()) == expected.pp)
        found = op;
    if (!found)
      return model.emitError("no mimo.stage for @")
                 << name << " pp " << expected.pp
                 << "; run mimo-schedule-1f1b first",
             failure();
    StageTopology stage;
    stage.module = expected.module;
    stage.pp = expected.pp;
    stage.stage = static_cast<int64_t>(found.getStage());
    stage.warmup = static_cast<int64_t>(found.getWarmup());
    if (auto lag = found.getWeightLag())
      stage.weightLag = static_cast<int64_t>(*lag);
    stages.push_back(stage);
  }
  for (ir::StageOp op : model.getBody().getOps<ir::StageOp>())
    if (moduleIndex(built, op.getModule()) < 0)
      return op.emitOpError("names a module the model does not have"),
             failure();
  return stages;
}

} // namespace

mlir::FailureOr<Topology> readTopology(ir::ModelOp model, TopologyParts parts) {
  mlir::FailureOr<TopologySource> source = readTopologySource(model);
  if (mlir::failed(source))
    return failure();
  std::string error;
  std::optional<Topology> built = buildTopology(*source, parts, &error);
  if (!built)
    return model.emitError(error)
               << (parts >= TopologyParts::Bridges
                       ? "; run mimo-assign-grids and mimo-insert-bridges "
                         "for the details"
                       : "; run mimo-assign-grids for the details"),
           failure();
  if (parts < TopologyParts::Bridges)
    return std::move(*built);
  // The passes annotated the IR with the same builder's bridges and
  // stages; IR that says otherwise was edited or is out of date.
  Topology inIR = *built;
  mlir::FailureOr<std::vector<BridgeTopology>> bridges =
      bridgesInIR(model, *built);
  if (mlir::failed(bridges))
    return failure();
  if (bridges->size() != built->bridges.size())
    return model.emitError("expected one mimo.bridge per encoder, found ")
               << bridges->size() << "; run mimo-insert-bridges first",
           failure();
  inIR.bridges = std::move(*bridges);
  const char *rerun = "mimo-insert-bridges";
  if (parts >= TopologyParts::Stages) {
    auto total = model.getTotalStages();
    if (!total)
      return model.emitError("the model has no total_stages; run "
                             "mimo-schedule-1f1b first"),
             failure();
    inIR.totalStages = static_cast<int64_t>(*total);
    mlir::FailureOr<std::vector<StageTopology>> stages =
        stagesInIR(model, *built);
    if (mlir::failed(stages))
      return failure();
    inIR.stages = std::move(*stages);
    rerun = "mimo-insert-bridges and the schedule passes";
    for (ir::StageOp op : model.getBody().getOps<ir::StageOp>()) {
      const int64_t m = moduleIndex(*built, op.getModule());
      const int64_t chunks = op.getVirtualStages()
                                 ? static_cast<int64_t>(*op.getVirtualStages())
                                 : 1;
      if (chunks != built->modules[static_cast<size_t>(m)].virtualStages)
        return op.emitOpError("has virtual_stages ")
                   << chunks << " but the model's mimo.microbatch asks for "
                   << built->modules[static_cast<size_t>(m)].virtualStages
                   << "; rerun mimo-schedule-interleaved",
               failure();
    }
  }
  if (std::optional<std::string> difference = topologyDifference(*built, inIR))
    return model.emitError("the IR's bridges or stages are not the ones its "
                           "grids and batch give (")
               << *difference << "); rerun " << rerun,
           failure();
  return std::move(*built);
}

mlir::FailureOr<std::optional<Topology>>
scheduledTopology(ir::ModelOp model,
                  bool (*applies)(const PipelineSchedule &schedule)) {
  ir::MicrobatchOp batch = model.getMicrobatch();
  if (!batch)
    return std::optional<Topology>();
  const PipelineSchedule *schedule = &defaultSchedule();
  if (auto name = batch.getSchedule())
    schedule = findSchedule(name->str());
  if (!schedule || !applies(*schedule))
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
