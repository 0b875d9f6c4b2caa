//===- Comm.h - Communicators and group collectives -------------*- C++ -*-===//
//
// The executor talks to other ranks only through this interface
// (docs/runtime.md): blocking tagged point-to-point messages, batches of them
// posted together (like batch_isend_irecv), and collectives over explicit
// groups of world ranks. Backends: `local` (threads of one process, shared
// memory), `mpi` (one process per rank) and `nccl` (a process and a GPU per
// rank, NcclComm.cpp: batches as grouped NCCL sends and receives enqueued on
// the rank's stream, NCCL's collectives over the plan's groups). Collectives
// posted beside the compute go through a Channel (Channel.h).
//
// Buffers are memory of the communicator's device (device/Device.h): the
// collectives stage and reduce with that device's copies and kernels, and
// the local backend copies between ranks' buffers with the receiver's
// device, ordered by events (the sender's data is ready; the sender reuses
// its buffer only after the copy), so ranks sharing a GPU never wait on
// the host. The mpi backend moves host memory (the CPU device), the nccl
// backend GPU memory.
//
// Failure model: every blocking wait gives up after the timeout or as soon
// as any rank has failed, throwing CommError; nothing hangs (the nccl
// backend's waits are on the GPU: its watchdog ends the rank instead).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_COMM_COMM_H
#define MIMO_RUNTIME_COMM_COMM_H

#include "runtime/device/Device.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimo::comm {

/// A communication failure: a timeout, a peer that failed, a size mismatch.
class CommError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// One operation of a batch posted together.
struct P2POp {
  bool isSend = true;
  int64_t peer = 0;
  int64_t tag = 0;
  /// Send: the bytes to send; receive: where to write them. The receive
  /// must get exactly `bytes` bytes, else CommError naming both sizes.
  void *data = nullptr;
  int64_t bytes = 0;
};

/// Sends posted with Comm::postSends, not yet waited for.
class PostedSends {
public:
  virtual ~PostedSends() = default;
  /// Waits until every message has been received (the buffers may then be
  /// reused or freed; the poster's later device work is ordered after the
  /// transfers). CommError as exchange().
  virtual void wait() = 0;
  /// Whether every message has been received, asked without waiting
  /// (wait() then returns at once).
  virtual bool done() = 0;
};

/// What the executor may assume of a backend; it asks these instead of
/// comparing backend names.
struct Capabilities {
  /// Every rank is a thread of this one process (local): one result and
  /// one trace for them all.
  bool ranksShareProcess = false;
  /// Moves host memory only (mpi): a GPU rank needs another backend.
  bool hostMemoryOnly = false;
  /// Makes connections at their first use (nccl): warmUp pays off.
  bool connectsLazily = false;
  /// Opens channels on communicators of its own (nccl: prepareChannels,
  /// then openChannel); the local backend's channels are made by the run.
  bool opensChannels = false;
};

/// One family of channel groups (plan/Plan.h channelFamilies): disjoint
/// ascending groups of world ranks. `ring`: the channels also exchange
/// messages with each member's two neighbours in its group (ring CP).
struct ChannelGroups {
  std::vector<std::vector<int64_t>> groups;
  bool ring = false;
};

class Comm {
public:
  virtual ~Comm() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  /// "local", "mpi" or "nccl", for messages.
  virtual const char *backendName() const = 0;
  virtual Capabilities capabilities() const = 0;
  /// The communicator for messages in host memory (the trace gathered at
  /// the end): this one, or the nccl backend's MPI bootstrap.
  virtual Comm &hostComm() { return *this; }

  /// Posts every operation, then waits for all of them. Messages between
  /// two ranks with the same tag arrive in the order they were posted.
  virtual void exchange(std::vector<P2POp> &ops) = 0;

  /// Posted messages (docs/plan.md "Posted messages"): posts `ops` (sends
  /// only) and returns at once; each leaves once the device's work so far
  /// is done and meets a receivePosted of its receiver, whenever that
  /// runs. The buffers stay valid until the result's wait(). Messages to
  /// this rank itself are received with receivePosted as well.
  virtual std::unique_ptr<PostedSends> postSends(std::vector<P2POp> ops) = 0;
  /// Receives messages their senders posted with postSends; blocks as
  /// exchange() does (the nccl backend pairs them on a communicator of
  /// their own).
  virtual void receivePosted(std::vector<P2POp> &ops) { exchange(ops); }
  /// Every rank calls it once before the first posted message when its
  /// plan has any, with the plan's posted channels, (sender, receiver)
  /// pairs (plan/Plan.h postedChannels; asked only by a backend that needs
  /// them: the nccl backend splits a communicator off per channel here).
  virtual void
  preparePosted(const std::function<std::vector<std::pair<int64_t, int64_t>>()>
                    &channels) {
    (void)channels;
  }

  /// Channels on a backend that opensChannels: every rank calls
  /// prepareChannels once, with the same list, before the first step (the
  /// nccl backend splits a communicator per group of each family, sharing
  /// the world's resources, and connects them: a one-value all-reduce per
  /// group, a byte each way with a ring's neighbours). openChannel(f) is
  /// then this rank's communicator of `families` for a comm/Channel: its
  /// collectives over their groups holding this rank, its exchanges with
  /// the members of such a group, enqueued on the device the channel gives
  /// it. Null where the backend opens none, or the rank is in no group of
  /// the first family of two or more.
  virtual void prepareChannels(const std::vector<ChannelGroups> &families) {
    (void)families;
  }
  virtual std::unique_ptr<Comm>
  openChannel(const std::vector<size_t> &families) {
    (void)families;
    return nullptr;
  }

  void send(int64_t peer, int64_t tag, const void *data, int64_t bytes);
  void recv(int64_t peer, int64_t tag, void *data, int64_t bytes);

  /// Collectives over `group`: ascending world ranks holding this rank.
  /// Every member calls them in the same order. Results are bit-identical
  /// on every member (sums are taken in group order; the nccl backend's
  /// collectives are NCCL's: identical on every member, summed in NCCL's
  /// order).
  void allReduceSum(const std::vector<int64_t> &group, float *data,
                    int64_t count);
  void allReduceSum(const std::vector<int64_t> &group, double *data,
                    int64_t count);
  /// The sum of values that are bfloat16 numbers held as floats
  /// (train.grad_reduce_dtype "bf16"): the nccl backend moves and sums them
  /// as bf16 (half the bytes; its sum is rounded to bf16 as it goes), the
  /// others as allReduceSum. Either way the caller rounds the result to
  /// bf16 (Device::roundTo), which the nccl sum already is.
  void allReduceSumBf16(const std::vector<int64_t> &group, float *data,
                        int64_t count);
  void allReduceMax(const std::vector<int64_t> &group, float *data,
                    int64_t count);
  /// out = concatenation over members (group order) of each member's
  /// counts[i] floats; `in` holds this rank's counts[own] floats.
  void allGatherV(const std::vector<int64_t> &group, const float *in,
                  const std::vector<int64_t> &counts, float *out);
  /// allGatherV of bfloat16 bits (precision "bf16"'s keys and values
  /// under CP): counts in values.
  void allGatherV(const std::vector<int64_t> &group, const uint16_t *in,
                  const std::vector<int64_t> &counts, uint16_t *out);
  /// in holds the concatenation over members of counts[i] floats; every
  /// member sums the pieces and keeps its own piece (counts[own] floats).
  void reduceScatterV(const std::vector<int64_t> &group, const float *in,
                      const std::vector<int64_t> &counts, float *out);
  void broadcast(const std::vector<int64_t> &group, int64_t root, void *data,
                 int64_t bytes);

  /// The groups collectives will run over (plan/Plan.h communicatorGroups),
  /// family by family, the same list on every rank before any collective.
  /// Backends with a communicator per group (nccl) create them here; the
  /// others remember the list (requirePreparedGroups).
  void
  prepareGroups(const std::vector<std::vector<std::vector<int64_t>>> &families);
  /// Opens, before the first step, every connection the run's messages
  /// and native collectives take: one byte each way with every rank of
  /// `peers` (ascending, without this rank; each of them lists this one),
  /// then a one-value all-reduce over every prepared group of two or more
  /// that holds this rank, in the list's order. A backend that connects
  /// lazily (nccl) would otherwise allocate its connection buffers at the
  /// first use, after the memory pool has grown to the activation peak.
  /// Throws CommError when a reply is wrong; returns once the device has
  /// finished.
  void warmUp(const std::vector<int64_t> &peers);
  /// A collective over a group of more than one rank that was not prepared
  /// fails with CommError (tests: the list is complete, so a backend with
  /// communicators per group never falls back to point-to-point).
  void requirePreparedGroups(bool require) { strictGroups = require; }
  /// Unequal gathers and reduce-scatters padded onto native collectives so
  /// far (Comm::nativeCollectives; tests and the trace).
  int64_t paddedCollectives() const { return padded; }

  /// Marks this rank failed with `message`; other ranks' waits fail with
  /// it (local), or the job is torn down (mpi). Does not return for mpi.
  virtual void fail(const std::string &message) = 0;

  /// The device whose memory the buffers are (default: the host).
  void setDevice(device::Device *dev) { buffers = dev; }
  device::Device &device() const {
    return buffers ? *buffers : device::hostDevice();
  }

  /// The wait limit of every blocking operation.
  void setTimeout(std::chrono::duration<double> seconds) {
    timeout.store(seconds.count());
  }
  std::chrono::duration<double> getTimeout() const {
    return std::chrono::duration<double>(timeout.load());
  }
  double timeoutSeconds() const { return timeout.load(); }
  /// Collectives of this communicator take tags of their own range
  /// `channel` (0..kMaxTagChannels-1; default 0), so that communicators of
  /// one rank used from several threads (comm/Channel.h) never match each
  /// other's messages.
  void setTagChannel(int64_t channel);
  int64_t getTagChannel() const { return tagChannel; }
  /// Describes what this rank is doing, for timeout messages
  /// ("instruction 12 (recv_act language mb 0)").
  void setContext(std::string what) { context = std::move(what); }
  const std::string &getContext() const { return context; }

protected:
  /// Collectives of a backend's own (nccl): enqueue it on the device's
  /// stream and return true; false (the default) runs the generic
  /// implementation over exchange(). Called after the arguments were
  /// checked, for groups of two or more ranks; `own` is this rank's index.
  virtual bool nativeAllReduce(const std::vector<int64_t> &group,
                               device::DType type, void *data, int64_t count,
                               bool max) {
    (void)group, (void)type, (void)data, (void)count, (void)max;
    return false;
  }
  /// allReduceSumBf16 on the wire in bf16 (true), or not at all (false:
  /// the fp32 all-reduce runs).
  virtual bool nativeAllReduceBf16(const std::vector<int64_t> &group,
                                   float *data, int64_t count) {
    (void)group, (void)data, (void)count;
    return false;
  }
  /// Equal counts only: `count` values of `type` (F32 or BF16) from every
  /// member.
  virtual bool nativeAllGather(const std::vector<int64_t> &group,
                               device::DType type, const void *in,
                               int64_t count, void *out) {
    (void)group, (void)type, (void)in, (void)count, (void)out;
    return false;
  }
  virtual bool nativeReduceScatter(const std::vector<int64_t> &group,
                                   const float *in, int64_t count, float *out) {
    (void)group, (void)in, (void)count, (void)out;
    return false;
  }
  virtual bool nativeBroadcast(const std::vector<int64_t> &group,
                               size_t rootIndex, void *data, int64_t bytes) {
    (void)group, (void)rootIndex, (void)data, (void)bytes;
    return false;
  }
  /// Whether the native collectives above serve `group` (nccl: it has a
  /// communicator). Gathers and reduce-scatters of unequal pieces then pad
  /// every piece to the largest and take the native ones, not messages
  /// over the world (paddedCollectives counts them).
  virtual bool nativeCollectives(const std::vector<int64_t> &group) {
    (void)group;
    return false;
  }
  /// The generic gather and reduce-scatter, by messages (exchange()): what
  /// runs without native collectives, and how a backend that emulates
  /// them (the local one matching in posting order) does.
  void allGatherByMessages(const std::vector<int64_t> &group,
                           device::DType type, const void *in,
                           const std::vector<int64_t> &counts, void *out);
  void reduceScatterByMessages(const std::vector<int64_t> &group,
                               const float *in,
                               const std::vector<int64_t> &counts, float *out);
  /// Creates what the backend needs per group (called by prepareGroups).
  virtual void
  createGroups(const std::vector<std::vector<std::vector<int64_t>>> &families) {
    (void)families;
  }

  /// Seconds; atomic: a backend's watchdog thread reads it.
  std::atomic<double> timeout{300.0};
  std::string context;
  device::Device *buffers = nullptr;

private:
  int64_t tagChannel = 0;
  std::vector<std::vector<int64_t>> prepared; // sorted
  bool strictGroups = false;
  /// Next tag for a collective over `group` (members call collectives in the
  /// same order, so their counters agree).
  int64_t collectiveTag(const std::vector<int64_t> &group);
  /// allGatherV of values of `type`.
  void allGatherValues(const std::vector<int64_t> &group, device::DType type,
                       const void *in, const std::vector<int64_t> &counts,
                       void *out);
  std::vector<std::pair<std::vector<int64_t>, int64_t>> collectiveCounters;
  int64_t padded = 0;

  /// Called with the message before a collective throws CommError for a
  /// misuse (a rank not in the group, bad counts). The local backend
  /// records it as the world's failure so that peers are released at once;
  /// the default does nothing (under mpi the caller calls fail()).
  virtual void noteError(const std::string &message) { (void)message; }
  [[noreturn]] void usageError(const std::string &message);
  /// Index of this rank in `group`; CommError unless `group` is ascending
  /// world ranks holding this rank.
  size_t checkGroup(const std::vector<int64_t> &group, const char *what);
  void checkCounts(const std::vector<int64_t> &group,
                   const std::vector<int64_t> &counts, const char *what);
  template <typename T>
  void allReduce(const std::vector<int64_t> &group, T *data, int64_t count,
                 bool max, const char *what);
  /// out = the sum (max) of the pieces, taken in order: ((p0 + p1) + p2)...
  void reduceInOrder(device::DType type, void *out,
                     const std::vector<const void *> &pieces, int64_t count,
                     bool max);
};

/// Tags at or above this are reserved for collectives: channel c's
/// collectives take [base + c * span, base + (c + 1) * span).
inline constexpr int64_t kCollectiveTagBase = int64_t(1) << 28;
inline constexpr int64_t kCollectiveTagSpan = int64_t(1) << 20;
inline constexpr int64_t kMaxTagChannels =
    ((int64_t(1) << 31) - kCollectiveTagBase) / kCollectiveTagSpan;

/// How a backend pairs a send with a receive. ByTag: the oldest message of
/// the receive's (source, tag) (local, mpi). InPostingOrder: the oldest
/// message of the source on the same tag channel, whatever its tag, as
/// NCCL pairs them (it has no tags); each batch is posted in
/// canonicalOrder, and a receive whose message has another tag fails, so
/// a plan that runs this way on the CPU pairs every message right under
/// NCCL.
enum class Matching { ByTag, InPostingOrder };

/// Sorts a batch into the order backends without tags post it: by peer,
/// then tag, messages with equal (peer, tag) in their order in the batch.
/// Both ends of every message then post it at the same place of their
/// stream to that peer.
void canonicalOrder(std::vector<P2POp> &ops);

/// The shared state of `size` ranks run as threads of this process.
class LocalWorld;
std::shared_ptr<LocalWorld> makeLocalWorld(int64_t size,
                                           Matching matching = Matching::ByTag);
/// The communicator of `rank` in `world` (one per thread).
std::unique_ptr<Comm> makeLocalComm(std::shared_ptr<LocalWorld> world,
                                    int64_t rank);
/// The first failure recorded in `world` (empty if none).
std::string localWorldFailure(const LocalWorld &world);

/// Every rank's text (at most kAgreeText - 1 bytes, no NUL) gathered on
/// rank 0 of comm.hostComm(), which `decide`s one answer from them (in rank
/// order); every rank returns that answer. Every rank calls it at the same
/// point; `decide` runs on rank 0 alone.
inline constexpr size_t kAgreeText = 2048;
std::string agreeOnRankZero(
    Comm &comm, const std::string &mine,
    const std::function<std::string(const std::vector<std::string> &)> &decide);

/// Every rank's problem (empty: none) made one answer all ranks share: the
/// lowest rank's problem (prefixed "rank R: " unless R is 0), or "" when no
/// rank has one. Host messages (comm.hostComm()); every rank of
/// `comm` calls it at the same point (agreeOnRankZero).
std::string firstProblem(Comm &comm, const std::string &mine);

/// Whether this process was started by mpirun (Open MPI / PMIx env).
bool launchedByMpirun();
/// Ranks that mpirun started on this node (1 when not under mpirun).
int64_t ranksOnThisNode();
/// This process's index among them (0 when not under mpirun).
int64_t localRankOnThisNode();
/// This process's rank in the job as the launcher says it
/// (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID), before MPI
/// starts; 0 when none does.
int64_t worldRankFromLauncher();
/// Initialises MPI (once) and returns the world communicator; nullptr with
/// `error` set when mimo was built without MPI.
std::unique_ptr<Comm> makeMpiComm(std::string *error);
/// Whether mimo was built with the nccl backend (nccl.h found).
bool ncclBuilt();
/// The nccl backend's communicator of this process's rank: NCCL loaded
/// (dlopen), the GPU of `localRank` made current, the unique id broadcast
/// over `bootstrap` (the MPI world; null: a world of one rank) and the
/// world communicator initialised. nullptr with `error` saying why (not
/// built with NCCL, libnccl missing, no GPU, more ranks than GPUs on this
/// node, NCCL's own failure); every rank of `bootstrap` fails together.
std::unique_ptr<Comm> makeNcclComm(Comm *bootstrap, int64_t localRank,
                                   std::string *error);
/// Finalises MPI if it was initialised.
void finalizeMpi();
/// Tears the whole MPI job down with `code` (MPI_Abort).
[[noreturn]] void abortMpi(int code);

} // namespace mimo::comm

#endif // MIMO_RUNTIME_COMM_COMM_H
