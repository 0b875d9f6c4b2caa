//===- Tensor.cpp - fp32 buffers owned by a device
//-------------------------===//

#include "runtime/exec/Tensor.h"

#include <stdexcept>

namespace mimo::exec {

namespace {
thread_local Device *current = nullptr;
} // namespace

void setCurrentDevice(Device *device) { current = device; }

Device &currentDevice() {
  if (!current)
    throw std::logic_error("no current device on this thread");
  return *current;
}

Tensor::Tensor(int64_t n) : count(n), owner(&currentDevice()) {
  Device *dev = owner;
  storage = std::shared_ptr<float>(dev->allocate(n),
                                   [dev](float *p) { dev->release(p); });
  dev->fill(storage.get(), 0.0f, n);
}

Tensor Tensor::fromHost(const std::vector<float> &host) {
  Tensor t(static_cast<int64_t>(host.size()));
  t.owner->upload(t.data(), host.data(), t.count);
  return t;
}

std::vector<float> Tensor::toHost() const {
  std::vector<float> host(static_cast<size_t>(count));
  if (count > 0)
    owner->download(host.data(), data(), count);
  return host;
}

Tensor Tensor::clone() const { return slice(0, count); }

Tensor Tensor::slice(int64_t offset, int64_t n) const {
  if (offset < 0 || n < 0 || offset + n > count)
    throw std::out_of_range("tensor slice [" + std::to_string(offset) + ", " +
                            std::to_string(offset + n) + ") of " +
                            std::to_string(count) + " values");
  Tensor t(n);
  if (n > 0)
    owner->copy(t.data(), data() + offset, n);
  return t;
}

} // namespace mimo::exec
