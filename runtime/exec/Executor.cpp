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
#include <functional>
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
/// checked once: when resuming (--load takes precedence) only a LoRA
/// module's, whose base the checkpoint does not hold; on a problem, exit 1
/// naming the file and the tensor.
std::map<std::string, std::shared_ptr<const ModuleWeights>>
initsFor(const Plan &plan, const RunOptions &options, RunResult &result) {
  std::map<std::string, std::shared_ptr<const ModuleWeights>> inits;
  for (const ModuleConfig &module : plan.config.modules) {
    if (!module.init || (options.resume && !module.lora))
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

/// What one rank runs with: the plan, its rank and communicator, the data,
/// the run's options and clock, and its own settings.
struct RankRun {
  const Plan &plan;
  int64_t rank;
  comm::Comm &comm;
  const DataSources &data;
  const RunOptions &options;
  Clock::time_point origin;
  RankOptions settings;
};

/// The settings every backend gives a rank (runLocal and runOnComm add the
/// overlap's).
RankOptions rankSettings(
    const RunOptions &options,
    const std::map<std::string, std::shared_ptr<const ModuleWeights>> &inits,
    RankProgress *progress) {
  RankOptions settings;
  settings.logitChunkBytes = options.logitChunkBytes;
  settings.headGradientBytes = options.headGradientBytes;
  settings.skipNonFinite = options.skipNonFinite;
  settings.stopRequests = options.stopRequests;
  settings.inits = inits;
  settings.progress = progress;
  return settings;
}

/// Runs every step of `run.rank`; returns the failure message or "".
std::string runRank(const RankRun &run, RunResult &result,
                    std::vector<TraceEvent> &events) {
  const Plan &plan = run.plan;
  const int64_t rank = run.rank;
  comm::Comm &comm = run.comm;
  const DataSource &data = *run.data.train;
  const DataSource *evalData = run.data.eval.get();
  const RunOptions &options = run.options;
  const RankOptions &overlap = run.settings;
  const bool ownProcess = !comm.capabilities().ranksShareProcess;
  // Destroyed in reverse: the executor's tensors before the device.
  std::unique_ptr<Device> dev;
  std::optional<DeviceBinding> binding;
  std::unique_ptr<RankExecutor> executor;
  int64_t steps = options.steps >= 0 ? options.steps : plan.config.train.steps;
  int64_t step = options.resume ? options.resume->step : 0;
  // Under mpirun the failing rank's abort ends the job before rank 0 could
  // gather the trace: that rank writes its own first (FILE.rankR.json).
  auto failRank = [&](const std::string &message) {
    if (!options.failureTracePath.empty() && ownProcess) {
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
    if (comm.capabilities().connectsLazily)
      comm.warmUp(
          messagePeers(plan.topology,
                       plan.programs[static_cast<size_t>(
                           plan.rankProgram[static_cast<size_t>(rank)])],
                       rank));
    // The channels' communicators, made and connected on every rank alike
    // (runOnComm gives channels to a backend that opens them).
    if (comm.capabilities().opensChannels && overlap.channels) {
      std::vector<comm::ChannelGroups> families;
      for (const ChannelFamily &f : channelFamiliesOf(plan))
        families.push_back({f.groups, f.use == ChannelUse::Ring});
      comm.prepareChannels(families);
    }
    executor = std::make_unique<RankExecutor>(plan, rank, comm, *dev, data,
                                              evalData, run.origin, overlap);
    const TrainConfig &train = plan.config.train;
    // Resuming a LoRA module: its base from the init, then the checkpoint.
    if (!overlap.inits.empty())
      executor->loadInits(overlap.inits);
    if (options.resume)
      executor->load(*options.resume);
    // With a trace, a device that times its kernels puts them on a stream
    // of their own, on the trace's clock.
    const bool kernels = options.collectTrace && dev->timeKernels(true);
    const double kernelsFromUs =
        std::chrono::duration<double, std::micro>(Clock::now() - run.origin)
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
        if (rank == 0 || ownProcess)
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
    if (ownProcess)
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

/// The one watchdog of a process's ranks, on a thread of its own while
/// they run. An instruction running past twice --timeout with no rank
/// failed ends the process (exit 2: stuck in a computation). Where the
/// ranks share the process (`failure` given: the local world's first
/// failure, or ""), once one has failed the others are released at once;
/// one that has not finished (`unfinished`: their ranks, or "") --timeout
/// later is stuck in a computation and ends the process the same way.
class Watchdog {
public:
  using Probe = std::function<std::string()>;
  Watchdog(const Plan &plan, const std::vector<RankProgress> &progress,
           int64_t firstRank, const RunOptions &options, Probe failure = {},
           Probe unfinished = {})
      : thread([this, &plan, &progress, firstRank, options, failure,
                unfinished] {
          std::unique_lock<std::mutex> lock(mutex);
          std::optional<Clock::time_point> failedAt;
          while (!stopping) {
            changed.wait_for(lock, std::chrono::milliseconds(200));
            if (stopping)
              break;
            if (!failedAt && failure && !failure().empty())
              failedAt = Clock::now();
            if (!failedAt) {
              std::string overdue = overdueRanks(plan, progress, firstRank,
                                                 overdueAfter(options));
              // A failure while the ranks were read releases them instead.
              if (!overdue.empty() && (!failure || failure().empty()))
                endStuck(overdue, options);
              continue;
            }
            if (Clock::now() - *failedAt <=
                std::chrono::duration<double>(
                    std::max(options.timeoutSeconds, 1.0)))
              continue;
            const std::string stuck = unfinished ? unfinished() : "";
            if (stuck.empty())
              continue;
            std::fflush(stdout);
            std::fprintf(stderr,
                         "mimo-run: %s\nmimo-run: rank(s) %s did not stop "
                         "within --timeout (%g s) of that failure (stuck in a "
                         "computation); ending the process\n",
                         failure().c_str(), stuck.c_str(),
                         options.timeoutSeconds);
            std::fflush(stderr);
            std::_Exit(2);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    thread.join();
  }
  Watchdog(const Watchdog &) = delete;
  Watchdog &operator=(const Watchdog &) = delete;

private:
  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  std::thread thread;
};

/// A rank's trace in host messages (the nccl backend's MPI bootstrap
/// carries them): (start, duration, stream) per event and one
/// "name<TAB>args" line each.
struct PackedTrace {
  std::vector<double> times;
  std::string names;
};

PackedTrace packTrace(const std::vector<TraceEvent> &events) {
  PackedTrace packed;
  for (const TraceEvent &e : events) {
    packed.times.push_back(e.startUs);
    packed.times.push_back(e.durationUs);
    packed.times.push_back(static_cast<double>(e.stream));
    packed.names += e.name + "\t" + e.args + "\n";
  }
  return packed;
}

void unpackTrace(int64_t rank, const PackedTrace &packed,
                 std::vector<TraceEvent> &out) {
  size_t at = 0;
  for (size_t i = 0; i < packed.times.size() / 3; ++i) {
    const size_t end = packed.names.find('\n', at);
    const std::string line = packed.names.substr(at, end - at);
    const size_t tab = line.find('\t');
    out.push_back(
        {rank, line.substr(0, tab), packed.times[3 * i],
         packed.times[3 * i + 1],
         tab == std::string::npos ? std::string() : line.substr(tab + 1),
         static_cast<int>(packed.times[3 * i + 2])});
    at = end + 1;
  }
}

/// Every rank's trace on rank 0, in rank order (its own first).
void gatherTrace(comm::Comm &comm, const std::vector<TraceEvent> &events,
                 std::vector<TraceEvent> &out) {
  comm::Comm &host = comm.hostComm();
  constexpr int64_t kTag = 1 << 27;
  if (comm.rank() != 0) {
    PackedTrace packed = packTrace(events);
    int64_t sizes[2] = {static_cast<int64_t>(packed.times.size()),
                        static_cast<int64_t>(packed.names.size())};
    host.send(0, kTag, sizes, sizeof(sizes));
    host.send(0, kTag, packed.times.data(),
              static_cast<int64_t>(packed.times.size() * sizeof(double)));
    host.send(0, kTag, packed.names.data(), sizes[1]);
    return;
  }
  out = events;
  for (int64_t r = 1; r < comm.size(); ++r) {
    int64_t sizes[2];
    host.recv(r, kTag, sizes, sizeof(sizes));
    PackedTrace packed;
    packed.times.resize(static_cast<size_t>(sizes[0]));
    packed.names.resize(static_cast<size_t>(sizes[1]));
    host.recv(r, kTag, packed.times.data(),
              static_cast<int64_t>(packed.times.size() * sizeof(double)));
    host.recv(r, kTag, packed.names.data(), sizes[1]);
    unpackTrace(r, packed, out);
  }
}

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
      RankOptions settings =
          rankSettings(options, inits, &progress[static_cast<size_t>(rank)]);
      bool on = options.overlap.value_or(
          overlapByDefault(options.device, plan.topology.worldSize));
      settings.bucketBytes = on ? options.gradBucketBytes : 0;
      // NCCL's pairing follows each peer's posting order on one stream:
      // the emulation keeps sends on the rank's own thread.
      settings.sendsAhead = on && !ncclLike;
      settings.ringAhead = on;
      settings.channels = [&, rank, makeComm](int64_t tagChannel,
                                              const std::vector<size_t> &) {
        return std::make_unique<comm::Channel>(
            makeComm(tagChannel),
            device::makeDevice(local.device, rank, local.threads));
      };
      failures[static_cast<size_t>(rank)] =
          runRank({plan, rank, *c, data, local, origin, std::move(settings)},
                  result, events[static_cast<size_t>(rank)]);
      std::lock_guard<std::mutex> lock(finish.mutex);
      finish.done[static_cast<size_t>(rank)] = true;
      ++finish.count;
      finish.changed.notify_all();
    });
  {
    // A rank stuck in a computation that never returns (a library looping
    // on an allocation it cannot get) would keep the run from ending.
    Watchdog watchdog(
        plan, progress, 0, options,
        [&] { return comm::localWorldFailure(*localWorld); },
        [&] {
          std::lock_guard<std::mutex> lock(finish.mutex);
          std::string stuck;
          for (int64_t r = 0; r < world; ++r)
            if (!finish.done[static_cast<size_t>(r)])
              stuck += (stuck.empty() ? "" : " ") + std::to_string(r);
          return stuck;
        });
    std::unique_lock<std::mutex> lock(finish.mutex);
    finish.changed.wait(lock, [&] { return finish.count == world; });
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
      comm.capabilities().hostMemoryOnly) {
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
  std::vector<RankProgress> progress(1);
  RankOptions settings = rankSettings(options, inits, &progress[0]);
  // A backend that opens channels of its own (nccl: a GPU per rank)
  // overlaps the gradient buckets and ring CP's transfers on them; its
  // posted messages are the plan's (docs/gpu.md overlap).
  if (comm.capabilities().opensChannels &&
      options.overlap.value_or(options.device == device::DeviceKind::Cuda)) {
    settings.bucketBytes = options.gradBucketBytes;
    settings.ringAhead = true;
    settings.channels = [&comm, &local](int64_t tagChannel,
                                        const std::vector<size_t> &families)
        -> std::unique_ptr<comm::Channel> {
      std::unique_ptr<comm::Comm> c = comm.openChannel(families);
      if (!c)
        return nullptr;
      c->setTagChannel(tagChannel);
      // The channel's stream: a second one of the rank's GPU.
      return std::make_unique<comm::Channel>(
          std::move(c),
          device::makeDevice(local.device,
                             local.deviceIndex >= 0 ? local.deviceIndex
                                                    : comm.rank(),
                             local.threads, local.attention));
    };
  }
  std::vector<TraceEvent> events;
  std::string failure;
  {
    Watchdog watchdog(plan, progress, comm.rank(), options);
    failure = runRank({plan, comm.rank(), comm, data, local, Clock::now(),
                       std::move(settings)},
                      result, events);
  }
  if (!failure.empty()) {
    // The backend tears the job down; reaching here means it could not.
    comm.fail(failure);
    result.exitCode = 2;
    result.error = failure;
    return result;
  }
  if (options.collectTrace)
    gatherTrace(comm, events, result.trace);
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
