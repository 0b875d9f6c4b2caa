//===- Attention.cpp - Tiled fp32 attention for the CPU device ------------===//

#include "runtime/device/cpu/Attention.h"

#include "runtime/device/AttentionTiles.h"
#include "runtime/device/cpu/FastKernels.h"
#include "runtime/device/cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace mimo::kernels {

namespace tiles = mimo::device::tiles;

namespace {

using tiles::kQueryBlock;
using tiles::Segment;

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

/// dst row r = src row rows[r] (rows of `width` floats).
void gather(const float *src, const std::vector<int64_t> &rows, int64_t width,
            std::vector<float> &dst) {
  dst.resize(rows.size() * static_cast<size_t>(width));
  for (size_t r = 0; r < rows.size(); ++r)
    std::memcpy(dst.data() + r * static_cast<size_t>(width),
                src + rows[r] * width, static_cast<size_t>(width) * 4);
}

/// dst row rows[r] = src row r.
void scatter(const std::vector<float> &src, const std::vector<int64_t> &rows,
             int64_t width, float *dst) {
  for (size_t r = 0; r < rows.size(); ++r)
    std::memcpy(dst + rows[r] * width,
                src.data() + r * static_cast<size_t>(width),
                static_cast<size_t>(width) * 4);
}

/// One query block's scores against its key panel: S[rows, span] =
/// scale * Q[block, head] K[0:span, head]^T.
void scores(const std::vector<float> &Q, const std::vector<float> &K,
            int64_t block, int64_t rows, int64_t span, int64_t head, int64_t d,
            int64_t width, float scale, std::vector<float> &S) {
  S.resize(static_cast<size_t>(rows * span));
  gemmStrided<float>(false, true, rows, span, d, scale,
                     Q.data() + block * width + head * d, width,
                     K.data() + head * d, width, 0.0f, S.data(), span);
}

} // namespace

void tiledAttentionForward(const float *q, const float *k, const float *v,
                           float *o, float *lse, const int64_t *qpos,
                           const int64_t *qseg, const int64_t *kpos,
                           const int64_t *kseg, int64_t Tq, int64_t Tk,
                           int64_t heads, int64_t d, bool causal) {
  const int64_t width = heads * d;
  const float scale =
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<float> Q, K, V, O, S;
  for (const Segment &seg : tiles::segmentsOf(qpos, qseg, kpos, kseg, Tq, Tk)) {
    const int64_t nq = static_cast<int64_t>(seg.queries.size());
    gather(q, seg.queries, width, Q);
    gather(k, seg.keys, width, K);
    gather(v, seg.keys, width, V);
    O.assign(static_cast<size_t>(nq * width), 0.0f);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t block = 0; block < nq; block += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, nq - block);
        const int64_t span = seg.span(block, block + rows, causal);
        float *lseOut = lse + h * Tq;
        if (span == 0) { // no query of the block has a key: o = 0
          for (int64_t r = 0; r < rows; ++r)
            lseOut[seg.queries[static_cast<size_t>(block + r)]] =
                kNegativeInfinity;
          continue;
        }
        scores(Q, K, block, rows, span, h, d, width, scale, S);
        // Row softmax over each row's keys [0, cut); the rest of the panel
        // (a partial tile's masked tail) is zero.
        float rowMax[kQueryBlock], rowSum[kQueryBlock];
        for (int64_t r = 0; r < rows; ++r) {
          float *row = S.data() + r * span;
          const int64_t cut = seg.cut(block + r, causal);
          float mx = kNegativeInfinity;
          for (int64_t j = 0; j < cut; ++j)
            mx = std::max(mx, row[j]);
          fast::expShifted(row, mx, row, cut);
          float sum = fast::sum(row, cut);
          std::fill(row + cut, row + span, 0.0f);
          rowMax[r] = mx;
          rowSum[r] = sum;
        }
        float *Ob = O.data() + block * width + h * d;
        gemmStrided<float>(false, false, rows, d, span, 1.0f, S.data(), span,
                           V.data() + h * d, width, 0.0f, Ob, width);
        for (int64_t r = 0; r < rows; ++r) {
          int64_t token = seg.queries[static_cast<size_t>(block + r)];
          if (rowSum[r] > 0.0f) {
            float inv = 1.0f / rowSum[r];
            for (int64_t c = 0; c < d; ++c)
              Ob[r * width + c] *= inv;
            lseOut[token] = rowMax[r] + std::log(rowSum[r]);
          } else {
            lseOut[token] = kNegativeInfinity; // the row is zero already
          }
        }
      }
    scatter(O, seg.queries, width, o);
  }
}

void tiledAttentionBackward(const float *q, const float *k, const float *v,
                            const float *o, const float *lse, const float *dout,
                            float *dq, float *dk, float *dv,
                            const int64_t *qpos, const int64_t *qseg,
                            const int64_t *kpos, const int64_t *kseg,
                            int64_t Tq, int64_t Tk, int64_t heads, int64_t d,
                            bool causal) {
  const int64_t width = heads * d;
  const float scale =
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  // Keys outside every query's segment get no gradient.
  std::fill(dk, dk + Tk * width, 0.0f);
  std::fill(dv, dv + Tk * width, 0.0f);
  std::vector<float> Q, K, V, O, dO, dQ, dK, dV, P, dP, D;
  for (const Segment &seg : tiles::segmentsOf(qpos, qseg, kpos, kseg, Tq, Tk)) {
    const int64_t nq = static_cast<int64_t>(seg.queries.size());
    const int64_t nk = static_cast<int64_t>(seg.keys.size());
    gather(q, seg.queries, width, Q);
    gather(o, seg.queries, width, O);
    gather(dout, seg.queries, width, dO);
    gather(k, seg.keys, width, K);
    gather(v, seg.keys, width, V);
    dQ.assign(static_cast<size_t>(nq * width), 0.0f);
    dK.assign(static_cast<size_t>(nk * width), 0.0f);
    dV.assign(static_cast<size_t>(nk * width), 0.0f);
    // D[h, i] = dO_i . O_i, per head.
    D.resize(static_cast<size_t>(heads * nq));
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t h = 0; h < heads; ++h) {
        const float *a = dO.data() + i * width + h * d;
        const float *b = O.data() + i * width + h * d;
        float s = 0.0f;
        for (int64_t c = 0; c < d; ++c)
          s += a[c] * b[c];
        D[static_cast<size_t>(h * nq + i)] = s;
      }
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t block = 0; block < nq; block += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, nq - block);
        const int64_t span = seg.span(block, block + rows, causal);
        if (span == 0)
          continue; // no key: o = 0 depends on nothing
        scores(Q, K, block, rows, span, h, d, width, scale, P);
        for (int64_t r = 0; r < rows; ++r) {
          float *row = P.data() + r * span;
          const int64_t cut = seg.cut(block + r, causal);
          const float l =
              lse[h * Tq + seg.queries[static_cast<size_t>(block + r)]];
          const int64_t live = l == kNegativeInfinity ? 0 : cut;
          fast::expShifted(row, l, row, live);
          std::fill(row + live, row + span, 0.0f);
        }
        const float *dOb = dO.data() + block * width + h * d;
        const float *Qb = Q.data() + block * width + h * d;
        // dV[0:span] += P^T dO; dP = dO V^T.
        gemmStrided<float>(true, false, span, d, rows, 1.0f, P.data(), span,
                           dOb, width, 1.0f, dV.data() + h * d, width);
        dP.resize(static_cast<size_t>(rows * span));
        gemmStrided<float>(false, true, rows, span, d, 1.0f, dOb, width,
                           V.data() + h * d, width, 0.0f, dP.data(), span);
        // dS = P (dP - D) scale, into dP.
        for (int64_t r = 0; r < rows; ++r) {
          const float Dr = D[static_cast<size_t>(h * nq + block + r)];
          const float *p = P.data() + r * span;
          float *ds = dP.data() + r * span;
          for (int64_t j = 0; j < span; ++j)
            ds[j] = p[j] * (ds[j] - Dr) * scale;
        }
        // dQ[block] = dS K; dK[0:span] += dS^T Q[block].
        gemmStrided<float>(false, false, rows, d, span, 1.0f, dP.data(), span,
                           K.data() + h * d, width, 0.0f,
                           dQ.data() + block * width + h * d, width);
        gemmStrided<float>(true, false, span, d, rows, 1.0f, dP.data(), span,
                           Qb, width, 1.0f, dK.data() + h * d, width);
      }
    scatter(dQ, seg.queries, width, dq);
    scatter(dK, seg.keys, width, dk);
    scatter(dV, seg.keys, width, dv);
  }
}

} // namespace mimo::kernels
