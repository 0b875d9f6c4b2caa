//===- Topology.h - Bridge lanes and sequence sharding factors -*- C++ -*-===//
//
// Formulas shared by the compiler checks (mimo-assign-grids) and the later
// bridge and sharding passes and runtime; MLIR-free.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CORE_TOPOLOGY_H
#define MIMO_RUNTIME_CORE_TOPOLOGY_H

#include <cstdint>
#include <optional>

namespace mimo {

/// How the data-parallel lanes of a bridge's two sides relate (SPEC §4.3).
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

/// What `seq_length` must be a multiple of for the language module's CP
/// zigzag and SP scatter (SPEC §4.5): 2·cp·tp with CP and SP, 2·cp with CP,
/// tp with SP, otherwise 1.
inline int64_t sequenceShardFactor(int64_t cp, int64_t tp,
                                   bool sequenceParallel) {
  int64_t factor = cp > 1 ? 2 * cp : 1;
  if (sequenceParallel)
    factor *= tp;
  return factor;
}

} // namespace mimo

#endif // MIMO_RUNTIME_CORE_TOPOLOGY_H
