//===- OperationClock.h - When a queued operation's time starts -*- C++ -*-===//
//
// The nccl backend's watchdog (docs/gpu.md "Failures") follows the
// operations a rank has enqueued on its stream, oldest first. An operation
// is timed from when the device could start it, the end of the one before
// it (or its enqueueing, if later), not from its enqueueing: work queued
// ahead of it does not count against its timeout, and an operation that
// never ends (a peer that never joins) still runs out of it. The clock is
// host logic only, with the device's events behind a predicate, so the
// unit tests drive it with fake events and times.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_COMM_OPERATIONCLOCK_H
#define MIMO_RUNTIME_COMM_OPERATIONCLOCK_H

#include <algorithm>
#include <chrono>
#include <deque>
#include <string>
#include <utility>

namespace mimo::comm {

template <typename Event> class OperationClock {
public:
  using Clock = std::chrono::steady_clock;
  struct Operation {
    Event event; // reached when the operation has ended
    std::string what;
    Clock::time_point since; // when its time started
  };

  /// An operation enqueued at `now`.
  void post(Event event, std::string what, Clock::time_point now) {
    operations.push_back({std::move(event), std::move(what), now});
  }

  /// Drops the operations at the front that `ended` says have ended; the
  /// new front's time starts at `now` (its predecessor ended by then).
  /// `ended` may throw (a device fault): what it had dropped stays dropped.
  template <typename Ended> void drop(Ended ended, Clock::time_point now) {
    bool dropped = false;
    while (!operations.empty() && ended(operations.front().event)) {
      operations.pop_front();
      dropped = true;
    }
    if (dropped && !operations.empty())
      operations.front().since = std::max(operations.front().since, now);
  }

  /// The front operation when it has run longer than `limit`, else null.
  const Operation *overdue(Clock::time_point now, Clock::duration limit) const {
    if (operations.empty() || now - operations.front().since <= limit)
      return nullptr;
    return &operations.front();
  }

  bool empty() const { return operations.empty(); }
  const Operation &front() const { return operations.front(); }
  const std::deque<Operation> &all() const { return operations; }

private:
  std::deque<Operation> operations;
};

} // namespace mimo::comm

#endif // MIMO_RUNTIME_COMM_OPERATIONCLOCK_H
