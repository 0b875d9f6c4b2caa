//===- Plan.cpp - Per-rank programs, peers and plan verification ----------===//

#include "runtime/core/Plan.h"

#include "runtime/core/Schedule.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_map>

namespace mimo {

//===----------------------------------------------------------------------===//
// Instructions
//===----------------------------------------------------------------------===//

namespace {
constexpr InstrOperand M = InstrOperand::Module, B = InstrOperand::Bridge,
                       N = InstrOperand::None;
// name, operand, microbatch, send, recv, grad
const InstrInfo kInstrInfo[kNumInstrOps] = {
    {"forward", M, true, false, false, false},
    {"backward", M, true, false, false, true},
    {"shard", M, true, false, false, false},
    {"unshard", M, true, false, false, true},
    {"send_act", M, true, true, false, false},
    {"recv_act", M, true, false, true, false},
    {"send_grad", M, true, true, false, true},
    {"recv_grad", M, true, false, true, true},
    {"bridge_send", B, true, true, false, false},
    {"bridge_recv", B, true, false, true, false},
    {"bridge_broadcast", B, true, false, false, false},
    {"bridge_send_grad", B, true, true, false, true},
    {"bridge_recv_grad", B, true, false, true, true},
    {"bridge_broadcast_grad", B, true, false, false, true},
    {"colocated_forward", B, true, false, false, false},
    {"colocated_backward", B, true, false, false, true},
    {"reduce_grads", M, false, false, false, true},
    {"optimizer_step", N, false, false, false, false},
};
} // namespace

const InstrInfo &instrInfo(InstrOp op) {
  return kInstrInfo[static_cast<int>(op)];
}

std::optional<InstrOp> parseInstrOp(std::string_view name) {
  for (int i = 0; i < kNumInstrOps; ++i)
    if (name == kInstrInfo[i].name)
      return static_cast<InstrOp>(i);
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Topology
//===----------------------------------------------------------------------===//

size_t Topology::languageIndex() const {
  for (size_t i = 0; i < modules.size(); ++i)
    if (modules[i].isLanguage)
      return i;
  return modules.size();
}

std::vector<size_t> Topology::modulesOf(int64_t rank) const {
  std::vector<size_t> result;
  for (size_t i = 0; i < modules.size(); ++i)
    if (modules[i].grid.contains(rank))
      result.push_back(i);
  return result;
}

const StageTopology *Topology::stageOf(size_t module, int64_t pp) const {
  for (const StageTopology &stage : stages)
    if (stage.module == module && stage.pp == pp)
      return &stage;
  return nullptr;
}

std::pair<int64_t, int64_t> laneSamples(int64_t batch, int64_t lanes,
                                        int64_t lane) {
  int64_t per = batch / lanes;
  return {lane * per, (lane + 1) * per};
}

namespace {

int64_t lane(const Grid &grid, int64_t rank) { return grid.coordsOf(rank).dp; }

/// The group over `dims` holding `rank`: its smallest member and its size.
std::pair<int64_t, int64_t> groupKey(const Grid &grid, int64_t rank,
                                     std::initializer_list<Dim> dims) {
  Coords coords = grid.coordsOf(rank);
  int64_t size = 1;
  for (Dim dim : dims) {
    coords[dim] = 0;
    size *= grid.size(dim);
  }
  return {grid.rankOf(coords), size};
}

bool isSourceLeader(const BridgeTopology &bridge, const Grid &grid,
                    int64_t rank) {
  Coords c = grid.coordsOf(rank);
  return c.pp == grid.size(Dim::PP) - 1 &&
         bridge.srcLeaders[static_cast<size_t>(c.dp)] == rank;
}

bool isDestinationLeader(const BridgeTopology &bridge, const Grid &grid,
                         int64_t rank) {
  Coords c = grid.coordsOf(rank);
  return c.pp == 0 && bridge.dstLeaders[static_cast<size_t>(c.dp)] == rank;
}

/// Lanes of the other side that lane `laneIndex` of one side talks to.
std::pair<int64_t, int64_t> peerLanes(int64_t ownLanes, int64_t otherLanes,
                                      int64_t laneIndex) {
  if (ownLanes >= otherLanes) {
    int64_t k = ownLanes / otherLanes;
    return {laneIndex / k, laneIndex / k + 1};
  }
  int64_t k = otherLanes / ownLanes;
  return {laneIndex * k, (laneIndex + 1) * k};
}

} // namespace

bool colocatedPipeline(const Topology &topology) {
  return topology.layout == Layout::Colocated &&
         topology.modules[topology.languageIndex()].grid.size(Dim::PP) > 1;
}

std::string roleOf(const Topology &topology, int64_t rank) {
  if (topology.layout == Layout::Colocated) {
    const Grid &lm = topology.modules[topology.languageIndex()].grid;
    int64_t pp = lm.coordsOf(rank).pp;
    std::string role = "colocated/pp" + std::to_string(pp);
    if (colocatedPipeline(topology))
      for (const BridgeTopology &bridge : topology.bridges) {
        const ModuleTopology &src = topology.modules[bridge.src];
        if (isSourceLeader(bridge, src.grid, rank))
          role += "/" + src.name + ":src-leader";
        if (pp == 0 && isDestinationLeader(bridge, lm, rank))
          role += "/" + src.name + ":dst-leader";
      }
    return role;
  }
  std::vector<size_t> modules = topology.modulesOf(rank);
  if (modules.empty())
    return "idle";
  size_t m = modules.front();
  const ModuleTopology &module = topology.modules[m];
  Coords c = module.grid.coordsOf(rank);
  std::string role = module.name + "/pp" + std::to_string(c.pp);
  for (const BridgeTopology &bridge : topology.bridges) {
    if (bridge.dst == m && c.pp == 0)
      role += "/" + topology.modules[bridge.src].name +
              (isDestinationLeader(bridge, module.grid, rank) ? ":dst-leader"
                                                              : ":dst-member");
    if (bridge.src == m && c.pp == module.grid.size(Dim::PP) - 1)
      role += "/" + topology.modules[bridge.dst].name +
              (isSourceLeader(bridge, module.grid, rank) ? ":src-leader"
                                                         : ":src-member");
  }
  return role;
}

std::optional<BridgeTopology> makeBridge(const Topology &topology, size_t src,
                                         size_t dst, std::string *error) {
  const Grid &s = topology.modules[src].grid;
  const Grid &d = topology.modules[dst].grid;
  // A colocated language module with pp > 1 holds its first stage on 1/pp
  // of the ranks: the encoder output travels to it over leader routes like
  // a non-colocated bridge (SPEC §4.4, reference §9.6).
  bool colocated =
      topology.layout == Layout::Colocated && !colocatedPipeline(topology);
  auto relation = relateLanes(s.size(Dim::DP), d.size(Dim::DP), colocated);
  auto fail = [&](std::string why) -> std::optional<BridgeTopology> {
    if (error)
      *error = std::move(why);
    return std::nullopt;
  };
  if (!relation)
    return fail("the data-parallel lanes of '" + topology.modules[src].name +
                "' (dp = " + std::to_string(s.size(Dim::DP)) + ") and '" +
                topology.modules[dst].name + "' (dp = " +
                std::to_string(d.size(Dim::DP)) + ") must divide one another");
  BridgeTopology bridge;
  bridge.src = src;
  bridge.dst = dst;
  bridge.mode = relation->mode;
  bridge.ratio = relation->ratio;
  bridge.tensorNdim = 2; // encoders hand on sample-major [N, H] token lists
  bridge.batchDim = 0;
  if (!colocated) {
    if (topology.layout == Layout::Colocated && s.size(Dim::PP) != 1)
      return fail("a colocated encoder runs once per step before the "
                  "language pipeline and needs pp = 1, found pp = " +
                  std::to_string(s.size(Dim::PP)));
    bridge.srcLeaders = sourceLeaders(s);
    bridge.dstLeaders = destinationLeaders(d);
    bridge.routes = bridgeRoutes(bridge.srcLeaders, bridge.dstLeaders);
    bridge.srcBroadcastGroups = boundaryGroups(s, /*isSource=*/true);
    bridge.dstBroadcastGroups = boundaryGroups(d, /*isSource=*/false);
    return bridge;
  }
  // Colocated (reference §4): the wide side's ranks gather over groups of
  // `scale` consecutive lanes that share a TP index.
  if (s.size(Dim::PP) != 1 || d.size(Dim::PP) != 1)
    return fail("a colocated bridge runs inside the language first stage and "
                "needs pp = 1 on both sides, found encoder pp = " +
                std::to_string(s.size(Dim::PP)) +
                " and language pp = " + std::to_string(d.size(Dim::PP)));
  int64_t sdp = s.size(Dim::DP), ddp = d.size(Dim::DP);
  bridge.direction = sdp > ddp ? "fan_in" : sdp < ddp ? "fan_out" : "equal";
  int64_t scale = bridge.ratio;
  // Every rank must find its language lane's samples among its gather group.
  for (int64_t rank = s.rankOffset(); rank < s.endRank(); ++rank) {
    int64_t e = lane(s, rank), l = lane(d, rank);
    bool nests = sdp > ddp   ? l == e / scale
                 : sdp < ddp ? e == l / scale
                             : e == l;
    if (!nests)
      return fail("colocated grids must nest: rank " + std::to_string(rank) +
                  " is in encoder lane " + std::to_string(e) + " of " +
                  std::to_string(sdp) + " but language lane " +
                  std::to_string(l) + " of " + std::to_string(ddp) +
                  "; use the same order in both modules");
  }
  if (bridge.direction != "equal") {
    const Grid &wide = sdp > ddp ? s : d;
    int64_t narrow = std::min(sdp, ddp);
    for (int64_t iter = 0; iter < narrow; ++iter)
      for (int64_t t = 0; t < wide.size(Dim::TP); ++t)
        for (int64_t cp = 0; cp < wide.size(Dim::CP); ++cp) {
          std::vector<int64_t> group;
          for (int64_t w = iter * scale; w < (iter + 1) * scale; ++w)
            group.push_back(wide.rankOf({t, cp, w, 0}));
          bridge.gatherGroups.push_back(std::move(group));
        }
  }
  return bridge;
}

ShardTopology makeShard(int64_t cp, int64_t tp, bool sequenceParallel,
                        bool packing) {
  return {cp, tp, sequenceParallel, packing,
          sequenceShardFactor(cp, tp, sequenceParallel)};
}

void assignStages(Topology &topology) {
  std::vector<int64_t> encoderPp;
  size_t lm = topology.languageIndex();
  for (size_t i = 0; i < topology.modules.size(); ++i)
    if (i != lm)
      encoderPp.push_back(topology.modules[i].grid.size(Dim::PP));
  bool colocated = topology.layout == Layout::Colocated;
  int64_t lmPp = topology.modules[lm].grid.size(Dim::PP);
  topology.totalStages = totalStages(encoderPp, lmPp, colocated);
  topology.stages.clear();
  for (size_t i = 0; i < topology.modules.size(); ++i) {
    int64_t pp = topology.modules[i].grid.size(Dim::PP);
    for (int64_t p = 0; p < pp; ++p) {
      int64_t stage = i == lm ? languageStage(encoderPp, p, colocated)
                              : (colocated ? 0 : p);
      topology.stages.push_back({i, p, stage,
                                 warmupMicrobatches(topology.totalStages, stage,
                                                    topology.microbatches)});
    }
  }
}

//===----------------------------------------------------------------------===//
// Programs
//===----------------------------------------------------------------------===//

namespace {

class ProgramBuilder {
public:
  explicit ProgramBuilder(std::vector<Instr> &out) : out(out) {}
  void add(InstrOp op, int64_t index, int64_t mb = -1) {
    out.push_back(
        {op, static_cast<int32_t>(index), static_cast<int32_t>(mb), false});
  }
  /// Point-to-point operations posted together.
  void batch(const std::vector<Instr> &ops) {
    for (size_t i = 0; i < ops.size(); ++i) {
      out.push_back(ops[i]);
      out.back().fused = i + 1 < ops.size();
    }
  }

private:
  std::vector<Instr> &out;
};

Instr instr(InstrOp op, size_t index, int64_t mb) {
  return {op, static_cast<int32_t>(index), static_cast<int32_t>(mb), false};
}

std::vector<Instr> concat(std::vector<Instr> a, const std::vector<Instr> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Whether the language first stage holds only part of the sequence, so
/// the input-embedding gradient must be gathered after the backward.
bool needsUnshard(const Topology &topology) {
  return topology.shard.cp > 1 ||
         (topology.shard.sequenceParallel && topology.shard.tp > 1);
}

/// The size of a module's TP x CP groups: the ranks a bridge's leader
/// broadcasts to (more than one: the plan has a broadcast instruction).
int64_t tpcpSize(const Topology &topology, size_t module) {
  const Grid &grid = topology.modules[module].grid;
  return grid.size(Dim::TP) * grid.size(Dim::CP);
}

/// The 1F1B stream of `rank`'s stage of module `m`. `bridges`: whether the
/// stream also moves the bridges' tensors (not when a colocated pipeline
/// moves them before and after); `finalize`: end with the gradient
/// reduction and the optimizer step.
void buildPipelineProgram(const Topology &topology, int64_t rank, size_t m,
                          bool bridges, bool finalize,
                          std::vector<Instr> &out) {
  const ModuleTopology &module = topology.modules[m];
  const Grid &grid = module.grid;
  Coords c = grid.coordsOf(rank);
  int64_t pp = grid.size(Dim::PP);
  bool first = c.pp == 0, last = c.pp == pp - 1;
  std::vector<size_t> incoming, outgoing;
  for (size_t b = 0; b < topology.bridges.size() && bridges; ++b) {
    if (topology.bridges[b].dst == m && first)
      incoming.push_back(b);
    if (topology.bridges[b].src == m && last)
      outgoing.push_back(b);
  }

  auto recvForward = [&](int64_t mb) {
    std::vector<Instr> ops;
    if (!first)
      ops.push_back(instr(InstrOp::RecvAct, m, mb));
    for (size_t b : incoming)
      if (isDestinationLeader(topology.bridges[b], grid, rank))
        ops.push_back(instr(InstrOp::BridgeRecv, b, mb));
    return ops;
  };
  ProgramBuilder emit(out);
  auto afterRecvForward = [&](int64_t mb) {
    for (size_t b : incoming)
      if (tpcpSize(topology, topology.bridges[b].dst) > 1)
        emit.add(InstrOp::BridgeBroadcast, b, mb);
    if (first && module.isLanguage)
      emit.add(InstrOp::Shard, m, mb);
  };
  auto sendForward = [&](int64_t mb) {
    std::vector<Instr> ops;
    if (!last)
      ops.push_back(instr(InstrOp::SendAct, m, mb));
    for (size_t b : outgoing)
      if (isSourceLeader(topology.bridges[b], grid, rank))
        ops.push_back(instr(InstrOp::BridgeSend, b, mb));
    return ops;
  };
  auto recvBackward = [&](int64_t mb) {
    std::vector<Instr> ops;
    if (!last)
      ops.push_back(instr(InstrOp::RecvGrad, m, mb));
    for (size_t b : outgoing)
      if (isSourceLeader(topology.bridges[b], grid, rank))
        ops.push_back(instr(InstrOp::BridgeRecvGrad, b, mb));
    return ops;
  };
  auto afterRecvBackward = [&](int64_t mb) {
    for (size_t b : outgoing)
      if (tpcpSize(topology, topology.bridges[b].src) > 1)
        emit.add(InstrOp::BridgeBroadcastGrad, b, mb);
  };
  bool unshard = first && module.isLanguage && needsUnshard(topology);
  auto afterBackward = [&](int64_t mb) {
    if (unshard)
      emit.add(InstrOp::Unshard, m, mb);
  };
  auto sendBackward = [&](int64_t mb) {
    std::vector<Instr> ops;
    if (!first)
      ops.push_back(instr(InstrOp::SendGrad, m, mb));
    for (size_t b : incoming)
      if (isDestinationLeader(topology.bridges[b], grid, rank))
        ops.push_back(instr(InstrOp::BridgeSendGrad, b, mb));
    return ops;
  };

  // Multi-module 1F1B (reference §9.3): W warm-up forwards, R = M - W
  // steady pairs whose sends and receives are posted together, W cool-down
  // backwards.
  int64_t mbs = topology.microbatches;
  const StageTopology *stage = topology.stageOf(m, c.pp);
  int64_t warmup = stage ? stage->warmup : 0;
  int64_t steady = mbs - warmup;
  for (int64_t i = 0; i < warmup; ++i) {
    emit.batch(recvForward(i));
    afterRecvForward(i);
    emit.add(InstrOp::Forward, m, i);
    emit.batch(sendForward(i));
  }
  if (steady > 0) {
    emit.batch(recvForward(warmup));
    afterRecvForward(warmup);
  }
  for (int64_t i = 0; i < steady; ++i) {
    int64_t f = warmup + i;
    emit.add(InstrOp::Forward, m, f);
    emit.batch(concat(sendForward(f), recvBackward(i)));
    afterRecvBackward(i);
    emit.add(InstrOp::Backward, m, i);
    afterBackward(i);
    if (i + 1 == steady) {
      emit.batch(sendBackward(i));
    } else {
      emit.batch(concat(sendBackward(i), recvForward(f + 1)));
      afterRecvForward(f + 1);
    }
  }
  for (int64_t i = 0; i < warmup; ++i) {
    int64_t b = steady + i;
    emit.batch(recvBackward(b));
    afterRecvBackward(b);
    emit.add(InstrOp::Backward, m, b);
    afterBackward(b);
    emit.batch(sendBackward(b));
  }
  if (!finalize)
    return;
  emit.add(InstrOp::ReduceGrads, m);
  emit.add(InstrOp::OptimizerStep, -1);
}

/// Colocated with language pp > 1 (SPEC §4.4, reference §9.6), three
/// phases: every encoder forward for all microbatches and the bridges to
/// the language first stage; the language 1F1B; the bridges' gradients back
/// and every encoder backward. Then the gradient reduction and the step.
void buildColocatedPipelineProgram(const Topology &topology, int64_t rank,
                                   std::vector<Instr> &out) {
  ProgramBuilder emit(out);
  size_t lm = topology.languageIndex();
  const Grid &lmGrid = topology.modules[lm].grid;
  bool first = lmGrid.coordsOf(rank).pp == 0;
  auto bridgeBatch = [&](int64_t mb, bool grad) {
    std::vector<Instr> ops;
    for (size_t b = 0; b < topology.bridges.size(); ++b) {
      const BridgeTopology &bridge = topology.bridges[b];
      const Grid &src = topology.modules[bridge.src].grid;
      if (isSourceLeader(bridge, src, rank))
        ops.push_back(
            instr(grad ? InstrOp::BridgeRecvGrad : InstrOp::BridgeSend, b, mb));
      if (first && isDestinationLeader(bridge, lmGrid, rank))
        ops.push_back(
            instr(grad ? InstrOp::BridgeSendGrad : InstrOp::BridgeRecv, b, mb));
    }
    emit.batch(ops);
    for (size_t b = 0; b < topology.bridges.size(); ++b) {
      if (!grad && first && tpcpSize(topology, lm) > 1)
        emit.add(InstrOp::BridgeBroadcast, b, mb);
      if (grad && tpcpSize(topology, topology.bridges[b].src) > 1)
        emit.add(InstrOp::BridgeBroadcastGrad, b, mb);
    }
  };
  for (int64_t mb = 0; mb < topology.microbatches; ++mb)
    for (size_t i = 0; i < topology.modules.size(); ++i)
      if (i != lm)
        emit.add(InstrOp::Forward, i, mb);
  for (int64_t mb = 0; mb < topology.microbatches; ++mb)
    bridgeBatch(mb, false);
  buildPipelineProgram(topology, rank, lm, /*bridges=*/false,
                       /*finalize=*/false, out);
  for (int64_t mb = 0; mb < topology.microbatches; ++mb)
    bridgeBatch(mb, true);
  for (int64_t mb = 0; mb < topology.microbatches; ++mb)
    for (size_t i = topology.modules.size(); i-- > 0;)
      if (i != lm)
        emit.add(InstrOp::Backward, i, mb);
  for (size_t i = 0; i < topology.modules.size(); ++i)
    emit.add(InstrOp::ReduceGrads, i);
  emit.add(InstrOp::OptimizerStep, -1);
}

/// Colocated (language pp = 1): every rank runs every module; per
/// microbatch the encoders, the colocated bridges, the language module and
/// the adjoints in reverse.
void buildColocatedProgram(const Topology &topology, std::vector<Instr> &out) {
  ProgramBuilder emit(out);
  size_t lm = topology.languageIndex();
  for (int64_t mb = 0; mb < topology.microbatches; ++mb) {
    for (size_t i = 0; i < topology.modules.size(); ++i)
      if (i != lm)
        emit.add(InstrOp::Forward, i, mb);
    for (size_t b = 0; b < topology.bridges.size(); ++b)
      emit.add(InstrOp::ColocatedForward, b, mb);
    emit.add(InstrOp::Shard, lm, mb);
    emit.add(InstrOp::Forward, lm, mb);
    emit.add(InstrOp::Backward, lm, mb);
    if (needsUnshard(topology))
      emit.add(InstrOp::Unshard, lm, mb);
    for (size_t b = topology.bridges.size(); b-- > 0;)
      emit.add(InstrOp::ColocatedBackward, b, mb);
    for (size_t i = topology.modules.size(); i-- > 0;)
      if (i != lm)
        emit.add(InstrOp::Backward, i, mb);
  }
  for (size_t i = 0; i < topology.modules.size(); ++i)
    emit.add(InstrOp::ReduceGrads, i);
  emit.add(InstrOp::OptimizerStep, -1);
}

} // namespace

ProgramSet buildPrograms(const Topology &topology) {
  ProgramSet set;
  set.rankProgram.assign(static_cast<size_t>(topology.worldSize), -1);
  std::unordered_map<std::string, int32_t> byRole;
  for (int64_t rank = 0; rank < topology.worldSize; ++rank) {
    std::string role = roleOf(topology, rank);
    auto [it, inserted] =
        byRole.try_emplace(role, static_cast<int32_t>(set.programs.size()));
    if (inserted) {
      Program program;
      program.role = role;
      if (colocatedPipeline(topology))
        buildColocatedPipelineProgram(topology, rank, program.instrs);
      else if (topology.layout == Layout::Colocated)
        buildColocatedProgram(topology, program.instrs);
      else if (!topology.modulesOf(rank).empty())
        buildPipelineProgram(topology, rank, topology.modulesOf(rank).front(),
                             /*bridges=*/true, /*finalize=*/true,
                             program.instrs);
      set.programs.push_back(std::move(program));
    }
    set.rankProgram[static_cast<size_t>(rank)] = it->second;
  }
  return set;
}

Program forwardOnly(const Program &program) {
  Program out;
  out.role = program.role;
  const std::vector<Instr> &in = program.instrs;
  for (size_t i = 0; i < in.size();) {
    size_t end = i;
    while (end + 1 < in.size() && in[end].fused)
      ++end;
    size_t first = out.instrs.size();
    for (size_t j = i; j <= end; ++j)
      if (!instrInfo(in[j].op).isGrad) {
        out.instrs.push_back(in[j]);
        out.instrs.back().fused = true;
      }
    if (out.instrs.size() > first)
      out.instrs.back().fused = false; // the batch ends here
    i = end + 1;
  }
  return out;
}

std::optional<std::vector<int32_t>>
assignPrograms(const Topology &topology, const std::vector<Program> &programs,
               std::string *error) {
  std::unordered_map<std::string, int32_t> byRole;
  for (size_t i = 0; i < programs.size(); ++i)
    if (!byRole.emplace(programs[i].role, static_cast<int32_t>(i)).second) {
      if (error)
        *error = "two programs have the role '" + programs[i].role + "'";
      return std::nullopt;
    }
  std::vector<int32_t> result(static_cast<size_t>(topology.worldSize), -1);
  for (int64_t rank = 0; rank < topology.worldSize; ++rank) {
    std::string role = roleOf(topology, rank);
    auto it = byRole.find(role);
    if (it == byRole.end()) {
      if (error)
        *error = "no program for rank " + std::to_string(rank) +
                 ", whose role is '" + role + "'";
      return std::nullopt;
    }
    result[static_cast<size_t>(rank)] = it->second;
  }
  return result;
}

//===----------------------------------------------------------------------===//
// Peers and shapes
//===----------------------------------------------------------------------===//

std::optional<Peers> resolvePeers(const Topology &topology, int64_t rank,
                                  const Instr &in, std::string *error) {
  const InstrInfo &info = instrInfo(in.op);
  auto fail = [&](const std::string &why) -> std::optional<Peers> {
    if (error)
      *error = why;
    return std::nullopt;
  };
  if (info.hasMicrobatch && (in.mb < 0 || in.mb >= topology.microbatches))
    return fail("microbatch " + std::to_string(in.mb) + " is not in [0, " +
                std::to_string(topology.microbatches) + ")");
  Peers peers;
  if (in.op == InstrOp::OptimizerStep) {
    peers.collective = true;
    return peers;
  }
  size_t count = info.operand == InstrOperand::Module ? topology.modules.size()
                                                      : topology.bridges.size();
  if (in.index < 0 || static_cast<size_t>(in.index) >= count)
    return fail(std::string(info.operand == InstrOperand::Module ? "module"
                                                                 : "bridge") +
                " index " + std::to_string(in.index) + " does not exist");
  if (info.operand == InstrOperand::Module) {
    const ModuleTopology &module = topology.modules[in.index];
    const Grid &grid = module.grid;
    if (!grid.contains(rank))
      return fail("rank " + std::to_string(rank) + " is not in module '" +
                  module.name + "'");
    Coords c = grid.coordsOf(rank);
    int64_t pp = grid.size(Dim::PP);
    auto stagePeer = [&](int64_t delta) -> std::optional<Peers> {
      int64_t p = c.pp + delta;
      if (p < 0 || p >= pp)
        return fail("module '" + module.name + "' has no pipeline stage " +
                    std::to_string(p) + " next to rank " +
                    std::to_string(rank) + "'s stage " + std::to_string(c.pp));
      Coords other = c;
      other.pp = p;
      peers.ranks.push_back(grid.rankOf(other));
      return peers;
    };
    switch (in.op) {
    case InstrOp::SendAct:
    case InstrOp::RecvGrad:
      return stagePeer(+1);
    case InstrOp::RecvAct:
    case InstrOp::SendGrad:
      return stagePeer(-1);
    case InstrOp::Shard:
    case InstrOp::Unshard:
      if (!module.isLanguage || c.pp != 0)
        return fail(std::string(info.name) +
                    " runs on the language first stage only");
      [[fallthrough]];
    case InstrOp::Forward:
    case InstrOp::Backward:
      // Tensor- and context-parallel peers compute each stage together.
      peers.collective = grid.size(Dim::TP) * grid.size(Dim::CP) > 1;
      return peers;
    case InstrOp::ReduceGrads:
      peers.collective = true;
      return peers;
    default:
      return peers;
    }
  }
  const BridgeTopology &bridge = topology.bridges[in.index];
  const Grid &src = topology.modules[bridge.src].grid;
  const Grid &dst = topology.modules[bridge.dst].grid;
  std::string name = topology.modules[bridge.src].name + "->" +
                     topology.modules[bridge.dst].name;
  bool colocatedOp =
      in.op == InstrOp::ColocatedForward || in.op == InstrOp::ColocatedBackward;
  if (colocatedOp != (bridge.mode == BridgeMode::Colocated))
    return fail(std::string(info.name) + " does not apply to the " +
                bridgeModeName(bridge.mode) + " bridge " + name);
  if (colocatedOp) {
    if (!src.contains(rank) || !dst.contains(rank))
      return fail("rank " + std::to_string(rank) +
                  " is not on both sides of bridge " + name);
    bool gathers = (in.op == InstrOp::ColocatedForward)
                       ? bridge.direction == "fan_in"
                       : bridge.direction == "fan_out";
    if (gathers && bridge.ratio > 1)
      peers.collective = true;
    return peers;
  }
  int64_t ns = static_cast<int64_t>(bridge.srcLeaders.size());
  int64_t nd = static_cast<int64_t>(bridge.dstLeaders.size());
  auto asSourceLeader = [&]() -> std::optional<Peers> {
    if (!src.contains(rank) || !isSourceLeader(bridge, src, rank))
      return fail("rank " + std::to_string(rank) +
                  " is not a source leader of bridge " + name);
    auto [b, e] = peerLanes(ns, nd, lane(src, rank));
    for (int64_t j = b; j < e; ++j)
      peers.ranks.push_back(bridge.dstLeaders[static_cast<size_t>(j)]);
    return peers;
  };
  auto asDestinationLeader = [&]() -> std::optional<Peers> {
    if (!dst.contains(rank) || !isDestinationLeader(bridge, dst, rank))
      return fail("rank " + std::to_string(rank) +
                  " is not a destination leader of bridge " + name);
    auto [b, e] = peerLanes(nd, ns, lane(dst, rank));
    for (int64_t j = b; j < e; ++j)
      peers.ranks.push_back(bridge.srcLeaders[static_cast<size_t>(j)]);
    return peers;
  };
  switch (in.op) {
  case InstrOp::BridgeSend:
  case InstrOp::BridgeRecvGrad:
    return asSourceLeader();
  case InstrOp::BridgeRecv:
  case InstrOp::BridgeSendGrad:
    return asDestinationLeader();
  case InstrOp::BridgeBroadcast:
    if (!dst.contains(rank) || dst.coordsOf(rank).pp != 0)
      return fail("rank " + std::to_string(rank) +
                  " is not on the first stage of bridge " + name +
                  "'s destination");
    peers.collective = true;
    peers.root = bridge.dstLeaders[static_cast<size_t>(lane(dst, rank))];
    return peers;
  case InstrOp::BridgeBroadcastGrad:
    if (!src.contains(rank) || src.coordsOf(rank).pp != src.size(Dim::PP) - 1)
      return fail("rank " + std::to_string(rank) +
                  " is not on the last stage of bridge " + name + "'s source");
    peers.collective = true;
    peers.root = bridge.srcLeaders[static_cast<size_t>(lane(src, rank))];
    return peers;
  default:
    return fail("unexpected instruction");
  }
}

std::string ShapeRule::str() const {
  std::string text = what + " of samples [" + std::to_string(sampleBegin) +
                     ", " + std::to_string(sampleEnd) + ")";
  if (sequence > 0)
    text += " x " + std::to_string(sequence) + " positions";
  else
    text += " (rows: their modality-token counts)";
  return text + " x " + std::to_string(hidden);
}

ShapeRule shapeRule(const Topology &topology, int64_t rank, int64_t peer,
                    const Instr &in) {
  const InstrInfo &info = instrInfo(in.op);
  ShapeRule rule;
  if (info.operand == InstrOperand::Module) {
    const ModuleTopology &module = topology.modules[in.index];
    int64_t lanes = module.grid.size(Dim::DP);
    auto [b, e] =
        laneSamples(topology.microBatchSize, lanes, lane(module.grid, rank));
    rule.what = module.name + (info.isGrad ? " gradient" : " activation");
    rule.sampleBegin = b;
    rule.sampleEnd = e;
    rule.hidden = module.hidden;
    if (module.isLanguage) {
      int64_t factor =
          module.grid.size(Dim::CP) *
          (topology.shard.sequenceParallel ? module.grid.size(Dim::TP) : 1);
      rule.sequence = topology.seqLength / factor;
    }
    return rule;
  }
  const BridgeTopology &bridge = topology.bridges[in.index];
  const ModuleTopology &src = topology.modules[bridge.src];
  const ModuleTopology &dst = topology.modules[bridge.dst];
  bool rankIsSource =
      in.op == InstrOp::BridgeSend || in.op == InstrOp::BridgeRecvGrad;
  int64_t s = rankIsSource ? rank : peer, d = rankIsSource ? peer : rank;
  auto [sb, se] = laneSamples(topology.microBatchSize, src.grid.size(Dim::DP),
                              lane(src.grid, s));
  auto [db, de] = laneSamples(topology.microBatchSize, dst.grid.size(Dim::DP),
                              lane(dst.grid, d));
  rule.what = src.name + (info.isGrad ? " token gradients" : " tokens");
  rule.sampleBegin = std::max(sb, db);
  rule.sampleEnd = std::min(se, de);
  rule.hidden = src.outputHidden;
  return rule;
}

std::string describeInstr(const Topology &topology, const Instr &in) {
  const InstrInfo &info = instrInfo(in.op);
  std::string text = info.name;
  if (info.operand == InstrOperand::Module && in.index >= 0 &&
      static_cast<size_t>(in.index) < topology.modules.size())
    text += " " + topology.modules[in.index].name;
  else if (info.operand == InstrOperand::Bridge && in.index >= 0 &&
           static_cast<size_t>(in.index) < topology.bridges.size())
    text += " " + topology.modules[topology.bridges[in.index].src].name + "->" +
            topology.modules[topology.bridges[in.index].dst].name;
  else if (info.operand != InstrOperand::None)
    text += " #" + std::to_string(in.index);
  if (info.hasMicrobatch)
    text += " mb " + std::to_string(in.mb);
  return text;
}

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

namespace {

/// A point-to-point message: (from, to, microbatch, direction).
struct MessageKey {
  int64_t from, to;
  int32_t mb;
  bool grad;
  /// The module (pipeline messages) or bridge the message belongs to:
  /// two bridges may join the same pair of ranks.
  int32_t channel;
  bool operator==(const MessageKey &o) const {
    return from == o.from && to == o.to && mb == o.mb && grad == o.grad &&
           channel == o.channel;
  }
};

int32_t channelOf(const Instr &in) {
  return instrInfo(in.op).operand == InstrOperand::Bridge ? 1024 + in.index
                                                          : in.index;
}
struct MessageKeyHash {
  size_t operator()(const MessageKey &k) const {
    size_t h = std::hash<int64_t>()(k.from * 1000003 + k.to);
    return h ^ (std::hash<int64_t>()((int64_t(k.channel) << 32) + k.mb * 2 +
                                     k.grad) +
                0x9e3779b97f4a7c15 + (h << 6) + (h >> 2));
  }
};

/// A collective instance: kind, operand, group, microbatch.
struct CollectiveKey {
  uint8_t op;
  int32_t index, mb;
  int64_t group;
  bool operator==(const CollectiveKey &o) const {
    return op == o.op && index == o.index && mb == o.mb && group == o.group;
  }
};
struct CollectiveKeyHash {
  size_t operator()(const CollectiveKey &k) const {
    return std::hash<int64_t>()(k.group * 131 + k.op) ^
           (std::hash<int64_t>()(int64_t(k.index) * 100003 + k.mb) << 1);
  }
};

struct Posting {
  int64_t rank;
  int32_t instr;
};

class Verifier {
public:
  Verifier(const Topology &topology, const std::vector<Program> &programs,
           const std::vector<int32_t> &rankProgram, size_t limit)
      : topology(topology), programs(programs), rankProgram(rankProgram),
        limit(limit) {}

  std::vector<PlanProblem> run() {
    if (!checkStructure())
      return problems;
    if (!matchMessages())
      return problems;
    simulate();
    return problems;
  }

private:
  const Topology &topology;
  const std::vector<Program> &programs;
  const std::vector<int32_t> &rankProgram;
  size_t limit;
  std::vector<PlanProblem> problems;

  bool full() const { return problems.size() >= limit; }

  const std::vector<Instr> &streamOf(int64_t rank) const {
    return programs[static_cast<size_t>(rankProgram[rank])].instrs;
  }
  PlanProblem::Place place(int64_t rank, int32_t instr) const {
    return {rank, rankProgram[rank], instr};
  }
  std::string where(int64_t rank, int32_t instr) const {
    return "rank " + std::to_string(rank) + " (instruction " +
           std::to_string(instr) + ": " +
           describeInstr(topology, streamOf(rank)[instr]) + ")";
  }
  void problem(std::string message, std::vector<PlanProblem::Place> places) {
    if (!full())
      problems.push_back({std::move(message), std::move(places)});
  }

  /// Every rank has a program, and every instruction applies to its rank.
  bool checkStructure() {
    if (rankProgram.size() != static_cast<size_t>(topology.worldSize)) {
      problem("the plan maps " + std::to_string(rankProgram.size()) +
                  " ranks to programs, but the world has " +
                  std::to_string(topology.worldSize),
              {});
      return false;
    }
    std::vector<bool> checked(programs.size(), false);
    for (int64_t rank = 0; rank < topology.worldSize && !full(); ++rank) {
      int32_t p = rankProgram[rank];
      if (p < 0 || static_cast<size_t>(p) >= programs.size()) {
        problem("rank " + std::to_string(rank) + " has no program", {});
        continue;
      }
      const std::vector<Instr> &stream = programs[p].instrs;
      for (size_t i = 0; i < stream.size() && !full(); ++i) {
        const Instr &in = stream[i];
        const InstrInfo &info = instrInfo(in.op);
        std::string error;
        if (!resolvePeers(topology, rank, in, &error)) {
          problem(where(rank, int32_t(i)) + " does not apply: " + error,
                  {place(rank, int32_t(i))});
          continue;
        }
        if (checked[p])
          continue;
        if (in.fused && !(info.isSend || info.isRecv))
          problem("only sends and receives can be posted together; " +
                      where(rank, int32_t(i)) + " is not one",
                  {place(rank, int32_t(i))});
        else if (in.fused && i + 1 == stream.size())
          problem(where(rank, int32_t(i)) +
                      " is posted together with an instruction that does "
                      "not exist",
                  {place(rank, int32_t(i))});
        else if (in.fused && !(instrInfo(stream[i + 1].op).isSend ||
                               instrInfo(stream[i + 1].op).isRecv))
          problem(where(rank, int32_t(i)) +
                      " is posted together with the next instruction, " +
                      describeInstr(topology, stream[i + 1]) +
                      ", which is not a send or receive",
                  {place(rank, int32_t(i))});
      }
      checked[p] = true;
    }
    return problems.empty();
  }

  /// Each send meets exactly one receive with the same shape rule.
  bool matchMessages() {
    struct Ends {
      std::vector<Posting> sends, recvs;
    };
    std::unordered_map<MessageKey, Ends, MessageKeyHash> messages;
    for (int64_t rank = 0; rank < topology.worldSize; ++rank) {
      const std::vector<Instr> &stream = streamOf(rank);
      for (size_t i = 0; i < stream.size(); ++i) {
        const InstrInfo &info = instrInfo(stream[i].op);
        if (!info.isSend && !info.isRecv)
          continue;
        Peers peers = *resolvePeers(topology, rank, stream[i], nullptr);
        for (int64_t peer : peers.ranks) {
          MessageKey key{info.isSend ? rank : peer, info.isSend ? peer : rank,
                         stream[i].mb, info.isGrad, channelOf(stream[i])};
          Ends &ends = messages[key];
          (info.isSend ? ends.sends : ends.recvs).push_back({rank, int32_t(i)});
        }
      }
    }
    // Report in a stable order.
    std::vector<std::pair<MessageKey, const Ends *>> bad;
    for (const auto &[key, ends] : messages)
      if (ends.sends.size() != 1 || ends.recvs.size() != 1)
        bad.push_back({key, &ends});
      else {
        // Both ends derive the shape from one topology, so they agree by
        // construction; what can go wrong is a route joining lanes that
        // share no samples: the message would carry nothing.
        const Posting &s = ends.sends[0], &r = ends.recvs[0];
        ShapeRule sent =
            shapeRule(topology, s.rank, r.rank, streamOf(s.rank)[s.instr]);
        if (sent.sampleEnd <= sent.sampleBegin)
          bad.push_back({key, &ends});
      }
    std::sort(bad.begin(), bad.end(), [](const auto &a, const auto &b) {
      return std::tie(a.first.from, a.first.to, a.first.mb, a.first.grad,
                      a.first.channel) < std::tie(b.first.from, b.first.to,
                                                  b.first.mb, b.first.grad,
                                                  b.first.channel);
    });
    for (const auto &[key, ends] : bad) {
      if (full())
        break;
      std::string what = std::string(key.grad ? "gradient" : "activation") +
                         " of microbatch " + std::to_string(key.mb) +
                         " from rank " + std::to_string(key.from) +
                         " to rank " + std::to_string(key.to);
      if (ends->sends.empty()) {
        const Posting &r = ends->recvs[0];
        problem(where(r.rank, r.instr) + " receives the " + what +
                    ", but rank " + std::to_string(key.from) +
                    " never sends it",
                {place(r.rank, r.instr)});
      } else if (ends->recvs.empty()) {
        const Posting &s = ends->sends[0];
        problem(where(s.rank, s.instr) + " sends the " + what + ", but rank " +
                    std::to_string(key.to) + " never receives it",
                {place(s.rank, s.instr)});
      } else if (ends->sends.size() > 1 || ends->recvs.size() > 1) {
        const std::vector<Posting> &twice =
            ends->sends.size() > 1 ? ends->sends : ends->recvs;
        problem("the " + what + " is " +
                    (ends->sends.size() > 1 ? "sent" : "received") + " " +
                    std::to_string(twice.size()) +
                    " times: " + where(twice[0].rank, twice[0].instr) +
                    " and " + where(twice[1].rank, twice[1].instr),
                {place(twice[0].rank, twice[0].instr),
                 place(twice[1].rank, twice[1].instr)});
      } else {
        const Posting &s = ends->sends[0], &r = ends->recvs[0];
        problem(
            where(s.rank, s.instr) + " sends " +
                shapeRule(topology, s.rank, r.rank, streamOf(s.rank)[s.instr])
                    .str() +
                " to " + where(r.rank, r.instr) +
                ": their lanes share no samples",
            {place(s.rank, s.instr), place(r.rank, r.instr)});
      }
    }
    return problems.empty();
  }

  /// The group (smallest member, size) of a collective instruction.
  std::pair<int64_t, int64_t> collectiveGroup(int64_t rank,
                                              const Instr &in) const {
    switch (in.op) {
    case InstrOp::OptimizerStep:
      return {0, topology.worldSize};
    case InstrOp::ReduceGrads:
      return groupKey(topology.modules[in.index].grid, rank,
                      {Dim::DP, Dim::CP});
    case InstrOp::Forward:
    case InstrOp::Backward:
    case InstrOp::Shard:
    case InstrOp::Unshard:
      return groupKey(topology.modules[in.index].grid, rank,
                      {Dim::TP, Dim::CP});
    case InstrOp::BridgeBroadcast:
      return groupKey(topology.modules[topology.bridges[in.index].dst].grid,
                      rank, {Dim::TP, Dim::CP});
    case InstrOp::BridgeBroadcastGrad:
      return groupKey(topology.modules[topology.bridges[in.index].src].grid,
                      rank, {Dim::TP, Dim::CP});
    default: {
      // Colocated gathers: `ratio` consecutive lanes of the wide side that
      // share a TP index.
      const BridgeTopology &bridge = topology.bridges[in.index];
      const Grid &wide =
          topology
              .modules[bridge.direction == "fan_in" ? bridge.src : bridge.dst]
              .grid;
      Coords c = wide.coordsOf(rank);
      c.dp = c.dp / bridge.ratio * bridge.ratio;
      return {wide.rankOf(c), bridge.ratio};
    }
    }
  }

  /// Runs every stream with blocking point-to-point operations (a fused
  /// run is posted at once and completes when all of it has matched) and
  /// collectives that complete when the whole group has arrived.
  void simulate() {
    struct State {
      int32_t pc = 0, end = 0, pending = 0;
      bool posted = false;
    };
    struct Arrivals {
      int64_t count = 0;
      std::vector<Posting> waiting;
    };
    std::vector<State> state(static_cast<size_t>(topology.worldSize));
    std::unordered_map<MessageKey, Posting, MessageKeyHash> sends, recvs;
    std::unordered_map<CollectiveKey, Arrivals, CollectiveKeyHash> arrivals;
    std::vector<int64_t> ready;
    for (int64_t rank = topology.worldSize; rank-- > 0;)
      ready.push_back(rank);
    auto release = [&](int64_t rank) {
      if (--state[rank].pending == 0)
        ready.push_back(rank);
    };
    size_t finished = 0;
    while (!ready.empty()) {
      int64_t rank = ready.back();
      ready.pop_back();
      State &s = state[rank];
      const std::vector<Instr> &stream = streamOf(rank);
      while (s.pending == 0) {
        if (s.posted) {
          s.pc = s.end;
          s.posted = false;
        }
        if (static_cast<size_t>(s.pc) >= stream.size()) {
          ++finished;
          break;
        }
        s.end = s.pc;
        while (stream[s.end].fused)
          ++s.end;
        ++s.end;
        s.posted = true;
        // Count everything first so that matches found while posting
        // cannot release this rank early.
        std::vector<std::pair<int32_t, Peers>> ops;
        for (int32_t i = s.pc; i < s.end; ++i) {
          Peers peers = *resolvePeers(topology, rank, stream[i], nullptr);
          s.pending += peers.collective ? 1 : int32_t(peers.ranks.size());
          ops.push_back({i, std::move(peers)});
        }
        ++s.pending;
        for (auto &[i, peers] : ops) {
          const Instr &in = stream[i];
          const InstrInfo &info = instrInfo(in.op);
          if (peers.collective) {
            auto [group, size] = collectiveGroup(rank, in);
            CollectiveKey key{uint8_t(in.op), in.index, in.mb, group};
            Arrivals &a = arrivals[key];
            a.waiting.push_back({rank, i});
            if (++a.count == size) {
              for (const Posting &p : a.waiting)
                if (p.rank != rank)
                  release(p.rank);
                else
                  --s.pending;
              arrivals.erase(key);
            }
            continue;
          }
          for (int64_t peer : peers.ranks) {
            MessageKey key{info.isSend ? rank : peer, info.isSend ? peer : rank,
                           in.mb, info.isGrad, channelOf(in)};
            auto &mine = info.isSend ? sends : recvs;
            auto &theirs = info.isSend ? recvs : sends;
            auto it = theirs.find(key);
            if (it == theirs.end()) {
              mine.emplace(key, Posting{rank, i});
              continue;
            }
            int64_t other = it->second.rank;
            theirs.erase(it);
            --s.pending;
            if (other != rank)
              release(other);
            else
              --s.pending;
          }
        }
        --s.pending;
      }
    }
    if (finished == static_cast<size_t>(topology.worldSize))
      return;
    reportDeadlock(state, sends, recvs, arrivals);
  }

  template <typename StateVec, typename MessageMap, typename CollectiveMap>
  void reportDeadlock(const StateVec &state, const MessageMap &sends,
                      const MessageMap &recvs, const CollectiveMap &arrivals) {
    // What each blocked rank waits for: the first operation of its posted
    // run that has not completed.
    auto waitsFor = [&](int64_t rank) -> std::pair<int64_t, int32_t> {
      const auto &s = state[rank];
      const std::vector<Instr> &stream = streamOf(rank);
      for (int32_t i = s.pc; i < s.end; ++i) {
        const Instr &in = stream[i];
        const InstrInfo &info = instrInfo(in.op);
        Peers peers = *resolvePeers(topology, rank, in, nullptr);
        if (peers.collective) {
          auto [group, size] = collectiveGroup(rank, in);
          auto it = arrivals.find(
              CollectiveKey{uint8_t(in.op), in.index, in.mb, group});
          if (it == arrivals.end())
            continue;
          // The smallest member that has not arrived.
          std::vector<int64_t> arrived;
          for (const Posting &p : it->second.waiting)
            arrived.push_back(p.rank);
          std::sort(arrived.begin(), arrived.end());
          for (int64_t member = group; member < topology.worldSize; ++member)
            if (!std::binary_search(arrived.begin(), arrived.end(), member) &&
                sameGroup(rank, member, in))
              return {member, i};
          continue;
        }
        for (int64_t peer : peers.ranks) {
          MessageKey key{info.isSend ? rank : peer, info.isSend ? peer : rank,
                         in.mb, info.isGrad, channelOf(in)};
          const auto &mine = info.isSend ? sends : recvs;
          auto it = mine.find(key);
          if (it != mine.end() && it->second.rank == rank)
            return {peer, i};
        }
      }
      return {-1, s.pc};
    };
    int64_t start = -1;
    for (int64_t rank = 0; rank < topology.worldSize; ++rank)
      if (static_cast<size_t>(state[rank].pc) < streamOf(rank).size()) {
        start = rank;
        break;
      }
    // Follow the waits-for edges until a rank repeats: that is the cycle.
    std::vector<int64_t> path;
    std::map<int64_t, size_t> seen;
    int64_t rank = start;
    std::vector<int32_t> instrs;
    while (rank >= 0 && !seen.count(rank)) {
      seen[rank] = path.size();
      path.push_back(rank);
      if (static_cast<size_t>(state[rank].pc) >= streamOf(rank).size()) {
        instrs.push_back(-1);
        break;
      }
      auto [next, instr] = waitsFor(rank);
      instrs.push_back(instr);
      rank = next;
    }
    std::vector<PlanProblem::Place> places;
    size_t from = rank >= 0 && seen.count(rank) ? seen[rank] : 0;
    bool finishedPeer = instrs.back() < 0;
    size_t last = finishedPeer ? path.size() - 1 : path.size();
    std::string message = "the plan deadlocks: ";
    for (size_t i = finishedPeer ? 0 : from; i < last; ++i) {
      int64_t next = i + 1 < path.size() ? path[i + 1] : rank;
      message += (places.empty() ? "" : ", ") + std::string("rank ") +
                 std::to_string(path[i]) + " waits at instruction " +
                 std::to_string(instrs[i]) + " (" +
                 describeInstr(topology, streamOf(path[i])[instrs[i]]) +
                 ") for rank " + std::to_string(next);
      places.push_back(place(path[i], instrs[i]));
    }
    if (finishedPeer) {
      message += ", which has already finished its program";
    } else {
      size_t stuck = 0;
      for (int64_t r = 0; r < topology.worldSize; ++r)
        stuck += static_cast<size_t>(state[r].pc) < streamOf(r).size();
      message += " (" + std::to_string(stuck) + " of " +
                 std::to_string(topology.worldSize) + " ranks are blocked)";
    }
    problem(message, places);
  }

  /// Whether `member` takes part in the collective `rank` is blocked in.
  bool sameGroup(int64_t rank, int64_t member, const Instr &in) const {
    return resolvePeers(topology, member, in, nullptr) &&
           collectiveGroup(member, in) == collectiveGroup(rank, in);
  }
};

} // namespace

std::vector<PlanProblem> verifyPrograms(const Topology &topology,
                                        const std::vector<Program> &programs,
                                        const std::vector<int32_t> &rankProgram,
                                        size_t limit) {
  return Verifier(topology, programs, rankProgram, limit).run();
}

std::vector<PlanProblem> checkDataflow(const Topology &topology,
                                       const ProgramSet &compiled,
                                       const std::vector<Program> &programs,
                                       const std::vector<int32_t> &rankProgram,
                                       size_t limit) {
  std::vector<PlanProblem> problems;
  auto key = [](const Instr &in) {
    return std::make_tuple(static_cast<int>(in.op), in.index, in.mb);
  };
  using Key = decltype(key(Instr{}));
  // Each program is checked once, as seen by its first rank.
  std::vector<bool> checked(programs.size(), false);
  for (size_t rank = 0; rank < rankProgram.size() && problems.size() < limit;
       ++rank) {
    int32_t p = rankProgram[rank];
    if (p < 0 || static_cast<size_t>(p) >= programs.size() || checked[p] ||
        rank >= compiled.rankProgram.size())
      continue;
    checked[p] = true;
    const std::vector<Instr> &stream = programs[p].instrs;
    const std::vector<Instr> &want =
        compiled.programs[compiled.rankProgram[rank]].instrs;
    auto problem = [&](int32_t instr, std::string message) {
      if (problems.size() < limit)
        problems.push_back({"rank " + std::to_string(rank) + " (role '" +
                                programs[p].role + "') " + message,
                            {{int64_t(rank), p, instr}}});
    };
    // Position of every instruction in the compiled program.
    std::map<Key, int32_t> position;
    for (size_t i = 0; i < want.size(); ++i)
      position.emplace(key(want[i]), int32_t(i));
    std::map<Key, int32_t> seen;
    bool complete = true;
    for (size_t i = 0; i < stream.size(); ++i) {
      auto at = position.find(key(stream[i]));
      if (at == position.end()) {
        problem(int32_t(i), "runs " + describeInstr(topology, stream[i]) +
                                ", which its compiled schedule does not have");
        complete = false;
      } else if (!seen.emplace(at->first, int32_t(i)).second) {
        problem(int32_t(i), "runs " + describeInstr(topology, stream[i]) +
                                " twice (instructions " +
                                std::to_string(seen[at->first]) + " and " +
                                std::to_string(i) + ")");
        complete = false;
      }
    }
    for (const Instr &in : want)
      if (!seen.count(key(in))) {
        problem(int32_t(stream.size()),
                "never runs " + describeInstr(topology, in) +
                    ", which its compiled schedule needs");
        complete = false;
      }
    if (!complete)
      continue;
    // Order: within a microbatch as compiled; an instruction without a
    // microbatch (reduce_grads, optimizer_step) after everything compiled
    // before it and before everything compiled after it.
    std::map<int32_t, std::pair<int32_t, int32_t>> lastOfMicrobatch;
    int32_t prefixMax = -1, barrier = -1;
    for (size_t i = 0; i < stream.size(); ++i) {
      const Instr &in = stream[i];
      int32_t pos = position[key(in)];
      bool ordered = true;
      std::string after;
      if (!instrInfo(in.op).hasMicrobatch) {
        ordered = prefixMax < pos && int32_t(i) == pos;
        barrier = pos;
      } else {
        auto last = lastOfMicrobatch.find(in.mb);
        if (last != lastOfMicrobatch.end() && last->second.first > pos) {
          ordered = false;
          after = describeInstr(topology, stream[last->second.second]);
        }
        lastOfMicrobatch[in.mb] = {pos, int32_t(i)};
        // Nothing compiled before a reduction or step may run after it.
        ordered = ordered && barrier < pos;
      }
      if (!ordered) {
        problem(int32_t(i),
                "runs " + describeInstr(topology, in) + " at instruction " +
                    std::to_string(i) +
                    (after.empty() ? "" : ", after " + after) +
                    ", out of the order its data needs (compiled position " +
                    std::to_string(pos) + ")");
        break;
      }
      prefixMax = std::max(prefixMax, pos);
    }
  }
  return problems;
}

} // namespace mimo
