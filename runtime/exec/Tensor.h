//===- Tensor.h - fp32 buffers owned by a device ----------------*- C++ -*-===//
//
// What the model and the executor hold: a flat fp32 buffer in the memory of
// the device of the rank that made it (the thread's current device), moved
// and cloned explicitly, read on the host only through toHost(). The model
// never touches elements directly, so a CUDA device plugs in by
// implementing Device.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_EXEC_TENSOR_H
#define MIMO_RUNTIME_EXEC_TENSOR_H

#include "runtime/exec/Device.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace mimo::exec {

/// The device this thread's tensors live on (each rank thread sets its own).
void setCurrentDevice(Device *device);
Device &currentDevice();

class Tensor {
public:
  Tensor() = default;
  /// n zeros on the current device.
  explicit Tensor(int64_t n);
  static Tensor fromHost(const std::vector<float> &host);
  std::vector<float> toHost() const;

  Tensor(Tensor &&other) noexcept { *this = std::move(other); }
  Tensor &operator=(Tensor &&other) noexcept {
    storage = std::move(other.storage);
    count = other.count;
    owner = other.owner;
    other.count = 0;
    other.owner = nullptr;
    return *this;
  }
  Tensor(const Tensor &) = delete;
  Tensor &operator=(const Tensor &) = delete;

  Tensor clone() const;
  /// A new tensor holding values [offset, offset + n).
  Tensor slice(int64_t offset, int64_t n) const;

  float *data() { return storage.get(); }
  const float *data() const { return storage.get(); }
  int64_t size() const { return count; }
  bool empty() const { return count == 0; }
  Device &device() const { return *owner; }

private:
  std::shared_ptr<float> storage;
  int64_t count = 0;
  Device *owner = nullptr;
};

} // namespace mimo::exec

#endif // MIMO_RUNTIME_EXEC_TENSOR_H
