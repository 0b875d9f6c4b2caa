//===- Sharding.h - CP zigzag and SP positions -----------------*- C++ -*-===//
//
// Which sequence positions a language first-stage rank holds after context
// parallelism (zigzag) and sequence parallelism (docs/plan.md).
// Positions are half-open ranges in the order the rank stores them.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_PLAN_SHARDING_H
#define MIMO_RUNTIME_PLAN_SHARDING_H

#include <cstdint>
#include <utility>
#include <vector>

namespace mimo {

/// [begin, end) ranges of sequence positions.
using PositionRanges = std::vector<std::pair<int64_t, int64_t>>;

/// CP rank `cpRank` of `cp` keeps chunk r then chunk 2·cp-1-r of the 2·cp
/// chunks of length/(2·cp). Requires length % (2·cp) == 0.
PositionRanges zigzagRanges(int64_t length, int64_t cp, int64_t cpRank);

/// Packed THD: the same zigzag applied to every sequence of the padded
/// cumulative lengths `cuSeqlens` (each length a multiple of 2·cp).
PositionRanges thdZigzagRanges(const std::vector<int64_t> &cuSeqlens,
                               int64_t cp, int64_t cpRank);

/// SP: TP rank `tpRank` of `tp` keeps a contiguous 1/tp of the rank-local
/// sequence that `ranges` describe.
PositionRanges sequenceParallelSlice(const PositionRanges &ranges, int64_t tp,
                                     int64_t tpRank);

/// The ranges as a flat list of positions.
std::vector<int64_t> expandRanges(const PositionRanges &ranges);

} // namespace mimo

#endif // MIMO_RUNTIME_PLAN_SHARDING_H
