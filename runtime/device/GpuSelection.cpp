//===- GpuSelection.cpp - Which GPU a thread and a process use -----------===//

#include "runtime/device/GpuSelection.h"

#include <algorithm>
#include <mutex>
#include <set>

namespace mimo::device::gpu {

namespace {

/// The GPUs this process made current (and so has a context on).
struct Claims {
  std::mutex mutex;
  std::set<int> gpus;
};
Claims &claims() {
  static Claims c;
  return c;
}
void claim(int ordinal) {
  std::lock_guard<std::mutex> lock(claims().mutex);
  claims().gpus.insert(ordinal);
}
bool claimed(int ordinal) {
  std::lock_guard<std::mutex> lock(claims().mutex);
  return claims().gpus.count(ordinal) > 0;
}

} // namespace

bool makeCurrent(const SelectionApi &api, int ordinal) {
  int current = -1;
  bool ok = (api.getDevice(&current) == 0 && current == ordinal) ||
            api.setDevice(ordinal) == 0;
  if (ok)
    claim(ordinal);
  return ok;
}

ScopedDevice::ScopedDevice(const SelectionApi &api, int ordinal) : api(api) {
  // The runtime's answer before any selection is GPU 0 with no context on
  // it: going back there would create one, so only a GPU this process
  // chose is restored.
  if (api.getDevice(&previous) != 0 || !claimed(previous))
    previous = -1;
  active = makeCurrent(api, ordinal);
}

ScopedDevice::~ScopedDevice() {
  if (previous >= 0)
    (void)makeCurrent(api, previous);
}

int64_t freeBytes(const SelectionApi &api, int ordinal) {
  ScopedDevice scoped(api, ordinal);
  if (!scoped.ok())
    return -1;
  size_t free = 0, total = 0;
  if (api.memGetInfo(&free, &total) != 0)
    return -1;
  return static_cast<int64_t>(free);
}

void forgetSelectionsForTesting() {
  std::lock_guard<std::mutex> lock(claims().mutex);
  claims().gpus.clear();
}

int processOrdinal(int64_t localRank, int gpus) {
  if (gpus <= 0 || localRank < 0)
    return 0;
  return static_cast<int>(localRank % gpus);
}

int64_t processesOnGpu(int ordinal, int64_t processesOnNode, int gpus) {
  if (gpus <= 0 || processesOnNode <= 0 || ordinal < 0 || ordinal >= gpus)
    return 1;
  // Local ranks ordinal, ordinal + gpus, ordinal + 2 gpus, ...
  int64_t users = ordinal < processesOnNode
                      ? (processesOnNode - 1 - ordinal) / gpus + 1
                      : 0;
  return std::max<int64_t>(users, 1);
}

} // namespace mimo::device::gpu
