//===- mimo-run.cpp - Executes a compiled plan ----------------------------===//
//
// mimo-run PLAN.json [--steps N] [--backend local|mpi|nccl] [--device cpu|cuda]
//          [--reference] [--metrics FILE.jsonl] [--trace FILE.json]
//          [--timeout SECONDS]
//
// SPEC §3, §7, §8. Exit codes: 0 success, 1 invalid input, 2 a rank failed.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Comm.h"
#include "runtime/core/PlanFile.h"
#include "runtime/device/Devices.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/MemoryCheck.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unistd.h>

using namespace mimo;

namespace {

const char *kUsage =
    "usage: mimo-run PLAN.json [--steps N] [--backend local|mpi|nccl]\n"
    "                [--device cpu|cuda] [--threads N] [--reference]\n"
    "                [--save DIR] [--save-every N] [--load DIR|DIR/step-N]\n"
    "                [--metrics FILE.jsonl] [--trace FILE.json]\n"
    "                [--timeout SECONDS]\n";

int usageError(const std::string &message) {
  std::cerr << "mimo-run: error: " << message << "\n" << kUsage;
  return 1;
}

/// Writes `text` to `path` through a temporary file (nothing half-written).
bool writeFile(const std::string &path, const std::string &text) {
  std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary);
    if (!out)
      return false;
    out << text;
    if (!out)
      return false;
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  return !ec;
}

std::string progressBar(int64_t done, int64_t total, double eta) {
  int width = 30;
  int filled = total > 0 ? static_cast<int>(width * done / total) : width;
  std::string bar = "[" + std::string(static_cast<size_t>(filled), '#') +
                    std::string(static_cast<size_t>(width - filled), '.') +
                    "] " + std::to_string(done) + "/" + std::to_string(total);
  char buf[64];
  std::snprintf(buf, sizeof(buf), " ETA %.1fs", eta);
  return bar + buf;
}

} // namespace

static int run(int argc, char **argv);

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::cerr << "mimo-run: internal error: " << e.what() << "\n";
    return 2;
  }
}

static int run(int argc, char **argv) {
  std::string planPath, backend, device, metricsPath, tracePath, saveDir,
      loadPath;
  int64_t saveEvery = 0;
  int64_t steps = -1;
  int threads = 0;
  double timeout = 300;
  bool reference = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const std::string &flag) -> std::optional<std::string> {
      if (arg.rfind(flag + "=", 0) == 0)
        return arg.substr(flag.size() + 1);
      if (arg == flag && i + 1 < argc)
        return std::string(argv[++i]);
      return std::nullopt;
    };
    auto is = [&](const std::string &flag) {
      return arg == flag || arg.rfind(flag + "=", 0) == 0;
    };
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (is("--steps")) {
      auto v = value("--steps");
      char *end = nullptr;
      steps = v ? std::strtoll(v->c_str(), &end, 10) : -1;
      if (!v || v->empty() || *end || steps < 0)
        return usageError("--steps expects a number of steps >= 0");
    } else if (is("--save")) {
      auto v = value("--save");
      if (!v || v->empty())
        return usageError("--save expects a directory");
      saveDir = *v;
    } else if (is("--save-every")) {
      auto v = value("--save-every");
      char *end = nullptr;
      saveEvery = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || saveEvery < 1)
        return usageError("--save-every expects a number of steps >= 1");
    } else if (is("--load")) {
      auto v = value("--load");
      if (!v || v->empty())
        return usageError("--load expects a checkpoint directory");
      loadPath = *v;
    } else if (is("--threads")) {
      auto v = value("--threads");
      char *end = nullptr;
      long long n = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n < 1 || n > 4096)
        return usageError("--threads expects a number of threads per rank "
                          "from 1 to 4096");
      threads = static_cast<int>(n);
    } else if (is("--backend")) {
      auto v = value("--backend");
      if (!v || (*v != "local" && *v != "mpi" && *v != "nccl"))
        return usageError("--backend expects local, mpi or nccl");
      backend = *v;
    } else if (is("--device")) {
      auto v = value("--device");
      if (!v || (*v != "cpu" && *v != "cuda"))
        return usageError("--device expects cpu or cuda");
      device = *v;
    } else if (is("--metrics")) {
      auto v = value("--metrics");
      if (!v)
        return usageError("--metrics expects a file name");
      metricsPath = *v;
    } else if (is("--trace")) {
      auto v = value("--trace");
      if (!v)
        return usageError("--trace expects a file name");
      tracePath = *v;
    } else if (is("--timeout")) {
      auto v = value("--timeout");
      char *end = nullptr;
      timeout = v ? std::strtod(v->c_str(), &end) : -1;
      if (!v || v->empty() || *end || !(timeout > 0))
        return usageError("--timeout expects a number of seconds > 0");
    } else if (arg == "--reference") {
      reference = true;
    } else if (!arg.empty() && arg[0] == '-') {
      return usageError("unknown option '" + arg + "'");
    } else if (planPath.empty()) {
      planPath = arg;
    } else {
      return usageError("more than one plan given ('" + planPath + "', '" +
                        arg + "')");
    }
  }
  if (planPath.empty())
    return usageError("no plan given (compile one with mimoc compile "
                      "MODEL.json -o PLAN.json)");
  if (saveEvery > 0 && saveDir.empty())
    return usageError("--save-every needs --save DIR");
  bool underMpirun = comm::launchedByMpirun();
  if (backend.empty())
    backend = underMpirun ? "mpi" : "local";
  if (backend == "local" && underMpirun) {
    const char *size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (size && std::atoi(size) > 1)
      return usageError("--backend local runs every rank as a thread of one "
                        "process; run it without mpirun, or use --backend "
                        "mpi");
  }
  if (backend == "nccl")
    return usageError("the nccl backend is not part of this version; run "
                      "without mpirun (--backend local: every rank a thread, "
                      "ranks sharing the visible GPUs)");
  // SPEC §11: cuda by default when built with CUDA and a GPU is visible;
  // the mpi backend moves host memory, so it defaults to (and needs) cpu.
  const device::CudaStatus &cuda = device::cudaStatus();
  if (device.empty())
    device = backend == "local" && cuda.devices > 0 ? "cuda" : "cpu";
  device::DeviceKind deviceKind = *device::parseKind(device);
  if (deviceKind == device::DeviceKind::Cuda) {
    if (cuda.devices <= 0)
      return usageError("--device cuda: no usable GPU: " + cuda.problem);
    if (backend == "mpi")
      return usageError("--device cuda needs the local backend (the mpi "
                        "backend moves host memory); run without mpirun, "
                        "or use --device cpu");
  }

  std::unique_ptr<comm::Comm> mpi;
  if (backend == "mpi") {
    std::string error;
    mpi = comm::makeMpiComm(&error);
    if (!mpi)
      return usageError(error);
  }
  bool printer = !mpi || mpi->rank() == 0;
  auto finish = [&](int code) {
    if (mpi)
      comm::finalizeMpi();
    return code;
  };

  std::ifstream in(planPath, std::ios::binary);
  if (!in) {
    if (printer)
      std::cerr << "mimo-run: error: cannot read '" << planPath << "'\n";
    return finish(1);
  }
  std::stringstream text;
  text << in.rdbuf();
  PlanLoadResult loaded = loadPlan(text.str(), planPath);
  if (!loaded.plan) {
    if (printer)
      for (const Diagnostic &d : loaded.diagnostics)
        std::cerr << formatDiagnostic(planPath, d) << "\n";
    return finish(1);
  }
  Plan plan = std::move(*loaded.plan);
  if (plan.config.precision != "fp32") {
    if (printer)
      std::cerr << "mimo-run: " << planPath << ": /model/precision: error: "
                << "precision \"" << plan.config.precision
                << "\" is not supported by this version of mimo-run, which "
                   "trains in fp32 on every device: set \"precision\": "
                   "\"fp32\"\n";
    return finish(1);
  }
  if (deviceKind == device::DeviceKind::Cuda)
    for (size_t i = 0; i < plan.config.modules.size(); ++i) {
      const ModuleConfig &m = plan.config.modules[i];
      int64_t headDim = m.numHeads > 0 ? m.hiddenSize / m.numHeads : 0;
      if (headDim > device::maxCudaHeadDim()) {
        if (printer)
          std::cerr << "mimo-run: " << planPath << ": /model/modules/" << i
                    << "/arch/num_heads: error: module '" << m.name
                    << "' has attention heads of dimension " << headDim
                    << "; the CUDA attention kernel takes at most "
                    << device::maxCudaHeadDim()
                    << ": use more heads (hidden_size / num_heads <= "
                    << device::maxCudaHeadDim() << ") or --device cpu\n";
        return finish(1);
      }
    }
  if (reference) {
    std::string error;
    std::optional<Plan> single = exec::referencePlan(plan.config, &error);
    if (!single) {
      if (printer)
        std::cerr << "mimo-run: " << planPath << ": error: " << error << "\n";
      return finish(1);
    }
    plan = std::move(*single);
    if (mpi && mpi->size() != 1) {
      if (printer)
        std::cerr << "mimo-run: error: --reference runs on one rank; run it "
                     "without mpirun\n";
      return finish(1);
    }
  }
  if (mpi && mpi->size() != plan.topology.worldSize) {
    if (printer)
      std::cerr << "mimo-run: " << planPath << ": /world_size: error: the plan "
                << "needs " << plan.topology.worldSize
                << " ranks but mpirun started " << mpi->size()
                << " processes; run mpirun -np " << plan.topology.worldSize
                << "\n";
    return finish(1);
  }

  // SPEC §14: refuse a layout that would not fit, before allocating. Under
  // mpirun every process judges every rank alike against its share of the
  // node, so they all agree.
  {
    std::optional<std::string> problem;
    if (mpi) {
      for (int64_t r = 0; r < plan.topology.worldSize && !problem; ++r)
        problem = exec::memoryProblem(plan, {r}, deviceKind, cuda.devices,
                                      comm::ranksOnThisNode());
    } else {
      std::vector<int64_t> all;
      for (int64_t r = 0; r < plan.topology.worldSize; ++r)
        all.push_back(r);
      problem = exec::memoryProblem(plan, all, deviceKind, cuda.devices);
    }
    if (problem) {
      if (printer)
        std::cerr << "mimo-run: " << planPath << ": " << *problem << "\n";
      return finish(1);
    }
  }

  exec::RunOptions options;
  options.steps = steps;
  options.device = deviceKind;
  options.threads = threads > 0
                        ? threads
                        : device::defaultThreads(mpi ? comm::ranksOnThisNode()
                                                     : plan.topology.worldSize);
  options.timeoutSeconds = timeout;
  options.planFile = planPath;
  options.baseDir = std::filesystem::path(planPath).parent_path().string();
  options.collectTrace = !tracePath.empty();
  std::string faultError;
  options.fault =
      exec::parseFault(std::getenv("MIMO_INJECT_FAULT"), &faultError);
  if (!faultError.empty()) {
    if (printer)
      std::cerr << "mimo-run: error: " << faultError << "\n";
    return finish(1);
  }
  if (options.fault && options.fault->first >= plan.topology.worldSize) {
    if (printer)
      std::cerr << "mimo-run: error: MIMO_INJECT_FAULT names rank "
                << options.fault->first << " but the plan has "
                << plan.topology.worldSize << " ranks (0-"
                << plan.topology.worldSize - 1 << ")\n";
    return finish(1);
  }
  int64_t total = steps >= 0 ? steps : plan.config.train.steps;
  // SPEC §12: checkpoints. Everything is checked before any rank starts.
  options.saveDir = saveDir;
  options.saveEvery = saveEvery;
  if (!saveDir.empty())
    if (std::optional<std::string> problem =
            exec::checkpointDirProblem(saveDir)) {
      if (printer)
        std::cerr << "mimo-run: error: --save: " << *problem << "\n";
      return finish(1);
    }
  if (!loadPath.empty()) {
    std::string error;
    std::optional<exec::Checkpoint> checkpoint =
        exec::openCheckpoint(loadPath, plan.config, error);
    if (!checkpoint) {
      if (printer)
        std::cerr << "mimo-run: " << error << "\n";
      return finish(1);
    }
    if (checkpoint->step >= total) {
      if (printer)
        std::cerr << "mimo-run: error: " << checkpoint->dir << " holds step "
                  << checkpoint->step
                  << ": nothing is left to train with --steps " << total
                  << " (the total); raise --steps\n";
      return finish(1);
    }
    if (printer)
      std::cout << "mimo-run: resuming from " << checkpoint->dir << " (step "
                << checkpoint->step << ")" << std::endl;
    options.resume =
        std::make_shared<const exec::Checkpoint>(std::move(*checkpoint));
  }
  if (const char *kill = std::getenv("MIMO_TEST_KILL_DURING_SAVE"))
    options.killDuringSave = std::atoll(kill);
  if (options.fault && options.fault->second > total) {
    if (printer)
      std::cerr << "mimo-run: error: MIMO_INJECT_FAULT names step "
                << options.fault->second << " but the run has " << total
                << " steps\n";
    return finish(1);
  }
  // SPEC §13: the metrics file is opened before training (a bad path fails
  // at once) and every step's line is flushed as the step ends, so a run
  // that fails keeps each completed step.
  std::ofstream metrics;
  if (printer && !metricsPath.empty()) {
    metrics.open(metricsPath, std::ios::trunc);
    if (!metrics) {
      std::cerr << "mimo-run: error: cannot write the metrics file '"
                << metricsPath << "'; check the directory exists and is "
                << "writable\n";
      return finish(1);
    }
  }
  const int64_t world = plan.topology.worldSize;
  const double peakTflops =
      deviceKind == device::DeviceKind::Cuda ? cuda.peakFp32Tflops : 0.0;
  bool terminal = printer && isatty(STDERR_FILENO);
  double elapsed = 0;
  options.onStep = [&](const exec::StepMetrics &m) {
    elapsed += m.seconds;
    char line[256];
    std::snprintf(line, sizeof(line),
                  "step %lld/%lld  loss %.6f  grad_norm %.6f  tokens/s %.0f",
                  static_cast<long long>(m.step), static_cast<long long>(total),
                  m.loss, m.gradNorm,
                  m.seconds > 0 ? static_cast<double>(m.tokens) / m.seconds
                                : 0.0);
    std::string text = line;
    if (m.evalLoss) {
      char eval[64];
      std::snprintf(eval, sizeof(eval), "  eval_loss %.6f", *m.evalLoss);
      text += eval;
    }
    if (terminal)
      std::cerr << "\r\033[K";
    std::cout << text << std::endl;
    if (terminal && m.step < total)
      std::cerr << progressBar(m.step, total,
                               elapsed / static_cast<double>(m.step) *
                                   static_cast<double>(total - m.step))
                << std::flush;
    if (!metrics.is_open())
      return;
    double tokensPerSecond =
        m.seconds > 0 ? static_cast<double>(m.tokens) / m.seconds : 0.0;
    // Model FLOPs per second per rank (core/Flops.h).
    double tflops =
        m.seconds > 0 ? m.flops / m.seconds / static_cast<double>(world) / 1e12
                      : 0.0;
    nlohmann::json record = {{"step", m.step},
                             {"loss", m.loss},
                             {"grad_norm", m.gradNorm},
                             {"lr", m.lr},
                             {"tokens", m.tokens},
                             {"seconds", m.seconds},
                             {"tokens_per_s", tokensPerSecond},
                             {"tflops", tflops}};
    if (peakTflops > 0)
      record["mfu"] = tflops / peakTflops;
    if (m.evalLoss)
      record["eval_loss"] = *m.evalLoss;
    metrics << record.dump() << std::endl; // flushed
  };
  std::string deviceText = "cpu device (" + std::to_string(options.threads) +
                           " thread" + (options.threads > 1 ? "s" : "") +
                           " per rank)";
  if (deviceKind == device::DeviceKind::Cuda)
    deviceText = "cuda device (" + std::to_string(cuda.devices) + " GPU" +
                 (cuda.devices > 1 ? "s" : "") + ": " + cuda.firstName + ")";
  if (printer)
    std::cout << "mimo-run: " << plan.config.name << ": "
              << plan.topology.worldSize
              << (reference ? " rank (reference)" : " ranks") << ", "
              << (mpi ? "mpi" : "local") << " backend, " << deviceText << ", "
              << total << " steps" << std::endl;

  exec::RunResult result = mpi ? exec::runOnComm(plan, *mpi, options)
                               : exec::runLocal(plan, options);
  if (terminal)
    std::cerr << "\r\033[K" << std::flush;
  // The trace is written on failure too: it shows where each rank was.
  bool traceWritten = true;
  if (printer && !tracePath.empty() && !result.trace.empty())
    traceWritten = writeFile(tracePath, exec::traceJson(result.trace));
  if (result.exitCode != 0) {
    if (printer || result.exitCode == 2)
      std::cerr << (result.exitCode == 2 ? "mimo-run: " : "") << result.error
                << "\n";
    return finish(result.exitCode);
  }
  if (metrics.is_open() && !metrics) {
    std::cerr << "mimo-run: error: cannot write '" << metricsPath << "'\n";
    return finish(1);
  }
  if (!traceWritten) {
    std::cerr << "mimo-run: error: cannot write '" << tracePath << "'\n";
    return finish(1);
  }
  return finish(0);
}
