//===- Topology.h - Bridge lanes and sequence sharding factors -*- C++ -*-===//
//
// Formulas shared by the compiler checks (mimo-assign-grids) and the later
// bridge and sharding passes and runtime; MLIR-free.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_PLAN_TOPOLOGY_H
#define MIMO_RUNTIME_PLAN_TOPOLOGY_H

#include "runtime/config/Grid.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mimo {

/// How the data-parallel lanes of a bridge's two sides relate (docs/plan.md).
enum class BridgeMode { FanIn, FanOut, OneToOne, Colocated };
const char *bridgeModeName(BridgeMode mode);

struct LaneRelation {
  BridgeMode mode;
  /// k in fan-in ns = k·nd or fan-out nd = k·ns; 1 for one-to-one.
  int64_t ratio;
};

/// The relation between `sourceLanes` and `destinationLanes` data-parallel
/// lanes, or std::nullopt when neither divides the other. Colocated bridges
/// use the same rule on the modules' dp sizes, with mode Colocated.
std::optional<LaneRelation>
relateLanes(int64_t sourceLanes, int64_t destinationLanes, bool colocated);

/// Source leader of each data-parallel lane, in lane order (docs/plan.md): the
/// rank with dp = lane, tp = TP-1, cp = CP-1 at the last pipeline stage.
std::vector<int64_t> sourceLeaders(const Grid &grid);
/// Destination leader of each lane: dp = lane, tp = cp = 0, first stage.
std::vector<int64_t> destinationLeaders(const Grid &grid);

/// The TP×CP group of each lane at the boundary stage (last stage of a
/// source, first of a destination), in lane order: the ranks that hold a
/// leader's tensor.
std::vector<std::vector<int64_t>> boundaryGroups(const Grid &grid,
                                                 bool isSource);

/// One point-to-point transfer of a bridge, between lane leaders.
struct BridgeRoute {
  int64_t from, to;
  bool operator==(const BridgeRoute &other) const {
    return from == other.from && to == other.to;
  }
};

/// The lanes [begin, end) of the other side of a bridge that lane `lane` of
/// one side (of `ownLanes`) meets, the other side having `otherLanes`
/// (one divides the other): k = ratio consecutive lanes on the wider side,
/// one on the narrower. The one formula of a bridge's lane pairs.
std::pair<int64_t, int64_t> peerLanes(int64_t ownLanes, int64_t otherLanes,
                                      int64_t lane);

/// Routes between leader lists whose sizes divide (docs/plan.md): fan-in gives
/// destination lane i the source lanes [i·k, (i+1)·k); fan-out sends source
/// lane i to destination lanes [i·k, (i+1)·k). Ordered by destination lane
/// for fan-in and by source lane for fan-out (the concatenation order).
std::vector<BridgeRoute> bridgeRoutes(const std::vector<int64_t> &sources,
                                      const std::vector<int64_t> &destinations);

/// Folds per-sample token counts into `pieces` per-peer sizes by summing
/// consecutive groups (docs/plan.md). Fails, filling `error`, when the
/// count does not fold evenly or the sizes do not sum to `rows`.
std::optional<std::vector<int64_t>>
foldSplitSizes(const std::vector<int64_t> &sizes, int64_t pieces, int64_t rows,
               std::string *error = nullptr);

/// Whether the language first stage holds only part of the sequence (CP, or
/// SP over tp > 1), so the input-embedding gradient must be gathered after
/// the backward (the `unshard` instruction).
inline bool needsUnshard(int64_t cp, int64_t tp, bool sequenceParallel) {
  return cp > 1 || (sequenceParallel && tp > 1);
}

/// What `seq_length` must be a multiple of for the language module's CP
/// zigzag and SP scatter (docs/plan.md): 2·cp·tp with CP and SP, 2·cp with CP,
/// tp with SP, otherwise 1.
inline int64_t sequenceShardFactor(int64_t cp, int64_t tp,
                                   bool sequenceParallel) {
  int64_t factor = cp > 1 ? 2 * cp : 1;
  if (sequenceParallel)
    factor *= tp;
  return factor;
}

} // namespace mimo

#endif // MIMO_RUNTIME_PLAN_TOPOLOGY_H
