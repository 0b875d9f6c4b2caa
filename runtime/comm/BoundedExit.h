//===- BoundedExit.h - End the process after a cleanup, or without it -*- C++
//-*-===//
//
// The nccl backend's watchdog ends a hung rank: it aborts the rank's NCCL
// communicators (so that the other ranks' NCCL calls fail rather than wait)
// and exits 2. ncclCommAbort on a blocking communicator can itself wait
// while the rank's thread is inside ncclGroupEnd, ncclCommInitRank or
// ncclCommSplit on it; the exit must not depend on it. So the cleanup runs
// on a thread of its own and the process ends when it returns or when the
// time limit passes, whichever comes first.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_COMM_BOUNDEDEXIT_H
#define MIMO_RUNTIME_COMM_BOUNDEDEXIT_H

#include <chrono>
#include <functional>

namespace mimo::comm {

/// Runs `cleanup` on a detached thread, then ends the process with `code`
/// (std::_Exit: no destructors, no atexit handlers) as soon as it returned
/// or `limit` passed. Never returns.
[[noreturn]] void exitAfter(std::function<void()> cleanup,
                            std::chrono::duration<double> limit, int code);

/// The limit the watchdog gives ncclCommAbort.
inline constexpr std::chrono::seconds kAbortGrace{10};

} // namespace mimo::comm

#endif // MIMO_RUNTIME_COMM_BOUNDEDEXIT_H
