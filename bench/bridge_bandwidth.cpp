//===- bridge_bandwidth.cpp - Bridge throughput against the machine -------===//
//
// docs/runtime.md: bridge fan-in / fan-out throughput against what the machine
// can do with the same pattern, for 1 to 256 MiB, measured in the same run:
//  - local backend (threads): fan-in (one receiver copies k pieces) against
//    one thread's memcpy of the same bytes; fan-out (k receivers copy a
//    piece each, at once) against k threads each memcpy-ing a piece at once.
//  - mpi backend (`mpirun -np 5`): each direction against raw MPI
//    Isend/Irecv of the same pieces between the same ranks.
//
// A bridge moves a destination lane's rows from k source lanes (fan-in) or
// a source lane's rows to k destination lanes (fan-out) with pieces posted
// together (Comm::exchange), exactly as the executor does. k = 4.
//
// usage: build/bin/bridge_bandwidth
//        mpirun -np 5 build/bin/bridge_bandwidth
// (as root, or with more ranks than cores: mpirun --allow-run-as-root
//  --oversubscribe -np 5 ..., or the OMPI_* variables of docs/runtime.md)
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

/// GB/s of `copiers` threads each memcpy-ing bytes / copiers at once (the
/// bridge's pattern without the bridge: one copier for fan-in, k for
/// fan-out).
double memcpyBandwidth(int64_t bytes, int64_t copiers) {
  int64_t piece = bytes / copiers;
  std::vector<std::vector<char>> from, to;
  for (int64_t i = 0; i < copiers; ++i) {
    from.emplace_back(static_cast<size_t>(piece), 1);
    to.emplace_back(static_cast<size_t>(piece), 0);
  }
  int reps = repetitions(bytes);
  auto copy = [&](int rounds) {
    std::vector<std::thread> threads;
    for (int64_t i = 0; i < copiers; ++i)
      threads.emplace_back([&, i] {
        for (int r = 0; r < rounds; ++r)
          std::memcpy(to[static_cast<size_t>(i)].data(),
                      from[static_cast<size_t>(i)].data(),
                      static_cast<size_t>(piece));
      });
    for (auto &t : threads)
      t.join();
  };
  copy(1); // warm
  auto t0 = Clock::now();
  copy(reps);
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
  std::printf("%6s %14s %12s %10s %14s %12s %10s\n", "MiB", "memcpy 1 GB/s",
              "fan-in GB/s", "in/copy", "memcpy 4 GB/s", "fan-out GB/s",
              "out/copy");
  for (int64_t mib : {1, 4, 16, 64, 256}) {
    int64_t bytes = mib * kMiB;
    int reps = repetitions(bytes);
    double copy1 = 0, copyK = 0, in = 0, out = 0;
    for (int trial = 0; trial < 3; ++trial) {
      copy1 = std::max(copy1, memcpyBandwidth(bytes, 1));
      copyK = std::max(copyK, memcpyBandwidth(bytes, kLanes));
      in = std::max(in, localBridge(bytes, true, reps));
      out = std::max(out, localBridge(bytes, false, reps));
    }
    std::printf("%6lld %14.2f %12.2f %9.0f%% %14.2f %12.2f %9.0f%%\n",
                static_cast<long long>(mib), copy1, in, 100 * in / copy1, copyK,
                out, 100 * out / copyK);
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
    std::printf("bridge throughput, mpi backend, k = %lld lanes, against "
                "raw MPI Isend/Irecv of the same pieces\n"
                "%6s %12s %12s %9s %12s %12s %9s\n",
                static_cast<long long>(kLanes), "MiB", "raw in GB/s",
                "fan-in GB/s", "in/raw", "raw out GB/s", "fan-out GB/s",
                "out/raw");
  for (int64_t mib : {1, 4, 16, 64, 256}) {
    int64_t bytes = mib * kMiB;
    int64_t piece = bytes / kLanes;
    int reps = repetitions(bytes);
    std::vector<char> buffer(static_cast<size_t>(bytes), 1);
    // The same pieces between the same ranks, with MPI alone.
    auto raw = [&](bool fanIn) {
      std::vector<MPI_Request> requests;
      if (c->rank() == 0) {
        for (int64_t l = 0; l < kLanes; ++l) {
          requests.emplace_back();
          char *at = buffer.data() + l * piece;
          if (fanIn)
            MPI_Irecv(at, static_cast<int>(piece), MPI_BYTE,
                      static_cast<int>(l + 1), 9, MPI_COMM_WORLD,
                      &requests.back());
          else
            MPI_Isend(at, static_cast<int>(piece), MPI_BYTE,
                      static_cast<int>(l + 1), 9, MPI_COMM_WORLD,
                      &requests.back());
        }
      } else {
        requests.emplace_back();
        if (fanIn)
          MPI_Isend(buffer.data(), static_cast<int>(piece), MPI_BYTE, 0, 9,
                    MPI_COMM_WORLD, &requests.back());
        else
          MPI_Irecv(buffer.data(), static_cast<int>(piece), MPI_BYTE, 0, 9,
                    MPI_COMM_WORLD, &requests.back());
      }
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(),
                  MPI_STATUSES_IGNORE);
    };
    double rate[2][2]; // [direction][raw, bridge]
    for (int direction = 0; direction < 2; ++direction)
      for (int kind = 0; kind < 2; ++kind) {
        auto once = [&] {
          if (kind == 0)
            raw(direction == 0);
          else
            bridge(*c, direction == 0, buffer, bytes);
        };
        once();
        MPI_Barrier(MPI_COMM_WORLD);
        auto s0 = Clock::now();
        for (int i = 0; i < reps; ++i)
          once();
        MPI_Barrier(MPI_COMM_WORLD);
        rate[direction][kind] =
            static_cast<double>(bytes) * reps / seconds(s0, Clock::now()) / 1e9;
      }
    if (root)
      std::printf("%6lld %12.2f %12.2f %8.0f%% %12.2f %12.2f %8.0f%%\n",
                  static_cast<long long>(mib), rate[0][0], rate[0][1],
                  100 * rate[0][1] / rate[0][0], rate[1][0], rate[1][1],
                  100 * rate[1][1] / rate[1][0]);
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
