//===- FlashMma.h - Launches of the tensor-core attention --------*- C++
//-*-===//
//
// The CUDA device's bf16 attention programs (device/FlashMmaBodies.h) as
// kernels: a block of four warps per (plan block, head). Each call returns
// the first launch's error and the name of the kernel it belongs to.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CUDA_FLASHMMA_H
#define MIMO_RUNTIME_DEVICE_CUDA_FLASHMMA_H

#include "runtime/device/FlashBodies.h"

#include <cuda_runtime.h>

namespace mimo::device::cuda {

struct MmaLaunch {
  cudaError_t error = cudaSuccess;
  const char *kernel = nullptr;
};

/// o and lse (s.d: flashmma::supportsHeadDim; s.heads <= 65535; every
/// buffer 16-byte aligned).
MmaLaunch mmaAttentionForward(const flash::Shape &s, const uint16_t *q,
                              const uint16_t *k, const uint16_t *v, uint16_t *o,
                              float *lse, cudaStream_t stream);

/// dq, dk and dv, given D = rowsum(dout o) (flash::RowDot<uint16_t>).
MmaLaunch mmaAttentionBackward(const flash::Shape &s, const uint16_t *q,
                               const uint16_t *k, const uint16_t *v,
                               const float *lse, const uint16_t *dout,
                               const float *D, float *dq, float *dk, float *dv,
                               cudaStream_t stream);

} // namespace mimo::device::cuda

#endif // MIMO_RUNTIME_DEVICE_CUDA_FLASHMMA_H
