//===- Devices.cpp - Which devices this build and machine have ------------===//

#include "runtime/device/Devices.h"

#include "runtime/cost/DeviceProfile.h"
#include "runtime/device/FlashBodies.h"
#include "runtime/device/GpuSelection.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>
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

double datasheetBf16Tflops(const std::string &name) {
  auto has = [&](const char *part) {
    return name.find(part) != std::string::npos;
  };
  // Most specific first: the PCIe and NVL cards run slower clocks.
  if (has("H100") || has("H200") || has("H800")) {
    if (has("PCIe"))
      return 756.5;
    if (has("NVL"))
      return 835.5;
    return 989.4;
  }
  if (has("A100") || has("A800"))
    return 312.0;
  return 0;
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

std::string cudaAttentionProblem(int64_t headDim) {
  const int64_t optIn = cudaStatus().sharedOptIn;
  return flash::attentionProblem(
      headDim, optIn > 0 ? optIn : std::numeric_limits<int64_t>::max());
}

std::string gpuUuid(int ordinal) {
#ifdef MIMO_HAVE_CUDA
  if (cudaStatus().devices > 0)
    return cuda::uuidOf(ordinal);
#endif
  (void)ordinal;
  return "";
}

namespace {

/// A number from the first line of a file (-1 if absent or "max").
int64_t readNumber(const char *path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max")
    return -1;
  try {
    return std::stoll(text);
  } catch (const std::exception &) {
    return -1;
  }
}

int64_t hostAvailableBytes() {
  int64_t available = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
  // A container's limit (cgroup v2, then v1).
  int64_t limit = readNumber("/sys/fs/cgroup/memory.max");
  int64_t used = readNumber("/sys/fs/cgroup/memory.current");
  if (limit < 0) {
    limit = readNumber("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = readNumber("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (limit > 0 && limit < (int64_t(1) << 60) && used >= 0) {
    int64_t room = std::max<int64_t>(0, limit - used);
    available = available < 0 ? room : std::min(available, room);
  }
  return available;
}

} // namespace

int64_t availableBytes(DeviceKind kind, int ordinal) {
  if (kind == DeviceKind::Cpu)
    return hostAvailableBytes();
#ifdef MIMO_HAVE_CUDA
  return cudaStatus().devices > 0 ? cuda::freeBytes(ordinal) : -1;
#else
  (void)ordinal;
  return -1;
#endif
}

int deviceOrdinal(DeviceKind kind, int64_t rank) {
  if (kind != DeviceKind::Cuda)
    return -1;
  int count = cudaStatus().devices;
  return count > 0 ? gpu::processOrdinal(rank, count) : -1;
}

int defaultThreads(int64_t ranksHere) {
  return static_cast<int>(
      threadsPerRank(std::thread::hardware_concurrency(), ranksHere));
}

std::unique_ptr<Device> makeDevice(DeviceKind kind, int64_t rank, int threads,
                                   AttentionChoice attention) {
  if (kind == DeviceKind::Cpu)
    return makeCpuDevice(threads);
  const CudaStatus &status = cudaStatus();
  if (status.devices <= 0)
    throw DeviceError("no usable GPU: " + status.problem);
#ifdef MIMO_HAVE_CUDA
  return cuda::makeDevice(deviceOrdinal(kind, rank), attention);
#else
  (void)rank;
  (void)attention;
  throw DeviceError(status.problem);
#endif
}

const char *attentionChoiceName(AttentionChoice choice) {
  switch (choice) {
  case AttentionChoice::Auto:
    return "auto";
  case AttentionChoice::Cudnn:
    return "cudnn";
  case AttentionChoice::Mimo:
    return "mimo";
  }
  return "auto";
}

std::optional<AttentionChoice> parseAttentionChoice(const std::string &name) {
  for (AttentionChoice c :
       {AttentionChoice::Auto, AttentionChoice::Cudnn, AttentionChoice::Mimo})
    if (name == attentionChoiceName(c))
      return c;
  return std::nullopt;
}

const CudnnStatus &cudnnStatus() {
  static const CudnnStatus status = [] {
    CudnnStatus s;
#ifdef MIMO_HAVE_CUDA
    s = cuda::probeCudnn();
#else
    s.problem = "this mimo-run was built without CUDA";
#endif
    return s;
  }();
  return status;
}

} // namespace mimo::device
