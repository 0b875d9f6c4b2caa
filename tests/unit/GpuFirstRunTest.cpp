//===- GpuFirstRunTest.cpp - What a first multi-GPU job relies on ---------===//
//
// The rules of the CUDA device and the nccl backend that one GPU cannot
// show, run on the CPU: against a fake 8-GPU runtime that records every
// device switch (GpuSelection.h), each of 8 mpirun processes touches only
// its own GPU and leaves its thread's current GPU as it found it; the
// memory check divides a GPU among the processes that use it, not among
// the node's; a kernel's shared-memory opt-in is set once per GPU, also
// when rank threads race; single-rank groups get no communicator; the
// watchdog's exit is bounded when the abort hangs; and the warm-up opens
// every peer connection and group before the first step.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/BoundedExit.h"
#include "runtime/comm/Comm.h"
#include "runtime/comm/GroupSplit.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/device/Devices.h"
#include "runtime/device/GpuSelection.h"
#include "runtime/device/OncePerDevice.h"
#include "runtime/exec/MemoryCheck.h"
#include "runtime/plan/PlanFile.h"
#include "tests/unit/TestModels.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

using namespace mimo;
namespace gpu = mimo::device::gpu;

namespace {

//===--- A fake runtime of 8 GPUs --------------------------------------===//

constexpr int kGpus = 8;
constexpr int64_t kGiB = int64_t(1) << 30;

/// What the fake saw: every GPU made current by a switch (a context on
/// it), every query.
struct FakeGpus {
  std::mutex mutex;
  std::set<int> touched;
  int64_t freeBytes = 80 * kGiB;
  /// A fresh process: nothing touched, nothing chosen.
  void reset() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      touched.clear();
    }
    gpu::forgetSelectionsForTesting();
  }
} fake;
thread_local int fakeCurrent = 0; // the runtime's default: GPU 0

const gpu::SelectionApi fakeApi{[](int *ordinal) {
                                  *ordinal = fakeCurrent;
                                  return 0;
                                },
                                [](int ordinal) {
                                  if (ordinal < 0 || ordinal >= kGpus)
                                    return 101; // cudaErrorInvalidDevice
                                  std::lock_guard<std::mutex> lock(fake.mutex);
                                  fake.touched.insert(ordinal);
                                  fakeCurrent = ordinal;
                                  return 0;
                                },
                                [](size_t *free, size_t *total) {
                                  std::lock_guard<std::mutex> lock(fake.mutex);
                                  fake.touched.insert(fakeCurrent);
                                  *free = static_cast<size_t>(fake.freeBytes);
                                  *total = static_cast<size_t>(80 * kGiB);
                                  return 0;
                                }};

int64_t fakeAvailable(device::DeviceKind, int ordinal) {
  return gpu::freeBytes(fakeApi, ordinal);
}

Plan basePlan() {
  return test::requirePlan(test::requireConfig(
      parseModelConfig(test::baseModel().dump(), "model.json")));
}

TEST(GpuSelection, CurrentGpuIsAskedNotCachedAndQueriesRestoreIt) {
  fake.reset();
  fakeCurrent = 0;
  // A fresh thread: the runtime says GPU 0, but no context is there yet.
  // Asking about GPU 2 must not go back to GPU 0 afterwards (a context on
  // GPU 0 in every process).
  EXPECT_EQ(gpu::freeBytes(fakeApi, 2), 80 * kGiB);
  EXPECT_EQ(fake.touched, std::set<int>{2});
  fake.reset();
  fakeCurrent = 3;
  // Already current: no switch (no new context).
  EXPECT_TRUE(gpu::makeCurrent(fakeApi, 3));
  EXPECT_TRUE(fake.touched.empty());
  // Something else (NCCL, a probe) moved the thread: the runtime is asked,
  // so the device's next call moves it back.
  fakeCurrent = 5;
  EXPECT_TRUE(gpu::makeCurrent(fakeApi, 3));
  EXPECT_EQ(fakeCurrent, 3);
  // Asking another GPU's free memory leaves the thread where it was.
  EXPECT_EQ(gpu::freeBytes(fakeApi, 6), 80 * kGiB);
  EXPECT_EQ(fakeCurrent, 3);
  {
    gpu::ScopedDevice scoped(fakeApi, 7);
    EXPECT_TRUE(scoped.ok());
    EXPECT_EQ(fakeCurrent, 7);
  }
  EXPECT_EQ(fakeCurrent, 3);
  // A GPU that does not exist: refused, nothing changed.
  EXPECT_EQ(gpu::freeBytes(fakeApi, 9), -1);
  EXPECT_EQ(fakeCurrent, 3);
  fakeCurrent = 0;
}

TEST(GpuSelection, EightProcessesEachTouchOnlyTheirOwnGpu) {
  // mpirun -np 8 on one node of 8 GPUs: process p is rank p, node-local
  // rank p. Before the fix every process asked every rank's GPU (8
  // contexts a process, the last one current).
  Plan plan = basePlan();
  ASSERT_EQ(plan.topology.worldSize, 8);
  for (int p = 0; p < 8; ++p) {
    fake.reset();
    fakeCurrent = 0;
    std::optional<std::string> problem = exec::processMemoryProblem(
        plan, p, device::DeviceKind::Cuda, kGpus, p, 8, fakeAvailable);
    EXPECT_FALSE(problem) << *problem;
    EXPECT_EQ(fake.touched, std::set<int>{p}) << "process " << p;
    EXPECT_EQ(gpu::processOrdinal(p, kGpus), p);
  }
  // 16 processes on 8 GPUs: processes p and p + 8 share GPU p.
  fake.reset();
  (void)exec::processMemoryProblem(plan, 3, device::DeviceKind::Cuda, kGpus, 11,
                                   16, fakeAvailable);
  EXPECT_EQ(fake.touched, std::set<int>{3});
  // The thread-per-rank run asks each GPU its ranks use, once per GPU.
  fake.reset();
  std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  (void)exec::memoryProblem(plan, all, device::DeviceKind::Cuda, 2, 1,
                            fakeAvailable);
  EXPECT_EQ(fake.touched, (std::set<int>{0, 1}));
  fakeCurrent = 0;
}

TEST(GpuSelection, AGpuIsSharedByTheProcessesThatUseItNotByTheNode) {
  EXPECT_EQ(gpu::processesOnGpu(0, 8, 8), 1);
  EXPECT_EQ(gpu::processesOnGpu(7, 8, 8), 1);
  EXPECT_EQ(gpu::processesOnGpu(0, 16, 8), 2);
  EXPECT_EQ(gpu::processesOnGpu(2, 3, 8), 1);
  EXPECT_EQ(gpu::processesOnGpu(5, 3, 8), 1); // unused: still one share
  EXPECT_EQ(gpu::processesOnGpu(0, 5, 2), 3); // local ranks 0 2 4
  EXPECT_EQ(gpu::processesOnGpu(1, 5, 2), 2); // 1 3

  // A rank needing 12 GiB fits an 80 GB GPU of its own: the old share (the
  // node's 8 processes: 10 GiB each) refused it.
  Plan plan = basePlan();
  auto needing = [&](int64_t free) {
    fake.freeBytes = free;
    return exec::processMemoryProblem(plan, 4, device::DeviceKind::Cuda, kGpus,
                                      4, 8, fakeAvailable);
  };
  std::vector<RankMemory> estimate = memoryPlan(plan.topology, plan.config);
  const int64_t need = estimate[4].totalBytes;
  EXPECT_FALSE(needing(need + need / 2)); // 1.5x its need: fits
  std::optional<std::string> tight = needing(need / 2);
  ASSERT_TRUE(tight);
  EXPECT_NE(tight->find("on GPU 4 for ranks 4"), std::string::npos) << *tight;
  EXPECT_EQ(tight->find("its share"), std::string::npos) << *tight;
  // 16 processes on 8 GPUs: GPU 4 is shared by two, each gets half.
  fake.freeBytes = need + need / 2;
  std::optional<std::string> halved = exec::processMemoryProblem(
      plan, 4, device::DeviceKind::Cuda, kGpus, 4, 16, fakeAvailable);
  ASSERT_TRUE(halved);
  EXPECT_NE(halved->find("its share: 2 processes"), std::string::npos)
      << *halved;
  // On the CPU every process of the node shares the host's memory.
  fake.freeBytes = 80 * kGiB;
  static int64_t hostFree = 0;
  hostFree = need * 4;
  auto host = [](device::DeviceKind, int) { return hostFree; };
  EXPECT_FALSE(exec::processMemoryProblem(plan, 4, device::DeviceKind::Cpu, 0,
                                          0, 2, host));
  EXPECT_TRUE(exec::processMemoryProblem(plan, 4, device::DeviceKind::Cpu, 0, 0,
                                         8, host));
}

TEST(SharedMemoryOptIn, SetOncePerKernelAndGpuWhileRankThreadsRace) {
  device::OncePerDevice registry;
  static int kernelA = 0, kernelB = 0;
  std::atomic<int> calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        const void *kernel = (i + t) % 2 ? &kernelA : &kernelB;
        EXPECT_EQ(registry.ensure(kernel, t % 2,
                                  [&] {
                                    ++calls;
                                    return 0;
                                  }),
                  0);
      }
    });
  for (std::thread &t : threads)
    t.join();
  // Two kernels on two GPUs: four settings, whatever the interleaving.
  EXPECT_EQ(calls.load(), 4);
  EXPECT_EQ(registry.size(), 4u);
  // A failure is returned and tried again.
  int tries = 0;
  EXPECT_EQ(registry.ensure(&kernelA, 5, [&] { return ++tries, 1; }), 1);
  EXPECT_EQ(registry.ensure(&kernelA, 5, [&] { return ++tries, 0; }), 0);
  EXPECT_EQ(registry.ensure(&kernelA, 5, [&] { return ++tries, 0; }), 0);
  EXPECT_EQ(tries, 2);
}

TEST(GroupSplit, SingleRankGroupsGetNoCommunicatorAndTheRanksAgree) {
  // World 4: a family of the world itself, one of pairs, one of single
  // ranks (dp 1), and one mixing a pair with single ranks.
  std::vector<std::vector<std::vector<int64_t>>> families = {
      {{0, 1, 2, 3}},
      {{0, 1}, {2, 3}},
      {{0}, {1}, {2}, {3}},
      {{0, 2}, {1}, {3}}};
  for (int64_t self = 0; self < 4; ++self) {
    std::vector<comm::GroupSplit> s = comm::groupSplits(families, self, 4);
    ASSERT_EQ(s.size(), 4u);
    EXPECT_FALSE(s[0].split); // the world communicator serves it
    EXPECT_TRUE(s[1].split);
    EXPECT_EQ(s[1].color, self < 2 ? 0 : 1);
    EXPECT_EQ(s[1].key, self % 2);
    EXPECT_FALSE(s[2].split); // every rank skips it: nobody waits in it
    EXPECT_TRUE(s[3].split);  // every rank calls it ...
    EXPECT_EQ(s[3].color, self == 0 || self == 2 ? 0 : -1); // ... 1, 3: none
  }
}

TEST(GroupSplit, ChannelsSplitTheWorldTooAndRingsConnectTheirNeighbours) {
  // A channel's family that is the world still gets a communicator of its
  // own (its operations must not queue behind the world's).
  std::vector<std::vector<std::vector<int64_t>>> families = {{{0, 1, 2, 3}}};
  for (int64_t self = 0; self < 4; ++self) {
    std::vector<comm::GroupSplit> s =
        comm::groupSplits(families, self, 4, /*splitWorld=*/true);
    EXPECT_TRUE(s[0].split);
    EXPECT_EQ(s[0].color, 0);
    EXPECT_EQ(s[0].key, self);
    EXPECT_FALSE(comm::groupSplits(families, self, 4)[0].split);
  }
  // Ring CP's neighbours, as indices in the group: the one before and the
  // one after, once each.
  EXPECT_EQ(comm::ringNeighbours({3, 5, 7, 9}, 3),
            (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(comm::ringNeighbours({3, 5, 7, 9}, 7),
            (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(comm::ringNeighbours({3, 5, 7}, 5), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(comm::ringNeighbours({4, 6}, 6), (std::vector<int64_t>{0}));
  EXPECT_TRUE(comm::ringNeighbours({4}, 4).empty());
  EXPECT_TRUE(comm::ringNeighbours({4, 6}, 5).empty());
  // Every neighbour relation is mutual: what one end sends the other
  // receives in the same connecting batch.
  const std::vector<int64_t> group = {0, 2, 4, 6, 8};
  for (size_t i = 0; i < group.size(); ++i)
    for (int64_t j : comm::ringNeighbours(group, group[i])) {
      std::vector<int64_t> back =
          comm::ringNeighbours(group, group[static_cast<size_t>(j)]);
      EXPECT_NE(std::find(back.begin(), back.end(), int64_t(i)), back.end());
    }
}

TEST(BoundedExit, AnAbortThatHangsStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The cleanup never returns (ncclCommAbort waiting on a blocked rank):
  // the process still ends with the code, after the limit.
  EXPECT_EXIT(comm::exitAfter(
                  [] {
                    std::fprintf(stderr, "aborting\n");
                    for (;;)
                      std::this_thread::sleep_for(std::chrono::seconds(1));
                  },
                  std::chrono::milliseconds(200), 2),
              testing::ExitedWithCode(2), "aborting");
  // A cleanup that returns: the process ends at once with the code.
  EXPECT_EXIT(comm::exitAfter([] { std::fprintf(stderr, "aborted\n"); },
                              std::chrono::hours(1), 3),
              testing::ExitedWithCode(3), "aborted");
}

TEST(WarmUp, EveryPeerAndGroupIsOpenedBeforeTheFirstStep) {
  // The executor warms a rank's message peers (the plan's) and its prepared
  // groups; on the local backend emulating NCCL's pairing.
  Plan plan = basePlan();
  const int64_t world = plan.topology.worldSize;
  std::vector<std::vector<int64_t>> peers(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r) {
    peers[static_cast<size_t>(r)] =
        messagePeers(plan.topology,
                     plan.programs[static_cast<size_t>(
                         plan.rankProgram[static_cast<size_t>(r)])],
                     r);
    EXPECT_FALSE(peers[static_cast<size_t>(r)].empty()) << r;
  }
  // Symmetric: each end lists the other.
  for (int64_t r = 0; r < world; ++r)
    for (int64_t p : peers[static_cast<size_t>(r)]) {
      const std::vector<int64_t> &back = peers[static_cast<size_t>(p)];
      EXPECT_TRUE(std::binary_search(back.begin(), back.end(), r))
          << r << " -> " << p;
    }
  // vlm-fan-in: the encoder ranks 0-3 send to the language's bridge
  // leader, rank 4 (stage 0, tp 0), which sends on to stage 1's rank 6;
  // rank 5 (tp 1) talks only to its stage-1 peer 7.
  EXPECT_EQ(peers[0], (std::vector<int64_t>{4}));
  EXPECT_EQ(peers[4], (std::vector<int64_t>{0, 1, 2, 3, 6}));
  EXPECT_EQ(peers[5], (std::vector<int64_t>{7}));

  std::shared_ptr<comm::LocalWorld> localWorld =
      comm::makeLocalWorld(world, comm::Matching::InPostingOrder);
  auto groups = communicatorGroups(plan.topology);
  std::vector<std::string> failures(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<comm::Comm> c = comm::makeLocalComm(localWorld, r);
      c->setTimeout(std::chrono::seconds(30));
      c->requirePreparedGroups(true);
      try {
        c->prepareGroups(groups);
        c->warmUp(peers[static_cast<size_t>(r)]);
        c->warmUp(peers[static_cast<size_t>(r)]); // again: still paired
      } catch (const std::exception &e) {
        failures[static_cast<size_t>(r)] = e.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (int64_t r = 0; r < world; ++r)
    EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "rank " << r;
}

} // namespace

// MFU is customarily taken of the datasheet's dense bf16 peak (989.4 on an
// H100 SXM, at its 1830 MHz boost clock), not of the peak clock CUDA
// reports (1980 MHz: 1070): the first H100 run's profile said 1070.
TEST(DatasheetPeak, KnownGpusByTheNameCudaReports) {
  using mimo::device::datasheetBf16Tflops;
  EXPECT_DOUBLE_EQ(datasheetBf16Tflops("NVIDIA H100 80GB HBM3"), 989.4);
  EXPECT_DOUBLE_EQ(datasheetBf16Tflops("NVIDIA H200"), 989.4);
  EXPECT_DOUBLE_EQ(datasheetBf16Tflops("NVIDIA H100 PCIe"), 756.5);
  EXPECT_DOUBLE_EQ(datasheetBf16Tflops("NVIDIA H100 NVL"), 835.5);
  EXPECT_DOUBLE_EQ(datasheetBf16Tflops("NVIDIA A100-SXM4-80GB"), 312.0);
  EXPECT_DOUBLE_EQ(datasheetBf16Tflops("NVIDIA GeForce RTX 4090"), 0.0);
}
