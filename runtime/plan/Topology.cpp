//===- Topology.cpp - Bridge lanes and sequence sharding factors ----------===//

#include "runtime/plan/Topology.h"

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

std::vector<int64_t> sourceLeaders(const Grid &grid) {
  std::vector<int64_t> leaders;
  for (int64_t lane = 0; lane < grid.size(Dim::DP); ++lane)
    leaders.push_back(
        grid.rankOf({grid.size(Dim::TP) - 1, grid.size(Dim::CP) - 1, lane,
                     grid.size(Dim::PP) - 1}));
  return leaders;
}

std::vector<int64_t> destinationLeaders(const Grid &grid) {
  std::vector<int64_t> leaders;
  for (int64_t lane = 0; lane < grid.size(Dim::DP); ++lane)
    leaders.push_back(grid.rankOf({0, 0, lane, 0}));
  return leaders;
}

std::vector<std::vector<int64_t>> boundaryGroups(const Grid &grid,
                                                 bool isSource) {
  std::vector<std::vector<int64_t>> groups;
  int64_t stage = isSource ? grid.size(Dim::PP) - 1 : 0;
  for (int64_t lane = 0; lane < grid.size(Dim::DP); ++lane)
    groups.push_back(
        grid.groupOf(grid.rankOf({0, 0, lane, stage}), {Dim::TP, Dim::CP}));
  return groups;
}

std::vector<BridgeRoute>
bridgeRoutes(const std::vector<int64_t> &sources,
             const std::vector<int64_t> &destinations) {
  std::vector<BridgeRoute> routes;
  int64_t ns = static_cast<int64_t>(sources.size());
  int64_t nd = static_cast<int64_t>(destinations.size());
  if (ns == 0 || nd == 0)
    return routes;
  if (ns >= nd && ns % nd == 0) {
    for (int64_t i = 0; i < nd; ++i) {
      auto [begin, end] = peerLanes(nd, ns, i);
      for (int64_t j = begin; j < end; ++j)
        routes.push_back({sources[j], destinations[i]});
    }
  } else if (nd % ns == 0) {
    for (int64_t i = 0; i < ns; ++i) {
      auto [begin, end] = peerLanes(ns, nd, i);
      for (int64_t j = begin; j < end; ++j)
        routes.push_back({sources[i], destinations[j]});
    }
  }
  return routes;
}

std::pair<int64_t, int64_t> peerLanes(int64_t ownLanes, int64_t otherLanes,
                                      int64_t lane) {
  if (ownLanes >= otherLanes) {
    int64_t k = ownLanes / otherLanes;
    return {lane / k, lane / k + 1};
  }
  int64_t k = otherLanes / ownLanes;
  return {lane * k, (lane + 1) * k};
}

std::optional<std::vector<int64_t>>
foldSplitSizes(const std::vector<int64_t> &sizes, int64_t pieces, int64_t rows,
               std::string *error) {
  auto fail = [&](std::string why) -> std::optional<std::vector<int64_t>> {
    if (error)
      *error = std::move(why);
    return std::nullopt;
  };
  if (pieces <= 0)
    return fail("a split needs at least one piece");
  if (pieces == 1)
    return std::vector<int64_t>{rows};
  int64_t count = static_cast<int64_t>(sizes.size());
  if (count % pieces != 0)
    return fail("bridge split metadata has " + std::to_string(count) +
                " entries, but communication requires " +
                std::to_string(pieces) + " splits");
  std::vector<int64_t> folded(pieces, 0);
  int64_t group = count / pieces, total = 0;
  for (int64_t i = 0; i < count; ++i) {
    folded[i / group] += sizes[i];
    total += sizes[i];
  }
  if (total != rows)
    return fail("bridge split metadata sums to " + std::to_string(total) +
                ", but tensor batch dimension is " + std::to_string(rows));
  return folded;
}

} // namespace mimo
