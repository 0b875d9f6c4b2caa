//===- Calibrate.h - Measuring a device profile ----------------*- C++ -*-===//
//
// `mimo-run --calibrate -o profile.json` (docs/tune.md): times this
// machine's device kernels through the same Device interface training
// uses (cost/CostModel.h's profile): GEMMs of sizes 16 to 1024 (4096 on a
// GPU), causal attention forward and backward over spans of 16 to 1024
// keys, memory bandwidth (an elementwise add over 64 MiB), the cost of
// one small kernel, and a point-to-point message between two ranks of the
// local backend. CPU rates are those of one core (one thread), the unit
// the simulator shares among ranks.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_EXEC_CALIBRATE_H
#define MIMO_RUNTIME_EXEC_CALIBRATE_H

#include "runtime/cost/CostModel.h"
#include "runtime/device/Device.h"

#include <functional>
#include <string>

namespace mimo::exec {

/// Measures the profile of `kind` (rank 0's device, its attention as
/// `attention` says: the bf16 attention rates are the backend's a run with
/// the same --attention gets). `progress` is told what is being measured.
/// Throws DeviceError when the device fails.
DeviceProfile
calibrate(device::DeviceKind kind,
          const std::function<void(const std::string &)> &progress,
          device::AttentionChoice attention = device::AttentionChoice::Auto);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_EXEC_CALIBRATE_H
