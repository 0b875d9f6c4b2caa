//===- MemoryCheck.h - Will the plan fit? -----------------------*- C++ -*-===//
//
// docs/tune.md: mimo-run compares the memory plan's estimate
// (cost/MemoryPlan.h) of the ranks this process runs with what their devices
// have, and refuses a layout that would not fit, naming the ranks, the estimate
// and what would help, before a single parameter is allocated.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_EXEC_MEMORYCHECK_H
#define MIMO_RUNTIME_EXEC_MEMORYCHECK_H

#include "runtime/device/Device.h"
#include "runtime/plan/PlanFile.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mimo::exec {

/// What the device of each group of ranks can give (bytes; -1: unknown):
/// the default asks the device layer.
using AvailableBytes = int64_t (*)(device::DeviceKind kind, int ordinal);

/// The error text ("/model: error: ...") when the ranks `ranks` of `plan`,
/// run as threads of this process, would not fit on `kind` devices (CPU:
/// one shared memory; CUDA: rank r on GPU r mod gpus, which share their
/// GPU's memory); nullopt when they fit or the memory is unknown. `share`
/// divides what is available among processes.
std::optional<std::string> memoryProblem(const Plan &plan,
                                         const std::vector<int64_t> &ranks,
                                         device::DeviceKind kind, int gpus,
                                         int64_t share = 1,
                                         AvailableBytes available = nullptr);

/// The same under mpirun, for the one rank `rank` of this process, which is
/// node-local process `localRank` of `processesOnNode`: asks only of the
/// memory this process uses (GPU localRank mod gpus, or the host's), and
/// divides it among the node's processes that use it (on a GPU those of
/// that GPU, usually this one alone; on the CPU all of them).
std::optional<std::string>
processMemoryProblem(const Plan &plan, int64_t rank, device::DeviceKind kind,
                     int gpus, int64_t localRank, int64_t processesOnNode,
                     AvailableBytes available = nullptr);

/// This process's address-space limits (ulimit -v: RLIMIT_AS; ulimit -d:
/// RLIMIT_DATA) and what it has mapped already; -1 where unlimited.
struct AddressSpace {
  int64_t limit = -1, used = 0;
  /// Which limit is the tighter one ("ulimit -v" or "ulimit -d").
  std::string name;
};
AddressSpace addressSpace();

/// The address space a process of `ranksHere` CPU ranks of `threads`
/// threads each reserves besides the layout's memory: per thread, the
/// 128 MiB buffer OpenBLAS maps at its first GEMM (and retries forever
/// when it cannot) and its stack, and glibc's per-thread heaps (capped by
/// limitHeapArenas).
int64_t threadReservations(int64_t ranksHere, int64_t threads);

/// Under an address-space limit, the refusal when `needBytes` of layout
/// memory and the threads' reservations would not fit it (naming the
/// limit, both figures and the fix); nullopt otherwise.
std::optional<std::string> addressSpaceProblem(const AddressSpace &space,
                                               double needBytes,
                                               int64_t ranksHere,
                                               int64_t threads);

/// Under an address-space limit, caps glibc's heaps at a few (each
/// reserves 64 MiB of address space); nothing otherwise.
void limitHeapArenas(const AddressSpace &space);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_EXEC_MEMORYCHECK_H
