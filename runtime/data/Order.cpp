//===- Order.cpp - Which sample a step reads ------------------------------===//

#include "runtime/data/Order.h"

#include "runtime/support/Random.h"

#include <algorithm>

namespace mimo::exec {

uint64_t permuteIndex(uint64_t i, uint64_t n, uint64_t key) {
  if (n <= 1)
    return 0;
  int bits = 0;
  while ((uint64_t(1) << bits) < n && bits < 62)
    ++bits;
  const int half = (bits + 1) / 2;
  const uint64_t mask = (uint64_t(1) << half) - 1;
  uint64_t x = i;
  do {
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = mix64(combine(key, round) ^ right) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= n);
  return x;
}

int64_t epochSample(int64_t k, int64_t n, bool shuffle, uint64_t key) {
  const int64_t epoch = k / n, i = k % n;
  if (!shuffle)
    return i;
  return static_cast<int64_t>(permuteIndex(static_cast<uint64_t>(i),
                                           static_cast<uint64_t>(n),
                                           combine(key, uint64_t(epoch))));
}

BlendOrder::BlendOrder(std::vector<double> w) : weights(std::move(w)) {
  double total = 0;
  for (double x : weights)
    total += x;
  for (double &x : weights)
    x /= total;
  counts.push_back(std::vector<int64_t>(weights.size(), 0));
}

size_t BlendOrder::argmax(int64_t g, const std::vector<int64_t> &drawn) const {
  const double at = std::max(static_cast<double>(g), 1.0);
  size_t best = 0;
  double bestError = weights[0] * at - static_cast<double>(drawn[0]);
  for (size_t d = 1; d < weights.size(); ++d) {
    const double error = weights[d] * at - static_cast<double>(drawn[d]);
    if (error > bestError) {
      best = d;
      bestError = error;
    }
  }
  return best;
}

std::vector<std::pair<size_t, int64_t>> BlendOrder::pick(int64_t g,
                                                         int64_t count) const {
  std::vector<int64_t> drawn;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const size_t chunk = static_cast<size_t>(g / kChunk);
    while (counts.size() <= chunk) {
      std::vector<int64_t> next = counts.back();
      const int64_t begin = static_cast<int64_t>(counts.size() - 1) * kChunk;
      for (int64_t s = begin; s < begin + kChunk; ++s)
        ++next[argmax(s, next)];
      counts.push_back(std::move(next));
    }
    drawn = counts[chunk];
  }
  for (int64_t s = g / kChunk * kChunk; s < g; ++s)
    ++drawn[argmax(s, drawn)];
  std::vector<std::pair<size_t, int64_t>> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t s = g; s < g + count; ++s) {
    const size_t d = argmax(s, drawn);
    out.emplace_back(d, drawn[d]++);
  }
  return out;
}

} // namespace mimo::exec
