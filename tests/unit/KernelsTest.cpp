//===- KernelsTest.cpp - CPU kernels against references and finite diffs --===//
//
// Every backward of runtime/device/cpu/Kernels.h is checked against a float64
// central finite difference of a scalar objective sum(r * y) with a random r.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace k = mimo::kernels;

namespace {

using Vec = std::vector<double>;
using IVec = std::vector<int64_t>;

Vec randVec(std::mt19937 &rng, size_t n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double &x : v)
    x = dist(rng);
  return v;
}

double dotAll(const Vec &a, const Vec &b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

double maxAbs(const Vec &a) {
  double m = 0.0;
  for (double x : a)
    m = std::max(m, std::abs(x));
  return m;
}

/// Checks grad against the central finite difference of f at x, element by
/// element: |grad - fd| <= rtol * max(|grad|, |fd|) + atol.
void checkGrad(const std::string &what, const std::function<double()> &f,
               Vec &x, const Vec &grad, double rtol = 1e-6, double atol = 1e-8,
               double eps = 1e-6) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + eps;
    double fp = f();
    x[i] = saved - eps;
    double fm = f();
    x[i] = saved;
    double fd = (fp - fm) / (2.0 * eps);
    double tol = rtol * std::max(std::abs(fd), std::abs(grad[i])) + atol;
    EXPECT_NEAR(grad[i], fd, tol) << what << "[" << i << "]";
  }
}

/// |a - b| <= rtol * max|b| elementwise (normwise-relative comparison).
template <typename F>
void expectClose(const std::string &what, const std::vector<F> &a, const Vec &b,
                 double rtol) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = std::max(maxAbs(b), 1e-30);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(static_cast<double>(a[i]), b[i], rtol * scale)
        << what << "[" << i << "]";
}

std::vector<float> toFloat(const Vec &v) {
  return std::vector<float>(v.begin(), v.end());
}

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

template <typename T> void gemmCase(bool ta, bool tb, double rtol) {
  std::mt19937 rng(11);
  const int64_t M = 3, N = 4, K = 5;
  Vec A = randVec(rng, M * K), B = randVec(rng, K * N), C = randVec(rng, M * N);
  const double alpha = 1.5, beta = 0.5;
  Vec ref(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < K; ++p) {
        double a = ta ? A[p * M + i] : A[i * K + p];
        double b = tb ? B[j * K + p] : B[p * N + j];
        s += a * b;
      }
      ref[i * N + j] = alpha * s + beta * C[i * N + j];
    }
  std::vector<T> At(A.begin(), A.end()), Bt(B.begin(), B.end()),
      Ct(C.begin(), C.end());
  k::gemm<T>(ta, tb, M, N, K, T(alpha), At.data(), Bt.data(), T(beta),
             Ct.data());
  expectClose("gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb), Ct,
              ref, rtol);
}

TEST(KernelsGemm, AllTransposesDouble) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      gemmCase<double>(ta, tb, 1e-14);
}

TEST(KernelsGemm, AllTransposesFloat) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      gemmCase<float>(ta, tb, 1e-6);
}

TEST(KernelsGemm, EmptyInnerDimensionScalesC) {
  Vec C = {1.0, -2.0, 3.0, 4.0};
  k::gemm<double>(false, false, 2, 2, 0, 1.0, nullptr, nullptr, 0.5, C.data());
  EXPECT_EQ(C, (Vec{0.5, -1.0, 1.5, 2.0}));
}

//===----------------------------------------------------------------------===//
// Norms
//===----------------------------------------------------------------------===//

TEST(KernelsNorm, RmsnormForwardMatchesFormula) {
  std::mt19937 rng(1);
  const int64_t rows = 2, cols = 5;
  const double eps = 1e-5;
  Vec x = randVec(rng, rows * cols), w = randVec(rng, cols, 0.5, 1.5);
  Vec y(rows * cols), rstd(rows);
  k::rmsnormForward<double>(x.data(), w.data(), y.data(), rstd.data(), rows,
                            cols, eps);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c)
      ss += x[r * cols + c] * x[r * cols + c];
    double rs = 1.0 / std::sqrt(ss / cols + eps);
    EXPECT_NEAR(rstd[r], rs, 1e-14);
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_NEAR(y[r * cols + c], x[r * cols + c] * rs * w[c], 1e-14);
  }
}

TEST(KernelsNorm, RmsnormBackwardFiniteDifference) {
  std::mt19937 rng(2);
  const int64_t rows = 3, cols = 6;
  const double eps = 1e-5;
  Vec x = randVec(rng, rows * cols), w = randVec(rng, cols, 0.5, 1.5);
  Vec r = randVec(rng, rows * cols);
  auto f = [&] {
    Vec y(rows * cols), rstd(rows);
    k::rmsnormForward<double>(x.data(), w.data(), y.data(), rstd.data(), rows,
                              cols, eps);
    return dotAll(r, y);
  };
  Vec y(rows * cols), rstd(rows);
  k::rmsnormForward<double>(x.data(), w.data(), y.data(), rstd.data(), rows,
                            cols, eps);
  Vec dx(rows * cols, std::nan("")), dw0 = randVec(rng, cols), dw = dw0;
  k::rmsnormBackward<double>(x.data(), w.data(), rstd.data(), r.data(),
                             dx.data(), dw.data(), rows, cols);
  for (int64_t c = 0; c < cols; ++c)
    dw[c] -= dw0[c]; // dw accumulates
  checkGrad("rmsnorm dx", f, x, dx);
  checkGrad("rmsnorm dw", f, w, dw);
}

TEST(KernelsNorm, LayernormBackwardFiniteDifference) {
  std::mt19937 rng(3);
  const int64_t rows = 3, cols = 6;
  const double eps = 1e-5;
  Vec x = randVec(rng, rows * cols, -2.0, 2.0);
  Vec w = randVec(rng, cols, 0.5, 1.5), b = randVec(rng, cols);
  Vec r = randVec(rng, rows * cols);
  auto fwd = [&](Vec &y, Vec &mean, Vec &rstd) {
    k::layernormForward<double>(x.data(), w.data(), b.data(), y.data(),
                                mean.data(), rstd.data(), rows, cols, eps);
  };
  auto f = [&] {
    Vec y(rows * cols), mean(rows), rstd(rows);
    fwd(y, mean, rstd);
    return dotAll(r, y);
  };
  Vec y(rows * cols), mean(rows), rstd(rows);
  fwd(y, mean, rstd);
  // The forward against the formula.
  for (int64_t i = 0; i < rows; ++i) {
    double mu = 0.0, var = 0.0;
    for (int64_t c = 0; c < cols; ++c)
      mu += x[i * cols + c] / cols;
    for (int64_t c = 0; c < cols; ++c)
      var += (x[i * cols + c] - mu) * (x[i * cols + c] - mu) / cols;
    EXPECT_NEAR(mean[i], mu, 1e-14);
    EXPECT_NEAR(rstd[i], 1.0 / std::sqrt(var + eps), 1e-12);
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_NEAR(y[i * cols + c],
                  (x[i * cols + c] - mu) / std::sqrt(var + eps) * w[c] + b[c],
                  1e-12);
  }
  Vec dx(rows * cols, std::nan(""));
  Vec dw0 = randVec(rng, cols), db0 = randVec(rng, cols);
  Vec dw = dw0, db = db0;
  k::layernormBackward<double>(x.data(), w.data(), mean.data(), rstd.data(),
                               r.data(), dx.data(), dw.data(), db.data(), rows,
                               cols);
  for (int64_t c = 0; c < cols; ++c) {
    dw[c] -= dw0[c];
    db[c] -= db0[c];
  }
  checkGrad("layernorm dx", f, x, dx);
  checkGrad("layernorm dw", f, w, dw);
  checkGrad("layernorm db", f, b, db);
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

TEST(KernelsActivation, GeluForwardAndBackward) {
  std::mt19937 rng(4);
  const int64_t n = 16;
  Vec x = randVec(rng, n, -4.0, 4.0), r = randVec(rng, n);
  Vec y(n);
  k::geluForward<double>(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    double xv = x[i];
    double ref = 0.5 * xv *
                 (1.0 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) *
                                  (xv + 0.044715 * xv * xv * xv)));
    EXPECT_NEAR(y[i], ref, 1e-14);
  }
  auto f = [&] {
    Vec yy(n);
    k::geluForward<double>(x.data(), yy.data(), n);
    return dotAll(r, yy);
  };
  Vec dx(n, std::nan(""));
  k::geluBackward<double>(x.data(), r.data(), dx.data(), n);
  checkGrad("gelu dx", f, x, dx);
}

TEST(KernelsActivation, SwigluForwardAndBackward) {
  std::mt19937 rng(5);
  const int64_t n = 16;
  Vec gate = randVec(rng, n, -4.0, 4.0), up = randVec(rng, n, -2.0, 2.0);
  Vec r = randVec(rng, n);
  Vec y(n);
  k::swigluForward<double>(gate.data(), up.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(y[i], gate[i] / (1.0 + std::exp(-gate[i])) * up[i], 1e-14);
  auto f = [&] {
    Vec yy(n);
    k::swigluForward<double>(gate.data(), up.data(), yy.data(), n);
    return dotAll(r, yy);
  };
  Vec dgate(n, std::nan("")), dup(n, std::nan(""));
  k::swigluBackward<double>(gate.data(), up.data(), r.data(), dgate.data(),
                            dup.data(), n);
  checkGrad("swiglu dgate", f, gate, dgate);
  checkGrad("swiglu dup", f, up, dup);
}

//===----------------------------------------------------------------------===//
// RoPE
//===----------------------------------------------------------------------===//

constexpr int64_t kRopeTokens = 3, kRopeHeads = 2, kRopeDim = 8;
const IVec kRopePos = {5, 0, 17};

TEST(KernelsRope, ForwardMatchesRotateHalf) {
  std::mt19937 rng(6);
  const int64_t n = kRopeTokens * kRopeHeads * kRopeDim, half = kRopeDim / 2;
  Vec x = randVec(rng, n), y = x;
  k::rope<double>(y.data(), kRopePos.data(), kRopeTokens, kRopeHeads, kRopeDim,
                  false);
  for (int64_t t = 0; t < kRopeTokens; ++t)
    for (int64_t h = 0; h < kRopeHeads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        int64_t base = (t * kRopeHeads + h) * kRopeDim;
        double a = kRopePos[t] * std::pow(10000.0, -2.0 * i / kRopeDim);
        double x1 = x[base + i], x2 = x[base + i + half];
        EXPECT_NEAR(y[base + i], x1 * std::cos(a) - x2 * std::sin(a), 1e-14);
        EXPECT_NEAR(y[base + i + half], x2 * std::cos(a) + x1 * std::sin(a),
                    1e-14);
      }
  // Position 0 (token 1) is the identity.
  for (int64_t c = 0; c < kRopeHeads * kRopeDim; ++c)
    EXPECT_EQ(y[kRopeHeads * kRopeDim + c], x[kRopeHeads * kRopeDim + c]);
}

TEST(KernelsRope, InverseUndoesForward) {
  std::mt19937 rng(7);
  const int64_t n = kRopeTokens * kRopeHeads * kRopeDim;
  Vec x = randVec(rng, n), y = x;
  k::rope<double>(y.data(), kRopePos.data(), kRopeTokens, kRopeHeads, kRopeDim,
                  false);
  k::rope<double>(y.data(), kRopePos.data(), kRopeTokens, kRopeHeads, kRopeDim,
                  true);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(y[i], x[i], 1e-14);
}

TEST(KernelsRope, BackwardIsInverseRotation) {
  std::mt19937 rng(8);
  const int64_t n = kRopeTokens * kRopeHeads * kRopeDim;
  Vec x = randVec(rng, n), r = randVec(rng, n);
  auto f = [&] {
    Vec y = x;
    k::rope<double>(y.data(), kRopePos.data(), kRopeTokens, kRopeHeads,
                    kRopeDim, false);
    return dotAll(r, y);
  };
  Vec dx = r;
  k::rope<double>(dx.data(), kRopePos.data(), kRopeTokens, kRopeHeads, kRopeDim,
                  true);
  checkGrad("rope dx", f, x, dx);
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

struct AttnCase {
  IVec qpos, qseg, kpos, kseg;
  int64_t heads = 2, d = 4;
  bool causal = true;
  int64_t Tq() const { return static_cast<int64_t>(qpos.size()); }
  int64_t Tk() const { return static_cast<int64_t>(kpos.size()); }
  bool allowed(int64_t i, int64_t j) const {
    return qseg[i] == kseg[j] && (!causal || kpos[j] <= qpos[i]);
  }
};

/// The naive reference: full score matrix, masked softmax.
void attentionReference(const AttnCase &c, const Vec &q, const Vec &kk,
                        const Vec &v, Vec &o, Vec &lse) {
  const int64_t H = c.heads, d = c.d, stride = H * d;
  o.assign(c.Tq() * stride, 0.0);
  lse.assign(H * c.Tq(), -std::numeric_limits<double>::infinity());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < c.Tq(); ++i) {
      Vec s(c.Tk(), -std::numeric_limits<double>::infinity());
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < c.Tk(); ++j) {
        if (!c.allowed(i, j))
          continue;
        double dot = 0.0;
        for (int64_t e = 0; e < d; ++e)
          dot += q[i * stride + h * d + e] * kk[j * stride + h * d + e];
        s[j] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, s[j]);
      }
      if (mx == -std::numeric_limits<double>::infinity())
        continue;
      double sum = 0.0;
      for (int64_t j = 0; j < c.Tk(); ++j)
        if (c.allowed(i, j))
          sum += std::exp(s[j] - mx);
      lse[h * c.Tq() + i] = mx + std::log(sum);
      for (int64_t j = 0; j < c.Tk(); ++j) {
        if (!c.allowed(i, j))
          continue;
        double p = std::exp(s[j] - mx) / sum;
        for (int64_t e = 0; e < d; ++e)
          o[i * stride + h * d + e] += p * v[j * stride + h * d + e];
      }
    }
}

template <typename T>
void attnForward(const AttnCase &c, const std::vector<T> &q,
                 const std::vector<T> &kk, const std::vector<T> &v,
                 std::vector<T> &o, std::vector<T> &lse) {
  o.assign(c.Tq() * c.heads * c.d, T(0));
  lse.assign(c.heads * c.Tq(), T(0));
  k::attentionForward<T>(q.data(), kk.data(), v.data(), o.data(), lse.data(),
                         c.qpos.data(), c.qseg.data(), c.kpos.data(),
                         c.kseg.data(), c.Tq(), c.Tk(), c.heads, c.d, c.causal);
}

template <typename T>
void attnBackward(const AttnCase &c, const std::vector<T> &q,
                  const std::vector<T> &kk, const std::vector<T> &v,
                  const std::vector<T> &o, const std::vector<T> &lse,
                  const std::vector<T> &dout, std::vector<T> &dq,
                  std::vector<T> &dk, std::vector<T> &dv) {
  // Fill with NaN: the backward must write, not accumulate.
  dq.assign(q.size(), std::numeric_limits<T>::quiet_NaN());
  dk.assign(kk.size(), std::numeric_limits<T>::quiet_NaN());
  dv.assign(v.size(), std::numeric_limits<T>::quiet_NaN());
  k::attentionBackward<T>(
      q.data(), kk.data(), v.data(), o.data(), lse.data(), dout.data(),
      dq.data(), dk.data(), dv.data(), c.qpos.data(), c.qseg.data(),
      c.kpos.data(), c.kseg.data(), c.Tq(), c.Tk(), c.heads, c.d, c.causal);
}

/// Forward against the reference, backward against finite differences.
/// Returns dq for case-specific checks.
Vec checkAttention(const AttnCase &c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t stride = c.heads * c.d;
  Vec q = randVec(rng, c.Tq() * stride, -1.5, 1.5);
  Vec kk = randVec(rng, c.Tk() * stride, -1.5, 1.5);
  Vec v = randVec(rng, c.Tk() * stride);
  Vec r = randVec(rng, c.Tq() * stride);

  Vec o, lse, oRef, lseRef;
  attnForward(c, q, kk, v, o, lse);
  attentionReference(c, q, kk, v, oRef, lseRef);
  for (size_t i = 0; i < o.size(); ++i)
    EXPECT_NEAR(o[i], oRef[i], 1e-13) << "o[" << i << "]";
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lseRef[i]))
      EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "lse[" << i << "]";
    else
      EXPECT_NEAR(lse[i], lseRef[i], 1e-13) << "lse[" << i << "]";
  }

  Vec dq, dk, dv;
  attnBackward(c, q, kk, v, o, lse, r, dq, dk, dv);
  auto f = [&] {
    Vec oo, ll;
    attnForward(c, q, kk, v, oo, ll);
    return dotAll(r, oo);
  };
  checkGrad("attention dq", f, q, dq, 1e-6, 1e-8);
  checkGrad("attention dk", f, kk, dk, 1e-6, 1e-8);
  checkGrad("attention dv", f, v, dv, 1e-6, 1e-8);
  return dq;
}

AttnCase zigzagCase() {
  AttnCase c;
  c.qpos = {0, 1, 6, 7};
  c.qseg = {0, 0, 0, 0};
  c.kpos = {0, 1, 2, 3, 4, 5, 6, 7};
  c.kseg = IVec(8, 0);
  c.causal = true;
  return c;
}

TEST(KernelsAttention, CausalZigzagQueries) {
  AttnCase c = zigzagCase();
  Vec dq = checkAttention(c, 21);
  // Query 0 (position 0) may attend only key 0 (itself): o = v_0 and its
  // output does not depend on q, so dq = 0.
  std::mt19937 rng(21);
  const int64_t stride = c.heads * c.d;
  Vec q = randVec(rng, c.Tq() * stride, -1.5, 1.5);
  Vec kk = randVec(rng, c.Tk() * stride, -1.5, 1.5);
  Vec v = randVec(rng, c.Tk() * stride);
  Vec o, lse;
  attnForward(c, q, kk, v, o, lse);
  for (int64_t e = 0; e < stride; ++e) {
    EXPECT_NEAR(o[e], v[e], 1e-15);
    EXPECT_EQ(dq[e], 0.0);
  }
  for (int64_t h = 0; h < c.heads; ++h) {
    double s = 0.0;
    for (int64_t e = 0; e < c.d; ++e)
      s += q[h * c.d + e] * kk[h * c.d + e];
    EXPECT_NEAR(lse[h * c.Tq()], s / std::sqrt(double(c.d)), 1e-14);
  }
}

TEST(KernelsAttention, CausalZigzagQueriesShuffledKeys) {
  AttnCase c = zigzagCase();
  c.kpos = {4, 0, 7, 2, 1, 6, 3, 5};
  checkAttention(c, 22);
}

TEST(KernelsAttention, CausalTwoSegments) {
  AttnCase c;
  c.qpos = {0, 1, 2, 0, 1, 2, 3};
  c.qseg = {0, 0, 0, 1, 1, 1, 1};
  c.kpos = c.qpos;
  c.kseg = c.qseg;
  c.causal = true;
  checkAttention(c, 23);
}

TEST(KernelsAttention, NonCausalPerSegment) {
  AttnCase c;
  c.qpos = {0, 1, 2, 0, 1, 2, 3};
  c.qseg = {0, 0, 0, 1, 1, 1, 1};
  c.kpos = c.qpos;
  c.kseg = c.qseg;
  c.causal = false;
  checkAttention(c, 24);
}

TEST(KernelsAttention, OnlySelfAndNoAllowedKey) {
  // Query 0 sees only key 2 (its own token: segment 3 holds one token);
  // query 1 is in a segment no key has (o = 0, lse = -inf, dq = 0).
  AttnCase c;
  c.qpos = {0, 0, 1};
  c.qseg = {3, 9, 0};
  c.kpos = {0, 1, 0};
  c.kseg = {0, 0, 3};
  c.causal = true;
  c.heads = 3;
  c.d = 2;
  Vec dq = checkAttention(c, 25);
  std::mt19937 rng(25);
  const int64_t stride = c.heads * c.d;
  Vec q = randVec(rng, c.Tq() * stride, -1.5, 1.5);
  Vec kk = randVec(rng, c.Tk() * stride, -1.5, 1.5);
  Vec v = randVec(rng, c.Tk() * stride);
  Vec o, lse;
  attnForward(c, q, kk, v, o, lse);
  for (int64_t e = 0; e < stride; ++e) {
    EXPECT_NEAR(o[e], v[2 * stride + e], 1e-15);
    EXPECT_EQ(dq[e], 0.0);
    EXPECT_EQ(o[stride + e], 0.0);
    EXPECT_EQ(dq[stride + e], 0.0);
  }
  for (int64_t h = 0; h < c.heads; ++h)
    EXPECT_TRUE(std::isinf(lse[h * c.Tq() + 1]) && lse[h * c.Tq() + 1] < 0);
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

TEST(KernelsEmbedding, ShardsSumToUnsharded) {
  std::mt19937 rng(31);
  const int64_t V = 7, hidden = 3, split = 3;
  const IVec ids = {2, 5, 0, 6, 2, 3};
  const int64_t n = static_cast<int64_t>(ids.size());
  Vec table = randVec(rng, V * hidden);
  Vec full(n * hidden), a(n * hidden, 7.0), b(n * hidden, 7.0);
  k::embeddingForward<double>(ids.data(), n, table.data(), 0, V, hidden,
                              full.data());
  k::embeddingForward<double>(ids.data(), n, table.data(), 0, split, hidden,
                              a.data());
  k::embeddingForward<double>(ids.data(), n, table.data() + split * hidden,
                              split, V, hidden, b.data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < hidden; ++c) {
      EXPECT_EQ(full[r * hidden + c], table[ids[r] * hidden + c]);
      EXPECT_EQ(a[r * hidden + c] + b[r * hidden + c], full[r * hidden + c]);
      // Exactly one shard holds the row; the other wrote zeros.
      EXPECT_EQ(ids[r] < split ? b[r * hidden + c] : a[r * hidden + c], 0.0);
    }
}

TEST(KernelsEmbedding, BackwardFiniteDifferenceAndShards) {
  std::mt19937 rng(32);
  const int64_t V = 7, hidden = 3, split = 3;
  const IVec ids = {2, 5, 0, 6, 2, 3}; // id 2 twice: gradients add up
  const int64_t n = static_cast<int64_t>(ids.size());
  Vec table = randVec(rng, V * hidden), r = randVec(rng, n * hidden);
  auto f = [&] {
    Vec out(n * hidden);
    k::embeddingForward<double>(ids.data(), n, table.data(), 0, V, hidden,
                                out.data());
    return dotAll(r, out);
  };
  Vec d0 = randVec(rng, V * hidden), dfull = d0;
  k::embeddingBackward<double>(ids.data(), n, r.data(), 0, V, hidden,
                               dfull.data());
  Vec dshard = d0;
  k::embeddingBackward<double>(ids.data(), n, r.data(), 0, split, hidden,
                               dshard.data());
  k::embeddingBackward<double>(ids.data(), n, r.data(), split, V, hidden,
                               dshard.data() + split * hidden);
  for (int64_t i = 0; i < V * hidden; ++i)
    EXPECT_NEAR(dshard[i], dfull[i], 1e-15);
  for (int64_t i = 0; i < V * hidden; ++i)
    dfull[i] -= d0[i]; // dtable accumulates
  checkGrad("embedding dtable", f, table, dfull);
}

//===----------------------------------------------------------------------===//
// Vocab-parallel cross-entropy
//===----------------------------------------------------------------------===//

struct CeResult {
  Vec loss, dlogits;
};

/// The three steps for a set of vocabulary shards [bounds[s], bounds[s+1]),
/// combining the per-shard results the way the caller's all-reduces do.
CeResult crossEntropySharded(const Vec &logits, const IVec &targets,
                             const Vec &scale, int64_t V, const IVec &bounds) {
  const int64_t n = static_cast<int64_t>(targets.size());
  const size_t shards = bounds.size() - 1;
  std::vector<Vec> local(shards);
  for (size_t s = 0; s < shards; ++s) {
    int64_t vb = bounds[s], vl = bounds[s + 1] - bounds[s];
    local[s].resize(n * vl);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < vl; ++j)
        local[s][i * vl + j] = logits[i * V + vb + j];
  }
  Vec gmax(n, -std::numeric_limits<double>::infinity());
  for (size_t s = 0; s < shards; ++s) {
    Vec mx(n);
    k::crossEntropyRowMax<double>(local[s].data(), n, bounds[s + 1] - bounds[s],
                                  mx.data());
    for (int64_t i = 0; i < n; ++i)
      gmax[i] = std::max(gmax[i], mx[i]); // all-reduce max
  }
  Vec gsum(n, 0.0), gtarget(n, 0.0);
  for (size_t s = 0; s < shards; ++s) {
    Vec se(n), tl(n);
    k::crossEntropySums<double>(local[s].data(), targets.data(), n,
                                bounds[s + 1] - bounds[s], bounds[s],
                                gmax.data(), se.data(), tl.data());
    for (int64_t i = 0; i < n; ++i) {
      gsum[i] += se[i]; // all-reduce sum
      gtarget[i] += tl[i];
    }
  }
  CeResult res;
  res.loss.resize(n);
  k::crossEntropyLoss<double>(gmax.data(), gsum.data(), gtarget.data(), n,
                              res.loss.data());
  res.dlogits.assign(n * V, 0.0);
  for (size_t s = 0; s < shards; ++s) {
    int64_t vb = bounds[s], vl = bounds[s + 1] - bounds[s];
    Vec dl(n * vl, std::nan(""));
    k::crossEntropyBackward<double>(local[s].data(), targets.data(), n, vl, vb,
                                    gmax.data(), gsum.data(), scale.data(),
                                    dl.data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < vl; ++j)
        res.dlogits[i * V + vb + j] = dl[i * vl + j];
  }
  return res;
}

TEST(KernelsCrossEntropy, VocabParallelMatchesUnsharded) {
  std::mt19937 rng(41);
  const int64_t V = 9, split = 4;
  const IVec targets = {0, 3, 4, 8, 2, 6};
  const int64_t n = static_cast<int64_t>(targets.size());
  Vec logits = randVec(rng, n * V, -3.0, 3.0);
  for (int64_t j = 0; j < V; ++j)
    logits[5 * V + j] += 80.0; // a large row: the max shift keeps it finite
  Vec scale = randVec(rng, n, 0.2, 1.0);
  scale[2] = 0.0; // a masked row

  CeResult full = crossEntropySharded(logits, targets, scale, V, {0, V});
  CeResult sharded =
      crossEntropySharded(logits, targets, scale, V, {0, split, V});
  for (int64_t i = 0; i < n; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < V; ++j)
      mx = std::max(mx, logits[i * V + j]);
    double s = 0.0;
    for (int64_t j = 0; j < V; ++j)
      s += std::exp(logits[i * V + j] - mx);
    double ref = std::log(s) + mx - logits[i * V + targets[i]];
    EXPECT_NEAR(full.loss[i], ref, 1e-12);
    EXPECT_NEAR(sharded.loss[i], ref, 1e-12);
    for (int64_t j = 0; j < V; ++j) {
      double p = std::exp(logits[i * V + j] - mx) / s;
      double g = scale[i] * (p - (j == targets[i] ? 1.0 : 0.0));
      EXPECT_NEAR(full.dlogits[i * V + j], g, 1e-14);
      EXPECT_NEAR(sharded.dlogits[i * V + j], full.dlogits[i * V + j], 1e-14);
    }
  }
  for (int64_t j = 0; j < V; ++j)
    EXPECT_EQ(full.dlogits[2 * V + j], 0.0);
}

TEST(KernelsCrossEntropy, TargetOutsideShardIsNotLocal) {
  const Vec logits = {1.0, 2.0, 3.0};
  const IVec targets = {10};
  Vec gmax = {3.0}, se(1), tl(1, 99.0);
  k::crossEntropySums<double>(logits.data(), targets.data(), 1, 3, 5,
                              gmax.data(), se.data(), tl.data());
  EXPECT_EQ(tl[0], 0.0);
  EXPECT_NEAR(se[0], std::exp(-2.0) + std::exp(-1.0) + 1.0, 1e-15);
  // Targets 4 (below the shard [5, 8)) and 8 (just past it): no one-hot.
  for (int64_t t : {int64_t(4), int64_t(8)}) {
    Vec gsum = {10.0}, scale = {2.0}, dl(3);
    k::crossEntropyBackward<double>(logits.data(), &t, 1, 3, 5, gmax.data(),
                                    gsum.data(), scale.data(), dl.data());
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_NEAR(dl[j], 2.0 * std::exp(logits[j] - 3.0) / 10.0, 1e-15);
  }
}

TEST(KernelsCrossEntropy, BackwardFiniteDifference) {
  std::mt19937 rng(42);
  const int64_t V = 9, split = 4;
  const IVec targets = {0, 3, 4, 8, 6};
  const int64_t n = static_cast<int64_t>(targets.size());
  Vec logits = randVec(rng, n * V, -3.0, 3.0);
  Vec scale = randVec(rng, n, 0.2, 1.0);
  auto f = [&] {
    CeResult res = crossEntropySharded(logits, targets, scale, V, {0, V});
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i)
      s += scale[i] * res.loss[i];
    return s;
  };
  CeResult sharded =
      crossEntropySharded(logits, targets, scale, V, {0, split, V});
  checkGrad("cross-entropy dlogits", f, logits, sharded.dlogits);
}

//===----------------------------------------------------------------------===//
// AdamW, sumSquares, axpy
//===----------------------------------------------------------------------===//

template <typename T> void adamwCase(double tol) {
  const double lr = 0.1, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.01;
  std::vector<T> p = {T(1.0), T(-2.0), T(0.5)};
  std::vector<T> g = {T(0.5), T(0.25), T(-1.0)};
  std::vector<T> m = {T(0.0), T(0.1), T(-0.2)};
  std::vector<T> v = {T(0.0), T(0.01), T(0.04)};
  const int64_t step = 3;
  std::vector<double> expP(3), expM(3), expV(3);
  for (int i = 0; i < 3; ++i) {
    double mi = 0.9 * double(m[i]) + 0.1 * double(g[i]);
    double vi = 0.99 * double(v[i]) + 0.01 * double(g[i]) * double(g[i]);
    double mhat = mi / (1.0 - 0.9 * 0.9 * 0.9);
    double vhat = vi / (1.0 - 0.99 * 0.99 * 0.99);
    expM[i] = mi;
    expV[i] = vi;
    expP[i] = double(p[i]) -
              0.1 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.01 * double(p[i]));
  }
  k::adamw<T>(p.data(), g.data(), m.data(), v.data(), 3, lr, b1, b2, eps, wd,
              step);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(double(p[i]), expP[i], tol);
    EXPECT_NEAR(double(m[i]), expM[i], tol);
    EXPECT_NEAR(double(v[i]), expV[i], tol);
  }
  // Step 1 from zero moments: mhat = g, vhat = g^2.
  std::vector<T> p1 = {T(2.0)}, g1 = {T(-0.3)}, m1 = {T(0)}, v1 = {T(0)};
  k::adamw<T>(p1.data(), g1.data(), m1.data(), v1.data(), 1, lr, b1, b2, eps,
              wd, 1);
  EXPECT_NEAR(double(p1[0]), 2.0 - 0.1 * (-0.3 / (0.3 + 1e-8) + 0.01 * 2.0),
              tol);
}

TEST(KernelsAdamw, OneStepDouble) { adamwCase<double>(1e-14); }
TEST(KernelsAdamw, OneStepFloat) { adamwCase<float>(1e-6); }

TEST(KernelsMisc, SumSquaresAndAxpy) {
  std::vector<float> x = {1.0f, -2.0f, 3.0f};
  EXPECT_EQ(k::sumSquares<float>(x.data(), 3), 14.0);
  Vec xd = {0.5, 1.5}, y = {1.0, 2.0};
  EXPECT_EQ(k::sumSquares<double>(xd.data(), 2), 2.5);
  k::axpy<double>(2, 2.0, xd.data(), y.data());
  EXPECT_EQ(y, (Vec{2.0, 5.0}));
}

//===----------------------------------------------------------------------===//
// float agrees with double
//===----------------------------------------------------------------------===//

TEST(KernelsFloat, AttentionAgreesWithDouble) {
  AttnCase c = zigzagCase();
  c.kpos = {4, 0, 7, 2, 1, 6, 3, 5};
  c.d = 16;
  std::mt19937 rng(51);
  const int64_t stride = c.heads * c.d;
  Vec q = randVec(rng, c.Tq() * stride), kk = randVec(rng, c.Tk() * stride);
  Vec v = randVec(rng, c.Tk() * stride), r = randVec(rng, c.Tq() * stride);
  Vec o, lse, dq, dk, dv;
  attnForward(c, q, kk, v, o, lse);
  attnBackward(c, q, kk, v, o, lse, r, dq, dk, dv);
  std::vector<float> qf = toFloat(q), kf = toFloat(kk), vf = toFloat(v),
                     rf = toFloat(r), of, lf, dqf, dkf, dvf;
  attnForward(c, qf, kf, vf, of, lf);
  attnBackward(c, qf, kf, vf, of, lf, rf, dqf, dkf, dvf);
  expectClose("float o", of, o, 1e-5);
  expectClose("float lse", lf, lse, 1e-5);
  expectClose("float dq", dqf, dq, 1e-5);
  expectClose("float dk", dkf, dk, 1e-5);
  expectClose("float dv", dvf, dv, 1e-5);
}

TEST(KernelsFloat, RmsnormAgreesWithDouble) {
  std::mt19937 rng(52);
  const int64_t rows = 4, cols = 64;
  Vec x = randVec(rng, rows * cols), w = randVec(rng, cols, 0.5, 1.5);
  Vec r = randVec(rng, rows * cols);
  Vec y(rows * cols), rstd(rows), dx(rows * cols), dw(cols, 0.0);
  k::rmsnormForward<double>(x.data(), w.data(), y.data(), rstd.data(), rows,
                            cols, 1e-5);
  k::rmsnormBackward<double>(x.data(), w.data(), rstd.data(), r.data(),
                             dx.data(), dw.data(), rows, cols);
  std::vector<float> xf = toFloat(x), wf = toFloat(w), rf = toFloat(r);
  std::vector<float> yf(rows * cols), rstdf(rows), dxf(rows * cols),
      dwf(cols, 0.0f);
  k::rmsnormForward<float>(xf.data(), wf.data(), yf.data(), rstdf.data(), rows,
                           cols, 1e-5f);
  k::rmsnormBackward<float>(xf.data(), wf.data(), rstdf.data(), rf.data(),
                            dxf.data(), dwf.data(), rows, cols);
  expectClose("float rmsnorm y", yf, y, 1e-5);
  expectClose("float rmsnorm rstd", rstdf, rstd, 1e-5);
  expectClose("float rmsnorm dx", dxf, dx, 1e-5);
  expectClose("float rmsnorm dw", dwf, dw, 1e-5);
}

} // namespace
