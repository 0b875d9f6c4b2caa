//===- GroupSplit.h - How a rank splits the world ---------------*- C++ -*-===//
//
// The nccl backend makes one communicator per group of the plan's list
// (plan/Plan.h communicatorGroups) with one ncclCommSplit of the world per
// family, called by every rank in the same order. A group of one rank needs
// no communicator (its collectives copy locally), and a family whose
// groups are all single ranks, or the world itself, needs no split at all.
// Every rank derives the same decision from the same list, so no rank
// waits in a split the others skip.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_COMM_GROUPSPLIT_H
#define MIMO_RUNTIME_COMM_GROUPSPLIT_H

#include <cstdint>
#include <vector>

namespace mimo::comm {

/// What rank `self` does for one family.
struct GroupSplit {
  /// Every rank calls ncclCommSplit for this family.
  bool split = false;
  /// The index of this rank's group in the family, or -1 (in none of its
  /// groups of two or more: NCCL_SPLIT_NOCOLOR, no communicator).
  int color = -1;
  /// This rank's index in that group (its rank in the new communicator).
  int key = 0;
};

/// One entry per family of `families`. `splitWorld`: a family that is the
/// world is split too (a channel's communicators, apart from the world's).
std::vector<GroupSplit>
groupSplits(const std::vector<std::vector<std::vector<int64_t>>> &families,
            int64_t self, int64_t worldSize, bool splitWorld = false);

/// The indices in `group` of `self`'s neighbours around the ring of its
/// members (the one before and the one after; one index when the group
/// has two members, none when it has fewer or lacks `self`), ascending:
/// whom ring CP's transfers go to and come from.
std::vector<int64_t> ringNeighbours(const std::vector<int64_t> &group,
                                    int64_t self);

} // namespace mimo::comm

#endif // MIMO_RUNTIME_COMM_GROUPSPLIT_H
