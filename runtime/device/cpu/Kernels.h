//===- Kernels.h - Reference CPU kernels, forward and backward -*- C++ -*-===//
//
// The math of every layer of the model (docs/model.md), as plain loops and BLAS
// calls over contiguous row-major buffers. Templated on the scalar type:
// the runtime uses float; the tests instantiate double to check every
// backward against a finite difference. Backward functions that produce a
// parameter gradient ACCUMULATE into it (+=); input gradients are WRITTEN.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CPU_KERNELS_H
#define MIMO_RUNTIME_DEVICE_CPU_KERNELS_H

#include "runtime/device/RopeSpec.h"

#include <cstdint>

namespace mimo::kernels {

/// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major, op = transpose when
/// the flag is set (A is [M,K] or [K,M], B is [K,N] or [N,K]). C is not read
/// when beta is 0. OpenBLAS, or a plain loop where mimo was built without a
/// BLAS (machines that have only the CUDA toolkit).
template <typename T>
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, T alpha,
          const T *A, const T *B, T beta, T *C);

/// The same with explicit leading dimensions (row strides) of A, B and C,
/// for operands that are column slices of wider rows (one head of
/// [tokens, heads * dim]).
template <typename T>
void gemmStrided(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 T alpha, const T *A, int64_t lda, const T *B, int64_t ldb,
                 T beta, T *C, int64_t ldc);

/// RMSNorm over the last dim: y = x / sqrt(mean(x^2) + eps) * w.
/// rstd[rows] is saved for the backward.
template <typename T>
void rmsnormForward(const T *x, const T *w, T *y, T *rstd, int64_t rows,
                    int64_t cols, T eps);
template <typename T>
void rmsnormBackward(const T *x, const T *w, const T *rstd, const T *dy, T *dx,
                     T *dw, int64_t rows, int64_t cols);

/// LayerNorm over the last dim with weight and bias; mean/rstd saved.
template <typename T>
void layernormForward(const T *x, const T *w, const T *b, T *y, T *mean,
                      T *rstd, int64_t rows, int64_t cols, T eps);
template <typename T>
void layernormBackward(const T *x, const T *w, const T *mean, const T *rstd,
                       const T *dy, T *dx, T *dw, T *db, int64_t rows,
                       int64_t cols);

/// GeLU (tanh approximation), elementwise.
template <typename T> void geluForward(const T *x, T *y, int64_t n);
template <typename T>
void geluBackward(const T *x, const T *dy, T *dx, int64_t n);

/// SwiGLU: y = silu(gate) * up, elementwise.
template <typename T>
void swigluForward(const T *gate, const T *up, T *y, int64_t n);
template <typename T>
void swigluBackward(const T *gate, const T *up, const T *dy, T *dgate, T *dup,
                    int64_t n);

/// RoPE (rotate-half convention) in place on x[tokens, heads, dim] with the
/// position of each token; the frequencies of `spec` (device/RopeSpec.h).
/// inverse = true applies the transposed rotation (the backward).
template <typename T>
void rope(T *x, const int64_t *positions, int64_t tokens, int64_t heads,
          int64_t dim, bool inverse, const device::RopeSpec &spec = {});

/// Masked softmax attention. q[Tq,heads,d], k/v[Tk,heads,d], o[Tq,heads,d].
/// Query i may attend key j iff qseg[i] == kseg[j] and (!causal or
/// kpos[j] <= qpos[i]). Scale 1/sqrt(d). lse[heads*Tq] (log-sum-exp of the
/// scaled scores per head and query, head-major: lse[h*Tq + i]) is saved for
/// the backward; a query with no allowed key gets o = 0 and lse = -inf.
template <typename T>
void attentionForward(const T *q, const T *k, const T *v, T *o, T *lse,
                      const int64_t *qpos, const int64_t *qseg,
                      const int64_t *kpos, const int64_t *kseg, int64_t Tq,
                      int64_t Tk, int64_t heads, int64_t d, bool causal);
/// Writes dq, dk, dv (dk/dv cover all Tk keys).
template <typename T>
void attentionBackward(const T *q, const T *k, const T *v, const T *o,
                       const T *lse, const T *dout, T *dq, T *dk, T *dv,
                       const int64_t *qpos, const int64_t *qseg,
                       const int64_t *kpos, const int64_t *kseg, int64_t Tq,
                       int64_t Tk, int64_t heads, int64_t d, bool causal);

/// Embedding rows of table[vocabEnd-vocabBegin, hidden] for ids in
/// [vocabBegin, vocabEnd); other rows of out are zero. Backward accumulates
/// into dtable.
template <typename T>
void embeddingForward(const int64_t *ids, int64_t n, const T *table,
                      int64_t vocabBegin, int64_t vocabEnd, int64_t hidden,
                      T *out);
template <typename T>
void embeddingBackward(const int64_t *ids, int64_t n, const T *dout,
                       int64_t vocabBegin, int64_t vocabEnd, int64_t hidden,
                       T *dtable);

/// Vocab-parallel cross-entropy in three local steps around the caller's
/// all-reduces over the TP group (logits[n, V_local] hold vocabulary ids
/// [vocabBegin, vocabBegin + V_local)):
///  1. rowMax[n] = max of each row (all-reduce max),
///  2. sumExp[n] = sum exp(logit - globalMax); targetLogit[n] = the target's
///     logit if the target is local, else 0 (both all-reduce sum),
///  3. loss_i = log(sumExp_i) + max_i - targetLogit_i (crossEntropyLoss),
///     dlogits = scale_i * (softmax - onehot) (crossEntropyBackward).
template <typename T>
void crossEntropyRowMax(const T *logits, int64_t n, int64_t vocabLocal,
                        T *rowMax);
template <typename T>
void crossEntropySums(const T *logits, const int64_t *targets, int64_t n,
                      int64_t vocabLocal, int64_t vocabBegin,
                      const T *globalMax, T *sumExp, T *targetLogit);
template <typename T>
void crossEntropyLoss(const T *globalMax, const T *globalSumExp,
                      const T *globalTargetLogit, int64_t n, T *loss);
template <typename T>
void crossEntropyBackward(const T *logits, const int64_t *targets, int64_t n,
                          int64_t vocabLocal, int64_t vocabBegin,
                          const T *globalMax, const T *globalSumExp,
                          const T *scale, T *dlogits);

/// One AdamW step (decoupled weight decay, bias correction; step >= 1) with
/// g = grad * gradScale (the clipping coefficient):
/// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p).
template <typename T>
void adamw(T *param, const T *grad, T *m, T *v, int64_t n, double lr,
           double beta1, double beta2, double eps, double weightDecay,
           int64_t step, double gradScale = 1.0);

/// Sum of squares in double.
template <typename T> double sumSquares(const T *x, int64_t n);

/// y += alpha * x.
template <typename T> void axpy(int64_t n, T alpha, const T *x, T *y);

} // namespace mimo::kernels

#endif // MIMO_RUNTIME_DEVICE_CPU_KERNELS_H
