//===- CudaTrainCheck.cpp - Every layout trains on the GPU like the CPU ---===//
//
// docs/gpu.md tolerances: every example and test layout (tests/e2e/Layouts.h)
// trains 3 steps on the CUDA device, all ranks as threads sharing the
// visible GPUs (local backend), and matches the CPU --reference within 1e-4
// (loss and gradient norm, relative); the reference on the CUDA device
// matches it too; the same layout twice on the GPU gives bitwise identical
// losses and norms; in bf16, every layout (cuDNN's attention where it
// loads) follows the CPU's bf16 reference within 1e-2, bitwise the same
// twice. Then a fault injected on a GPU rank stops every rank
// (exit 2, naming the rank), and a kernel's refusal names the rank and the
// instruction. Then the training loop (docs/checkpoints.md, docs/data.md):
// held-out evaluations
// and the learning-rate schedule on cuda match the CPU; a checkpoint saved on
// cuda resumes on the CPU and one saved on the CPU resumes on cuda, each
// matching the uninterrupted CPU run; the memory check reads the GPU's free
// memory. Exits 77 without a usable GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/device/Devices.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/MemoryCheck.h"
#include "runtime/plan/PlanFile.h"
#include "tests/e2e/Layouts.h"
#include "tests/gpu/GpuCheck.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <unistd.h>

using namespace mimo;

namespace {

constexpr int64_t kSteps = 3;
constexpr double kTolerance = 1e-4;

std::optional<Plan> planOf(const nlohmann::json &model, std::string *error) {
  ParseResult parsed = parseModelConfig(model.dump(), "model.json");
  if (!parsed.config) {
    *error = parsed.diagnostics.empty() ? "invalid model"
                                        : parsed.diagnostics[0].pointer + ": " +
                                              parsed.diagnostics[0].message;
    return std::nullopt;
  }
  return buildPlan(*parsed.config, error);
}

/// Trains `steps` steps (total, counting a resumed checkpoint's), saving
/// into `saveDir` after the last and resuming from `loadDir` when given.
exec::RunResult
train(const Plan &plan, device::DeviceKind kind, int64_t steps = kSteps,
      const std::string &saveDir = "", const std::string &loadDir = "",
      device::AttentionChoice attention = device::AttentionChoice::Auto) {
  exec::RunOptions options;
  options.attention = attention;
  options.steps = steps;
  options.timeoutSeconds = 300;
  options.device = kind;
  options.saveDir = saveDir;
  if (!loadDir.empty()) {
    std::string error;
    std::optional<exec::Checkpoint> checkpoint =
        exec::openCheckpoint(loadDir, plan.config, error);
    if (!checkpoint) {
      exec::RunResult failed;
      failed.exitCode = 1;
      failed.error = error;
      return failed;
    }
    options.resume =
        std::make_shared<const exec::Checkpoint>(std::move(*checkpoint));
  }
  return exec::runLocal(plan, options);
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-12);
}

/// The largest relative difference of loss and norm over the steps
/// (infinity when a run failed or the step counts differ).
double worstDifference(const exec::RunResult &a, const exec::RunResult &b) {
  if (a.exitCode != 0 || b.exitCode != 0 || a.steps.size() != b.steps.size() ||
      a.steps.empty())
    return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t s = 0; s < a.steps.size(); ++s) {
    if (!std::isfinite(a.steps[s].loss) || !std::isfinite(a.steps[s].gradNorm))
      return std::numeric_limits<double>::infinity();
    worst = std::max({worst, relative(a.steps[s].loss, b.steps[s].loss),
                      relative(a.steps[s].gradNorm, b.steps[s].gradNorm)});
  }
  return worst;
}

bool bitwiseEqual(const exec::RunResult &a, const exec::RunResult &b) {
  if (a.exitCode != 0 || b.exitCode != 0 || a.steps.size() != b.steps.size())
    return false;
  for (size_t s = 0; s < a.steps.size(); ++s)
    if (std::memcmp(&a.steps[s].loss, &b.steps[s].loss, sizeof(double)) ||
        std::memcmp(&a.steps[s].gradNorm, &b.steps[s].gradNorm, sizeof(double)))
      return false;
  return true;
}

/// The largest relative difference of the held-out losses (infinity when
/// the evaluations differ in number or a run failed).
double worstEvalDifference(const exec::RunResult &a, const exec::RunResult &b) {
  if (a.exitCode != 0 || b.exitCode != 0 || a.steps.size() != b.steps.size())
    return std::numeric_limits<double>::infinity();
  double worst = 0;
  int evaluations = 0;
  for (size_t s = 0; s < a.steps.size(); ++s) {
    if (a.steps[s].evalLoss.has_value() != b.steps[s].evalLoss.has_value())
      return std::numeric_limits<double>::infinity();
    if (!a.steps[s].evalLoss)
      continue;
    ++evaluations;
    worst =
        std::max(worst, relative(*a.steps[s].evalLoss, *b.steps[s].evalLoss));
  }
  return evaluations > 0 ? worst : std::numeric_limits<double>::infinity();
}

/// The steps of `tail` against the same steps of `whole`.
double worstTailDifference(const exec::RunResult &tail,
                           const exec::RunResult &whole) {
  if (tail.exitCode != 0 || whole.exitCode != 0 || tail.steps.empty() ||
      tail.steps.size() > whole.steps.size())
    return std::numeric_limits<double>::infinity();
  exec::RunResult last = whole;
  last.steps.erase(last.steps.begin(),
                   last.steps.end() - static_cast<long>(tail.steps.size()));
  if (last.steps.front().step != tail.steps.front().step)
    return std::numeric_limits<double>::infinity();
  return worstDifference(tail, last);
}

/// The training loop on the device: evaluations and the learning-rate
/// schedule, checkpoints across devices, the memory check.
void checkTrainingLoop(gpucheck::Report &report, device::DeviceKind kind) {
  nlohmann::json model = test::example("vlm-fan-in.json");
  model["train"]["eval_every"] = 2;
  model["train"]["eval_steps"] = 2;
  std::string error;
  std::optional<Plan> plan = planOf(model, &error);
  if (!plan) {
    report.check(false, "the training loop on the device", error);
    return;
  }
  exec::RunResult cpu = train(*plan, device::DeviceKind::Cpu, 4);
  exec::RunResult gpu = train(*plan, kind, 4);
  report.close(worstDifference(gpu, cpu), kTolerance,
               "vlm-fan-in with a warm-up + cosine schedule, 4 steps: cuda vs "
               "cpu");
  report.close(worstEvalDifference(gpu, cpu), kTolerance,
               "held-out losses (eval_every 2) on cuda vs cpu");

  std::string dir = (std::filesystem::temp_directory_path() /
                     ("mimo-gpu-checkpoint-" + std::to_string(::getpid())))
                        .string();
  std::filesystem::remove_all(dir);
  exec::RunResult saved = train(*plan, kind, 2, dir + "/cuda");
  exec::RunResult onCpu =
      train(*plan, device::DeviceKind::Cpu, 4, "", dir + "/cuda");
  report.close(saved.exitCode == 0 ? worstTailDifference(onCpu, cpu)
                                   : std::numeric_limits<double>::infinity(),
               kTolerance,
               "saved on cuda at step 2, resumed on cpu: steps 3-4 vs the "
               "uninterrupted cpu run" +
                   (saved.exitCode ? ": " + saved.error : onCpu.error));
  exec::RunResult cpuSaved =
      train(*plan, device::DeviceKind::Cpu, 2, dir + "/cpu");
  exec::RunResult onGpu = train(*plan, kind, 4, "", dir + "/cpu");
  report.close(cpuSaved.exitCode == 0 ? worstTailDifference(onGpu, cpu)
                                      : std::numeric_limits<double>::infinity(),
               kTolerance,
               "saved on cpu at step 2, resumed on cuda: steps 3-4 vs the "
               "uninterrupted cpu run" +
                   (cpuSaved.exitCode ? ": " + cpuSaved.error : onGpu.error));
  std::filesystem::remove_all(dir);

  // The memory check against the device's real free memory: the example
  // fits, a 126-layer 16k-hidden model does not, and the refusal names it.
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < plan->topology.worldSize; ++r)
    ranks.push_back(r);
  int gpus = kind == device::DeviceKind::Cuda
                 ? std::max(device::cudaStatus().devices, 1)
                 : 0;
  std::optional<std::string> fits =
      exec::memoryProblem(*plan, ranks, kind, gpus);
  report.check(!fits, "the example fits the device's free memory",
               fits.value_or(""));
  nlohmann::json huge = model;
  huge["modules"][1]["arch"]["hidden_size"] = 16384;
  huge["modules"][1]["arch"]["num_heads"] = 128;
  huge["modules"][1]["arch"]["ffn_hidden_size"] = 53248;
  huge["modules"][1]["arch"]["num_layers"] = 126;
  std::optional<Plan> big = planOf(huge, &error);
  std::optional<std::string> refused =
      big ? exec::memoryProblem(*big, ranks, kind, gpus) : std::nullopt;
  report.check(refused &&
                   refused->find("the layout needs about") != std::string::npos,
               "a model that cannot fit is refused before allocation",
               refused.value_or(big ? "not refused" : error));
}

std::string describe(const exec::RunResult &r) {
  if (r.exitCode != 0)
    return "exit " + std::to_string(r.exitCode) + ": " + r.error;
  char text[128];
  double seconds = 0;
  for (const exec::StepMetrics &m : r.steps)
    seconds += m.seconds;
  std::snprintf(text, sizeof(text), "losses %.6f..%.6f, %.3f s/step",
                r.steps.front().loss, r.steps.back().loss,
                seconds / static_cast<double>(r.steps.size()));
  return text;
}

} // namespace

int main() {
  gpucheck::requireGpu("mimo-cuda-train-check");
  gpucheck::Report report("mimo-cuda-train-check");
  const device::DeviceKind kind = gpucheck::checkedKind();
  std::vector<test::Layout> layouts = test::equivalenceLayouts();
  // MIMO_GPU_CHECK_LAYOUTS=N: the first N layouts only (dry runs).
  if (const char *first = std::getenv("MIMO_GPU_CHECK_LAYOUTS"))
    layouts.resize(
        std::min(layouts.size(), static_cast<size_t>(std::atoi(first))));
  std::vector<std::optional<Plan>> plans, references;
  for (const test::Layout &layout : layouts) {
    std::string error;
    plans.push_back(planOf(layout.model, &error));
    if (plans.back())
      references.push_back(exec::referencePlan(plans.back()->config, &error));
    else
      references.push_back(std::nullopt);
    if (!references.back())
      report.check(false, layout.name + ": plan", error);
  }
  // The CPU references, one thread each, while the GPU works.
  std::vector<exec::RunResult> cpuReference(layouts.size());
  std::vector<std::thread> cpuThreads;
  for (size_t i = 0; i < layouts.size(); ++i)
    if (references[i])
      cpuThreads.emplace_back([&, i] {
        cpuReference[i] = train(*references[i], device::DeviceKind::Cpu);
      });
  std::vector<exec::RunResult> gpu(layouts.size()), again(layouts.size()),
      gpuReference(layouts.size());
  for (size_t i = 0; i < layouts.size(); ++i)
    if (plans[i] && references[i]) {
      gpu[i] = train(*plans[i], kind);
      again[i] = train(*plans[i], kind);
      gpuReference[i] = train(*references[i], kind);
    }
  for (std::thread &t : cpuThreads)
    t.join();
  for (size_t i = 0; i < layouts.size(); ++i) {
    if (!plans[i] || !references[i])
      continue;
    const std::string &name = layouts[i].name;
    std::printf("%s: cuda %s; cpu reference %s\n", name.c_str(),
                describe(gpu[i]).c_str(), describe(cpuReference[i]).c_str());
    report.close(worstDifference(gpu[i], cpuReference[i]), kTolerance,
                 name + ": " + std::to_string(layouts[i].worldSize) +
                     " ranks on cuda vs the cpu reference");
    report.close(worstDifference(gpuReference[i], cpuReference[i]), kTolerance,
                 name + ": the reference on cuda vs on cpu");
    report.check(bitwiseEqual(gpu[i], again[i]),
                 name + ": two cuda runs give bitwise identical losses",
                 gpu[i].exitCode == 0 && again[i].exitCode == 0
                     ? ""
                     : describe(again[i]));
  }

  // bf16 on cuda follows the cpu bf16 reference (docs/gpu.md, 1e-2):
  // every layout with the default attention (cuDNN where it loads and takes
  // the call, bitwise the same twice: its deterministic backward), and
  // vlm-fan-in on mimo's kernels too.
  for (size_t i = 0; i < layouts.size(); ++i) {
    nlohmann::json model = layouts[i].model;
    model["precision"] = "bf16";
    std::string error;
    std::optional<Plan> plan = planOf(model, &error);
    std::optional<Plan> reference =
        plan ? exec::referencePlan(plan->config, &error) : std::nullopt;
    const std::string name = "bf16 " + layouts[i].name;
    if (!plan || !reference) {
      report.check(false, name + ": plan", error);
      continue;
    }
    exec::RunResult onCpu = train(*reference, device::DeviceKind::Cpu);
    std::vector<device::AttentionChoice> choices = {
        device::AttentionChoice::Auto};
    if (i == 0)
      choices.push_back(device::AttentionChoice::Mimo);
    for (device::AttentionChoice choice : choices) {
      const std::string label =
          name + " (--attention " + device::attentionChoiceName(choice) + ")";
      exec::RunResult onGpu = train(*plan, kind, kSteps, "", "", choice);
      std::printf("%s: cuda %s; cpu bf16 reference %s\n", label.c_str(),
                  describe(onGpu).c_str(), describe(onCpu).c_str());
      report.close(worstDifference(onGpu, onCpu), 1e-2,
                   label + ": " + std::to_string(layouts[i].worldSize) +
                       " ranks on cuda vs the cpu bf16 reference");
      if (choice != device::AttentionChoice::Auto)
        continue;
      exec::RunResult again = train(*plan, kind, kSteps, "", "", choice);
      report.check(bitwiseEqual(onGpu, again),
                   label + ": two cuda runs give bitwise identical losses",
                   again.exitCode == 0 ? "" : describe(again));
    }
  }

  // A rank that fails stops every rank (docs/runtime.md on GPUs too).
  {
    std::string error;
    std::optional<Plan> plan = planOf(test::example("vlm-fan-in.json"), &error);
    if (!plan) {
      report.check(false, "an injected fault on a GPU rank", error);
      return report.finish();
    }
    exec::RunOptions options;
    options.steps = 2;
    options.timeoutSeconds = 60;
    options.device = kind;
    options.fault = std::make_pair(int64_t(6), int64_t(2));
    auto start = std::chrono::steady_clock::now();
    exec::RunResult r = exec::runLocal(*plan, options);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    report.check(r.exitCode == 2 &&
                     r.error.find("rank 6 failed at the start of step 2") !=
                         std::string::npos &&
                     seconds < 30,
                 "an injected fault on a GPU rank stops every rank", r.error);
  }
  // A kernel that refuses its shape fails the run with exit 2, naming the
  // rank, the instruction and the kernel's reason (the CPU takes any).
  if (kind == device::DeviceKind::Cuda) {
    nlohmann::json model = test::example("lm-cp2-sp.json");
    for (auto &module : model["modules"])
      if (module["kind"] == "language") {
        module["arch"]["hidden_size"] = 1024;
        module["arch"]["num_heads"] = 2; // head dimension 512
      }
    std::string error;
    std::optional<Plan> plan = planOf(model, &error);
    if (!plan) {
      report.check(false, "a kernel's refusal names rank and instruction",
                   error);
    } else {
      exec::RunOptions options;
      options.steps = 1;
      options.device = device::DeviceKind::Cuda;
      exec::RunResult r = exec::runLocal(*plan, options);
      report.check(r.exitCode == 2 &&
                       r.error.find("failed at step 1, instruction") !=
                           std::string::npos &&
                       r.error.find("head dimension 512") != std::string::npos,
                   "a kernel's refusal names rank and instruction", r.error);
    }
  }
  checkTrainingLoop(report, kind);
  return report.finish();
}
