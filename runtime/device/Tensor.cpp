//===- Tensor.cpp - Typed, shaped buffers owned by a device ---------------===//

#include "runtime/device/Tensor.h"

#include <string>

namespace mimo::device {

namespace {
thread_local Device *current = nullptr;
} // namespace

void setCurrentDevice(Device *device) { current = device; }

Device &currentDevice() {
  if (!current)
    throw std::logic_error("no current device on this thread");
  return *current;
}

/// One allocation, released on its device when the last view goes.
struct Tensor::Storage {
  Storage(Device &device, int64_t bytes)
      : device(device), data(bytes > 0 ? device.allocate(bytes) : nullptr) {}
  ~Storage() {
    if (data)
      device.release(data);
  }
  Storage(const Storage &) = delete;
  Storage &operator=(const Storage &) = delete;
  Device &device;
  void *data;
};

Tensor &Tensor::operator=(Tensor &&other) noexcept {
  storage = std::move(other.storage);
  offsetBytes = other.offsetBytes;
  count = other.count;
  type = other.type;
  dims = std::move(other.dims);
  other.storage.reset();
  other.offsetBytes = 0;
  other.count = 0;
  other.dims.clear();
  return *this;
}

Tensor Tensor::empty(Device &device, int64_t n, DType type) {
  if (n < 0)
    throw std::invalid_argument("a tensor of " + std::to_string(n) +
                                " elements");
  Tensor t;
  t.storage = std::make_shared<Storage>(device, n * sizeOf(type));
  t.count = n;
  t.type = type;
  t.dims = {n};
  return t;
}

Tensor Tensor::zeros(Device &device, int64_t n, DType type) {
  Tensor t = empty(device, n, type);
  if (n > 0)
    device.fillZero(t.raw(), t.bytes());
  return t;
}

Tensor Tensor::empty(int64_t n, DType type) {
  return empty(currentDevice(), n, type);
}

Tensor Tensor::zeros(int64_t n, DType type) {
  return zeros(currentDevice(), n, type);
}

template <typename T> Tensor Tensor::fromHost(const std::vector<T> &host) {
  Tensor t = empty(static_cast<int64_t>(host.size()), DTypeOf<T>::value);
  if (!host.empty())
    t.device().upload(t.raw(), host.data(), t.bytes());
  return t;
}

template <typename T> std::vector<T> Tensor::toHost() const {
  std::vector<T> host(static_cast<size_t>(count));
  if (count > 0)
    device().download(host.data(), checked<T>(), bytes());
  return host;
}

template Tensor Tensor::fromHost<float>(const std::vector<float> &);
template Tensor Tensor::fromHost<double>(const std::vector<double> &);
template Tensor Tensor::fromHost<int64_t>(const std::vector<int64_t> &);
template std::vector<float> Tensor::toHost<float>() const;
template std::vector<double> Tensor::toHost<double>() const;
template std::vector<int64_t> Tensor::toHost<int64_t>() const;

Device &Tensor::device() const {
  if (!storage)
    throw std::logic_error("an empty tensor has no device");
  return storage->device;
}

void *Tensor::address() const {
  if (!storage || !storage->data)
    return nullptr;
  return static_cast<char *>(storage->data) + offsetBytes;
}

template <typename T> T *Tensor::checked() const {
  if (storage && type != DTypeOf<T>::value)
    throw DeviceError(std::string("a tensor of ") + nameOf(type) + " read as " +
                      nameOf(DTypeOf<T>::value));
  return static_cast<T *>(address());
}

template float *Tensor::checked<float>() const;
template double *Tensor::checked<double>() const;
template int64_t *Tensor::checked<int64_t>() const;
template uint16_t *Tensor::checked<uint16_t>() const;

Tensor Tensor::clone() const {
  if (!storage)
    return Tensor();
  Tensor t = empty(device(), count, type);
  t.dims = dims;
  if (count > 0)
    device().copy(t.raw(), raw(), bytes());
  return t;
}

Tensor Tensor::view(int64_t offset, int64_t n) const {
  if (offset < 0 || n < 0 || offset + n > count)
    throw std::out_of_range("tensor view [" + std::to_string(offset) + ", " +
                            std::to_string(offset + n) + ") of " +
                            std::to_string(count) + " values");
  Tensor t;
  t.storage = storage;
  t.offsetBytes = offsetBytes + offset * sizeOf(type);
  t.count = n;
  t.type = type;
  t.dims = {n};
  return t;
}

Tensor Tensor::reshaped(std::vector<int64_t> shape) const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  if (n != count)
    throw std::invalid_argument("cannot reshape " + std::to_string(count) +
                                " values to " + std::to_string(n));
  Tensor t = view(0, count);
  t.dims = std::move(shape);
  return t;
}

} // namespace mimo::device
