//===- BoundedExit.cpp - End the process after a cleanup, or without it ---===//

#include "runtime/comm/BoundedExit.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

namespace mimo::comm {

void exitAfter(std::function<void()> cleanup,
               std::chrono::duration<double> limit, int code) {
  struct Shared {
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;
  };
  // Shared with the thread, which may outlive this frame's wait.
  auto shared = std::make_shared<Shared>();
  try {
    std::thread([shared, cleanup = std::move(cleanup)] {
      try {
        cleanup();
      } catch (...) {
      }
      std::lock_guard<std::mutex> lock(shared->mutex);
      shared->finished = true;
      shared->done.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lock(shared->mutex);
    shared->done.wait_for(lock, limit, [&] { return shared->finished; });
  } catch (...) {
    // No thread could be started: end without the cleanup.
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

} // namespace mimo::comm
