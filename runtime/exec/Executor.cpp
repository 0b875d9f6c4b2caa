//===- Executor.cpp - Starts the ranks: threads or processes --------------===//

#include "runtime/exec/Executor.h"
#include "runtime/exec/RankExecutor.h"

#include "runtime/config/Flops.h"
#include "runtime/config/LearningRate.h"
#include "runtime/device/Devices.h"
#include "runtime/model/Model.h"
#include "runtime/support/Limits.h"
#include "runtime/support/OutputFile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace mimo::exec {

namespace {

/// docs/gpu.md overlap's default: on a GPU when every rank has one of its
/// own (ranks sharing one compete for it: measured slower on an H100),
/// off on the CPU.
bool overlapByDefault(device::DeviceKind kind, int64_t ranks) {
  return kind == device::DeviceKind::Cuda &&
         device::cudaStatus().devices >= ranks;
}

/// The runtime's own limits (message tags), checked before any rank starts.
std::string limitsError(const Plan &plan, const std::string &planFile) {
  if (plan.topology.microbatches > kMaxMicrobatches)
    return planFile + ": /model/batch/num_microbatches: error: " +
           std::to_string(plan.topology.microbatches) +
           " microbatches exceed the runtime's limit of " +
           std::to_string(kMaxMicrobatches) +
           " per step; use fewer, larger microbatches";
  if (plan.topology.modules.size() > size_t(kMaxModules))
    return planFile + ": /model/modules: error: more than " +
           std::to_string(kMaxModules) + " modules";
  return "";
}

/// The training data and, when the model evaluates, the held-out data.
struct DataSources {
  std::unique_ptr<DataSource> train, eval;
  explicit operator bool() const { return train != nullptr; }
};

/// Each module's starting weights (docs/model-json.md `init`), opened and
/// checked once: none when resuming (--load takes precedence); on a
/// problem, exit 1 naming the file and the tensor.
std::map<std::string, std::shared_ptr<const ModuleWeights>>
initsFor(const Plan &plan, const RunOptions &options, RunResult &result) {
  std::map<std::string, std::shared_ptr<const ModuleWeights>> inits;
  if (options.resume)
    return inits;
  for (const ModuleConfig &module : plan.config.modules) {
    if (!module.init)
      continue;
    std::string error;
    std::optional<ModuleWeights> weights =
        openModuleWeights(module.init->from, plan.config, module, error);
    if (!weights) {
      result.exitCode = 1;
      result.error += (result.error.empty() ? "" : "\n") + error +
                      " (the init of module '" + module.name + "')";
      continue;
    }
    inits[module.name] =
        std::make_shared<const ModuleWeights>(std::move(*weights));
  }
  return inits;
}

DataSources dataFor(const Plan &plan, const RunOptions &options,
                    RunResult &result, int64_t checkPart = 0,
                    int64_t checkParts = 1) {
  DataSources sources;
  if (std::string limits = limitsError(plan, options.planFile);
      !limits.empty()) {
    result.exitCode = 1;
    result.error = limits;
    return sources;
  }
  std::vector<std::string> errors;
  sources.train =
      makeDataSource(plan.config, options.baseDir, options.planFile, errors,
                     DataSplit::Train, checkPart, checkParts);
  if (sources.train && plan.config.train.evalEvery > 0)
    sources.eval =
        makeDataSource(plan.config, options.baseDir, options.planFile, errors,
                       DataSplit::Eval, checkPart, checkParts);
  if (!errors.empty()) {
    sources.train.reset();
    result.exitCode = 1;
    for (const std::string &e : errors)
      result.error += (result.error.empty() ? "" : "\n") + e;
  }
  return sources;
}

/// Makes `dev` this thread's current device and `comm`'s, until destroyed.
class DeviceBinding {
public:
  DeviceBinding(device::Device &dev, comm::Comm &comm) : comm(comm) {
    device::setCurrentDevice(&dev);
    comm.setDevice(&dev);
  }
  ~DeviceBinding() {
    comm.setDevice(nullptr);
    device::setCurrentDevice(nullptr);
  }
  DeviceBinding(const DeviceBinding &) = delete;
  DeviceBinding &operator=(const DeviceBinding &) = delete;

private:
  comm::Comm &comm;
};

/// Runs every step of `rank`; returns the failure message or "".
std::string runRank(const Plan &plan, int64_t rank, comm::Comm &comm,
                    const DataSource &data, const DataSource *evalData,
                    const RunOptions &options, Clock::time_point origin,
                    RunResult &result, std::vector<TraceEvent> &events,
                    const RankOptions &overlap = {}) {
  // Destroyed in reverse: the executor's tensors before the device.
  std::unique_ptr<Device> dev;
  std::optional<DeviceBinding> binding;
  std::unique_ptr<RankExecutor> executor;
  int64_t steps = options.steps >= 0 ? options.steps : plan.config.train.steps;
  int64_t step = options.resume ? options.resume->step : 0;
  // Under mpirun the failing rank's abort ends the job before rank 0 could
  // gather the trace: that rank writes its own first (FILE.rankR.json).
  auto failRank = [&](const std::string &message) {
    if (!options.failureTracePath.empty() &&
        std::string(comm.backendName()) != "local") {
      std::string path = options.failureTracePath;
      const size_t dot = path.rfind(".json");
      const std::string tag = ".rank" + std::to_string(rank);
      path = dot != std::string::npos && dot + 5 == path.size()
                 ? path.substr(0, dot) + tag + ".json"
                 : path + tag;
      std::string problem;
      if (!writeOutput(path, traceJson(events), problem))
        std::fprintf(stderr, "mimo-run: %s\n", problem.c_str());
    }
    comm.fail(message);
  };
  try {
    dev = device::makeDevice(
        options.device, options.deviceIndex >= 0 ? options.deviceIndex : rank,
        options.threads, options.attention);
    binding.emplace(*dev, comm);
    // Connections made now, before the pool grows to the activation peak.
    if (comm.connectsLazily())
      comm.warmUp(
          messagePeers(plan.topology,
                       plan.programs[static_cast<size_t>(
                           plan.rankProgram[static_cast<size_t>(rank)])],
                       rank));
    executor = std::make_unique<RankExecutor>(plan, rank, comm, *dev, data,
                                              evalData, origin, overlap);
    const TrainConfig &train = plan.config.train;
    if (options.resume)
      executor->load(*options.resume);
    else if (!overlap.inits.empty())
      executor->loadInits(overlap.inits);
    // With a trace, a device that times its kernels puts them on a stream
    // of their own, on the trace's clock.
    const bool kernels = options.collectTrace && dev->timeKernels(true);
    const double kernelsFromUs =
        std::chrono::duration<double, std::micro>(Clock::now() - origin)
            .count();
    auto takeKernels = [&] {
      if (!kernels)
        return;
      for (device::KernelSpan &k : dev->takeKernelSpans())
        events.push_back({rank, std::move(k.name),
                          kernelsFromUs + 1e6 * k.startSeconds, 1e6 * k.seconds,
                          std::string(), kDeviceStream});
    };
    for (; step < steps; ++step) {
      if (options.fault && options.fault->first == rank &&
          options.fault->second == step + 1)
        throw RankFailure(
            "injected fault (MIMO_INJECT_FAULT=" + std::to_string(rank) + ":" +
            std::to_string(step + 1) + ")");
      StepMetrics metrics =
          executor->runStep(step, options.collectTrace, events);
      takeKernels();
      if (evalData && train.evalEvery > 0 &&
          (step + 1) % train.evalEvery == 0) {
        double sum = 0;
        for (int64_t e = 0; e < train.evalSteps; ++e)
          sum += executor->evaluate(e, options.collectTrace, events);
        metrics.evalLoss = sum / static_cast<double>(train.evalSteps);
        takeKernels();
      }
      // A stop signal (every rank knows it from the step's all-reduce):
      // this step is the last, and it is saved.
      const bool stop = executor->stopRequested();
      if (!options.saveDir.empty() &&
          (stop || step + 1 == steps ||
           (options.saveEvery > 0 && (step + 1) % options.saveEvery == 0)))
        executor->save(options.saveDir, step + 1, options.killDuringSave);
      if (rank == 0) {
        result.steps.push_back(metrics);
        if (options.onStep)
          options.onStep(metrics);
      }
      if (stop && step + 1 < steps) {
        // Each process's result (local: rank 0's, the one result).
        if (rank == 0 || std::string(comm.backendName()) != "local")
          result.stoppedAfter = step + 1;
        break;
      }
    }
  } catch (const comm::CommError &e) {
    // Fail now, before the device's teardown waits for operations the
    // peers will never match (nccl); the first failure wins (local).
    failRank(e.what());
    return e.what();
  } catch (const NonFiniteStep &e) {
    // Every rank stops with the same text; rank 0 reports it (under mpirun
    // its abort ends the others, which wait for it rather than exit first).
    if (e.reporter) {
      failRank(e.what());
      return e.what();
    }
    if (std::string(comm.backendName()) != "local")
      std::this_thread::sleep_for(
          std::chrono::duration<double>(options.timeoutSeconds));
    return e.what();
  } catch (const std::exception &e) {
    std::string where = executor ? executor->where() : std::string("setup");
    if (executor && std::string(e.what()).rfind("injected", 0) == 0)
      where = "the start of step " + std::to_string(step + 1);
    std::string message = "rank " + std::to_string(rank) + " failed at " +
                          where + ": " + e.what();
    failRank(message);
    return message;
  }
  return "";
}

/// An instruction may run this long before its rank counts as stuck:
/// every wait ends after --timeout, so only a computation (a library
/// looping on an allocation, a kernel that never returns) lasts twice it.
std::chrono::duration<double> overdueAfter(const RunOptions &options) {
  return std::chrono::duration<double>(2 *
                                       std::max(options.timeoutSeconds, 1.0));
}

/// The ranks (of `progress`, the first being `firstRank`) whose instruction
/// has run longer than `limit`: "rank 3 (step 2, instruction 5: forward
/// language mb 0, for 7 s)", or "".
std::string overdueRanks(const Plan &plan,
                         const std::vector<RankProgress> &progress,
                         int64_t firstRank,
                         std::chrono::duration<double> limit) {
  std::string overdue;
  const int64_t now = Clock::now().time_since_epoch().count();
  for (size_t r = 0; r < progress.size(); ++r) {
    const RankProgress &p = progress[r];
    const Instr *instr = p.instr.load(std::memory_order_acquire);
    if (!instr)
      continue;
    const double seconds =
        std::chrono::duration<double>(
            Clock::duration(now - p.sinceNs.load(std::memory_order_relaxed)))
            .count();
    if (seconds <= limit.count())
      continue;
    char took[32];
    std::snprintf(took, sizeof(took), "%.0f", seconds);
    overdue += (overdue.empty() ? "" : "; ") + std::string("rank ") +
               std::to_string(firstRank + static_cast<int64_t>(r)) + " (step " +
               std::to_string(p.step.load(std::memory_order_relaxed)) +
               ", instruction " +
               std::to_string(p.index.load(std::memory_order_relaxed)) + ": " +
               describeInstr(plan.topology, *instr) + ", for " + took + " s)";
  }
  return overdue;
}

/// Ends the process (exit 2) naming the overdue ranks.
[[noreturn]] void endStuck(const std::string &overdue,
                           const RunOptions &options) {
  std::fflush(stdout);
  std::fprintf(stderr,
               "mimo-run: %s has run longer than twice --timeout (%g s) "
               "with no rank failed: stuck in a computation; ending the "
               "process\n",
               overdue.c_str(), options.timeoutSeconds);
  std::fflush(stderr);
  std::_Exit(2);
}

/// Watches this process's ranks from a thread of its own while they run
/// (runOnComm; runLocal watches in its own loop).
class StuckWatchdog {
public:
  StuckWatchdog(const Plan &plan, const std::vector<RankProgress> &progress,
                int64_t firstRank, const RunOptions &options)
      : thread([this, &plan, &progress, firstRank, options] {
          std::unique_lock<std::mutex> lock(mutex);
          while (!stopping) {
            changed.wait_for(lock, std::chrono::milliseconds(200));
            std::string overdue =
                overdueRanks(plan, progress, firstRank, overdueAfter(options));
            if (!overdue.empty() && !stopping)
              endStuck(overdue, options);
          }
        }) {}
  ~StuckWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    thread.join();
  }

private:
  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  std::thread thread;
};

} // namespace

std::optional<Plan> referencePlan(const ModelConfig &config,
                                  std::string *error) {
  ModelConfig reference = config;
  reference.worldSize.reset();
  for (ModuleConfig &module : reference.modules) {
    DimOrder order = module.parallel.order;
    module.parallel = ParallelConfig();
    module.parallel.order = order;
    module.pipelineLayers.clear(); // one stage
  }
  return buildPlan(reference, error);
}

std::optional<std::pair<int64_t, int64_t>> parseFault(const char *text,
                                                      std::string *error) {
  if (!text || !*text)
    return std::nullopt;
  std::string s(text);
  size_t colon = s.find(':');
  try {
    if (colon != std::string::npos) {
      size_t used1 = 0, used2 = 0;
      int64_t rank = std::stoll(s.substr(0, colon), &used1);
      int64_t step = std::stoll(s.substr(colon + 1), &used2);
      if (used1 == colon && used2 == s.size() - colon - 1 && rank >= 0 &&
          step >= 1)
        return std::make_pair(rank, step);
    }
  } catch (const std::exception &) {
  }
  if (error)
    *error = "MIMO_INJECT_FAULT='" + s +
             "' is not RANK:STEP (e.g. 3:2: rank 3 fails at the start of "
             "step 2; steps count from 1)";
  return std::make_pair(int64_t(-1), int64_t(-1));
}

RunResult runLocal(const Plan &plan, const RunOptions &options) {
  RunResult result;
  DataSources data = dataFor(plan, options, result);
  if (!data)
    return result;
  auto inits = initsFor(plan, options, result);
  if (result.exitCode != 0)
    return result;
  int64_t world = plan.topology.worldSize;
  RunOptions local = options;
  if (local.threads <= 0)
    local.threads = device::defaultThreads(world);
  auto localWorld = comm::makeLocalWorld(world, options.matching);
  // NCCL's constraints, emulated: pairing in posting order, and every
  // collective over one of the plan's communicator groups.
  bool ncclLike = options.matching == comm::Matching::InPostingOrder;
  const auto groups = communicatorGroups(plan.topology);
  std::vector<std::string> failures(static_cast<size_t>(world));
  std::vector<std::vector<TraceEvent>> events(static_cast<size_t>(world));
  Clock::time_point origin = Clock::now();
  struct Finish {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<bool> done;
    int64_t count = 0;
  } finish;
  finish.done.assign(static_cast<size_t>(world), false);
  std::vector<RankProgress> progress(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      // This rank's communicators: its own, and one per channel with tags
      // of their own.
      auto makeComm = [&, rank](int64_t tagChannel) {
        std::unique_ptr<comm::Comm> c = comm::makeLocalComm(localWorld, rank);
        c->setTimeout(std::chrono::duration<double>(options.timeoutSeconds));
        c->setTagChannel(tagChannel);
        c->prepareGroups(groups);
        c->requirePreparedGroups(ncclLike);
        return c;
      };
      std::unique_ptr<comm::Comm> c = makeComm(0);
      // Channels also have a device stream of their own (same thread count:
      // creating a CPU device sets the creating thread's kernel threads).
      RankOptions overlap;
      bool on = options.overlap.value_or(
          overlapByDefault(options.device, plan.topology.worldSize));
      overlap.bucketBytes = on ? options.gradBucketBytes : 0;
      // NCCL's pairing follows each peer's posting order on one stream:
      // the emulation keeps sends on the rank's own thread.
      overlap.sendsAhead = on && !ncclLike;
      overlap.ringAhead = on;
      overlap.logitChunkBytes = options.logitChunkBytes;
      overlap.headGradientBytes = options.headGradientBytes;
      overlap.skipNonFinite = options.skipNonFinite;
      overlap.stopRequests = options.stopRequests;
      overlap.inits = inits;
      overlap.progress = &progress[static_cast<size_t>(rank)];
      overlap.channels = [&, rank, makeComm](int64_t tagChannel) {
        return std::make_unique<comm::Channel>(
            makeComm(tagChannel),
            device::makeDevice(local.device, rank, local.threads));
      };
      failures[static_cast<size_t>(rank)] =
          runRank(plan, rank, *c, *data.train, data.eval.get(), local, origin,
                  result, events[static_cast<size_t>(rank)], overlap);
      std::lock_guard<std::mutex> lock(finish.mutex);
      finish.done[static_cast<size_t>(rank)] = true;
      ++finish.count;
      finish.changed.notify_all();
    });
  // Once a rank has failed, every other rank is released at once; one
  // stuck in a computation that never returns (a library looping on an
  // allocation it cannot get) would keep the run from ending. It is given
  // --timeout, then the process ends with the failure (exit 2). With no
  // failure (every rank stuck, or the only one), an instruction running
  // past twice --timeout ends it the same way.
  {
    std::unique_lock<std::mutex> lock(finish.mutex);
    std::optional<Clock::time_point> failedAt;
    while (finish.count < world) {
      finish.changed.wait_for(lock, std::chrono::milliseconds(200));
      if (!failedAt && !comm::localWorldFailure(*localWorld).empty())
        failedAt = Clock::now();
      if (!failedAt) {
        std::string overdue =
            overdueRanks(plan, progress, 0, overdueAfter(options));
        if (!overdue.empty() && comm::localWorldFailure(*localWorld).empty())
          endStuck(overdue, options);
      }
      if (failedAt && Clock::now() - *failedAt >
                          std::chrono::duration<double>(
                              std::max(options.timeoutSeconds, 1.0))) {
        std::string stuck;
        for (int64_t r = 0; r < world; ++r)
          if (!finish.done[static_cast<size_t>(r)])
            stuck += (stuck.empty() ? "" : " ") + std::to_string(r);
        std::fflush(stdout);
        std::fprintf(stderr,
                     "mimo-run: %s\nmimo-run: rank(s) %s did not stop within "
                     "--timeout (%g s) of that failure (stuck in a "
                     "computation); ending the process\n",
                     comm::localWorldFailure(*localWorld).c_str(),
                     stuck.c_str(), options.timeoutSeconds);
        std::fflush(stderr);
        std::_Exit(2);
      }
    }
  }
  for (std::thread &t : threads)
    t.join();
  std::string first = comm::localWorldFailure(*localWorld);
  if (first.empty())
    for (const std::string &f : failures)
      if (!f.empty()) {
        first = f;
        break;
      }
  if (!first.empty()) {
    result.exitCode = 2;
    result.error = first;
  }
  for (auto &e : events)
    result.trace.insert(result.trace.end(), e.begin(), e.end());
  return result;
}

RunResult runOnComm(const Plan &plan, comm::Comm &comm,
                    const RunOptions &options) {
  RunResult result;
  if (options.device != device::DeviceKind::Cpu &&
      std::string(comm.backendName()) == "mpi") {
    result.exitCode = 1;
    result.error = "the mpi backend moves host memory: use --device cpu with "
                   "it (GPU ranks under mpirun need the nccl backend)";
    return result;
  }
  // Each rank checks its share of a jsonl file's lines (docs/data.md);
  // the ranks then agree, so all stop when any share is bad.
  DataSources data = dataFor(plan, options, result, comm.rank(), comm.size());
  if (comm.size() > 1) {
    double bad = data ? 0.0 : 1.0;
    std::vector<int64_t> world(static_cast<size_t>(comm.size()));
    for (int64_t r = 0; r < comm.size(); ++r)
      world[static_cast<size_t>(r)] = r;
    comm.hostComm().allReduceSum(world, &bad, 1);
    if (bad > 0) {
      result.ownError = !data;
      if (data) {
        result.exitCode = 1;
        result.error = "another rank found bad data (it names the lines)";
      }
      return result;
    }
  }
  if (!data)
    return result;
  auto inits = initsFor(plan, options, result);
  if (result.exitCode != 0)
    return result;
  comm.setTimeout(std::chrono::duration<double>(options.timeoutSeconds));
  try {
    comm.prepareGroups(communicatorGroups(plan.topology));
  } catch (const std::exception &e) {
    std::string message = "rank " + std::to_string(comm.rank()) +
                          " could not create its communicators: " + e.what();
    comm.fail(message);
    result.exitCode = 2;
    result.error = message;
    return result;
  }
  RunOptions local = options;
  if (local.threads <= 0)
    local.threads = device::defaultThreads(comm::ranksOnThisNode());
  std::vector<TraceEvent> events;
  RankOptions rankOptions;
  rankOptions.skipNonFinite = options.skipNonFinite;
  rankOptions.stopRequests = options.stopRequests;
  rankOptions.inits = inits;
  rankOptions.logitChunkBytes = options.logitChunkBytes;
  rankOptions.headGradientBytes = options.headGradientBytes;
  std::vector<RankProgress> progress(1);
  rankOptions.progress = &progress[0];
  std::string failure;
  {
    StuckWatchdog watchdog(plan, progress, comm.rank(), options);
    failure = runRank(plan, comm.rank(), comm, *data.train, data.eval.get(),
                      local, Clock::now(), result, events, rankOptions);
  }
  if (!failure.empty()) {
    // The backend tears the job down; reaching here means it could not.
    comm.fail(failure);
    result.exitCode = 2;
    result.error = failure;
    return result;
  }
  if (options.collectTrace) {
    // Gather the trace on rank 0 (in host memory: the nccl backend's MPI
    // bootstrap carries it): a count, then (start, duration, stream)
    // triples and the names and arguments, one "name<TAB>args" line per
    // event.
    comm::Comm &host = comm.hostComm();
    if (comm.rank() == 0) {
      result.trace = events;
      for (int64_t r = 1; r < comm.size(); ++r) {
        int64_t sizes[2];
        host.recv(r, 1 << 27, sizes, sizeof(sizes));
        std::vector<double> times(static_cast<size_t>(3 * sizes[0]));
        std::string names(static_cast<size_t>(sizes[1]), '\0');
        host.recv(r, 1 << 27, times.data(),
                  static_cast<int64_t>(times.size() * sizeof(double)));
        host.recv(r, 1 << 27, names.data(), sizes[1]);
        size_t at = 0;
        for (int64_t i = 0; i < sizes[0]; ++i) {
          size_t end = names.find('\n', at);
          std::string line = names.substr(at, end - at);
          size_t tab = line.find('\t');
          result.trace.push_back(
              {r, line.substr(0, tab), times[static_cast<size_t>(3 * i)],
               times[static_cast<size_t>(3 * i + 1)],
               tab == std::string::npos ? std::string() : line.substr(tab + 1),
               static_cast<int>(times[static_cast<size_t>(3 * i + 2)])});
          at = end + 1;
        }
      }
    } else {
      std::vector<double> times;
      std::string names;
      for (const TraceEvent &e : events) {
        times.push_back(e.startUs);
        times.push_back(e.durationUs);
        times.push_back(static_cast<double>(e.stream));
        names += e.name + "\t" + e.args + "\n";
      }
      int64_t sizes[2] = {static_cast<int64_t>(events.size()),
                          static_cast<int64_t>(names.size())};
      host.send(0, 1 << 27, sizes, sizeof(sizes));
      host.send(0, 1 << 27, times.data(),
                static_cast<int64_t>(times.size() * sizeof(double)));
      host.send(0, 1 << 27, names.data(), sizes[1]);
    }
  }
  return result;
}

std::string traceJson(const std::vector<TraceEvent> &events) {
  nlohmann::json trace;
  trace["displayTimeUnit"] = "ms";
  nlohmann::json list = nlohmann::json::array();
  std::set<int64_t> ranks;
  for (const TraceEvent &e : events)
    ranks.insert(e.rank);
  // A process per rank, a thread per stream: its instructions (compute)
  // and its channels' collectives (comm).
  std::set<std::pair<int64_t, int>> streams;
  for (const TraceEvent &e : events)
    streams.insert({e.rank, e.stream});
  for (int64_t rank : ranks) {
    list.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", rank},
                    {"args", {{"name", "rank " + std::to_string(rank)}}}});
    list.push_back({{"name", "process_sort_index"},
                    {"ph", "M"},
                    {"pid", rank},
                    {"args", {{"sort_index", rank}}}});
  }
  for (auto [rank, stream] : streams)
    list.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", rank},
                    {"tid", stream},
                    {"args",
                     {{"name", stream == kCommStream     ? "comm"
                               : stream == kDeviceStream ? "device kernels"
                                                         : "compute"}}}});
  for (const TraceEvent &e : events) {
    nlohmann::json event = {{"name", e.name},
                            {"pid", e.rank},
                            {"tid", e.stream},
                            {"ts", e.startUs}};
    if (e.durationUs < 0) { // a step's start
      event["cat"] = "step";
      event["ph"] = "i";
      event["s"] = "t";
    } else {
      event["cat"] = e.stream == kCommStream     ? "comm"
                     : e.stream == kDeviceStream ? "kernel"
                                                 : "instruction";
      event["ph"] = "X";
      event["dur"] = e.durationUs;
    }
    if (!e.args.empty())
      event["args"] =
          nlohmann::json::parse(e.args, nullptr, /*allow_exceptions=*/false);
    list.push_back(std::move(event));
  }
  trace["traceEvents"] = std::move(list);
  return trace.dump();
}

} // namespace mimo::exec
