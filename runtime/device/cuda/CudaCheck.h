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
  return std::string(cudaGetErrorName(error)) + " (" +
         cudaGetErrorString(error) + ")";
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
