//===- Kernels.cpp - Reference CPU kernels, forward and backward ----------===//
//
// Plain loops over contiguous row-major buffers, plus OpenBLAS for GEMM
// (a plain loop where mimo was built without a BLAS).
// Reductions (norm statistics, softmax sums, sums of squares) accumulate in
// double whatever the element type.
//
// Over 600 lines on purpose: it is the one reference of every op (forward
// and backward side by side), the oracle the fast CPU kernels and the CUDA
// bodies are tested against; split by op family, a reader checking one op
// against its GPU twin would chase it across files.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/Kernels.h"

#include "runtime/device/Activation.h"
#include "runtime/device/cpu/FastKernels.h"

#ifdef MIMO_HAVE_BLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace mimo::kernels {

namespace {

// May query i attend key j?
inline bool allowed(const int64_t *qpos, const int64_t *qseg,
                    const int64_t *kpos, const int64_t *kseg, int64_t i,
                    int64_t j, bool causal) {
  return qseg[i] == kseg[j] && (!causal || kpos[j] <= qpos[i]);
}

// The keys query i may attend, in increasing order.
void allowedKeys(const int64_t *qpos, const int64_t *qseg, const int64_t *kpos,
                 const int64_t *kseg, int64_t i, int64_t Tk, bool causal,
                 std::vector<int64_t> &keys) {
  keys.clear();
  for (int64_t j = 0; j < Tk; ++j)
    if (allowed(qpos, qseg, kpos, kseg, i, j, causal))
      keys.push_back(j);
}

template <typename T> inline double dot(const T *a, const T *b, int64_t n) {
  double s = 0.0;
  for (int64_t c = 0; c < n; ++c)
    s += static_cast<double>(a[c]) * static_cast<double>(b[c]);
  return s;
}

} // namespace

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

#ifdef MIMO_HAVE_BLAS

namespace {

// The largest of x and 1, as a BLAS leading dimension (BLAS rejects 0).
blasint ld(int64_t x) { return static_cast<blasint>(std::max<int64_t>(x, 1)); }

void blasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint M, blasint N,
              blasint K, float alpha, const float *A, blasint lda,
              const float *B, blasint ldb, float beta, float *C, blasint ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
              ldc);
}

void blasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint M, blasint N,
              blasint K, double alpha, const double *A, blasint lda,
              const double *B, blasint ldb, double beta, double *C,
              blasint ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
              ldc);
}

/// Rows (or columns) of C per BLAS call: 256 costs one thread 2% against a
/// single call and gives two threads 3% over OpenBLAS's own (the 22M model,
/// farm-bench; 128: 4.5% and 6%, 512: 0% and -4.5%).
constexpr int64_t kGemmPanel = 256;
/// The multiply-adds below which a GEMM's panels run on one thread.
constexpr int64_t kGemmParallelMinimum = int64_t(1) << 20;

} // namespace

/// C in panels of kGemmPanel rows (or columns, when it has more of them),
/// each one single-threaded BLAS call, the panels spread over the rank's
/// kernel threads. The calls are the same whatever the thread count, so
/// the bits are too: OpenBLAS's own threads are not used, since on some
/// CPUs (its Haswell kernels on AMD EPYC) they change a product's bits.
template <typename T>
void gemmStrided(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 T alpha, const T *A, int64_t lda, const T *B, int64_t ldb,
                 T beta, T *C, int64_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  const bool byRows = M >= N;
  const int64_t extent = byRows ? M : N;
  const int64_t panels = (extent + kGemmPanel - 1) / kGemmPanel;
  const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
  // OpenBLAS runs every call on the calling thread from here on.
  static const bool calling = (openblas_set_num_threads(1), true);
  (void)calling;
  [[maybe_unused]] const int team = fast::threads();
#ifdef _OPENMP
#pragma omp parallel for num_threads(team)                                     \
    schedule(static) if (team > 1 && panels > 1 &&                             \
                             M * N * K >= kGemmParallelMinimum)
#endif
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t first = p * kGemmPanel;
    const int64_t count = std::min(kGemmPanel, extent - first);
    if (byRows) // rows [first, first + count) of op(A) and C
      blasGemm(ta, tb, static_cast<blasint>(count), static_cast<blasint>(N),
               static_cast<blasint>(K), alpha,
               transA ? A + first : A + first * lda, ld(lda), B, ld(ldb), beta,
               C + first * ldc, ld(ldc));
    else // columns [first, first + count) of op(B) and C
      blasGemm(ta, tb, static_cast<blasint>(M), static_cast<blasint>(count),
               static_cast<blasint>(K), alpha, A, ld(lda),
               transB ? B + first * ldb : B + first, ld(ldb), beta, C + first,
               ld(ldc));
  }
}

#else // no BLAS: op(A) and op(B) packed row-major, four rows of C at a time.

template <typename T>
void gemmStrided(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 T alpha, const T *A, int64_t lda, const T *B, int64_t ldb,
                 T beta, T *C, int64_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  // op(A) as [M, K] and op(B) as [K, N], contiguous.
  std::vector<T> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t p = 0; p < K; ++p)
      a[static_cast<size_t>(i * K + p)] =
          transA ? A[p * lda + i] : A[i * lda + p];
  for (int64_t p = 0; p < K; ++p)
    for (int64_t j = 0; j < N; ++j)
      b[static_cast<size_t>(p * N + j)] =
          transB ? B[j * ldb + p] : B[p * ldb + j];
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
  for (int64_t i = 0; i < M; i += 4) {
    int64_t rows = std::min<int64_t>(4, M - i);
    T *c[4];
    for (int64_t r = 0; r < 4; ++r)
      c[r] = C + (i + std::min(r, rows - 1)) * ldc;
    for (int64_t p = 0; p < K; ++p) {
      const T *bp = b.data() + p * N;
      T f[4];
      for (int64_t r = 0; r < 4; ++r)
        f[r] =
            r < rows ? alpha * a[static_cast<size_t>((i + r) * K + p)] : T(0);
      if (rows == 4) {
        for (int64_t j = 0; j < N; ++j) {
          T bj = bp[j];
          c[0][j] += f[0] * bj;
          c[1][j] += f[1] * bj;
          c[2][j] += f[2] * bj;
          c[3][j] += f[3] * bj;
        }
      } else {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < N; ++j)
            c[r][j] += f[r] * bp[j];
      }
    }
  }
}

#endif

template <typename T>
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, T alpha,
          const T *A, const T *B, T beta, T *C) {
  // Row-major: A is [M,K] (lda K) or, transposed, [K,M] (lda M); B is [K,N]
  // (ldb N) or [N,K] (ldb K); C is [M,N] (ldc N).
  gemmStrided<T>(transA, transB, M, N, K, alpha, A, transA ? M : K, B,
                 transB ? K : N, beta, C, N);
}

//===----------------------------------------------------------------------===//
// Norms
//===----------------------------------------------------------------------===//

template <typename T>
void rmsnormForward(const T *x, const T *w, T *y, T *rstd, int64_t rows,
                    int64_t cols, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c)
      ss += static_cast<double>(xr[c]) * static_cast<double>(xr[c]);
    double ms = cols > 0 ? ss / static_cast<double>(cols) : 0.0;
    double rs = 1.0 / std::sqrt(ms + static_cast<double>(eps));
    rstd[r] = static_cast<T>(rs);
    for (int64_t c = 0; c < cols; ++c)
      yr[c] = static_cast<T>(static_cast<double>(xr[c]) * rs *
                             static_cast<double>(w[c]));
  }
}

template <typename T>
void rmsnormBackward(const T *x, const T *w, const T *rstd, const T *dy, T *dx,
                     T *dw, int64_t rows, int64_t cols) {
  // y_c = x_c r w_c, r = (mean(x^2) + eps)^-1/2, dr/dx_c = -r^3 x_c / cols.
  // dx_c = r w_c dy_c - x_c r^3 / cols * sum_k(w_k dy_k x_k).
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols;
    const T *dyr = dy + r * cols;
    T *dxr = dx + r * cols;
    double rs = static_cast<double>(rstd[r]);
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      double g = static_cast<double>(dyr[c]) * static_cast<double>(w[c]);
      s += g * static_cast<double>(xr[c]);
      dw[c] += static_cast<T>(static_cast<double>(dyr[c]) *
                              static_cast<double>(xr[c]) * rs);
    }
    double coef = rs * rs * rs * s / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      double g = static_cast<double>(dyr[c]) * static_cast<double>(w[c]);
      dxr[c] = static_cast<T>(rs * g - coef * static_cast<double>(xr[c]));
    }
  }
}

template <typename T>
void layernormForward(const T *x, const T *w, const T *b, T *y, T *mean,
                      T *rstd, int64_t rows, int64_t cols, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c)
      s += static_cast<double>(xr[c]);
    double mu = cols > 0 ? s / static_cast<double>(cols) : 0.0;
    double vs = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      double dlt = static_cast<double>(xr[c]) - mu;
      vs += dlt * dlt;
    }
    double var = cols > 0 ? vs / static_cast<double>(cols) : 0.0;
    double rs = 1.0 / std::sqrt(var + static_cast<double>(eps));
    mean[r] = static_cast<T>(mu);
    rstd[r] = static_cast<T>(rs);
    for (int64_t c = 0; c < cols; ++c)
      yr[c] = static_cast<T>((static_cast<double>(xr[c]) - mu) * rs *
                                 static_cast<double>(w[c]) +
                             static_cast<double>(b[c]));
  }
}

template <typename T>
void layernormBackward(const T *x, const T *w, const T *mean, const T *rstd,
                       const T *dy, T *dx, T *dw, T *db, int64_t rows,
                       int64_t cols) {
  // xhat = (x - mu) r; g = dy w;
  // dx = r (g - mean(g) - xhat mean(g xhat)).
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols;
    const T *dyr = dy + r * cols;
    T *dxr = dx + r * cols;
    double mu = static_cast<double>(mean[r]);
    double rs = static_cast<double>(rstd[r]);
    double sg = 0.0, sgx = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      double xh = (static_cast<double>(xr[c]) - mu) * rs;
      double d = static_cast<double>(dyr[c]);
      double g = d * static_cast<double>(w[c]);
      sg += g;
      sgx += g * xh;
      dw[c] += static_cast<T>(d * xh);
      db[c] += dyr[c];
    }
    double mg = sg / static_cast<double>(cols);
    double mgx = sgx / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      double xh = (static_cast<double>(xr[c]) - mu) * rs;
      double g = static_cast<double>(dyr[c]) * static_cast<double>(w[c]);
      dxr[c] = static_cast<T>(rs * (g - mg - xh * mgx));
    }
  }
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

template <typename T> void geluForward(const T *x, T *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<T>(
        device::geluValue(static_cast<double>(x[i]), device::Gelu::Tanh));
  }
}

template <typename T>
void geluBackward(const T *x, const T *dy, T *dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double d = device::geluSlope(static_cast<double>(x[i]), device::Gelu::Tanh);
    dx[i] = static_cast<T>(static_cast<double>(dy[i]) * d);
  }
}

template <typename T>
void swigluForward(const T *gate, const T *up, T *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double g = static_cast<double>(gate[i]);
    double sig = 1.0 / (1.0 + std::exp(-g));
    y[i] = static_cast<T>(g * sig * static_cast<double>(up[i]));
  }
}

template <typename T>
void swigluBackward(const T *gate, const T *up, const T *dy, T *dgate, T *dup,
                    int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double g = static_cast<double>(gate[i]);
    double sig = 1.0 / (1.0 + std::exp(-g));
    double silu = g * sig;
    double dsilu = sig * (1.0 + g * (1.0 - sig));
    double d = static_cast<double>(dy[i]);
    dgate[i] = static_cast<T>(d * static_cast<double>(up[i]) * dsilu);
    dup[i] = static_cast<T>(d * silu);
  }
}

//===----------------------------------------------------------------------===//
// RoPE
//===----------------------------------------------------------------------===//

template <typename T>
void rope(T *x, const int64_t *positions, int64_t tokens, int64_t heads,
          int64_t dim, bool inverse, const device::RopeSpec &spec) {
  int64_t half = dim / 2;
  if (half == 0)
    return;
  std::vector<double> invFreq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    invFreq[static_cast<size_t>(i)] = spec.invFreq(i, dim);
  std::vector<double> cosv(static_cast<size_t>(half));
  std::vector<double> sinv(static_cast<size_t>(half));
  double sign = inverse ? -1.0 : 1.0;
  for (int64_t t = 0; t < tokens; ++t) {
    double pos = static_cast<double>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      double a = pos * invFreq[static_cast<size_t>(i)];
      cosv[static_cast<size_t>(i)] = std::cos(a);
      sinv[static_cast<size_t>(i)] = sign * std::sin(a);
    }
    for (int64_t h = 0; h < heads; ++h) {
      T *xh = x + (t * heads + h) * dim;
      for (int64_t i = 0; i < half; ++i) {
        double c = cosv[static_cast<size_t>(i)];
        double s = sinv[static_cast<size_t>(i)];
        double x1 = static_cast<double>(xh[i]);
        double x2 = static_cast<double>(xh[i + half]);
        xh[i] = static_cast<T>(x1 * c - x2 * s);
        xh[i + half] = static_cast<T>(x2 * c + x1 * s);
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

template <typename T>
void attentionForward(const T *q, const T *k, const T *v, T *o, T *lse,
                      const int64_t *qpos, const int64_t *qseg,
                      const int64_t *kpos, const int64_t *kseg, int64_t Tq,
                      int64_t Tk, int64_t heads, int64_t d, bool causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int64_t stride = heads * d; // between tokens
  std::vector<int64_t> keys;
  keys.reserve(static_cast<size_t>(Tk));
  std::vector<double> scores(static_cast<size_t>(Tk));
  std::vector<double> acc(static_cast<size_t>(d));
  for (int64_t i = 0; i < Tq; ++i) {
    allowedKeys(qpos, qseg, kpos, kseg, i, Tk, causal, keys);
    for (int64_t h = 0; h < heads; ++h) {
      const T *qi = q + i * stride + h * d;
      T *oi = o + i * stride + h * d;
      if (keys.empty()) {
        std::fill(oi, oi + d, T(0));
        lse[h * Tq + i] = -std::numeric_limits<T>::infinity();
        continue;
      }
      double mx = -std::numeric_limits<double>::infinity();
      for (size_t n = 0; n < keys.size(); ++n) {
        double s = scale * dot(qi, k + keys[n] * stride + h * d, d);
        scores[n] = s;
        mx = std::max(mx, s);
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0.0;
      for (size_t n = 0; n < keys.size(); ++n) {
        double p = std::exp(scores[n] - mx);
        sum += p;
        const T *vj = v + keys[n] * stride + h * d;
        for (int64_t c = 0; c < d; ++c)
          acc[static_cast<size_t>(c)] += p * static_cast<double>(vj[c]);
      }
      double inv = 1.0 / sum;
      for (int64_t c = 0; c < d; ++c)
        oi[c] = static_cast<T>(acc[static_cast<size_t>(c)] * inv);
      lse[h * Tq + i] = static_cast<T>(mx + std::log(sum));
    }
  }
}

template <typename T>
void attentionBackward(const T *q, const T *k, const T *v, const T *o,
                       const T *lse, const T *dout, T *dq, T *dk, T *dv,
                       const int64_t *qpos, const int64_t *qseg,
                       const int64_t *kpos, const int64_t *kseg, int64_t Tq,
                       int64_t Tk, int64_t heads, int64_t d, bool causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int64_t stride = heads * d;
  std::fill(dq, dq + Tq * stride, T(0));
  std::fill(dk, dk + Tk * stride, T(0));
  std::fill(dv, dv + Tk * stride, T(0));
  std::vector<int64_t> keys;
  keys.reserve(static_cast<size_t>(Tk));
  std::vector<double> dqAcc(static_cast<size_t>(d));
  for (int64_t i = 0; i < Tq; ++i) {
    allowedKeys(qpos, qseg, kpos, kseg, i, Tk, causal, keys);
    if (keys.empty())
      continue; // o = 0 does not depend on q, k or v.
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t qoff = i * stride + h * d;
      const T *qi = q + qoff;
      const T *doi = dout + qoff;
      const double l = static_cast<double>(lse[h * Tq + i]);
      const double D = dot(doi, o + qoff, d);
      std::fill(dqAcc.begin(), dqAcc.end(), 0.0);
      for (int64_t j : keys) {
        const int64_t koff = j * stride + h * d;
        const T *kj = k + koff;
        const T *vj = v + koff;
        T *dkj = dk + koff;
        T *dvj = dv + koff;
        double p = std::exp(scale * dot(qi, kj, d) - l);
        double dp = dot(doi, vj, d);
        double ds = scale * p * (dp - D);
        for (int64_t c = 0; c < d; ++c) {
          dvj[c] += static_cast<T>(p * static_cast<double>(doi[c]));
          dqAcc[static_cast<size_t>(c)] += ds * static_cast<double>(kj[c]);
          dkj[c] += static_cast<T>(ds * static_cast<double>(qi[c]));
        }
      }
      T *dqi = dq + qoff;
      for (int64_t c = 0; c < d; ++c)
        dqi[c] = static_cast<T>(dqAcc[static_cast<size_t>(c)]);
    }
  }
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

template <typename T>
void embeddingForward(const int64_t *ids, int64_t n, const T *table,
                      int64_t vocabBegin, int64_t vocabEnd, int64_t hidden,
                      T *out) {
  for (int64_t r = 0; r < n; ++r) {
    T *outr = out + r * hidden;
    int64_t id = ids[r];
    if (id >= vocabBegin && id < vocabEnd) {
      const T *row = table + (id - vocabBegin) * hidden;
      std::copy(row, row + hidden, outr);
    } else {
      std::fill(outr, outr + hidden, T(0));
    }
  }
}

template <typename T>
void embeddingBackward(const int64_t *ids, int64_t n, const T *dout,
                       int64_t vocabBegin, int64_t vocabEnd, int64_t hidden,
                       T *dtable) {
  for (int64_t r = 0; r < n; ++r) {
    int64_t id = ids[r];
    if (id < vocabBegin || id >= vocabEnd)
      continue;
    const T *dr = dout + r * hidden;
    T *row = dtable + (id - vocabBegin) * hidden;
    for (int64_t c = 0; c < hidden; ++c)
      row[c] += dr[c];
  }
}

//===----------------------------------------------------------------------===//
// Vocab-parallel cross-entropy
//===----------------------------------------------------------------------===//

template <typename T>
void crossEntropyRowMax(const T *logits, int64_t n, int64_t vocabLocal,
                        T *rowMax) {
  for (int64_t i = 0; i < n; ++i) {
    const T *row = logits + i * vocabLocal;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < vocabLocal; ++j)
      mx = std::max(mx, row[j]);
    rowMax[i] = mx;
  }
}

template <typename T>
void crossEntropySums(const T *logits, const int64_t *targets, int64_t n,
                      int64_t vocabLocal, int64_t vocabBegin,
                      const T *globalMax, T *sumExp, T *targetLogit) {
  for (int64_t i = 0; i < n; ++i) {
    const T *row = logits + i * vocabLocal;
    double mx = static_cast<double>(globalMax[i]);
    double s = 0.0;
    for (int64_t j = 0; j < vocabLocal; ++j)
      s += std::exp(static_cast<double>(row[j]) - mx);
    sumExp[i] = static_cast<T>(s);
    int64_t t = targets[i] - vocabBegin;
    targetLogit[i] = (t >= 0 && t < vocabLocal) ? row[t] : T(0);
  }
}

template <typename T>
void crossEntropyLoss(const T *globalMax, const T *globalSumExp,
                      const T *globalTargetLogit, int64_t n, T *loss) {
  for (int64_t i = 0; i < n; ++i)
    loss[i] = static_cast<T>(std::log(static_cast<double>(globalSumExp[i])) +
                             static_cast<double>(globalMax[i]) -
                             static_cast<double>(globalTargetLogit[i]));
}

template <typename T>
void crossEntropyBackward(const T *logits, const int64_t *targets, int64_t n,
                          int64_t vocabLocal, int64_t vocabBegin,
                          const T *globalMax, const T *globalSumExp,
                          const T *scale, T *dlogits) {
  for (int64_t i = 0; i < n; ++i) {
    const T *row = logits + i * vocabLocal;
    T *drow = dlogits + i * vocabLocal;
    double sc = static_cast<double>(scale[i]);
    if (sc == 0.0) { // masked row: no gradient
      std::fill(drow, drow + vocabLocal, T(0));
      continue;
    }
    double mx = static_cast<double>(globalMax[i]);
    double f = sc / static_cast<double>(globalSumExp[i]);
    for (int64_t j = 0; j < vocabLocal; ++j)
      drow[j] = static_cast<T>(f * std::exp(static_cast<double>(row[j]) - mx));
    int64_t t = targets[i] - vocabBegin;
    if (t >= 0 && t < vocabLocal)
      drow[t] = static_cast<T>(static_cast<double>(drow[t]) - sc);
  }
}

//===----------------------------------------------------------------------===//
// Optimizer and vector helpers
//===----------------------------------------------------------------------===//

template <typename T>
void adamw(T *param, const T *grad, T *m, T *v, int64_t n, double lr,
           double beta1, double beta2, double eps, double weightDecay,
           int64_t step, double gradScale) {
  const double s = static_cast<double>(step);
  const double bc1 = 1.0 - std::pow(beta1, s);
  const double bc2 = 1.0 - std::pow(beta2, s);
  for (int64_t i = 0; i < n; ++i) {
    double g = static_cast<double>(grad[i]) * gradScale;
    double mi = beta1 * static_cast<double>(m[i]) + (1.0 - beta1) * g;
    double vi = beta2 * static_cast<double>(v[i]) + (1.0 - beta2) * g * g;
    double p = static_cast<double>(param[i]);
    double mhat = mi / bc1;
    double vhat = vi / bc2;
    p -= lr * (mhat / (std::sqrt(vhat) + eps) + weightDecay * p);
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    param[i] = static_cast<T>(p);
  }
}

template <typename T> double sumSquares(const T *x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i)
    s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

template <typename T> void axpy(int64_t n, T alpha, const T *x, T *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] += alpha * x[i];
}

//===----------------------------------------------------------------------===//
// Explicit instantiations
//===----------------------------------------------------------------------===//

#define MIMO_KERNELS_INSTANTIATE(T)                                            \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T *,   \
                        const T *, T, T *);                                    \
  template void gemmStrided<T>(bool, bool, int64_t, int64_t, int64_t, T,       \
                               const T *, int64_t, const T *, int64_t, T, T *, \
                               int64_t);                                       \
  template void rmsnormForward<T>(const T *, const T *, T *, T *, int64_t,     \
                                  int64_t, T);                                 \
  template void rmsnormBackward<T>(const T *, const T *, const T *, const T *, \
                                   T *, T *, int64_t, int64_t);                \
  template void layernormForward<T>(const T *, const T *, const T *, T *, T *, \
                                    T *, int64_t, int64_t, T);                 \
  template void layernormBackward<T>(const T *, const T *, const T *,          \
                                     const T *, const T *, T *, T *, T *,      \
                                     int64_t, int64_t);                        \
  template void geluForward<T>(const T *, T *, int64_t);                       \
  template void geluBackward<T>(const T *, const T *, T *, int64_t);           \
  template void swigluForward<T>(const T *, const T *, T *, int64_t);          \
  template void swigluBackward<T>(const T *, const T *, const T *, T *, T *,   \
                                  int64_t);                                    \
  template void rope<T>(T *, const int64_t *, int64_t, int64_t, int64_t, bool, \
                        const device::RopeSpec &);                             \
  template void attentionForward<T>(const T *, const T *, const T *, T *, T *, \
                                    const int64_t *, const int64_t *,          \
                                    const int64_t *, const int64_t *, int64_t, \
                                    int64_t, int64_t, int64_t, bool);          \
  template void attentionBackward<T>(                                          \
      const T *, const T *, const T *, const T *, const T *, const T *, T *,   \
      T *, T *, const int64_t *, const int64_t *, const int64_t *,             \
      const int64_t *, int64_t, int64_t, int64_t, int64_t, bool);              \
  template void embeddingForward<T>(const int64_t *, int64_t, const T *,       \
                                    int64_t, int64_t, int64_t, T *);           \
  template void embeddingBackward<T>(const int64_t *, int64_t, const T *,      \
                                     int64_t, int64_t, int64_t, T *);          \
  template void crossEntropyRowMax<T>(const T *, int64_t, int64_t, T *);       \
  template void crossEntropySums<T>(const T *, const int64_t *, int64_t,       \
                                    int64_t, int64_t, const T *, T *, T *);    \
  template void crossEntropyLoss<T>(const T *, const T *, const T *, int64_t,  \
                                    T *);                                      \
  template void crossEntropyBackward<T>(const T *, const int64_t *, int64_t,   \
                                        int64_t, int64_t, const T *,           \
                                        const T *, const T *, T *);            \
  template void adamw<T>(T *, const T *, T *, T *, int64_t, double, double,    \
                         double, double, double, int64_t, double);             \
  template double sumSquares<T>(const T *, int64_t);                           \
  template void axpy<T>(int64_t, T, const T *, T *);

MIMO_KERNELS_INSTANTIATE(float)
MIMO_KERNELS_INSTANTIATE(double)

#undef MIMO_KERNELS_INSTANTIATE

} // namespace mimo::kernels
