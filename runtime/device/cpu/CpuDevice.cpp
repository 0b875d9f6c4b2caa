//===- CpuDevice.cpp - The fp32 CPU device -------------------------------===//
//
// Host memory and the reference kernels of cpu/Kernels.h, except where the
// reference's scalar double math costs a step its time: the tiled attention
// of cpu/Attention.h and the float kernels of cpu/FastKernels.h. Every call
// runs
// to completion before it returns, so there is nothing to order: record()
// returns no event and wait() has nothing to wait for.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/Device.h"
#include "runtime/device/Devices.h"
#include "runtime/device/GroupedAttention.h"
#include "runtime/device/KernelBodies.h"
#include "runtime/device/cpu/Attention.h"
#include "runtime/device/cpu/FastKernels.h"
#include "runtime/device/cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace mimo::device {
namespace {

namespace k = mimo::kernels;

/// Freed blocks kept for reuse, by size class: a step allocates the same
/// shapes as the last one, so after the first step its buffers come from
/// here instead of fresh pages (page faults and zeroing were 5-10% of a
/// step). Classes are 64-byte multiples up to 4 KiB, then 8 per power of
/// two (at most 12.5% slack). The cache never holds more than the peak of
/// live bytes, so memory stays within twice the live peak.
class BlockCache {
public:
  ~BlockCache() {
    for (auto &[bytes, blocks] : free)
      for (void *p : blocks)
        ::operator delete(p, std::align_val_t(kAlignment));
  }

  void *allocate(int64_t requested) {
    size_t bytes =
        classOf(static_cast<size_t>(std::max<int64_t>(requested, 1)));
    std::lock_guard<std::mutex> lock(mutex);
    auto it = free.find(bytes);
    void *p = nullptr;
    if (it != free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached -= bytes;
    } else {
      if (limit > 0 && live + bytes > limit)
        throw DeviceError(
            "out of host memory allocating " + std::to_string(requested) +
            " bytes: " + std::to_string(live) + " bytes in use of the " +
            std::to_string(limit) + " MIMO_TEST_CPU_MEMORY allows");
      p = ::operator new(bytes, std::align_val_t(kAlignment), std::nothrow);
      if (!p)
        throw DeviceError("out of host memory allocating " +
                          std::to_string(requested) + " bytes (" +
                          std::to_string(availableBytes(DeviceKind::Cpu, 0)) +
                          " bytes available)");
    }
    sizes[p] = bytes;
    live += bytes;
    peak = std::max(peak, live);
    reported = std::max(reported, live);
    return p;
  }

  void release(void *p) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = sizes.find(p);
    size_t bytes = it->second;
    sizes.erase(it);
    live -= bytes;
    if (cached + bytes > peak) {
      ::operator delete(p, std::align_val_t(kAlignment));
      return;
    }
    free[bytes].push_back(p);
    cached += bytes;
  }

  /// The most bytes live at once since resetPeak().
  int64_t peakLive() {
    std::lock_guard<std::mutex> lock(mutex);
    return static_cast<int64_t>(reported);
  }
  void resetPeak() {
    std::lock_guard<std::mutex> lock(mutex);
    reported = live;
  }

private:
  static constexpr size_t kAlignment = 64;
  static size_t classOf(size_t bytes) {
    if (bytes <= 4096)
      return (bytes + 63) / 64 * 64;
    size_t power = 4096;
    while (power * 2 <= bytes)
      power *= 2;
    size_t step = power / 8;
    return (bytes + step - 1) / step * step;
  }

  /// Tests stand in for a full device with MIMO_TEST_CPU_MEMORY=BYTES: a
  /// cap on the bytes live at once (0: none).
  static size_t limitFromEnvironment() {
    const char *cap = std::getenv("MIMO_TEST_CPU_MEMORY");
    return cap ? static_cast<size_t>(std::strtoull(cap, nullptr, 10)) : 0;
  }

  std::mutex mutex;
  const size_t limit = limitFromEnvironment();
  std::map<size_t, std::vector<void *>> free;
  std::unordered_map<void *, size_t> sizes;
  size_t live = 0, cached = 0, peak = 0, reported = 0;
};

class CpuDevice final : public Device {
public:
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu"; }

  void *allocate(int64_t bytes) override { return blocks.allocate(bytes); }
  void release(void *data) override { blocks.release(data); }
  int64_t peakBytes() const override { return blocks.peakLive(); }
  void resetPeakBytes() override { blocks.resetPeak(); }
  void fillZero(void *data, int64_t bytes) override {
    if (bytes > 0)
      std::memset(data, 0, static_cast<size_t>(bytes));
  }
  void fill(float *data, float value, int64_t n) override {
    std::fill(data, data + n, value);
  }
  void copy(void *dst, const void *src, int64_t bytes) override {
    if (bytes > 0 && dst != src)
      std::memmove(dst, src, static_cast<size_t>(bytes));
  }
  void upload(void *dst, const void *host, int64_t bytes) override {
    copy(dst, host, bytes);
  }
  void download(void *host, const void *src, int64_t bytes) override {
    copy(host, src, bytes);
  }

  EventPtr record() override { return nullptr; }
  void wait(const EventPtr &) override {}
  void synchronize() override {}

  void copyRows(float *dst, const int64_t *dstRows, const float *src,
                const int64_t *srcRows, int64_t count, int64_t cols) override {
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(dst + dstRows[i] * cols, src + srcRows[i] * cols,
                  static_cast<size_t>(cols) * sizeof(float));
  }
  void gatherRows(DType type, void *dst, const void *src, const int64_t *rows,
                  const float *weights, int64_t count, int64_t cols) override {
    if (type == DType::BF16)
      run(bodies::GatherRows<uint16_t>{static_cast<uint16_t *>(dst),
                                       static_cast<const uint16_t *>(src), rows,
                                       nullptr, count, cols});
    else
      run(bodies::GatherRows<float>{static_cast<float *>(dst),
                                    static_cast<const float *>(src), rows,
                                    weights, count, cols});
  }
  void scatterAddRows(float *dst, const int64_t *rows, const float *src,
                      const float *weights, int64_t count,
                      int64_t cols) override {
    run(bodies::ScatterAddRows{dst, rows, src, weights, count, cols});
  }
  void rowDots(const float *a, const int64_t *rows, const float *b,
               int64_t count, int64_t cols, float *out) override {
    run(bodies::RowDots{a, rows, b, out, count, cols});
  }
  void packBf16(const float *x, uint16_t *out, int64_t n) override {
    bodies::ToBf16Bits body{x, out, n};
    for (int64_t i = 0; i < n; ++i)
      body(i);
  }
  void unpackBf16(const uint16_t *in, float *out, int64_t n) override {
    bodies::FromBf16Bits body{in, out, n};
    for (int64_t i = 0; i < n; ++i)
      body(i);
  }
  void roundToBf16(float *data, int64_t n) override {
    for (int64_t i = 0; i < n; ++i)
      data[i] = bodies::roundToBf16(data[i]);
  }
  void scale(float *data, float alpha, int64_t n) override {
    for (int64_t i = 0; i < n; ++i)
      data[i] *= alpha;
  }
  void axpy(int64_t n, float alpha, const float *x, float *y) override {
    k::axpy<float>(n, alpha, x, y);
  }
  void add(DType type, void *out, const void *a, const void *b,
           int64_t n) override {
    if (type == DType::F32)
      addAs<float>(out, a, b, n);
    else if (type == DType::F64)
      addAs<double>(out, a, b, n);
    else
      throw DeviceError(std::string("add of ") + nameOf(type) + " values");
  }
  void residualBf16(const float *x, const float *branch, float *out,
                    int64_t n) override {
    residual(bodies::ResidualBf16<float>{x, branch, out, n});
  }
  void residualBf16(const float *x, const uint16_t *branch, float *out,
                    int64_t n) override {
    residual(bodies::ResidualBf16<uint16_t>{x, branch, out, n});
  }
  template <typename Body> static void run(const Body &body) {
    for (int64_t i = 0; i < body.count(); ++i)
      body(i);
  }
  template <typename Body> static void residual(const Body &body) {
    for (int64_t i = 0; i < body.count(); ++i)
      body(i);
  }
  void maximum(float *out, const float *a, const float *b, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) {
      float x = a[i], y = b[i];
      out[i] = std::isnan(x) ? x : ((y > x || std::isnan(y)) ? y : x);
    }
  }
  void sumSquaresInto(const float *x, int64_t n, double *acc) override {
    *acc += k::fast::sumSquares(x, n);
  }
  void maskedSumInto(const float *values, const float *mask, int64_t n,
                     double factor, double *acc) override {
    double total = 0;
    for (int64_t i = 0; i < n; ++i)
      if (mask[i] != 0.0f)
        total += static_cast<double>(values[i]);
    *acc += total * factor;
  }
  void addBias(float *y, const float *b, int64_t rows, int64_t cols) override {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        y[i * cols + j] += b[j];
  }
  void biasBackward(const float *dy, float *db, int64_t rows,
                    int64_t cols) override {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        db[j] += dy[i * cols + j];
  }

  void gemmF32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, const float *B, float beta, float *C) override {
    if (M > 0 && N > 0 && K <= 0 && beta == 0.0f) // C is not read
      std::fill(C, C + M * N, 0.0f);
    else
      k::gemm<float>(ta, tb, M, N, K, alpha, A, B, beta, C);
  }
  void gemmBf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                Bf16Operand A, Bf16Operand B, float beta, float *C) override {
    // bf16 products are exact in fp32: rounding the operands is all.
    std::vector<float> a = rounded(A, M * K), b = rounded(B, K * N);
    gemmF32(ta, tb, M, N, K, alpha, a.data(), b.data(), beta, C);
  }
  void gemmBf16Out(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                   float alpha, Bf16Operand A, Bf16Operand B,
                   uint16_t *C) override {
    packed(C, M * N, [&](float *out) {
      gemmBf16(ta, tb, M, N, K, alpha, A, B, 0.0f, out);
    });
  }
  /// An operand's n values rounded to bf16, as floats.
  std::vector<float> rounded(const Bf16Operand &x, int64_t n) {
    std::vector<float> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
    if (out.empty())
      return out;
    if (x.bits) {
      unpackBf16(x.bits, out.data(), n);
    } else {
      std::copy(x.f32, x.f32 + n, out.begin());
      roundToBf16(out.data(), n);
    }
    return out;
  }
  void rmsnormForwardF32(const float *x, const float *w, float *y, float *rstd,
                         int64_t rows, int64_t cols, float eps) override {
    k::rmsnormForward<float>(x, w, y, rstd, rows, cols, eps);
  }
  void rmsnormBackwardF32(const float *x, const float *w, const float *rstd,
                          const float *dy, float *dx, float *dw, int64_t rows,
                          int64_t cols) override {
    k::rmsnormBackward<float>(x, w, rstd, dy, dx, dw, rows, cols);
  }
  void layernormForwardF32(const float *x, const float *w, const float *b,
                           float *y, float *mean, float *rstd, int64_t rows,
                           int64_t cols, float eps) override {
    k::layernormForward<float>(x, w, b, y, mean, rstd, rows, cols, eps);
  }
  void layernormBackwardF32(const float *x, const float *w, const float *mean,
                            const float *rstd, const float *dy, float *dx,
                            float *dw, float *db, int64_t rows,
                            int64_t cols) override {
    k::layernormBackward<float>(x, w, mean, rstd, dy, dx, dw, db, rows, cols);
  }
  // The tanh form takes the vectorised kernels; the others the bodies.
  void geluForwardF32(const float *x, float *y, int64_t n, Gelu kind) override {
    if (kind == Gelu::Tanh)
      k::fast::geluForward(x, y, n);
    else
      run(bodies::GeluForward<float>{x, y, n, kind});
  }
  void geluBackwardF32(const float *x, const float *dy, float *dx, int64_t n,
                       Gelu kind) override {
    if (kind == Gelu::Tanh)
      k::fast::geluBackward(x, dy, dx, n);
    else
      run(bodies::GeluBackward<float>{x, dy, dx, n, kind});
  }
  void swigluForwardF32(const float *g, const float *u, float *y,
                        int64_t n) override {
    k::fast::swigluForward(g, u, y, n);
  }
  void swigluBackwardF32(const float *g, const float *u, const float *dy,
                         float *dg, float *du, int64_t n) override {
    k::fast::swigluBackward(g, u, dy, dg, du, n);
  }
  // The bf16-output forwards: the fp32 op into scratch, then packed (on the
  // CPU the pass saved is not worth a second kernel).
  void rmsnormForwardBf16(const float *x, const float *w, uint16_t *y,
                          float *rstd, int64_t rows, int64_t cols,
                          float eps) override {
    packed(y, rows * cols, [&](float *out) {
      rmsnormForwardF32(x, w, out, rstd, rows, cols, eps);
    });
  }
  void layernormForwardBf16(const float *x, const float *w, const float *b,
                            uint16_t *y, float *mean, float *rstd, int64_t rows,
                            int64_t cols, float eps) override {
    packed(y, rows * cols, [&](float *out) {
      layernormForwardF32(x, w, b, out, mean, rstd, rows, cols, eps);
    });
  }
  void rmsnormBackwardAddBf16(const uint16_t *x, const float *w,
                              const float *rstd, const float *dy, float *dx,
                              float *dw, int64_t rows, int64_t cols) override {
    const std::vector<float> values = unpacked(x, rows * cols);
    std::vector<float> d(values.size());
    rmsnormBackwardF32(values.data(), w, rstd, dy, d.data(), dw, rows, cols);
    axpy(rows * cols, 1.0f, d.data(), dx);
  }
  void layernormBackwardAddBf16(const uint16_t *x, const float *w,
                                const float *mean, const float *rstd,
                                const float *dy, float *dx, float *dw,
                                float *db, int64_t rows,
                                int64_t cols) override {
    const std::vector<float> values = unpacked(x, rows * cols);
    std::vector<float> d(values.size());
    layernormBackwardF32(values.data(), w, mean, rstd, dy, d.data(), dw, db,
                         rows, cols);
    axpy(rows * cols, 1.0f, d.data(), dx);
  }
  void geluForwardBf16(const float *x, uint16_t *y, int64_t n,
                       Gelu kind) override {
    packed(y, n, [&](float *out) { geluForwardF32(x, out, n, kind); });
  }
  void swigluForwardBf16(const float *g, const float *u, uint16_t *y,
                         int64_t n) override {
    packed(y, n, [&](float *out) { swigluForwardF32(g, u, out, n); });
  }
  void geluForwardBf16(const uint16_t *x, uint16_t *y, int64_t n,
                       Gelu kind) override {
    std::vector<float> in = unpacked(x, n);
    geluForwardBf16(in.data(), y, n, kind);
  }
  void swigluForwardBf16(const uint16_t *g, const uint16_t *u, uint16_t *y,
                         int64_t n) override {
    std::vector<float> gate = unpacked(g, n), up = unpacked(u, n);
    swigluForwardBf16(gate.data(), up.data(), y, n);
  }
  /// n bf16 values as floats (exact).
  std::vector<float> unpacked(const uint16_t *x, int64_t n) {
    std::vector<float> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
    unpackBf16(x, out.data(), n);
    return out;
  }
  /// y = packBf16(what `compute` writes into n floats of scratch).
  template <typename F> void packed(uint16_t *y, int64_t n, F &&compute) {
    std::vector<float> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
    compute(out.data());
    packBf16(out.data(), y, n);
  }
  void ropeTable(const int64_t *positions, int64_t tokens, int64_t dim,
                 const RopeSpec &spec, double *table) override {
    run(bodies::RopeTable{positions, table, tokens, dim, spec});
  }
  void rope(const float *x, DType out, void *y, const double *table,
            int64_t tokens, int64_t heads, int64_t dim, bool inverse) override {
    if (dim / 2 == 0 && out == DType::F32 && y == x)
      return;
    if (out == DType::BF16)
      run(bodies::Rope<float, uint16_t>{x, static_cast<uint16_t *>(y), table,
                                        tokens, heads, dim, inverse});
    else
      run(bodies::Rope<float>{x, static_cast<float *>(y), table, tokens, heads,
                              dim, inverse});
  }
  void repeatKv(DType type, const void *x, void *y, int64_t rows,
                int64_t groups, int64_t repeat, int64_t dim) override {
    if (type == DType::BF16)
      run(bodies::RepeatKv<uint16_t>{static_cast<const uint16_t *>(x),
                                     static_cast<uint16_t *>(y), rows, groups,
                                     repeat, dim});
    else
      run(bodies::RepeatKv<float>{static_cast<const float *>(x),
                                  static_cast<float *>(y), rows, groups, repeat,
                                  dim});
  }
  void sumKvGroups(const float *dy, float *y, int64_t rows, int64_t groups,
                   int64_t repeat, int64_t dim) override {
    run(bodies::SumKvGroups{dy, y, rows, groups, repeat, dim});
  }
  void attentionMerge(float *o, float *lse, const float *ob, const float *lseb,
                      int64_t rows, int64_t heads, int64_t d) override {
    run(bodies::AttentionMerge{o, lse, ob, lseb, rows, heads, d});
  }
  void geluBackwardBf16(const uint16_t *x, const float *dy, uint16_t *dx,
                        int64_t n, Gelu kind) override {
    std::vector<float> in = unpacked(x, n);
    packed(dx, n,
           [&](float *out) { geluBackwardF32(in.data(), dy, out, n, kind); });
  }
  void swigluBackwardBf16(const uint16_t *g, const uint16_t *u, const float *dy,
                          uint16_t *dg, uint16_t *du, int64_t n) override {
    std::vector<float> gate = unpacked(g, n), up = unpacked(u, n);
    std::vector<float> dup(static_cast<size_t>(std::max<int64_t>(n, 0)));
    packed(dg, n, [&](float *out) {
      swigluBackwardF32(gate.data(), up.data(), dy, out, dup.data(), n);
    });
    packBf16(dup.data(), du, n);
  }
  void attentionForward(const AttentionArgs &args, void *o,
                        float *lse) override {
    const PerHeadKeys keys(*this, args);
    const AttentionArgs &a = keys.args();
    if (a.dtype == DType::BF16)
      k::tiledAttentionForward(static_cast<const uint16_t *>(a.q),
                               static_cast<const uint16_t *>(a.k),
                               static_cast<const uint16_t *>(a.v),
                               static_cast<uint16_t *>(o), lse, a.plan, a.heads,
                               a.headDim);
    else
      k::tiledAttentionForward(
          static_cast<const float *>(a.q), static_cast<const float *>(a.k),
          static_cast<const float *>(a.v), static_cast<float *>(o), lse, a.plan,
          a.heads, a.headDim);
  }
  void attentionBackward(const AttentionArgs &args, const void *o,
                         const float *lse, const void *dout, float *dq,
                         float *dk, float *dv) override {
    const PerHeadKeys keys(*this, args);
    const AttentionArgs &a = keys.args();
    PerHeadKeyGrads grads(*this, args, dk, dv);
    if (a.dtype == DType::BF16)
      k::tiledAttentionBackward(
          static_cast<const uint16_t *>(a.q),
          static_cast<const uint16_t *>(a.k),
          static_cast<const uint16_t *>(a.v), static_cast<const uint16_t *>(o),
          lse, static_cast<const uint16_t *>(dout), dq, grads.dk(), grads.dv(),
          a.plan, a.heads, a.headDim);
    else
      k::tiledAttentionBackward(
          static_cast<const float *>(a.q), static_cast<const float *>(a.k),
          static_cast<const float *>(a.v), static_cast<const float *>(o), lse,
          static_cast<const float *>(dout), dq, grads.dk(), grads.dv(), a.plan,
          a.heads, a.headDim);
    grads.finish();
  }
  void embeddingForwardF32(const int64_t *ids, int64_t n, const float *table,
                           int64_t vb, int64_t ve, int64_t hidden,
                           float *out) override {
    k::embeddingForward<float>(ids, n, table, vb, ve, hidden, out);
  }
  void embeddingForwardBf16(const int64_t *ids, int64_t n,
                            const uint16_t *table, int64_t vb, int64_t ve,
                            int64_t hidden, float *out) override {
    bodies::EmbeddingForward<float, uint16_t> body{ids, table, out,   n,
                                                   vb,  ve,    hidden};
    for (int64_t i = 0; i < body.count(); ++i)
      body(i);
  }
  void embeddingBackward(const TokenGroupsView &groups, const float *dout,
                         int64_t hidden, float *dtable) override {
    // A row's tokens in order (the reference's additions per element),
    // rows of the table contiguous.
    for (int64_t g = 0; g < groups.groups; ++g) {
      float *row = dtable + groups.rows[g] * hidden;
      for (int64_t i = groups.offsets[g]; i < groups.offsets[g + 1]; ++i) {
        const float *d = dout + groups.tokens[i] * hidden;
        for (int64_t c = 0; c < hidden; ++c)
          row[c] += d[c];
      }
    }
  }
  void crossEntropyRowMaxF32(const float *logits, int64_t n, int64_t vl,
                             float *rowMax) override {
    k::crossEntropyRowMax<float>(logits, n, vl, rowMax);
  }
  void crossEntropySumsF32(const float *logits, const int64_t *targets,
                           int64_t n, int64_t vl, int64_t vb, const float *gmax,
                           float *sumExp, float *targetLogit) override {
    k::fast::crossEntropySums(logits, targets, n, vl, vb, gmax, sumExp,
                              targetLogit);
  }
  void crossEntropyLoss(const float *gmax, const float *gsum,
                        const float *gtarget, int64_t n, float *loss) override {
    k::crossEntropyLoss<float>(gmax, gsum, gtarget, n, loss);
  }
  void crossEntropyBackwardF32(const float *logits, const int64_t *targets,
                               int64_t n, int64_t vl, int64_t vb,
                               const float *gmax, const float *gsum,
                               const float *scale, float *dlogits) override {
    k::fast::crossEntropyBackward(logits, targets, n, vl, vb, gmax, gsum, scale,
                                  dlogits);
  }
  void crossEntropyRowMaxBf16(const uint16_t *logits, int64_t n, int64_t vl,
                              float *rowMax) override {
    crossEntropyRowMaxF32(unpacked(logits, n * vl).data(), n, vl, rowMax);
  }
  void crossEntropySumsBf16(const uint16_t *logits, const int64_t *targets,
                            int64_t n, int64_t vl, int64_t vb,
                            const float *gmax, float *sumExp,
                            float *targetLogit) override {
    crossEntropySumsF32(unpacked(logits, n * vl).data(), targets, n, vl, vb,
                        gmax, sumExp, targetLogit);
  }
  void crossEntropyBackwardBf16(const uint16_t *logits, const int64_t *targets,
                                int64_t n, int64_t vl, int64_t vb,
                                const float *gmax, const float *gsum,
                                const float *scale,
                                uint16_t *dlogits) override {
    const std::vector<float> values = unpacked(logits, n * vl);
    packed(dlogits, n * vl, [&](float *out) {
      crossEntropyBackwardF32(values.data(), targets, n, vl, vb, gmax, gsum,
                              scale, out);
    });
  }
  void adamw(float *p, const float *g, float *m, float *v, int64_t n,
             const AdamWStep &s) override {
    k::fast::adamw(p, g, m, v, n, static_cast<float>(s.lr),
                   static_cast<float>(s.beta1), static_cast<float>(s.beta2),
                   static_cast<float>(s.eps), static_cast<float>(s.weightDecay),
                   static_cast<float>(s.biasCorrection1()),
                   static_cast<float>(s.biasCorrection2()),
                   static_cast<float>(s.gradScale));
  }

private:
  mutable BlockCache blocks;

  template <typename T>
  static void addAs(void *out, const void *a, const void *b, int64_t n) {
    T *o = static_cast<T *>(out);
    const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
    for (int64_t i = 0; i < n; ++i)
      o[i] = x[i] + y[i];
  }
};

} // namespace

std::unique_ptr<Device> makeCpuDevice(int threads) {
  // The kernels' threads are the creating (rank) thread's setting.
  kernels::fast::setThreads(threads);
  return std::make_unique<CpuDevice>();
}

Device &hostDevice() {
  static std::unique_ptr<Device> device = makeCpuDevice();
  return *device;
}

} // namespace mimo::device
