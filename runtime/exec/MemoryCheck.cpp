//===- MemoryCheck.cpp - Will the plan fit, before anything is allocated --===//

#include "runtime/exec/MemoryCheck.h"

#include "runtime/cost/MemoryPlan.h"
#include "runtime/device/Devices.h"
#include "runtime/device/GpuSelection.h"

#include <algorithm>
#include <fstream>
#include <map>

#include <malloc.h>
#include <sys/resource.h>

namespace mimo::exec {

namespace {

/// "0-3 5 7" for sorted ranks.
std::string rankRanges(const std::vector<int64_t> &ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    text += (text.empty() ? "" : " ") + std::to_string(ranks[i]);
    if (j > i)
      text += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return text;
}

/// The refusal when `members` (sharing one memory, GPU `ordinal` or the
/// host's, with `sharers` processes) would not fit; nullopt otherwise.
std::optional<std::string>
sharedMemoryProblem(const std::vector<RankMemory> &estimate,
                    const std::vector<int64_t> &members, int ordinal,
                    int64_t sharers, device::DeviceKind kind,
                    AvailableBytes available) {
  int64_t room = available(kind, std::max(ordinal, 0));
  if (room < 0)
    return std::nullopt; // unknown: nothing to compare with
  room /= std::max<int64_t>(sharers, 1);
  double need = 0;
  int64_t largest = members.front();
  for (int64_t rank : members) {
    need += static_cast<double>(estimate[static_cast<size_t>(rank)].totalBytes);
    if (estimate[static_cast<size_t>(rank)].totalBytes >
        estimate[static_cast<size_t>(largest)].totalBytes)
      largest = rank;
  }
  if (need <= static_cast<double>(room))
    return std::nullopt;
  const RankMemory &big = estimate[static_cast<size_t>(largest)];
  std::string where = kind == device::DeviceKind::Cuda
                          ? "GPU " + std::to_string(ordinal)
                          : std::string("this machine's memory");
  std::string shared = sharers > 1 ? " (its share: " + std::to_string(sharers) +
                                         " processes of this node use it)"
                                   : "";
  return "/model: error: the layout needs about " + formatBytes(need) + " on " +
         where + " for ranks " + rankRanges(members) + ", but only " +
         formatBytes(static_cast<double>(room)) + " is available" + shared +
         "; the largest, rank " + std::to_string(largest) + ", needs " +
         formatBytes(static_cast<double>(big.totalBytes)) + " (weights " +
         formatBytes(static_cast<double>(big.paramBytes)) + ", gradients " +
         formatBytes(static_cast<double>(big.gradBytes)) + ", optimizer " +
         formatBytes(static_cast<double>(big.optimizerBytes)) +
         ", activations " +
         formatBytes(static_cast<double>(big.activationBytes)) +
         "); use more tp or pp for the largest module, a smaller "
         "micro_batch_size or seq_length, or more devices (`mimoc explain` "
         "shows every rank's estimate)";
}

} // namespace

std::optional<std::string> memoryProblem(const Plan &plan,
                                         const std::vector<int64_t> &ranks,
                                         device::DeviceKind kind, int gpus,
                                         int64_t share,
                                         AvailableBytes available) {
  if (!available)
    available = device::availableBytes;
  std::vector<RankMemory> estimate = memoryPlan(plan.topology, plan.config);
  // Ranks that share one memory: all of them on the CPU, those of one GPU.
  std::map<int, std::vector<int64_t>> groups;
  for (int64_t rank : ranks)
    groups[kind == device::DeviceKind::Cuda && gpus > 0
               ? static_cast<int>(rank % gpus)
               : -1]
        .push_back(rank);
  for (auto &[ordinal, members] : groups)
    if (std::optional<std::string> problem = sharedMemoryProblem(
            estimate, members, ordinal, share, kind, available))
      return problem;
  return std::nullopt;
}

std::optional<std::string> processMemoryProblem(const Plan &plan, int64_t rank,
                                                device::DeviceKind kind,
                                                int gpus, int64_t localRank,
                                                int64_t processesOnNode,
                                                AvailableBytes available) {
  if (!available)
    available = device::availableBytes;
  if (rank < 0 || rank >= plan.topology.worldSize)
    return std::nullopt;
  std::vector<RankMemory> estimate = memoryPlan(plan.topology, plan.config);
  if (kind == device::DeviceKind::Cuda && gpus > 0) {
    const int ordinal = device::gpu::processOrdinal(localRank, gpus);
    return sharedMemoryProblem(
        estimate, {rank}, ordinal,
        device::gpu::processesOnGpu(ordinal, processesOnNode, gpus), kind,
        available);
  }
  return sharedMemoryProblem(estimate, {rank}, -1,
                             std::max<int64_t>(processesOnNode, 1), kind,
                             available);
}

AddressSpace addressSpace() {
  AddressSpace space;
  auto status = [](const char *key) -> int64_t {
    std::ifstream in("/proc/self/status");
    std::string word;
    int64_t kib = 0;
    while (in >> word)
      if (word == key && in >> kib)
        return kib * 1024;
    return 0;
  };
  struct rlimit as{}, data{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    space.limit = static_cast<int64_t>(as.rlim_cur);
    space.used = status("VmSize:");
    space.name = "ulimit -v (RLIMIT_AS)";
  }
  if (::getrlimit(RLIMIT_DATA, &data) == 0 && data.rlim_cur != RLIM_INFINITY) {
    int64_t used = status("VmData:");
    if (space.limit < 0 ||
        static_cast<int64_t>(data.rlim_cur) - used < space.limit - space.used) {
      space.limit = static_cast<int64_t>(data.rlim_cur);
      space.used = used;
      space.name = "ulimit -d (RLIMIT_DATA)";
    }
  }
  return space;
}

int64_t threadReservations(int64_t ranksHere, int64_t threads) {
  const int64_t MiB = int64_t(1) << 20;
  const int64_t perThread = 128 * MiB /* OpenBLAS */ + 8 * MiB /* stack */;
  const int64_t arenas = 4 * 64 * MiB; // limitHeapArenas
  return std::max<int64_t>(ranksHere, 1) * std::max<int64_t>(threads, 1) *
             perThread +
         arenas;
}

std::optional<std::string> addressSpaceProblem(const AddressSpace &space,
                                               double needBytes,
                                               int64_t ranksHere,
                                               int64_t threads) {
  if (space.limit < 0)
    return std::nullopt;
  const double reserved =
      static_cast<double>(threadReservations(ranksHere, threads));
  const double total = static_cast<double>(space.used) + needBytes + reserved;
  if (total <= static_cast<double>(space.limit))
    return std::nullopt;
  return "error: " + space.name + " limits this process to " +
         formatBytes(static_cast<double>(space.limit)) +
         " of address space, and this run needs about " + formatBytes(total) +
         ": the layout's memory " + formatBytes(needBytes) + ", " +
         formatBytes(reserved) + " that its " +
         std::to_string(ranksHere * threads) +
         " compute threads reserve (OpenBLAS maps 128 MiB per thread at its "
         "first GEMM, and retries forever when it cannot), and " +
         formatBytes(static_cast<double>(space.used)) +
         " mapped already; raise the limit (ulimit -v unlimited, or at least "
         "the total), or run fewer ranks per process (mpirun) or fewer "
         "--threads";
}

void limitHeapArenas(const AddressSpace &space) {
  if (space.limit >= 0)
    (void)::mallopt(M_ARENA_MAX, 4);
}

} // namespace mimo::exec
