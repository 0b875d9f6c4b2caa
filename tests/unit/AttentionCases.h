//===- AttentionCases.h - Masks and checks of the attention tests -*- C++
//-*-===//
//
// What the attention tests share: a mask as the reference takes it
// (positions and segments of queries and keys), random inputs, and the
// normwise error against a float64 result.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_TESTS_UNIT_ATTENTIONCASES_H
#define MIMO_TESTS_UNIT_ATTENTIONCASES_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace mimo::testing {

struct Mask {
  std::vector<int64_t> qpos, qseg, kpos, kseg;
  bool causal = true;
};

/// An [S, B] lane: token = position * B + sample, the sample its segment.
inline Mask lane(int64_t S, int64_t B) {
  Mask m;
  for (int64_t p = 0; p < S; ++p)
    for (int64_t b = 0; b < B; ++b) {
      m.qpos.push_back(p);
      m.qseg.push_back(b);
    }
  m.kpos = m.qpos;
  m.kseg = m.qseg;
  return m;
}

/// CP 2, S 256, rank 1: its chunks 1 and 2 (positions 64..191) as
/// queries; keys are rank 0's shard (0..63, 192..255) then rank 1's: out of
/// order.
inline Mask zigzagRank1() {
  Mask m;
  for (int64_t p = 64; p < 192; ++p) {
    m.qpos.push_back(p);
    m.qseg.push_back(0);
  }
  for (int64_t p : {0, 192})
    for (int64_t i = 0; i < 64; ++i)
      m.kpos.push_back(p + i);
  for (int64_t p = 64; p < 192; ++p)
    m.kpos.push_back(p);
  m.kseg.assign(m.kpos.size(), 0);
  return m;
}

/// Packed THD: sequences of 70, 3 and 100 tokens, positions restarting.
inline Mask packedThd() {
  Mask m;
  int64_t sequence = 0;
  for (int64_t length : {70, 3, 100}) {
    for (int64_t i = 0; i < length; ++i) {
      m.qpos.push_back(i);
      m.qseg.push_back(sequence);
    }
    ++sequence;
  }
  m.kpos = m.qpos;
  m.kseg = m.qseg;
  return m;
}

/// [S=80, B=2] with sample 1's last 20 positions padding (a dense mask).
inline Mask densePadding() {
  Mask m = lane(80, 2);
  for (size_t i = 0; i < m.qseg.size(); ++i)
    if (m.qseg[i] == 1 && m.qpos[i] >= 60)
      m.qseg[i] = m.kseg[i] = -2;
  return m;
}

/// Encoder samples of 3, 2, 4 and `last` tokens, bidirectional within each
/// (all positions 0).
inline Mask encoderSamples(int64_t last) {
  Mask m;
  for (int64_t s : {0, 0, 0, 1, 1, 2, 2, 2, 2})
    m.qseg.push_back(s);
  for (int64_t i = 0; i < last; ++i)
    m.qseg.push_back(3);
  m.qpos.assign(m.qseg.size(), 0);
  m.kpos = m.qpos;
  m.kseg = m.qseg;
  m.causal = false;
  return m;
}

/// Query 2 has no key (its segment has none); key 2 no query.
inline Mask lonelyRows() {
  return {{0, 1, 2}, {0, 0, 9}, {0, 1, 2}, {0, 0, 7}, true};
}

inline std::vector<float> random(std::mt19937 &rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

/// max |a - ref| / max |ref|, -inf entries equal, NaN fails.
inline double relativeError(const std::vector<float> &a,
                            const std::vector<double> &ref) {
  double scale = 1e-30, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(ref[i])) {
      if (static_cast<double>(a[i]) != ref[i])
        return std::numeric_limits<double>::infinity();
      continue;
    }
    if (std::isnan(a[i]))
      return std::numeric_limits<double>::infinity();
    scale = std::max(scale, std::abs(ref[i]));
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - ref[i]));
  }
  return worst / scale;
}

inline std::vector<double> toDouble(const std::vector<float> &v) {
  return std::vector<double>(v.begin(), v.end());
}

} // namespace mimo::testing

#endif // MIMO_TESTS_UNIT_ATTENTIONCASES_H
