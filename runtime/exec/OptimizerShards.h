//===- OptimizerShards.h - The distributed optimizer's shards --*- C++ -*-===//
//
// docs/model.md "Distributed optimizer" (a module's `distributed_optimizer`,
// Megatron's use_distributed_optimizer, ZeRO-1). The trainable part of a
// stage's flat gradient buffer is reduced in ranges: the gradient buckets
// (exec/GradBuckets.h) and the TP-partial prefix, or the whole of it when
// nothing is bucketed. Each range is cut into one piece per member of the
// module's DP x CP group, in group order, as evenly as whole values allow
// (equal pieces whenever the range divides: a parameter spans a multiple
// of 64 values, so any group of a power of two up to 64). A range is
// reduce-scattered: each member gets the sum of its own piece; it keeps the
// AdamW moments of its pieces only, updates the weights there, and the
// updated pieces are all-gathered. Every member holds the same ranges in
// the same order, so their collectives match. Under expert parallelism the
// experts' range is cut over the members holding the same experts (the
// edp group, plan/Plan.h expertGroups) instead: each range names its
// group.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_EXEC_OPTIMIZERSHARDS_H
#define MIMO_RUNTIME_EXEC_OPTIMIZERSHARDS_H

#include "runtime/exec/ParamGroups.h"

#include <cstdint>
#include <vector>

namespace mimo::exec {

/// A range [begin, end) of the flat buffers reduced in one collective, cut
/// over group `group` of the OptimizerShards (0: the module's DP x CP
/// group; 1: the experts' edp group).
struct ShardRange {
  int64_t begin = 0, end = 0;
  size_t group = 0;
};

/// A group the ranges are cut over: its size and this rank's index.
struct ShardGroup {
  int64_t members = 1, own = 0;
};

/// Where member `k` of `members`' piece of `range` starts.
inline int64_t pieceStart(const ShardRange &range, int64_t members, int64_t k) {
  return range.begin + (range.end - range.begin) * k / members;
}

/// The values of each member's piece of `range`, in group order.
std::vector<int64_t> pieceCounts(const ShardRange &range, int64_t members);

class OptimizerShards {
public:
  /// `ranges`: covering [0, values) once each (std::logic_error if not),
  /// in the order every member reduces them, each over one of `groups`;
  /// `trainable`: what AdamW updates (ParamGroups).
  OptimizerShards(std::vector<ShardRange> ranges, int64_t values,
                  std::vector<ShardGroup> groups,
                  const std::vector<OptimizerRun> &trainable);
  /// Every range over one group of `members`, this rank `own` of them.
  OptimizerShards(std::vector<ShardRange> ranges, int64_t values,
                  int64_t members, int64_t own,
                  const std::vector<OptimizerRun> &trainable)
      : OptimizerShards(std::move(ranges), values, {{members, own}},
                        trainable) {}

  /// This member's piece of one range: the flat values [begin, end), its
  /// moments at [at, at + end - begin) of the member's own buffers.
  struct Piece {
    int64_t begin = 0, end = 0, at = 0;
  };
  /// A stretch of a piece updated with one setting.
  struct Run {
    int64_t begin = 0, end = 0, at = 0;
    bool decay = true;
  };

  const std::vector<ShardRange> &ranges() const { return rangeList; }
  /// This member's piece of ranges()[i].
  const Piece &piece(size_t i) const { return pieces[i]; }
  const std::vector<Run> &runs() const { return runList; }
  /// The members ranges()[i] is cut over.
  int64_t members(size_t i) const {
    return groupList[rangeList[i].group].members;
  }
  /// The values this member keeps moments for.
  int64_t size() const { return total; }

private:
  std::vector<ShardRange> rangeList;
  std::vector<Piece> pieces;
  std::vector<Run> runList;
  std::vector<ShardGroup> groupList;
  int64_t total = 0;
};

} // namespace mimo::exec

#endif // MIMO_RUNTIME_EXEC_OPTIMIZERSHARDS_H
