//===- FlashBodies.h - Fused attention as block programs --------*- C++ -*-===//
//
// The CUDA device's fused attention (flash-style: online softmax over
// streamed key chunks; no S x S scores anywhere), written once as three
// block programs over the tile plan of AttentionTiles.h, so the same code
// runs as a CUDA kernel (cuda/CudaDeviceImpl.cuh eachBlock: one thread block
// per (block, head), a __syncthreads between phases) and on the host, thread by
// thread phase by phase (runOnHost below), where the unit tests compare it with
// the float64 reference of cpu/Kernels.h on every mask (tests/unit/
// TiledAttentionTest.cpp). A program is:
//
//   begin(thread)                  stage the block's own rows in shared
//                                  memory, reset the thread's state;
//   for each chunk c:  load(c)     every thread copies its share of chunk
//                                  c (kChunk rows of the other side);
//                      compute(c)  each thread folds the chunk into its row;
//   finish(thread)                 write the row.
//
// One thread owns one row (a query for Forward and BackwardQuery, a key for
// BackwardKey), so every output is written once and every sum runs in a
// fixed order: deterministic, no atomics. Rows the block owns are padded
// to d + 1 floats in shared memory (a thread walks its own row; the
// padding keeps neighbours in different banks); streamed rows are read by
// every thread at once (a broadcast). The backward is FlashAttention-2's
// split: dq per query block, dk and dv per key block, each recomputing the
// probabilities from lse; D = rowsum(dO * O) comes first (RowDot).
//
// Arithmetic is fp32 (fp32 accumulation for bf16 inputs too). Under bf16
// (Shape::bf16: q, k, v and dO hold bf16 values) the programs round as the
// tensor-core programs of FlashMmaBodies.h do (Device::
// attentionForwardBf16): P where it multiplies v and dO, dS where it
// multiplies k and q (the scale after); the CUDA device runs them so, on
// its bf16 buffers unpacked, at head dimensions those programs do not take.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_FLASHBODIES_H
#define MIMO_RUNTIME_DEVICE_FLASHBODIES_H

#include "runtime/device/AttentionTiles.h"
#include "runtime/device/KernelBodies.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__CUDACC__)
#define MIMO_UNROLL _Pragma("unroll")
#define MIMO_UNROLL_4 _Pragma("unroll 4")
#else
#define MIMO_UNROLL
#define MIMO_UNROLL_4
#endif

namespace mimo::device::flash {

/// Threads of a block: one per row of a query or key block.
inline constexpr int kThreads = 64;
/// Rows of the other side staged per step.
inline constexpr int64_t kChunk = 32;
static_assert(tiles::kQueryBlock == kThreads && tiles::kKeyBlock == kThreads,
              "one thread per row of a plan block");

/// One call's plan and head layout: rows of q, k, v, o are [heads * d].
struct Shape {
  tiles::PlanView plan;
  int64_t heads = 0, d = 0;
  float scale = 0;
  /// Round as precision "bf16" does (above).
  bool bf16 = false;
  MIMO_HD int64_t width() const { return heads * d; }
  MIMO_HD int64_t padded() const { return d + 1; }
  /// dS = P (dP - D) as the backward multiplies it: times the scale in
  /// fp32; under bf16 rounded unscaled (gradScale() comes after).
  MIMO_HD float dS(float p, float dpMinusD) const;
  /// What dq and dk are multiplied by when written.
  MIMO_HD float gradScale() const { return bf16 ? scale : 1.0f; }
};

inline Shape shapeOf(const tiles::PlanView &plan, int64_t heads, int64_t d,
                     bool bf16 = false) {
  return Shape{plan, heads, d,
               static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))),
               bf16};
}

/// x, or x rounded to bfloat16 under bf16.
MIMO_HD inline float operand(float x, bool bf16) {
  return bf16 ? bodies::roundToBf16(x) : x;
}

MIMO_HD inline float Shape::dS(float p, float dpMinusD) const {
  return bf16 ? bodies::roundToBf16(p * dpMinusD) : p * dpMinusD * scale;
}

MIMO_HD inline int64_t chunksOf(int64_t n) { return (n + kChunk - 1) / kChunk; }

/// The head dimension of a program: D when it is compiled for one (its
/// loops unrolled, a thread's accumulators in registers), else d.
template <int D> struct HeadDim {
  static constexpr int64_t kCapacity = D > 0 ? D : bodies::kMaxHeadDim;
  MIMO_HD static int64_t of(const Shape &s) { return D > 0 ? D : s.d; }
};

/// a . b in order (unrolled by four on the GPU: the accumulators, not the
/// operands, are what a thread keeps in registers).
MIMO_HD inline float dotf(const float *a, const float *b, int64_t n) {
  float s = 0.0f;
  MIMO_UNROLL_4
  for (int64_t c = 0; c < n; ++c)
    s += a[c] * b[c];
  return s;
}

/// Thread t's share of copying `rows` rows of one head (tokens order[first
/// ...], columns [head * d, head * d + d) of rows of `width`) to dst rows
/// of `stride` floats: consecutive threads take consecutive columns.
MIMO_HD inline void stageRows(float *dst, int64_t stride, const float *src,
                              const int64_t *order, int64_t first, int64_t rows,
                              int64_t width, int64_t head, int64_t d, int t) {
  for (int64_t e = t; e < rows * d; e += kThreads) {
    const int64_t r = e / d, c = e % d;
    dst[r * stride + c] = src[order[first + r] * width + head * d + c];
  }
}

/// Copies one row of a head into thread-owned shared memory.
MIMO_HD inline void ownRow(float *dst, const float *src, int64_t token,
                           int64_t width, int64_t head, int64_t d) {
  const float *row = src + token * width + head * d;
  for (int64_t c = 0; c < d; ++c)
    dst[c] = row[c];
}

/// The rows of a plan block (`fields`) in chunk c of its other side.
MIMO_HD inline int64_t chunkRows(const int64_t *fields, int64_t c) {
  const int64_t first = fields[2] + c * kChunk;
  const int64_t rows = fields[3] - first;
  return rows < kChunk ? rows : kChunk;
}

/// What every program shares: its shape, and the plan blocks it runs over
/// (a thread block per block and head) with their chunks.
struct BlockPlan {
  Shape s;
  /// Key blocks (dk, dv), else query blocks (o, lse, dq).
  bool overKeys;
  MIMO_HD int64_t blocks() const {
    return overKeys ? s.plan.keyBlockCount : s.plan.queryBlockCount;
  }
  MIMO_HD const int64_t *block(int64_t b) const {
    return (overKeys ? s.plan.keyBlocks : s.plan.queryBlocks) +
           tiles::kBlockFields * b;
  }
  MIMO_HD int64_t chunks(int64_t b) const {
    return chunksOf(block(b)[3] - block(b)[2]);
  }
  /// The token of thread t's row of block b (-1: the block has fewer rows).
  MIMO_HD int64_t rowToken(int64_t b, int t) const {
    const int64_t *f = block(b);
    if (t >= f[1])
      return -1;
    return (overKeys ? s.plan.keyOrder : s.plan.queryOrder)[f[0] + t];
  }
};

/// o and lse per query block: online softmax over its key chunks.
template <int D> struct Forward : BlockPlan {
  const float *q, *k, *v;
  float *o, *lse;
  MIMO_HD int64_t dim() const { return HeadDim<D>::of(s); }
  struct State {
    float m, l;
    float acc[HeadDim<D>::kCapacity];
  };
  /// [kThreads][d + 1] queries, [kChunk][d] keys, [kChunk][d] values.
  MIMO_HD int64_t sharedFloats() const {
    return kThreads * s.padded() + 2 * kChunk * s.d;
  }
  MIMO_HD void begin(int64_t b, int64_t h, int t, float *shared,
                     State &st) const {
    st.m = static_cast<float>(bodies::negativeInfinity());
    st.l = 0.0f;
    MIMO_UNROLL
    for (int64_t c = 0; c < dim(); ++c)
      st.acc[c] = 0.0f;
    const int64_t token = rowToken(b, t);
    if (token >= 0)
      ownRow(shared + t * s.padded(), q, token, s.width(), h, s.d);
  }
  MIMO_HD void load(int64_t b, int64_t h, int64_t c, int t,
                    float *shared) const {
    const int64_t *f = block(b);
    const int64_t first = f[2] + c * kChunk, rows = chunkRows(f, c);
    float *K = shared + kThreads * s.padded(), *V = K + kChunk * s.d;
    stageRows(K, s.d, k, s.plan.keyOrder, first, rows, s.width(), h, s.d, t);
    stageRows(V, s.d, v, s.plan.keyOrder, first, rows, s.width(), h, s.d, t);
  }
  MIMO_HD void compute(int64_t b, int64_t, int64_t c, int t,
                       const float *shared, State &st) const {
    const int64_t *f = block(b);
    if (t >= f[1])
      return;
    const int64_t first = f[2] + c * kChunk;
    int64_t live = s.plan.queryEnd[f[0] + t] - first;
    live = live < chunkRows(f, c) ? live : chunkRows(f, c);
    if (live <= 0)
      return;
    const float *qrow = shared + t * s.padded();
    const float *K = shared + kThreads * s.padded(), *V = K + kChunk * s.d;
    float scores[kChunk];
    float mx = st.m;
    for (int64_t j = 0; j < live; ++j) {
      scores[j] = s.scale * dotf(qrow, K + j * s.d, s.d);
      mx = scores[j] > mx ? scores[j] : mx;
    }
    const float correction = ::expf(st.m - mx); // 0 on the first chunk
    st.l *= correction;
    MIMO_UNROLL
    for (int64_t e = 0; e < dim(); ++e)
      st.acc[e] *= correction;
    for (int64_t j = 0; j < live; ++j) {
      const float p = ::expf(scores[j] - mx);
      st.l += p;
      const float pv = operand(p, s.bf16);
      const float *vj = V + j * s.d;
      MIMO_UNROLL
      for (int64_t e = 0; e < dim(); ++e)
        st.acc[e] += pv * vj[e];
    }
    st.m = mx;
  }
  MIMO_HD void finish(int64_t b, int64_t h, int t, const State &st) const {
    const int64_t token = rowToken(b, t);
    if (token < 0)
      return;
    float *out = o + token * s.width() + h * s.d;
    // l is 0 only for a row without keys (a row with one has a p of 1);
    // a NaN l (a NaN input) passes on to o and lse as in the reference.
    if (st.l != 0.0f) {
      const float inv = 1.0f / st.l;
      MIMO_UNROLL
      for (int64_t e = 0; e < dim(); ++e)
        out[e] = st.acc[e] * inv;
      lse[h * s.plan.Tq + token] = st.m + ::logf(st.l);
    } else { // no key: o = 0, lse = -inf
      MIMO_UNROLL
      for (int64_t e = 0; e < dim(); ++e)
        out[e] = 0.0f;
      lse[h * s.plan.Tq + token] =
          static_cast<float>(bodies::negativeInfinity());
    }
  }
};

/// D[h * Tq + i] = dO_i . O_i for one head: index = query * heads + head;
/// o and dO fp32, or bf16 bits (T = uint16_t: precision "bf16").
template <typename T> struct RowDot {
  const T *o, *dout;
  float *D;
  int64_t Tq, heads, d;
  MIMO_HD int64_t count() const { return Tq * heads; }
  MIMO_HD void operator()(int64_t idx) const {
    const int64_t i = idx / heads, h = idx % heads;
    const int64_t off = i * heads * d + h * d;
    float sum = 0.0f; // dotf's order
    for (int64_t c = 0; c < d; ++c)
      sum += bodies::widen(dout[off + c]) * bodies::widen(o[off + c]);
    D[h * Tq + i] = sum;
  }
};

/// dq per query block: recomputes p from lse over its key chunks.
template <int D> struct BackwardQuery : BlockPlan {
  const float *q, *k, *v, *lse, *dout, *delta;
  float *dq;
  MIMO_HD int64_t dim() const { return HeadDim<D>::of(s); }
  struct State {
    float l, Dr;
    float acc[HeadDim<D>::kCapacity];
  };
  /// [kThreads][d + 1] queries and their dO; [kChunk][d] keys and values.
  MIMO_HD int64_t sharedFloats() const {
    return 2 * kThreads * s.padded() + 2 * kChunk * s.d;
  }
  MIMO_HD void begin(int64_t b, int64_t h, int t, float *shared,
                     State &st) const {
    MIMO_UNROLL
    for (int64_t c = 0; c < dim(); ++c)
      st.acc[c] = 0.0f;
    st.l = static_cast<float>(bodies::negativeInfinity());
    st.Dr = 0.0f;
    const int64_t token = rowToken(b, t);
    if (token < 0)
      return;
    ownRow(shared + t * s.padded(), q, token, s.width(), h, s.d);
    ownRow(shared + (kThreads + t) * s.padded(), dout, token, s.width(), h,
           s.d);
    st.l = lse[h * s.plan.Tq + token];
    st.Dr = delta[h * s.plan.Tq + token];
  }
  MIMO_HD void load(int64_t b, int64_t h, int64_t c, int t,
                    float *shared) const {
    const int64_t *f = block(b);
    const int64_t first = f[2] + c * kChunk, rows = chunkRows(f, c);
    float *K = shared + 2 * kThreads * s.padded(), *V = K + kChunk * s.d;
    stageRows(K, s.d, k, s.plan.keyOrder, first, rows, s.width(), h, s.d, t);
    stageRows(V, s.d, v, s.plan.keyOrder, first, rows, s.width(), h, s.d, t);
  }
  MIMO_HD void compute(int64_t b, int64_t, int64_t c, int t,
                       const float *shared, State &st) const {
    const int64_t *f = block(b);
    if (t >= f[1] || st.l == static_cast<float>(bodies::negativeInfinity()))
      return;
    const int64_t first = f[2] + c * kChunk;
    int64_t live = s.plan.queryEnd[f[0] + t] - first;
    live = live < chunkRows(f, c) ? live : chunkRows(f, c);
    const float *qrow = shared + t * s.padded();
    const float *drow = shared + (kThreads + t) * s.padded();
    const float *K = shared + 2 * kThreads * s.padded(), *V = K + kChunk * s.d;
    for (int64_t j = 0; j < live; ++j) {
      const float *kj = K + j * s.d;
      const float p = ::expf(s.scale * dotf(qrow, kj, s.d) - st.l);
      const float ds = s.dS(p, dotf(drow, V + j * s.d, s.d) - st.Dr);
      MIMO_UNROLL
      for (int64_t e = 0; e < dim(); ++e)
        st.acc[e] += ds * kj[e];
    }
  }
  MIMO_HD void finish(int64_t b, int64_t h, int t, const State &st) const {
    const int64_t token = rowToken(b, t);
    if (token < 0)
      return;
    float *out = dq + token * s.width() + h * s.d;
    MIMO_UNROLL
    for (int64_t e = 0; e < dim(); ++e)
      out[e] = st.acc[e] * s.gradScale();
  }
};

/// dk and dv per key block: walks the queries that attend it, in order.
template <int D> struct BackwardKey : BlockPlan {
  const float *q, *k, *v, *lse, *dout, *delta;
  float *dk, *dv;
  MIMO_HD int64_t dim() const { return HeadDim<D>::of(s); }
  struct State {
    float dk[HeadDim<D>::kCapacity], dv[HeadDim<D>::kCapacity];
  };
  /// [kThreads][d + 1] keys and values; [kChunk][d] queries and dO;
  /// [kChunk] lse and D.
  MIMO_HD int64_t sharedFloats() const {
    return 2 * kThreads * s.padded() + 2 * kChunk * s.d + 2 * kChunk;
  }
  MIMO_HD void begin(int64_t b, int64_t h, int t, float *shared,
                     State &st) const {
    MIMO_UNROLL
    for (int64_t c = 0; c < dim(); ++c)
      st.dk[c] = st.dv[c] = 0.0f;
    const int64_t token = rowToken(b, t);
    if (token < 0)
      return;
    ownRow(shared + t * s.padded(), k, token, s.width(), h, s.d);
    ownRow(shared + (kThreads + t) * s.padded(), v, token, s.width(), h, s.d);
  }
  MIMO_HD void load(int64_t b, int64_t h, int64_t c, int t,
                    float *shared) const {
    const int64_t *f = block(b);
    const int64_t first = f[2] + c * kChunk, rows = chunkRows(f, c);
    float *Q = shared + 2 * kThreads * s.padded(), *dO = Q + kChunk * s.d;
    float *L = dO + kChunk * s.d, *Dc = L + kChunk;
    stageRows(Q, s.d, q, s.plan.queryOrder, first, rows, s.width(), h, s.d, t);
    stageRows(dO, s.d, dout, s.plan.queryOrder, first, rows, s.width(), h, s.d,
              t);
    for (int64_t r = t; r < rows; r += kThreads) {
      const int64_t token = s.plan.queryOrder[first + r];
      L[r] = lse[h * s.plan.Tq + token];
      Dc[r] = delta[h * s.plan.Tq + token];
    }
  }
  MIMO_HD void compute(int64_t b, int64_t, int64_t c, int t,
                       const float *shared, State &st) const {
    const int64_t *f = block(b);
    if (t >= f[1])
      return;
    const int64_t key = f[0] + t, first = f[2] + c * kChunk;
    const int64_t rows = chunkRows(f, c);
    const float *krow = shared + t * s.padded();
    const float *vrow = shared + (kThreads + t) * s.padded();
    const float *Q = shared + 2 * kThreads * s.padded(), *dO = Q + kChunk * s.d;
    const float *L = dO + kChunk * s.d, *Dc = L + kChunk;
    for (int64_t i = 0; i < rows; ++i) {
      if (key >= s.plan.queryEnd[first + i])
        continue; // masked (a query attends a prefix of its keys)
      const float *qi = Q + i * s.d, *di = dO + i * s.d;
      const float p = ::expf(s.scale * dotf(qi, krow, s.d) - L[i]);
      const float pv = operand(p, s.bf16);
      const float ds = s.dS(p, dotf(di, vrow, s.d) - Dc[i]);
      MIMO_UNROLL
      for (int64_t e = 0; e < dim(); ++e) {
        st.dv[e] += pv * di[e];
        st.dk[e] += ds * qi[e];
      }
    }
  }
  MIMO_HD void finish(int64_t b, int64_t h, int t, const State &st) const {
    const int64_t token = rowToken(b, t);
    if (token < 0)
      return;
    const int64_t off = token * s.width() + h * s.d;
    MIMO_UNROLL
    for (int64_t e = 0; e < dim(); ++e) {
      dk[off + e] = st.dk[e] * s.gradScale();
      dv[off + e] = st.dv[e];
    }
  }
};

/// f(std::integral_constant<int, D>) with the D a program is compiled for
/// at head dimension d: the common ones (32: small ViTs; 64; 80: ViT-H and
/// CLIP ViT-bigG; 96: Phi-3 mini; 128), else 0 (any d up to kMaxHeadDim,
/// its per-thread rows sized for kMaxHeadDim: in local memory on a GPU).
template <typename F> void withHeadDim(int64_t d, F &&f) {
  switch (d) {
  case 32:
    f(std::integral_constant<int, 32>{});
    break;
  case 80:
    f(std::integral_constant<int, 80>{});
    break;
  case 96:
    f(std::integral_constant<int, 96>{});
    break;
  case 64:
    f(std::integral_constant<int, 64>{});
    break;
  case 128:
    f(std::integral_constant<int, 128>{});
    break;
  default:
    f(std::integral_constant<int, 0>{});
  }
}

/// The shared memory per block of the hungriest of the three programs at
/// head dimension d (BackwardKey's): what a device must let one block
/// have for attention to run both ways.
inline int64_t sharedBytes(int64_t d) {
  Shape s{};
  s.heads = 1;
  s.d = d;
  Forward<0> forward{};
  BackwardQuery<0> query{};
  BackwardKey<0> key{};
  forward.s = query.s = key.s = s;
  int64_t most = forward.sharedFloats();
  most = query.sharedFloats() > most ? query.sharedFloats() : most;
  most = key.sharedFloats() > most ? key.sharedFloats() : most;
  return most * int64_t(sizeof(float));
}

/// Why attention at head dimension d cannot run on a device that lets a
/// block opt in to `sharedOptIn` bytes of shared memory; empty when it can.
/// The CUDA device asks before the forward, so a step fails at its first
/// attention, not halfway through its backward.
inline std::string attentionProblem(int64_t d, int64_t sharedOptIn) {
  const std::string fix = "; use more heads (a smaller hidden_size / "
                          "num_heads)";
  if (d > bodies::kMaxHeadDim)
    return "attention head dimension " + std::to_string(d) +
           " exceeds the CUDA attention kernel's limit of " +
           std::to_string(bodies::kMaxHeadDim) + fix;
  if (sharedBytes(d) > sharedOptIn)
    return "attention at head dimension " + std::to_string(d) + " needs " +
           std::to_string(sharedBytes(d)) +
           " bytes of shared memory per block, more than this GPU's " +
           std::to_string(sharedOptIn) + fix;
  return {};
}

/// Runs a program's every (block, head) on the host, phase by phase as
/// the GPU's barriers order them: what the unit tests check.
template <typename Program>
void runOnHost(const Program &program, int64_t heads) {
  std::vector<float> shared(static_cast<size_t>(program.sharedFloats()));
  std::vector<typename Program::State> states(kThreads);
  for (int64_t b = 0; b < program.blocks(); ++b)
    for (int64_t h = 0; h < heads; ++h) {
      for (int t = 0; t < kThreads; ++t)
        program.begin(b, h, t, shared.data(), states[t]);
      for (int64_t c = 0; c < program.chunks(b); ++c) {
        for (int t = 0; t < kThreads; ++t)
          program.load(b, h, c, t, shared.data());
        for (int t = 0; t < kThreads; ++t)
          program.compute(b, h, c, t, shared.data(), states[t]);
      }
      for (int t = 0; t < kThreads; ++t)
        program.finish(b, h, t, states[t]);
    }
}

/// Forward and backward on the host (RowDot included), as the CUDA device
/// runs them.
inline void forwardOnHost(const float *q, const float *k, const float *v,
                          float *o, float *lse, const Shape &s) {
  withHeadDim(s.d, [&](auto dim) {
    runOnHost(Forward<dim.value>{{s, false}, q, k, v, o, lse}, s.heads);
  });
}
inline void backwardOnHost(const float *q, const float *k, const float *v,
                           const float *o, const float *lse, const float *dout,
                           float *dq, float *dk, float *dv, const Shape &s) {
  std::vector<float> D(static_cast<size_t>(s.heads * s.plan.Tq));
  RowDot<float> rowDot{o, dout, D.data(), s.plan.Tq, s.heads, s.d};
  for (int64_t i = 0; i < rowDot.count(); ++i)
    rowDot(i);
  withHeadDim(s.d, [&](auto dim) {
    runOnHost(
        BackwardQuery<dim.value>{{s, false}, q, k, v, lse, dout, D.data(), dq},
        s.heads);
    runOnHost(
        BackwardKey<dim.value>{{s, true}, q, k, v, lse, dout, D.data(), dk, dv},
        s.heads);
  });
}

} // namespace mimo::device::flash

#endif // MIMO_RUNTIME_DEVICE_FLASHBODIES_H
