//===- RopeSpec.h - The frequencies of the rotary embeddings ---*- C++ -*-===//
//
// docs/model.md: pair i of a head of d values turns by position x
// invFreq(i), invFreq(i) = theta^(-2i/d) (model.json `rope_theta`, 10000
// by default), rescaled as Llama 3.1 does when `rope_scaling` is given.
// One formula for the CPU kernels, the CUDA bodies and the tests.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_ROPESPEC_H
#define MIMO_RUNTIME_DEVICE_ROPESPEC_H

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MIMO_ROPE_HD __host__ __device__
#else
#define MIMO_ROPE_HD
#endif

namespace mimo::device {

struct RopeSpec {
  double theta = 10000.0;
  /// Llama 3.1's rescaling ("llama3") when factor > 0: wavelengths 2π /
  /// invFreq shorter than originalMax / highFreqFactor keep their
  /// frequency, those longer than originalMax / lowFreqFactor are divided
  /// by factor, and those between blend the two, smoothly in originalMax /
  /// wavelength.
  double factor = 0, lowFreqFactor = 1, highFreqFactor = 4, originalMax = 8192;

  MIMO_ROPE_HD double invFreq(int64_t i, int64_t dim) const {
    double inv =
        ::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
    if (factor <= 0)
      return inv;
    const double wavelength = 2.0 * 3.141592653589793 / inv;
    if (wavelength < originalMax / highFreqFactor)
      return inv;
    if (wavelength > originalMax / lowFreqFactor)
      return inv / factor;
    const double smooth = (originalMax / wavelength - lowFreqFactor) /
                          (highFreqFactor - lowFreqFactor);
    return (1.0 - smooth) * inv / factor + smooth * inv;
  }
};

} // namespace mimo::device

#endif // MIMO_RUNTIME_DEVICE_ROPESPEC_H
