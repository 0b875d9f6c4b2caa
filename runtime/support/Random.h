//===- Random.h - Counter-based deterministic randomness -------*- C++ -*-===//
//
// Data and parameters are pure functions of their coordinates (seed, step,
// microbatch, sample; or seed, module, parameter, global index), never of
// the layout or of the order in which ranks compute them (docs/data.md,
// docs/model.md).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SUPPORT_RANDOM_H
#define MIMO_RUNTIME_SUPPORT_RANDOM_H

#include <cstdint>
#include <string_view>

namespace mimo::exec {

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t hashString(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text)
    h = (h ^ c) * 0x100000001b3ULL;
  return mix64(h);
}

inline uint64_t combine(uint64_t h, uint64_t value) {
  return mix64(h ^ (value + 0x632be59bd9b4e019ULL + (h << 6) + (h >> 2)));
}

/// A splitmix64 stream from a key.
class Stream {
public:
  explicit Stream(uint64_t key) : state(key) {}
  uint64_t next() { return mix64(state++ * 0x9e3779b97f4a7c15ULL + 1); }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n).
  int64_t below(int64_t n) {
    return static_cast<int64_t>(uniform() * static_cast<double>(n));
  }

private:
  uint64_t state;
};

/// Uniform in [-1, 1) from a key (one parameter element).
inline float symmetricUnit(uint64_t key) {
  return static_cast<float>(static_cast<double>(mix64(key) >> 11) * 0x1.0p-52 -
                            1.0);
}

} // namespace mimo::exec

#endif // MIMO_RUNTIME_SUPPORT_RANDOM_H
