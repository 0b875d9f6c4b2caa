//===- OncePerDevice.h - A kernel attribute set once per GPU ----*- C++ -*-===//
//
// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) is a property of a
// kernel on a GPU, shared by every host thread. Set per launch from rank
// threads that share a GPU, a rank asking for less could lower the limit
// between another rank's setting and its launch (two modules of different
// head dimensions on one GPU, the same generic attention kernel): the
// launch then fails. The CUDA device instead raises each kernel's limit
// once per GPU, to the GPU's opt-in maximum, through this registry; no
// launch changes it after.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_ONCEPERDEVICE_H
#define MIMO_RUNTIME_DEVICE_ONCEPERDEVICE_H

#include <map>
#include <mutex>
#include <utility>

namespace mimo::device {

class OncePerDevice {
public:
  /// Calls `set` (0: success) unless it already succeeded for (`kernel`,
  /// `device`); returns 0 then, else set's result (a failure is tried
  /// again by the next call). Callers of one pair wait for the first.
  template <typename Set> int ensure(const void *kernel, int device, Set set) {
    std::lock_guard<std::mutex> lock(mutex);
    std::pair<const void *, int> key{kernel, device};
    if (done.count(key))
      return 0;
    int result = set();
    if (result == 0)
      done[key] = true;
    return result;
  }
  /// How many pairs are set (tests).
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex);
    return done.size();
  }

private:
  mutable std::mutex mutex;
  std::map<std::pair<const void *, int>, bool> done;
};

/// The process's registry of dynamic shared memory opt-ins.
inline OncePerDevice &sharedMemoryOptIns() {
  static OncePerDevice registry;
  return registry;
}

} // namespace mimo::device

#endif // MIMO_RUNTIME_DEVICE_ONCEPERDEVICE_H
