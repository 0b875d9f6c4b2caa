//===- Sharding.cpp - CP zigzag and SP positions --------------------------===//

#include "runtime/plan/Sharding.h"

#include <algorithm>
#include <cstddef>

namespace mimo {

/// Appends [begin, end), merging with the previous range when adjacent.
static void append(PositionRanges &ranges, int64_t begin, int64_t end) {
  if (begin >= end)
    return;
  if (!ranges.empty() && ranges.back().second == begin)
    ranges.back().second = end;
  else
    ranges.emplace_back(begin, end);
}

static void appendZigzag(PositionRanges &ranges, int64_t start, int64_t length,
                         int64_t cp, int64_t cpRank) {
  int64_t chunk = length / (2 * cp);
  append(ranges, start + cpRank * chunk, start + (cpRank + 1) * chunk);
  append(ranges, start + (2 * cp - 1 - cpRank) * chunk,
         start + (2 * cp - cpRank) * chunk);
}

PositionRanges zigzagRanges(int64_t length, int64_t cp, int64_t cpRank) {
  PositionRanges ranges;
  if (cp == 1)
    append(ranges, 0, length);
  else
    appendZigzag(ranges, 0, length, cp, cpRank);
  return ranges;
}

PositionRanges thdZigzagRanges(const std::vector<int64_t> &cuSeqlens,
                               int64_t cp, int64_t cpRank) {
  PositionRanges ranges;
  for (size_t i = 0; i + 1 < cuSeqlens.size(); ++i)
    appendZigzag(ranges, cuSeqlens[i], cuSeqlens[i + 1] - cuSeqlens[i], cp,
                 cpRank);
  return ranges;
}

PositionRanges sequenceParallelSlice(const PositionRanges &ranges, int64_t tp,
                                     int64_t tpRank) {
  int64_t local = 0;
  for (const auto &[begin, end] : ranges)
    local += end - begin;
  int64_t first = tpRank * local / tp, last = (tpRank + 1) * local / tp;
  PositionRanges slice;
  int64_t offset = 0; // local index of the current range's first position
  for (const auto &[begin, end] : ranges) {
    int64_t from = std::max(first, offset),
            to = std::min(last, offset + end - begin);
    if (from < to)
      append(slice, begin + from - offset, begin + to - offset);
    offset += end - begin;
  }
  return slice;
}

std::vector<int64_t> expandRanges(const PositionRanges &ranges) {
  std::vector<int64_t> positions;
  for (const auto &[begin, end] : ranges)
    for (int64_t position = begin; position < end; ++position)
      positions.push_back(position);
  return positions;
}

} // namespace mimo
