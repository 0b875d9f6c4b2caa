//===- FastKernels.h - The CPU device's vectorised float kernels -*- C++
//-*-===//
//
// The ops whose reference (Kernels.h) spends a step's time in scalar double
// math, redone in float with loops the compiler vectorises (fastExp, lane
// sums of a fixed shape, sqrt without errno): cross-entropy over the
// vocabulary, SwiGLU and GeLU, AdamW, the softmax rows of the tiled
// attention, the gradient norm. Each is compiled for AVX-512, AVX2 and
// baseline x86-64, chosen at run time (the binary stays portable); no
// contraction into FMA, and every sum in a fixed order of lanes, so every
// path gives the same bits, run after run. Same semantics as the
// reference, within float rounding of it (tests/unit/FastKernelsTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CPU_FASTKERNELS_H
#define MIMO_RUNTIME_DEVICE_CPU_FASTKERNELS_H

#include <cstdint>

namespace mimo::kernels::fast {

/// Threads of this thread's calls (one rank's kernels; OpenMP, where the
/// build has it). Results do not depend on it: every output element is
/// computed by one thread, in a fixed order.
void setThreads(int threads);
int threads();

void crossEntropySums(const float *logits, const int64_t *targets, int64_t n,
                      int64_t vocabLocal, int64_t vocabBegin,
                      const float *globalMax, float *sumExp,
                      float *targetLogit);
void crossEntropyBackward(const float *logits, const int64_t *targets,
                          int64_t n, int64_t vocabLocal, int64_t vocabBegin,
                          const float *globalMax, const float *globalSumExp,
                          const float *scale, float *dlogits);
void swigluForward(const float *gate, const float *up, float *y, int64_t n);
void swigluBackward(const float *gate, const float *up, const float *dy,
                    float *dgate, float *dup, int64_t n);
void geluForward(const float *x, float *y, int64_t n);
void geluBackward(const float *x, const float *dy, float *dx, int64_t n);
/// out[i] = e^(in[i] - shift), i < n (in and out may be the same).
void expShifted(const float *in, float shift, float *out, int64_t n);
/// Sum of x[0, n) in a fixed order (eight lanes, then the lanes in order).
float sum(const float *x, int64_t n);
/// Sum of squares in double, in a fixed order (Kernels.h sumSquares).
double sumSquares(const float *x, int64_t n);
/// AdamW (Kernels.h adamw) in float; bc1, bc2: the bias corrections.
void adamw(float *param, const float *grad, float *m, float *v, int64_t n,
           float lr, float beta1, float beta2, float eps, float weightDecay,
           float bc1, float bc2, float gradScale);

} // namespace mimo::kernels::fast

#endif // MIMO_RUNTIME_DEVICE_CPU_FASTKERNELS_H
