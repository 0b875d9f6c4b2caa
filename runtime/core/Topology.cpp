//===- Topology.cpp - Bridge lanes and sequence sharding factors ----------===//

#include "runtime/core/Topology.h"

namespace mimo {

const char *bridgeModeName(BridgeMode mode) {
  switch (mode) {
  case BridgeMode::FanIn:
    return "fan_in";
  case BridgeMode::FanOut:
    return "fan_out";
  case BridgeMode::OneToOne:
    return "one_to_one";
  case BridgeMode::Colocated:
    return "colocated";
  }
  return "?";
}

std::optional<LaneRelation>
relateLanes(int64_t sourceLanes, int64_t destinationLanes, bool colocated) {
  if (sourceLanes <= 0 || destinationLanes <= 0)
    return std::nullopt;
  if (sourceLanes % destinationLanes == 0) {
    int64_t ratio = sourceLanes / destinationLanes;
    BridgeMode mode = colocated    ? BridgeMode::Colocated
                      : ratio == 1 ? BridgeMode::OneToOne
                                   : BridgeMode::FanIn;
    return LaneRelation{mode, ratio};
  }
  if (destinationLanes % sourceLanes == 0)
    return LaneRelation{colocated ? BridgeMode::Colocated : BridgeMode::FanOut,
                        destinationLanes / sourceLanes};
  return std::nullopt;
}

} // namespace mimo
