//===- RowBodies.h - Row reductions as block programs -----------*- C++ -*-===//
//
// The kernels whose every output needs a sum (or a maximum) over a whole
// row: the norms forward and backward (rows of `hidden`) and the cross-
// entropy's row maximum and sums (rows of the vocabulary shard). Written
// once as row programs: one thread block of kRowBlock threads per row;
// thread t folds the columns t, t + kRowBlock, ... (consecutive threads
// read consecutive columns: coalesced loads), the block's partials are
// combined by a fixed tree (deterministic, no atomics), and then every
// thread writes its columns. A row is read by a whole block, not by one
// thread walking it alone, which left most of a GPU idle and every load
// uncoalesced.
//
// A program says how many reductions it runs one after the other (kSums,
// each of kWidth values, the later ones given the totals of the earlier:
// LayerNorm's variance needs the mean) and provides
//
//   rows()                               the rows;
//   partial(k, row, t, totals, out)      thread t's kWidth partials of
//                                        reduction k (totals: those < k);
//   finish(row, t, totals)               thread t's share of the outputs;
//
// and, unless its partials are summed, a Combine specialization.
//
// The CUDA device launches eachRow (cuda/CudaDeviceImpl.cuh); runOnHost below
// runs the same program thread by thread in the GPU's order, and the unit
// tests compare it with the reference kernels of cpu/Kernels.h
// (tests/unit/KernelBodiesTest.cpp). Arithmetic follows the reference:
// double sums, outputs in the element type.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_ROWBODIES_H
#define MIMO_RUNTIME_DEVICE_ROWBODIES_H

#include "runtime/device/KernelBodies.h"

#include <cstdint>
#include <vector>

namespace mimo::device::rowwise {

using bodies::narrow;

/// Threads of a row's block (a power of two: the tree halves it).
inline constexpr int kRowBlock = 256;

/// How a program's partials combine: a sum, unless specialized below.
template <typename Program> struct Combine {
  MIMO_HD static double of(double a, double b) { return a + b; }
};

/// One step of the tree over a block's partials ([kWidth][kRowBlock]):
/// thread t < half takes in its partner t + half.
template <typename Program>
MIMO_HD inline void combineStep(double *shared, int half, int t) {
  if (t >= half)
    return;
  for (int w = 0; w < Program::kWidth; ++w)
    shared[w * kRowBlock + t] = Combine<Program>::of(
        shared[w * kRowBlock + t], shared[w * kRowBlock + t + half]);
}

/// y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps); y in Out (T or bf16
/// bits, bodies::narrow).
template <typename T, typename Out = T> struct RmsnormForward {
  const T *x, *w;
  Out *y;
  T *rstd;
  int64_t n, cols;
  T eps;
  static constexpr int kSums = 1, kWidth = 1;
  MIMO_HD int64_t rows() const { return n; }
  MIMO_HD void partial(int, int64_t r, int t, const double *,
                       double *out) const {
    const T *xr = x + r * cols;
    double ss = 0.0;
    for (int64_t c = t; c < cols; c += kRowBlock)
      ss += static_cast<double>(xr[c]) * static_cast<double>(xr[c]);
    out[0] = ss;
  }
  MIMO_HD double rstdOf(const double *totals) const {
    const double ms = cols > 0 ? totals[0] / static_cast<double>(cols) : 0.0;
    return 1.0 / ::sqrt(ms + static_cast<double>(eps));
  }
  MIMO_HD void finish(int64_t r, int t, const double *totals) const {
    const double rs = rstdOf(totals);
    if (t == 0)
      rstd[r] = static_cast<T>(rs);
    const T *xr = x + r * cols;
    Out *yr = y + r * cols;
    for (int64_t c = t; c < cols; c += kRowBlock)
      yr[c] = narrow<Out>(static_cast<T>(static_cast<double>(xr[c]) * rs *
                                         static_cast<double>(w[c])));
  }
};

/// dx = rstd * dy * w - rstd^3 * x * sum(dy * w * x) / cols.
/// In: how x is stored (T, or bf16 bits); Add: dx += the gradient (the
/// bits of writing it and adding it after), else dx = it. Likewise
/// LayernormBackward.
template <typename T, typename In = T, bool Add = false>
struct RmsnormBackward {
  const In *x;
  const T *w, *rstd, *dy;
  T *dx;
  int64_t n, cols;
  static constexpr int kSums = 1, kWidth = 1;
  MIMO_HD int64_t rows() const { return n; }
  MIMO_HD void partial(int, int64_t r, int t, const double *,
                       double *out) const {
    const In *xr = x + r * cols;
    const T *dyr = dy + r * cols;
    double s = 0.0;
    for (int64_t c = t; c < cols; c += kRowBlock)
      s += static_cast<double>(dyr[c]) * static_cast<double>(w[c]) *
           static_cast<double>(bodies::widen(xr[c]));
    out[0] = s;
  }
  MIMO_HD void finish(int64_t r, int t, const double *totals) const {
    const In *xr = x + r * cols;
    const T *dyr = dy + r * cols;
    T *dxr = dx + r * cols;
    const double rs = static_cast<double>(rstd[r]);
    const double coef = rs * rs * rs * totals[0] / static_cast<double>(cols);
    for (int64_t c = t; c < cols; c += kRowBlock) {
      const double g = static_cast<double>(dyr[c]) * static_cast<double>(w[c]);
      const T d = static_cast<T>(
          rs * g - coef * static_cast<double>(bodies::widen(xr[c])));
      dxr[c] = Add ? dxr[c] + d : d;
    }
  }
};

/// y = (x - mean) * rstd * w + b: the mean first, then the variance around
/// it (two reductions, as the reference's two passes).
template <typename T, typename Out = T> struct LayernormForward {
  const T *x, *w, *b;
  Out *y;
  T *mean, *rstd;
  int64_t n, cols;
  T eps;
  static constexpr int kSums = 2, kWidth = 1;
  MIMO_HD int64_t rows() const { return n; }
  MIMO_HD double meanOf(const double *totals) const {
    return cols > 0 ? totals[0] / static_cast<double>(cols) : 0.0;
  }
  MIMO_HD void partial(int k, int64_t r, int t, const double *totals,
                       double *out) const {
    const T *xr = x + r * cols;
    const double mu = k == 0 ? 0.0 : meanOf(totals);
    double s = 0.0;
    for (int64_t c = t; c < cols; c += kRowBlock) {
      const double v = static_cast<double>(xr[c]);
      s += k == 0 ? v : (v - mu) * (v - mu);
    }
    out[0] = s;
  }
  MIMO_HD void finish(int64_t r, int t, const double *totals) const {
    const double mu = meanOf(totals);
    const double var = cols > 0 ? totals[1] / static_cast<double>(cols) : 0.0;
    const double rs = 1.0 / ::sqrt(var + static_cast<double>(eps));
    if (t == 0) {
      mean[r] = static_cast<T>(mu);
      rstd[r] = static_cast<T>(rs);
    }
    const T *xr = x + r * cols;
    Out *yr = y + r * cols;
    for (int64_t c = t; c < cols; c += kRowBlock)
      yr[c] = narrow<Out>(static_cast<T>((static_cast<double>(xr[c]) - mu) *
                                             rs * static_cast<double>(w[c]) +
                                         static_cast<double>(b[c])));
  }
};

/// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
template <typename T, typename In = T, bool Add = false>
struct LayernormBackward {
  const In *x;
  const T *w, *mean, *rstd, *dy;
  T *dx;
  int64_t n, cols;
  static constexpr int kSums = 1, kWidth = 2;
  MIMO_HD int64_t rows() const { return n; }
  MIMO_HD void partial(int, int64_t r, int t, const double *,
                       double *out) const {
    const In *xr = x + r * cols;
    const T *dyr = dy + r * cols;
    const double mu = static_cast<double>(mean[r]);
    const double rs = static_cast<double>(rstd[r]);
    double sg = 0.0, sgx = 0.0;
    for (int64_t c = t; c < cols; c += kRowBlock) {
      const double xh = (static_cast<double>(bodies::widen(xr[c])) - mu) * rs;
      const double g = static_cast<double>(dyr[c]) * static_cast<double>(w[c]);
      sg += g;
      sgx += g * xh;
    }
    out[0] = sg;
    out[1] = sgx;
  }
  MIMO_HD void finish(int64_t r, int t, const double *totals) const {
    const In *xr = x + r * cols;
    const T *dyr = dy + r * cols;
    T *dxr = dx + r * cols;
    const double mu = static_cast<double>(mean[r]);
    const double rs = static_cast<double>(rstd[r]);
    const double mg = totals[0] / static_cast<double>(cols);
    const double mgx = totals[1] / static_cast<double>(cols);
    for (int64_t c = t; c < cols; c += kRowBlock) {
      const double xh = (static_cast<double>(bodies::widen(xr[c])) - mu) * rs;
      const double g = static_cast<double>(dyr[c]) * static_cast<double>(w[c]);
      const T d = static_cast<T>(rs * (g - mg - xh * mgx));
      dxr[c] = Add ? dxr[c] + d : d;
    }
  }
};

/// The largest logit of each row of a vocabulary shard (NaNs skipped, as
/// the reference's `>` skips them; -inf for an empty shard). In: how the
/// logits are stored (T, or bf16 bits read as their floats).
template <typename T, typename In = T> struct CrossEntropyRowMax {
  const In *logits;
  T *rowMax;
  int64_t n, vocabLocal;
  static constexpr int kSums = 1, kWidth = 1;
  MIMO_HD int64_t rows() const { return n; }
  MIMO_HD void partial(int, int64_t i, int t, const double *,
                       double *out) const {
    const In *row = logits + i * vocabLocal;
    double mx = bodies::negativeInfinity();
    for (int64_t j = t; j < vocabLocal; j += kRowBlock) {
      const double x = static_cast<double>(bodies::widen(row[j]));
      mx = x > mx ? x : mx;
    }
    out[0] = mx;
  }
  MIMO_HD void finish(int64_t i, int t, const double *totals) const {
    if (t == 0)
      rowMax[i] = static_cast<T>(totals[0]);
  }
};

/// The larger of two partial maxima.
template <typename T, typename In> struct Combine<CrossEntropyRowMax<T, In>> {
  MIMO_HD static double of(double a, double b) { return b > a ? b : a; }
};

/// Per row of a vocabulary shard: sum(exp(logit - global max)) and the
/// target's logit when the shard holds the target (else 0). In: as above.
template <typename T, typename In = T> struct CrossEntropySums {
  const In *logits;
  const int64_t *targets;
  const T *globalMax;
  T *sumExp, *targetLogit;
  int64_t n, vocabLocal, vocabBegin;
  static constexpr int kSums = 1, kWidth = 1;
  MIMO_HD int64_t rows() const { return n; }
  MIMO_HD void partial(int, int64_t i, int t, const double *,
                       double *out) const {
    const In *row = logits + i * vocabLocal;
    const double mx = static_cast<double>(globalMax[i]);
    double s = 0.0;
    for (int64_t j = t; j < vocabLocal; j += kRowBlock)
      s += ::exp(static_cast<double>(bodies::widen(row[j])) - mx);
    out[0] = s;
  }
  MIMO_HD void finish(int64_t i, int t, const double *totals) const {
    if (t != 0)
      return;
    sumExp[i] = static_cast<T>(totals[0]);
    const int64_t target = targets[i] - vocabBegin;
    targetLogit[i] =
        (target >= 0 && target < vocabLocal)
            ? static_cast<T>(bodies::widen(logits[i * vocabLocal + target]))
            : T(0);
  }
};

/// Runs a row program on the host thread by thread, each reduction's tree
/// step by step as the GPU's barriers order them: what the tests check.
template <typename Program> void runOnHost(const Program &program) {
  constexpr int W = Program::kWidth;
  std::vector<double> shared(static_cast<size_t>(W * kRowBlock));
  for (int64_t r = 0; r < program.rows(); ++r) {
    double totals[Program::kSums * W] = {};
    for (int k = 0; k < Program::kSums; ++k) {
      for (int t = 0; t < kRowBlock; ++t) {
        double part[W];
        program.partial(k, r, t, totals, part);
        for (int w = 0; w < W; ++w)
          shared[static_cast<size_t>(w * kRowBlock + t)] = part[w];
      }
      for (int half = kRowBlock / 2; half > 0; half /= 2)
        for (int t = 0; t < kRowBlock; ++t)
          combineStep<Program>(shared.data(), half, t);
      for (int w = 0; w < W; ++w)
        totals[k * W + w] = shared[static_cast<size_t>(w * kRowBlock)];
    }
    for (int t = 0; t < kRowBlock; ++t)
      program.finish(r, t, totals);
  }
}

} // namespace mimo::device::rowwise

#endif // MIMO_RUNTIME_DEVICE_ROWBODIES_H
