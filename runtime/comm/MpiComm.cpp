//===- MpiComm.cpp - The `mpi` backend: one process per rank -------------===//
//
// exchange() posts every operation with MPI_Irecv / MPI_Isend on
// MPI_COMM_WORLD (receives first, so large messages find their buffer
// posted) and polls them with MPI_Testsome until all are done or nothing
// has completed for the timeout. MPI errors are returned, not fatal
// (MPI_ERRORS_RETURN), and become CommError; the caller then calls fail(),
// which tears the whole job down with MPI_Abort.
//
// Built only with MIMO_HAVE_MPI; otherwise makeMpiComm reports that mimo
// was built without MPI.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Comm.h"

#include <cstdio>
#include <cstdlib>

#ifdef MIMO_HAVE_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <thread>
#endif

namespace mimo::comm {

bool launchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ||
         std::getenv("PMI_SIZE");
}

int64_t ranksOnThisNode() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                           "SLURM_NTASKS_PER_NODE"})
    if (const char *value = std::getenv(name)) {
      long long n = std::atoll(value);
      if (n > 0)
        return n;
    }
  return 1;
}

int64_t worldRankFromLauncher() {
  for (const char *name :
       {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char *value = std::getenv(name)) {
      long long n = std::atoll(value);
      if (n >= 0)
        return n;
    }
  return 0;
}

int64_t localRankOnThisNode() {
  for (const char *name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char *value = std::getenv(name)) {
      long long n = std::atoll(value);
      if (n >= 0)
        return n;
    }
  return 0;
}

#ifdef MIMO_HAVE_MPI

namespace {

using Clock = std::chrono::steady_clock;

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

int errorClass(int code) {
  int cls = code;
  if (MPI_Error_class(code, &cls) != MPI_SUCCESS)
    return code;
  return cls;
}

bool mpiActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

class MpiComm final : public Comm {
public:
  MpiComm(int64_t rank, int64_t size, int64_t tagLimit)
      : self(rank), world(size), tagLimit(tagLimit) {}

  int64_t rank() const override { return self; }
  int64_t size() const override { return world; }
  const char *backendName() const override { return "mpi"; }
  Capabilities capabilities() const override {
    return {/*ranksShareProcess=*/false, /*hostMemoryOnly=*/true,
            /*connectsLazily=*/false};
  }

  void exchange(std::vector<P2POp> &ops) override;
  std::unique_ptr<PostedSends> postSends(std::vector<P2POp> ops) override;

  void fail(const std::string &message) override {
    std::fflush(stdout);
    std::fprintf(stderr, "mimo-run: %s\n", message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    std::_Exit(2); // MPI_Abort does not return; in case it does
  }

private:
  std::string inContext() const {
    return context.empty() ? std::string() : " in " + context;
  }
  std::string who() const { return "rank " + std::to_string(self); }
  void validate(const std::vector<P2POp> &ops) const;
  /// Polls the posted requests until all finish; throws CommError on a
  /// timeout or a failed or mis-sized message.
  void waitAll(std::vector<P2POp> &ops, const std::vector<size_t> &order,
               std::vector<MPI_Request> &requests, std::vector<int> &indices,
               std::vector<MPI_Status> &statuses, std::vector<bool> &finished);

  int64_t self;
  int64_t world;
  /// MPI_TAG_UB of MPI_COMM_WORLD.
  int64_t tagLimit;

  friend class MpiPosted;
};

/// Sends posted with MPI_Isend; MPI moves them whenever this rank is in
/// MPI (any later exchange, or the wait).
class MpiPosted final : public PostedSends {
public:
  MpiPosted(MpiComm &comm, std::vector<P2POp> ops)
      : comm(comm), ops(std::move(ops)), order(this->ops.size()),
        requests(this->ops.size(), MPI_REQUEST_NULL) {
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
  }
  ~MpiPosted() override {
    // Unwaited only while failing (the job is torn down): let MPI finish
    // them on its own.
    for (MPI_Request &r : requests)
      if (r != MPI_REQUEST_NULL)
        MPI_Request_free(&r);
  }
  void wait() override {
    std::vector<int> indices(ops.size());
    std::vector<MPI_Status> statuses(ops.size());
    std::vector<bool> finished(ops.size(), false);
    comm.waitAll(ops, order, requests, indices, statuses, finished);
  }
  bool done() override {
    int complete = 0;
    // Errors surface in wait(), which finds the requests still there.
    if (MPI_Testall(static_cast<int>(requests.size()), requests.data(),
                    &complete, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
      return false;
    return complete != 0;
  }

  MpiComm &comm;
  std::vector<P2POp> ops;
  std::vector<size_t> order;
  std::vector<MPI_Request> requests;
};

std::unique_ptr<PostedSends> MpiComm::postSends(std::vector<P2POp> ops) {
  validate(ops);
  static char empty = 0; // MPI wants a buffer even for 0 bytes
  auto posted = std::make_unique<MpiPosted>(*this, std::move(ops));
  for (size_t r = 0; r < posted->ops.size(); ++r) {
    const P2POp &op = posted->ops[r];
    if (!op.isSend)
      throw CommError(who() + ": only sends can be posted" + inContext());
    int rc =
        MPI_Isend(op.bytes > 0 ? op.data : &empty, static_cast<int>(op.bytes),
                  MPI_BYTE, static_cast<int>(op.peer), static_cast<int>(op.tag),
                  MPI_COMM_WORLD, &posted->requests[r]);
    if (rc != MPI_SUCCESS)
      throw CommError(who() + ": MPI_Isend to rank " + std::to_string(op.peer) +
                      " with tag " + std::to_string(op.tag) + " failed" +
                      inContext() + ": " + mpiErrorText(rc));
  }
  return posted;
}

void MpiComm::validate(const std::vector<P2POp> &ops) const {
  for (const P2POp &op : ops) {
    std::string problem;
    if (op.peer < 0 || op.peer >= world)
      problem = "peer " + std::to_string(op.peer) +
                " is outside the world of " + std::to_string(world);
    else if (op.tag < 0 || op.tag > tagLimit)
      problem = "tag " + std::to_string(op.tag) + " is outside 0.." +
                std::to_string(tagLimit) + " (MPI_TAG_UB)";
    else if (op.bytes < 0)
      problem = "negative size " + std::to_string(op.bytes);
    else if (op.bytes > INT_MAX)
      problem = std::to_string(op.bytes) +
                " bytes exceed the mpi backend's limit of " +
                std::to_string(INT_MAX) + " bytes per message";
    else if (op.bytes > 0 && !op.data)
      problem = "null buffer for " + std::to_string(op.bytes) + " bytes";
    if (!problem.empty())
      throw CommError(who() + ": bad " + (op.isSend ? "send" : "receive") +
                      " to/from rank " + std::to_string(op.peer) + inContext() +
                      ": " + problem);
  }
}

void MpiComm::exchange(std::vector<P2POp> &ops) {
  validate(ops);
  if (ops.empty())
    return;
  static char empty = 0; // MPI wants a buffer even for 0 bytes
  // Requests in posting order: receives, then sends; order[i] is the op.
  std::vector<size_t> order;
  order.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    if (!ops[i].isSend)
      order.push_back(i);
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].isSend)
      order.push_back(i);
  std::vector<MPI_Request> requests(order.size(), MPI_REQUEST_NULL);
  for (size_t r = 0; r < order.size(); ++r) {
    P2POp &op = ops[order[r]];
    void *buffer = op.bytes > 0 ? op.data : &empty;
    int count = static_cast<int>(op.bytes);
    int rc =
        op.isSend
            ? MPI_Isend(buffer, count, MPI_BYTE, static_cast<int>(op.peer),
                        static_cast<int>(op.tag), MPI_COMM_WORLD, &requests[r])
            : MPI_Irecv(buffer, count, MPI_BYTE, static_cast<int>(op.peer),
                        static_cast<int>(op.tag), MPI_COMM_WORLD, &requests[r]);
    if (rc != MPI_SUCCESS)
      throw CommError(who() + ": " +
                      (op.isSend ? "MPI_Isend to" : "MPI_Irecv from") +
                      " rank " + std::to_string(op.peer) + " with tag " +
                      std::to_string(op.tag) + " failed" + inContext() + ": " +
                      mpiErrorText(rc));
  }

  std::vector<int> indices(order.size());
  std::vector<MPI_Status> statuses(order.size());
  std::vector<bool> finished(order.size(), false);
  try {
    waitAll(ops, order, requests, indices, statuses, finished);
  } catch (const CommError &) {
    // The caller unwinds (and frees the receive buffers) before it tears
    // the job down: cancel the receives still pending so that MPI cannot
    // write into freed memory, waiting at most a second for each.
    for (size_t r = 0; r < order.size(); ++r) {
      if (finished[r] || ops[order[r]].isSend ||
          requests[r] == MPI_REQUEST_NULL)
        continue;
      MPI_Cancel(&requests[r]);
      Clock::time_point start = Clock::now();
      int complete = 0;
      while (!complete && Clock::now() - start < std::chrono::seconds(1))
        MPI_Test(&requests[r], &complete, MPI_STATUS_IGNORE);
    }
    throw;
  }
}

void MpiComm::waitAll(std::vector<P2POp> &ops, const std::vector<size_t> &order,
                      std::vector<MPI_Request> &requests,
                      std::vector<int> &indices,
                      std::vector<MPI_Status> &statuses,
                      std::vector<bool> &finished) {
  int n = static_cast<int>(order.size());
  int left = n;
  auto limit = std::min(getTimeout(), std::chrono::duration<double>(1e7));
  auto window = std::chrono::duration_cast<Clock::duration>(limit);
  Clock::time_point lastProgress = Clock::now();
  long idle = 0;
  while (left > 0) {
    int done = 0;
    int rc = MPI_Testsome(n, requests.data(), &done, indices.data(),
                          statuses.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)
      throw CommError(who() + ": MPI_Testsome failed" + inContext() + ": " +
                      mpiErrorText(rc));
    if (done == MPI_UNDEFINED)
      break; // no active request left
    for (int k = 0; k < done; ++k) {
      size_t r = static_cast<size_t>(indices[static_cast<size_t>(k)]);
      const MPI_Status &status = statuses[static_cast<size_t>(k)];
      const P2POp &op = ops[order[r]];
      finished[r] = true;
      --left;
      std::string peer = "rank " + std::to_string(op.peer);
      int error = rc == MPI_ERR_IN_STATUS ? status.MPI_ERROR : MPI_SUCCESS;
      if (error != MPI_SUCCESS) {
        if (!op.isSend && errorClass(error) == MPI_ERR_TRUNCATE)
          throw CommError(who() + " expected " + std::to_string(op.bytes) +
                          " bytes from " + peer + " with tag " +
                          std::to_string(op.tag) + " but " + peer +
                          " sent more (MPI_ERR_TRUNCATE)" + inContext());
        throw CommError(who() + ": " +
                        (op.isSend ? "send to " : "receive from ") + peer +
                        " with tag " + std::to_string(op.tag) + " failed" +
                        inContext() + ": " + mpiErrorText(error));
      }
      if (!op.isSend) {
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        if (count != op.bytes)
          throw CommError(who() + " expected " + std::to_string(op.bytes) +
                          " bytes from " + peer + " with tag " +
                          std::to_string(op.tag) + " but " + peer + " sent " +
                          std::to_string(count) + " bytes" + inContext());
      }
    }
    if (done > 0) {
      lastProgress = Clock::now();
      idle = 0;
      continue;
    }
    ++idle;
    if (idle < 64)
      continue;
    Clock::time_point now = Clock::now();
    if (now - lastProgress >= window) {
      // Name the peer of the first unfinished receive, else send.
      const P2POp *waiting = nullptr;
      for (size_t r = 0; r < order.size() && !waiting; ++r)
        if (!finished[r])
          waiting = &ops[order[r]];
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", getTimeout().count());
      std::string message = who() + " timed out after " + seconds +
                            " s waiting for rank " +
                            std::to_string(waiting->peer) + inContext();
      std::fprintf(stderr,
                   "mimo-run: %s: timed out after %s s waiting for "
                   "rank %lld%s\n",
                   who().c_str(), seconds,
                   static_cast<long long>(waiting->peer), inContext().c_str());
      std::fflush(stderr);
      throw CommError(message);
    }
    // Long idle waits (another stage computing) give the core away; while
    // messages are moving keep polling, yielding to other ranks.
    if (now - lastProgress > std::chrono::seconds(1))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else
      std::this_thread::yield();
  }
}

} // namespace

std::unique_ptr<Comm> makeMpiComm(std::string *error) {
  auto failWith = [&](const std::string &message) {
    if (error)
      *error = message;
    return std::unique_ptr<Comm>();
  };
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized)
    return failWith("MPI was already finalized");
  if (!initialized) {
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS)
      return failWith("MPI_Init_thread failed: " + mpiErrorText(rc));
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  if (MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS ||
      MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS)
    return failWith("cannot query MPI_COMM_WORLD");
  int64_t tagLimit = 32767; // the least MPI guarantees
  int *value = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found) ==
          MPI_SUCCESS &&
      found && value)
    tagLimit = *value;
  if (tagLimit < kCollectiveTagBase + (int64_t(1) << 20))
    return failWith(
        "this MPI's largest tag (MPI_TAG_UB = " + std::to_string(tagLimit) +
        ") is below the collective tags mimo needs");
  return std::make_unique<MpiComm>(rank, size, tagLimit);
}

void finalizeMpi() {
  if (mpiActive())
    MPI_Finalize();
}

void abortMpi(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpiActive()) {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
  std::exit(code);
}

#else // !MIMO_HAVE_MPI

std::unique_ptr<Comm> makeMpiComm(std::string *error) {
  if (error)
    *error = "mimo was built without MPI";
  return nullptr;
}

void finalizeMpi() {}

void abortMpi(int code) { std::exit(code); }

#endif

} // namespace mimo::comm
