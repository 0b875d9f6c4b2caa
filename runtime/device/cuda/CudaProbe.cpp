//===- CudaProbe.cpp - What CUDA this machine offers ----------------------===//
//
// Asked once per process. On a machine with the toolkit but no driver (the
// development and CI machines) cudaGetDeviceCount returns
// cudaErrorInsufficientDriver; that is reported as a reason, never fatal.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/support/Versions.h"

#include <cstdlib>

namespace mimo::device::cuda {

namespace {

std::string visibleDevicesNote() {
  const char *visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!visible)
    return "";
  return std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")";
}

std::string reasonOf(cudaError_t error) {
  switch (error) {
  case cudaErrorInsufficientDriver: {
    int driver = 0, runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaGetLastError();
    std::string problem = cudaDriverProblem(driver, runtime);
    return (problem.empty() ? std::string("no CUDA driver is installed, or it "
                                          "is older than this build's CUDA "
                                          "runtime needs")
                            : problem) +
           " (" + errorText(error) + ")";
  }
  case cudaErrorNoDevice:
    return "no GPU is visible" + visibleDevicesNote() + " (" +
           errorText(error) + ")";
  default:
    return "the CUDA runtime cannot start: " + errorText(error);
  }
}

} // namespace

const gpu::SelectionApi &selectionApi() {
  // Each call clears the runtime's last error when it fails, so that no
  // later call is blamed for it.
  static const gpu::SelectionApi api{[](int *ordinal) {
                                       cudaError_t e = cudaGetDevice(ordinal);
                                       if (e != cudaSuccess)
                                         (void)cudaGetLastError();
                                       return static_cast<int>(e);
                                     },
                                     [](int ordinal) {
                                       cudaError_t e = cudaSetDevice(ordinal);
                                       if (e != cudaSuccess)
                                         (void)cudaGetLastError();
                                       return static_cast<int>(e);
                                     },
                                     [](size_t *freeBytes, size_t *totalBytes) {
                                       cudaError_t e = cudaMemGetInfo(
                                           freeBytes, totalBytes);
                                       if (e != cudaSuccess)
                                         (void)cudaGetLastError();
                                       return static_cast<int>(e);
                                     }};
  return api;
}

int64_t freeBytes(int ordinal) {
  return gpu::freeBytes(selectionApi(), ordinal);
}

std::string uuidOf(int ordinal) {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  static const char *hex = "0123456789abcdef";
  std::string text;
  for (char byte : props.uuid.bytes) {
    unsigned char b = static_cast<unsigned char>(byte);
    text += hex[b >> 4];
    text += hex[b & 15];
  }
  return text;
}

CudaStatus probe() {
  CudaStatus status;
  status.built = true;
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError(); // clear it: later calls should not see it
    status.problem = reasonOf(error);
    return status;
  }
  if (count <= 0) {
    status.problem = "no GPU is visible" + visibleDevicesNote();
    return status;
  }
  cudaDeviceProp props{};
  error = cudaGetDeviceProperties(&props, 0);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    status.problem = "cannot read GPU 0's properties: " + errorText(error);
    return status;
  }
  if (props.major < 8) {
    status.problem = "GPU 0 (" + std::string(props.name) +
                     ") has compute capability " + std::to_string(props.major) +
                     "." + std::to_string(props.minor) +
                     "; mimo's kernels are built for 8.0 (A100) and 9.0 "
                     "(H100, H200)";
    return status;
  }
  (void)cudaDriverGetVersion(&status.driverVersion);
  int clockKHz = 0, multiprocessors = 0;
  if (cudaDeviceGetAttribute(&clockKHz, cudaDevAttrClockRate, 0) ==
          cudaSuccess &&
      cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount,
                             0) == cudaSuccess) {
    status.peakFp32Tflops =
        multiprocessors * 128.0 * 2.0 * clockKHz * 1e3 / 1e12;
    status.peakBf16Tflops = multiprocessors *
                            (props.major >= 9 ? 4096.0 : 2048.0) * clockKHz *
                            1e3 / 1e12;
  }
  if (double datasheet = datasheetBf16Tflops(props.name); datasheet > 0)
    status.peakBf16Tflops = datasheet;
  (void)cudaGetLastError();
  status.firstName = props.name;
  status.sharedOptIn = static_cast<int64_t>(props.sharedMemPerBlockOptin);
  status.devices = count;
  return status;
}

} // namespace mimo::device::cuda
