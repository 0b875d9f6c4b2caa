//===- FastMath.h - Vectorisable float math for the CPU device -*- C++ -*-===//
//
// Branch-free float functions that the compiler vectorises inside plain
// loops (SSE2 is all a portable x86-64 build may assume: no -march=native,
// no -ffast-math), so softmax and cross-entropy run on SIMD lanes instead
// of calling the scalar double libm per element. Deterministic: the same
// input gives the same bits on every run.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CPU_FASTMATH_H
#define MIMO_RUNTIME_DEVICE_CPU_FASTMATH_H

#include <cstdint>
#include <cstring>

namespace mimo::kernels {

/// e^x for float x, within 2 ulp of expf over [-87, 88]; smaller x give
/// e^-87 (about 1.6e-38; callers zero masked entries themselves), larger
/// x give e^88, NaN gives NaN. Cody-Waite range reduction and the Cephes
/// polynomial.
inline float fastExp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // n = round(x / ln 2), by the float rounding of a shifted sum.
  const float shifter = 12582912.0f; // 1.5 * 2^23
  float n = x * 1.44269504088896341f + shifter;
  n -= shifter;
  float r = x - n * 0.693359375f; // ln 2, high part (exact product)
  // A NaN x: r (so the result) is NaN already; n must still be a number
  // in [-126, 127] for the exponent bits below to be defined.
  n = n == n ? n : 0.0f;
  r = r - n * -2.12194440e-4f; // ln 2, low part
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23; // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

} // namespace mimo::kernels

#endif // MIMO_RUNTIME_DEVICE_CPU_FASTMATH_H
