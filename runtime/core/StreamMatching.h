//===- StreamMatching.h - What meets what between rank streams -*- C++ -*-===//
//
// The keys under which a send meets its receive and the members of a
// collective meet each other: one definition for the verifier's simulation
// (core/Verify.cpp) and the timed one (core/Simulate.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CORE_STREAMMATCHING_H
#define MIMO_RUNTIME_CORE_STREAMMATCHING_H

#include "runtime/core/Plan.h"

#include <cstdint>
#include <functional>
#include <utility>

namespace mimo {

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

inline int32_t channelOf(const Instr &in) {
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

/// The group (smallest member, size) of a collective instruction.
inline std::pair<int64_t, int64_t>
collectiveGroup(const Topology &topology, int64_t rank, const Instr &in) {
  switch (in.op) {
  case InstrOp::OptimizerStep:
    return {0, topology.worldSize};
  case InstrOp::ReduceGrads:
    return topology.modules[in.index].grid.groupKey(rank, {Dim::DP, Dim::CP});
  case InstrOp::Forward:
  case InstrOp::Backward:
  case InstrOp::Shard:
  case InstrOp::Unshard:
    return topology.modules[in.index].grid.groupKey(rank, {Dim::TP, Dim::CP});
  case InstrOp::BridgeBroadcast:
    return topology.modules[topology.bridges[in.index].dst].grid.groupKey(
        rank, {Dim::TP, Dim::CP});
  case InstrOp::BridgeBroadcastGrad:
    return topology.modules[topology.bridges[in.index].src].grid.groupKey(
        rank, {Dim::TP, Dim::CP});
  default: {
    // Colocated gathers over the wide side's gather group.
    const BridgeTopology &bridge = topology.bridges[in.index];
    const Grid &wide =
        topology.modules[bridge.direction == "fan_in" ? bridge.src : bridge.dst]
            .grid;
    return {gatherGroup(wide, bridge.ratio, rank).front(), bridge.ratio};
  }
  }
}

} // namespace mimo

#endif // MIMO_RUNTIME_CORE_STREAMMATCHING_H
