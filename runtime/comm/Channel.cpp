//===- Channel.cpp - A rank's collectives on a thread of their own --------===//

#include "runtime/comm/Channel.h"

#include "runtime/device/Tensor.h"

namespace mimo::comm {

void Request::wait(device::Device &poster) {
  device::EventPtr event;
  {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return complete; });
    if (error)
      std::rethrow_exception(error);
    event = end;
  }
  poster.wait(event);
}

void waitAll(const std::vector<std::shared_ptr<Request>> &requests,
             device::Device &poster) {
  std::exception_ptr first;
  for (const std::shared_ptr<Request> &request : requests) {
    try {
      request->wait(poster);
    } catch (...) {
      if (!first)
        first = std::current_exception();
    }
  }
  if (first)
    std::rethrow_exception(first);
}

bool Request::done() const {
  std::lock_guard<std::mutex> lock(mutex);
  return complete;
}

Channel::Channel(std::unique_ptr<Comm> commIn,
                 std::unique_ptr<device::Device> devIn)
    : comm(std::move(commIn)), dev(std::move(devIn)) {
  if (!comm || !dev)
    throw CommError("a channel needs a communicator and a device");
  comm->setDevice(dev.get());
  worker = std::thread([this] { run(); });
}

Channel::~Channel() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  worker.join();
  // What the worker enqueued on its stream finishes before the buffers it
  // reads or writes can be freed (a failure unwinding).
  try {
    dev->synchronize();
  } catch (const std::exception &) {
    // The device reports its own fault elsewhere.
  }
  for (Task &task : queue)
    finish(*task.request,
           std::make_exception_ptr(CommError("the channel closed before " +
                                             task.what + " started")),
           nullptr);
}

std::shared_ptr<Request> Channel::allReduceSum(std::vector<int64_t> group,
                                               float *data, int64_t count,
                                               device::EventPtr ready,
                                               std::string what) {
  return post([group = std::move(group), data,
               count](Comm &c) { c.allReduceSum(group, data, count); },
              std::move(ready), std::move(what));
}

std::shared_ptr<Request> Channel::allReduceSumBf16(std::vector<int64_t> group,
                                                   float *data, int64_t count,
                                                   device::EventPtr ready,
                                                   std::string what) {
  return post([group = std::move(group), data,
               count](Comm &c) { c.allReduceSumBf16(group, data, count); },
              std::move(ready), std::move(what));
}

std::shared_ptr<Request>
Channel::reduceScatterV(std::vector<int64_t> group, const float *in,
                        std::vector<int64_t> counts, float *out,
                        device::EventPtr ready, std::string what) {
  return post([group = std::move(group), in, counts = std::move(counts),
               out](Comm &c) { c.reduceScatterV(group, in, counts, out); },
              std::move(ready), std::move(what));
}

std::shared_ptr<Request> Channel::exchange(std::vector<P2POp> ops,
                                           device::EventPtr ready,
                                           std::string what) {
  return post([ops = std::move(ops)](Comm &c) mutable { c.exchange(ops); },
              std::move(ready), std::move(what));
}

std::shared_ptr<Request> Channel::post(std::function<void(Comm &)> work,
                                       device::EventPtr ready,
                                       std::string what) {
  auto request = std::make_shared<Request>();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure) {
      finish(*request, failure, nullptr);
      return request;
    }
    queue.push_back(
        {std::move(work), std::move(ready), std::move(what), request});
  }
  wake.notify_all();
  return request;
}

void Channel::finish(Request &request, std::exception_ptr error,
                     device::EventPtr end) {
  {
    std::lock_guard<std::mutex> lock(request.mutex);
    request.finished = std::chrono::steady_clock::now();
    request.error = std::move(error);
    request.end = std::move(end);
    request.complete = true;
  }
  request.cv.notify_all();
}

void Channel::run() {
  device::setCurrentDevice(dev.get());
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping)
        break;
      task = std::move(queue.front());
      queue.pop_front();
      if (failure) {
        finish(*task.request, failure, nullptr);
        continue;
      }
    }
    task.request->started = std::chrono::steady_clock::now();
    std::exception_ptr error;
    device::EventPtr end;
    try {
      comm->setContext(task.what);
      dev->wait(task.ready);
      task.work(*comm);
      end = dev->record();
    } catch (...) {
      error = std::current_exception();
      std::lock_guard<std::mutex> lock(mutex);
      if (!failure)
        failure = error;
    }
    finish(*task.request, error, std::move(end));
  }
  device::setCurrentDevice(nullptr);
}

} // namespace mimo::comm
