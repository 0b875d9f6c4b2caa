//===- CudaDevice.h - The CUDA device (host-only declarations) --*- C++ -*-===//
//
// Built only with MIMO_HAVE_CUDA; nothing here includes CUDA headers, so
// runtime code that selects devices (Devices.cpp) stays plain C++.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CUDA_CUDADEVICE_H
#define MIMO_RUNTIME_DEVICE_CUDA_CUDADEVICE_H

#include "runtime/device/Devices.h"
#include "runtime/device/GpuSelection.h"

#include <memory>

namespace mimo::device::cuda {

/// What the CUDA runtime reports on this machine (Devices.h, cudaStatus).
CudaStatus probe();

/// The CUDA runtime's device selection calls (GpuSelection.h).
const gpu::SelectionApi &selectionApi();

/// Free bytes of GPU `ordinal` (-1 when it cannot be asked); the calling
/// thread's current GPU is left as it was.
int64_t freeBytes(int ordinal);
/// GPU `ordinal`'s UUID in hex ("" when it cannot be read).
std::string uuidOf(int ordinal);

/// The CUDA device on GPU `ordinal`: its own stream, cuBLASLt handle and
/// workspace, memory from the GPU's stream-ordered pool, its attention as
/// `attention` says. Create and use it on one host thread (a rank's).
std::unique_ptr<Device> makeDevice(int ordinal, AttentionChoice attention);

/// Loads cuDNN (Cudnn.h) and says what it found (Devices.h cudnnStatus).
CudnnStatus probeCudnn();

} // namespace mimo::device::cuda

#endif // MIMO_RUNTIME_DEVICE_CUDA_CUDADEVICE_H
