//===- WeightGrads.h - Zero bubble's deferred weight gradients --*- C++ -*-===//
//
// Under the zero-bubble schedule (docs/plan.md "Zero bubble") a
// stage's backward makes the input gradients only: each weight-gradient
// GEMM dW += X^T dY is kept here with its operands, per microbatch, and
// runs when the program's `weight_grad` for that microbatch comes. The
// gradients accumulate in the same order as a whole backward's (the
// microbatches in order, each weight once per microbatch), so the result
// is the same bits.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_MODEL_WEIGHTGRADS_H
#define MIMO_RUNTIME_MODEL_WEIGHTGRADS_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimo::exec {

class DeferredWeightGrads {
public:
  /// Until end(), every weight gradient and every "gradients done" notice
  /// of the stage is kept for microbatch `mb`.
  void begin(int64_t mb) { current = &pending[mb]; }
  void end() { current = nullptr; }
  bool deferring() const { return current != nullptr; }
  void defer(std::function<void()> gemm) {
    current->gemms.push_back(std::move(gemm));
  }
  void notice(const std::vector<size_t> &params) {
    current->done.push_back(params);
  }
  /// Runs microbatch `mb`'s GEMMs in the order the backward met them and
  /// returns its notices, in order, for the caller to give.
  std::vector<std::vector<size_t>> run(int64_t mb) {
    auto it = pending.find(mb);
    if (it == pending.end())
      throw std::logic_error("no weight gradients wait for microbatch " +
                             std::to_string(mb));
    Pending work = std::move(it->second);
    pending.erase(it);
    for (std::function<void()> &gemm : work.gemms)
      gemm();
    return std::move(work.done);
  }
  /// Microbatches whose weight gradients wait.
  size_t waiting() const { return pending.size(); }
  void clear() {
    pending.clear();
    current = nullptr;
  }

private:
  struct Pending {
    std::vector<std::function<void()>> gemms;
    std::vector<std::vector<size_t>> done;
  };
  std::map<int64_t, Pending> pending;
  Pending *current = nullptr;
};

} // namespace mimo::exec

#endif // MIMO_RUNTIME_MODEL_WEIGHTGRADS_H
