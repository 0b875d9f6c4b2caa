//===- RecipeTest.cpp - Frozen modules, parameter groups, lr_mult ---------===//
//
// docs/model.md "Optimizer" and docs/model-json.md: freezing (whole modules
// or parameter-name prefixes), weight decay off biases and norm weights,
// a module's lr_mult. Every layout with a recipe trains like its one-rank
// reference with the same recipe; frozen tensors never change.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Safetensors.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanFile.h"
#include "tests/e2e/Layouts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

using namespace mimo;
using nlohmann::json;

namespace {

using test::planOf;
using test::relative;

exec::RunResult train(const Plan &plan, int64_t steps,
                      const std::string &saveDir = "") {
  exec::RunOptions options;
  options.steps = steps;
  options.timeoutSeconds = 120;
  options.saveDir = saveDir;
  return exec::runLocal(plan, options);
}

/// Trains `plan` and its one-rank reference for 3 steps: every step's
/// loss and gradient norm within 1e-5 (docs/runtime.md). Returns the
/// distributed run.
exec::RunResult expectTrainsLikeItsReference(const Plan &plan) {
  exec::RunResult distributed = train(plan, 3);
  EXPECT_EQ(distributed.exitCode, 0) << distributed.error;
  std::string error;
  std::optional<Plan> single = exec::referencePlan(plan.config, &error);
  EXPECT_TRUE(single) << error;
  if (distributed.exitCode != 0 || !single)
    return distributed;
  exec::RunResult reference = train(*single, 3);
  EXPECT_EQ(reference.exitCode, 0) << reference.error;
  if (reference.steps.size() != 3 || distributed.steps.size() != 3) {
    ADD_FAILURE() << "expected 3 steps of each run";
    return distributed;
  }
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_LE(relative(distributed.steps[s].loss, reference.steps[s].loss),
              1e-5)
        << "step " << s + 1;
    EXPECT_LE(
        relative(distributed.steps[s].gradNorm, reference.steps[s].gradNorm),
        1e-5)
        << "step " << s + 1;
  }
  return distributed;
}

/// LLaVA stage 2 on a layout: the encoder's body frozen, its projector at a
/// tenth of the learning rate, the language model trained, weight decay on.
json stageTwo(json model) {
  for (json &module : model["modules"])
    if (module["kind"] == "encoder") {
      module["freeze"] = {"patch", "layers"};
      module["lr_mult"] = 0.1;
    }
  model["train"]["weight_decay"] = 0.1;
  return model;
}

/// Every F32 tensor of a safetensors file.
std::map<std::string, std::vector<float>> tensorsOf(const std::string &path) {
  std::map<std::string, std::vector<float>> tensors;
  std::string error;
  std::optional<safetensors::Header> header =
      safetensors::readHeader(path, error);
  EXPECT_TRUE(header) << error;
  if (!header)
    return tensors;
  std::ifstream in(path, std::ios::binary);
  for (const safetensors::TensorEntry &t : header->tensors) {
    EXPECT_EQ(t.dtype, "F32") << t.name;
    std::vector<float> values(static_cast<size_t>((t.end - t.begin) / 4));
    in.seekg(header->dataOffset + t.begin);
    in.read(reinterpret_cast<char *>(values.data()), t.end - t.begin);
    tensors[t.name] = std::move(values);
  }
  return tensors;
}

std::string scratch(const std::string &name) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("mimo-recipe-" + name + "-" + std::to_string(getpid())))
                        .string();
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(Recipes, EveryLayoutWithFrozenPartsMatchesItsReference) {
  // Non-colocated with a language pipeline, colocated with one, and two
  // encoders on their own ranks.
  for (const char *file :
       {"vlm-fan-in.json", "vlm-colocated-pp2.json", "avlm.json"}) {
    SCOPED_TRACE(file);
    exec::RunResult distributed =
        expectTrainsLikeItsReference(planOf(stageTwo(test::example(file))));
    ASSERT_EQ(distributed.steps.size(), 3u);
    EXPECT_LT(distributed.steps[2].loss, distributed.steps[0].loss);
  }
  // The language model frozen too (LLaVA stage 1, the encoder's body
  // frozen): only the projector trains, under CP and SP as well.
  json stageOne = stageTwo(test::example("vlm-fan-in.json"));
  stageOne["modules"][1]["freeze"] = true;
  stageOne["modules"][1]["parallel"] = {
      {"tp", 2}, {"cp", 2}, {"sequence_parallel", true}, {"rank_offset", 4}};
  SCOPED_TRACE("stage 1 under CP and SP");
  expectTrainsLikeItsReference(planOf(stageOne));
}

TEST(Recipes, FrozenTensorsNeverChangeAndHoldNoMoments) {
  json model = stageTwo(test::example("vlm-fan-in.json"));
  model["modules"][1]["freeze"] = {"layers.0", "embedding"};
  Plan plan = planOf(model);
  std::string early = scratch("early"), late = scratch("late");
  ASSERT_EQ(train(plan, 1, early).exitCode, 0);
  ASSERT_EQ(train(plan, 3, late).exitCode, 0);
  auto a = tensorsOf(early + "/step-1/model.safetensors");
  auto b = tensorsOf(late + "/step-3/model.safetensors");
  auto moments = tensorsOf(late + "/step-3/optimizer.safetensors");
  ASSERT_EQ(a.size(), b.size());
  size_t frozen = 0, trained = 0;
  for (const auto &[name, values] : b) {
    size_t dot = name.find('.');
    const ModuleConfig &module = *std::find_if(
        plan.config.modules.begin(), plan.config.modules.end(),
        [&](const ModuleConfig &m) { return m.name == name.substr(0, dot); });
    const std::string local = name.substr(dot + 1);
    if (module.frozen(local)) {
      ++frozen;
      // Bitwise what they were after step 1 (and at the start: norm
      // weights start at 1, biases at 0).
      EXPECT_EQ(std::memcmp(values.data(), a[name].data(), values.size() * 4),
                0)
          << name << " changed";
      if (local.find("norm") != std::string::npos ||
          local.find("ln") != std::string::npos) {
        for (float v : values) {
          ASSERT_EQ(v, local.find("bias") != std::string::npos ? 0.0f : 1.0f)
              << name;
        }
      }
      for (const auto &[key, moment] : moments) {
        if (key.find(name) == std::string::npos)
          continue;
        for (float v : moment) {
          ASSERT_EQ(v, 0.0f) << key << ": a frozen tensor's moment";
        }
      }
    } else {
      ++trained;
      EXPECT_NE(std::memcmp(values.data(), a[name].data(), values.size() * 4),
                0)
          << name << " did not train";
    }
  }
  EXPECT_GT(frozen, 10u);
  EXPECT_GT(trained, 10u);
  std::filesystem::remove_all(early);
  std::filesystem::remove_all(late);
}

TEST(Recipes, DecayRuleAndLearningRateMultiplier) {
  // Biases and norm weights decay only with decay_all: the two differ
  // under weight decay and agree without it.
  json model = test::example("vlm-fan-in.json");
  model["train"]["weight_decay"] = 0.5;
  json all = model;
  all["train"]["decay_all"] = true;
  exec::RunResult skip = train(planOf(model), 2), every = train(planOf(all), 2);
  ASSERT_EQ(skip.exitCode, 0) << skip.error;
  ASSERT_EQ(every.exitCode, 0) << every.error;
  EXPECT_NE(skip.steps[1].loss, every.steps[1].loss);
  model["train"]["weight_decay"] = 0.0;
  all["train"]["weight_decay"] = 0.0;
  EXPECT_EQ(train(planOf(model), 2).steps[1].loss,
            train(planOf(all), 2).steps[1].loss);
  // lr_mult 2 on every module trains as twice the learning rate.
  json doubled = test::example("vlm-fan-in.json");
  json mult = doubled;
  doubled["train"]["lr"] = 2 * doubled["train"].value("lr", 1e-3);
  for (json &module : mult["modules"])
    module["lr_mult"] = 2.0;
  exec::RunResult a = train(planOf(doubled), 2), b = train(planOf(mult), 2);
  ASSERT_EQ(a.exitCode, 0) << a.error;
  ASSERT_EQ(b.exitCode, 0) << b.error;
  for (size_t s = 0; s < 2; ++s)
    EXPECT_LE(relative(a.steps[s].loss, b.steps[s].loss), 1e-6);
  // And lr_mult 2 on the encoder alone is another run.
  json encoderOnly = test::example("vlm-fan-in.json");
  encoderOnly["modules"][0]["lr_mult"] = 2.0;
  EXPECT_NE(train(planOf(encoderOnly), 2).steps[1].loss,
            train(planOf(test::example("vlm-fan-in.json")), 2).steps[1].loss);
}

TEST(Recipes, StageTwoStartsFromStageOnesWeightsWithAFreshOptimizer) {
  // Stage 1 on the fan-in layout (the language model trained too, so that
  // its moments are not zero), saved after 2 steps.
  json one = test::example("vlm-fan-in.json");
  one["modules"][0]["freeze"] = {"patch", "layers"};
  std::string first = scratch("stage1"), second = scratch("stage2");
  ASSERT_EQ(train(planOf(one), 2, first).exitCode, 0);
  // Stage 2 on the colocated layout, from stage 1's weights: the encoder
  // frozen whole, the language model trained.
  json two = test::example("vlm-colocated.json");
  for (json &module : two["modules"])
    module["init"] = {{"from", first}, {"format", "mimo"}};
  two["modules"][0]["freeze"] = true;
  Plan plan = planOf(two);
  exec::RunResult run = train(plan, 1, second);
  ASSERT_EQ(run.exitCode, 0) << run.error;
  EXPECT_EQ(run.steps[0].step, 1); // the step count starts again
  auto a = tensorsOf(first + "/step-2/model.safetensors");
  auto b = tensorsOf(second + "/step-1/model.safetensors");
  auto moments = tensorsOf(second + "/step-1/optimizer.safetensors");
  auto before = tensorsOf(first + "/step-2/optimizer.safetensors");
  size_t images = 0;
  for (const auto &[name, values] : b)
    if (name.rfind("images.", 0) == 0) {
      ++images;
      EXPECT_EQ(values, a[name]) << name << ": not stage 1's weights";
    } else {
      EXPECT_NE(values, a[name]) << name << ": did not train";
    }
  EXPECT_GT(images, 5u);
  // A fresh optimizer: after one step m = (1 - beta1) g and v = (1 - beta2)
  // g^2, so m^2 / v = (1 - beta1)^2 / (1 - beta2) = 10 for every element
  // (betas 0.9, 0.999); stage 1's moments carried over would break it.
  const std::string m = "language.layers.0.wq.exp_avg";
  ASSERT_TRUE(moments.count(m) && moments.count(m + "_sq"));
  size_t checked = 0;
  for (size_t k = 0; k < moments[m].size(); ++k) {
    double mk = moments[m][k], vk = moments[m + "_sq"][k];
    if (vk < 1e-30)
      continue;
    ++checked;
    ASSERT_NEAR(mk * mk / vk, 10.0, 1e-3) << m << "[" << k << "]";
  }
  EXPECT_GT(checked, 100u);
  // Stage 1's moments there were not (1 - beta1) g: the check can tell.
  ASSERT_TRUE(before.count(m));
  exec::RunResult uninitialised =
      train(planOf(test::example("vlm-colocated.json")), 1);
  EXPECT_NE(uninitialised.steps[0].loss, run.steps[0].loss);
  // A checkpoint of another architecture is refused naming the tensor and
  // the module; so is a folder with no checkpoint.
  json other = two;
  other["modules"][1]["arch"]["ffn_hidden_size"] = 256;
  exec::RunResult refused = train(planOf(other), 1);
  EXPECT_EQ(refused.exitCode, 1);
  EXPECT_NE(refused.error.find("tensor 'language.layers.0.gate' has shape"),
            std::string::npos)
      << refused.error;
  EXPECT_NE(refused.error.find("(the init of module 'language')"),
            std::string::npos)
      << refused.error;
  std::filesystem::remove_all(first);
  exec::RunResult missing = train(plan, 1);
  EXPECT_EQ(missing.exitCode, 1);
  EXPECT_NE(missing.error.find("no checkpoint here"), std::string::npos)
      << missing.error;
  std::filesystem::remove_all(second);
}

TEST(Recipes, AWhollyFrozenEncoderRunsForwardOnly) {
  // Every parameter of the images encoder frozen: its programs hold no
  // backward, no gradient messages and no gradient reduction (nor do the
  // bridges' other ends), and every layout still trains like its
  // reference.
  for (const char *file : {"vlm-fan-in.json", "vlm-colocated.json",
                           "vlm-colocated-pp2.json", "avlm.json"}) {
    SCOPED_TRACE(file);
    json model = test::example(file);
    model["modules"][0]["freeze"] = true;
    Plan plan = planOf(model);
    ASSERT_TRUE(plan.topology.modules[0].forwardOnly);
    for (const Program &program : plan.programs)
      for (const Instr &in : program.instrs) {
        const InstrInfo &info = instrInfo(in.op);
        size_t module = info.operand == InstrOperand::Bridge
                            ? plan.topology.bridges[in.index].src
                            : static_cast<size_t>(std::max(in.index, 0));
        EXPECT_FALSE(info.isGrad && info.operand != InstrOperand::None &&
                     module == 0)
            << program.role << ": " << describeInstr(plan.topology, in);
      }
    expectTrainsLikeItsReference(plan);
  }
  // Nothing left to train is refused.
  json none = test::example("vlm-fan-in.json");
  none["modules"][0]["freeze"] = true;
  none["modules"][1]["freeze"] = true;
  ParseResult refused = parseModelConfig(none.dump(), "model.json");
  ASSERT_FALSE(refused.config);
  EXPECT_EQ(refused.diagnostics[0].pointer, "/modules");
  EXPECT_NE(refused.diagnostics[0].message.find("nothing would train"),
            std::string::npos);
}

} // namespace
