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

/// The strides of `tokens[b][s]` = b * strideBatch + s * strideSeq (false
/// when they are not of that form, or not increasing).
bool strided(const std::vector<const std::vector<int64_t> *> &tokens,
             int64_t &strideBatch, int64_t &strideSeq) {
  const std::vector<int64_t> &first = *tokens.front();
  strideSeq = first.size() > 1 ? first[1] - first[0] : 1;
  strideBatch = tokens.size() > 1 ? (*tokens[1])[0] - first[0]
                                  : static_cast<int64_t>(first.size());
  if (first[0] != 0 || strideSeq <= 0 || strideBatch <= 0)
    return false;
  for (size_t b = 0; b < tokens.size(); ++b)
    for (size_t s = 0; s < tokens[b]->size(); ++s)
      if ((*tokens[b])[s] != static_cast<int64_t>(b) * strideBatch +
                                 static_cast<int64_t>(s) * strideSeq)
        return false;
  return true;
}

/// The DenseMask of segments ordered as the plan orders them (their
/// queries' ends relative to their first key), or none.
DenseMask denseMask(const std::map<int64_t, Segment> &segments,
                    const std::vector<int64_t> &queryEnd, bool orphans,
                    bool causal) {
  DenseMask none;
  if (segments.empty() || orphans)
    return none;
  const size_t nq = segments.begin()->second.queries.size();
  const size_t nk = segments.begin()->second.keys.size();
  if (nq == 0 || nk == 0 || (causal && nq != nk))
    return none;
  std::vector<const std::vector<int64_t> *> queries, keys;
  size_t q0 = 0, k0 = 0;
  for (const auto &entry : segments) {
    const Segment &s = entry.second;
    if (s.queries.size() != nq || s.keys.size() != nk)
      return none;
    // Causal: the ordered query i sees exactly the keys 0..i.
    for (size_t i = 0; causal && i < nq; ++i)
      if (queryEnd[q0 + i] != static_cast<int64_t>(k0 + i + 1))
        return none;
    queries.push_back(&s.queries);
    keys.push_back(&s.keys);
    q0 += nq;
    k0 += nk;
  }
  DenseMask m;
  if (!strided(queries, m.qStrideBatch, m.qStrideSeq) ||
      !strided(keys, m.kStrideBatch, m.kStrideSeq))
    return none;
  m.batch = static_cast<int64_t>(segments.size());
  m.seqQ = static_cast<int64_t>(nq);
  m.seqK = static_cast<int64_t>(nk);
  m.causal = causal;
  return m;
}

} // namespace

PlanView Plan::view(const int64_t *device) const {
  PlanView v;
  v.Tq = Tq;
  v.Tk = Tk;
  v.queryBlockCount = queryBlockCount;
  v.keyBlockCount = keyBlockCount;
  v.dense = dense;
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
  p.dense = denseMask(bySegment, queryEnd, !orphans.empty(), causal);
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
