//===- NcclComm.cpp - The `nccl` backend: one process and GPU per rank ----===//
//
// SPEC §11. Under mpirun every rank is a process with one GPU (its node-
// local rank); the NCCL unique id is broadcast over MPI (the bootstrap
// communicator, which also carries host-memory messages such as the trace)
// and ncclCommInitRank makes the world communicator. prepareGroups splits it
// (ncclCommSplit) into one communicator per group of the plan's list
// (core/Plan.h communicatorGroups), family by family, in the same order on
// every rank. A run of one rank needs no MPI: it makes its id itself.
//
// exchange() posts its batch in canonicalOrder as one ncclGroupStart/End of
// ncclSend/ncclRecv on the world communicator (NCCL pairs by posting order
// per peer, not by tag: the local backend's Matching::InPostingOrder proves
// every layout's order right on the CPU). Collectives over a prepared group
// are NCCL's (all-reduce, equal-count all-gather and reduce-scatter,
// broadcast); the rest run over exchange(). Everything is enqueued on the
// rank device's stream and returns at once.
//
// Faults: a watchdog thread follows each enqueued operation's event. When
// one has not finished within the timeout, or a communicator reports an
// asynchronous error, it aborts every communicator (ncclCommAbort), prints
// the rank, the instruction and the reason, and exits 2 (mpirun then ends
// every other rank). fail() aborts the communicators and, under MPI, the job.
//
// libnccl is opened with dlopen when the backend starts, so mimo-run starts
// (and runs every other backend) on machines without it.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Comm.h"

#include "runtime/device/Devices.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef MIMO_HAVE_NCCL
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <dlfcn.h>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>
#endif

namespace mimo::comm {

#ifndef MIMO_HAVE_NCCL

bool ncclBuilt() { return false; }

std::unique_ptr<Comm> makeNcclComm(Comm *, int64_t, std::string *error) {
  if (error)
    *error = "mimo-run was built without NCCL (nccl.h was not found when it "
             "was configured): rebuild with the CUDA toolkit's NCCL, or use "
             "--backend local (every rank a thread, one GPU shared) or "
             "--backend mpi --device cpu";
  return nullptr;
}

#else

bool ncclBuilt() { return true; }

namespace {

using Clock = std::chrono::steady_clock;

struct NcclApi {
  decltype(&ncclGetVersion) getVersion;
  decltype(&ncclGetUniqueId) getUniqueId;
  decltype(&ncclCommInitRank) commInitRank;
  decltype(&ncclCommSplit) commSplit;
  decltype(&ncclCommAbort) commAbort;
  decltype(&ncclCommDestroy) commDestroy;
  decltype(&ncclCommGetAsyncError) commGetAsyncError;
  decltype(&ncclGetErrorString) getErrorString;
  decltype(&ncclGetLastError) getLastError;
  decltype(&ncclGroupStart) groupStart;
  decltype(&ncclGroupEnd) groupEnd;
  decltype(&ncclSend) send;
  decltype(&ncclRecv) recv;
  decltype(&ncclAllReduce) allReduce;
  decltype(&ncclBroadcast) broadcast;
  decltype(&ncclAllGather) allGather;
  decltype(&ncclReduceScatter) reduceScatter;
};

struct Loaded {
  NcclApi api{};
  std::string error;
};

Loaded load() {
  Loaded out;
  void *library = nullptr;
  std::string tried;
  for (const char *name : {"libnccl.so.2", "libnccl.so"}) {
    library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library)
      break;
    const char *why = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (why ? why : name);
  }
  if (!library) {
    out.error = "cannot load NCCL (" + tried +
                "): install NCCL (libnccl2, or the CUDA toolkit's) or add "
                "the directory of libnccl.so.2 to LD_LIBRARY_PATH";
    return out;
  }
  auto bind = [&](auto &slot, const char *symbol) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(
        dlsym(library, symbol));
    if (!slot && out.error.empty())
      out.error = std::string("the NCCL library has no ") + symbol +
                  " (mimo needs NCCL 2.18 or later)";
  };
  NcclApi &a = out.api;
  bind(a.getVersion, "ncclGetVersion");
  bind(a.getUniqueId, "ncclGetUniqueId");
  bind(a.commInitRank, "ncclCommInitRank");
  bind(a.commSplit, "ncclCommSplit");
  bind(a.commAbort, "ncclCommAbort");
  bind(a.commDestroy, "ncclCommDestroy");
  bind(a.commGetAsyncError, "ncclCommGetAsyncError");
  bind(a.getErrorString, "ncclGetErrorString");
  bind(a.getLastError, "ncclGetLastError");
  bind(a.groupStart, "ncclGroupStart");
  bind(a.groupEnd, "ncclGroupEnd");
  bind(a.send, "ncclSend");
  bind(a.recv, "ncclRecv");
  bind(a.allReduce, "ncclAllReduce");
  bind(a.broadcast, "ncclBroadcast");
  bind(a.allGather, "ncclAllGather");
  bind(a.reduceScatter, "ncclReduceScatter");
  return out;
}

const NcclApi *ncclApi(std::string *error) {
  static const Loaded loaded = load();
  if (!loaded.error.empty()) {
    if (error)
      *error = loaded.error;
    return nullptr;
  }
  return &loaded.api;
}

std::string secondsText(std::chrono::duration<double> d) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", d.count());
  return buffer;
}

class NcclComm final : public Comm {
public:
  NcclComm(const NcclApi &api, ncclComm_t world, int64_t rank, int64_t size,
           Comm *bootstrap)
      : api(api), world(world), self(rank), worldSize(size),
        bootstrap(bootstrap) {
    watchdog = std::thread([this] { watch(); });
  }

  ~NcclComm() override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    watchdog.join();
    if (aborted.load())
      return;
    for (auto &[group, c] : groups)
      api.commDestroy(c);
    api.commDestroy(world);
  }

  int64_t rank() const override { return self; }
  int64_t size() const override { return worldSize; }
  const char *backendName() const override { return "nccl"; }
  Comm &hostComm() override { return bootstrap ? *bootstrap : *this; }

  void exchange(std::vector<P2POp> &ops) override {
    for (const P2POp &op : ops) {
      std::string problem;
      if (op.peer < 0 || op.peer >= worldSize)
        problem = "peer " + std::to_string(op.peer) +
                  " is outside the world of " + std::to_string(worldSize);
      else if (op.bytes < 0)
        problem = "negative size " + std::to_string(op.bytes);
      else if (op.bytes > 0 && !op.data)
        problem = "null buffer for " + std::to_string(op.bytes) + " bytes";
      if (!problem.empty())
        throw CommError("rank " + std::to_string(self) + ": bad " +
                        (op.isSend ? "send" : "receive") + inContext() + ": " +
                        problem);
    }
    if (ops.empty())
      return;
    // NCCL pairs each peer's messages in posting order: both ends post a
    // batch in the same canonical order.
    canonicalOrder(ops);
    cudaStream_t s = stream();
    check(api.groupStart(), "ncclGroupStart", nullptr);
    for (const P2POp &op : ops) {
      if (op.bytes == 0)
        continue; // both ends know the size: neither posts it
      size_t n = static_cast<size_t>(op.bytes);
      int peer = static_cast<int>(op.peer);
      ncclResult_t r = op.isSend
                           ? api.send(op.data, n, ncclUint8, peer, world, s)
                           : api.recv(op.data, n, ncclUint8, peer, world, s);
      if (r != ncclSuccess) {
        api.groupEnd();
        check(r, op.isSend ? "ncclSend" : "ncclRecv", world);
      }
    }
    check(api.groupEnd(), "ncclGroupEnd", world);
    follow("exchange");
  }

  void fail(const std::string &message) override {
    abortAll();
    if (bootstrap)
      bootstrap->fail(message); // prints it and ends the MPI job
  }

protected:
  bool nativeAllReduce(const std::vector<int64_t> &group, device::DType type,
                       void *data, int64_t count, bool max) override {
    ncclComm_t c = commOf(group);
    if (!c || (type != device::DType::F32 && type != device::DType::F64))
      return false;
    if (count > 0) {
      check(
          api.allReduce(data, data, static_cast<size_t>(count),
                        type == device::DType::F32 ? ncclFloat32 : ncclFloat64,
                        max ? ncclMax : ncclSum, c, stream()),
          "ncclAllReduce", c);
      follow("all-reduce");
    }
    return true;
  }
  bool nativeAllGather(const std::vector<int64_t> &group, const float *in,
                       int64_t count, float *out) override {
    ncclComm_t c = commOf(group);
    if (!c)
      return false;
    if (count > 0) {
      check(api.allGather(in, out, static_cast<size_t>(count), ncclFloat32, c,
                          stream()),
            "ncclAllGather", c);
      follow("all-gather");
    }
    return true;
  }
  bool nativeReduceScatter(const std::vector<int64_t> &group, const float *in,
                           int64_t count, float *out) override {
    ncclComm_t c = commOf(group);
    if (!c)
      return false;
    if (count > 0) {
      check(api.reduceScatter(in, out, static_cast<size_t>(count), ncclFloat32,
                              ncclSum, c, stream()),
            "ncclReduceScatter", c);
      follow("reduce-scatter");
    }
    return true;
  }
  bool nativeBroadcast(const std::vector<int64_t> &group, size_t rootIndex,
                       void *data, int64_t bytes) override {
    ncclComm_t c = commOf(group);
    if (!c)
      return false;
    if (bytes > 0) {
      check(api.broadcast(data, data, static_cast<size_t>(bytes), ncclUint8,
                          static_cast<int>(rootIndex), c, stream()),
            "ncclBroadcast", c);
      follow("broadcast");
    }
    return true;
  }

  /// One ncclCommSplit of the world per family, on every rank in the same
  /// order; ranks in none of the family's groups pass NCCL_SPLIT_NOCOLOR.
  void createGroups(
      const std::vector<std::vector<std::vector<int64_t>>> &families) override {
    for (const auto &family : families) {
      int color = NCCL_SPLIT_NOCOLOR, key = 0;
      for (size_t g = 0; g < family.size(); ++g)
        for (size_t i = 0; i < family[g].size(); ++i)
          if (family[g][i] == self) {
            color = static_cast<int>(g);
            key = static_cast<int>(i);
          }
      if (family.size() == 1 &&
          family[0].size() == static_cast<size_t>(worldSize))
        continue; // the world itself
      ncclComm_t split = nullptr;
      check(api.commSplit(world, color, key, &split, nullptr), "ncclCommSplit",
            world);
      if (color != NCCL_SPLIT_NOCOLOR) {
        std::lock_guard<std::mutex> lock(mutex);
        groups[family[static_cast<size_t>(color)]] = split;
      }
    }
  }

private:
  std::string inContext() const {
    return context.empty() ? std::string() : " in " + context;
  }

  cudaStream_t stream() {
    void *native = device().nativeStream();
    if (!native)
      throw CommError("rank " + std::to_string(self) +
                      ": the nccl backend moves GPU memory; its device has "
                      "no CUDA stream (use --device cuda)");
    return static_cast<cudaStream_t>(native);
  }

  ncclComm_t commOf(const std::vector<int64_t> &group) {
    if (group.size() == static_cast<size_t>(worldSize))
      return world;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = groups.find(group);
    return it == groups.end() ? nullptr : it->second;
  }

  void check(ncclResult_t result, const char *call, ncclComm_t c) {
    if (result == ncclSuccess)
      return;
    std::string detail = c ? api.getLastError(c) : "";
    throw CommError("rank " + std::to_string(self) + ": " + call +
                    " failed: " + api.getErrorString(result) +
                    (detail.empty() ? "" : " (" + detail + ")") + inContext());
  }

  /// Hands the watchdog the point the stream reached after `what`.
  void follow(const char *what) {
    device::EventPtr event = device().record();
    std::lock_guard<std::mutex> lock(mutex);
    pending.push_back(
        {std::move(event),
         std::string(what) + (context.empty() ? "" : " in ") + context,
         Clock::now()});
    // Completed entries are dropped by the watchdog; keep the list short
    // when it lags.
    while (pending.size() > 4096)
      pending.pop_front();
  }

  void abortAll() {
    if (aborted.exchange(true))
      return;
    std::lock_guard<std::mutex> lock(mutex);
    for (auto &[group, c] : groups)
      api.commAbort(c);
    api.commAbort(world);
  }

  /// Polls every 100 ms: drops finished operations, fails on a timeout or
  /// an asynchronous NCCL error.
  void watch() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      wake.wait_for(lock, std::chrono::milliseconds(100));
      if (stopping || aborted.load())
        break;
      std::string problem;
      try {
        while (!pending.empty() && pending.front().event &&
               pending.front().event->reached())
          pending.pop_front();
        if (!pending.empty() && !pending.front().event)
          pending.pop_front();
      } catch (const std::exception &e) {
        problem = std::string("the GPU reported a fault: ") + e.what();
      }
      if (problem.empty() && !pending.empty() &&
          Clock::now() - pending.front().posted > getTimeout())
        problem = "timed out after " + secondsText(getTimeout()) +
                  " s waiting for the peers of " + pending.front().what;
      std::vector<ncclComm_t> all = {world};
      for (auto &[group, c] : groups)
        all.push_back(c);
      for (ncclComm_t c : all) {
        ncclResult_t state = ncclSuccess;
        if (problem.empty() &&
            api.commGetAsyncError(c, &state) == ncclSuccess &&
            state != ncclSuccess && state != ncclInProgress)
          problem = std::string("NCCL reported ") + api.getErrorString(state) +
                    " (" + api.getLastError(c) + ")" +
                    (pending.empty() ? "" : " in " + pending.front().what);
      }
      if (problem.empty())
        continue;
      lock.unlock();
      std::fflush(stdout);
      std::fprintf(stderr, "mimo-run: rank %lld failed: %s\n",
                   static_cast<long long>(self), problem.c_str());
      std::fflush(stderr);
      abortAll();
      std::_Exit(2); // mpirun ends the other ranks
    }
  }

  const NcclApi &api;
  ncclComm_t world;
  int64_t self, worldSize;
  Comm *bootstrap;
  std::map<std::vector<int64_t>, ncclComm_t> groups;
  std::atomic<bool> aborted{false};

  struct Pending {
    device::EventPtr event;
    std::string what;
    Clock::time_point posted;
  };
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Pending> pending;
  bool stopping = false;
  std::thread watchdog;
};

} // namespace

std::unique_ptr<Comm> makeNcclComm(Comm *bootstrap, int64_t localRank,
                                   std::string *error) {
  auto failWith = [&](const std::string &text) -> std::unique_ptr<Comm> {
    if (error)
      *error = text;
    return nullptr;
  };
  std::string loadError;
  const NcclApi *api = ncclApi(&loadError);
  int64_t rank = bootstrap ? bootstrap->rank() : 0;
  int64_t size = bootstrap ? bootstrap->size() : 1;
  // Every rank agrees whether all can start before any enters NCCL (one
  // that stops alone would leave the others waiting in ncclCommInitRank).
  const device::CudaStatus &cuda = device::cudaStatus();
  std::string problem;
  if (!api)
    problem = loadError;
  else if (cuda.devices == 0)
    problem = "the nccl backend needs a GPU per rank: " + cuda.problem;
  int ordinal =
      cuda.devices > 0 ? static_cast<int>(localRank % cuda.devices) : 0;
  std::vector<int64_t> all(static_cast<size_t>(size));
  for (int64_t r = 0; r < size; ++r)
    all[static_cast<size_t>(r)] = r;
  if (bootstrap) {
    float bad = problem.empty() ? 0.0f : 1.0f;
    bootstrap->allReduceMax(all, &bad, 1);
    if (bad > 0 && problem.empty())
      problem = "another rank cannot start the nccl backend (it says why)";
    if (problem.empty()) {
      // NCCL refuses two ranks of one communicator on one GPU: rank 0
      // compares every rank's GPU UUID (CUDA_VISIBLE_DEVICES may give each
      // process a different GPU under the same ordinal) and tells all.
      std::string uuid = device::gpuUuid(ordinal);
      uuid.resize(32, '\0');
      char verdict[512] = {};
      if (rank == 0) {
        std::vector<std::string> uuids(static_cast<size_t>(size));
        uuids[0] = uuid;
        for (int64_t r = 1; r < size; ++r) {
          uuids[static_cast<size_t>(r)].resize(32);
          bootstrap->recv(r, 7, uuids[static_cast<size_t>(r)].data(), 32);
        }
        for (int64_t a = 0; a < size && !verdict[0]; ++a)
          for (int64_t b = a + 1; b < size && !verdict[0]; ++b)
            if (uuids[static_cast<size_t>(a)][0] &&
                uuids[static_cast<size_t>(a)] == uuids[static_cast<size_t>(b)])
              std::snprintf(
                  verdict, sizeof verdict,
                  "ranks %lld and %lld would share one GPU, and NCCL refuses "
                  "two ranks of one communicator on one GPU (\"Duplicate "
                  "GPU\"): start at most one rank per GPU (mpirun -np <= the "
                  "GPUs), or run every rank as a thread of one process with "
                  "--backend local, which shares a GPU among ranks",
                  static_cast<long long>(a), static_cast<long long>(b));
      } else {
        bootstrap->send(0, 7, uuid.data(), 32);
      }
      bootstrap->broadcast(all, 0, verdict, sizeof verdict);
      problem = verdict;
    }
  }
  if (!problem.empty())
    return failWith(problem);
  // The rank's GPU becomes this thread's current device (NCCL binds its
  // communicators to it); the executor's device takes the same ordinal.
  try {
    device::makeDevice(device::DeviceKind::Cuda, ordinal);
  } catch (const std::exception &e) {
    return failWith(std::string("cannot open the GPU of local rank ") +
                    std::to_string(localRank) + ": " + e.what());
  }
  ncclUniqueId id{};
  if (rank == 0) {
    ncclResult_t r = api->getUniqueId(&id);
    if (r != ncclSuccess)
      return failWith(std::string("ncclGetUniqueId failed: ") +
                      api->getErrorString(r));
  }
  if (bootstrap)
    bootstrap->broadcast(all, 0, &id, sizeof(id));
  ncclComm_t world = nullptr;
  ncclResult_t r = api->commInitRank(&world, static_cast<int>(size), id,
                                     static_cast<int>(rank));
  if (r != ncclSuccess)
    return failWith(std::string("ncclCommInitRank of rank ") +
                    std::to_string(rank) + " of " + std::to_string(size) +
                    " failed: " + api->getErrorString(r) +
                    " (NCCL_DEBUG=WARN says more)");
  return std::make_unique<NcclComm>(*api, world, rank, size, bootstrap);
}

#endif // MIMO_HAVE_NCCL

} // namespace mimo::comm
