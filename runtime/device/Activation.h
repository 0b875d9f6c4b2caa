//===- Activation.h - The GELU variants of the encoders ---------*- C++ -*-===//
//
// docs/model.md: an encoder's MLP activation (model.json `activation`) and
// its projector's (`projector_activation`): GELU's tanh form (the default),
// the exact erf form, or QuickGELU (OpenAI CLIP's x·σ(1.702x)). One
// formula for the CPU, the CUDA bodies and the tests, in double.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_ACTIVATION_H
#define MIMO_RUNTIME_DEVICE_ACTIVATION_H

#include <cmath>

#if defined(__CUDACC__)
#define MIMO_GELU_HD __host__ __device__
#else
#define MIMO_GELU_HD
#endif

namespace mimo::device {

enum class Gelu : int { Tanh = 0, Exact = 1, Quick = 2 };

inline constexpr double kGeluTanhC = 0.7978845608028654; // sqrt(2 / pi)
inline constexpr double kGeluTanhA = 0.044715;
inline constexpr double kQuickGelu = 1.702;

/// The tanh form's (1 + tanh(u)) / 2 as sigmoid(2u), u = c(x + a x^3):
/// 1 + tanh(u) itself cancels where tanh(u) nears -1 (all of a double's
/// bits by x = -9, half of a float's by x = -4). 1 - tanh(u)^2 = 4s(1 - s).
MIMO_GELU_HD inline double geluTanhSigmoid(double x) {
  double u = kGeluTanhC * (x + kGeluTanhA * x * x * x);
  return 1.0 / (1.0 + ::exp(-2.0 * u));
}

/// gelu(x).
MIMO_GELU_HD inline double geluValue(double x, Gelu kind) {
  if (kind == Gelu::Exact)
    return 0.5 * x * (1.0 + ::erf(x * 0.7071067811865476));
  if (kind == Gelu::Quick)
    return x / (1.0 + ::exp(-kQuickGelu * x));
  return x * geluTanhSigmoid(x);
}

/// d gelu(x) / dx.
MIMO_GELU_HD inline double geluSlope(double x, Gelu kind) {
  if (kind == Gelu::Exact)
    return 0.5 * (1.0 + ::erf(x * 0.7071067811865476)) +
           x * 0.3989422804014327 * ::exp(-0.5 * x * x);
  if (kind == Gelu::Quick) {
    double s = 1.0 / (1.0 + ::exp(-kQuickGelu * x));
    return s + kQuickGelu * x * s * (1.0 - s);
  }
  double s = geluTanhSigmoid(x);
  double du = kGeluTanhC * (1.0 + 3.0 * kGeluTanhA * x * x);
  return s + 2.0 * x * s * (1.0 - s) * du;
}

} // namespace mimo::device

#endif // MIMO_RUNTIME_DEVICE_ACTIVATION_H
