//===- DeviceProfile.h - Device and cluster profiles ------------*- C++ -*-===//
//
// What `mimoc simulate` and `mimoc tune` know about the hardware
// (docs/tune.md):
//
//  * A device profile: GEMM throughput as a function of the GEMM's size,
//    attention throughput (forward, backward) as a function of the
//    attended span, memory bandwidth, a per-kernel overhead, the fit of a
//    real layer's time, and how many cores the ranks of one device share
//    (a CPU's cores; 1 for a GPU). `mimo-run --calibrate` measures one;
//    the built-in profiles are estimates.
//  * A cluster: devices per node, nodes, and a latency and bandwidth per
//    link class (same device, same node, across nodes).
//
// Both are JSON files read with json/JsonValidator.h's diagnostics.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_COST_DEVICEPROFILE_H
#define MIMO_RUNTIME_COST_DEVICEPROFILE_H

#include "runtime/json/Diagnostic.h"

#include "nlohmann/json.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mimo {

/// A measured or estimated rate at one size: (size, TFLOP/s).
struct RatePoint {
  double size = 0, tflops = 0;
};

/// Interpolates `points` (ascending sizes) at `size`, linearly in
/// log(size); clamped at both ends. 0 when there are no points.
double rateAt(const std::vector<RatePoint> &points, double size);

struct LinkCost {
  double latencyUs = 0, bandwidthGBs = 1;
  /// Seconds to move `bytes` over the link.
  double seconds(double bytes) const {
    return latencyUs * 1e-6 + bytes / (bandwidthGBs * 1e9);
  }
};

struct DeviceProfile {
  /// "cpu (2 cores)", "NVIDIA H100 80GB HBM3".
  std::string device;
  /// "cpu" or "cuda".
  std::string kind = "cpu";
  /// Whether mimo-run --calibrate measured it (false: an estimate).
  bool measured = false;
  /// How it was made ("mimo-run --calibrate, 2026-11-23", "estimate: ...").
  std::string source;
  /// The attention its bf16 attention rates are of ("mimo" or "cudnn",
  /// mimo-run --attention; "" when not said).
  std::string attentionBackend;
  /// Cores the ranks of one device share (a GPU: 1).
  int64_t cores = 1;
  /// Memory of one device (tune's default --memory).
  double memoryBytes = 0;
  /// Peak rates, for MFU: fp32, and bf16 (dense tensor cores; 0: unknown,
  /// the fp32 peak stands for it).
  double peakTflops = 0, peakTflopsBf16 = 0;
  /// GEMM TFLOP/s of one core by size = cbrt(M N K): fp32, and with bf16
  /// operands (precision "bf16"; empty: the fp32 rates stand for it).
  std::vector<RatePoint> gemm, gemmBf16;
  /// Attention TFLOP/s of one core by the attended span (keys per query):
  /// fp32, and under precision "bf16" (empty: the fp32 rates stand for it).
  std::vector<RatePoint> attentionForward, attentionBackward;
  std::vector<RatePoint> attentionBf16Forward, attentionBf16Backward;
  double memoryGBs = 10;
  double kernelOverheadUs = 1;
  /// Measured / kernel-predicted time of a real layer's forward and
  /// backward (mimo-run --calibrate runs a small model): what the kernel
  /// rates miss (shapes, transposes, small elementwise kernels, buffers).
  double computeScale = 1;
  /// Fixed seconds per layer and pass (forward 1, backward 2) that do not
  /// shrink with the layer's size (launches, buffers, threads), fitted by
  /// mimo-run --calibrate with computeScale from two batch sizes.
  double layerOverheadUs = 0;
  /// CPU: the bytes per second one member of a two-rank all-reduce gets
  /// through (copies, the sum, staging), as mimo's communicators run it (0:
  /// the link's bandwidth).
  double collectiveGBs = 0;
  /// Point-to-point between two ranks of this device (calibrated on the
  /// local backend).
  LinkCost link{20, 5};
};

/// Reads a profile document; `file` names it in diagnostics.
std::optional<DeviceProfile> parseProfile(const nlohmann::json &document,
                                          std::vector<Diagnostic> &errors);
nlohmann::ordered_json profileToJson(const DeviceProfile &profile);
/// The built-in estimates: "cpu", "h100", "h200".
std::optional<DeviceProfile> builtinProfile(const std::string &name);
/// The profile as a model of `precision` sees it: for "bf16", the bf16
/// GEMM and attention rates and peak where the profile has them.
DeviceProfile forPrecision(const DeviceProfile &profile,
                           const std::string &precision);
std::vector<std::string> builtinProfileNames();

struct ClusterConfig {
  std::string name;
  int64_t devicesPerNode = 1;
  /// 0: as many nodes as the world needs (one rank per device).
  int64_t nodes = 0;
  LinkCost sameDevice, sameNode, crossNode;
  bool measured = false;

  /// The devices `worldSize` ranks run on: rank r on device r mod this.
  int64_t devices(int64_t worldSize) const {
    int64_t n = nodes > 0 ? nodes * devicesPerNode : worldSize;
    return n > 0 ? n : 1;
  }
};

/// Threads of one rank when `ranks` share a device of `cores` cores (what
/// mimo-run runs with by default): an equal share, at least 1.
inline int64_t threadsPerRank(int64_t cores, int64_t ranks) {
  return std::max<int64_t>(1, cores / std::max<int64_t>(1, ranks));
}

std::optional<ClusterConfig> parseCluster(const nlohmann::json &document,
                                          std::vector<Diagnostic> &errors);
nlohmann::ordered_json clusterToJson(const ClusterConfig &cluster);

/// The cluster a profile implies when none is given: a CPU is one host
/// whose ranks all share it; a GPU profile, nodes of 8 GPUs (NVLink within,
/// 400 Gb/s between), one rank per GPU.
ClusterConfig defaultCluster(const DeviceProfile &profile);

} // namespace mimo

#endif // MIMO_RUNTIME_COST_DEVICEPROFILE_H
