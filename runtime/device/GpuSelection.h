//===- GpuSelection.h - Which GPU a thread and a process use ----*- C++ -*-===//
//
// The rules that put each rank on its own GPU, in plain C++ over a table of
// the three CUDA runtime calls involved, so that the CPU tests run them
// against a fake multi-GPU runtime that records every switch:
//  - a thread's current GPU is asked of the runtime (cudaGetDevice), never
//    cached: code that changed it (NCCL, a probe, cuBLASLt) cannot leave a
//    rank computing on another GPU;
//  - a query about another GPU (its free memory) restores the caller's
//    current GPU afterwards, and is made only for GPUs this process uses
//    (cudaSetDevice creates a context, hundreds of MiB, and fails outright
//    on a GPU in EXCLUSIVE_PROCESS mode that another process holds);
//  - under mpirun node-local process l uses GPU l mod (visible GPUs), and
//    a GPU's memory is shared by the processes that use it.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_GPUSELECTION_H
#define MIMO_RUNTIME_DEVICE_GPUSELECTION_H

#include <cstddef>
#include <cstdint>

namespace mimo::device::gpu {

/// cudaGetDevice, cudaSetDevice and cudaMemGetInfo (of the current GPU);
/// each returns 0 on success.
struct SelectionApi {
  int (*getDevice)(int *ordinal);
  int (*setDevice)(int ordinal);
  int (*memGetInfo)(size_t *freeBytes, size_t *totalBytes);
};

/// Makes `ordinal` the calling thread's current GPU unless the runtime says
/// it already is; false when the runtime refuses.
bool makeCurrent(const SelectionApi &api, int ordinal);

/// `ordinal` current while it lives; afterwards the thread's previous GPU
/// current again if this process had chosen it (makeCurrent): the
/// runtime's default before any choice, GPU 0, is not restored, since
/// that would create a context on GPU 0 in every process.
class ScopedDevice {
public:
  ScopedDevice(const SelectionApi &api, int ordinal);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice &) = delete;
  ScopedDevice &operator=(const ScopedDevice &) = delete;
  /// Whether `ordinal` became current.
  bool ok() const { return active; }

private:
  const SelectionApi &api;
  int previous = -1;
  bool active = false;
};

/// Tests: the process has chosen no GPU yet.
void forgetSelectionsForTesting();

/// Free bytes of GPU `ordinal` (-1 when the runtime cannot say); the
/// calling thread's current GPU is the same before and after.
int64_t freeBytes(const SelectionApi &api, int ordinal);

/// The GPU of node-local process `localRank` when `gpus` are visible
/// (localRank mod gpus; 0 without GPUs).
int processOrdinal(int64_t localRank, int gpus);

/// How many of the `processesOnNode` processes of a node (node-local ranks
/// 0..processesOnNode-1) use GPU `ordinal` of its `gpus`: the ways its
/// memory is shared (at least 1).
int64_t processesOnGpu(int ordinal, int64_t processesOnNode, int gpus);

} // namespace mimo::device::gpu

#endif // MIMO_RUNTIME_DEVICE_GPUSELECTION_H
