//===- OptimizerShards.cpp - The distributed optimizer's shards -----------===//

#include "runtime/exec/OptimizerShards.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mimo::exec {

std::vector<int64_t> pieceCounts(const ShardRange &range, int64_t members) {
  std::vector<int64_t> counts;
  for (int64_t k = 0; k < members; ++k)
    counts.push_back(pieceStart(range, members, k + 1) -
                     pieceStart(range, members, k));
  return counts;
}

OptimizerShards::OptimizerShards(std::vector<ShardRange> ranges, int64_t values,
                                 std::vector<ShardGroup> groups,
                                 const std::vector<OptimizerRun> &trainable)
    : rangeList(std::move(ranges)), groupList(std::move(groups)) {
  for (const ShardGroup &g : groupList)
    if (g.members < 1 || g.own < 0 || g.own >= g.members)
      throw std::logic_error("optimizer shards: member " +
                             std::to_string(g.own) + " of " +
                             std::to_string(g.members));
  for (const ShardRange &r : rangeList)
    if (r.group >= groupList.size())
      throw std::logic_error("optimizer shards: a range of group " +
                             std::to_string(r.group) + " of " +
                             std::to_string(groupList.size()));
  std::vector<ShardRange> sorted = rangeList;
  std::sort(sorted.begin(), sorted.end(),
            [](const ShardRange &a, const ShardRange &b) {
              return a.begin < b.begin;
            });
  int64_t at = 0;
  for (const ShardRange &r : sorted) {
    if (r.begin != at || r.end < r.begin)
      throw std::logic_error("optimizer shards: the ranges do not cover [0, " +
                             std::to_string(values) +
                             ") once: a gap or an "
                             "overlap at " +
                             std::to_string(at));
    at = r.end;
  }
  if (at != values)
    throw std::logic_error("optimizer shards: the ranges end at " +
                           std::to_string(at) + ", the values at " +
                           std::to_string(values));
  for (const ShardRange &r : rangeList) {
    const ShardGroup &g = groupList[r.group];
    Piece p;
    p.begin = pieceStart(r, g.members, g.own);
    p.end = pieceStart(r, g.members, g.own + 1);
    p.at = total;
    total += p.end - p.begin;
    pieces.push_back(p);
    // The stretches of AdamW's runs inside the piece, in flat order.
    for (const OptimizerRun &run : trainable) {
      int64_t b = std::max(run.begin, p.begin), e = std::min(run.end, p.end);
      if (b < e)
        runList.push_back({b, e, p.at + (b - p.begin), run.decay});
    }
  }
}

} // namespace mimo::exec
