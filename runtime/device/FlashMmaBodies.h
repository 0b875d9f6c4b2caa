//===- FlashMmaBodies.h - bf16 fused attention on tensor cores --*- C++ -*-===//
//
// The CUDA device's attention under precision "bf16" (Device.h): the same
// flash-style algorithm and tile plan as FlashBodies.h (online softmax over
// streamed key chunks, FlashAttention-2's backward split: dq per query
// block, dk and dv per key block, no atomics, no S x S buffer), but with
// every product on the tensor cores (WarpMma.h's m16n8k16 bf16 mma, fp32
// accumulators) instead of one thread per row on CUDA cores.
//
// A block is four warps over a plan block of 64 rows; warp w owns rows
// [16 w, 16 w + 16) and holds their accumulators in registers. A program
// has the phases of FlashBodies.h, split by who runs them:
//
//   stage(thread)      the block's own rows into shared memory (all 128
//                      threads, 16 bytes a copy);
//   begin(warp)        the warp's state;
//   for each chunk c:  load(c, thread)    the chunk's rows (other side);
//                      compute(c, warp)   the warp's products and softmax;
//   finish(warp)       the warp's rows out.
//
// The GPU runs a barrier around every load; the host (runOnHost) runs the
// phases in the same order with whole warps (mma::HostLanes), which is
// what the unit tests check against the CPU device's emulation of the same
// rounding and against the float64 reference.
//
// Rounding (the semantics of Device::attentionForwardBf16): q, k, v and dO
// are bf16 buffers, read as they are; scores, softmax, lse and D are fp32;
// the probabilities P are rounded to bf16 where they multiply v (o) and dO
// (dv); dS = P (dP - D) is rounded to bf16 where it multiplies k (dq) and q
// (dk), and the softmax scale is applied after (dq, dk); o is written
// rounded to bf16, dq, dk and dv in fp32. The softmax runs in base 2 (exp2
// of scores times scale * log2 e), lse is written in base e.
//
// Every row of q, k, v, o and dO starts 16-byte aligned (the buffers are,
// and a head's D bf16 are a multiple of 16 bytes): rows move 16 bytes at a
// time.
//
// Operands move from shared memory to registers by ldmatrix (WarpMma.h):
// one instruction per A operand or pair of B operands. Shared memory rows
// are padded by 8 bf16 (16 bytes), so the eight 16-byte rows of each 8x8
// matrix an ldmatrix phase reads hit 32 different banks.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_FLASHMMABODIES_H
#define MIMO_RUNTIME_DEVICE_FLASHMMABODIES_H

#include "runtime/device/FlashBodies.h"
#include "runtime/device/WarpMma.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace mimo::device::flashmma {

using mma::Acc;
using mma::FragA;
using mma::FragB;

inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * mma::kWarpSize;
/// Rows of a plan block a warp owns.
inline constexpr int64_t kWarpRows = 16;
inline constexpr int64_t kBlockRows = kWarps * kWarpRows;
static_assert(tiles::kQueryBlock == kBlockRows &&
                  tiles::kKeyBlock == kBlockRows,
              "four warps of 16 rows per plan block");

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

/// Whether the tensor-core programs take head dimension d (else the fp32
/// programs of FlashBodies.h run, as for precision fp32).
inline bool supportsHeadDim(int64_t d) {
  return d == 32 || d == 64 || d == 96 || d == 128;
}

MIMO_HD inline float exp2Of(float x) {
#if defined(__CUDA_ARCH__)
  return exp2f(x);
#else
  return std::exp2(x);
#endif
}
MIMO_HD inline float log2Of(float x) {
#if defined(__CUDA_ARCH__)
  return log2f(x);
#else
  return std::log2(x);
#endif
}

/// What the three programs share at head dimension D: the plan's blocks,
/// the padded bf16 rows, the staging of rows and the two products.
template <int D> struct MmaBlocks : flash::BlockPlan {
  static_assert(D % 16 == 0, "k-steps of 16");
  static constexpr int kPitch = D + 8;
  static constexpr int kDimTiles = D / 8; // even: B operands in pairs

  /// The rows of the other side in chunk c of block b (chunks of `size`).
  MIMO_HD int64_t rowsIn(int64_t b, int64_t c, int64_t size) const {
    const int64_t *f = block(b);
    const int64_t rows = f[3] - (f[2] + c * size);
    return rows < size ? rows : size;
  }
  MIMO_HD int64_t chunksOf(int64_t b, int64_t size) const {
    const int64_t *f = block(b);
    return (f[3] - f[2] + size - 1) / size;
  }

  /// Thread t's share of copying `rows` rows of this head (tokens
  /// order[first ...]) into `count` rows of dst, eight values a copy; rows
  /// past `rows` are zero (a product reads whole tiles).
  MIMO_HD void stageRows(uint16_t *dst, const uint16_t *src,
                         const int64_t *order, int64_t first, int64_t rows,
                         int64_t count, int64_t h, int t) const {
    constexpr int64_t kVectors = D / 8;
    for (int64_t e = t; e < count * kVectors; e += kThreads) {
      const int64_t r = e / kVectors, c = 8 * (e % kVectors);
      mma::Bits128 bits{};
      if (r < rows)
        bits = mma::load128(src + order[first + r] * s.width() + h * D + c);
      mma::store128(dst + r * kPitch + c, bits);
    }
  }

  /// Thread t's share of staging chunk c (of `size` keys) of k and v after
  /// the block's `ownRows` rows (of one or two tensors) in shared memory:
  /// the forward's and dq's load.
  MIMO_HD void stageKeys(int64_t b, int64_t h, int64_t c, int t,
                         unsigned char *shared, const uint16_t *k,
                         const uint16_t *v, int64_t ownRows,
                         int64_t size) const {
    const int64_t first = block(b)[2] + c * size, rows = rowsIn(b, c, size);
    uint16_t *K = reinterpret_cast<uint16_t *>(shared) + ownRows * kPitch;
    stageRows(K, k, s.plan.keyOrder, first, rows, size, h, t);
    stageRows(K + size * kPitch, v, s.plan.keyOrder, first, rows, size, h, t);
  }

  /// The keys of chunk c (of `size`) that any row of a warp attends: up to
  /// the farthest of their ends (0: the warp skips the chunk).
  template <class L>
  MIMO_HD int64_t liveKeys(int64_t b, int64_t c, int64_t size,
                           const int64_t (&end)[L::kLanes][2]) const {
    int64_t most[L::kLanes];
    for (int l = 0; l < L::kLanes; ++l)
      most[l] = end[l][0] > end[l][1] ? end[l][0] : end[l][1];
    const int64_t reach = mma::warpMax(most) - (block(b)[2] + c * size);
    const int64_t rows = rowsIn(b, c, size);
    return reach < rows ? reach : rows;
  }

  /// s[n] = A B[8 n : 8 n + 8]^T for 8 n < live: A's 16 rows and B's rows
  /// (D wide each) at `a` and `bRows`; tiles past live are zero.
  template <class L, int N>
  MIMO_HD static void scores(Acc<L> (&out)[N], const uint16_t *a,
                             const uint16_t *bRows, int64_t live) {
    MIMO_UNROLL
    for (int n = 0; n < N; ++n)
      mma::zero(out[n]);
    static_assert(N % 2 == 0, "B operands in pairs of tiles");
    MIMO_UNROLL
    for (int ks = 0; ks < D / 16; ++ks) {
      FragA<L> fa;
      mma::loadA(fa, a + ks * 16, kPitch);
      MIMO_UNROLL
      for (int n = 0; n < N; n += 2) {
        if (n * 8 >= live) // warp-uniform: the loads are collective
          break;
        FragB<L> fb0, fb1;
        mma::loadB2<mma::BRows::N>(fb0, fb1, bRows + n * 8 * kPitch + ks * 16,
                                   kPitch);
        mma::mma(out[n], fa, fb0);
        if ((n + 1) * 8 < live)
          mma::mma(out[n + 1], fa, fb1);
      }
    }
  }

  /// out += bf16(p) B: p's N tiles are 16 x 8N (the k side), B's 8N rows
  /// of D at `bRows`; k-steps of 16 past live are skipped (p is 0 there).
  template <class L, int N>
  MIMO_HD static void accumulate(Acc<L> (&out)[kDimTiles], const Acc<L> (&p)[N],
                                 const uint16_t *bRows, int64_t live) {
    static_assert(N % 2 == 0, "k-steps of two tiles");
    MIMO_UNROLL
    for (int kk = 0; kk < N / 2; ++kk) {
      if (kk * 16 >= live)
        break;
      FragA<L> fa;
      mma::accToA(fa, p[2 * kk], p[2 * kk + 1]);
      MIMO_UNROLL
      for (int n = 0; n < kDimTiles; n += 2) {
        FragB<L> fb0, fb1;
        mma::loadB2<mma::BRows::K>(fb0, fb1, bRows + kk * 16 * kPitch + n * 8,
                                   kPitch);
        mma::mma(out[n], fa, fb0);
        mma::mma(out[n + 1], fa, fb1);
      }
    }
  }

  /// What the backward needs of one score: whether the pair attends, the
  /// row's log2-sum-exp and its D.
  struct Pair {
    bool attends;
    float lse2, delta;
  };
  /// The backward's P and dS from its scores p and dp = dO V^T, in place:
  /// p = exp2(p scale log2 e - lse2) where the pair attends, else 0; dp =
  /// p (dp - delta) (unscaled). `pair(l, half, column)` describes one.
  template <class L, int N, class F>
  MIMO_HD void probabilities(Acc<L> (&p)[N], Acc<L> (&dp)[N], F pair) const {
    const float toLog2 = s.scale * kLog2e;
    for (int l = 0; l < L::kLanes; ++l) {
      const int lane = L::lane(l);
      MIMO_UNROLL
      for (int n = 0; n < N; ++n)
        MIMO_UNROLL
      for (int i = 0; i < 4; ++i) {
        const Pair e = pair(l, i >> 1, n * 8 + mma::cCol(lane, i));
        const float pr =
            e.attends ? exp2Of(p[n].x[l][i] * toLog2 - e.lse2) : 0.0f;
        p[n].x[l][i] = pr;
        // A pair it does not attend gives 0 even where dP is not finite
        // (a NaN in a value the row never sees), as the fp32 programs.
        dp[n].x[l][i] = e.attends ? pr * (dp[n].x[l][i] - e.delta) : 0.0f;
      }
    }
  }

  /// Writes rows of `acc` (16 x D, times `factor`) to the tokens of
  /// order[first + row0 + r] for r < rows - row0 (r: the warp's rows): fp32,
  /// or rounded to bf16 bits (T = uint16_t).
  template <class L, typename T>
  MIMO_HD void writeRows(const Acc<L> (&acc)[kDimTiles], float factor, T *dst,
                         const int64_t *order, int64_t first, int64_t row0,
                         int64_t rows, int64_t h) const {
    for (int l = 0; l < L::kLanes; ++l) {
      const int lane = L::lane(l);
      MIMO_UNROLL
      for (int half = 0; half < 2; ++half) {
        const int64_t row = row0 + mma::cRow(lane, 2 * half);
        if (row >= rows)
          continue;
        T *out = dst + order[first + row] * s.width() + h * D;
        MIMO_UNROLL
        for (int n = 0; n < kDimTiles; ++n) {
          const int col = n * 8 + mma::cCol(lane, 0);
          const float lo = acc[n].x[l][2 * half] * factor,
                      hi = acc[n].x[l][2 * half + 1] * factor;
          if constexpr (std::is_same_v<T, uint16_t>) {
            const uint32_t bits = mma::pack(lo, hi);
            memcpy(out + col, &bits, sizeof(bits));
          } else {
            out[col] = lo;
            out[col + 1] = hi;
          }
        }
      }
    }
  }
};

/// Per lane and row half: the ordered index one past the keys a warp row
/// may attend (-1: the block has no such row), from the plan.
template <class L>
MIMO_HD inline void rowEnds(int64_t (&end)[L::kLanes][2],
                            const tiles::PlanView &plan, const int64_t *f,
                            int w) {
  for (int l = 0; l < L::kLanes; ++l)
    MIMO_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int64_t row = w * kWarpRows + mma::cRow(L::lane(l), 2 * half);
    end[l][half] = row < f[1] ? plan.queryEnd[f[0] + row] : -1;
  }
}

/// o and lse per query block.
template <int D> struct Forward : MmaBlocks<D> {
  using Base = MmaBlocks<D>;
  static constexpr int64_t kChunk = 64;
  static constexpr int kTiles = kChunk / 8;
  const uint16_t *q, *k, *v;
  uint16_t *o;
  float *lse;

  /// [64] queries, [kChunk] keys, [kChunk] values.
  MIMO_HD static int64_t sharedBytes() {
    return (kBlockRows + 2 * kChunk) * Base::kPitch * 2;
  }
  MIMO_HD int64_t chunks(int64_t b) const { return this->chunksOf(b, kChunk); }

  template <class L> struct Warp {
    Acc<L> o[Base::kDimTiles];
    float m[L::kLanes][2], l[L::kLanes][2];
    int64_t end[L::kLanes][2];
  };

  MIMO_HD void stage(int64_t b, int64_t h, int t, unsigned char *shared) const {
    const int64_t *f = this->block(b);
    this->stageRows(reinterpret_cast<uint16_t *>(shared), q,
                    this->s.plan.queryOrder, f[0], f[1], kBlockRows, h, t);
  }
  template <class L>
  MIMO_HD void begin(int64_t b, int64_t, int w, Warp<L> &st) const {
    MIMO_UNROLL
    for (int n = 0; n < Base::kDimTiles; ++n)
      mma::zero(st.o[n]);
    for (int l = 0; l < L::kLanes; ++l)
      MIMO_UNROLL
    for (int half = 0; half < 2; ++half) {
      st.m[l][half] = static_cast<float>(bodies::negativeInfinity());
      st.l[l][half] = 0.0f;
    }
    rowEnds<L>(st.end, this->s.plan, this->block(b), w);
  }
  MIMO_HD void load(int64_t b, int64_t h, int64_t c, int t,
                    unsigned char *shared) const {
    this->stageKeys(b, h, c, t, shared, k, v, kBlockRows, kChunk);
  }
  template <class L>
  MIMO_HD void compute(int64_t b, int64_t, int64_t c, int w,
                       const unsigned char *shared, Warp<L> &st) const {
    const int64_t first = this->block(b)[2] + c * kChunk;
    const int64_t live = this->template liveKeys<L>(b, c, kChunk, st.end);
    if (live <= 0)
      return; // no row of this warp attends a key of the chunk
    const uint16_t *Q = reinterpret_cast<const uint16_t *>(shared) +
                        w * kWarpRows * Base::kPitch;
    const uint16_t *K =
        reinterpret_cast<const uint16_t *>(shared) + kBlockRows * Base::kPitch;
    const uint16_t *V = K + kChunk * Base::kPitch;
    Acc<L> sc[kTiles];
    Base::template scores<L>(sc, Q, K, live);
    const float toLog2 = this->s.scale * kLog2e;
    const float negInf = static_cast<float>(bodies::negativeInfinity());
    float most[2][L::kLanes];
    for (int l = 0; l < L::kLanes; ++l) {
      const int lane = L::lane(l);
      most[0][l] = most[1][l] = negInf;
      MIMO_UNROLL
      for (int n = 0; n < kTiles; ++n)
        MIMO_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int64_t key = n * 8 + mma::cCol(lane, i);
        const int half = i >> 1;
        float &x = sc[n].x[l][i];
        x = key < live && first + key < st.end[l][half] ? x * toLog2 : negInf;
        most[half][l] = x > most[half][l] ? x : most[half][l];
      }
    }
    mma::quadMax(most[0]);
    mma::quadMax(most[1]);
    float sums[2][L::kLanes];
    for (int l = 0; l < L::kLanes; ++l) {
      float shift[2], correction[2];
      MIMO_UNROLL
      for (int half = 0; half < 2; ++half) {
        const float m =
            most[half][l] > st.m[l][half] ? most[half][l] : st.m[l][half];
        // No key yet (m = -inf): shift by 0 so that exp2(-inf) = 0.
        shift[half] = m == negInf ? 0.0f : m;
        correction[half] = exp2Of(st.m[l][half] - shift[half]);
        st.m[l][half] = m;
        sums[half][l] = 0.0f;
      }
      MIMO_UNROLL
      for (int n = 0; n < Base::kDimTiles; ++n)
        MIMO_UNROLL
      for (int i = 0; i < 4; ++i)
        st.o[n].x[l][i] *= correction[i >> 1];
      MIMO_UNROLL
      for (int n = 0; n < kTiles; ++n)
        MIMO_UNROLL
      for (int i = 0; i < 4; ++i) {
        float &x = sc[n].x[l][i];
        x = exp2Of(x - shift[i >> 1]);
        sums[i >> 1][l] += x;
      }
      MIMO_UNROLL
      for (int half = 0; half < 2; ++half)
        st.l[l][half] = st.l[l][half] * correction[half] + sums[half][l];
    }
    Base::template accumulate<L>(st.o, sc, V, live);
  }
  template <class L>
  MIMO_HD void finish(int64_t b, int64_t h, int w, Warp<L> &st) const {
    const int64_t *f = this->block(b);
    float total[2][L::kLanes];
    for (int l = 0; l < L::kLanes; ++l)
      MIMO_UNROLL
    for (int half = 0; half < 2; ++half)
      total[half][l] = st.l[l][half];
    // Each lane summed its own columns; the row's sum is the quad's.
    mma::quadSum(total[0]);
    mma::quadSum(total[1]);
    for (int l = 0; l < L::kLanes; ++l) {
      const int lane = L::lane(l);
      MIMO_UNROLL
      for (int half = 0; half < 2; ++half) {
        const int64_t row = w * kWarpRows + mma::cRow(lane, 2 * half);
        if (row >= f[1])
          continue;
        const int64_t token = this->s.plan.queryOrder[f[0] + row];
        const float sum = total[half][l];
        // 0 only for a row without keys; a NaN passes on, as in the
        // reference.
        const float inv = sum != 0.0f ? 1.0f / sum : 0.0f;
        MIMO_UNROLL
        for (int n = 0; n < Base::kDimTiles; ++n)
          MIMO_UNROLL
        for (int i = 2 * half; i < 2 * half + 2; ++i)
          st.o[n].x[l][i] *= inv;
        if ((lane & 3) == 0)
          lse[h * this->s.plan.Tq + token] =
              sum != 0.0f ? (st.m[l][half] + log2Of(sum)) * kLn2
                          : static_cast<float>(bodies::negativeInfinity());
      }
    }
    this->writeRows(st.o, 1.0f, o, this->s.plan.queryOrder, f[0], w * kWarpRows,
                    f[1], h);
  }
};

/// dq per query block: recomputes P from lse over the block's key chunks.
template <int D> struct BackwardQuery : MmaBlocks<D> {
  using Base = MmaBlocks<D>;
  static constexpr int64_t kChunk = 64;
  static constexpr int kTiles = kChunk / 8;
  const uint16_t *q, *k, *v;
  const float *lse;
  const uint16_t *dout;
  const float *delta;
  float *dq;

  /// [64] queries and their dO, [kChunk] keys and values.
  MIMO_HD static int64_t sharedBytes() {
    return (2 * kBlockRows + 2 * kChunk) * Base::kPitch * 2;
  }
  MIMO_HD int64_t chunks(int64_t b) const { return this->chunksOf(b, kChunk); }

  template <class L> struct Warp {
    Acc<L> dq[Base::kDimTiles];
    float lse2[L::kLanes][2], delta[L::kLanes][2];
    int64_t end[L::kLanes][2];
  };

  MIMO_HD void stage(int64_t b, int64_t h, int t, unsigned char *shared) const {
    const int64_t *f = this->block(b);
    uint16_t *Q = reinterpret_cast<uint16_t *>(shared);
    this->stageRows(Q, q, this->s.plan.queryOrder, f[0], f[1], kBlockRows, h,
                    t);
    this->stageRows(Q + kBlockRows * Base::kPitch, dout,
                    this->s.plan.queryOrder, f[0], f[1], kBlockRows, h, t);
  }
  template <class L>
  MIMO_HD void begin(int64_t b, int64_t h, int w, Warp<L> &st) const {
    const int64_t *f = this->block(b);
    MIMO_UNROLL
    for (int n = 0; n < Base::kDimTiles; ++n)
      mma::zero(st.dq[n]);
    rowEnds<L>(st.end, this->s.plan, f, w);
    for (int l = 0; l < L::kLanes; ++l)
      MIMO_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int64_t row = w * kWarpRows + mma::cRow(L::lane(l), 2 * half);
      st.lse2[l][half] = st.delta[l][half] = 0.0f;
      if (row >= f[1])
        continue;
      const int64_t token = this->s.plan.queryOrder[f[0] + row];
      const float rowLse = lse[h * this->s.plan.Tq + token];
      st.lse2[l][half] = rowLse * kLog2e;
      st.delta[l][half] = delta[h * this->s.plan.Tq + token];
      // A row without keys (lse -inf) has no gradient.
      if (rowLse == static_cast<float>(bodies::negativeInfinity()))
        st.end[l][half] = -1;
    }
  }
  MIMO_HD void load(int64_t b, int64_t h, int64_t c, int t,
                    unsigned char *shared) const {
    this->stageKeys(b, h, c, t, shared, k, v, 2 * kBlockRows, kChunk);
  }
  template <class L>
  MIMO_HD void compute(int64_t b, int64_t, int64_t c, int w,
                       const unsigned char *shared, Warp<L> &st) const {
    const int64_t first = this->block(b)[2] + c * kChunk;
    const int64_t live = this->template liveKeys<L>(b, c, kChunk, st.end);
    if (live <= 0)
      return;
    const uint16_t *base = reinterpret_cast<const uint16_t *>(shared);
    const uint16_t *Q = base + w * kWarpRows * Base::kPitch;
    const uint16_t *dO = Q + kBlockRows * Base::kPitch;
    const uint16_t *K = base + 2 * kBlockRows * Base::kPitch;
    const uint16_t *V = K + kChunk * Base::kPitch;
    Acc<L> p[kTiles], dp[kTiles];
    Base::template scores<L>(p, Q, K, live);
    Base::template scores<L>(dp, dO, V, live);
    this->probabilities(p, dp, [&](int l, int half, int64_t key) {
      return typename Base::Pair{key < live && first + key < st.end[l][half],
                                 st.lse2[l][half], st.delta[l][half]};
    });
    Base::template accumulate<L>(st.dq, dp, K, live);
  }
  template <class L>
  MIMO_HD void finish(int64_t b, int64_t h, int w, Warp<L> &st) const {
    const int64_t *f = this->block(b);
    this->writeRows(st.dq, this->s.gradScale(), dq, this->s.plan.queryOrder,
                    f[0], w * kWarpRows, f[1], h);
  }
};

/// dk and dv per key block: walks the queries that attend it, in chunks.
template <int D> struct BackwardKey : MmaBlocks<D> {
  using Base = MmaBlocks<D>;
  /// Queries per chunk: fewer at wide heads, where dk and dv take most of
  /// a thread's registers.
  static constexpr int64_t kChunk = D > 64 ? 32 : 64;
  static constexpr int kTiles = kChunk / 8;
  const uint16_t *q, *k, *v;
  const float *lse;
  const uint16_t *dout;
  const float *delta;
  float *dk, *dv;

  /// [64] keys and values, [kChunk] queries and dO (bf16); then per chunk
  /// query its end (int64), lse * log2 e and D (fp32).
  MIMO_HD static int64_t halves() {
    return (2 * kBlockRows + 2 * kChunk) * Base::kPitch;
  }
  MIMO_HD static int64_t sharedBytes() { return halves() * 2 + kChunk * 16; }
  MIMO_HD int64_t chunks(int64_t b) const { return this->chunksOf(b, kChunk); }

  template <class L> struct Warp {
    Acc<L> dk[Base::kDimTiles], dv[Base::kDimTiles];
    int64_t key[L::kLanes][2];
  };

  MIMO_HD void stage(int64_t b, int64_t h, int t, unsigned char *shared) const {
    const int64_t *f = this->block(b);
    uint16_t *K = reinterpret_cast<uint16_t *>(shared);
    this->stageRows(K, k, this->s.plan.keyOrder, f[0], f[1], kBlockRows, h, t);
    this->stageRows(K + kBlockRows * Base::kPitch, v, this->s.plan.keyOrder,
                    f[0], f[1], kBlockRows, h, t);
  }
  template <class L>
  MIMO_HD void begin(int64_t b, int64_t, int w, Warp<L> &st) const {
    const int64_t *f = this->block(b);
    MIMO_UNROLL
    for (int n = 0; n < Base::kDimTiles; ++n) {
      mma::zero(st.dk[n]);
      mma::zero(st.dv[n]);
    }
    for (int l = 0; l < L::kLanes; ++l)
      MIMO_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int64_t row = w * kWarpRows + mma::cRow(L::lane(l), 2 * half);
      // A row past the block's: no query's end passes it.
      st.key[l][half] = row < f[1] ? f[0] + row : INT64_MAX;
    }
  }
  MIMO_HD void load(int64_t b, int64_t h, int64_t c, int t,
                    unsigned char *shared) const {
    const int64_t *f = this->block(b);
    const int64_t first = f[2] + c * kChunk, rows = this->rowsIn(b, c, kChunk);
    uint16_t *Q =
        reinterpret_cast<uint16_t *>(shared) + 2 * kBlockRows * Base::kPitch;
    uint16_t *dO = Q + kChunk * Base::kPitch;
    this->stageRows(Q, q, this->s.plan.queryOrder, first, rows, kChunk, h, t);
    this->stageRows(dO, dout, this->s.plan.queryOrder, first, rows, kChunk, h,
                    t);
    int64_t *E = reinterpret_cast<int64_t *>(shared + halves() * 2);
    float *L2 = reinterpret_cast<float *>(E + kChunk), *Dc = L2 + kChunk;
    for (int64_t r = t; r < kChunk; r += kThreads) {
      if (r >= rows) {
        E[r] = -1; // no key before it: masked
        L2[r] = Dc[r] = 0.0f;
        continue;
      }
      const int64_t token = this->s.plan.queryOrder[first + r];
      E[r] = this->s.plan.queryEnd[first + r];
      L2[r] = lse[h * this->s.plan.Tq + token] * kLog2e;
      Dc[r] = delta[h * this->s.plan.Tq + token];
    }
  }
  template <class L>
  MIMO_HD void compute(int64_t b, int64_t, int64_t c, int w,
                       const unsigned char *shared, Warp<L> &st) const {
    const int64_t live = this->rowsIn(b, c, kChunk);
    const uint16_t *base = reinterpret_cast<const uint16_t *>(shared);
    const uint16_t *K = base + w * kWarpRows * Base::kPitch;
    const uint16_t *V = K + kBlockRows * Base::kPitch;
    const uint16_t *Q = base + 2 * kBlockRows * Base::kPitch;
    const uint16_t *dO = Q + kChunk * Base::kPitch;
    const int64_t *E = reinterpret_cast<const int64_t *>(shared + halves() * 2);
    const float *L2 = reinterpret_cast<const float *>(E + kChunk),
                *Dc = L2 + kChunk;
    // Transposed: rows are the warp's keys, columns the chunk's queries.
    Acc<L> p[kTiles], dp[kTiles];
    Base::template scores<L>(p, K, Q, live);
    Base::template scores<L>(dp, V, dO, live);
    this->probabilities(p, dp, [&](int l, int half, int64_t j) {
      return
          typename Base::Pair{j < live && st.key[l][half] < E[j], L2[j], Dc[j]};
    });
    Base::template accumulate<L>(st.dv, p, dO, live);
    Base::template accumulate<L>(st.dk, dp, Q, live);
  }
  template <class L>
  MIMO_HD void finish(int64_t b, int64_t h, int w, Warp<L> &st) const {
    const int64_t *f = this->block(b);
    this->writeRows(st.dk, this->s.gradScale(), dk, this->s.plan.keyOrder, f[0],
                    w * kWarpRows, f[1], h);
    this->writeRows(st.dv, 1.0f, dv, this->s.plan.keyOrder, f[0], w * kWarpRows,
                    f[1], h);
  }
};

/// f(std::integral_constant<int, D>) for a head dimension the programs
/// take (supportsHeadDim).
template <typename F> void withHeadDim(int64_t d, F &&f) {
  switch (d) {
  case 32:
    f(std::integral_constant<int, 32>{});
    break;
  case 64:
    f(std::integral_constant<int, 64>{});
    break;
  case 96:
    f(std::integral_constant<int, 96>{});
    break;
  default:
    f(std::integral_constant<int, 128>{});
  }
}

/// The shared memory per block of the hungriest program at head dim d.
inline int64_t sharedBytes(int64_t d) {
  int64_t most = 0;
  withHeadDim(d, [&](auto dim) {
    constexpr int D = dim.value;
    most = Forward<D>::sharedBytes();
    most = BackwardQuery<D>::sharedBytes() > most
               ? BackwardQuery<D>::sharedBytes()
               : most;
    most = BackwardKey<D>::sharedBytes() > most ? BackwardKey<D>::sharedBytes()
                                                : most;
  });
  return most;
}

/// Runs a program's every (block, head) on the host, the phases in the
/// GPU's order, each warp's lanes at once.
template <typename Program>
void runWarpsOnHost(const Program &program, int64_t heads) {
  std::vector<unsigned char> shared(
      static_cast<size_t>(Program::sharedBytes()));
  using Warp = typename Program::template Warp<mma::HostLanes>;
  std::vector<Warp> warps(kWarps);
  for (int64_t b = 0; b < program.blocks(); ++b)
    for (int64_t h = 0; h < heads; ++h) {
      for (int t = 0; t < kThreads; ++t)
        program.stage(b, h, t, shared.data());
      for (int w = 0; w < kWarps; ++w)
        program.template begin<mma::HostLanes>(b, h, w, warps[w]);
      for (int64_t c = 0; c < program.chunks(b); ++c) {
        for (int t = 0; t < kThreads; ++t)
          program.load(b, h, c, t, shared.data());
        for (int w = 0; w < kWarps; ++w)
          program.template compute<mma::HostLanes>(b, h, c, w, shared.data(),
                                                   warps[w]);
      }
      for (int w = 0; w < kWarps; ++w)
        program.template finish<mma::HostLanes>(b, h, w, warps[w]);
    }
}

/// Forward and backward on the host as the CUDA device runs them
/// (Device::attentionForwardBf16; d: supportsHeadDim).
inline void forwardOnHost(const uint16_t *q, const uint16_t *k,
                          const uint16_t *v, uint16_t *o, float *lse,
                          const flash::Shape &s) {
  withHeadDim(s.d, [&](auto dim) {
    runWarpsOnHost(Forward<dim.value>{{{s, false}}, q, k, v, o, lse}, s.heads);
  });
}
inline void backwardOnHost(const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, const uint16_t *o,
                           const float *lse, const uint16_t *dout, float *dq,
                           float *dk, float *dv, const flash::Shape &s) {
  std::vector<float> D(static_cast<size_t>(s.heads * s.plan.Tq));
  flash::RowDot<uint16_t> rowDot{o, dout, D.data(), s.plan.Tq, s.heads, s.d};
  for (int64_t i = 0; i < rowDot.count(); ++i)
    rowDot(i);
  withHeadDim(s.d, [&](auto dim) {
    runWarpsOnHost(
        BackwardQuery<dim.value>{
            {{s, false}}, q, k, v, lse, dout, D.data(), dq},
        s.heads);
    runWarpsOnHost(
        BackwardKey<dim.value>{
            {{s, true}}, q, k, v, lse, dout, D.data(), dk, dv},
        s.heads);
  });
}

} // namespace mimo::device::flashmma

#endif // MIMO_RUNTIME_DEVICE_FLASHMMABODIES_H
