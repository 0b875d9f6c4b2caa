//===- MemoryCheck.h - Will the plan fit, before anything is allocated -*- C++
//-*-===//
//
// SPEC §14: mimo-run compares the memory plan's estimate (core/MemoryPlan.h)
// of the ranks this process runs with what their devices have, and refuses
// a layout that would not fit, naming the ranks, the estimate and what
// would help, before a single parameter is allocated.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_EXEC_MEMORYCHECK_H
#define MIMO_RUNTIME_EXEC_MEMORYCHECK_H

#include "runtime/core/PlanFile.h"
#include "runtime/device/Device.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mimo::exec {

/// What the device of each group of ranks can give (bytes; -1: unknown):
/// the default asks the device layer.
using AvailableBytes = int64_t (*)(device::DeviceKind kind, int ordinal);

/// The error text ("/model: error: ...") when the ranks `ranks` of `plan`
/// would not fit on `kind` devices (CPU: one shared memory; CUDA: rank r
/// on GPU r mod gpus, which share their GPU's memory); nullopt when they
/// fit or the memory is unknown. `share` divides what is available among
/// processes (under mpirun, the ranks of one node share its memory).
std::optional<std::string> memoryProblem(const Plan &plan,
                                         const std::vector<int64_t> &ranks,
                                         device::DeviceKind kind, int gpus,
                                         int64_t share = 1,
                                         AvailableBytes available = nullptr);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_EXEC_MEMORYCHECK_H
