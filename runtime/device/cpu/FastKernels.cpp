//===- FastKernels.cpp - The CPU device's vectorised float kernels --------===//
//
// Compiled with -fno-math-errno (sqrt vectorises); no other math flag, so
// the compiler keeps every operation's order as written.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/FastKernels.h"

#include "runtime/device/cpu/FastMath.h"

#include <cmath>

// Run-time dispatch to the widest vector unit (GCC's function clones). Not
// under ThreadSanitizer: the clones' resolvers run while the dynamic loader
// relocates, before TSan's runtime exists, and would crash at startup.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) &&         \
    !defined(__SANITIZE_THREAD__)
#define MIMO_SIMD_CLONES                                                       \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MIMO_SIMD_CLONES
#endif

namespace mimo::kernels::fast {

namespace {

thread_local int kernelThreads = 1;

/// Loops shorter than this stay on one thread (a team costs microseconds).
constexpr int64_t kParallelMinimum = 1 << 15;

constexpr int64_t kLanes = 8;

/// Sum of x[0, n) in a fixed order: eight interleaved partial sums (which
/// the compiler keeps in SIMD registers), then the lanes in order.
inline float laneSum(const float *x, int64_t n) {
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l)
      lane[l] += x[i + l];
  for (int64_t l = 0; i < n; ++i, ++l)
    lane[l] += x[i];
  float total = 0.0f;
  for (int64_t l = 0; l < kLanes; ++l)
    total += lane[l];
  return total;
}

inline float sigmoid(float x) { return 1.0f / (1.0f + fastExp(-x)); }

constexpr float kGeluC = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

/// (1 + tanh(u)) / 2 = sigmoid(2u) at GELU's u: gelu(v) = v * this, with
/// no cancellation where tanh(u) nears -1 (1 + tanh(u) in float loses all
/// but a few bits there: 2e-3 off at v = -4). 1 - tanh(u)^2 = 4s(1 - s).
inline float geluSigmoid(float v) {
  return sigmoid(2.0f * kGeluC * (v + kGeluA * v * v * v));
}

} // namespace

void setThreads(int threads) { kernelThreads = threads < 1 ? 1 : threads; }
int threads() { return kernelThreads; }

MIMO_SIMD_CLONES
void expShifted(const float *in, float shift, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = fastExp(in[i] - shift);
}

MIMO_SIMD_CLONES
float sum(const float *x, int64_t n) { return laneSum(x, n); }

MIMO_SIMD_CLONES
double sumSquares(const float *x, int64_t n) {
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      double v = static_cast<double>(x[i + l]);
      lane[l] += v * v;
    }
  for (int64_t l = 0; i < n; ++i, ++l) {
    double v = static_cast<double>(x[i]);
    lane[l] += v * v;
  }
  double total = 0.0;
  for (int64_t l = 0; l < kLanes; ++l)
    total += lane[l];
  return total;
}

MIMO_SIMD_CLONES
void crossEntropySums(const float *logits, const int64_t *targets, int64_t n,
                      int64_t vocabLocal, int64_t vocabBegin,
                      const float *globalMax, float *sumExp,
                      float *targetLogit) {
  [[maybe_unused]] const int team = kernelThreads;
#pragma omp parallel for num_threads(team)                                     \
    schedule(static) if (team > 1 && n * vocabLocal >= kParallelMinimum)
  for (int64_t i = 0; i < n; ++i) {
    float exps[1024];
    const float *row = logits + i * vocabLocal;
    const float mx = globalMax[i];
    float total = 0.0f;
    for (int64_t j = 0; j < vocabLocal; j += 1024) {
      int64_t len = vocabLocal - j < 1024 ? vocabLocal - j : 1024;
      for (int64_t c = 0; c < len; ++c)
        exps[c] = fastExp(row[j + c] - mx);
      total += laneSum(exps, len);
    }
    sumExp[i] = total;
    int64_t t = targets[i] - vocabBegin;
    targetLogit[i] = (t >= 0 && t < vocabLocal) ? row[t] : 0.0f;
  }
}

MIMO_SIMD_CLONES
void crossEntropyBackward(const float *logits, const int64_t *targets,
                          int64_t n, int64_t vocabLocal, int64_t vocabBegin,
                          const float *globalMax, const float *globalSumExp,
                          const float *scale, float *dlogits) {
  [[maybe_unused]] const int team = kernelThreads;
#pragma omp parallel for num_threads(team)                                     \
    schedule(static) if (team > 1 && n * vocabLocal >= kParallelMinimum)
  for (int64_t i = 0; i < n; ++i) {
    const float *row = logits + i * vocabLocal;
    float *drow = dlogits + i * vocabLocal;
    const float sc = scale[i];
    if (sc == 0.0f) { // masked row: no gradient
      for (int64_t j = 0; j < vocabLocal; ++j)
        drow[j] = 0.0f;
      continue;
    }
    const float f = sc / globalSumExp[i];
    const float mx = globalMax[i];
    for (int64_t j = 0; j < vocabLocal; ++j)
      drow[j] = f * fastExp(row[j] - mx);
    int64_t t = targets[i] - vocabBegin;
    if (t >= 0 && t < vocabLocal)
      drow[t] -= sc;
  }
}

MIMO_SIMD_CLONES
void swigluForward(const float *gate, const float *up, float *y, int64_t n) {
  [[maybe_unused]] const int team = kernelThreads;
#pragma omp parallel for num_threads(team)                                     \
    schedule(static) if (team > 1 && n >= kParallelMinimum)
  for (int64_t i = 0; i < n; ++i)
    y[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

MIMO_SIMD_CLONES
void swigluBackward(const float *gate, const float *up, const float *dy,
                    float *dgate, float *dup, int64_t n) {
  [[maybe_unused]] const int team = kernelThreads;
#pragma omp parallel for num_threads(team)                                     \
    schedule(static) if (team > 1 && n >= kParallelMinimum)
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i], sig = sigmoid(g);
    float silu = g * sig;
    float dsilu = sig * (1.0f + g * (1.0f - sig));
    dgate[i] = dy[i] * up[i] * dsilu;
    dup[i] = dy[i] * silu;
  }
}

MIMO_SIMD_CLONES
void geluForward(const float *x, float *y, int64_t n) {
  [[maybe_unused]] const int team = kernelThreads;
#pragma omp parallel for num_threads(team)                                     \
    schedule(static) if (team > 1 && n >= kParallelMinimum)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    y[i] = v * geluSigmoid(v);
  }
}

MIMO_SIMD_CLONES
void geluBackward(const float *x, const float *dy, float *dx, int64_t n) {
  [[maybe_unused]] const int team = kernelThreads;
#pragma omp parallel for num_threads(team)                                     \
    schedule(static) if (team > 1 && n >= kParallelMinimum)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float s = geluSigmoid(v);
    float du = kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    dx[i] = dy[i] * (s + 2.0f * v * s * (1.0f - s) * du);
  }
}

MIMO_SIMD_CLONES
void adamw(float *param, const float *grad, float *m, float *v, int64_t n,
           float lr, float beta1, float beta2, float eps, float weightDecay,
           float bc1, float bc2, float gradScale) {
  const float inv1 = 1.0f / bc1, inv2 = 1.0f / bc2;
  [[maybe_unused]] const int team = kernelThreads;
#pragma omp parallel for num_threads(team)                                     \
    schedule(static) if (team > 1 && n >= kParallelMinimum)
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] * gradScale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    float p = param[i];
    p -= lr * (mi * inv1 / (std::sqrt(vi * inv2) + eps) + weightDecay * p);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
  }
}

} // namespace mimo::kernels::fast
