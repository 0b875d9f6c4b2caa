//===- Channel.h - Collectives completed in the background ------*- C++ -*-===//
//
// docs/gpu.md (overlap). A Channel is a second communicator of one rank with a
// thread and a device stream of its own: the caller posts a collective and
// goes on computing; the channel runs its collectives one after another in
// posting order and each Request says when its collective is done. Every
// member of a group posts the group's collectives on its channel in the
// same order, so a channel serves one group's stream of collectives (the
// executor keeps one per module: its data-parallel gradient buckets).
//
// Ordering with the poster's device: a collective starts after the event
// the poster recorded (its data is ready), and Request::wait makes the
// poster's later work wait for the collective's end, on the host (the
// request is done) and on the device (its event). On the CPU both are the
// host. The channel's collectives take tags of their own range
// (Comm::setTagChannel), so they never match the poster's messages.
//
// Failures: a collective that fails (a timeout, a failed peer) fails its
// request and every request after it; wait() rethrows the first failure.
// Destroying the channel abandons what has not started and waits for the
// collective running (which ends at the latest at the timeout, or when the
// world fails).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_COMM_CHANNEL_H
#define MIMO_RUNTIME_COMM_CHANNEL_H

#include "runtime/comm/Comm.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mimo::comm {

/// One collective posted on a channel.
class Request {
public:
  /// Waits on the host until the collective has finished, rethrows its
  /// failure, then orders `poster`'s later work after it.
  void wait(device::Device &poster);
  bool done() const;
  /// When the channel started and finished it (for the trace); valid once
  /// done.
  std::chrono::steady_clock::time_point started, finished;

private:
  friend class Channel;
  mutable std::mutex mutex;
  std::condition_variable cv;
  bool complete = false;
  std::exception_ptr error;
  device::EventPtr end;
};

/// Waits for every request, also after one failed (none may still use its
/// buffers when this returns), then rethrows the first failure.
void waitAll(const std::vector<std::shared_ptr<Request>> &requests,
             device::Device &poster);

class Channel {
public:
  /// `comm`: this rank's communicator for the channel, with its own tag
  /// channel and timeout; `dev`: the device whose stream the channel's
  /// staging, copies and reductions run on (a second stream of the rank's
  /// GPU, or the CPU).
  Channel(std::unique_ptr<Comm> comm, std::unique_ptr<device::Device> dev);
  ~Channel();
  Channel(const Channel &) = delete;
  Channel &operator=(const Channel &) = delete;

  /// Posts data[0, count) = the sum over `group` (Comm::allReduceSum, bit-
  /// identical to it), started after `ready` (an event of the poster's
  /// device, null: nothing to wait for). `what` names it in errors.
  std::shared_ptr<Request> allReduceSum(std::vector<int64_t> group, float *data,
                                        int64_t count, device::EventPtr ready,
                                        std::string what);
  /// Comm::allReduceSumBf16 posted likewise.
  std::shared_ptr<Request> allReduceSumBf16(std::vector<int64_t> group,
                                            float *data, int64_t count,
                                            device::EventPtr ready,
                                            std::string what);
  /// Posts Comm::reduceScatterV (bit-identical to it), started after
  /// `ready`; `out` may be this member's piece of `in` itself.
  std::shared_ptr<Request> reduceScatterV(std::vector<int64_t> group,
                                          const float *in,
                                          std::vector<int64_t> counts,
                                          float *out, device::EventPtr ready,
                                          std::string what);
  /// Posts a batch of messages (Comm::exchange), started after `ready`.
  /// The buffers must stay valid until the request is done.
  std::shared_ptr<Request> exchange(std::vector<P2POp> ops,
                                    device::EventPtr ready, std::string what);

  Comm &communicator() { return *comm; }

private:
  struct Task {
    /// What the worker runs with the channel's communicator.
    std::function<void(Comm &)> work;
    device::EventPtr ready;
    std::string what;
    std::shared_ptr<Request> request;
  };
  std::shared_ptr<Request> post(std::function<void(Comm &)> work,
                                device::EventPtr ready, std::string what);
  void run();
  static void finish(Request &request, std::exception_ptr error,
                     device::EventPtr end);

  std::unique_ptr<Comm> comm;
  std::unique_ptr<device::Device> dev;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Task> queue;
  bool stopping = false;
  /// The first failure: every later request fails with it.
  std::exception_ptr failure;
  std::thread worker;
};

} // namespace mimo::comm

#endif // MIMO_RUNTIME_COMM_CHANNEL_H
