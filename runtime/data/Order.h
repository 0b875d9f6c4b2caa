//===- Order.h - Which sample a step reads ----------------------*- C++ -*-===//
//
// docs/data.md "Order": the samples of a step depend only on the seed, the
// global batch and the step, never on the layout or the micro-batch split.
// Global sample g = (step · M + mb) · B + b (0-based; M · B the global
// batch) is, with `data.blend`, draw k of dataset d (Megatron's greedy
// blend), else draw g of the one dataset; draw k of a dataset of n samples
// is in epoch k / n and reads sample k mod n, or with `data.shuffle` that
// epoch's permutation of it. One header for the runtime and the tests.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DATA_ORDER_H
#define MIMO_RUNTIME_DATA_ORDER_H

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace mimo::exec {

/// Global sample b of microbatch mb of step `step` (all 0-based).
inline int64_t globalSample(int64_t step, int64_t mb, int64_t b,
                            int64_t microbatches, int64_t microBatchSize) {
  return (step * microbatches + mb) * microBatchSize + b;
}

/// A bijection of [0, n) keyed by `key`: a 4-round Feistel network on the
/// smallest even number of bits that holds n - 1, walking the cycle until
/// the value falls in [0, n) (docs/data.md gives the rounds).
uint64_t permuteIndex(uint64_t i, uint64_t n, uint64_t key);

/// Which of a dataset's n samples its k-th draw reads: k mod n in epoch
/// k / n, through that epoch's permutation (keyed by `key` and the epoch)
/// when `shuffle`.
int64_t epochSample(int64_t k, int64_t n, bool shuffle, uint64_t key);

/// Megatron's blend: global sample g goes to the dataset d with the largest
/// weight_d · max(g, 1) − (draws of d before g) (the first of equal ones),
/// weights normalised to sum 1. Thread-safe; remembers the draw counts
/// every kChunk samples, so a step far into a run costs one pass once.
class BlendOrder {
public:
  explicit BlendOrder(std::vector<double> weights);
  /// (dataset, draw index within it) of global samples [g, g + count).
  std::vector<std::pair<size_t, int64_t>> pick(int64_t g, int64_t count) const;
  static constexpr int64_t kChunk = 4096;

private:
  std::vector<double> weights;
  mutable std::mutex mutex;
  /// Draws per dataset before global sample c · kChunk.
  mutable std::vector<std::vector<int64_t>> counts;
  size_t argmax(int64_t g, const std::vector<int64_t> &drawn) const;
};

} // namespace mimo::exec

#endif // MIMO_RUNTIME_DATA_ORDER_H
