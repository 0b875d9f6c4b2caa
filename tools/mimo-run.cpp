//===- mimo-run.cpp - Executes a compiled plan ----------------------------===//
//
// mimo-run PLAN.json [flags]; `mimo-run --help` lists them.
//
// The steps of a run, one function each: read the command line, choose the
// backend and device, load and check the plan, check memory, checkpoints
// and test hooks, then train, printing a line (and a metrics record) per
// step. Exit codes: 0 success, 1 invalid input, 2 a rank failed. About
// 100 of its lines are the --help text.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/HfExport.h"
#include "runtime/comm/Comm.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/device/Devices.h"
#include "runtime/exec/Calibrate.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/MemoryCheck.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/support/BuildInfo.h"
#include "runtime/support/InputFile.h"
#include "runtime/support/OutputFile.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>

using namespace mimo;

namespace {

/// docs/runtime.md Preemption: SIGTERM, SIGINT or SIGUSR1 (Slurm's
/// --signal) asks every rank to finish its step, save (with --save) and
/// exit 3; a second one exits at once (128 + the signal).
std::atomic<int> stopRequests{0};

extern "C" void onStopSignal(int signal) {
  if (stopRequests.fetch_add(1) >= 1)
    _exit(128 + signal);
  static const char message[] =
      "\nmimo-run: stop requested: every rank finishes its step, saves (with "
      "--save) and exits 3; a second signal exits at once\n";
  ssize_t ignored = ::write(STDERR_FILENO, message, sizeof(message) - 1);
  (void)ignored;
}

/// Under mpirun: when mpirun itself goes (a second Ctrl-C makes it leave at
/// once without signalling the ranks), the ranks are orphans that would
/// train and save on. A thread notices that the parent is gone and ends
/// the rank at once, like a second signal (exit 129).
void stopWhenLauncherExits() {
  const pid_t parent = ::getppid();
  if (parent <= 1)
    return;
  std::thread([parent] {
    while (::getppid() == parent)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    static const char message[] =
        "mimo-run: mpirun (the launcher) has exited: this rank stops now\n";
    ssize_t ignored = ::write(STDERR_FILENO, message, sizeof(message) - 1);
    (void)ignored;
    _exit(129);
  }).detach();
}

void installStopHandlers() {
  struct sigaction action{};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGTERM, SIGINT, SIGUSR1})
    sigaction(signal, &action, nullptr);
}

const char *kUsage =
    "usage: mimo-run PLAN.json [--steps N] [--backend local|mpi|nccl]\n"
    "                [--device cpu|cuda] [--threads N] [--reference]\n"
    "                [--save DIR] [--save-every N] [--load DIR|DIR/step-N]\n"
    "                [--metrics FILE.jsonl] [--trace FILE.json]\n"
    "                [--timeout SECONDS] [--grad-bucket-mb MB]\n"
    "                [--overlap | --no-overlap] [--on-nonfinite stop|skip]\n"
    "                [--attention auto|cudnn|mimo] [--load-other-run]\n"
    "                [--strict]\n"
    "       mimo-run PLAN.json --load DIR --export-hf OUT [--export-dtype T]\n"
    "                [--export-hf-per-module]\n"
    "       mimo-run PLAN.json --load DIR --export-peft OUT [--export-dtype "
    "T]\n"
    "       mimo-run --calibrate -o PROFILE.json [--device cpu|cuda]\n"
    "       mimo-run --help | --version\n";

const char *kHelp =
    "mimo-run: train a model from the plan `mimoc compile` wrote. Every rank\n"
    "runs its instruction stream (multi-module 1F1B, bridges between the\n"
    "modules' grids, CP/SP sharding, gradient reduction, clipping, AdamW) and\n"
    "rank 0 prints one line per step.\n"
    "\n"
    "FLAGS\n"
    "  --steps N            train N steps (default: the model's train.steps);\n"
    "                       with --load, N counts from step 0\n"
    "  --backend B          local: every rank a thread of this process (the\n"
    "                       default without mpirun); mpi: one process per "
    "rank\n"
    "                       over MPI (the default under mpirun without a\n"
    "                       GPU); nccl: one process and GPU per rank under\n"
    "                       mpirun (the default there with a GPU)\n"
    "  --strict             local backend: NCCL's rules at run time (messages\n"
    "                       paired in posting order per peer, not by tag;\n"
    "                       collectives only over the plan's groups); each\n"
    "                       send waits for its receive in any case, and a\n"
    "                       timeout names the ranks' cycle (docs/runtime.md)\n"
    "  --device D           cuda (the default when a GPU is usable, local\n"
    "                       backend: rank r on GPU r mod visible GPUs) or cpu\n"
    "  --threads N          CPU threads per rank (default: the cores shared "
    "by\n"
    "                       the ranks on this machine); results do not depend\n"
    "                       on it\n"
    "  --attention A        a GPU's attention: auto (the default: cuDNN's\n"
    "                       fused attention where cuDNN 9 loads and takes\n"
    "                       the call, bf16; else mimo's kernels), cudnn\n"
    "                       (exit 1 when cuDNN cannot be loaded) or mimo\n"
    "                       (docs/gpu.md)\n"
    "  --reference          train the same model, data and seed on one rank\n"
    "                       with no parallelism: every layout matches it\n"
    "  --save DIR           write checkpoints to DIR/step-N at the end ...\n"
    "  --save-every N       ... and every N steps\n"
    "  --load PATH          resume from DIR (its latest) or DIR/step-N, saved\n"
    "                       in any layout of the same model (its name, seed\n"
    "                       and architecture are checked); --save DIR --load\n"
    "                       DIR with no checkpoint in DIR yet starts fresh\n"
    "                       (the requeue idiom)\n"
    "  --load-other-run     accept a checkpoint of another run of this\n"
    "                       architecture (another model name or seed):\n"
    "                       starting from it on purpose\n"
    "  --metrics FILE       one JSON object per step: step, loss, grad_norm,\n"
    "                       lr, tokens, targets (loss tokens), seconds,\n"
    "                       tokens_per_s, tflops, mfu (GPU), peak_bytes and\n"
    "                       peak_rank (the most device memory a rank held),\n"
    "                       peak_bytes_by_rank, compute_seconds_by_rank,\n"
    "                       eval_loss; the first also\n"
    "                       attention (the GPU's backend)\n"
    "  --trace FILE         a Chrome/Perfetto trace: per rank, its\n"
    "                       instructions (compute), its overlapped\n"
    "                       gradient buckets (comm) and, on a GPU, every\n"
    "                       kernel, GEMM and copy timed on the device\n"
    "                       (device kernels)\n"
    "  --timeout SECONDS    a rank waiting longer fails the run (default 300)\n"
    "  --grad-bucket-mb MB  data-parallel gradient reduction in buckets of MB\n"
    "                       MiB, each started as soon as the backward has\n"
    "                       finished it, beside the compute (local and nccl\n"
    "                       backends; default 25; 0: one all-reduce after\n"
    "                       the backward)\n"
    "  --overlap            gradient buckets and ring CP's transfers (and on\n"
    "                       the local backend pipeline and bridge sends) run\n"
    "                       beside the compute (local and nccl backends; the\n"
    "                       default on cuda when each rank has its own GPU)\n"
    "  --no-overlap         every message and collective blocks its rank\n"
    "                       until done (the default on cpu)\n"
    "  --on-nonfinite P     a step whose loss or gradient norm is not finite:\n"
    "                       stop (the default: exit 2 before its update,\n"
    "                       naming the step and the first non-finite\n"
    "                       gradient) or skip (no update for that step;\n"
    "                       metrics mark it \"skipped\")\n"
    "  --export-hf DIR      train nothing: write the --load checkpoint as\n"
    "                       one Hugging Face folder DIR that transformers\n"
    "                       and init format hf read (docs/pretrained.md):\n"
    "                       the language model's (Llama or Qwen2), or with\n"
    "                       a CLIP or SigLIP encoder a LLaVA folder; the\n"
    "                       pretrained folder's tokenizer copied\n"
    "  --export-hf-per-module  with --export-hf: a folder per module,\n"
    "                       DIR/<module> (an encoder as a CLIP or SigLIP\n"
    "                       tower with LLaVA's projector)\n"
    "  --export-peft DIR    train nothing: write the LoRA adapters of the\n"
    "                       --load checkpoint as a PEFT adapter folder DIR\n"
    "                       (adapter_config.json, adapter_model.safetensors)\n"
    "                       for the folder --export-hf would write; with\n"
    "                       --export-hf-per-module one per LoRA module\n"
    "  --export-dtype T     bf16 or fp32 (default: the model's precision)\n"
    "  --calibrate -o FILE  train nothing: time this device's GEMMs,\n"
    "                       attention, memory bandwidth, kernel overhead and\n"
    "                       messages, and write the profile mimoc simulate\n"
    "                       and mimoc tune take (--profile FILE)\n"
    "  --help, --version\n"
    "\n"
    "EXIT CODES\n"
    "  0 trained; 1 bad input (plan, flags, data, memory), nothing trained;\n"
    "  2 a rank failed while training: every rank stops, the message names\n"
    "  the rank, step and instruction; 3 stopped by SIGTERM, SIGINT or\n"
    "  SIGUSR1: every rank finished its step, which --save saved (a second\n"
    "  signal exits at once, 128 + the signal)\n"
    "\n"
    "EXAMPLES\n"
    "  mimoc compile examples/vlm-fan-in.json -o vlm.plan.json\n"
    "  mimo-run vlm.plan.json --steps 10 --metrics vlm.jsonl\n"
    "  mimo-run vlm.plan.json --reference --steps 10\n"
    "  mpirun -np 8 mimo-run vlm.plan.json    # one process per rank\n"
    "  (as root or with more ranks than cores, give mpirun\n"
    "   --allow-run-as-root --oversubscribe)\n"
    "\n"
    "Docs in the repository: docs/runtime.md, docs/gpu.md, docs/data.md,\n"
    "docs/checkpoints.md.\n";

int usageError(const std::string &message) {
  std::cerr << "mimo-run: error: " << message << "\n" << kUsage;
  return 1;
}

/// The files a run reads, which no output may name: the plan, the data
/// files (as given and beside the plan; an indexed PREFIX's .bin and .idx)
/// and the checkpoint loaded.
std::vector<std::string> runInputs(const std::string &planPath,
                                   const std::string &loadPath,
                                   const Plan *plan) {
  namespace fs = std::filesystem;
  std::vector<std::string> inputs = {planPath};
  if (plan) {
    const std::string base = fs::path(planPath).parent_path().string();
    std::vector<std::string> files = {plan->config.data.path,
                                      plan->config.data.evalPath};
    for (const auto &entry : plan->config.data.blend)
      files.push_back(entry.path);
    for (const std::string &data : files) {
      if (data.empty())
        continue;
      for (const char *suffix : {"", ".bin", ".idx"}) {
        inputs.push_back(data + suffix);
        if (!base.empty())
          inputs.push_back((fs::path(base) / (data + suffix)).string());
      }
    }
  }
  std::error_code ec;
  if (!loadPath.empty() && fs::is_directory(loadPath, ec))
    for (fs::recursive_directory_iterator it(loadPath, ec), end;
         !ec && it != end && inputs.size() < 4096; it.increment(ec))
      if (it->is_regular_file(ec))
        inputs.push_back(it->path().string());
  return inputs;
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

/// What the command line asked for.
struct CommandLine {
  std::string planPath, backend, device, metricsPath, tracePath, saveDir,
      loadPath, calibrateOutput;
  bool calibrate = false;
  int64_t saveEvery = 0;
  int64_t steps = -1;
  int threads = 0;
  double timeout = 300;
  double gradBucketMb = double(kGradBucketBytes) / double(int64_t(1) << 20);
  std::optional<bool> overlap; // unset: Executor.h RunOptions::overlap
  device::AttentionChoice attention = device::AttentionChoice::Auto;
  bool reference = false;
  bool skipNonFinite = false;
  bool loadOtherRun = false;
  /// --export-hf DIR (with --load): write Hugging Face folders, train
  /// nothing; --export-dtype bf16|fp32 (default: the model's precision).
  std::string exportDir, exportDtype;
  /// --export-peft DIR: the adapters as PEFT saves them (exportDir).
  bool exportPeft = false;
  /// --strict: the local backend under NCCL's rules.
  bool strict = false;
  bool exportPerModule = false;
  /// Started by mpirun (read before MPI_Init, which sets the same variables
  /// in a process started alone).
  bool underMpirun = false;
};

/// Reads argv into `cli`; an exit code when the run ends here (--help,
/// --version, a bad flag).
std::optional<int> parseCommandLine(int argc, char **argv, CommandLine &cli) {
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
    auto count = [&](const std::string &flag, int64_t minimum,
                     int64_t maximum) -> std::optional<int64_t> {
      auto v = value(flag);
      char *end = nullptr;
      long long n = v ? std::strtoll(v->c_str(), &end, 10) : 0;
      if (!v || v->empty() || *end || n < minimum || n > maximum)
        return std::nullopt;
      return n;
    };
    /// A flag's value as a finite decimal number (nullopt: none or not one).
    auto decimal = [&](const std::string &flag) -> std::optional<double> {
      auto v = value(flag);
      char *end = nullptr;
      double x = v ? std::strtod(v->c_str(), &end) : 0;
      if (!v || v->empty() || *end || !std::isfinite(x))
        return std::nullopt;
      return x;
    };
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage << "\n" << kHelp;
      return 0;
    } else if (arg == "--version") {
      std::cout << versionText("mimo-run");
      return 0;
    } else if (is("--steps")) {
      auto n = count("--steps", 0, INT64_MAX);
      if (!n)
        return usageError("--steps expects a number of steps >= 0");
      cli.steps = *n;
    } else if (is("--save")) {
      auto v = value("--save");
      if (!v || v->empty())
        return usageError("--save expects a directory");
      cli.saveDir = *v;
    } else if (is("--save-every")) {
      auto n = count("--save-every", 1, INT64_MAX);
      if (!n)
        return usageError("--save-every expects a number of steps >= 1");
      cli.saveEvery = *n;
    } else if (is("--load")) {
      auto v = value("--load");
      if (!v || v->empty())
        return usageError("--load expects a checkpoint directory");
      cli.loadPath = *v;
    } else if (is("--threads")) {
      auto n = count("--threads", 1, 4096);
      if (!n)
        return usageError("--threads expects a number of threads per rank "
                          "from 1 to 4096");
      cli.threads = static_cast<int>(*n);
    } else if (arg == "--strict") {
      cli.strict = true;
    } else if (is("--backend")) {
      auto v = value("--backend");
      if (!v || (*v != "local" && *v != "mpi" && *v != "nccl"))
        return usageError("--backend expects local, mpi or nccl");
      cli.backend = *v;
    } else if (is("--device")) {
      auto v = value("--device");
      if (!v || (*v != "cpu" && *v != "cuda"))
        return usageError("--device expects cpu or cuda");
      cli.device = *v;
    } else if (is("--metrics")) {
      auto v = value("--metrics");
      if (!v)
        return usageError("--metrics expects a file name");
      cli.metricsPath = *v;
    } else if (is("--trace")) {
      auto v = value("--trace");
      if (!v)
        return usageError("--trace expects a file name");
      cli.tracePath = *v;
    } else if (is("--attention")) {
      auto v = value("--attention");
      std::optional<device::AttentionChoice> choice =
          v ? device::parseAttentionChoice(*v) : std::nullopt;
      if (!choice)
        return usageError("--attention expects auto, cudnn or mimo");
      cli.attention = *choice;
    } else if (arg == "--no-overlap") {
      cli.overlap = false;
    } else if (arg == "--overlap") {
      cli.overlap = true;
    } else if (is("--grad-bucket-mb")) {
      auto mb = decimal("--grad-bucket-mb");
      if (!mb || *mb < 0 || *mb > 1e6)
        return usageError("--grad-bucket-mb expects a size in MiB from 0 "
                          "(no buckets) to 1000000, e.g. 25 or 0.5");
      cli.gradBucketMb = *mb;
    } else if (is("--timeout")) {
      auto seconds = decimal("--timeout");
      if (!seconds || !(*seconds > 0))
        return usageError("--timeout expects a number of seconds > 0");
      cli.timeout = *seconds;
    } else if (arg == "--reference") {
      cli.reference = true;
    } else if (arg == "--load-other-run") {
      cli.loadOtherRun = true;
    } else if (is("--on-nonfinite")) {
      auto v = value("--on-nonfinite");
      if (!v || (*v != "stop" && *v != "skip"))
        return usageError("--on-nonfinite expects stop (the default: exit 2 "
                          "naming the step and the first non-finite "
                          "gradient) or skip (no update for that step)");
      cli.skipNonFinite = *v == "skip";
    } else if (is("--export-hf")) {
      auto v = value("--export-hf");
      if (!v || v->empty())
        return usageError("--export-hf expects a directory");
      if (cli.exportPeft)
        return usageError("give --export-hf or --export-peft, not both");
      cli.exportDir = *v;
    } else if (is("--export-peft")) {
      auto v = value("--export-peft");
      if (!v || v->empty())
        return usageError("--export-peft expects a directory");
      if (!cli.exportDir.empty())
        return usageError("give --export-hf or --export-peft, not both");
      cli.exportDir = *v;
      cli.exportPeft = true;
    } else if (arg == "--export-hf-per-module") {
      cli.exportPerModule = true;
    } else if (is("--export-dtype")) {
      auto v = value("--export-dtype");
      if (!v || (*v != "bf16" && *v != "fp32"))
        return usageError("--export-dtype expects bf16 or fp32");
      cli.exportDtype = *v;
    } else if (arg == "--calibrate") {
      cli.calibrate = true;
    } else if (is("-o")) {
      auto v = value("-o");
      if (!v || v->empty())
        return usageError("-o expects a file name (mimo-run --calibrate -o "
                          "profile.json)");
      cli.calibrateOutput = *v;
    } else if (!arg.empty() && arg[0] == '-') {
      return usageError("unknown option '" + arg + "'; see mimo-run --help");
    } else if (cli.planPath.empty()) {
      cli.planPath = arg;
    } else {
      return usageError("more than one plan given ('" + cli.planPath + "', '" +
                        arg + "')");
    }
  }
  if (cli.calibrate) {
    if (cli.calibrateOutput.empty())
      return usageError("--calibrate needs -o FILE: where to write the "
                        "profile");
    if (!cli.planPath.empty())
      return usageError("--calibrate measures the device and trains "
                        "nothing; give no plan");
    return std::nullopt;
  }
  if (!cli.calibrateOutput.empty())
    return usageError("-o is for --calibrate; see mimo-run --help");
  if (cli.planPath.empty())
    return usageError("no plan given (compile one with mimoc compile "
                      "MODEL.json -o PLAN.json)");
  if (cli.saveEvery > 0 && cli.saveDir.empty())
    return usageError("--save-every needs --save DIR");
  if (cli.loadOtherRun && cli.loadPath.empty())
    return usageError("--load-other-run goes with --load PATH");
  if (cli.exportPerModule && cli.exportDir.empty())
    return usageError("--export-hf-per-module goes with --export-hf DIR");
  if (!cli.exportDtype.empty() && cli.exportDir.empty())
    return usageError("--export-dtype goes with --export-hf DIR");
  if (!cli.exportDir.empty() && cli.loadPath.empty())
    return usageError(
        std::string(cli.exportPeft ? "--export-peft" : "--export-hf") +
        " writes the weights of a checkpoint: give "
        "it with --load PATH");
  return std::nullopt;
}

/// Fills in the backend and device (docs/gpu.md defaults) and refuses
/// combinations that cannot run; an exit code when it refuses.
std::optional<int> chooseBackendAndDevice(CommandLine &cli,
                                          device::DeviceKind &kind) {
  cli.underMpirun = comm::launchedByMpirun();
  const device::CudaStatus &cuda = device::cudaStatus();
  // Under mpirun: nccl on GPUs when this build has it and a GPU is usable
  // (and --device cpu was not asked for), mpi on the CPU otherwise.
  if (cli.backend.empty())
    cli.backend = !cli.underMpirun ? "local"
                  : comm::ncclBuilt() && cuda.devices > 0 && cli.device != "cpu"
                      ? "nccl"
                      : "mpi";
  if (cli.backend == "local" && cli.underMpirun) {
    const char *size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (size && std::atoi(size) > 1)
      return usageError("--backend local runs every rank as a thread of one "
                        "process; run it without mpirun, or use --backend "
                        "mpi");
  }
  if (cli.strict && cli.backend != "local")
    return usageError(
        "--strict is the local backend's (NCCL's rules on the "
        "CPU's threads); the " +
        cli.backend + " backend " +
        (cli.backend == "nccl" ? "is NCCL itself" : "pairs messages by tag") +
        ": drop --strict, or run --backend local --strict "
        "without mpirun");
  if (cli.backend == "nccl") {
    std::string error;
    if (!comm::ncclBuilt()) {
      comm::makeNcclComm(nullptr, 0, &error);
      return usageError("--backend nccl: " + error);
    }
    if (cli.device == "cpu")
      return usageError("--backend nccl moves GPU memory: use --device cuda "
                        "with it, or --backend mpi for ranks on the CPU");
    if (cuda.devices <= 0)
      return usageError("--backend nccl needs a GPU per rank: " + cuda.problem);
  }
  // cuda by default when built with CUDA and a GPU is visible; the mpi
  // backend moves host memory, so it defaults to (and needs) cpu.
  if (cli.device.empty())
    cli.device = cli.backend != "mpi" && cuda.devices > 0 ? "cuda" : "cpu";
  kind = *device::parseKind(cli.device);
  if (cli.attention == device::AttentionChoice::Cudnn &&
      kind != device::DeviceKind::Cuda)
    return usageError("--attention cudnn runs on a GPU: use it with --device "
                      "cuda (the CPU runs mimo's attention)");
  if (kind == device::DeviceKind::Cuda) {
    if (cuda.devices <= 0)
      return usageError("--device cuda: no usable GPU: " + cuda.problem);
    if (cli.backend == "mpi")
      return usageError("--device cuda needs the local backend (the mpi "
                        "backend moves host memory); run without mpirun, "
                        "or use --device cpu");
  }
  return std::nullopt;
}

/// The plan to train (the reference plan with --reference), checked against
/// what this run can do; the error text (printed by rank 0) otherwise.
std::optional<Plan> loadRunnablePlan(const CommandLine &cli,
                                     device::DeviceKind kind, comm::Comm *mpi,
                                     std::string &error) {
  const std::string &path = cli.planPath;
  std::string unreadable;
  std::optional<std::string> text =
      readInputFile(path, kMaxPlanFileBytes, "the plan", unreadable);
  if (!text) {
    error = "mimo-run: " + unreadable;
    return std::nullopt;
  }
  PlanLoadResult loaded = loadPlan(*text, path);
  if (!loaded.plan) {
    for (const Diagnostic &d : loaded.diagnostics)
      error += (error.empty() ? "" : "\n") + formatDiagnostic(path, d);
    return std::nullopt;
  }
  Plan plan = std::move(*loaded.plan);
  if (kind == device::DeviceKind::Cuda)
    for (size_t i = 0; i < plan.config.modules.size(); ++i) {
      const ModuleConfig &m = plan.config.modules[i];
      int64_t headDim = m.numHeads > 0 ? m.headDim() : 0;
      const std::string problem = device::cudaAttentionProblem(headDim);
      if (!problem.empty()) {
        error = "mimo-run: " + path + ": /model/modules/" + std::to_string(i) +
                "/arch/num_heads: error: module '" + m.name + "': " + problem +
                ", or --device cpu";
        return std::nullopt;
      }
    }
  if (cli.reference) {
    std::string problem;
    std::optional<Plan> single = exec::referencePlan(plan.config, &problem);
    if (!single) {
      error = "mimo-run: " + path + ": error: " + problem;
      return std::nullopt;
    }
    plan = std::move(*single);
    if (mpi && mpi->size() != 1) {
      error = "mimo-run: error: --reference runs on one rank; run it "
              "without mpirun";
      return std::nullopt;
    }
  }
  int64_t world = plan.topology.worldSize;
  if (mpi && mpi->size() != world) {
    std::string np = std::to_string(world);
    if (!cli.underMpirun)
      error = "mimo-run: " + path + ": error: --backend " + cli.backend +
              " runs one process per rank and the plan has " + np +
              " ranks: launch it as `mpirun -np " + np + " mimo-run " + path +
              "` (as root or with more ranks than cores add "
              "--allow-run-as-root --oversubscribe), or leave out --backend "
              "to run the ranks as threads of this process";
    else
      error = "mimo-run: " + path + ": /world_size: error: the plan needs " +
              np + " ranks but mpirun started " + std::to_string(mpi->size()) +
              " processes; run mpirun -np " + np;
    return std::nullopt;
  }
  // docs/tune.md: refuse a layout that would not fit, before allocating. Under
  // mpirun each process asks only of its own GPU (another's would get a
  // context of this process) and the processes agree on the first refusal.
  const device::CudaStatus &cuda = device::cudaStatus();
  std::optional<std::string> problem;
  if (mpi) {
    std::string mine = exec::processMemoryProblem(
                           plan, mpi->rank(), kind, cuda.devices,
                           comm::localRankOnThisNode(), comm::ranksOnThisNode())
                           .value_or("");
    std::string agreed;
    try {
      agreed = comm::firstProblem(*mpi, mine);
    } catch (const std::exception &e) {
      agreed = std::string("error: the processes could not agree on the "
                           "memory check: ") +
               e.what();
    }
    if (!agreed.empty())
      problem = agreed;
  } else {
    std::vector<int64_t> all;
    for (int64_t r = 0; r < world; ++r)
      all.push_back(r);
    problem = exec::memoryProblem(plan, all, kind, cuda.devices);
  }
  if (problem) {
    error = "mimo-run: " + path + ": " + *problem;
    return std::nullopt;
  }
  // Under ulimit -v (shared clusters), the address space: the layout's
  // memory and what each compute thread reserves (an OpenBLAS buffer that
  // cannot be mapped is retried forever, at 100% CPU).
  if (kind == device::DeviceKind::Cpu) {
    exec::AddressSpace space = exec::addressSpace();
    exec::limitHeapArenas(space);
    const int64_t ranksHere = mpi ? 1 : world;
    const int64_t threads =
        cli.threads > 0
            ? cli.threads
            : device::defaultThreads(mpi ? comm::ranksOnThisNode() : world);
    std::vector<RankMemory> estimate = memoryPlan(plan.topology, plan.config);
    double need = 0;
    for (int64_t r = 0; r < world; ++r)
      if (!mpi || r == mpi->rank())
        need +=
            static_cast<double>(estimate[static_cast<size_t>(r)].totalBytes);
    if (std::optional<std::string> tight =
            exec::addressSpaceProblem(space, need, ranksHere, threads)) {
      error = "mimo-run: " + path + ": " + *tight;
      return std::nullopt;
    }
  }
  return plan;
}

/// Checkpoints to save and load, the injected fault: everything checked
/// before any rank starts; the error text otherwise.
bool prepareRun(const CommandLine &cli, const Plan &plan,
                exec::RunOptions &options, bool printer, std::string &error) {
  const int64_t world = plan.topology.worldSize;
  std::string faultError;
  options.fault =
      exec::parseFault(std::getenv("MIMO_INJECT_FAULT"), &faultError);
  if (!faultError.empty()) {
    error = "mimo-run: error: " + faultError;
    return false;
  }
  if (options.fault && options.fault->first >= world) {
    error = "mimo-run: error: MIMO_INJECT_FAULT names rank " +
            std::to_string(options.fault->first) + " but the plan has " +
            std::to_string(world) + " ranks (0-" + std::to_string(world - 1) +
            ")";
    return false;
  }
  int64_t total = cli.steps >= 0 ? cli.steps : plan.config.train.steps;
  options.saveDir = cli.saveDir;
  options.saveEvery = cli.saveEvery;
  if (!cli.saveDir.empty())
    if (std::optional<std::string> problem =
            exec::checkpointDirProblem(cli.saveDir)) {
      error = "mimo-run: error: --save: " + *problem;
      return false;
    }
  // The requeue idiom, --save DIR --load DIR: no checkpoint there yet (a
  // step-N.tmp of a run killed while saving is none) is a fresh start.
  bool fresh = false;
  if (!cli.loadPath.empty() && !cli.saveDir.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path dir = fs::weakly_canonical(cli.loadPath, ec);
    if (!ec && dir == fs::weakly_canonical(cli.saveDir, ec) && !ec &&
        !fs::exists(dir / "latest", ec) &&
        !fs::exists(dir / "state.json", ec)) {
      fresh = true;
      if (printer)
        std::cout << "mimo-run: no checkpoint in " << cli.saveDir
                  << " yet: starting fresh (--save and --load name the same "
                     "folder)"
                  << std::endl;
    }
  }
  if (!cli.loadPath.empty() && !fresh) {
    std::string problem;
    std::optional<exec::Checkpoint> checkpoint = exec::openCheckpoint(
        cli.loadPath, plan.config, problem, cli.loadOtherRun);
    if (!checkpoint) {
      error = "mimo-run: " + problem;
      return false;
    }
    if (checkpoint->step >= total) {
      error = "mimo-run: error: " + checkpoint->dir + " holds step " +
              std::to_string(checkpoint->step) +
              ": nothing is left to train with --steps " +
              std::to_string(total) + " (the total); raise --steps";
      return false;
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
    error = "mimo-run: error: MIMO_INJECT_FAULT names step " +
            std::to_string(options.fault->second) + " but the run has " +
            std::to_string(total) + " steps";
    return false;
  }
  return true;
}

/// Rank 0's report of each step: a line on stdout, a progress bar on a
/// terminal, a flushed metrics record (docs/runtime.md).
class StepReporter {
public:
  StepReporter(int64_t total, int64_t world, double peakTflops, bool terminal,
               std::string attention)
      : total(total), world(world), peakTflops(peakTflops), terminal(terminal),
        attention(std::move(attention)) {}

  /// Opens the metrics file before training, so a bad path fails at once
  /// and a run that fails keeps each completed step (OutputFile.h: never
  /// an input, written in place when it is a device or a pipe).
  bool openMetrics(const std::string &path,
                   const std::vector<std::string> &inputs,
                   std::string &problem) {
    return metrics.open(path, inputs, problem);
  }
  bool metricsOk() const { return !metrics.isOpen() || metrics.ok(); }

  void report(const exec::StepMetrics &m) {
    elapsed += m.seconds;
    double tokensPerSecond =
        m.seconds > 0 ? static_cast<double>(m.tokens) / m.seconds : 0.0;
    char line[256];
    std::snprintf(line, sizeof(line),
                  "step %lld/%lld  loss %.6f  grad_norm %.6f  tokens/s %.0f",
                  static_cast<long long>(m.step), static_cast<long long>(total),
                  m.loss, m.gradNorm, tokensPerSecond);
    std::string text = line;
    if (m.auxLoss) {
      char aux[64];
      std::snprintf(aux, sizeof(aux), "  aux_loss %.6f", *m.auxLoss);
      text += aux;
    }
    if (m.skipped)
      text += "  skipped (not finite: no update)";
    if (m.targets == 0 && !warnedNoTargets) {
      // Round 3: a mask that masks every token trained at loss 0 silently.
      warnedNoTargets = true;
      std::cerr << "mimo-run: warning: step " << m.step
                << " has no token to learn from (every token is masked from "
                   "the loss): its loss is 0 and its gradient zero; check "
                   "the data's loss masks (docs/data.md)\n";
    }
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
    if (!metrics.isOpen())
      return;
    // Model FLOPs per second per rank (config/Flops.h).
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
    record["targets"] = m.targets;
    if (m.auxLoss)
      record["aux_loss"] = *m.auxLoss;
    if (m.peakBytes >= 0) {
      record["peak_bytes"] = m.peakBytes;
      record["peak_rank"] = m.peakRank;
      // Each rank's, up to 4096 ranks (a line per step stays short).
      if (!m.rankPeakBytes.empty() && m.rankPeakBytes.size() <= 4096)
        record["peak_bytes_by_rank"] = m.rankPeakBytes;
    }
    if (!m.rankComputeSeconds.empty() && m.rankComputeSeconds.size() <= 4096)
      record["compute_seconds_by_rank"] = m.rankComputeSeconds;
    if (m.evalLoss)
      record["eval_loss"] = *m.evalLoss;
    if (m.skipped)
      record["skipped"] = true;
    if (first)
      record["attention"] = attention;
    first = false;
    metrics.write(record.dump() + "\n"); // written at once, unbuffered
  }

  void clearProgress() const {
    if (terminal)
      std::cerr << "\r\033[K" << std::flush;
  }

private:
  int64_t total, world;
  double peakTflops;
  bool terminal;
  /// The attention the run's device runs, in the first metrics record.
  std::string attention;
  bool first = true;
  bool warnedNoTargets = false;
  double elapsed = 0;
  StreamedOutput metrics;
};

/// The attention a run's GPU runs ("cudnn 9.19.0" or "mimo", with why),
/// or why --attention cudnn cannot be honoured (`refusal`); under auto a
/// missing cuDNN is said once on stderr by `printer`.
std::string resolveAttention(const CommandLine &cli, device::DeviceKind kind,
                             const Plan &plan, bool printer,
                             std::string &refusal) {
  if (kind != device::DeviceKind::Cuda ||
      cli.attention == device::AttentionChoice::Mimo)
    return "mimo";
  const device::CudnnStatus &cudnn = device::cudnnStatus();
  if (!cudnn.problem.empty()) {
    if (cli.attention == device::AttentionChoice::Cudnn)
      refusal = "mimo-run: error: --attention cudnn: " + cudnn.problem;
    else if (printer)
      std::cerr << "mimo-run: attention: mimo's kernels (" << cudnn.problem
                << ")\n";
    return "mimo";
  }
  if (plan.config.precision != "bf16")
    return "mimo";
  return "cudnn";
}

/// "mimo-run: vlm-fan-in: 8 ranks, local backend, cpu device (...), 30 steps".
std::string runBanner(const Plan &plan, const CommandLine &cli,
                      const exec::RunOptions &options, int64_t total,
                      const std::string &attention) {
  std::string deviceText = "cpu device (" + std::to_string(options.threads) +
                           " thread" + (options.threads > 1 ? "s" : "") +
                           " per rank)";
  if (options.device == device::DeviceKind::Cuda) {
    const device::CudaStatus &cuda = device::cudaStatus();
    deviceText = "cuda device (" + std::to_string(cuda.devices) + " GPU" +
                 (cuda.devices > 1 ? "s" : "") + ": " + cuda.firstName + ")";
  }
  return "mimo-run: " + plan.config.name + ": " +
         std::to_string(plan.topology.worldSize) +
         (cli.reference ? " rank (reference)" : " ranks") + ", " + cli.backend +
         " backend, " + deviceText + ", " + std::to_string(total) + " steps" +
         (options.device == device::DeviceKind::Cuda
              ? ", attention " +
                    (attention == "cudnn"
                         ? "cudnn " + device::cudnnStatus().version +
                               " (mimo's kernels where cuDNN cannot take a "
                               "mask)"
                         : attention)
              : "");
}

/// mimo-run --calibrate -o FILE: measures the device's profile.
int runCalibrate(const CommandLine &cli, device::DeviceKind kind) {
  std::cerr << "mimo-run: calibrating " << cli.device << " ...\n";
  DeviceProfile profile;
  try {
    profile = exec::calibrate(
        kind,
        [](const std::string &what) { std::cerr << "  " << what << "\n"; },
        cli.attention);
  } catch (const device::DeviceError &e) {
    std::cerr << "mimo-run: error: the device failed while calibrating: "
              << e.what() << "\n";
    return 2;
  }
  std::string problem;
  if (!writeOutput(cli.calibrateOutput, profileToJson(profile).dump(2) + "\n",
                   problem)) {
    std::cerr << "mimo-run: " << problem << "\n";
    return 1;
  }
  std::cerr << "mimo-run: wrote the profile of " << profile.device << " to "
            << cli.calibrateOutput << " (use it with mimoc simulate/tune "
            << "--profile)\n";
  return 0;
}

/// --export-hf: the checkpoint's weights as Hugging Face folders
/// (docs/pretrained.md), nothing trained.
int runExport(const CommandLine &cli) {
  std::string unreadable;
  std::optional<std::string> text =
      readInputFile(cli.planPath, kMaxPlanFileBytes, "the plan", unreadable);
  if (!text) {
    std::cerr << "mimo-run: " << unreadable << "\n";
    return 1;
  }
  PlanLoadResult loaded = loadPlan(*text, cli.planPath);
  if (!loaded.plan) {
    for (const Diagnostic &d : loaded.diagnostics)
      std::cerr << formatDiagnostic(cli.planPath, d) << "\n";
    return 1;
  }
  const ModelConfig &config = loaded.plan->config;
  exec::HfExportOptions options;
  options.dtype = cli.exportDtype.empty()
                      ? (config.precision == "bf16" ? "bf16" : "fp32")
                      : cli.exportDtype;
  options.perModule = cli.exportPerModule;
  options.peft = cli.exportPeft;
  std::vector<std::string> written;
  std::string error;
  try {
    error =
        exec::exportHf(config, cli.loadPath, cli.exportDir, options, written);
  } catch (const std::exception &e) {
    error = e.what();
  }
  for (const std::string &line : written)
    std::cout << (line.rfind("note: ", 0) == 0 ? "mimo-run: "
                                               : "mimo-run: exported ")
              << line << "\n";
  if (!error.empty()) {
    std::cerr << (error.rfind("mimo-run", 0) == 0 ? "" : "mimo-run: ") << error
              << "\n";
    return 1;
  }
  return 0;
}

int run(int argc, char **argv) {
  CommandLine cli;
  if (std::optional<int> code = parseCommandLine(argc, argv, cli))
    return *code;
  device::DeviceKind kind = device::DeviceKind::Cpu;
  if (std::optional<int> code = chooseBackendAndDevice(cli, kind))
    return *code;
  if (cli.calibrate)
    return runCalibrate(cli, kind);
  if (!cli.exportDir.empty()) {
    // Under mpirun every rank was started: the first exports, the others
    // leave at once (one writer of OUT).
    if (cli.underMpirun && comm::worldRankFromLauncher() != 0)
      return 0;
    return runExport(cli);
  }

  // mpi: the world; nccl: its bootstrap under mpirun (and the host
  // messages); `ranks` is the process's communicator (null: local).
  std::unique_ptr<comm::Comm> mpi, nccl;
  if (cli.backend == "mpi" || (cli.backend == "nccl" && cli.underMpirun)) {
    std::string error;
    mpi = comm::makeMpiComm(&error);
    if (!mpi)
      return usageError(error);
  }
  auto finish = [&](int code) {
    nccl.reset();
    if (mpi)
      comm::finalizeMpi();
    return code;
  };
  if (cli.backend == "nccl") {
    std::string error;
    nccl = comm::makeNcclComm(mpi.get(), comm::localRankOnThisNode(), &error);
    if (!nccl) {
      if (!mpi || mpi->rank() == 0)
        std::cerr << "mimo-run: error: --backend nccl: " << error << "\n";
      return finish(1);
    }
  }
  comm::Comm *ranks = nccl ? nccl.get() : mpi.get();
  bool printer = !ranks || ranks->rank() == 0;
  auto fail = [&](const std::string &error) {
    if (printer)
      std::cerr << error << "\n";
    return finish(1);
  };

  std::string error;
  std::optional<Plan> loaded = loadRunnablePlan(cli, kind, ranks, error);
  if (!loaded)
    return fail(error);
  const Plan &plan = *loaded;
  exec::RunOptions options;
  options.steps = cli.steps;
  options.device = kind;
  options.threads =
      cli.threads > 0 ? cli.threads
                      : device::defaultThreads(ranks ? comm::ranksOnThisNode()
                                                     : plan.topology.worldSize);
  options.timeoutSeconds = cli.timeout;
  options.skipNonFinite = cli.skipNonFinite;
  options.gradBucketBytes =
      static_cast<int64_t>(cli.gradBucketMb * double(int64_t(1) << 20));
  options.overlap = cli.overlap;
  if (cli.strict)
    options.matching = comm::Matching::InPostingOrder;
  options.attention = cli.attention;
  options.planFile = cli.planPath;
  options.baseDir = std::filesystem::path(cli.planPath).parent_path().string();
  options.collectTrace = !cli.tracePath.empty();
  options.failureTracePath = cli.tracePath;
  if (!prepareRun(cli, plan, options, printer, error))
    return fail(error);
  // One --save folder for every rank (a filesystem every node shares).
  if (mpi && mpi->size() > 1 && !cli.saveDir.empty())
    if (std::string shared = exec::sharedFolderProblem(*mpi, cli.saveDir);
        !shared.empty())
      return fail(shared);
  // One run at a time saves into a folder: rank 0 holds its lock.
  std::unique_ptr<exec::SaveFolderLock> saveLock;
  if (printer && !cli.saveDir.empty()) {
    std::string locked;
    saveLock = exec::SaveFolderLock::acquire(cli.saveDir, locked);
    if (!saveLock) {
      std::cerr << "mimo-run: error: --save: " << locked << "\n";
      if (mpi && mpi->size() > 1)
        comm::abortMpi(1);
      return finish(1);
    }
  }

  std::string refusal;
  const std::string attention =
      resolveAttention(cli, kind, plan, printer, refusal);
  if (!refusal.empty())
    return fail(refusal);
  int64_t total = cli.steps >= 0 ? cli.steps : plan.config.train.steps;
  const device::CudaStatus &cuda = device::cudaStatus();
  StepReporter reporter(total, plan.topology.worldSize,
                        kind != device::DeviceKind::Cuda  ? 0.0
                        : plan.config.precision == "bf16" ? cuda.peakBf16Tflops
                                                          : cuda.peakFp32Tflops,
                        printer && isatty(STDERR_FILENO), attention);
  // Every output checked before the first step: none names an input, each
  // can be written (a trace that cannot would fail only after training).
  const std::vector<std::string> inputs =
      runInputs(cli.planPath, cli.loadPath, &plan);
  std::string problem;
  // Rank 0 alone writes (and checks) them: under mpirun its refusal ends
  // the job, or the other ranks would wait for it in their first step.
  auto failAlone = [&](const std::string &error) {
    std::cerr << error << "\n";
    if (mpi && mpi->size() > 1)
      comm::abortMpi(1);
    return finish(1);
  };
  if (printer && !cli.tracePath.empty() &&
      !checkOutput(cli.tracePath, inputs, problem))
    return failAlone("mimo-run: --trace: " + problem);
  if (printer && !cli.metricsPath.empty() &&
      !reporter.openMetrics(cli.metricsPath, inputs, problem))
    return failAlone("mimo-run: --metrics: " + problem);
  options.onStep = [&](const exec::StepMetrics &m) { reporter.report(m); };
  options.stopRequests = &stopRequests;
  if (printer)
    std::cout << runBanner(plan, cli, options, total, attention) << std::endl;

  if (nccl) // the GPU of this node-local rank (makeNcclComm chose it)
    options.deviceIndex = comm::localRankOnThisNode();
  exec::RunResult result = ranks ? exec::runOnComm(plan, *ranks, options)
                                 : exec::runLocal(plan, options);
  reporter.clearProgress();
  // The trace is written on failure too: it shows where each rank was.
  bool traceWritten = true;
  if (printer && !cli.tracePath.empty() && !result.trace.empty())
    traceWritten = writeOutput(cli.tracePath, exec::traceJson(result.trace),
                               problem, inputs);
  if (result.exitCode != 0) {
    if (printer || result.exitCode == 2 || result.ownError)
      std::cerr << (result.exitCode == 2 ? "mimo-run: " : "") << result.error
                << "\n";
    return finish(result.exitCode);
  }
  if (!reporter.metricsOk())
    return fail("mimo-run: error: cannot write '" + cli.metricsPath + "'");
  if (!traceWritten)
    return fail("mimo-run: --trace: " + problem);
  if (result.stoppedAfter > 0) {
    if (printer)
      std::cerr << "mimo-run: stopped by a signal after step "
                << result.stoppedAfter
                << (cli.saveDir.empty()
                        ? std::string(" (no --save: nothing saved)")
                        : "; saved " + cli.saveDir + "/step-" +
                              std::to_string(result.stoppedAfter) +
                              " (resume with --load " + cli.saveDir + ")")
                << "\n";
    return finish(3);
  }
  return finish(0);
}

} // namespace

int main(int argc, char **argv) {
  installStopHandlers();
  if (comm::launchedByMpirun())
    stopWhenLauncherExits();
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::cerr << "mimo-run: internal error: " << e.what() << "\n";
    return 2;
  }
}
