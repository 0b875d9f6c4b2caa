//===- LocalComm.cpp - The `local` backend: ranks as threads -------------===//
//
// Rendezvous with a single copy. A send posts a descriptor (pointer, size,
// the event its data is ready at) on the receiver's queue for (source, tag)
// and waits until it has been consumed; a receive takes the oldest
// descriptor of its (source, tag), copies straight from the sender's buffer
// into its own with its own device (outside the lock; after the sender's
// event; GPU ranks enqueue a device-to-device copy on their stream) and
// marks the descriptor done with the event its copy ends at, which the
// sender's device waits for before it touches the buffer again.
// exchange() posts all its sends first, then completes its receives as
// their messages arrive, then waits for its sends to be consumed, so no
// batch order can deadlock.
//
// With Matching::InPostingOrder a receiver's queue per source holds every
// tag (of one tag channel) and each batch is posted in canonicalOrder:
// messages pair as NCCL pairs them, and a tag that differs from the
// receive's is an error naming both, so the CPU proves a plan's message
// order right for the nccl backend.
//
// Every wait wakes at least every 50 ms and gives up when any rank has
// failed (CommError with the first failure) or when nothing has progressed
// for the timeout (this rank then fails the world with a message naming
// the peer it waited for and, where the ranks wait for each other in a
// ring, the whole cycle: each rank, what it waits for and in what
// instruction). Since a send waits for its receive (rendezvous, as NCCL's
// may), a plan whose messages NCCL would deadlock on deadlocks here too,
// and with Matching::InPostingOrder (mimo-run --strict) they pair as
// NCCL's do.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Comm.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

namespace mimo::comm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kWaitSlice(50);

/// One posted send; it lives in the sender's exchange() frame.
struct Message {
  const void *data = nullptr;
  int64_t bytes = 0;
  int64_t src = 0;
  int64_t dst = 0;
  int64_t tag = 0;
  /// Where the sender's stream had got to when it posted (data ready).
  device::EventPtr ready;
  /// Where the receiver's stream is once its copy is done.
  device::EventPtr copied;
  /// A receiver took it off the queue and is copying (or has copied) it.
  bool claimed = false;
  /// The copy is finished; the sender may reuse its buffer.
  bool done = false;
  /// Its inbox key (LocalComm::keyOf).
  int64_t key = 0;
};

std::string secondsText(std::chrono::duration<double> d) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", d.count());
  return buffer;
}

} // namespace

/// The shared state of the ranks of one process.
class LocalWorld {
public:
  LocalWorld(int64_t size, Matching matching)
      : size(size), matching(matching), wake(static_cast<size_t>(size)),
        inbox(static_cast<size_t>(size)) {}

  /// Records the first failure and wakes every waiter. Needs `mutex`.
  void failLocked(const std::string &message) {
    if (!failed) {
      failed = true;
      failure = message;
    }
    for (std::condition_variable &cv : wake)
      cv.notify_all();
  }

  const int64_t size;
  const Matching matching;
  mutable std::mutex mutex;
  /// wake[r]: rank r waits here (for a message to arrive for it or for one
  /// of its messages to be consumed).
  std::vector<std::condition_variable> wake;
  /// inbox[dst][(src, key)]: posted, unclaimed messages, oldest first; the
  /// key is the tag (ByTag) or the sender's tag channel (InPostingOrder).
  std::vector<std::map<std::pair<int64_t, int64_t>, std::deque<Message *>>>
      inbox;
  bool failed = false;
  std::string failure;
  /// What each rank is blocked on: the peer (or -1) and a description
  /// ("its receive of 64 bytes with tag 3 in instruction 12 (...)"), for
  /// the cycle a timeout names.
  std::vector<int64_t> waitPeer = std::vector<int64_t>(size, -1);
  std::vector<std::string> waitWhat = std::vector<std::string>(size);

  /// The ranks waiting for one another from `rank` on, as text ("rank 0
  /// waits for rank 1 (...); rank 1 waits for rank 0 (...)"), when they
  /// close a cycle; "" otherwise. Needs `mutex`.
  std::string cycleFrom(int64_t rank) const {
    std::vector<int64_t> path;
    std::vector<bool> seen(static_cast<size_t>(size), false);
    for (int64_t r = rank; r >= 0 && !seen[static_cast<size_t>(r)];
         r = waitPeer[static_cast<size_t>(r)]) {
      seen[static_cast<size_t>(r)] = true;
      path.push_back(r);
    }
    const int64_t last = path.empty() ? -1 : path.back();
    const int64_t closes = last < 0 ? -1 : waitPeer[static_cast<size_t>(last)];
    auto start = std::find(path.begin(), path.end(), closes);
    if (closes < 0 || start == path.end())
      return "";
    std::string text;
    for (auto it = start; it != path.end(); ++it)
      text += (text.empty() ? "" : "; ") + std::string("rank ") +
              std::to_string(*it) + " waits for rank " +
              std::to_string(waitPeer[static_cast<size_t>(*it)]) + " (" +
              waitWhat[static_cast<size_t>(*it)] + ")";
    return text;
  }
};

namespace {

class LocalComm final : public Comm {
public:
  LocalComm(std::shared_ptr<LocalWorld> world, int64_t rank)
      : world(std::move(world)), self(rank) {}

  int64_t rank() const override { return self; }
  int64_t size() const override { return world->size; }
  const char *backendName() const override { return "local"; }
  Capabilities capabilities() const override {
    return {/*ranksShareProcess=*/true, /*hostMemoryOnly=*/false,
            /*connectsLazily=*/false};
  }

  void exchange(std::vector<P2POp> &ops) override;
  std::unique_ptr<PostedSends> postSends(std::vector<P2POp> ops) override;
  void receivePosted(std::vector<P2POp> &ops) override;

  /// Waits for posted messages to be consumed (PostedSends::wait), or
  /// withdraws them (a handle dropped unwaited, when failing).
  void awaitPosted(std::vector<Message> &sends);
  void withdrawPosted(std::vector<Message> &sends);
  /// Whether every one of `sends` has been copied by its receiver.
  bool consumed(const std::vector<Message> &sends) {
    std::lock_guard<std::mutex> lock(world->mutex);
    return std::all_of(sends.begin(), sends.end(),
                       [](const Message &m) { return m.done; });
  }

  /// Matching in posting order (NCCL's pairing), the gathers and
  /// reduce-scatters of equal pieces stand in for NCCL's, so the unequal
  /// ones take the padded path the nccl backend takes (by messages still).
  bool nativeCollectives(const std::vector<int64_t> &group) override {
    (void)group;
    return world->matching == Matching::InPostingOrder;
  }
  bool nativeAllGather(const std::vector<int64_t> &group, device::DType type,
                       const void *in, int64_t count, void *out) override {
    if (!nativeCollectives(group))
      return false;
    allGatherByMessages(group, type, in,
                        std::vector<int64_t>(group.size(), count), out);
    return true;
  }
  bool nativeReduceScatter(const std::vector<int64_t> &group, const float *in,
                           int64_t count, float *out) override {
    if (!nativeCollectives(group))
      return false;
    reduceScatterByMessages(group, in,
                            std::vector<int64_t>(group.size(), count), out);
    return true;
  }

  void fail(const std::string &message) override {
    std::lock_guard<std::mutex> lock(world->mutex);
    world->failLocked(message);
  }

private:
  void noteError(const std::string &message) override { fail(message); }

  /// Fails the world with `message` and throws it. Needs the lock.
  [[noreturn]] void failAndThrow(const std::string &message) {
    world->failLocked(message);
    throw CommError(message);
  }
  /// Throws the world's first failure, if any. Needs the lock.
  void checkFailed() const {
    if (world->failed)
      throw CommError(world->failure);
  }
  std::chrono::duration<double> waitLimit() const {
    // Keep deadlines representable.
    return std::min(getTimeout(), std::chrono::duration<double>(1e7));
  }
  Clock::time_point deadlineFromNow() const {
    return Clock::now() +
           std::chrono::duration_cast<Clock::duration>(waitLimit());
  }
  std::string inContext() const {
    return context.empty() ? std::string() : " in " + context;
  }
  /// Waits on this rank's condition variable until woken, at most one
  /// slice and at most until `deadline`.
  void waitSlice(std::unique_lock<std::mutex> &lock,
                 Clock::time_point deadline) {
    Clock::duration left = deadline - Clock::now();
    if (left <= Clock::duration::zero())
      return;
    world->wake[static_cast<size_t>(self)].wait_for(
        lock, std::min<Clock::duration>(left, kWaitSlice));
  }
  [[noreturn]] void timedOut(const P2POp &op, bool sending);
  /// What this rank waits for, in the world's table (the cycle a timeout
  /// names), and its text. Need the lock.
  std::string waitText(const P2POp &op, bool sending) const;
  void waitingFor(const P2POp &op, bool sending);
  void notWaiting();
  /// The inbox key of messages with `tag` of this communicator: in posting
  /// order, posted messages pair in a lane of their own (as the nccl
  /// backend's communicator for them).
  int64_t keyOf(int64_t tag, bool posted = false) const {
    return world->matching == Matching::ByTag
               ? tag
               : getTagChannel() + (posted ? kMaxTagChannels : 0);
  }
  void validate(const std::vector<P2POp> &ops);
  /// Queues `ops`' sends (data ready at `ready`) into `sends`, which has
  /// room for all of them. Needs the lock.
  void enqueue(const std::vector<P2POp> &ops, bool posted,
               const device::EventPtr &ready, std::vector<Message> &sends);
  void receiveAll(std::vector<P2POp> &ops, std::unique_lock<std::mutex> &lock,
                  bool posted = false);
  void awaitSends(std::vector<Message> &sends,
                  std::unique_lock<std::mutex> &lock);
  void withdraw(std::vector<Message> &sends,
                std::unique_lock<std::mutex> &lock);

  std::shared_ptr<LocalWorld> world;
  int64_t self;
};

std::string LocalComm::waitText(const P2POp &op, bool sending) const {
  return (sending ? "its receive of " : "a message of ") +
         std::to_string(op.bytes) + " bytes with tag " + std::to_string(op.tag);
}

void LocalComm::waitingFor(const P2POp &op, bool sending) {
  world->waitPeer[static_cast<size_t>(self)] = op.peer;
  world->waitWhat[static_cast<size_t>(self)] =
      waitText(op, sending) + inContext();
}

void LocalComm::notWaiting() {
  world->waitPeer[static_cast<size_t>(self)] = -1;
  world->waitWhat[static_cast<size_t>(self)].clear();
}

void LocalComm::timedOut(const P2POp &op, bool sending) {
  waitingFor(op, sending);
  std::string message = "rank " + std::to_string(self) + " timed out after " +
                        secondsText(getTimeout()) + " s waiting for rank " +
                        std::to_string(op.peer) + inContext() + " (" +
                        waitText(op, sending) + ")";
  if (std::string cycle = world->cycleFrom(self); !cycle.empty())
    message += "; the ranks wait for each other in a cycle: " + cycle +
               " (each send waits for its receive, as NCCL's may: post the "
               "receives in the same batch as the sends, or order the "
               "batches; mimoc's verifier refuses such a plan)";
  failAndThrow(message);
}

void LocalComm::validate(const std::vector<P2POp> &ops) {
  for (const P2POp &op : ops) {
    std::string problem;
    if (op.peer < 0 || op.peer >= world->size)
      problem = "peer " + std::to_string(op.peer) +
                " is outside the world of " + std::to_string(world->size);
    else if (op.tag < 0)
      problem = "negative tag " + std::to_string(op.tag);
    else if (op.bytes < 0)
      problem = "negative size " + std::to_string(op.bytes);
    else if (op.bytes > 0 && !op.data)
      problem = "null buffer for " + std::to_string(op.bytes) + " bytes";
    if (!problem.empty()) {
      std::lock_guard<std::mutex> lock(world->mutex);
      failAndThrow("rank " + std::to_string(self) + ": bad " +
                   (op.isSend ? "send" : "receive") + inContext() + ": " +
                   problem);
    }
  }
}

void LocalComm::exchange(std::vector<P2POp> &ops) {
  validate(ops);
  if (world->matching == Matching::InPostingOrder)
    canonicalOrder(ops);
  std::vector<Message> sends;
  sends.reserve(ops.size()); // never reallocates: the queues point into it
  device::EventPtr ready;
  for (const P2POp &op : ops)
    if (op.isSend) {
      ready = device().record();
      break;
    }
  std::unique_lock<std::mutex> lock(world->mutex);
  checkFailed();
  enqueue(ops, false, ready, sends);
  try {
    receiveAll(ops, lock);
    awaitSends(sends, lock);
  } catch (...) {
    withdraw(sends, lock);
    throw;
  }
  lock.unlock();
  // The sender's buffers may be reused or freed from here on: order that
  // after the receivers' copies.
  for (Message &m : sends)
    device().wait(m.copied);
}

void LocalComm::enqueue(const std::vector<P2POp> &ops, bool posted,
                        const device::EventPtr &ready,
                        std::vector<Message> &sends) {
  for (const P2POp &op : ops) {
    if (!op.isSend)
      continue;
    Message &m = sends.emplace_back();
    m.data = op.data;
    m.bytes = op.bytes;
    m.src = self;
    m.dst = op.peer;
    m.tag = op.tag;
    m.ready = ready;
    m.key = keyOf(op.tag, posted);
    world->inbox[static_cast<size_t>(op.peer)][{self, m.key}].push_back(&m);
    world->wake[static_cast<size_t>(op.peer)].notify_all();
  }
}

/// Posted sends: their messages live here until waited for.
class LocalPosted final : public PostedSends {
public:
  LocalPosted(LocalComm &comm, size_t count) : comm(comm) {
    sends.reserve(count); // never reallocates: the queues point into it
  }
  ~LocalPosted() override {
    if (!waited)
      comm.withdrawPosted(sends);
  }
  void wait() override {
    waited = true;
    try {
      comm.awaitPosted(sends);
    } catch (...) {
      comm.withdrawPosted(sends);
      throw;
    }
  }
  bool done() override { return comm.consumed(sends); }
  std::vector<Message> sends;

private:
  LocalComm &comm;
  bool waited = false;
};

std::unique_ptr<PostedSends> LocalComm::postSends(std::vector<P2POp> ops) {
  validate(ops);
  for (const P2POp &op : ops)
    if (!op.isSend)
      throw CommError("rank " + std::to_string(self) +
                      ": only sends can be posted" + inContext());
  if (world->matching == Matching::InPostingOrder)
    canonicalOrder(ops);
  auto posted = std::make_unique<LocalPosted>(*this, ops.size());
  device::EventPtr ready = ops.empty() ? nullptr : device().record();
  std::unique_lock<std::mutex> lock(world->mutex);
  checkFailed();
  enqueue(ops, true, ready, posted->sends);
  return posted;
}

void LocalComm::receivePosted(std::vector<P2POp> &ops) {
  validate(ops);
  for (const P2POp &op : ops)
    if (op.isSend)
      throw CommError("rank " + std::to_string(self) +
                      ": receivePosted takes receives only" + inContext());
  if (world->matching == Matching::InPostingOrder)
    canonicalOrder(ops);
  std::unique_lock<std::mutex> lock(world->mutex);
  checkFailed();
  receiveAll(ops, lock, true);
}

void LocalComm::awaitPosted(std::vector<Message> &sends) {
  std::unique_lock<std::mutex> lock(world->mutex);
  awaitSends(sends, lock);
  lock.unlock();
  for (Message &m : sends)
    device().wait(m.copied);
}

void LocalComm::withdrawPosted(std::vector<Message> &sends) {
  std::unique_lock<std::mutex> lock(world->mutex);
  withdraw(sends, lock);
}

void LocalComm::receiveAll(std::vector<P2POp> &ops,
                           std::unique_lock<std::mutex> &lock, bool posted) {
  std::vector<size_t> pending;
  for (size_t i = 0; i < ops.size(); ++i)
    if (!ops[i].isSend)
      pending.push_back(i);
  auto &inbox = world->inbox[static_cast<size_t>(self)];
  Clock::time_point deadline = deadlineFromNow();
  while (!pending.empty()) {
    checkFailed();
    // The first pending receive (in batch order) whose message is here.
    // Receives of one (peer, tag) share a queue, so they match its messages
    // in order.
    auto ready = pending.end();
    std::map<std::pair<int64_t, int64_t>, std::deque<Message *>>::iterator
        queue;
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      const P2POp &op = ops[*it];
      queue = inbox.find({op.peer, keyOf(op.tag, posted)});
      if (queue != inbox.end() && !queue->second.empty()) {
        ready = it;
        break;
      }
    }
    if (ready == pending.end()) {
      if (Clock::now() >= deadline)
        timedOut(ops[pending.front()], false);
      waitingFor(ops[pending.front()], false);
      waitSlice(lock, deadline);
      continue;
    }
    notWaiting();
    P2POp &op = ops[*ready];
    Message *m = queue->second.front();
    if (m->tag != op.tag)
      failAndThrow("rank " + std::to_string(self) +
                   " posted a receive with "
                   "tag " +
                   std::to_string(op.tag) + " from rank " +
                   std::to_string(op.peer) + " where rank " +
                   std::to_string(op.peer) + " posted tag " +
                   std::to_string(m->tag) + inContext() +
                   ": a backend that pairs messages in posting order "
                   "(NCCL) would pair them wrongly");
    if (m->bytes != op.bytes)
      failAndThrow("rank " + std::to_string(self) + " expected " +
                   std::to_string(op.bytes) + " bytes from rank " +
                   std::to_string(op.peer) + " with tag " +
                   std::to_string(op.tag) + " but rank " +
                   std::to_string(op.peer) + " sent " +
                   std::to_string(m->bytes) + " bytes" + inContext());
    queue->second.pop_front();
    if (queue->second.empty())
      inbox.erase(queue);
    m->claimed = true;
    pending.erase(ready);
    lock.unlock();
    device::EventPtr copied;
    try {
      if (op.bytes > 0) {
        device().wait(m->ready);
        device().copy(op.data, m->data, op.bytes);
        copied = device().record();
      }
    } catch (const std::exception &e) {
      lock.lock();
      m->done = true; // the sender must not wait for a copy that failed
      world->wake[static_cast<size_t>(m->src)].notify_all();
      failAndThrow("rank " + std::to_string(self) + " could not copy " +
                   std::to_string(op.bytes) + " bytes from rank " +
                   std::to_string(op.peer) + inContext() + ": " + e.what());
    }
    lock.lock();
    m->copied = std::move(copied);
    m->done = true;
    world->wake[static_cast<size_t>(m->src)].notify_all();
    deadline = deadlineFromNow();
  }
}

void LocalComm::awaitSends(std::vector<Message> &sends,
                           std::unique_lock<std::mutex> &lock) {
  Clock::time_point deadline = deadlineFromNow();
  size_t doneBefore = 0;
  for (;;) {
    size_t done = 0;
    // The first message nobody has started copying (one being copied right
    // now is progress, not a hang).
    const Message *waiting = nullptr;
    for (const Message &m : sends) {
      if (m.done)
        ++done;
      else if (!m.claimed && !waiting)
        waiting = &m;
    }
    if (done == sends.size()) {
      notWaiting();
      return;
    }
    checkFailed();
    if (done != doneBefore) {
      doneBefore = done;
      deadline = deadlineFromNow();
    }
    P2POp op;
    if (waiting) {
      op.peer = waiting->dst;
      op.tag = waiting->tag;
      op.bytes = waiting->bytes;
      waitingFor(op, true);
    }
    if (Clock::now() >= deadline) {
      if (waiting)
        timedOut(op, true);
      deadline = deadlineFromNow();
    }
    waitSlice(lock, deadline);
  }
}

void LocalComm::withdraw(std::vector<Message> &sends,
                         std::unique_lock<std::mutex> &lock) {
  if (!lock.owns_lock())
    lock.lock();
  for (Message &m : sends) {
    if (m.claimed)
      continue;
    auto &inbox = world->inbox[static_cast<size_t>(m.dst)];
    auto queue = inbox.find({m.src, m.key});
    if (queue == inbox.end())
      continue;
    auto &q = queue->second;
    q.erase(std::remove(q.begin(), q.end(), &m), q.end());
    if (q.empty())
      inbox.erase(queue);
  }
  // A receiver copying one of our buffers is finishing its copy: wait for
  // it so it never reads a dead frame, and order our later use of the
  // buffer (a free, on a GPU) after the copy it enqueued.
  for (Message &m : sends)
    while (m.claimed && !m.done)
      world->wake[static_cast<size_t>(self)].wait_for(lock, kWaitSlice);
  for (Message &m : sends)
    if (m.copied) {
      try {
        device().wait(m.copied);
      } catch (const std::exception &) {
        // Already failing; the device reports its own error next.
      }
    }
}

} // namespace

std::shared_ptr<LocalWorld> makeLocalWorld(int64_t size, Matching matching) {
  if (size < 1)
    throw CommError("a local world needs at least one rank, not " +
                    std::to_string(size));
  return std::make_shared<LocalWorld>(size, matching);
}

std::unique_ptr<Comm> makeLocalComm(std::shared_ptr<LocalWorld> world,
                                    int64_t rank) {
  if (!world)
    throw CommError("makeLocalComm: no world");
  if (rank < 0 || rank >= world->size)
    throw CommError("makeLocalComm: rank " + std::to_string(rank) +
                    " is outside the world of " + std::to_string(world->size));
  return std::make_unique<LocalComm>(std::move(world), rank);
}

std::string localWorldFailure(const LocalWorld &world) {
  std::lock_guard<std::mutex> lock(world.mutex);
  return world.failure;
}

} // namespace mimo::comm
