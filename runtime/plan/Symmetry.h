//===- Symmetry.h - The data-parallel replicas' symmetry of a plan -*- C++
//-*-===//
//
// A plan's data-parallel replicas run the same programs with their peers
// moved by the same amount (docs/plan.md "Verification at scale"). When
// every module's DP lanes turn together, `step_m = dp_m / order` lanes at a
// time (the samples move by batch / order), the turn is a permutation of
// the ranks that maps every program, peer, message, group and bridge leader
// to another of its kind. The verifier and the timed simulation then run
// one representative of each orbit (the ranks whose lane is below their
// module's step) and stand for the whole world: a step of tp4 pp16 dp16384
// is 64 representatives, not 2^20 ranks.
//
// `findReplicaSymmetry` proves the turn is a symmetry from the topology and
// the plan's rank -> program map (each rank's program is its turned rank's,
// each bridge leader turns into a leader, expert and gather groups turn
// whole) before anything uses it; where nothing larger than 1 holds, the
// order is 1 and the callers run every rank.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_PLAN_SYMMETRY_H
#define MIMO_RUNTIME_PLAN_SYMMETRY_H

#include "runtime/plan/Plan.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace mimo {

class ReplicaSymmetry {
public:
  /// No symmetry: every rank its own orbit.
  explicit ReplicaSymmetry(const Topology &topology);

  /// Ranks per orbit (1: none).
  int64_t order() const { return orderValue; }
  bool trivial() const { return orderValue == 1; }
  /// The rank `rank` turns into after `turns` turns (negative: back).
  int64_t turn(int64_t rank, int64_t turns) const;
  /// How many turns bring the orbit's representative to `rank`.
  int64_t turnsOf(int64_t rank) const;
  int64_t representativeOf(int64_t rank) const {
    return orderValue == 1 ? rank : turn(rank, -turnsOf(rank));
  }
  bool isRepresentative(int64_t rank) const {
    return orderValue == 1 || turnsOf(rank) == 0;
  }
  /// Every orbit's representative, ascending.
  std::vector<int64_t> representatives() const;
  /// How many of a group's members are representatives: a group over
  /// the DP dimension holds every turn of each member (size / order); any
  /// other holds one lane, all or none of it representatives.
  int64_t representedMembers(int64_t size, bool overDataParallel) const {
    return overDataParallel ? size / orderValue : size;
  }
  /// The pair (from, to) turned so that `from` is its representative: the
  /// one name both ends of a message agree on.
  std::pair<int64_t, int64_t> normalize(int64_t from, int64_t to) const;

  /// Lanes a turn moves in `module` (dp / order).
  int64_t step(size_t module) const { return steps[module]; }

private:
  friend ReplicaSymmetry
  findReplicaSymmetry(const Topology &, const std::vector<int32_t> &,
                      const std::function<bool(const ReplicaSymmetry &)> &);
  const Topology *topology;
  int64_t orderValue = 1;
  std::vector<int64_t> steps; // per module
  /// The module whose grid names a rank's lane (the first holding it).
  size_t moduleOf(int64_t rank) const;
};

/// The largest order (a divisor of every module's dp) whose turn is a
/// symmetry of the plan and passes `alsoHolds` (the cost model's devices,
/// for the timed simulation); order 1 when none does. Costs a pass over
/// the ranks per order tried.
ReplicaSymmetry findReplicaSymmetry(
    const Topology &topology, const std::vector<int32_t> &rankProgram,
    const std::function<bool(const ReplicaSymmetry &)> &alsoHolds = {});

} // namespace mimo

#endif // MIMO_RUNTIME_PLAN_SYMMETRY_H
