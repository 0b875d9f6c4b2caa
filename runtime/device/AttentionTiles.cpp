//===- AttentionTiles.cpp - The tile plan of one attention call -----------===//

#include "runtime/device/AttentionTiles.h"

#include <algorithm>
#include <map>

namespace mimo::device::tiles {

namespace {

struct Segment {
  std::vector<int64_t> queries, keys; // token indices, by position
};

/// Sorts tokens by position, ties in token order.
void byPosition(std::vector<int64_t> &tokens, const int64_t *pos) {
  std::sort(tokens.begin(), tokens.end(), [pos](int64_t a, int64_t b) {
    return pos[a] < pos[b] || (pos[a] == pos[b] && a < b);
  });
}

} // namespace

PlanView Plan::view(const int64_t *device) const {
  PlanView v;
  v.Tq = Tq;
  v.Tk = Tk;
  v.queryBlockCount = queryBlockCount;
  v.keyBlockCount = keyBlockCount;
  v.queryOrder = device;
  v.keyOrder = v.queryOrder + Tq;
  v.queryEnd = v.keyOrder + Tk;
  v.queryBlocks = v.queryEnd + Tq;
  v.keyBlocks = v.queryBlocks + kBlockFields * queryBlockCount;
  return v;
}

int64_t Plan::pairs() const {
  PlanView v = hostView();
  int64_t total = 0;
  for (int64_t b = 0; b < queryBlockCount; ++b) {
    const int64_t *block = v.queryBlocks + kBlockFields * b;
    for (int64_t r = 0; r < block[1]; ++r)
      total += v.queryEnd[block[0] + r] - block[2];
  }
  return total;
}

Plan plan(const int64_t *qpos, const int64_t *qseg, const int64_t *kpos,
          const int64_t *kseg, int64_t Tq, int64_t Tk, bool causal) {
  std::map<int64_t, Segment> bySegment;
  for (int64_t i = 0; i < Tq; ++i)
    bySegment[qseg[i]].queries.push_back(i);
  std::vector<int64_t> orphans; // keys no query can see
  for (int64_t j = 0; j < Tk; ++j) {
    auto it = bySegment.find(kseg[j]);
    if (it != bySegment.end())
      it->second.keys.push_back(j);
    else
      orphans.push_back(j);
  }
  std::vector<int64_t> queryOrder, keyOrder, queryEnd, queryBlocks, keyBlocks;
  queryOrder.reserve(static_cast<size_t>(Tq));
  keyOrder.reserve(static_cast<size_t>(Tk));
  for (auto &entry : bySegment) {
    Segment &s = entry.second;
    byPosition(s.queries, qpos);
    byPosition(s.keys, kpos);
    const int64_t q0 = static_cast<int64_t>(queryOrder.size());
    const int64_t k0 = static_cast<int64_t>(keyOrder.size());
    const int64_t nq = static_cast<int64_t>(s.queries.size());
    const int64_t nk = static_cast<int64_t>(s.keys.size());
    // Keys sorted by position: a causal query's keys end at the first key
    // after its position, and that end never falls as positions rise.
    int64_t cut = 0;
    for (int64_t i : s.queries) {
      if (causal)
        while (cut < nk && kpos[s.keys[static_cast<size_t>(cut)]] <= qpos[i])
          ++cut;
      queryOrder.push_back(i);
      queryEnd.push_back(k0 + (causal ? cut : nk));
    }
    keyOrder.insert(keyOrder.end(), s.keys.begin(), s.keys.end());
    for (int64_t b = 0; b < nq; b += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, nq - b);
      queryBlocks.insert(
          queryBlocks.end(),
          {q0 + b, rows, k0, queryEnd[static_cast<size_t>(q0 + b + rows - 1)]});
    }
    int64_t first = q0; // the first query whose end passes the block's key
    for (int64_t b = 0; b < nk; b += kKeyBlock) {
      while (first < q0 + nq && queryEnd[static_cast<size_t>(first)] <= k0 + b)
        ++first;
      keyBlocks.insert(keyBlocks.end(),
                       {k0 + b, std::min(kKeyBlock, nk - b), first, q0 + nq});
    }
  }
  const int64_t o0 = static_cast<int64_t>(keyOrder.size());
  const int64_t no = static_cast<int64_t>(orphans.size());
  keyOrder.insert(keyOrder.end(), orphans.begin(), orphans.end());
  for (int64_t b = 0; b < no; b += kKeyBlock)
    keyBlocks.insert(keyBlocks.end(), {o0 + b, std::min(kKeyBlock, no - b),
                                       int64_t(0), int64_t(0)});
  Plan p;
  p.Tq = Tq;
  p.Tk = Tk;
  p.queryBlockCount = static_cast<int64_t>(queryBlocks.size()) / kBlockFields;
  p.keyBlockCount = static_cast<int64_t>(keyBlocks.size()) / kBlockFields;
  p.packed.reserve(queryOrder.size() + keyOrder.size() + queryEnd.size() +
                   queryBlocks.size() + keyBlocks.size());
  for (const auto *part :
       {&queryOrder, &keyOrder, &queryEnd, &queryBlocks, &keyBlocks})
    p.packed.insert(p.packed.end(), part->begin(), part->end());
  return p;
}

} // namespace mimo::device::tiles
