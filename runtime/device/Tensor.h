//===- Tensor.h - Typed, shaped buffers owned by a device -------*- C++ -*-===//
//
// What the model, the executor and the communicators hold: a view (offset,
// shape, element type) of a reference-counted allocation in the memory of
// one device. Views share the allocation (no copy); clone() copies. Values
// reach the host only through toHost(). New tensors are uninitialised
// (`empty`) unless asked for zeros: outputs that a kernel overwrites are
// never filled first.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_TENSOR_H
#define MIMO_RUNTIME_DEVICE_TENSOR_H

#include "runtime/device/DType.h"
#include "runtime/device/Device.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace mimo::device {

/// The device this thread's new tensors live on (each rank thread sets its
/// own).
void setCurrentDevice(Device *device);
Device &currentDevice();

class Tensor {
public:
  Tensor() = default;

  /// `n` uninitialised / zero elements on `device` (default: the current).
  static Tensor empty(int64_t n, DType type = DType::F32);
  static Tensor zeros(int64_t n, DType type = DType::F32);
  static Tensor empty(Device &device, int64_t n, DType type = DType::F32);
  static Tensor zeros(Device &device, int64_t n, DType type = DType::F32);
  /// A copy of host values on the current device.
  template <typename T> static Tensor fromHost(const std::vector<T> &host);
  static Tensor fromHost(std::initializer_list<float> host) {
    return fromHost(std::vector<float>(host));
  }
  /// The values, copied to the host (waits for the device).
  template <typename T = float> std::vector<T> toHost() const;

  Tensor(Tensor &&other) noexcept { *this = std::move(other); }
  Tensor &operator=(Tensor &&other) noexcept;
  Tensor(const Tensor &) = delete;
  Tensor &operator=(const Tensor &) = delete;

  /// A new allocation holding a copy of these values.
  Tensor clone() const;
  /// Elements [offset, offset + n) of this tensor, sharing its allocation.
  Tensor view(int64_t offset, int64_t n) const;
  /// The same elements with another shape (same element count).
  Tensor reshaped(std::vector<int64_t> shape) const;

  /// Typed element pointers (DeviceError when T is not the dtype).
  template <typename T> T *data() { return checked<T>(); }
  template <typename T> const T *data() const { return checked<T>(); }
  /// fp32 shorthands, the model's element type.
  float *data() { return checked<float>(); }
  const float *data() const { return checked<float>(); }
  void *raw() { return address(); }
  const void *raw() const { return address(); }

  int64_t size() const { return count; }
  int64_t bytes() const { return count * sizeOf(type); }
  bool empty() const { return count == 0; }
  DType dtype() const { return type; }
  const std::vector<int64_t> &shape() const { return dims; }
  Device &device() const;

private:
  struct Storage;
  void *address() const;
  template <typename T> T *checked() const;

  std::shared_ptr<Storage> storage;
  int64_t offsetBytes = 0;
  int64_t count = 0;
  DType type = DType::F32;
  std::vector<int64_t> dims;
};

} // namespace mimo::device

#endif // MIMO_RUNTIME_DEVICE_TENSOR_H
