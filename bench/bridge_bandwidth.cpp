//===- bridge_bandwidth.cpp - Bridge throughput against the machine -------===//
//
// SPEC §10: bridge fan-in / fan-out throughput against memcpy (local
// backend, threads) or against raw MPI point-to-point (mpi backend, under
// `mpirun -np 5`), for 1 to 256 MiB, measured in the same run.
//
// A bridge moves a destination lane's rows from k source lanes (fan-in) or
// a source lane's rows to k destination lanes (fan-out) with pieces posted
// together (Comm::exchange), exactly as the executor does. k = 4.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Comm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#ifdef MIMO_HAVE_MPI
#include <mpi.h>
#endif

using namespace mimo;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kLanes = 4;
constexpr int64_t kMiB = 1 << 20;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// One bridge transfer of `bytes` in total on `comm` (ranks 0..4: rank 0
/// is the wide side's single lane, 1..4 the four lanes).
void bridge(comm::Comm &comm, bool fanIn, std::vector<char> &buffer,
            int64_t bytes) {
  int64_t piece = bytes / kLanes;
  std::vector<comm::P2POp> ops;
  if (comm.rank() == 0) {
    for (int64_t i = 0; i < kLanes; ++i)
      ops.push_back({!fanIn, i + 1, 7, buffer.data() + i * piece, piece});
  } else {
    ops.push_back({fanIn, 0, 7, buffer.data(), piece});
  }
  comm.exchange(ops);
}

int repetitions(int64_t bytes) {
  return static_cast<int>(std::max<int64_t>(2, 512 * kMiB / bytes / 4));
}

/// GB/s of single-threaded memcpy of `bytes`.
double memcpyBandwidth(int64_t bytes) {
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(a.size(), 0);
  std::memcpy(b.data(), a.data(), a.size()); // warm
  int reps = repetitions(bytes);
  auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r)
    std::memcpy(b.data(), a.data(), a.size());
  return static_cast<double>(bytes) * reps / seconds(t0, Clock::now()) / 1e9;
}

/// GB/s of one bridge direction over `reps` transfers of `bytes` (the
/// slowest rank's time), threads of one process.
double localBridge(int64_t bytes, bool fanIn, int reps) {
  auto world = comm::makeLocalWorld(kLanes + 1);
  std::vector<double> elapsed(kLanes + 1);
  std::vector<std::thread> threads;
  std::vector<int64_t> all;
  for (int64_t i = 0; i <= kLanes; ++i)
    all.push_back(i);
  for (int64_t r = 0; r <= kLanes; ++r)
    threads.emplace_back([&, r] {
      auto c = comm::makeLocalComm(world, r);
      std::vector<char> buffer(
          static_cast<size_t>(r == 0 ? bytes : bytes / kLanes), 1);
      bridge(*c, fanIn, buffer, bytes); // warm
      float token = 0;
      c->allReduceSum(all, &token, 1);
      auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i)
        bridge(*c, fanIn, buffer, bytes);
      elapsed[static_cast<size_t>(r)] = seconds(t0, Clock::now());
      // Keep every buffer alive until all ranks are done timing.
      c->allReduceSum(all, &token, 1);
    });
  for (auto &t : threads)
    t.join();
  double wall = *std::max_element(elapsed.begin(), elapsed.end());
  return static_cast<double>(bytes) * reps / wall / 1e9;
}

void runLocal() {
  std::printf("bridge throughput, local backend (threads), k = %lld lanes, "
              "best of 3 interleaved trials\n",
              static_cast<long long>(kLanes));
  std::printf("%10s %12s %12s %12s %10s %10s\n", "MiB", "memcpy GB/s",
              "fan-in GB/s", "fan-out GB/s", "in/memcpy", "out/memcpy");
  for (int64_t mib : {1, 4, 16, 64, 256}) {
    int64_t bytes = mib * kMiB;
    int reps = repetitions(bytes);
    double copy = 0, in = 0, out = 0;
    for (int trial = 0; trial < 3; ++trial) {
      copy = std::max(copy, memcpyBandwidth(bytes));
      in = std::max(in, localBridge(bytes, true, reps));
      out = std::max(out, localBridge(bytes, false, reps));
    }
    std::printf("%10lld %12.2f %12.2f %12.2f %9.0f%% %9.0f%%\n",
                static_cast<long long>(mib), copy, in, out, 100 * in / copy,
                100 * out / copy);
  }
}

#ifdef MIMO_HAVE_MPI
void runMpi() {
  std::string error;
  std::unique_ptr<comm::Comm> c = comm::makeMpiComm(&error);
  if (!c || c->size() != kLanes + 1) {
    if (!c || c->rank() == 0)
      std::fprintf(stderr, "run under mpirun -np %lld\n",
                   static_cast<long long>(kLanes + 1));
    comm::finalizeMpi();
    return;
  }
  bool root = c->rank() == 0;
  if (root)
    std::printf("bridge throughput, mpi backend, k = %lld lanes\n"
                "%10s %12s %12s %12s %10s %10s\n",
                static_cast<long long>(kLanes), "MiB", "p2p GB/s",
                "fan-in GB/s", "fan-out GB/s", "in/p2p", "out/p2p");
  for (int64_t mib : {1, 4, 16, 64, 256}) {
    int64_t bytes = mib * kMiB;
    int reps = repetitions(bytes);
    std::vector<char> buffer(static_cast<size_t>(bytes), 1);
    // Raw MPI point-to-point, rank 0 -> rank 1, the same total bytes.
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
      if (c->rank() == 0)
        MPI_Send(buffer.data(), static_cast<int>(bytes), MPI_BYTE, 1, 9,
                 MPI_COMM_WORLD);
      else if (c->rank() == 1)
        MPI_Recv(buffer.data(), static_cast<int>(bytes), MPI_BYTE, 0, 9,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double p2p =
        static_cast<double>(bytes) * reps / seconds(t0, Clock::now()) / 1e9;
    double rate[2];
    for (int direction = 0; direction < 2; ++direction) {
      bridge(*c, direction == 0, buffer, bytes);
      MPI_Barrier(MPI_COMM_WORLD);
      auto s0 = Clock::now();
      for (int i = 0; i < reps; ++i)
        bridge(*c, direction == 0, buffer, bytes);
      MPI_Barrier(MPI_COMM_WORLD);
      rate[direction] =
          static_cast<double>(bytes) * reps / seconds(s0, Clock::now()) / 1e9;
    }
    if (root)
      std::printf("%10lld %12.2f %12.2f %12.2f %9.0f%% %9.0f%%\n",
                  static_cast<long long>(mib), p2p, rate[0], rate[1],
                  100 * rate[0] / p2p, 100 * rate[1] / p2p);
  }
  comm::finalizeMpi();
}
#endif

} // namespace

int main() {
#ifdef MIMO_HAVE_MPI
  if (comm::launchedByMpirun()) {
    runMpi();
    return 0;
  }
#endif
  runLocal();
  return 0;
}
