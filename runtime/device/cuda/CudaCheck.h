//===- CudaCheck.h - CUDA and cuBLASLt return codes as errors ---*- C++ -*-===//
#ifndef MIMO_RUNTIME_DEVICE_CUDA_CUDACHECK_H
#define MIMO_RUNTIME_DEVICE_CUDA_CUDACHECK_H

#include "runtime/device/Device.h"
#include "runtime/device/cuda/CublasLt.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

namespace mimo::device::cuda {

/// "cudaErrorMemoryAllocation (out of memory)".
inline std::string errorText(cudaError_t error) {
  std::string text = std::string(cudaGetErrorName(error)) + " (" +
                     cudaGetErrorString(error) + ")";
  if (error == cudaErrorNoKernelImageForDevice)
    text += ": this mimo was not built for this GPU's architecture; rebuild "
            "with -DCMAKE_CUDA_ARCHITECTURES=<its compute capability without "
            "the dot: 80 for an A100, 90 for an H100 or H200> (nvidia-smi "
            "--query-gpu=compute_cap says it)";
  return text;
}

/// Throws DeviceError("CUDA error in WHAT: ...") unless `error` is success.
inline void check(cudaError_t error, const std::string &what) {
  if (error != cudaSuccess)
    throw DeviceError("CUDA error in " + what + ": " + errorText(error));
}

inline void check(cublasStatus_t status, const std::string &what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw DeviceError("cuBLASLt error in " + what + ": " +
                      cublasLt().statusName(status) + " (" +
                      cublasLt().statusString(status) + ")");
}

} // namespace mimo::device::cuda

#endif // MIMO_RUNTIME_DEVICE_CUDA_CUDACHECK_H
