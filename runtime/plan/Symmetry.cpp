//===- Symmetry.cpp - The data-parallel replicas' symmetry of a plan ------===//

#include "runtime/plan/Symmetry.h"

#include <algorithm>
#include <numeric>

namespace mimo {

ReplicaSymmetry::ReplicaSymmetry(const Topology &topology)
    : topology(&topology), steps(topology.modules.size(), 0) {
  for (size_t m = 0; m < topology.modules.size(); ++m)
    steps[m] = topology.modules[m].grid.size(Dim::DP);
}

size_t ReplicaSymmetry::moduleOf(int64_t rank) const {
  for (size_t m = 0; m < topology->modules.size(); ++m)
    if (topology->modules[m].grid.contains(rank))
      return m;
  return topology->modules.size();
}

namespace {

/// `rank`'s lane in `grid` moved by `lanes` (mod the lanes).
int64_t moveLane(const Grid &grid, int64_t rank, int64_t lanes) {
  const int64_t d = grid.size(Dim::DP), stride = grid.stride(Dim::DP);
  const int64_t lane = (rank - grid.rankOffset()) / stride % d;
  const int64_t moved = ((lane + lanes) % d + d) % d;
  return rank + (moved - lane) * stride;
}

int64_t laneIn(const Grid &grid, int64_t rank) {
  return (rank - grid.rankOffset()) / grid.stride(Dim::DP) % grid.size(Dim::DP);
}

} // namespace

int64_t ReplicaSymmetry::turn(int64_t rank, int64_t turns) const {
  if (orderValue == 1)
    return rank;
  const size_t m = moduleOf(rank);
  if (m == topology->modules.size())
    return rank;
  return moveLane(topology->modules[m].grid, rank, turns * steps[m]);
}

int64_t ReplicaSymmetry::turnsOf(int64_t rank) const {
  if (orderValue == 1)
    return 0;
  const size_t m = moduleOf(rank);
  if (m == topology->modules.size())
    return 0;
  return laneIn(topology->modules[m].grid, rank) / steps[m];
}

std::vector<int64_t> ReplicaSymmetry::representatives() const {
  std::vector<int64_t> reps;
  reps.reserve(static_cast<size_t>(topology->worldSize / orderValue));
  for (int64_t r = 0; r < topology->worldSize; ++r)
    if (isRepresentative(r))
      reps.push_back(r);
  return reps;
}

std::pair<int64_t, int64_t> ReplicaSymmetry::normalize(int64_t from,
                                                       int64_t to) const {
  if (orderValue == 1)
    return {from, to};
  const int64_t t = turnsOf(from);
  if (t == 0)
    return {from, to};
  return {turn(from, -t), turn(to, -t)};
}

namespace {

/// Whether turning by `candidate` maps the plan onto itself.
bool holds(const Topology &topology, const std::vector<int32_t> &rankProgram,
           const ReplicaSymmetry &candidate) {
  const size_t modules = topology.modules.size();
  for (size_t m = 0; m < modules; ++m) {
    const ModuleTopology &module = topology.modules[m];
    const Grid &grid = module.grid;
    const int64_t step = candidate.step(m);
    // Expert groups are runs of `ep` in the DP x CP group's ascending
    // members (expertGroups): a turn keeps them whole when it moves that
    // list by a multiple of ep.
    if (module.ep > 1) {
      const bool cpFaster = grid.stride(Dim::CP) < grid.stride(Dim::DP);
      const int64_t moved = cpFaster ? step * grid.size(Dim::CP) : step;
      if (moved % module.ep != 0 &&
          !(!cpFaster && module.ep % grid.size(Dim::DP) == 0))
        return false;
    }
  }
  for (const BridgeTopology &bridge : topology.bridges) {
    if (bridge.mode == BridgeMode::Colocated) {
      // Gather groups are `ratio` consecutive lanes of the wide side.
      const size_t wide =
          bridge.direction == "fan_in" ? bridge.src : bridge.dst;
      if (bridge.ratio > 1 && candidate.step(wide) % bridge.ratio != 0)
        return false;
    }
    // Each lane's leader turns into the leader of the lane it turns into.
    auto leadersTurn = [&](const std::vector<int64_t> &leaders, size_t m) {
      if (leaders.empty())
        return true;
      const int64_t lanes = static_cast<int64_t>(leaders.size());
      if (lanes != topology.modules[m].grid.size(Dim::DP))
        return false;
      for (int64_t j = 0; j < lanes; ++j)
        if (candidate.turn(leaders[static_cast<size_t>(j)], 1) !=
            leaders[static_cast<size_t>((j + candidate.step(m)) % lanes)])
          return false;
      return true;
    };
    if (!leadersTurn(bridge.srcLeaders, bridge.src) ||
        !leadersTurn(bridge.dstLeaders, bridge.dst))
      return false;
  }
  // Every rank: in a module, turned the same way by each module holding
  // it, and running its turned rank's program.
  if (static_cast<int64_t>(rankProgram.size()) != topology.worldSize)
    return false;
  for (int64_t r = 0; r < topology.worldSize; ++r) {
    int64_t turned = -1;
    for (size_t m = 0; m < modules; ++m) {
      const Grid &grid = topology.modules[m].grid;
      if (!grid.contains(r))
        continue;
      const int64_t here = moveLane(grid, r, candidate.step(m));
      if (turned >= 0 && here != turned)
        return false;
      turned = here;
    }
    if (turned < 0 || rankProgram[static_cast<size_t>(turned)] !=
                          rankProgram[static_cast<size_t>(r)])
      return false;
  }
  return true;
}

} // namespace

ReplicaSymmetry
findReplicaSymmetry(const Topology &topology,
                    const std::vector<int32_t> &rankProgram,
                    const std::function<bool(const ReplicaSymmetry &)> &also) {
  ReplicaSymmetry none(topology);
  int64_t common = 0;
  for (const ModuleTopology &module : topology.modules)
    common = std::gcd(common, module.grid.size(Dim::DP));
  if (common <= 1)
    return none;
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d * d <= common; ++d)
    if (common % d == 0) {
      divisors.push_back(d);
      if (d * d != common)
        divisors.push_back(common / d);
    }
  std::sort(divisors.rbegin(), divisors.rend());
  // Each order tried is a pass over the ranks: the first few largest.
  constexpr size_t kTries = 16;
  for (size_t i = 0; i < divisors.size() && i < kTries; ++i) {
    const int64_t order = divisors[i];
    if (order == 1)
      break;
    ReplicaSymmetry candidate(topology);
    candidate.orderValue = order;
    for (size_t m = 0; m < topology.modules.size(); ++m)
      candidate.steps[m] = topology.modules[m].grid.size(Dim::DP) / order;
    if (holds(topology, rankProgram, candidate) && (!also || also(candidate)))
      return candidate;
  }
  return none;
}

} // namespace mimo
