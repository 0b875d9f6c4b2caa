//===- LoraTrainingTest.cpp - LoRA trained, saved and resumed -------------===//
//
// docs/model.md "LoRA", docs/checkpoints.md "LoRA": LoRA layouts in bf16
// against their bf16 reference; a LoRA run's checkpoint holds its adapters
// only, names its base, resumes bit for bit in its layout and within 1e-5
// in another, and refuses another base; LoRA keeps less than full
// fine-tuning, as planned and as measured. (Every parallelism in fp32:
// the Lora* equivalence layouts; PEFT's semantics and folders: twin.py's
// lora case.)
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/HfExport.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/config/Lora.h"
#include "runtime/cost/MemoryPlan.h"
#include "tests/e2e/Training.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace mimo;
using nlohmann::json;
using test::example;
using test::planOf;
using test::relative;

namespace {

/// vlm-fan-in (encoder DP4, language TP2 x PP2 with SP) with adapters on
/// every linear of both modules.
json loraFanIn() {
  return test::withLora(example("vlm-fan-in.json"), "all-linear", "all-linear");
}

} // namespace

TEST(LoraTraining, Bf16LayoutsMatchTheirReference) {
  for (const test::Layout &layout : test::equivalenceLayouts()) {
    if (layout.name.rfind("Lora", 0) != 0 ||
        layout.name == "LoraColocatedPp2Recomputed")
      continue;
    SCOPED_TRACE(layout.name);
    json model = layout.model;
    model["precision"] = "bf16";
    test::expectMatchesReference(model, layout.worldSize, 1e-2);
  }
}

TEST(LoraTraining, CheckpointsHoldTheAdaptersAndResumeInAnyLayout) {
  json model = loraFanIn();
  exec::RunResult whole = test::trainFrom(model, 4);
  ASSERT_EQ(whole.exitCode, 0) << whole.error;
  const std::string dir = test::scratchDir("lora-checkpoint");
  exec::RunResult first = test::trainFrom(model, 2, dir);
  ASSERT_EQ(first.exitCode, 0) << first.error;
  // Lean: the adapters (and their moments), nothing of the frozen base.
  std::string error;
  std::optional<safetensors::Header> header =
      safetensors::readHeader(dir + "/step-2/model.safetensors", error);
  ASSERT_TRUE(header) << error;
  ASSERT_FALSE(header->tensors.empty());
  for (const safetensors::TensorEntry &t : header->tensors)
    EXPECT_TRUE(isLoraFactor(t.name)) << t.name;
  std::ifstream stateFile(dir + "/step-2/state.json");
  json state = json::parse(stateFile);
  EXPECT_EQ(state["lora_base"],
            json({{"images", "seed 1234"}, {"language", "seed 1234"}}));
  // The same layout: bit for bit; the language model at DP4: within 1e-5.
  exec::RunResult same = test::trainFrom(model, 4, "", dir);
  ASSERT_EQ(same.exitCode, 0) << same.error;
  ASSERT_EQ(same.steps.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(same.steps[s].loss, whole.steps[s + 2].loss);
    EXPECT_EQ(same.steps[s].gradNorm, whole.steps[s + 2].gradNorm);
  }
  json dp4 = model;
  dp4["modules"][1]["parallel"] = {{"dp", 4}, {"rank_offset", 4}};
  exec::RunResult moved = test::trainFrom(dp4, 4, "", dir);
  ASSERT_EQ(moved.exitCode, 0) << moved.error;
  ASSERT_EQ(moved.steps.size(), 2u);
  for (size_t s = 0; s < 2; ++s)
    EXPECT_LE(relative(moved.steps[s].loss, whole.steps[s + 2].loss), 1e-5);
  // Adapters of another base: refused, naming the state's key.
  state["lora_base"]["language"] = "/models/another-base";
  std::ofstream(dir + "/step-2/state.json") << state.dump(2);
  Plan plan = planOf(model);
  EXPECT_FALSE(exec::openCheckpoint(dir, plan.config, error));
  EXPECT_NE(error.find("/lora_base/language"), std::string::npos) << error;
  EXPECT_NE(error.find("another-base"), std::string::npos) << error;
  // An export merges onto the base: the same refusal, nothing written.
  std::vector<std::string> written;
  const std::string out = dir + "-hf";
  error =
      exec::exportHf(plan.config, dir, out, exec::HfExportOptions(), written);
  EXPECT_NE(error.find("/lora_base/language"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove_all(dir);
}

TEST(LoraTraining, RankOneExportsAsPeftSavesIt) {
  // r = 1: lora_A.weight [1, in] and lora_B.weight [out, 1], matrices
  // (not the vectors a one-row parameter is), read back by init.adapter.
  json model = {
      {"version", 1},
      {"name", "lm"},
      {"batch",
       {{"micro_batch_size", 2}, {"num_microbatches", 1}, {"seq_length", 16}}},
      {"modules",
       {{{"name", "language"},
         {"kind", "language"},
         {"arch",
          {{"vocab_size", 64},
           {"hidden_size", 16},
           {"num_layers", 1},
           {"num_heads", 2},
           {"ffn_hidden_size", 32}}},
         {"parallel", {{"tp", 2}}},
         {"lora", {{"r", 1}, {"targets", {"q", "down"}}}}}}},
      {"data", {{"source", "synthetic"}, {"text_only_fraction", 1.0}}}};
  const std::string dir = test::scratchDir("lora-r1");
  exec::RunResult run = test::trainFrom(model, 1, dir);
  ASSERT_EQ(run.exitCode, 0) << run.error;
  std::vector<std::string> written;
  exec::HfExportOptions options;
  options.peft = true;
  const std::string out = dir + "-peft";
  std::string error =
      exec::exportHf(planOf(model).config, dir, out, options, written);
  ASSERT_EQ(error, "");
  std::optional<safetensors::Header> header =
      safetensors::readHeader(out + "/adapter_model.safetensors", error);
  ASSERT_TRUE(header) << error;
  const std::string q = "base_model.model.model.layers.0.self_attn.q_proj.";
  ASSERT_TRUE(header->find(q + "lora_A.weight"));
  EXPECT_EQ(header->find(q + "lora_A.weight")->shape,
            (std::vector<int64_t>{1, 16}));
  EXPECT_EQ(header->find(q + "lora_B.weight")->shape,
            (std::vector<int64_t>{16, 1}));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(out);
}

TEST(LoraTraining, KeepsLessThanFullFineTuningAsPlanned) {
  // The language model at rank 16 on every linear beside its full
  // fine-tuning: fewer gradient and moment bytes planned on every language
  // rank, and a lower measured peak.
  json full = example("vlm-fan-in.json");
  json lora = full;
  lora["modules"][1]["lora"] = {{"r", 16}, {"targets", "all-linear"}};
  Plan a = planOf(full), b = planOf(lora);
  std::vector<RankMemory> ea = memoryPlan(a.topology, a.config);
  std::vector<RankMemory> eb = memoryPlan(b.topology, b.config);
  for (size_t r = 4; r < 8; ++r) {
    EXPECT_LT(eb[r].optimizerBytes * 2, ea[r].optimizerBytes) << "rank " << r;
    EXPECT_LT(eb[r].totalBytes, ea[r].totalBytes) << "rank " << r;
  }
  exec::RunOptions options;
  options.steps = 2;
  options.timeoutSeconds = 120;
  exec::RunResult ra = exec::runLocal(a, options);
  exec::RunResult rb = exec::runLocal(b, options);
  ASSERT_EQ(ra.exitCode, 0) << ra.error;
  ASSERT_EQ(rb.exitCode, 0) << rb.error;
  EXPECT_LT(rb.steps.back().peakBytes, ra.steps.back().peakBytes);
}

TEST(LoraTraining, AFullCheckpointIsTheBaseOfALoraRun) {
  // Full fine-tuning saved; the same model with LoRA cannot --load it (its
  // checkpoints hold adapters), and is told to start from it with init,
  // which trains.
  json full = example("vlm-fan-in.json");
  const std::string dir = test::scratchDir("lora-base");
  exec::RunResult first = test::trainFrom(full, 1, dir);
  ASSERT_EQ(first.exitCode, 0) << first.error;
  json lora = loraFanIn();
  std::string error;
  EXPECT_FALSE(exec::openCheckpoint(dir, planOf(lora).config, error));
  EXPECT_NE(error.find("\"init\": {\"from\": \"" + dir), std::string::npos)
      << error;
  for (json &module : lora["modules"])
    module["init"] = {{"from", dir}, {"format", "mimo"}};
  exec::RunResult fromBase = test::trainFrom(lora, 2);
  ASSERT_EQ(fromBase.exitCode, 0) << fromBase.error;
  ASSERT_EQ(fromBase.steps.size(), 2u);
  // B starts at zeros: step 1's loss is the base's, as the full model
  // started from the same checkpoint computes it.
  json again = full;
  for (json &module : again["modules"])
    module["init"] = {{"from", dir}, {"format", "mimo"}};
  exec::RunResult fullAgain = test::trainFrom(again, 1);
  ASSERT_EQ(fullAgain.exitCode, 0) << fullAgain.error;
  EXPECT_LE(relative(fromBase.steps[0].loss, fullAgain.steps[0].loss), 1e-6);
  EXPECT_TRUE(std::isfinite(fromBase.steps[1].loss));
  std::filesystem::remove_all(dir);
}
