//===- NcclComm.cpp - The `nccl` backend: one process and GPU per rank ----===//
//
// docs/gpu.md. Under mpirun every rank is a process with one GPU (its node-
// local rank); the NCCL unique id is broadcast over MPI (the bootstrap
// communicator, which also carries host-memory messages such as the trace)
// and ncclCommInitRank makes the world communicator. prepareGroups splits it
// (ncclCommSplit) into one communicator per group of the plan's list
// (plan/Plan.h communicatorGroups), family by family, in the same order on
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
// Overlap (docs/gpu.md): prepareChannels splits a communicator per group
// of each channel family (plan/Plan.h channelFamilies); openChannel hands
// one family's to a channel's NcclComm, which enqueues on the channel's
// stream, exchanges over its group's communicator and has a watchdog of
// its own. The rank's NcclComm keeps those communicators and ends them
// after every channel is gone.
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
#include "runtime/plan/Plan.h"

#include "runtime/comm/BoundedExit.h"
#include "runtime/comm/GroupSplit.h"
#include "runtime/comm/OperationClock.h"
#include "runtime/device/Devices.h"
#include "runtime/device/GpuSelection.h"
#include "runtime/support/SharedLibrary.h"
#include "runtime/support/Versions.h"

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
  void *library = openSharedLibrary(
      {"libnccl.so.2", "libnccl.so"}, "NCCL",
      "install NCCL (libnccl2, or the CUDA toolkit's) or add the directory "
      "of libnccl.so.2 to LD_LIBRARY_PATH",
      out.error);
  if (!library)
    return out;
  auto bind = [&](auto &slot, const char *symbol) {
    bindSymbol(library, slot, symbol, "the NCCL library", out.error,
               " (mimo needs NCCL 2.18 or later)");
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
  // The features used (ncclCommSplit) need 2.18 (support/Versions.h).
  int version = 0;
  if (out.error.empty() && a.getVersion(&version) == ncclSuccess)
    out.error = ncclVersionProblem(version);
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

/// A point of a CUDA stream the rank's device does not own (the posted
/// messages' stream).
class StreamEvent final : public device::Event {
public:
  explicit StreamEvent(cudaStream_t stream) {
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) !=
            cudaSuccess ||
        cudaEventRecord(event, stream) != cudaSuccess)
      throw device::DeviceError("recording an event of the posted messages' "
                                "stream failed");
  }
  ~StreamEvent() override { cudaEventDestroy(event); }
  StreamEvent(const StreamEvent &) = delete;
  StreamEvent &operator=(const StreamEvent &) = delete;
  bool reached() const override {
    cudaError_t e = cudaEventQuery(event);
    if (e == cudaErrorNotReady)
      return false;
    if (e != cudaSuccess)
      throw device::DeviceError(std::string("the posted messages' stream: ") +
                                cudaGetErrorString(e));
    return true;
  }
  cudaEvent_t event = nullptr;
};

class NcclComm;

/// Posted sends on the posted messages' stream: waiting orders the rank's
/// stream after them (the host goes on). Messages to the rank itself are
/// done once its receivePosted has copied them.
class NcclPosted final : public PostedSends {
public:
  explicit NcclPosted(NcclComm &comm) : comm(comm) {}
  void wait() override;
  bool done() override {
    if (*selfLeft != 0)
      return false;
    for (const auto &event : finished)
      if (!event->reached())
        return false;
    return true;
  }
  NcclComm &comm;
  /// Each channel's point after the sends posted on it.
  std::vector<std::shared_ptr<StreamEvent>> finished;
  std::shared_ptr<int64_t> selfLeft = std::make_shared<int64_t>(0);
};

class NcclComm final : public Comm {
public:
  /// A posted messages' channel: the pair's communicator, and on the
  /// sender the stream its posted sends run on.
  struct Channel {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };

  /// Starts the watchdog; `initialize` then makes the world communicator.
  NcclComm(const NcclApi &api, int ordinal, int64_t rank, int64_t size,
           Comm *bootstrap)
      : api(api), ordinal(ordinal), self(rank), worldSize(size),
        bootstrap(bootstrap) {
    watchdog = std::thread([this] { watch(); });
  }

  /// A channel's communicator (openChannel): `family` holds the channel's
  /// communicators, which `owner` keeps (it destroys or aborts them, after
  /// every channel is gone); its own watchdog follows its operations.
  NcclComm(NcclComm &owner, std::map<std::vector<int64_t>, ncclComm_t> family)
      : api(owner.api), ordinal(owner.ordinal), self(owner.self),
        worldSize(owner.worldSize), bootstrap(nullptr), parent(&owner),
        groups(std::move(family)) {
    watchdog = std::thread([this] { watch(); });
  }

  ~NcclComm() override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    watchdog.join();
    // ncclCommDestroy waits for every operation issued: with one that never
    // finished (a failure unwinding) that is forever, so abort instead.
    bool quiet = true;
    try {
      for (const auto &p : pending.all())
        quiet = quiet && (!p.event || p.event->reached());
    } catch (const std::exception &) {
      quiet = false;
    }
    if (parent) { // the owner ends the channel's communicators
      if (!quiet)
        parent->channelsQuiet.store(false);
      return;
    }
    if (aborted.load() || !world)
      return;
    for (auto &[group, c] : groups)
      quiet ? api.commDestroy(c) : api.commAbort(c);
    for (ncclComm_t c : channelComms)
      quiet &&channelsQuiet.load() ? api.commDestroy(c) : api.commAbort(c);
    for (auto &[pair, channel] : channels)
      quiet ? api.commDestroy(channel.comm) : api.commAbort(channel.comm);
    quiet ? api.commDestroy(world) : api.commAbort(world);
    for (auto &[pair, channel] : channels)
      if (channel.stream) {
        cudaStreamSynchronize(channel.stream);
        cudaStreamDestroy(channel.stream);
      }
  }

  /// ncclCommInitRank of the world (blocking: the watchdog times it).
  std::string initialize(const ncclUniqueId &id) {
    ncclResult_t r;
    {
      HostCall call(*this, "ncclCommInitRank");
      r = api.commInitRank(&world, static_cast<int>(worldSize), id,
                           static_cast<int>(self));
    }
    if (r == ncclSuccess)
      return "";
    world = nullptr;
    return std::string("ncclCommInitRank of rank ") + std::to_string(self) +
           " of " + std::to_string(worldSize) +
           " failed: " + api.getErrorString(r) + " (NCCL_DEBUG=WARN says more)";
  }

  int64_t rank() const override { return self; }
  int64_t size() const override { return worldSize; }
  const char *backendName() const override { return "nccl"; }
  Capabilities capabilities() const override {
    return {/*ranksShareProcess=*/false, /*hostMemoryOnly=*/false,
            /*connectsLazily=*/true, /*opensChannels=*/true};
  }
  Comm &hostComm() override {
    return parent ? parent->hostComm() : bootstrap ? *bootstrap : *this;
  }
  /// NCCL connects a pair of ranks at their first message and a group's
  /// communicator at its first collective.

  void exchange(std::vector<P2POp> &ops) override {
    validate(ops);
    if (ops.empty())
      return;
    // NCCL pairs each peer's messages in posting order: both ends post a
    // batch in the same canonical order.
    canonicalOrder(ops);
    if (!parent) {
      group(ops, world, stream());
      follow("exchange");
      return;
    }
    // A channel: over the communicator of its group, whose members are
    // numbered in ascending order (the canonical order stays).
    const auto &[members, c] = ownGroup(ops);
    std::vector<P2POp> inGroup = ops;
    for (P2POp &op : inGroup)
      op.peer = static_cast<int64_t>(
          std::lower_bound(members.begin(), members.end(), op.peer) -
          members.begin());
    group(inGroup, c, stream());
    follow("exchange");
  }

  /// A channel's group holding this rank and every peer of `ops`, and its
  /// communicator.
  std::pair<const std::vector<int64_t>, ncclComm_t> &
  ownGroup(const std::vector<P2POp> &ops) {
    for (auto &entry : groups) {
      auto holds = [&](int64_t r) {
        return std::binary_search(entry.first.begin(), entry.first.end(), r);
      };
      if (holds(self) &&
          std::all_of(ops.begin(), ops.end(),
                      [&](const P2POp &op) { return holds(op.peer); }))
        return entry;
    }
    throw CommError("rank " + std::to_string(self) +
                    ": a channel's messages to ranks outside its groups" +
                    inContext());
  }

  /// Splits the channels' communicators (Comm::prepareChannels): one
  /// ncclCommSplit of the world per family, on every rank in the list's
  /// order, sharing the world's resources (splitShare); then connects each
  /// before the first step, family by family, with a one-value all-reduce
  /// and, for a ring, a byte each way with the neighbours.
  void prepareChannels(const std::vector<ChannelGroups> &families) override {
    if (parent || !channelFamilies.empty())
      throw CommError("rank " + std::to_string(self) +
                      ": the channels are prepared once, on the rank's own "
                      "communicator");
    std::vector<std::vector<std::vector<int64_t>>> lists;
    for (const ChannelGroups &f : families)
      lists.push_back(f.groups);
    const std::vector<GroupSplit> splits =
        groupSplits(lists, self, worldSize, /*splitWorld=*/true);
    channelFamilies.resize(families.size());
    familyOpened.assign(families.size(), false);
    for (size_t f = 0; f < families.size(); ++f) {
      const GroupSplit &split = splits[f];
      if (!split.split)
        continue;
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.splitShare = 1;
      ncclComm_t c = nullptr;
      {
        HostCall call(*this, "ncclCommSplit of a channel's communicators");
        check(api.commSplit(world,
                            split.color < 0 ? NCCL_SPLIT_NOCOLOR : split.color,
                            split.key, &c, &config),
              "ncclCommSplit", world);
      }
      if (split.color < 0)
        continue;
      std::lock_guard<std::mutex> lock(mutex); // the watchdog reads them
      channelFamilies[f][lists[f][static_cast<size_t>(split.color)]] = c;
      channelComms.push_back(c);
    }
    // 4 bytes summed, a byte sent, a byte from each of two neighbours.
    auto *scratch = static_cast<unsigned char *>(device().allocate(8));
    device().fillZero(scratch, 8);
    for (size_t f = 0; f < families.size(); ++f)
      for (auto &[members, c] : channelFamilies[f]) {
        {
          HostCall call(*this, "ncclAllReduce connecting a channel");
          check(api.allReduce(scratch, scratch, 1, ncclFloat32, ncclSum, c,
                              stream()),
                "ncclAllReduce", c);
        }
        if (!families[f].ring)
          continue;
        std::vector<P2POp> ops;
        const std::vector<int64_t> around = ringNeighbours(members, self);
        for (size_t i = 0; i < around.size(); ++i) {
          ops.push_back({true, around[i], 0, scratch + 4, 1});
          ops.push_back({false, around[i], 0, scratch + 5 + i, 1});
        }
        group(ops, c, stream());
      }
    if (cudaError_t e = cudaStreamSynchronize(stream()); e != cudaSuccess)
      throw CommError(
          "rank " + std::to_string(self) +
          ": connecting the channels failed: " + cudaGetErrorString(e));
    device().release(scratch);
  }

  /// The communicators of channel `families` (prepareChannels), each
  /// family once.
  std::unique_ptr<Comm>
  openChannel(const std::vector<size_t> &families) override {
    if (parent || families.empty() || families[0] >= channelFamilies.size() ||
        channelFamilies[families[0]].empty())
      return nullptr;
    std::map<std::vector<int64_t>, ncclComm_t> held;
    for (size_t family : families) {
      if (family >= channelFamilies.size())
        continue;
      if (familyOpened[family])
        throw CommError("rank " + std::to_string(self) + ": channel family " +
                        std::to_string(family) + " opened twice");
      familyOpened[family] = true;
      held.insert(channelFamilies[family].begin(),
                  channelFamilies[family].end());
    }
    auto channel = std::make_unique<NcclComm>(*this, std::move(held));
    channel->setTimeout(getTimeout());
    return channel;
  }

  /// Posted sends go on a channel per (sender, receiver) (plan/Plan.h
  /// postedChannel: a communicator of the two, split off the world by
  /// preparePosted, and a stream of the sender's), after the rank's stream
  /// has made their data; the receiver receives on the channel's
  /// communicator in its own stream. A posted message then waits only for
  /// those the same sender posted to the same receiver before it (the
  /// verifier proves each plan under these rules). Messages to this rank
  /// itself stay here until its receivePosted copies them.
  std::unique_ptr<PostedSends> postSends(std::vector<P2POp> ops) override {
    validate(ops);
    noPostedOnChannel();
    auto posted = std::make_unique<NcclPosted>(*this);
    std::map<int64_t, std::vector<P2POp>> byPeer;
    for (const P2POp &op : ops) {
      if (!op.isSend)
        throw CommError("rank " + std::to_string(self) +
                        ": only sends can be posted" + inContext());
      if (op.peer != self) {
        byPeer[op.peer].push_back(op);
        continue;
      }
      selfPosted.push_back({op, posted->selfLeft});
      ++*posted->selfLeft;
    }
    if (byPeer.empty())
      return posted;
    cudaStream_t main = stream();
    for (auto &[peer, mine] : byPeer) {
      Channel &channel = channelOf(self, peer);
      cudaEvent_t ready = nullptr;
      cudaError_t e = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
      if (e == cudaSuccess)
        e = cudaEventRecord(ready, main);
      if (e == cudaSuccess)
        e = cudaStreamWaitEvent(channel.stream, ready, 0);
      if (ready)
        cudaEventDestroy(ready);
      if (e != cudaSuccess)
        throw CommError("rank " + std::to_string(self) +
                        ": ordering a posted send after its data failed: " +
                        cudaGetErrorString(e) + inContext());
      canonicalOrder(mine);
      for (P2POp &op : mine)
        op.peer = 1; // the receiver's rank in the pair's communicator
      group(mine, channel.comm, channel.stream);
      posted->finished.push_back(std::make_shared<StreamEvent>(channel.stream));
      follow(posted->finished.back(), "posted send");
    }
    return posted;
  }

  void receivePosted(std::vector<P2POp> &ops) override {
    validate(ops);
    noPostedOnChannel();
    std::map<int64_t, std::vector<P2POp>> byPeer;
    for (const P2POp &op : ops) {
      if (op.isSend)
        throw CommError("rank " + std::to_string(self) +
                        ": receivePosted takes receives only" + inContext());
      if (op.peer != self) {
        byPeer[op.peer].push_back(op);
        continue;
      }
      auto it = std::find_if(
          selfPosted.begin(), selfPosted.end(),
          [&](const SelfMessage &m) { return m.op.tag == op.tag; });
      if (it == selfPosted.end() || it->op.bytes != op.bytes)
        throw CommError("rank " + std::to_string(self) +
                        ": no posted message of " + std::to_string(op.bytes) +
                        " bytes to itself with tag " + std::to_string(op.tag) +
                        inContext());
      if (op.bytes > 0)
        device().copy(op.data, it->op.data, op.bytes);
      --*it->left;
      selfPosted.erase(it);
    }
    for (auto &[peer, mine] : byPeer) {
      Channel &channel = channelOf(peer, self);
      canonicalOrder(mine);
      for (P2POp &op : mine)
        op.peer = 0; // the sender's rank in the pair's communicator
      group(mine, channel.comm, stream());
      follow("posted receive");
    }
  }

  /// Splits a communicator off the world per channel, in rounds where a
  /// rank belongs to one channel at most (channelRounds; every rank runs
  /// the same rounds), sharing the world's resources (splitShare), then
  /// connects each with one byte each way of its pair before the first
  /// step (NCCL would connect inside the first posted message, blocking).
  void preparePosted(
      const std::function<std::vector<std::pair<int64_t, int64_t>>()> &list)
      override {
    noPostedOnChannel();
    if (postedPrepared)
      return;
    postedPrepared = true;
    const std::vector<std::pair<int64_t, int64_t>> all = list();
    const std::vector<std::vector<int64_t>> rounds =
        channelRounds(all, worldSize);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.splitShare = 1;
    for (const std::vector<int64_t> &round : rounds) {
      const int64_t c = round[static_cast<size_t>(self)];
      const bool sender = c >= 0 && all[static_cast<size_t>(c)].first == self;
      ncclComm_t split = nullptr;
      {
        HostCall call(*this, "ncclCommSplit of a posted messages' channel");
        check(api.commSplit(world,
                            c >= 0 ? static_cast<int>(c) : NCCL_SPLIT_NOCOLOR,
                            sender ? 0 : 1, &split, &config),
              "ncclCommSplit", world);
      }
      if (c < 0)
        continue;
      Channel channel;
      channel.comm = split;
      if (sender)
        if (cudaError_t e = cudaStreamCreateWithFlags(&channel.stream,
                                                      cudaStreamNonBlocking);
            e != cudaSuccess)
          throw CommError("rank " + std::to_string(self) +
                          ": creating a posted messages' stream failed: " +
                          cudaGetErrorString(e));
      std::lock_guard<std::mutex> lock(mutex); // the watchdog reads them
      channels[all[static_cast<size_t>(c)]] = channel;
    }
    // Connected now: one byte from each sender to its receiver, round by
    // round (a rank in one pair a round: nothing waits on another pair).
    if (rounds.empty())
      return;
    void *byte = device().allocate(1);
    for (const std::vector<int64_t> &round : rounds) {
      const int64_t c = round[static_cast<size_t>(self)];
      if (c < 0)
        continue;
      const auto pair = all[static_cast<size_t>(c)];
      const bool sender = pair.first == self;
      std::vector<P2POp> one = {{sender, sender ? 1 : 0, 0, byte, 1}};
      group(one, channels[pair].comm, stream());
    }
    cudaStreamSynchronize(stream());
    device().release(byte);
  }

  /// The channel from `sender` to `receiver` (preparePosted made it).
  Channel &channelOf(int64_t sender, int64_t receiver) {
    auto it = channels.find({sender, receiver});
    if (it == channels.end())
      throw CommError("rank " + std::to_string(self) +
                      ": a posted message from rank " + std::to_string(sender) +
                      " to rank " + std::to_string(receiver) +
                      ", which the plan's posted messages do not include "
                      "(preparePosted)" +
                      inContext());
    return it->second;
  }

  void noPostedOnChannel() const {
    if (parent)
      throw CommError("rank " + std::to_string(self) +
                      ": a channel's communicator carries no posted "
                      "messages" +
                      inContext());
  }

  void validate(const std::vector<P2POp> &ops) {
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
  }

  /// One NCCL group of `ops` (in canonical order) on communicator `c` and
  /// stream `s` (the caller hands the watchdog its end).
  void group(const std::vector<P2POp> &ops, ncclComm_t c, cudaStream_t s) {
    // ncclGroupEnd may wait on the host for a peer to connect.
    HostCall call(*this, "ncclGroupEnd of a batch of messages");
    check(api.groupStart(), "ncclGroupStart", nullptr);
    for (const P2POp &op : ops) {
      if (op.bytes == 0)
        continue; // both ends know the size: neither posts it
      size_t n = static_cast<size_t>(op.bytes);
      int peer = static_cast<int>(op.peer);
      ncclResult_t r = op.isSend ? api.send(op.data, n, ncclUint8, peer, c, s)
                                 : api.recv(op.data, n, ncclUint8, peer, c, s);
      if (r != ncclSuccess) {
        api.groupEnd();
        check(r, op.isSend ? "ncclSend" : "ncclRecv", c);
      }
    }
    check(api.groupEnd(), "ncclGroupEnd", c);
  }

  void fail(const std::string &message) override {
    abortAll();
    Comm *host = parent ? parent->bootstrap : bootstrap;
    if (host)
      host->fail(message); // prints it and ends the MPI job
  }

protected:
  bool nativeAllReduce(const std::vector<int64_t> &group, device::DType type,
                       void *data, int64_t count, bool max) override {
    ncclComm_t c = commOf(group);
    if (!c || (type != device::DType::F32 && type != device::DType::F64))
      return false;
    if (count > 0) {
      HostCall call(*this, "ncclAllReduce");
      check(
          api.allReduce(data, data, static_cast<size_t>(count),
                        type == device::DType::F32 ? ncclFloat32 : ncclFloat64,
                        max ? ncclMax : ncclSum, c, stream()),
          "ncclAllReduce", c);
      follow("all-reduce");
    }
    return true;
  }
  bool nativeCollectives(const std::vector<int64_t> &group) override {
    return commOf(group) != nullptr;
  }
  /// The values as bf16 bits in a buffer of their own (allocated and
  /// released in stream order, as everything here runs), summed by NCCL in
  /// bf16, back into `data` as floats (exact).
  bool nativeAllReduceBf16(const std::vector<int64_t> &group, float *data,
                           int64_t count) override {
    ncclComm_t c = commOf(group);
    if (!c)
      return false;
    device::Device &dev = device();
    void *bits = dev.allocate(count * int64_t(sizeof(uint16_t)));
    dev.convert(device::DType::F32, data, device::DType::BF16, bits, count);
    {
      HostCall call(*this, "ncclAllReduce");
      check(api.allReduce(bits, bits, static_cast<size_t>(count), ncclBfloat16,
                          ncclSum, c, stream()),
            "ncclAllReduce", c);
      follow("all-reduce (bf16)");
    }
    dev.convert(device::DType::BF16, bits, device::DType::F32, data, count);
    dev.release(bits);
    return true;
  }
  bool nativeAllGather(const std::vector<int64_t> &group, device::DType type,
                       const void *in, int64_t count, void *out) override {
    ncclComm_t c = commOf(group);
    if (!c || (type != device::DType::F32 && type != device::DType::BF16))
      return false;
    if (count > 0) {
      HostCall call(*this, "ncclAllGather");
      check(
          api.allGather(in, out, static_cast<size_t>(count),
                        type == device::DType::F32 ? ncclFloat32 : ncclBfloat16,
                        c, stream()),
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
      HostCall call(*this, "ncclReduceScatter");
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
      HostCall call(*this, "ncclBroadcast");
      check(api.broadcast(data, data, static_cast<size_t>(bytes), ncclUint8,
                          static_cast<int>(rootIndex), c, stream()),
            "ncclBroadcast", c);
      follow("broadcast");
    }
    return true;
  }

  /// One ncclCommSplit of the world per family that has a group of two or
  /// more (GroupSplit.h), on every rank in the same order; ranks in none of
  /// those groups pass NCCL_SPLIT_NOCOLOR. Each group is listed once
  /// (plan/Plan.h communicatorGroups), so it gets one communicator.
  void createGroups(
      const std::vector<std::vector<std::vector<int64_t>>> &families) override {
    std::vector<GroupSplit> splits = groupSplits(families, self, worldSize);
    for (size_t f = 0; f < families.size(); ++f) {
      const GroupSplit &s = splits[f];
      if (!s.split)
        continue;
      int color = s.color < 0 ? NCCL_SPLIT_NOCOLOR : s.color;
      // Sharing the world's buffers and proxy thread (splitShare) rather
      // than a set of each per group.
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.splitShare = 1;
      ncclComm_t split = nullptr;
      {
        HostCall call(*this, "ncclCommSplit");
        check(api.commSplit(world, color, s.key, &split, &config),
              "ncclCommSplit", world);
      }
      if (s.color >= 0) {
        std::lock_guard<std::mutex> lock(mutex);
        groups[families[f][static_cast<size_t>(s.color)]] = split;
      }
    }
  }

  /// A usage error fails the job at once (not after the device's teardown
  /// waits for operations the peers will never match).
  void noteError(const std::string &message) override { fail(message); }

private:
  using TimePoint = Clock::time_point;

  /// Marks a call that may block the host inside NCCL (communicator
  /// creation, connection set-up at a group's end): the watchdog times it.
  class HostCall {
  public:
    HostCall(NcclComm &comm, const char *what) : comm(comm) {
      std::lock_guard<std::mutex> lock(comm.mutex);
      comm.inCall = what;
      comm.inCallSince = Clock::now();
    }
    ~HostCall() {
      std::lock_guard<std::mutex> lock(comm.mutex);
      comm.inCall = nullptr;
    }

  private:
    NcclComm &comm;
  };

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
    if (world && group.size() == static_cast<size_t>(worldSize))
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
  void follow(const char *what) { follow(device().record(), what); }
  void follow(device::EventPtr event, const char *what) {
    std::lock_guard<std::mutex> lock(mutex);
    pending.post(std::move(event),
                 std::string(what) + (context.empty() ? "" : " in ") + context,
                 Clock::now());
  }

  /// Aborts every communicator (fail() on the rank's thread; the watchdog
  /// just before the process exits).
  void abortAll() {
    if (aborted.exchange(true))
      return;
    if (parent) { // the owner aborts the channel's communicators too
      parent->abortAll();
      return;
    }
    std::lock_guard<std::mutex> lock(mutex);
    for (auto &[group, c] : groups)
      api.commAbort(c);
    for (ncclComm_t c : channelComms)
      api.commAbort(c);
    for (auto &[pair, channel] : channels)
      api.commAbort(channel.comm);
    if (world)
      api.commAbort(world);
  }

  /// Polls every 100 ms: drops finished operations; on an operation or a
  /// blocking call older than the timeout, or an asynchronous NCCL error,
  /// prints the rank, what it waited for and why, aborts every
  /// communicator and exits 2 (the launcher ends the other ranks; each
  /// one's own watchdog would too).
  void watch() {
    // Queries of this rank's events must not create a context on GPU 0.
    cudaSetDevice(ordinal);
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      wake.wait_for(lock, std::chrono::milliseconds(100));
      if (stopping || aborted.load())
        break;
      std::string problem;
      try {
        pending.drop(
            [](const device::EventPtr &event) {
              return !event || event->reached();
            },
            Clock::now());
      } catch (const std::exception &e) {
        problem = std::string("the GPU reported a fault: ") + e.what();
      }
      auto limit = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(timeoutSeconds()));
      TimePoint now = Clock::now();
      if (problem.empty() && inCall && now - inCallSince > limit)
        problem = "timed out after " + secondsText(getTimeout()) +
                  " s inside " + inCall + inContext() +
                  " (a peer never joined it)";
      // Each operation from when the one before it ended
      // (OperationClock), not from when it was enqueued.
      if (problem.empty() && pending.overdue(now, limit))
        problem = "timed out after " + secondsText(getTimeout()) +
                  " s waiting for the peers of " + pending.front().what;
      std::vector<ncclComm_t> all;
      if (world)
        all.push_back(world);
      for (auto &[pair, channel] : channels)
        all.push_back(channel.comm);
      for (auto &[group, c] : groups)
        all.push_back(c);
      if (!parent)
        all.insert(all.end(), channelComms.begin(), channelComms.end());
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
      std::fflush(stdout);
      std::fprintf(stderr, "mimo-run: rank %lld failed: %s\n",
                   static_cast<long long>(self), problem.c_str());
      std::fflush(stderr);
      // Aborting releases whatever the rank is blocked in (NCCL's way to
      // end a hung operation from another thread); the process ends at
      // once after, before the rank could use an aborted communicator. An
      // abort that itself waits (the rank inside ncclGroupEnd, init or
      // split on a blocking communicator) is given kAbortGrace, no more.
      lock.unlock();
      exitAfter([this] { abortAll(); }, kAbortGrace, 2);
    }
  }

  const NcclApi &api;
  int ordinal;
  ncclComm_t world = nullptr;
  int64_t self, worldSize;
  Comm *bootstrap;
  /// A channel's communicator: the rank's own, which owns the channel's
  /// communicators (null: this is the rank's own).
  NcclComm *parent = nullptr;
  /// The plan's groups (a channel: its family's, owned by `parent`).
  std::map<std::vector<int64_t>, ncclComm_t> groups;
  /// The channels' communicators by family (prepareChannels), whether each
  /// family was opened, every one of them (destroyed last), and whether
  /// every channel ended with its operations finished.
  std::vector<std::map<std::vector<int64_t>, ncclComm_t>> channelFamilies;
  std::vector<bool> familyOpened;
  std::vector<ncclComm_t> channelComms;
  std::atomic<bool> channelsQuiet{true};
  /// Posted messages' channels by (sender, receiver) (preparePosted: a
  /// communicator of the pair, and the sender's stream), and the messages
  /// this rank posted to itself, not yet received.
  std::map<std::pair<int64_t, int64_t>, Channel> channels;
  bool postedPrepared = false;
  struct SelfMessage {
    P2POp op;
    std::shared_ptr<int64_t> left; // its NcclPosted's count
  };
  std::vector<SelfMessage> selfPosted;
  std::atomic<bool> aborted{false};

  std::mutex mutex;
  std::condition_variable wake;
  OperationClock<device::EventPtr> pending;
  const char *inCall = nullptr;
  TimePoint inCallSince;
  bool stopping = false;
  std::thread watchdog;
};

void NcclPosted::wait() {
  if (*selfLeft > 0)
    throw CommError("rank " + std::to_string(comm.rank()) +
                    ": a message posted to itself was never received");
  cudaStream_t main = static_cast<cudaStream_t>(comm.device().nativeStream());
  for (const auto &event : finished)
    if (cudaError_t e = cudaStreamWaitEvent(main, event->event, 0);
        e != cudaSuccess)
      throw CommError(std::string("waiting for posted sends failed: ") +
                      cudaGetErrorString(e));
}

} // namespace

std::unique_ptr<Comm> makeNcclComm(Comm *bootstrap, int64_t localRank,
                                   std::string *error) {
  auto failWith = [&](const std::string &text) -> std::unique_ptr<Comm> {
    if (error)
      *error = text;
    return nullptr;
  };
  int64_t rank = bootstrap ? bootstrap->rank() : 0;
  int64_t size = bootstrap ? bootstrap->size() : 1;
  // After every rank agreed to start, a failure of one rank alone would
  // leave the others inside NCCL: it ends the whole job (exit 2).
  auto failAfterAgreement = [&](const std::string &text) {
    if (bootstrap)
      bootstrap->fail("rank " + std::to_string(rank) + ": " + text);
    return failWith(text);
  };
  std::string loadError;
  const NcclApi *api = ncclApi(&loadError);
  const device::CudaStatus &cuda = device::cudaStatus();
  std::string problem;
  if (!api)
    problem = loadError;
  else if (cuda.devices == 0)
    problem = "the nccl backend needs a GPU per rank: " + cuda.problem;
  const int ordinal = device::gpu::processOrdinal(localRank, cuda.devices);
  if (bootstrap) {
    // Every rank agrees whether all can start before any enters NCCL: rank
    // 0 gathers each rank's problem and GPU UUID, finds the first problem
    // or two ranks on one GPU (NCCL refuses two ranks of one communicator
    // on one GPU; CUDA_VISIBLE_DEVICES may give each process a different
    // GPU under the same ordinal), and tells every rank.
    // A report: the problem, a separator, the GPU's UUID.
    constexpr char kSeparator = '\x1f';
    std::string uuid = problem.empty() ? device::gpuUuid(ordinal) : "";
    std::string report = problem.substr(0, 1024) + kSeparator + uuid;
    auto decide = [&](const std::vector<std::string> &reports) {
      std::vector<std::string> problems, uuids;
      for (const std::string &r : reports) {
        size_t cut = r.find(kSeparator);
        problems.push_back(r.substr(0, cut));
        uuids.push_back(cut == std::string::npos ? "" : r.substr(cut + 1));
      }
      for (size_t r = 0; r < problems.size(); ++r)
        if (!problems[r].empty())
          return "rank " + std::to_string(r) + ": " + problems[r];
      for (size_t a = 0; a < uuids.size(); ++a)
        for (size_t b = a + 1; b < uuids.size(); ++b)
          if (!uuids[a].empty() && uuids[a] == uuids[b])
            return "ranks " + std::to_string(a) + " and " + std::to_string(b) +
                   " would share one GPU, and NCCL refuses two ranks of one "
                   "communicator on one GPU (\"Duplicate GPU\"): start at "
                   "most one rank per GPU (mpirun -np <= the GPUs), or run "
                   "every rank as a thread of one process with --backend "
                   "local, which shares a GPU among ranks";
      return std::string();
    };
    try {
      problem = agreeOnRankZero(*bootstrap, report, decide);
    } catch (const std::exception &e) {
      return failWith(std::string("the MPI bootstrap failed: ") + e.what());
    }
  }
  if (!problem.empty())
    return failWith(problem);
  // The rank's GPU becomes this thread's current device (NCCL binds its
  // communicators to it); the executor's device takes the same ordinal.
  // Nothing else is made on it here (no stream, no cuBLASLt workspace).
  if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) {
    (void)cudaGetLastError();
    return failAfterAgreement("cannot open GPU " + std::to_string(ordinal) +
                              ": " + cudaGetErrorName(e) + " (" +
                              cudaGetErrorString(e) + ")");
  }
  ncclUniqueId id{};
  if (rank == 0) {
    ncclResult_t r = api->getUniqueId(&id);
    if (r != ncclSuccess)
      return failAfterAgreement(std::string("ncclGetUniqueId failed: ") +
                                api->getErrorString(r));
  }
  if (bootstrap) {
    std::vector<int64_t> all(static_cast<size_t>(size));
    for (int64_t r = 0; r < size; ++r)
      all[static_cast<size_t>(r)] = r;
    try {
      bootstrap->broadcast(all, 0, &id, sizeof(id));
    } catch (const std::exception &e) {
      return failAfterAgreement(std::string("the MPI bootstrap failed: ") +
                                e.what());
    }
  }
  auto comm = std::make_unique<NcclComm>(*api, ordinal, rank, size, bootstrap);
  std::string failed = comm->initialize(id);
  if (!failed.empty())
    return failAfterAgreement(failed);
  return comm;
}

#endif // MIMO_HAVE_NCCL

} // namespace mimo::comm
