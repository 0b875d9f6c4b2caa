//===- Attention.cpp - Tiled fp32 attention for the CPU device ------------===//

#include "runtime/device/cpu/Attention.h"

#include "runtime/device/KernelBodies.h"
#include "runtime/device/cpu/FastKernels.h"
#include "runtime/device/cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace mimo::kernels {

namespace tiles = mimo::device::tiles;

namespace {

using tiles::kBlockFields;
using tiles::kQueryBlock;
using tiles::PlanView;

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

/// Values rounded to bfloat16 in place (bf16: a tensor core's operands).
void roundAll(float *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = mimo::device::bodies::roundToBf16(x[i]);
}

/// dst row r = src row order[r] (rows of `width` values), as floats.
template <typename T>
void gather(const T *src, const int64_t *order, int64_t rows, int64_t width,
            std::vector<float> &dst) {
  dst.resize(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    const T *from = src + order[r] * width;
    float *to = dst.data() + r * width;
    if constexpr (std::is_same_v<T, float>)
      std::memcpy(to, from, static_cast<size_t>(width) * 4);
    else
      for (int64_t c = 0; c < width; ++c)
        to[c] = mimo::device::bodies::widen(from[c]);
  }
}

/// dst row order[r] = src row r (as bf16 bits when T is uint16_t).
template <typename T>
void scatter(const std::vector<float> &src, const int64_t *order, int64_t rows,
             int64_t width, T *dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *from = src.data() + r * width;
    T *to = dst + order[r] * width;
    if constexpr (std::is_same_v<T, float>)
      std::memcpy(to, from, static_cast<size_t>(width) * 4);
    else
      for (int64_t c = 0; c < width; ++c)
        to[c] = mimo::device::bodies::bf16Bits(from[c]);
  }
}

/// One query block (fields of PlanView::queryBlocks) of one head.
struct Block {
  int64_t first, rows, keyBegin, span;
  Block(const PlanView &plan, int64_t b) {
    const int64_t *f = plan.queryBlocks + kBlockFields * b;
    first = f[0];
    rows = f[1];
    keyBegin = f[2];
    span = f[3] - f[2];
  }
  /// Keys of row r: the first `live(r)` of the panel.
  int64_t live(const PlanView &plan, int64_t r) const {
    return plan.queryEnd[first + r] - keyBegin;
  }
};

/// One block's scores against its key panel: S[rows, span] =
/// scale * Q[block, head] K[keyBegin : keyBegin + span, head]^T.
void scores(const std::vector<float> &Q, const std::vector<float> &K,
            const Block &blk, int64_t head, int64_t d, int64_t width,
            float scale, std::vector<float> &S) {
  S.resize(static_cast<size_t>(blk.rows * blk.span));
  gemmStrided<float>(false, true, blk.rows, blk.span, d, scale,
                     Q.data() + blk.first * width + head * d, width,
                     K.data() + blk.keyBegin * width + head * d, width, 0.0f,
                     S.data(), blk.span);
}

} // namespace

template <typename T>
void tiledAttentionForward(const T *q, const T *k, const T *v, T *o, float *lse,
                           const PlanView &plan, int64_t heads, int64_t d) {
  constexpr bool bf16 = std::is_same_v<T, uint16_t>;
  const int64_t width = heads * d, Tq = plan.Tq;
  const float scale =
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<float> Q, K, V, O, S;
  gather(q, plan.queryOrder, Tq, width, Q);
  gather(k, plan.keyOrder, plan.Tk, width, K);
  gather(v, plan.keyOrder, plan.Tk, width, V);
  O.assign(static_cast<size_t>(Tq * width), 0.0f);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t b = 0; b < plan.queryBlockCount; ++b) {
      const Block blk(plan, b);
      float *lseOut = lse + h * Tq;
      if (blk.span == 0) { // no query of the block has a key: o = 0
        for (int64_t r = 0; r < blk.rows; ++r)
          lseOut[plan.queryOrder[blk.first + r]] = kNegativeInfinity;
        continue;
      }
      scores(Q, K, blk, h, d, width, scale, S);
      // Row softmax over each row's live keys; the rest of the panel (the
      // causal tail past the row's end) is zero.
      float rowMax[kQueryBlock], rowSum[kQueryBlock];
      for (int64_t r = 0; r < blk.rows; ++r) {
        float *row = S.data() + r * blk.span;
        const int64_t live = blk.live(plan, r);
        float mx = kNegativeInfinity;
        for (int64_t j = 0; j < live; ++j)
          mx = std::max(mx, row[j]);
        fast::expShifted(row, mx, row, live);
        rowSum[r] = fast::sum(row, live);
        std::fill(row + live, row + blk.span, 0.0f);
        rowMax[r] = mx;
        if (bf16) // P multiplies V as bf16; the sum stays fp32
          roundAll(row, live);
      }
      float *Ob = O.data() + blk.first * width + h * d;
      gemmStrided<float>(false, false, blk.rows, d, blk.span, 1.0f, S.data(),
                         blk.span, V.data() + blk.keyBegin * width + h * d,
                         width, 0.0f, Ob, width);
      for (int64_t r = 0; r < blk.rows; ++r) {
        const int64_t token = plan.queryOrder[blk.first + r];
        if (rowSum[r] != 0.0f) { // 0: no key; NaN passes on, as in Kernels.h
          const float inv = 1.0f / rowSum[r];
          for (int64_t c = 0; c < d; ++c)
            Ob[r * width + c] *= inv;
          lseOut[token] = rowMax[r] + std::log(rowSum[r]);
        } else {
          lseOut[token] = kNegativeInfinity; // the row is zero already
        }
      }
    }
  scatter(O, plan.queryOrder, Tq, width, o);
}

template <typename T>
void tiledAttentionBackward(const T *q, const T *k, const T *v, const T *o,
                            const float *lse, const T *dout, float *dq,
                            float *dk, float *dv, const PlanView &plan,
                            int64_t heads, int64_t d) {
  constexpr bool bf16 = std::is_same_v<T, uint16_t>;
  const int64_t width = heads * d, Tq = plan.Tq, Tk = plan.Tk;
  const float scale =
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<float> Q, K, V, O, dO, dQ, dK, dV, P, Pb, dP, D;
  gather(q, plan.queryOrder, Tq, width, Q);
  gather(o, plan.queryOrder, Tq, width, O);
  gather(dout, plan.queryOrder, Tq, width, dO);
  gather(k, plan.keyOrder, Tk, width, K);
  gather(v, plan.keyOrder, Tk, width, V);
  // Keys no query attends get no gradient.
  dQ.assign(static_cast<size_t>(Tq * width), 0.0f);
  dK.assign(static_cast<size_t>(Tk * width), 0.0f);
  dV.assign(static_cast<size_t>(Tk * width), 0.0f);
  // D[h, i] = dO_i . O_i, per head.
  D.resize(static_cast<size_t>(heads * Tq));
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      const float *a = dO.data() + i * width + h * d;
      const float *b = O.data() + i * width + h * d;
      float s = 0.0f;
      for (int64_t c = 0; c < d; ++c)
        s += a[c] * b[c];
      D[static_cast<size_t>(h * Tq + i)] = s;
    }
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t b = 0; b < plan.queryBlockCount; ++b) {
      const Block blk(plan, b);
      if (blk.span == 0)
        continue; // no key: o = 0 depends on nothing
      scores(Q, K, blk, h, d, width, scale, P);
      for (int64_t r = 0; r < blk.rows; ++r) {
        float *row = P.data() + r * blk.span;
        const float l = lse[h * Tq + plan.queryOrder[blk.first + r]];
        const int64_t live = l == kNegativeInfinity ? 0 : blk.live(plan, r);
        fast::expShifted(row, l, row, live);
        std::fill(row + live, row + blk.span, 0.0f);
      }
      const float *dOb = dO.data() + blk.first * width + h * d;
      const float *Qb = Q.data() + blk.first * width + h * d;
      const int64_t keys = blk.keyBegin * width + h * d;
      // dV[panel] += P^T dO (P as bf16 under bf16); dP = dO V^T.
      const float *Pv = P.data();
      if (bf16) {
        Pb = P;
        roundAll(Pb.data(), blk.rows * blk.span);
        Pv = Pb.data();
      }
      gemmStrided<float>(true, false, blk.span, d, blk.rows, 1.0f, Pv, blk.span,
                         dOb, width, 1.0f, dV.data() + keys, width);
      dP.resize(static_cast<size_t>(blk.rows * blk.span));
      gemmStrided<float>(false, true, blk.rows, blk.span, d, 1.0f, dOb, width,
                         V.data() + keys, width, 0.0f, dP.data(), blk.span);
      // dS = P (dP - D) scale, into dP; under bf16 dS is rounded unscaled
      // and the scale comes with the products, as the tensor cores run it.
      const float dsScale = bf16 ? 1.0f : scale;
      for (int64_t r = 0; r < blk.rows; ++r) {
        const float Dr = D[static_cast<size_t>(h * Tq + blk.first + r)];
        const float *p = P.data() + r * blk.span;
        float *ds = dP.data() + r * blk.span;
        for (int64_t j = 0; j < blk.span; ++j)
          ds[j] = p[j] * (ds[j] - Dr) * dsScale;
      }
      if (bf16)
        roundAll(dP.data(), blk.rows * blk.span);
      const float productScale = bf16 ? scale : 1.0f;
      // dQ[block] = dS K; dK[panel] += dS^T Q[block].
      gemmStrided<float>(false, false, blk.rows, d, blk.span, productScale,
                         dP.data(), blk.span, K.data() + keys, width, 0.0f,
                         dQ.data() + blk.first * width + h * d, width);
      gemmStrided<float>(true, false, blk.span, d, blk.rows, productScale,
                         dP.data(), blk.span, Qb, width, 1.0f, dK.data() + keys,
                         width);
    }
  scatter(dQ, plan.queryOrder, Tq, width, dq);
  scatter(dK, plan.keyOrder, Tk, width, dk);
  scatter(dV, plan.keyOrder, Tk, width, dv);
}

template void tiledAttentionForward<float>(const float *, const float *,
                                           const float *, float *, float *,
                                           const PlanView &, int64_t, int64_t);
template void tiledAttentionForward<uint16_t>(const uint16_t *,
                                              const uint16_t *,
                                              const uint16_t *, uint16_t *,
                                              float *, const PlanView &,
                                              int64_t, int64_t);
template void tiledAttentionBackward<float>(const float *, const float *,
                                            const float *, const float *,
                                            const float *, const float *,
                                            float *, float *, float *,
                                            const PlanView &, int64_t, int64_t);
template void tiledAttentionBackward<uint16_t>(
    const uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *,
    const float *, const uint16_t *, float *, float *, float *,
    const PlanView &, int64_t, int64_t);

} // namespace mimo::kernels
