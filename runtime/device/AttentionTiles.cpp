//===- AttentionTiles.cpp - Attention as tiles of one segment -------------===//

#include "runtime/device/AttentionTiles.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace mimo::device::tiles {

int64_t Segment::cut(int64_t q, bool causal) const {
  if (!causal)
    return static_cast<int64_t>(keys.size());
  int64_t position = queryPos[static_cast<size_t>(q)];
  return std::upper_bound(keyPos.begin(), keyPos.end(), position) -
         keyPos.begin();
}

std::vector<Segment> segmentsOf(const int64_t *qpos, const int64_t *qseg,
                                const int64_t *kpos, const int64_t *kseg,
                                int64_t Tq, int64_t Tk) {
  std::map<int64_t, Segment> bySegment;
  for (int64_t i = 0; i < Tq; ++i)
    bySegment[qseg[i]].queries.push_back(i);
  for (int64_t j = 0; j < Tk; ++j) {
    auto it = bySegment.find(kseg[j]);
    if (it != bySegment.end()) // keys no query can see are not needed
      it->second.keys.push_back(j);
  }
  std::vector<Segment> segments;
  segments.reserve(bySegment.size());
  for (auto &[id, s] : bySegment) {
    (void)id;
    auto byPosition = [](const int64_t *pos) {
      return [pos](int64_t a, int64_t b) {
        return pos[a] < pos[b] || (pos[a] == pos[b] && a < b);
      };
    };
    std::sort(s.queries.begin(), s.queries.end(), byPosition(qpos));
    std::sort(s.keys.begin(), s.keys.end(), byPosition(kpos));
    for (int64_t i : s.queries)
      s.queryPos.push_back(qpos[i]);
    for (int64_t j : s.keys)
      s.keyPos.push_back(kpos[j]);
    segments.push_back(std::move(s));
  }
  return segments;
}

} // namespace mimo::device::tiles
