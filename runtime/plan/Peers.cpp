//===- Peers.cpp - Who an instruction talks to, and what it moves ---------===//

#include "runtime/plan/Plan.h"

#include "runtime/schedule/Formulas.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_map>

namespace mimo {

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
    const int64_t chunks = module.virtualStages;
    if (in.chunk < 0 || in.chunk >= chunks)
      return fail("module '" + module.name + "' has no chunk " +
                  std::to_string(in.chunk) + " (virtual_stages " +
                  std::to_string(chunks) + ")");
    // The neighbouring virtual stage: chunk x pp + stage, wrapping from
    // the last stage of one chunk to the first of the next.
    auto stagePeer = [&](int64_t delta) -> std::optional<Peers> {
      int64_t virtualStage = in.chunk * pp + c.pp + delta;
      if (virtualStage < 0 || virtualStage >= pp * chunks)
        return fail("module '" + module.name + "' has no pipeline stage " +
                    std::to_string(c.pp + delta) + " next to rank " +
                    std::to_string(rank) + "'s stage " + std::to_string(c.pp) +
                    (chunks > 1 ? " (chunk " + std::to_string(in.chunk) + ")"
                                : std::string()));
      Coords other = c;
      other.pp = virtualStage % pp;
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
      if (!module.isLanguage || c.pp != 0 || in.chunk != 0)
        return fail(std::string(info.name) +
                    " runs on the language first stage only");
      peers.collective = grid.size(Dim::TP) * grid.size(Dim::CP) > 1;
      return peers;
    case InstrOp::Forward:
    case InstrOp::Backward:
      // Tensor- and context-parallel peers compute each stage together; a
      // sparse module's data-parallel lanes too (ModuleTopology::sparse).
      peers.collective = grid.size(Dim::TP) * grid.size(Dim::CP) *
                             (module.sparse ? grid.size(Dim::DP) : 1) >
                         1;
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
    auto [b, e] = peerLanes(ns, nd, src.laneOf(rank));
    for (int64_t j = b; j < e; ++j)
      peers.ranks.push_back(bridge.dstLeaders[static_cast<size_t>(j)]);
    return peers;
  };
  auto asDestinationLeader = [&]() -> std::optional<Peers> {
    if (!dst.contains(rank) || !isDestinationLeader(bridge, dst, rank))
      return fail("rank " + std::to_string(rank) +
                  " is not a destination leader of bridge " + name);
    auto [b, e] = peerLanes(nd, ns, dst.laneOf(rank));
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
    peers.root = bridge.dstLeaders[static_cast<size_t>(dst.laneOf(rank))];
    return peers;
  case InstrOp::BridgeBroadcastGrad:
    if (!src.contains(rank) || src.coordsOf(rank).pp != src.size(Dim::PP) - 1)
      return fail("rank " + std::to_string(rank) +
                  " is not on the last stage of bridge " + name + "'s source");
    peers.collective = true;
    peers.root = bridge.srcLeaders[static_cast<size_t>(src.laneOf(rank))];
    return peers;
  default:
    return fail("unexpected instruction");
  }
}

int32_t senderChunk(const Topology &topology, int64_t rank, const Instr &in) {
  if (instrInfo(in.op).operand != InstrOperand::Module || in.index < 0 ||
      static_cast<size_t>(in.index) >= topology.modules.size())
    return in.chunk;
  const ModuleTopology &module =
      topology.modules[static_cast<size_t>(in.index)];
  if (module.virtualStages == 1 || !module.grid.contains(rank))
    return in.chunk;
  const int64_t stage = module.grid.coordsOf(rank).pp;
  if (in.op == InstrOp::RecvAct && stage == 0)
    return in.chunk - 1;
  if (in.op == InstrOp::RecvGrad && stage == module.grid.size(Dim::PP) - 1)
    return in.chunk + 1;
  return in.chunk;
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
        laneSamples(topology.microBatchSize, lanes, module.grid.laneOf(rank));
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
                              src.grid.laneOf(s));
  auto [db, de] = laneSamples(topology.microBatchSize, dst.grid.size(Dim::DP),
                              dst.grid.laneOf(d));
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
  if (in.chunk != 0)
    text += " chunk " + std::to_string(in.chunk);
  return text;
}

std::vector<int64_t> messagePeers(const Topology &topology,
                                  const Program &program, int64_t rank) {
  std::vector<int64_t> peers;
  for (const Instr &in : program.instrs) {
    const InstrInfo &info = instrInfo(in.op);
    if (!info.isSend && !info.isRecv)
      continue;
    if (std::optional<Peers> p = resolvePeers(topology, rank, in, nullptr))
      for (int64_t peer : p->ranks)
        if (peer != rank)
          peers.push_back(peer);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

std::vector<std::pair<int64_t, int64_t>>
postedChannels(const Topology &topology, const std::vector<Program> &programs,
               const std::vector<int32_t> &rankProgram) {
  std::vector<bool> posts(programs.size(), false);
  for (size_t p = 0; p < programs.size(); ++p)
    for (const Instr &in : programs[p].instrs)
      posts[p] = posts[p] || (in.posted && instrInfo(in.op).isSend);
  std::vector<std::pair<int64_t, int64_t>> channels;
  for (int64_t rank = 0; rank < topology.worldSize; ++rank) {
    const auto program = static_cast<size_t>(rankProgram[rank]);
    if (!posts[program])
      continue;
    for (const Instr &in : programs[program].instrs) {
      if (!in.posted || !instrInfo(in.op).isSend)
        continue;
      if (std::optional<Peers> peers =
              resolvePeers(topology, rank, in, nullptr))
        for (int64_t peer : peers->ranks)
          if (peer != rank)
            channels.emplace_back(rank, peer);
    }
  }
  std::sort(channels.begin(), channels.end());
  channels.erase(std::unique(channels.begin(), channels.end()), channels.end());
  return channels;
}

std::vector<std::vector<int64_t>>
channelRounds(const std::vector<std::pair<int64_t, int64_t>> &channels,
              int64_t worldSize) {
  std::vector<std::vector<int64_t>> rounds;
  for (size_t c = 0; c < channels.size(); ++c) {
    const auto [a, b] = channels[c];
    size_t k = 0;
    while (k < rounds.size() && (rounds[k][static_cast<size_t>(a)] >= 0 ||
                                 rounds[k][static_cast<size_t>(b)] >= 0))
      ++k;
    if (k == rounds.size())
      rounds.emplace_back(static_cast<size_t>(worldSize), -1);
    rounds[k][static_cast<size_t>(a)] = static_cast<int64_t>(c);
    rounds[k][static_cast<size_t>(b)] = static_cast<int64_t>(c);
  }
  return rounds;
}

} // namespace mimo
