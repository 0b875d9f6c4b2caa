//===- DType.h - Element types of device tensors ----------------*- C++ -*-===//
//
// What a tensor's bytes hold. fp32 is what the model computes in today;
// f64 carries the step's loss and gradient-norm accumulators; i64 the
// index arrays (positions, segments, ids, targets, row maps) that kernels
// read on the device; bf16 (as uint16_t bits) the activations precision
// "bf16" keeps between a forward and its backward (docs/gpu.md).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_DTYPE_H
#define MIMO_RUNTIME_DEVICE_DTYPE_H

#include <cstdint>

namespace mimo::device {

enum class DType : uint8_t { F32, F64, I64, BF16 };

constexpr int64_t sizeOf(DType type) {
  switch (type) {
  case DType::F32:
    return 4;
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::BF16:
    return 2;
  }
  return 0;
}

/// The dtype of a buffer of these elements, for a call that takes both
/// (Device's ops by element type).
constexpr DType dtypeOf(const float *) { return DType::F32; }
constexpr DType dtypeOf(const uint16_t *) { return DType::BF16; }

constexpr const char *nameOf(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::F64:
    return "f64";
  case DType::I64:
    return "i64";
  case DType::BF16:
    return "bf16";
  }
  return "?";
}

/// The DType of a C++ element type.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> {
  static constexpr DType value = DType::F32;
};
template <> struct DTypeOf<double> {
  static constexpr DType value = DType::F64;
};
template <> struct DTypeOf<int64_t> {
  static constexpr DType value = DType::I64;
};
/// bfloat16 values are held as their bits.
template <> struct DTypeOf<uint16_t> {
  static constexpr DType value = DType::BF16;
};

} // namespace mimo::device

#endif // MIMO_RUNTIME_DEVICE_DTYPE_H
