//===- Devices.cpp - Which devices this build and machine have ------------===//

#include "runtime/device/Devices.h"

#include "runtime/device/KernelBodies.h"

#include <algorithm>
#include <thread>

#ifdef MIMO_HAVE_CUDA
#include "runtime/device/cuda/CudaDevice.h"
#endif

namespace mimo::device {

const CudaStatus &cudaStatus() {
  static const CudaStatus status = [] {
#ifdef MIMO_HAVE_CUDA
    return cuda::probe();
#else
    CudaStatus s;
    s.problem = "this mimo-run was built without CUDA (configure with "
                "-DMIMO_ENABLE_CUDA=ON on a machine with the CUDA toolkit)";
    return s;
#endif
  }();
  return status;
}

const char *kindName(DeviceKind kind) {
  return kind == DeviceKind::Cuda ? "cuda" : "cpu";
}

std::optional<DeviceKind> parseKind(const std::string &name) {
  if (name == "cpu")
    return DeviceKind::Cpu;
  if (name == "cuda")
    return DeviceKind::Cuda;
  return std::nullopt;
}

int64_t maxCudaHeadDim() { return bodies::kMaxHeadDim; }

int deviceOrdinal(DeviceKind kind, int64_t rank) {
  if (kind != DeviceKind::Cuda)
    return -1;
  int count = cudaStatus().devices;
  return count > 0 ? static_cast<int>(rank % count) : -1;
}

int defaultThreads(int64_t ranksHere) {
  int64_t cores = std::thread::hardware_concurrency();
  return static_cast<int>(
      std::max<int64_t>(1, cores / std::max<int64_t>(1, ranksHere)));
}

std::unique_ptr<Device> makeDevice(DeviceKind kind, int64_t rank, int threads) {
  if (kind == DeviceKind::Cpu)
    return makeCpuDevice(threads);
  const CudaStatus &status = cudaStatus();
  if (status.devices <= 0)
    throw DeviceError("no usable GPU: " + status.problem);
#ifdef MIMO_HAVE_CUDA
  return cuda::makeDevice(deviceOrdinal(kind, rank));
#else
  (void)rank;
  throw DeviceError(status.problem);
#endif
}

} // namespace mimo::device
