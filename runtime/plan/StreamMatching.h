//===- StreamMatching.h - What meets what between rank streams -*- C++ -*-===//
//
// The keys under which a send meets its receive and the members of a
// collective meet each other: one definition for the verifier's simulation
// (plan/Verify.cpp) and the timed one (cost/Simulate.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_PLAN_STREAMMATCHING_H
#define MIMO_RUNTIME_PLAN_STREAMMATCHING_H

#include "runtime/plan/Plan.h"
#include "runtime/plan/Symmetry.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mimo {

/// A point-to-point message: (from, to, microbatch, direction).
struct MessageKey {
  int64_t from, to;
  int32_t mb;
  bool grad;
  /// The module (pipeline messages) or bridge the message belongs to:
  /// two bridges may join the same pair of ranks; and the sending chunk
  /// (the interleaved schedule's pipeline messages between the same pair).
  int32_t channel;
  bool operator==(const MessageKey &o) const {
    return from == o.from && to == o.to && mb == o.mb && grad == o.grad &&
           channel == o.channel;
  }
};

inline int32_t channelOf(const Topology &topology, int64_t rank,
                         const Instr &in) {
  if (instrInfo(in.op).operand == InstrOperand::Bridge)
    return 1024 + in.index;
  return in.index + 2048 * senderChunk(topology, rank, in);
}
struct MessageKeyHash {
  size_t operator()(const MessageKey &k) const {
    size_t h = std::hash<int64_t>()(k.from * 1000003 + k.to);
    return h ^ (std::hash<int64_t>()((int64_t(k.channel) << 32) + k.mb * 2 +
                                     k.grad) +
                0x9e3779b97f4a7c15 + (h << 6) + (h >> 2));
  }
};

/// A collective instance: kind, operand, group, microbatch, chunk.
struct CollectiveKey {
  uint8_t op;
  int32_t index, mb;
  int64_t group;
  int32_t chunk;
  bool operator==(const CollectiveKey &o) const {
    return op == o.op && index == o.index && mb == o.mb && group == o.group &&
           chunk == o.chunk;
  }
};
struct CollectiveKeyHash {
  size_t operator()(const CollectiveKey &k) const {
    return std::hash<int64_t>()(k.group * 131 + k.op) ^
           (std::hash<int64_t>()((int64_t(k.index) * 100003 + k.mb) * 8 +
                                 k.chunk)
            << 1);
  }
};

/// The group of a collective instruction: its smallest member and size,
/// and whether it spans its module's DP dimension (then each replica's
/// turn maps it onto itself: Symmetry.h).
struct CollectiveGroup {
  int64_t first = 0, size = 1;
  bool overDataParallel = false;
  bool operator==(const CollectiveGroup &o) const {
    return first == o.first && size == o.size;
  }
};

inline CollectiveGroup collectiveGroup(const Topology &topology, int64_t rank,
                                       const Instr &in) {
  auto over = [&](const Grid &grid, std::initializer_list<Dim> dims) {
    const auto [first, size] = grid.groupKey(rank, dims);
    bool dp = false;
    for (Dim d : dims)
      dp = dp || d == Dim::DP;
    return CollectiveGroup{first, size, dp};
  };
  switch (in.op) {
  case InstrOp::OptimizerStep:
    return {0, topology.worldSize, true};
  case InstrOp::ReduceGrads:
    return over(topology.modules[in.index].grid, {Dim::DP, Dim::CP});
  case InstrOp::Forward:
  case InstrOp::Backward:
    // A sparse module's layers meet its DP x CP group too
    // (ModuleTopology::sparse).
    if (topology.modules[in.index].sparse)
      return over(topology.modules[in.index].grid, {Dim::TP, Dim::CP, Dim::DP});
    return over(topology.modules[in.index].grid, {Dim::TP, Dim::CP});
  case InstrOp::Shard:
  case InstrOp::Unshard:
    return over(topology.modules[in.index].grid, {Dim::TP, Dim::CP});
  case InstrOp::BridgeBroadcast:
    return over(topology.modules[topology.bridges[in.index].dst].grid,
                {Dim::TP, Dim::CP});
  case InstrOp::BridgeBroadcastGrad:
    return over(topology.modules[topology.bridges[in.index].src].grid,
                {Dim::TP, Dim::CP});
  default: {
    // Colocated gathers over the wide side's gather group (`ratio` lanes:
    // a symmetry's turn moves whole groups, Symmetry.cpp).
    const BridgeTopology &bridge = topology.bridges[in.index];
    const Grid &wide =
        topology.modules[bridge.direction == "fan_in" ? bridge.src : bridge.dst]
            .grid;
    return {gatherGroup(wide, bridge.ratio, rank).front(), bridge.ratio, false};
  }
  }
}

/// The message a point-to-point instruction of `rank` moves with `peer`;
/// under a symmetry, turned so that its sender is a representative (both
/// ends of a message, each on its orbit's representative, name it alike).
inline MessageKey messageKey(const Topology &topology, int64_t rank,
                             int64_t peer, const Instr &in,
                             const ReplicaSymmetry *symmetry = nullptr) {
  const InstrInfo &info = instrInfo(in.op);
  MessageKey key{info.isSend ? rank : peer, info.isSend ? peer : rank, in.mb,
                 info.isGrad, channelOf(topology, rank, in)};
  if (symmetry && !symmetry->trivial())
    std::tie(key.from, key.to) = symmetry->normalize(key.from, key.to);
  return key;
}

/// The collective instance a collective instruction of `rank` joins, and
/// how many members arrive at it (under a symmetry: its representatives).
inline std::pair<CollectiveKey, int64_t>
collectiveKey(const Topology &topology, int64_t rank, const Instr &in,
              const ReplicaSymmetry *symmetry = nullptr) {
  const CollectiveGroup group = collectiveGroup(topology, rank, in);
  const int64_t size =
      symmetry
          ? symmetry->representedMembers(group.size, group.overDataParallel)
          : group.size;
  return {CollectiveKey{uint8_t(in.op), in.index, in.mb, group.first, in.chunk},
          size};
}

/// The ends of messages and the members of collectives that have been
/// posted and not yet met, each kept as a `Posting` (who, which
/// instruction). With a symmetry (Symmetry.h) only representatives post:
/// messages meet under their turned keys, collectives when their
/// representatives are there.
template <typename Posting> struct Rendezvous {
  const ReplicaSymmetry *symmetry = nullptr;
  std::unordered_map<MessageKey, Posting, MessageKeyHash> sends, recvs;
  struct Arrivals {
    int64_t size = 0;
    std::vector<Posting> members;
  };
  std::unordered_map<CollectiveKey, Arrivals, CollectiveKeyHash> collectives;

  /// Posts `rank`'s end of its message with `peer`: the other end when it
  /// was already posted (the message is met and forgotten), else nothing
  /// (this end waits).
  std::optional<Posting> message(const Topology &topology, int64_t rank,
                                 int64_t peer, const Instr &in,
                                 Posting posting) {
    bool send = instrInfo(in.op).isSend;
    MessageKey key = messageKey(topology, rank, peer, in, symmetry);
    auto &theirs = send ? recvs : sends;
    auto it = theirs.find(key);
    if (it == theirs.end()) {
      (send ? sends : recvs).emplace(key, posting);
      return std::nullopt;
    }
    Posting other = it->second;
    theirs.erase(it);
    return other;
  }
  /// Whether `rank`'s end of its message with `peer` is still waiting.
  bool waiting(const Topology &topology, int64_t rank, int64_t peer,
               const Instr &in) const {
    const auto &mine = instrInfo(in.op).isSend ? sends : recvs;
    auto it = mine.find(messageKey(topology, rank, peer, in, symmetry));
    return it != mine.end() && it->second.rank == rank;
  }

  /// `rank` arrives at its collective: every member's posting once the
  /// whole group is there (the collective is then forgotten), else nothing.
  std::optional<std::vector<Posting>> arrive(const Topology &topology,
                                             int64_t rank, const Instr &in,
                                             Posting posting) {
    auto [key, size] = collectiveKey(topology, rank, in, symmetry);
    Arrivals &a = collectives[key];
    a.members.push_back(posting);
    if (static_cast<int64_t>(a.members.size()) < size)
      return std::nullopt;
    std::vector<Posting> members = std::move(a.members);
    collectives.erase(key);
    return members;
  }
  /// The members already at `rank`'s collective (null when none is).
  const std::vector<Posting> *arrived(const Topology &topology, int64_t rank,
                                      const Instr &in) const {
    auto it =
        collectives.find(collectiveKey(topology, rank, in, symmetry).first);
    return it == collectives.end() ? nullptr : &it->second.members;
  }
};

} // namespace mimo

#endif // MIMO_RUNTIME_PLAN_STREAMMATCHING_H
