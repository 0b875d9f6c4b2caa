//===- KernelBodies.h - Per-index bodies of the device kernels --*- C++ -*-===//
//
// Every non-GEMM kernel of the CUDA device but attention (FlashBodies.h)
// and the row reductions (RowBodies.h), written once as a functor over an
// index range: `count()` indices, `operator()(i)` computing output element
// or column i and nothing else. The CUDA device launches each
// one as a grid over its indices (cuda/CudaDeviceImpl.cuh); the CPU tests run
// the same functors in a plain loop and compare them with the reference
// kernels of cpu/Kernels.h (tests/unit/KernelBodiesTest.cpp), so the index
// arithmetic and the math of every GPU kernel are checked on any machine.
//
// Over 600 lines for the same reason as cpu/Kernels.cpp, which it mirrors
// op for op: one place to compare each GPU body with its reference.
//
// Each body follows its reference kernel's arithmetic: reductions and
// transcendental functions in double, accumulations into outputs in the
// element type and in the reference's order (a column body walks rows in
// order), so results agree to rounding of the math library, and no body
// needs atomics: every output is written by exactly one index.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_KERNELBODIES_H
#define MIMO_RUNTIME_DEVICE_KERNELBODIES_H

#include "runtime/device/Activation.h"
#include "runtime/device/RopeSpec.h"
#include "runtime/device/TokenGroups.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__CUDACC__)
#define MIMO_HD __host__ __device__
#else
#define MIMO_HD
#endif

namespace mimo::device::bodies {

/// The largest head dimension the fused attention takes (FlashBodies.h: a
/// thread's accumulators live in fixed-size local arrays).
inline constexpr int64_t kMaxHeadDim = 256;

MIMO_HD inline bool isNan(double x) { return x != x; }
MIMO_HD inline double negativeInfinity() { return -HUGE_VAL; }

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// `x` rounded to the nearest bfloat16 (ties to even), kept as a float: the
/// value a bf16 store and load give. NaN stays NaN, infinities stay.
MIMO_HD inline float roundToBf16(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0)
    bits |= 0x00400000u; // a quiet NaN keeps its sign
  else
    bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  float y;
  memcpy(&y, &bits, sizeof(y));
  return y;
}

/// A value as itself, or the float bfloat16 bits stand for (exact).
template <typename T> MIMO_HD inline T widen(T x) { return x; }
MIMO_HD inline float widen(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float x;
  memcpy(&x, &wide, sizeof(x));
  return x;
}

/// The bfloat16 bits of `x` rounded to bfloat16 (roundToBf16's top half).
MIMO_HD inline uint16_t bf16Bits(float x) {
  const float r = roundToBf16(x);
  uint32_t bits;
  memcpy(&bits, &r, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

/// A value computed in double stored as Out: cast to it, or for bf16 bits
/// (uint16_t) cast to float and rounded to bfloat16, the bits a float
/// store followed by packBf16 gives (what feeds a bf16 GEMM, in one pass).
template <typename Out> MIMO_HD inline Out narrow(double v) {
  return static_cast<Out>(v);
}
template <> MIMO_HD inline uint16_t narrow<uint16_t>(double v) {
  return bf16Bits(static_cast<float>(v));
}

/// Values rounded to bfloat16 in place (the bf16 emulation's stores).
struct RoundBf16 {
  float *data;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const { data[i] = roundToBf16(data[i]); }
};

/// The bfloat16 bits of each value rounded to bfloat16 (what a GEMM with
/// bf16 operands reads).
struct ToBf16Bits {
  const float *in;
  uint16_t *out;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const { out[i] = bf16Bits(in[i]); }
};

/// The floats bfloat16 bits stand for (exact).
struct FromBf16Bits {
  const uint16_t *in;
  float *out;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const { out[i] = widen(in[i]); }
};

/// Whether p is `bytes`-aligned.
MIMO_HD inline bool alignedTo(const void *p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

/// ToBf16Bits eight values an index: on the GPU two 16-byte loads and one
/// 16-byte store where the buffers are aligned (a pack at copy speed); the
/// same bits value by value elsewhere and on the host.
struct ToBf16BitsWide {
  const float *in;
  uint16_t *out;
  int64_t n;
  MIMO_HD int64_t count() const { return (n + 7) / 8; }
  MIMO_HD void operator()(int64_t i) const {
    const int64_t b = 8 * i;
#if defined(__CUDA_ARCH__)
    if (b + 8 <= n && alignedTo(in + b, 16) && alignedTo(out + b, 16)) {
      const float4 lo = *reinterpret_cast<const float4 *>(in + b);
      const float4 hi = *reinterpret_cast<const float4 *>(in + b + 4);
      auto two = [](float x, float y) {
        return static_cast<unsigned>(bf16Bits(x)) |
               (static_cast<unsigned>(bf16Bits(y)) << 16);
      };
      *reinterpret_cast<uint4 *>(out + b) = make_uint4(
          two(lo.x, lo.y), two(lo.z, lo.w), two(hi.x, hi.y), two(hi.z, hi.w));
      return;
    }
#endif
    for (int64_t k = b; k < b + 8 && k < n; ++k)
      out[k] = bf16Bits(in[k]);
  }
};

/// FromBf16Bits eight values an index (one 16-byte load, two 16-byte
/// stores on the GPU where aligned).
struct FromBf16BitsWide {
  const uint16_t *in;
  float *out;
  int64_t n;
  MIMO_HD int64_t count() const { return (n + 7) / 8; }
  MIMO_HD void operator()(int64_t i) const {
    const int64_t b = 8 * i;
#if defined(__CUDA_ARCH__)
    if (b + 8 <= n && alignedTo(in + b, 16) && alignedTo(out + b, 16)) {
      const uint4 v = *reinterpret_cast<const uint4 *>(in + b);
      auto low = [](unsigned w) { return __uint_as_float(w << 16); };
      auto high = [](unsigned w) { return __uint_as_float(w & 0xffff0000u); };
      *reinterpret_cast<float4 *>(out + b) =
          make_float4(low(v.x), high(v.x), low(v.y), high(v.y));
      *reinterpret_cast<float4 *>(out + b + 4) =
          make_float4(low(v.z), high(v.z), low(v.w), high(v.w));
      return;
    }
#endif
    for (int64_t k = b; k < b + 8 && k < n; ++k)
      out[k] = widen(in[k]);
  }
};

template <typename T> struct Fill {
  T *out;
  T value;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const { out[i] = value; }
};

template <typename T> struct Scale {
  T *data;
  T alpha;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const { data[i] *= alpha; }
};

template <typename T> struct Axpy {
  T alpha;
  const T *x;
  T *y;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const { y[i] += alpha * x[i]; }
};

/// out = a + b (the communicators' sum of two members' pieces).
template <typename T> struct Add {
  T *out;
  const T *a, *b;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const { out[i] = a[i] + b[i]; }
};

/// out = x + branch as precision "bf16" stores a residual: the branch
/// rounded to bfloat16 (as it is stored), the sum rounded (as it is
/// stored), in one pass. Branch: fp32, or bf16 bits (rounded already).
template <typename Branch> struct ResidualBf16 {
  const float *x;
  const Branch *branch;
  float *out;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const {
    out[i] = roundToBf16(x[i] + roundToBf16(widen(branch[i])));
  }
};

/// out = max(a, b), a NaN winning (a's first).
template <typename T> struct Maximum {
  T *out;
  const T *a, *b;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const {
    T x = a[i], y = b[i];
    if (isNan(x))
      out[i] = x;
    else
      out[i] = (y > x || isNan(y)) ? y : x;
  }
};

/// dst row dstRows[r] = src row srcRows[r]; one index per element.
template <typename T> struct CopyRows {
  T *dst;
  const int64_t *dstRows;
  const T *src;
  const int64_t *srcRows;
  int64_t rows, cols;
  MIMO_HD int64_t count() const { return rows * cols; }
  MIMO_HD void operator()(int64_t i) const {
    int64_t r = i / cols, c = i % cols;
    dst[dstRows[r] * cols + c] = src[srcRows[r] * cols + c];
  }
};

/// Expert dispatch (model/MoeMlp.h): dst row r = src row rows[r], times
/// weights[r] when given (T float only); one index per element.
template <typename T> struct GatherRows {
  T *dst;
  const T *src;
  const int64_t *rows;
  const float *weights;
  int64_t items, cols;
  MIMO_HD int64_t count() const { return items * cols; }
  MIMO_HD void operator()(int64_t i) const {
    int64_t r = i / cols, c = i % cols;
    T x = src[rows[r] * cols + c];
    if constexpr (sizeof(T) == sizeof(float))
      if (weights)
        x = static_cast<T>(weights[r] * x);
    dst[i] = x;
  }
};

/// Expert combine: dst row rows[r] += weights[r] (null: 1) · src row r, the
/// rows distinct (each token once per expert); one index per element.
struct ScatterAddRows {
  float *dst;
  const int64_t *rows;
  const float *src;
  const float *weights;
  int64_t items, cols;
  MIMO_HD int64_t count() const { return items * cols; }
  MIMO_HD void operator()(int64_t i) const {
    int64_t r = i / cols, c = i % cols;
    float x = src[i];
    if (weights)
      x *= weights[r];
    dst[rows[r] * cols + c] += x;
  }
};

/// out[r] = Σ_c a[rows[r]][c] · b[r][c], in double in column order: the
/// combine weights' gradients; one index per row.
struct RowDots {
  const float *a;
  const int64_t *rows;
  const float *b;
  float *out;
  int64_t items, cols;
  MIMO_HD int64_t count() const { return items; }
  MIMO_HD void operator()(int64_t r) const {
    double sum = 0;
    const float *x = a + rows[r] * cols, *y = b + r * cols;
    for (int64_t c = 0; c < cols; ++c)
      sum += static_cast<double>(x[c]) * static_cast<double>(y[c]);
    out[r] = static_cast<float>(sum);
  }
};

template <typename T> struct AddBias {
  T *y;
  const T *b;
  int64_t rows, cols;
  MIMO_HD int64_t count() const { return rows * cols; }
  MIMO_HD void operator()(int64_t i) const { y[i] += b[i % cols]; }
};

/// The forwards below write Out: T, or bf16 bits (narrow).
/// In: how x is stored (T, or bf16 bits read as their floats).
/// `kind`: Activation.h's GELU variants (the tanh form by default).
template <typename T, typename Out = T, typename In = T> struct GeluForward {
  const In *x;
  Out *y;
  int64_t n;
  Gelu kind = Gelu::Tanh;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const {
    double xv = static_cast<double>(widen(x[i]));
    y[i] = narrow<Out>(static_cast<T>(geluValue(xv, kind)));
  }
};

/// The backwards below read In (T, or bf16 bits) and write Out (T, or bf16
/// bits: the gradient a bf16 GEMM reads next, rounded as it would be).
template <typename T, typename Out = T, typename In = T> struct GeluBackward {
  const In *x;
  const T *dy;
  Out *dx;
  int64_t n;
  Gelu kind = Gelu::Tanh;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const {
    double xv = static_cast<double>(widen(x[i]));
    double d = geluSlope(xv, kind);
    dx[i] = narrow<Out>(static_cast<T>(static_cast<double>(dy[i]) * d));
  }
};

/// In: how gate and up are stored (T, or bf16 bits read as their floats).
template <typename T, typename Out = T, typename In = T> struct SwigluForward {
  const In *gate, *up;
  Out *y;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const {
    if constexpr (std::is_same_v<T, float>) {
      // fp32 (docs/model.md): one expf, no double arithmetic.
      const float g = widen(gate[i]);
      const float sig = 1.0f / (1.0f + ::expf(-g));
      y[i] = narrow<Out>(g * sig * widen(up[i]));
    } else {
      double g = static_cast<double>(widen(gate[i]));
      double sig = 1.0 / (1.0 + ::exp(-g));
      y[i] = narrow<Out>(
          static_cast<T>(g * sig * static_cast<double>(widen(up[i]))));
    }
  }
};

template <typename T, typename Out = T, typename In = T> struct SwigluBackward {
  const In *gate, *up;
  const T *dy;
  Out *dgate, *dup;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const {
    if constexpr (std::is_same_v<T, float>) {
      const float g = widen(gate[i]);
      const float sig = 1.0f / (1.0f + ::expf(-g));
      const float silu = g * sig;
      const float dsilu = sig * (1.0f + g * (1.0f - sig));
      const float d = dy[i];
      dgate[i] = narrow<Out>(d * widen(up[i]) * dsilu);
      dup[i] = narrow<Out>(d * silu);
    } else {
      double g = static_cast<double>(widen(gate[i]));
      double sig = 1.0 / (1.0 + ::exp(-g));
      double silu = g * sig;
      double dsilu = sig * (1.0 + g * (1.0 - sig));
      double d = static_cast<double>(dy[i]);
      dgate[i] = narrow<Out>(
          static_cast<T>(d * static_cast<double>(widen(up[i])) * dsilu));
      dup[i] = narrow<Out>(static_cast<T>(d * silu));
    }
  }
};

//===----------------------------------------------------------------------===//
// Column sums over all rows (bias and norm parameter gradients), in two
// steps: one index per (chunk of kColumnChunk rows, column) sums its chunk
// in row order into a double partial, then one index per column adds the
// chunks' partials in chunk order to the output. Every output is written
// by one index in a fixed order, and rows x cols / kColumnChunk indices
// are at work, not cols (a few thousand threads walking every row).
// (The rows' programs, statistics and dx, are in RowBodies.h.)
//===----------------------------------------------------------------------===//

inline constexpr int64_t kColumnChunk = 64;
MIMO_HD inline int64_t columnChunks(int64_t rows) {
  return (rows + kColumnChunk - 1) / kColumnChunk;
}

/// db[c] += sum over rows of dy[r, c].
template <typename T> struct BiasTerms {
  const T *dy;
  int64_t cols;
  static constexpr int kCount = 1;
  MIMO_HD void add(int64_t r, int64_t c, double *acc) const {
    acc[0] += static_cast<double>(dy[r * cols + c]);
  }
};

/// RMSNorm: dw[c] += sum over rows of dy * x * rstd.
/// (In: how x is stored, T or bf16 bits; likewise below.)
template <typename T, typename In = T> struct RmsnormWeightTerms {
  const In *x;
  const T *rstd, *dy;
  int64_t cols;
  static constexpr int kCount = 1;
  MIMO_HD void add(int64_t r, int64_t c, double *acc) const {
    acc[0] += static_cast<double>(dy[r * cols + c]) *
              static_cast<double>(widen(x[r * cols + c])) *
              static_cast<double>(rstd[r]);
  }
};

/// LayerNorm: dw[c] += sum of dy * xhat; db[c] += sum of dy.
template <typename T, typename In = T> struct LayernormParamTerms {
  const In *x;
  const T *mean, *rstd, *dy;
  int64_t cols;
  static constexpr int kCount = 2;
  MIMO_HD void add(int64_t r, int64_t c, double *acc) const {
    const double xh = (static_cast<double>(widen(x[r * cols + c])) -
                       static_cast<double>(mean[r])) *
                      static_cast<double>(rstd[r]);
    acc[0] += static_cast<double>(dy[r * cols + c]) * xh;
    acc[1] += static_cast<double>(dy[r * cols + c]);
  }
};

/// partials[q][chunk][c]: quantity q of Terms summed over a chunk's rows.
template <typename Terms> struct ColumnPartials {
  Terms terms;
  double *partials;
  int64_t rows, cols;
  MIMO_HD int64_t count() const { return columnChunks(rows) * cols; }
  MIMO_HD void operator()(int64_t i) const {
    const int64_t chunk = i / cols, c = i % cols;
    const int64_t first = chunk * kColumnChunk;
    const int64_t end =
        first + kColumnChunk < rows ? first + kColumnChunk : rows;
    double acc[Terms::kCount] = {};
    for (int64_t r = first; r < end; ++r)
      terms.add(r, c, acc);
    for (int q = 0; q < Terms::kCount; ++q)
      partials[(q * columnChunks(rows) + chunk) * cols + c] = acc[q];
  }
};

/// out[q][c] += the chunks' partials of quantity q, in chunk order (out[1]
/// only for two quantities).
template <typename T> struct AddColumnPartials {
  const double *partials;
  T *out0, *out1;
  int64_t chunks, cols;
  int quantities;
  MIMO_HD int64_t count() const { return quantities * cols; }
  MIMO_HD void operator()(int64_t i) const {
    const int64_t q = i / cols, c = i % cols;
    double acc = 0.0;
    for (int64_t k = 0; k < chunks; ++k)
      acc += partials[(q * chunks + k) * cols + c];
    T *out = q == 0 ? out0 : out1;
    out[c] = static_cast<T>(static_cast<double>(out[c]) + acc);
  }
};

/// Both steps on the host, as the CUDA device runs them (for tests).
template <typename Terms, typename T>
void columnSumsOnHost(const Terms &terms, int64_t rows, int64_t cols, T *out0,
                      T *out1 = nullptr) {
  if (rows <= 0 || cols <= 0)
    return;
  const int64_t chunks = columnChunks(rows);
  std::vector<double> scratch(
      static_cast<size_t>(Terms::kCount * chunks * cols));
  double *partials = scratch.data();
  ColumnPartials<Terms> step1{terms, partials, rows, cols};
  for (int64_t i = 0; i < step1.count(); ++i)
    step1(i);
  AddColumnPartials<T> step2{partials, out0, out1, chunks, cols, Terms::kCount};
  for (int64_t i = 0; i < step2.count(); ++i)
    step2(i);
}

//===----------------------------------------------------------------------===//
// RoPE: one index per (token, head, rotated pair)
//===----------------------------------------------------------------------===//

/// RoPE's rotation table of a micro-batch's tokens: table[(t * half + i) *
/// 2 + {0, 1}] = the cosine and sine of positions[t] * spec.invFreq(i, dim)
/// (RopeSpec.h: rope_theta, rope_scaling) for each rotated pair i < half =
/// dim / 2, in double, as the rotation uses them. Built once per token set
/// and read by every layer's rotations: the transcendental functions run
/// once per (token, pair), not per head and layer.
struct RopeTable {
  const int64_t *positions;
  double *table;
  int64_t tokens, dim;
  RopeSpec spec;
  MIMO_HD int64_t count() const { return tokens * (dim / 2); }
  MIMO_HD void operator()(int64_t idx) const {
    const int64_t half = dim / 2, i = idx % half, t = idx / half;
    const double a = static_cast<double>(positions[t]) * spec.invFreq(i, dim);
    table[2 * idx] = ::cos(a);
    table[2 * idx + 1] = ::sin(a);
  }
};

/// y = RoPE(x) (inverse: the rotation back), per token and head: pairs
/// (i, i + dim/2) rotated by the table's angle of (token, i) in double,
/// each result rounded to T then to Out (float, or bf16 bits: the fp32
/// rotation rounded as written). An odd dim's last value is copied. x == y
/// rotates in place.
template <typename T, typename Out = T> struct Rope {
  const T *x;
  Out *y;
  const double *table;
  int64_t tokens, heads, dim;
  bool inverse;
  MIMO_HD int64_t count() const { return tokens * heads * ((dim + 1) / 2); }
  MIMO_HD void operator()(int64_t idx) const {
    const int64_t half = dim / 2, pairs = (dim + 1) / 2;
    const int64_t i = idx % pairs,
                  th = idx / pairs; // th = token * heads + head
    const T *xh = x + th * dim;
    Out *yh = y + th * dim;
    if (i == half) { // odd dim: the last value is not rotated
      yh[i + half] = narrow<Out>(static_cast<double>(xh[i + half]));
      return;
    }
    const double *cs = table + 2 * ((th / heads) * half + i);
    const double c = cs[0], s = (inverse ? -1.0 : 1.0) * cs[1];
    const double x1 = static_cast<double>(xh[i]);
    const double x2 = static_cast<double>(xh[i + half]);
    yh[i] = narrow<Out>(static_cast<T>(x1 * c - x2 * s));
    yh[i + half] = narrow<Out>(static_cast<T>(x2 * c + x1 * s));
  }
};

//===----------------------------------------------------------------------===//
// Grouped-query attention: keys and values repeated per head, and back
//===----------------------------------------------------------------------===//

/// y [rows, groups x repeat, dim] = x [rows, groups, dim] with head h
/// reading group h / repeat (T: float, or bf16 bits copied as they are).
template <typename T> struct RepeatKv {
  const T *x;
  T *y;
  int64_t rows, groups, repeat, dim;
  MIMO_HD int64_t count() const { return rows * groups * repeat * dim; }
  MIMO_HD void operator()(int64_t idx) const {
    const int64_t e = idx % dim, rest = idx / dim;
    const int64_t heads = groups * repeat;
    const int64_t h = rest % heads, r = rest / heads;
    y[idx] = x[(r * groups + h / repeat) * dim + e];
  }
};

/// Attention statistics between a fused-attention library's layout
/// [batch, heads, seq] and mimo's lse [heads, tokens] (the token of
/// sequence b's position s: b * strideBatch + s * strideSeq, a DenseMask's
/// queries): toLse copies stats into lse, else lse into stats.
struct AttentionStatsLayout {
  float *lse, *stats;
  int64_t batch, heads, seq, tokens, strideBatch, strideSeq;
  bool toLse;
  MIMO_HD int64_t count() const { return batch * heads * seq; }
  MIMO_HD void operator()(int64_t i) const {
    const int64_t b = i / (heads * seq), h = i / seq % heads, s = i % seq;
    const int64_t j = h * tokens + b * strideBatch + s * strideSeq;
    if (toLse)
      lse[j] = stats[i];
    else
      stats[i] = lse[j];
  }
};

/// y [rows, groups, dim] = the sum of each group's heads of dy [rows,
/// groups x repeat, dim], in head order (RepeatKv's adjoint).
struct SumKvGroups {
  const float *dy;
  float *y;
  int64_t rows, groups, repeat, dim;
  MIMO_HD int64_t count() const { return rows * groups * dim; }
  MIMO_HD void operator()(int64_t idx) const {
    const int64_t e = idx % dim, rest = idx / dim;
    const int64_t g = rest % groups, r = rest / groups;
    const float *from = dy + ((r * groups + g) * repeat) * dim + e;
    float sum = 0.0f;
    for (int64_t j = 0; j < repeat; ++j)
      sum += from[j * dim];
    y[idx] = sum;
  }
};

/// Ring attention (docs/model.md Context parallelism): the attention of
/// the same queries over another block of keys, (ob, lseb), merged into
/// (o, lse): o [rows, heads, d], lse [heads, rows], fp32. A side without
/// keys (lse -inf) adds nothing; the merge is softmax's, taken in double.
struct AttentionMerge {
  float *o, *lse;
  const float *ob, *lseb;
  int64_t rows, heads, d;
  MIMO_HD int64_t count() const { return rows * heads; }
  MIMO_HD void operator()(int64_t idx) const {
    const int64_t r = idx / heads, h = idx % heads;
    const int64_t at = h * rows + r;
    const double a = lse[at], b = lseb[at];
    float *out = o + idx * d;
    const float *in = ob + idx * d;
    if (b == -INFINITY)
      return;
    if (a == -INFINITY) {
      for (int64_t e = 0; e < d; ++e)
        out[e] = in[e];
      lse[at] = static_cast<float>(b);
      return;
    }
    const double m = a > b ? a : b;
    const double l = m + ::log(::exp(a - m) + ::exp(b - m));
    const double wa = ::exp(a - l), wb = ::exp(b - l);
    for (int64_t e = 0; e < d; ++e)
      out[e] = static_cast<float>(wa * out[e] + wb * in[e]);
    lse[at] = static_cast<float>(l);
  }
};

//===----------------------------------------------------------------------===//
// Embedding and vocab-parallel cross-entropy
//===----------------------------------------------------------------------===//

/// Rows of a table of T, or of bf16 bits (Table = uint16_t).
template <typename T, typename Table = T> struct EmbeddingForward {
  const int64_t *ids;
  const Table *table;
  T *out;
  int64_t n, vocabBegin, vocabEnd, hidden;
  MIMO_HD int64_t count() const { return n * hidden; }
  MIMO_HD void operator()(int64_t i) const {
    int64_t r = i / hidden, c = i % hidden;
    int64_t id = ids[r];
    out[i] = (id >= vocabBegin && id < vocabEnd)
                 ? static_cast<T>(widen(table[(id - vocabBegin) * hidden + c]))
                 : T(0);
  }
};

/// dtable[rows[g], c] += the dout[t, c] of group g's tokens, in order; one
/// index per (group, column): consecutive indices, consecutive columns.
template <typename T> struct EmbeddingBackwardGroups {
  TokenGroupsView groups;
  const T *dout;
  T *dtable;
  int64_t hidden;
  MIMO_HD int64_t count() const { return groups.groups * hidden; }
  MIMO_HD void operator()(int64_t i) const {
    const int64_t g = i / hidden, c = i % hidden;
    T acc = dtable[groups.rows[g] * hidden + c];
    for (int64_t k = groups.offsets[g]; k < groups.offsets[g + 1]; ++k)
      acc += dout[groups.tokens[k] * hidden + c];
    dtable[groups.rows[g] * hidden + c] = acc;
  }
};

template <typename T> struct CrossEntropyLoss {
  const T *globalMax, *globalSumExp, *globalTargetLogit;
  T *loss;
  int64_t n;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const {
    loss[i] = static_cast<T>(::log(static_cast<double>(globalSumExp[i])) +
                             static_cast<double>(globalMax[i]) -
                             static_cast<double>(globalTargetLogit[i]));
  }
};

/// One index per logit: scale_i * (softmax - onehot), 0 on masked rows.
/// In: how the logits are stored; Out: T, or bf16 bits (narrow: what the
/// head's bf16 GEMMs read).
template <typename T, typename Out = T, typename In = T>
struct CrossEntropyBackward {
  const In *logits;
  const int64_t *targets;
  const T *globalMax, *globalSumExp, *scale;
  Out *dlogits;
  int64_t n, vocabLocal, vocabBegin;
  MIMO_HD int64_t count() const { return n * vocabLocal; }
  MIMO_HD void operator()(int64_t idx) const {
    int64_t i = idx / vocabLocal, j = idx % vocabLocal;
    double sc = static_cast<double>(scale[i]);
    if (sc == 0.0) {
      dlogits[idx] = narrow<Out>(0.0);
      return;
    }
    double f = sc / static_cast<double>(globalSumExp[i]);
    T g = static_cast<T>(f * ::exp(static_cast<double>(widen(logits[idx])) -
                                   static_cast<double>(globalMax[i])));
    if (targets[i] - vocabBegin == j)
      g = static_cast<T>(static_cast<double>(g) - sc);
    dlogits[idx] = narrow<Out>(static_cast<double>(g));
  }
};

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

/// One AdamW element (Device.h, AdamWStep), bias corrections precomputed.
template <typename T> struct AdamW {
  T *param;
  const T *grad;
  T *m, *v;
  int64_t n;
  double lr, beta1, beta2, eps, weightDecay, bc1, bc2, gradScale;
  MIMO_HD int64_t count() const { return n; }
  MIMO_HD void operator()(int64_t i) const {
    double g = static_cast<double>(grad[i]) * gradScale;
    double mi = beta1 * static_cast<double>(m[i]) + (1.0 - beta1) * g;
    double vi = beta2 * static_cast<double>(v[i]) + (1.0 - beta2) * g * g;
    double p = static_cast<double>(param[i]);
    double mhat = mi / bc1;
    double vhat = vi / bc2;
    p -= lr * (mhat / (::sqrt(vhat) + eps) + weightDecay * p);
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    param[i] = static_cast<T>(p);
  }
};

} // namespace mimo::device::bodies

#endif // MIMO_RUNTIME_DEVICE_KERNELBODIES_H
