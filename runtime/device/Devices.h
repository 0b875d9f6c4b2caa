//===- Devices.h - Which devices this build and machine have ---*- C++ -*-===//
//
// docs/gpu.md: `--device cpu|cuda`, default cuda when mimo-run was built with
// CUDA and a GPU is visible; rank r of a process uses GPU r mod (visible
// GPUs), so a plan of any world size runs on one GPU.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_DEVICES_H
#define MIMO_RUNTIME_DEVICE_DEVICES_H

#include "runtime/device/Device.h"

#include <memory>
#include <optional>
#include <string>

namespace mimo::device {

/// What CUDA this build and this machine offer.
struct CudaStatus {
  /// mimo was built with the CUDA device.
  bool built = false;
  /// Usable GPUs (0 when none).
  int devices = 0;
  /// Why none is usable, in words ("no CUDA driver is installed ...").
  std::string problem;
  /// The first GPU's name and the driver's CUDA version, when usable.
  std::string firstName;
  int driverVersion = 0;
  /// The first GPU's peak fp32 rate without tensor cores (TFLOP/s):
  /// multiprocessors x 128 FP32 lanes x 2 x the peak clock (sm_80, sm_90).
  double peakFp32Tflops = 0;
  /// Its dense bf16 tensor-core peak: the datasheet's for the GPUs
  /// datasheetBf16Tflops knows (the MFU convention), else multiprocessors
  /// x (4096 on sm_90, 2048 on sm_80) FLOPs per clock x the peak clock.
  double peakBf16Tflops = 0;
  /// The shared memory one block of the first GPU may opt in to (bytes).
  int64_t sharedOptIn = 0;
};

/// Asks the CUDA runtime (once per process; cheap afterwards). Never
/// throws, never aborts, also on machines without a driver.
const CudaStatus &cudaStatus();

/// The dense bf16 tensor-core peak NVIDIA's datasheet gives for the GPU
/// of this name (as CUDA reports it: "NVIDIA H100 80GB HBM3"), in TFLOP/s;
/// 0 for a name it does not know. The datasheets count at the boost clock
/// (1830 MHz on an H100 SXM), below the peak clock CUDA reports (1980 MHz):
/// the clock formula would say 1070 where MFU is customarily taken of 989.
double datasheetBf16Tflops(const std::string &name);

const char *kindName(DeviceKind kind);
std::optional<DeviceKind> parseKind(const std::string &name);

/// The device of `rank` (CUDA: GPU rank mod the visible GPUs, its
/// attention as `attention` says; CPU: kernels on `threads` threads).
/// Throws DeviceError when the kind is not usable here.
std::unique_ptr<Device>
makeDevice(DeviceKind kind, int64_t rank, int threads = 1,
           AttentionChoice attention = AttentionChoice::Auto);

/// "auto", "cudnn", "mimo".
const char *attentionChoiceName(AttentionChoice choice);
std::optional<AttentionChoice> parseAttentionChoice(const std::string &name);

/// Whether this process can run cuDNN's attention: `problem` empty when
/// it can (the library found and recent enough: `library` its file,
/// `version` "9.19.0"), else why not and what to install. Only loads the
/// library (no GPU needed); a build without CUDA says so.
struct CudnnStatus {
  std::string library, version, problem;
};
const CudnnStatus &cudnnStatus();

/// Threads per rank when the user names none: this machine's cores shared
/// by the ranks of this process (at least 1).
int defaultThreads(int64_t ranksHere);

/// Bytes a device of `kind` can still give this process: on the CPU the
/// memory available to it (MemAvailable, and its cgroup's limit when
/// lower), on a GPU its free memory (cudaMemGetInfo). -1 when unknown.
int64_t availableBytes(DeviceKind kind, int ordinal);

/// Why the CUDA device cannot run attention at head dimension `headDim`
/// (its kernel's limit, the first GPU's shared memory); empty when it can.
std::string cudaAttentionProblem(int64_t headDim);

/// The UUID of GPU `ordinal` (hex; "" without CUDA or when unreadable):
/// the same physical GPU seen by two processes has the same one.
std::string gpuUuid(int ordinal);

/// The GPU of `rank` when `kind` is Cuda (-1 for the CPU).
int deviceOrdinal(DeviceKind kind, int64_t rank);

} // namespace mimo::device

#endif // MIMO_RUNTIME_DEVICE_DEVICES_H
