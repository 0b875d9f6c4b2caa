//===- EquivalenceTest.cpp - Every layout trains like one rank ------------===//
//
// docs/runtime.md: a distributed run and its --reference run (one rank, no
// parallelism, same model, data and seed) give the same loss and gradient
// norm, relative difference <= 1e-5, over 3 optimizer steps. Runs in process
// on the local backend (one thread per rank).
//
//===----------------------------------------------------------------------===//

#include "runtime/cost/MemoryPlan.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/support/Limits.h"
#include "tests/e2e/Layouts.h"
#include "tests/e2e/Training.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include <unistd.h>

using namespace mimo;
using nlohmann::json;

namespace {

using test::example;
using test::expectMatchesReference;
using test::planOf;
using test::relative;
using test::runWithReference;
using test::scratchDir;
using test::trainFrom;

class Equivalence : public ::testing::TestWithParam<test::Layout> {};

TEST_P(Equivalence, MatchesReference) {
  expectMatchesReference(GetParam().model, GetParam().worldSize);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Equivalence, ::testing::ValuesIn(test::equivalenceLayouts()),
    [](const ::testing::TestParamInfo<test::Layout> &info) {
      return info.param.name;
    });

/// The last stage's head and loss in chunks of one row (the most chunks;
/// each with its own vocabulary-parallel statistics under TP, SP and CP)
/// train as the reference, which takes its rows in one chunk.
TEST(ChunkedHead, OneRowAtATimeMatchesTheReference) {
  for (auto [name, world] :
       {std::pair<const char *, int64_t>{"vlm-fan-in.json", 8},
        {"lm-cp2-sp.json", 6}}) {
    SCOPED_TRACE(name);
    exec::RunOptions options;
    options.logitChunkBytes = 1;
    expectMatchesReference(example(name), world, 1e-5, options);
  }
}

/// Under bf16 the head's gradients run once per group of chunks
/// (cost/MemoryPlan.h headGradientRows): one-row chunks in groups of a few
/// rows, several groups a micro-batch (a last group cut short), train as
/// the reference, which takes each micro-batch's rows in one group.
TEST(ChunkedHead, Bf16GradientGroupsMatchTheReference) {
  json model = example("lm-cp2-sp.json");
  model["precision"] = "bf16";
  exec::RunOptions options;
  options.logitChunkBytes = 1;
  // 3 rows of bf16 logit gradients (the vocabulary's shard a row).
  for (auto &module : model["modules"])
    if (module["kind"] == "language")
      options.headGradientBytes = 3 * 2 *
                                  module["arch"]["vocab_size"].get<int64_t>() /
                                  module["parallel"].value("tp", 1);
  expectMatchesReference(model, 6, 1e-2, options);
  EXPECT_EQ(mimo::headGradientRows(10, 100, 1, 3 * 2 * 100), 3);
  EXPECT_EQ(mimo::headGradientRows(2, 100, 1, 3 * 2 * 100), 2);
  EXPECT_EQ(mimo::headGradientRows(10, 100, 4, 3 * 2 * 100), 4)
      << "at least one chunk";
  EXPECT_EQ(mimo::headGradientRows(100, 100, 4, 9 * 2 * 100), 8)
      << "whole chunks";
}

/// docs/gpu.md bf16 (emulated on the CPU: fp32 arithmetic, working weights
/// and stored activations rounded to bfloat16): distributed layouts match
/// their bf16 reference within 1e-2 over 3 steps, and bf16 follows fp32
/// within 2e-2 over the first 10 steps, without being fp32.
TEST(Bf16, LayoutsMatchTheirReferenceAndFollowFp32) {
  for (auto [name, world] :
       {std::pair<const char *, int64_t>{"vlm-fan-in.json", 8},
        {"lm-cp2-sp.json", 6},
        {"vlm-colocated.json", 8}}) {
    SCOPED_TRACE(name);
    json model = example(name);
    model["precision"] = "bf16";
    expectMatchesReference(model, world, 1e-2);
  }
  json model = example("vlm-fan-in.json");
  exec::RunOptions options;
  options.steps = 10;
  options.timeoutSeconds = 120;
  exec::RunResult fp32 = exec::runLocal(planOf(model), options);
  model["precision"] = "bf16";
  exec::RunResult bf16 = exec::runLocal(planOf(model), options);
  ASSERT_EQ(fp32.exitCode, 0) << fp32.error;
  ASSERT_EQ(bf16.exitCode, 0) << bf16.error;
  ASSERT_EQ(bf16.steps.size(), 10u);
  bool differs = false;
  for (size_t s = 0; s < 10; ++s) {
    EXPECT_LE(relative(bf16.steps[s].loss, fp32.steps[s].loss), 2e-2)
        << "step " << s + 1;
    differs = differs || bf16.steps[s].loss != fp32.steps[s].loss;
  }
  EXPECT_TRUE(differs) << "bf16 trained exactly like fp32: nothing rounded";
  EXPECT_LT(bf16.steps[9].loss, bf16.steps[0].loss - 0.5);
}

/// The architecture keys (docs/model.md) under bf16: its own test, so that
/// the thread sanitizer, which sees the same threads in the fp32 layouts,
/// can leave it out.
TEST(Bf16, ArchitecturesMatchTheirReference) {
  { // grouped-query attention, rescaled RoPE and norm_eps under bf16
    SCOPED_TRACE("llama3-like lm-cp2-sp.json");
    json model = test::llama3Like(example("lm-cp2-sp.json"), 2);
    model["modules"][1]["arch"]["tie_embeddings"] = true;
    model["precision"] = "bf16";
    expectMatchesReference(model, 6, 1e-2);
  }
  { // a CLIP tower under bf16
    SCOPED_TRACE("clip vlm-colocated.json");
    json model = test::clipLike(example("vlm-colocated.json"), 17);
    model["precision"] = "bf16";
    expectMatchesReference(model, 8, 1e-2);
  }
  { // sparse layers (a shared expert, qk norms) under bf16: the router
    // reads bf16 inputs and weights, its logits and routing fp32
    SCOPED_TRACE("moe vlm-fan-in.json");
    json model = test::withMoe(example("vlm-fan-in.json"), 4, 2, "all", true);
    model["modules"][1]["arch"]["qk_norm"] = true;
    model["precision"] = "bf16";
    expectMatchesReference(model, 8, 1e-2);
    // ... with whole experts on each TP rank (etp 1), each on half the rows
    model["modules"][1]["parallel"]["etp"] = 1;
    expectMatchesReference(model, 8, 1e-2);
  }
  { // a sparse tower at ep 4 under bf16
    SCOPED_TRACE("moe encoder vlm-fan-in.json");
    json model =
        test::withMoe(example("vlm-fan-in.json"), 4, 2, "all", true, "encoder");
    model["modules"][0]["parallel"]["ep"] = 4;
    model["precision"] = "bf16";
    expectMatchesReference(model, 8, 1e-2);
  }
  { // expert parallelism under bf16: the rows travel as bf16 bits
    SCOPED_TRACE("moe ep 2 vlm-fan-out.json");
    json model = test::withMoe(example("vlm-fan-out.json"), 4, 2, "all", true);
    model["modules"][1]["parallel"]["ep"] = 2;
    model["precision"] = "bf16";
    expectMatchesReference(model, 8, 1e-2);
    // ... with the distributed optimizer: the experts' fp32 masters cut
    // over their edp group, the rest over DP x CP.
    model["modules"][1]["distributed_optimizer"] = true;
    expectMatchesReference(model, 8, 1e-2);
  }
  { // biases (qkv_bias, an encoder's bias) under bf16
    SCOPED_TRACE("biases vlm-fan-in.json");
    json model = test::withBiases(example("vlm-fan-in.json"));
    model["precision"] = "bf16";
    expectMatchesReference(model, 8, 1e-2);
  }
}

TEST(Evaluation, HeldOutLossMatchesTheReferenceAndChangesNothing) {
  // docs/runtime.md: every 2 steps, the loss of 2 held-out batches (the forward
  // half of each rank's program on its own stream of samples), with a
  // pipeline and with context parallelism.
  for (const char *name : {"vlm-fan-in.json", "lm-cp2-sp.json"}) {
    SCOPED_TRACE(name);
    json model = example(name);
    model["train"]["eval_every"] = 2;
    model["train"]["eval_steps"] = 2;
    Plan plan = planOf(model);
    exec::RunOptions options;
    options.steps = 4;
    options.timeoutSeconds = 120;
    exec::RunResult distributed, reference;
    ASSERT_NO_FATAL_FAILURE(
        runWithReference(plan, options, distributed, reference));
    exec::RunResult plain = exec::runLocal(planOf(example(name)), options);
    ASSERT_EQ(plain.exitCode, 0) << plain.error;
    ASSERT_EQ(distributed.steps.size(), 4u);
    for (size_t s = 0; s < 4; ++s) {
      const exec::StepMetrics &d = distributed.steps[s];
      EXPECT_EQ(d.evalLoss.has_value(), s % 2 == 1) << "step " << s + 1;
      if (d.evalLoss) {
        ASSERT_TRUE(reference.steps[s].evalLoss);
        EXPECT_LE(relative(*d.evalLoss, *reference.steps[s].evalLoss), 1e-5);
        EXPECT_NE(*d.evalLoss, d.loss); // another batch
      }
      // Evaluating leaves training exactly as it was.
      EXPECT_EQ(d.loss, plain.steps[s].loss) << "step " << s + 1;
      EXPECT_EQ(d.gradNorm, plain.steps[s].gradNorm) << "step " << s + 1;
    }
    // The model learns: the later held-out loss is the lower.
    EXPECT_LT(*distributed.steps[3].evalLoss, *distributed.steps[1].evalLoss);
  }
}

/// `moved`, resumed from step 2, trains steps 3 and 4 as `whole` did
/// (within 1e-5).
void expectResumedAtStep3(const exec::RunResult &moved,
                          const exec::RunResult &whole) {
  ASSERT_EQ(moved.exitCode, 0) << moved.error;
  ASSERT_EQ(moved.steps.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_LE(relative(moved.steps[s].loss, whole.steps[s + 2].loss), 1e-5);
    EXPECT_LE(relative(moved.steps[s].gradNorm, whole.steps[s + 2].gradNorm),
              1e-5);
  }
}

TEST(Checkpoint, ResumesBitIdenticallyAndUnderAnotherLayout) {
  // docs/checkpoints.md: save after step 2 of TP2 x PP2 (+ encoder DP4), then
  // resume: in the same layout bit for bit, in others (language DP4; colocated)
  // within 1e-5 of the uninterrupted run.
  json model = example("vlm-fan-in.json");
  exec::RunResult whole = trainFrom(model, 4);
  ASSERT_EQ(whole.exitCode, 0) << whole.error;
  std::string dir = scratchDir("checkpoint");
  exec::RunResult first = trainFrom(model, 2, dir);
  ASSERT_EQ(first.exitCode, 0) << first.error;
  ASSERT_TRUE(std::filesystem::exists(dir + "/step-2/model.safetensors"));
  exec::RunResult same = trainFrom(model, 4, "", dir);
  ASSERT_EQ(same.exitCode, 0) << same.error;
  ASSERT_EQ(same.steps.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(same.steps[s].step, static_cast<int64_t>(s + 3));
    EXPECT_EQ(same.steps[s].loss, whole.steps[s + 2].loss);
    EXPECT_EQ(same.steps[s].gradNorm, whole.steps[s + 2].gradNorm);
  }
  json dp4 = model;
  dp4["modules"][1]["parallel"] = {{"dp", 4}, {"rank_offset", 4}};
  json colocated = model;
  colocated["modules"][0]["parallel"] = {{"tp", 2}, {"dp", 4}};
  colocated["modules"][1]["parallel"] = {{"tp", 4}, {"dp", 2}};
  for (const json &other : {dp4, colocated}) {
    exec::RunResult moved = trainFrom(other, 4, "", dir);
    expectResumedAtStep3(moved, whole);
  }
  std::filesystem::remove_all(dir);
}

/// docs/model.md Recomputation: "full" (every layer, or each stage's first
/// `recompute_layers`) and "selective" change no bit of what a layout
/// computes (TP with SP, PP, CP and bf16 among them), and full keeps less.
TEST(Recompute, ChangesNoBitAndFullKeepsLess) {
  json bf16 = example("vlm-colocated-pp2.json");
  bf16["precision"] = "bf16";
  for (const auto &[name, model] :
       {std::pair<const char *, json>{"fan-in", example("vlm-fan-in.json")},
        {"cp2", example("lm-cp2-sp.json")},
        {"colocated bf16", bf16}}) {
    SCOPED_TRACE(name);
    exec::RunResult plain = trainFrom(model, 2);
    ASSERT_EQ(plain.exitCode, 0) << plain.error;
    auto with = [&](const char *mode, int64_t layers) {
      json m = model;
      for (json &module : m["modules"]) {
        module["recompute"] = mode;
        if (layers >= 0)
          module["recompute_layers"] = layers;
      }
      return m;
    };
    for (const auto &[mode, layers] :
         {std::pair<const char *, int64_t>{"full", -1},
          {"full", 1},
          {"selective", -1}}) {
      SCOPED_TRACE(std::string(mode) + " " + std::to_string(layers));
      exec::RunResult run = trainFrom(with(mode, layers), 2);
      ASSERT_EQ(run.exitCode, 0) << run.error;
      ASSERT_EQ(run.steps.size(), 2u);
      for (size_t s = 0; s < 2; ++s) {
        EXPECT_EQ(run.steps[s].loss, plain.steps[s].loss) << "step " << s + 1;
        EXPECT_EQ(run.steps[s].gradNorm, plain.steps[s].gradNorm)
            << "step " << s + 1;
      }
      if (std::string(mode) == "full" && layers < 0) {
        EXPECT_LT(run.steps[1].peakBytes, plain.steps[1].peakBytes);
      }
    }
  }
}

/// Expert parallelism (docs/model.md "Mixture of experts"): each expert is
/// written once, by the first member holding it, so a run of `model` saved
/// at module `index`'s ep resumes bit for bit at that ep and at each of
/// `others` (another split of the experts) within 1e-5 of the
/// uninterrupted run.
void expectExpertsReshard(const json &model, size_t index,
                          const std::vector<json> &others) {
  exec::RunResult whole = trainFrom(model, 4);
  ASSERT_EQ(whole.exitCode, 0) << whole.error;
  std::string dir = scratchDir("experts");
  exec::RunResult first = trainFrom(model, 2, dir);
  ASSERT_EQ(first.exitCode, 0) << first.error;
  exec::RunResult same = trainFrom(model, 4, "", dir);
  ASSERT_EQ(same.exitCode, 0) << same.error;
  ASSERT_EQ(same.steps.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(same.steps[s].loss, whole.steps[s + 2].loss);
    EXPECT_EQ(same.steps[s].gradNorm, whole.steps[s + 2].gradNorm);
    EXPECT_EQ(same.steps[s].auxLoss, whole.steps[s + 2].auxLoss);
  }
  for (const json &grid : others) { // parallel keys; null: removed
    SCOPED_TRACE(grid.dump());
    json other = model;
    json &parallel = other["modules"][index]["parallel"];
    for (const auto &[key, value] : grid.items())
      if (value.is_null())
        parallel.erase(key);
      else
        parallel[key] = value;
    expectResumedAtStep3(trainFrom(other, 4, "", dir), whole);
  }
  std::filesystem::remove_all(dir);
}

/// The language model's experts saved at ep 2 resume at ep 1 and 4.
TEST(Checkpoint, ReshardsTheExperts) {
  json model = test::withMoe(example("vlm-fan-out.json"), 4, 2, "all", true);
  model["modules"][1]["parallel"]["ep"] = 2;
  expectExpertsReshard(model, 1, {{{"ep", 1}}, {{"ep", 4}}});
}

/// Experts saved whole on each of TP4's ranks (etp 1, at ep 2) resume cut
/// over TP4 as the dense MLP (etp removed) at ep 1, cut over two of its
/// ranks at ep 2, and the other way round.
TEST(Checkpoint, ReshardsBetweenExpertTensorCuts) {
  json model = test::withMoe(example("vlm-colocated.json"), 4, 2, "all", true);
  model["modules"][1]["parallel"]["ep"] = 2;
  model["modules"][1]["parallel"]["etp"] = 1;
  expectExpertsReshard(model, 1, {{{"ep", 1}, {"etp", nullptr}}, {{"etp", 2}}});
  json cut = model;
  cut["modules"][1]["parallel"].erase("etp");
  expectExpertsReshard(cut, 1, {{{"etp", 1}, {"ep", 1}}});
}

/// A sparse tower's experts (its DP4 at ep 2) resume at ep 4 and 1.
TEST(Checkpoint, ReshardsAnEncodersExperts) {
  json model =
      test::withMoe(example("vlm-fan-in.json"), 4, 2, {0}, false, "encoder");
  model["modules"][0]["parallel"]["ep"] = 2;
  expectExpertsReshard(model, 0, {{{"ep", 4}}, {{"ep", 1}}});
}

/// pipeline_layers: layer l keeps its name whatever the split, so a run
/// saved with uneven stages resumes with even ones, the other way round
/// and on four stages, each within 1e-5 of the uninterrupted run.
TEST(Checkpoint, ReshardsBetweenPipelineSplits) {
  json model = example("vlm-fan-in.json"); // language: 4 layers, TP2 x PP2
  exec::RunResult whole = trainFrom(model, 4);
  ASSERT_EQ(whole.exitCode, 0) << whole.error;
  json uneven = model;
  uneven["modules"][1]["pipeline_layers"] = {3, 1};
  std::string dir = scratchDir("split");
  exec::RunResult first = trainFrom(uneven, 2, dir);
  ASSERT_EQ(first.exitCode, 0) << first.error;
  json reversed = model;
  reversed["modules"][1]["pipeline_layers"] = {1, 3};
  json pp4 = model;
  pp4["modules"][1]["parallel"]["pp"] = 4;
  pp4["modules"][1]["pipeline_layers"] = {1, 1, 1, 1};
  // Interleaved (docs/plan.md): two chunks a stage, each a virtual stage's
  // layers; the checkpoint's tensors are global, so it moves both ways.
  json interleaved = model;
  interleaved["batch"]["schedule"] = "interleaved";
  interleaved["modules"][1]["parallel"]["virtual_stages"] = 2;
  for (const auto &[name, other] :
       {std::pair<const char *, json>{"even", model},
        {"[1, 3]", reversed},
        {"pp 4", pp4},
        {"interleaved", interleaved}}) {
    SCOPED_TRACE(name);
    exec::RunResult moved = trainFrom(other, 4, "", dir);
    expectResumedAtStep3(moved, whole);
  }
  std::filesystem::remove_all(dir);
  // Saved interleaved, resumed under 1F1B.
  exec::RunResult chunked = trainFrom(interleaved, 2, dir);
  ASSERT_EQ(chunked.exitCode, 0) << chunked.error;
  expectResumedAtStep3(trainFrom(model, 4, "", dir), whole);
  std::filesystem::remove_all(dir);
}

/// `model` with every module's optimizer distributed (docs/model.md).
json withDistributedOptimizer(json model) {
  for (json &module : model["modules"])
    module["distributed_optimizer"] = true;
  return model;
}

/// docs/model.md "Distributed optimizer": sharding the AdamW moments over
/// DP x CP changes what a layout computes by no more than the order of the
/// gradient norm's sum (the reduce-scatter sums each value as the
/// all-reduce did), with the gradient reduced in one collective or in the
/// backward's buckets, and the rank with the largest peak keeps less.
TEST(DistributedOptimizer, TrainsAsTheReplicatedOneAndKeepsLess) {
  json bf16 = example("vlm-colocated-pp2.json");
  bf16["precision"] = "bf16";
  bf16["modules"][1]["arch"]["tie_embeddings"] = true;
  json wide = example("vlm-fan-out.json"); // language DP4
  // bf16 shards the fp32 masters too; a frozen tower keeps its own whole.
  json frozen = wide;
  frozen["precision"] = "bf16";
  frozen["modules"][0]["parallel"] = {{"dp", 4}};
  frozen["modules"][0]["freeze"] = {"patch", "layers"};
  // Expert parallelism: the experts' moments cut over their edp group.
  json experts = test::withMoe(wide, 4, 2, "all", true);
  experts["modules"][1]["parallel"]["ep"] = 2;
  for (const auto &[name, model] :
       {std::pair<const char *, json>{"language dp4", wide},
        {"cp2 with sp", example("lm-cp2-sp.json")},
        {"colocated bf16, tied across pp2", bf16},
        {"bf16, a frozen tower at dp4", frozen},
        {"moe, ep 2 over dp4", experts}}) {
    SCOPED_TRACE(name);
    for (bool buckets : {false, true}) {
      SCOPED_TRACE(buckets ? "buckets" : "one collective");
      exec::RunOptions options;
      options.steps = 3;
      options.timeoutSeconds = 120;
      options.overlap = buckets;
      options.gradBucketBytes = 2048;
      exec::RunResult plain = exec::runLocal(planOf(model), options);
      ASSERT_EQ(plain.exitCode, 0) << plain.error;
      exec::RunResult sharded =
          exec::runLocal(planOf(withDistributedOptimizer(model)), options);
      ASSERT_EQ(sharded.exitCode, 0) << sharded.error;
      ASSERT_EQ(sharded.steps.size(), 3u);
      for (size_t s = 0; s < 3; ++s) {
        EXPECT_EQ(sharded.steps[s].loss, plain.steps[s].loss)
            << "step " << s + 1;
        EXPECT_LE(relative(sharded.steps[s].gradNorm, plain.steps[s].gradNorm),
                  1e-12)
            << "step " << s + 1;
      }
      EXPECT_LT(sharded.steps[2].peakBytes, plain.steps[2].peakBytes);
    }
  }
}

/// `model` trained 4 steps whole, and 2 steps saved into `dir` then
/// resumed to step 4, whose two steps must be the whole run's bit for bit;
/// returns the whole run.
exec::RunResult expectResumesBitForBit(const json &model,
                                       const std::string &dir) {
  exec::RunResult whole = trainFrom(model, 4);
  EXPECT_EQ(whole.exitCode, 0) << whole.error;
  exec::RunResult first = trainFrom(model, 2, dir);
  EXPECT_EQ(first.exitCode, 0) << first.error;
  exec::RunResult same = trainFrom(model, 4, "", dir);
  EXPECT_EQ(same.exitCode, 0) << same.error;
  EXPECT_EQ(same.steps.size(), 2u);
  EXPECT_EQ(whole.steps.size(), 4u);
  for (size_t s = 0; s < 2 && s < same.steps.size() && whole.steps.size() == 4;
       ++s) {
    EXPECT_EQ(same.steps[s].loss, whole.steps[s + 2].loss);
    EXPECT_EQ(same.steps[s].gradNorm, whole.steps[s + 2].gradNorm);
  }
  return whole;
}

/// Under bf16 the sharded fp32 masters are gathered to save and kept in
/// pieces at a load: the same layout resumes bit for bit, the replicated
/// optimizer within bf16's tolerance.
TEST(Checkpoint, ShardedBf16MastersResume) {
  json sharded = withDistributedOptimizer(example("vlm-fan-out.json"));
  sharded["precision"] = "bf16";
  std::string dir = scratchDir("zero-bf16");
  exec::RunResult whole = expectResumesBitForBit(sharded, dir);
  ASSERT_EQ(whole.steps.size(), 4u);
  json replicated = sharded;
  for (json &module : replicated["modules"])
    module.erase("distributed_optimizer");
  exec::RunResult moved = trainFrom(replicated, 4, "", dir);
  ASSERT_EQ(moved.exitCode, 0) << moved.error;
  ASSERT_EQ(moved.steps.size(), 2u);
  for (size_t s = 0; s < 2; ++s)
    EXPECT_LE(relative(moved.steps[s].loss, whole.steps[s + 2].loss), 1e-2);
  // Started from those weights (`init`, a fresh optimizer), the sharded
  // masters train as the replicated ones, bit for bit.
  std::vector<exec::RunResult> started;
  for (json model : {sharded, replicated}) {
    for (json &module : model["modules"])
      module["init"] = {{"from", dir}, {"format", "mimo"}};
    started.push_back(trainFrom(model, 2));
    ASSERT_EQ(started.back().exitCode, 0) << started.back().error;
  }
  EXPECT_NE(started[0].steps[0].loss, whole.steps[0].loss); // not initial
  for (size_t s = 0; s < 2; ++s)
    EXPECT_EQ(started[0].steps[s].loss, started[1].steps[s].loss);
  std::filesystem::remove_all(dir);
}

/// Expert parallelism with the distributed optimizer: the experts' moments
/// gathered over their edp group to save, each member keeping its pieces
/// at a load, so the run resumes bit for bit, and the checkpoint resumes
/// as well without the distributed optimizer or at ep 4.
TEST(Checkpoint, ExpertShardsResume) {
  json model = test::withMoe(example("vlm-fan-out.json"), 4, 2, "all", true);
  model["modules"][1]["parallel"]["ep"] = 2;
  json sharded = withDistributedOptimizer(model);
  std::string dir = scratchDir("zero-ep");
  exec::RunResult whole = expectResumesBitForBit(sharded, dir);
  ASSERT_EQ(whole.steps.size(), 4u);
  json ep4 = sharded;
  ep4["modules"][1]["parallel"]["ep"] = 4;
  for (const json &other : {model, ep4}) {
    exec::RunResult moved = trainFrom(other, 4, "", dir);
    ASSERT_EQ(moved.exitCode, 0) << moved.error;
    ASSERT_EQ(moved.steps.size(), 2u);
    for (size_t s = 0; s < 2; ++s)
      EXPECT_LE(relative(moved.steps[s].loss, whole.steps[s + 2].loss), 1e-5);
  }
  std::filesystem::remove_all(dir);
}

/// docs/checkpoints.md: the distributed optimizer's checkpoint is the
/// replicated one's (global tensors): saved at language DP4 it resumes at
/// DP2 (sharded over two), at DP1 and replicated at DP4, each within 1e-5
/// of the uninterrupted replicated run.
TEST(Checkpoint, ReshardsTheDistributedOptimizer) {
  json model = example("vlm-fan-out.json"); // language DP4 from rank 4
  exec::RunResult whole = trainFrom(model, 4);
  ASSERT_EQ(whole.exitCode, 0) << whole.error;
  std::string dir = scratchDir("zero");
  json sharded = withDistributedOptimizer(model);
  exec::RunResult first = trainFrom(sharded, 2, dir);
  ASSERT_EQ(first.exitCode, 0) << first.error;
  for (size_t s = 0; s < 2; ++s)
    EXPECT_LE(relative(first.steps[s].loss, whole.steps[s].loss), 1e-5);
  json dp2 = sharded;
  dp2["modules"][1]["parallel"]["dp"] = 2;
  json dp1 = sharded;
  dp1["modules"][1]["parallel"]["dp"] = 1;
  for (const auto &[name, other] :
       {std::pair<const char *, json>{"sharded dp4", sharded},
        {"sharded dp2", dp2},
        {"dp1", dp1},
        {"replicated dp4", model}}) {
    SCOPED_TRACE(name);
    exec::RunResult moved = trainFrom(other, 4, "", dir);
    expectResumedAtStep3(moved, whole);
  }
  std::filesystem::remove_all(dir);
}

/// docs/model.md "Context parallelism": cp_comm "ring" computes what
/// "all_gather" does, only the order of the softmax's sums differing
/// (losses and gradient norms within 1e-6 in fp32; bf16 rounds each
/// block's output once more, within bf16's 1e-2), its transfers blocking or
/// on a channel.
using RingCase = std::tuple<const char *, json, double>;
void expectRingEqualsAllGather(const std::vector<RingCase> &cases) {
  for (const auto &[name, model, tolerance] : cases) {
    SCOPED_TRACE(name);
    json gathered = model;
    gathered["modules"][1]["parallel"]["cp_comm"] = "all_gather";
    exec::RunOptions options;
    options.steps = 3;
    options.timeoutSeconds = 120;
    options.overlap = false;
    exec::RunResult all = exec::runLocal(planOf(gathered), options);
    ASSERT_EQ(all.exitCode, 0) << all.error;
    for (bool channel : {false, true}) {
      SCOPED_TRACE(channel ? "on a channel" : "blocking");
      options.overlap = channel;
      exec::RunResult ring = exec::runLocal(planOf(model), options);
      ASSERT_EQ(ring.exitCode, 0) << ring.error;
      ASSERT_EQ(ring.steps.size(), 3u);
      for (size_t s = 0; s < 3; ++s) {
        EXPECT_LE(relative(ring.steps[s].loss, all.steps[s].loss), tolerance)
            << "step " << s + 1;
        EXPECT_LE(relative(ring.steps[s].gradNorm, all.steps[s].gradNorm),
                  tolerance)
            << "step " << s + 1;
      }
    }
  }
}

/// With SP over cp 2, and GQA over cp 4 (the ring's threads and channel:
/// these stay under TSan).
TEST(RingCp, EqualsAllGather) {
  json cp4 = test::llama3Like(example("lm-cp2-sp.json"), 2);
  cp4["modules"][1]["parallel"]["cp"] = 4;
  expectRingEqualsAllGather({{"cp2 with sp", example("lm-cp2-sp.json"), 1e-6},
                             {"cp4, gqa", cp4, 1e-6}});
}

/// THD packing over CP x DP, and bf16 (other arithmetic on the same
/// threads).
TEST(RingCp, EqualsAllGatherPackedAndInBf16) {
  json bf16 = example("lm-cp2-sp.json");
  bf16["precision"] = "bf16";
  expectRingEqualsAllGather(
      {{"thd, cp2 x dp2", example("packed-thd.json"), 1e-6},
       {"bf16", bf16, 1e-2}});
}

/// Long sequences: a text-only model of 4096 tokens a sample over cp 4,
/// where a layer's gathered keys and values outweigh the rest: the ring's
/// largest rank keeps less than all_gather's.
TEST(RingCp, KeepsLessThanAllGather) {
  json longText = json::parse(R"({
    "version": 1, "name": "long", "seed": 5,
    "batch": {"micro_batch_size": 1, "num_microbatches": 1,
              "seq_length": 4096},
    "modules": [{"name": "language", "kind": "language",
                 "arch": {"vocab_size": 256, "hidden_size": 64,
                          "num_layers": 4, "num_heads": 2,
                          "ffn_hidden_size": 128},
                 "parallel": {"cp": 4}}],
    "data": {"source": "synthetic", "text_only_fraction": 1.0},
    "train": {"steps": 1}})");
  exec::RunOptions options;
  options.steps = 1;
  options.timeoutSeconds = 120;
  exec::RunResult ring = exec::runLocal(planOf(longText), options);
  longText["modules"][0]["parallel"]["cp_comm"] = "all_gather";
  exec::RunResult all = exec::runLocal(planOf(longText), options);
  ASSERT_EQ(ring.exitCode, 0) << ring.error;
  ASSERT_EQ(all.exitCode, 0) << all.error;
  EXPECT_LE(relative(ring.steps[0].loss, all.steps[0].loss), 1e-6);
  EXPECT_LT(ring.steps[0].peakBytes, all.steps[0].peakBytes);
}

/// docs/data.md "Order": the samples of a step depend on the seed, the
/// global batch and the step only. Three layouts, each with its global
/// batch of 32 split as 8 x 4 and 4 x 8, train as the 8 x 4 run;
/// a run saved in one split resumes in the other on the same stream.
TEST(DataOrder, LayoutsAndSplitsTrainOnTheSameSamples) {
  json model = example("vlm-fan-in.json"); // micro batch 8, 4 microbatches
  auto split = [](json m, int64_t micro) {
    m["batch"]["micro_batch_size"] = micro;
    m["batch"]["num_microbatches"] = 32 / micro;
    return m;
  };
  exec::RunResult whole = trainFrom(model, 4);
  ASSERT_EQ(whole.exitCode, 0) << whole.error;
  json dp4 = model;
  dp4["modules"][1]["parallel"] = {{"dp", 4}, {"rank_offset", 4}};
  json colocated = model;
  colocated["modules"][0]["parallel"] = {{"tp", 2}, {"dp", 4}};
  colocated["modules"][1]["parallel"] = {{"tp", 4}, {"dp", 2}};
  for (const auto &[name, layout] :
       {std::pair<const char *, json>{"fan-in", model},
        {"language dp4", dp4},
        {"colocated", colocated}})
    for (int64_t micro : {8, 4}) {
      SCOPED_TRACE(std::string(name) + ", micro batch " +
                   std::to_string(micro));
      exec::RunResult run = trainFrom(split(layout, micro), 2);
      ASSERT_EQ(run.exitCode, 0) << run.error;
      ASSERT_EQ(run.steps.size(), 2u);
      for (size_t s = 0; s < 2; ++s) {
        EXPECT_EQ(run.steps[s].tokens, whole.steps[s].tokens);
        EXPECT_LE(relative(run.steps[s].loss, whole.steps[s].loss), 1e-5)
            << "step " << s + 1;
        EXPECT_LE(relative(run.steps[s].gradNorm, whole.steps[s].gradNorm),
                  1e-5)
            << "step " << s + 1;
      }
    }
  std::string dir = scratchDir("order");
  ASSERT_EQ(trainFrom(model, 2, dir).exitCode, 0);
  exec::RunResult resumed = trainFrom(split(model, 4), 4, "", dir);
  ASSERT_EQ(resumed.exitCode, 0) << resumed.error;
  ASSERT_EQ(resumed.steps.size(), 2u);
  for (size_t s = 0; s < 2; ++s)
    EXPECT_LE(relative(resumed.steps[s].loss, whole.steps[s + 2].loss), 1e-5)
        << "step " << s + 3;
  std::filesystem::remove_all(dir);
}

/// A tied embedding across pipeline stages is one tensor in a checkpoint
/// (the first stage writes it): saved at PP2, resumed at PP2 bit for bit
/// and with the language model on one stage (DP4) within 1e-5.
TEST(Checkpoint, ATiedEmbeddingAcrossStagesIsSavedOnce) {
  json model = example("vlm-fan-in.json");
  model["modules"][1]["arch"]["tie_embeddings"] = true;
  exec::RunResult whole = trainFrom(model, 3);
  ASSERT_EQ(whole.exitCode, 0) << whole.error;
  std::string dir = scratchDir("tied");
  ASSERT_EQ(trainFrom(model, 2, dir).exitCode, 0);
  json dp4 = model;
  dp4["modules"][1]["parallel"] = {{"dp", 4}, {"rank_offset", 4}};
  for (const json &other : {model, dp4}) {
    exec::RunResult resumed = trainFrom(other, 3, "", dir);
    ASSERT_EQ(resumed.exitCode, 0) << resumed.error;
    ASSERT_EQ(resumed.steps.size(), 1u);
    EXPECT_LE(relative(resumed.steps[0].loss, whole.steps[2].loss), 1e-5);
    EXPECT_LE(relative(resumed.steps[0].gradNorm, whole.steps[2].gradNorm),
              1e-5);
  }
  EXPECT_EQ(trainFrom(model, 3, "", dir).steps[0].loss, whole.steps[2].loss);
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, AnotherModelSeedDigestOrModulesIsRefused) {
  json model = example("vlm-fan-in.json");
  std::string dir = scratchDir("identity");
  ASSERT_EQ(trainFrom(model, 1, dir).exitCode, 0);
  auto openAs = [&](const json &as, bool otherRun, std::string &error) {
    ParseResult parsed = parseModelConfig(as.dump(), "model.json");
    EXPECT_TRUE(parsed.config);
    return parsed.config &&
           exec::openCheckpoint(dir, *parsed.config, error, otherRun);
  };
  std::string error;
  EXPECT_TRUE(openAs(model, false, error)) << error;
  json renamed = model;
  renamed["name"] = "other";
  EXPECT_FALSE(openAs(renamed, false, error));
  EXPECT_NE(error.find("state.json: /model: error: the checkpoint is of model "
                       "'vlm-fan-in', this is 'other'; to start from another "
                       "run's weights on purpose (fine-tuning), pass "
                       "--load-other-run"),
            std::string::npos)
      << error;
  EXPECT_TRUE(openAs(renamed, true, error)) << error;
  json reseeded = model;
  reseeded["seed"] = 7;
  EXPECT_FALSE(openAs(reseeded, false, error));
  EXPECT_NE(error.find("/seed: error: the checkpoint was trained with seed"),
            std::string::npos)
      << error;
  EXPECT_TRUE(openAs(reseeded, true, error)) << error;
  // An edited state: the digest or the modules of another model; a tensor
  // named twice in a header. Refused even for another run.
  const std::string state = dir + "/step-1/state.json";
  json original = json::parse(std::ifstream(state));
  auto rewrite = [&](const json &s) { std::ofstream(state) << s.dump(2); };
  json edited = original;
  edited["architecture_digest"] = "0123";
  rewrite(edited);
  EXPECT_FALSE(openAs(model, true, error));
  EXPECT_NE(error.find("/architecture_digest: error: '0123' is not this "
                       "model's"),
            std::string::npos)
      << error;
  edited = original;
  edited["layout"]["modules"][0]["name"] = "audio";
  rewrite(edited);
  EXPECT_FALSE(openAs(model, true, error));
  EXPECT_NE(error.find("/layout/modules: error: the checkpoint's modules "
                       "(audio, language) are not this model's"),
            std::string::npos)
      << error;
  rewrite(original);
  EXPECT_TRUE(openAs(model, false, error)) << error;
  const std::string file = dir + "/step-1/model.safetensors";
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Rename the header's second tensor to the first one's name, same length.
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i)
    length = (length << 8) | static_cast<unsigned char>(bytes[i]);
  json header = json::parse(bytes.substr(8, length));
  std::vector<std::string> names;
  for (auto &[key, value] : header.items())
    if (key != "__metadata__")
      names.push_back(key);
  ASSERT_GE(names.size(), 2u);
  std::string twin;
  for (const std::string &a : names)
    for (const std::string &b : names)
      if (twin.empty() && a != b && a.size() == b.size()) {
        size_t at = bytes.find("\"" + b + "\"", 8);
        ASSERT_NE(at, std::string::npos);
        bytes.replace(at + 1, b.size(), a);
        twin = a;
      }
  ASSERT_FALSE(twin.empty());
  std::ofstream(file, std::ios::binary) << bytes;
  EXPECT_FALSE(openAs(model, true, error));
  EXPECT_NE(error.find("the key '" + twin + "' appears twice"),
            std::string::npos)
      << error;
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, AnotherArchitectureIsRefusedNamingTheTensor) {
  json model = example("vlm-fan-in.json");
  std::string dir = scratchDir("architecture");
  ASSERT_EQ(trainFrom(model, 1, dir).exitCode, 0);
  json wider = model;
  wider["modules"][1]["arch"]["ffn_hidden_size"] = 256;
  std::string error;
  ParseResult parsed = parseModelConfig(wider.dump(), "model.json");
  ASSERT_TRUE(parsed.config);
  EXPECT_FALSE(exec::openCheckpoint(dir, *parsed.config, error));
  EXPECT_NE(error.find("model.safetensors: error: tensor "
                       "'language.layers.0.gate' has shape [128, 512] in the "
                       "checkpoint but [128, 256] in this model"),
            std::string::npos)
      << error;
  json deeper = model;
  deeper["modules"][1]["arch"]["num_layers"] = 6;
  deeper["modules"][1]["parallel"]["pp"] = 2;
  parsed = parseModelConfig(deeper.dump(), "model.json");
  ASSERT_TRUE(parsed.config);
  EXPECT_FALSE(exec::openCheckpoint(dir, *parsed.config, error));
  EXPECT_NE(error.find("tensor 'language.layers.4.attn_norm' is missing"),
            std::string::npos)
      << error;
  std::filesystem::remove_all(dir);
}

TEST(Runtime, LimitsAreInputErrors) {
  // Message tags hold the microbatch: more than the runtime addresses is
  // refused by the compiler, and by the runtime before any rank starts
  // (exit 1, the pointer, the fix) should a plan claim more.
  json model = example("vlm-fan-out.json");
  model["batch"]["num_microbatches"] = kMaxMicrobatches + 1;
  ParseResult parsed = parseModelConfig(model.dump(), "model.json");
  ASSERT_FALSE(parsed.config.has_value());
  EXPECT_EQ(parsed.diagnostics[0].pointer, "/batch/num_microbatches");
  Plan plan = planOf(example("vlm-fan-out.json"));
  plan.topology.microbatches = kMaxMicrobatches + 1;
  exec::RunOptions options;
  options.steps = 1;
  exec::RunResult result = exec::runLocal(plan, options);
  EXPECT_EQ(result.exitCode, 1);
  EXPECT_NE(result.error.find("/model/batch/num_microbatches: error: 16385 "
                              "microbatches exceed"),
            std::string::npos)
      << result.error;
}

/// Two steps of `plan` on the local backend with `options`; the run must
/// succeed.
void runTwoSteps(const Plan &plan, exec::RunOptions options,
                 exec::RunResult &run) {
  options.steps = 2;
  options.timeoutSeconds = 120;
  run = exec::runLocal(plan, options);
  ASSERT_EQ(run.exitCode, 0) << run.error;
  ASSERT_EQ(run.steps.size(), 2u);
}

/// The same losses and gradient norms, bit for bit, step by step; the
/// norms within `normTolerance` (relative) when it is not 0.
void expectSameSteps(const exec::RunResult &a, const exec::RunResult &b,
                     double normTolerance = 0) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_EQ(a.steps[s].loss, b.steps[s].loss) << "step " << s + 1;
    if (normTolerance > 0) {
      EXPECT_LE(relative(a.steps[s].gradNorm, b.steps[s].gradNorm),
                normTolerance)
          << "step " << s + 1;
    } else {
      EXPECT_EQ(a.steps[s].gradNorm, b.steps[s].gradNorm) << "step " << s + 1;
    }
  }
}

/// docs/gpu.md overlap: the DP x CP gradient reduction in small buckets
/// (the experts' over their edp groups), posted during the backward on
/// each rank's channels, and pipeline and
/// bridge sends posted ahead, train bit-identically to blocking messages
/// and one all-reduce per module after the backward; the trace shows
/// buckets and sends on the comm stream, buckets the backward posted before
/// their module's reduce_grads instruction.
TEST(Overlap, BucketsAndSendsAheadTrainBitIdentically) {
  for (const test::Layout &layout : test::equivalenceLayouts()) {
    static const std::set<std::string> chosen = {
        "FanInEncoderDp4ToLanguageTp2Pp2WithSp",
        "ContextParallelAcrossABridgeWithSp", "Colocated",
        "ColocatedLanguagePp2", "PackedThdWithCp2",
        // the experts' buckets over edp groups of two, and of one (sharded:
        // DistributedOptimizer.TrainsAsTheReplicatedOneAndKeepsLess)
        "MoeEp2FanOutDp4", "MoeEp4FanOutDp4Shared",
        // over edp groups spanning TP ranks (etp < tp)
        "MoeEtp1Ep2ColocatedTp4Dp2Shared"};
    if (!chosen.count(layout.name))
      continue;
    SCOPED_TRACE(layout.name);
    Plan plan = planOf(layout.model);
    exec::RunOptions options;
    options.overlap = false;
    exec::RunResult whole, buckets;
    ASSERT_NO_FATAL_FAILURE(runTwoSteps(plan, options, whole));
    options.overlap = true;
    options.gradBucketBytes = 2048;
    options.collectTrace = true;
    ASSERT_NO_FATAL_FAILURE(runTwoSteps(plan, options, buckets));
    expectSameSteps(buckets, whole);
    // Sends on the comm stream, one per send instruction; buckets posted
    // by the backward (not by reduce_grads), read from the trace's args
    // (when each started depends on the machine's load; what posted it
    // does not).
    size_t commEvents = 0, sends = 0, sendInstructions = 0, ahead = 0;
    auto count = [](const std::string &name) {
      size_t n = 0;
      for (size_t at = name.find("send"); at != std::string::npos;
           at = name.find("send", at + 1))
        ++n;
      return n;
    };
    for (const exec::TraceEvent &e : buckets.trace) {
      if (e.stream != exec::kCommStream) {
        sendInstructions += count(e.name);
        continue;
      }
      ++commEvents;
      if (count(e.name) > 0) {
        sends += count(e.name);
        continue;
      }
      EXPECT_EQ(e.name.rfind("grad ", 0), 0u) << e.name;
      ahead += e.args.find("\"posted_ahead\":true") != std::string::npos;
    }
    EXPECT_GT(commEvents, 0u);
    // Every send went out ahead (also those fused with receives).
    EXPECT_EQ(sends, sendInstructions);
    EXPECT_GT(ahead, 0u) << "the backward posted no bucket";
    std::string json = exec::traceJson(buckets.trace);
    EXPECT_NE(json.find("\"name\":\"comm\""), std::string::npos);
    // The CPU times no kernels of its own; a GPU's (Device::timeKernels)
    // get a stream of their own.
    EXPECT_EQ(json.find("\"name\":\"device kernels\""), std::string::npos);
    std::vector<exec::TraceEvent> withKernels = buckets.trace;
    withKernels.push_back(
        {0, "gemm_bf16 64x64x64 NN", 10.0, 2.5, "", exec::kDeviceStream});
    json = exec::traceJson(withKernels);
    EXPECT_NE(json.find("\"name\":\"device kernels\""), std::string::npos);
    EXPECT_NE(json.find("\"cat\":\"kernel\""), std::string::npos);
  }
}

/// Two steps of `plan`; the measured peak of its largest rank against the
/// memory plan's estimate of that rank, within [0.5, 1.25]. Returns the
/// measured peak beyond that rank's parameters, gradients and AdamW state
/// (what the activations took).
int64_t expectPeakNearEstimate(const Plan &plan) {
  exec::RunResult run;
  runTwoSteps(plan, exec::RunOptions(), run);
  if (run.steps.empty())
    return 0;
  const exec::StepMetrics &last = run.steps.back();
  EXPECT_GE(last.peakRank, 0);
  EXPECT_LT(last.peakRank, plan.topology.worldSize);
  if (last.peakRank < 0 || last.peakRank >= plan.topology.worldSize)
    return 0;
  std::vector<RankMemory> estimate = memoryPlan(plan.topology, plan.config);
  double expected =
      double(estimate[static_cast<size_t>(last.peakRank)].totalBytes);
  double ratio = double(last.peakBytes) / expected;
  EXPECT_GE(ratio, 0.5) << last.peakBytes << " bytes measured on rank "
                        << last.peakRank << ", " << expected << " estimated";
  EXPECT_LE(ratio, 1.25) << last.peakBytes << " bytes measured on rank "
                         << last.peakRank << ", " << expected << " estimated";
  const RankMemory &r = estimate[static_cast<size_t>(last.peakRank)];
  return last.peakBytes - r.paramBytes - r.gradBytes - r.optimizerBytes;
}

/// docs/tune.md: the memory plan's estimate of a rank against what its device
/// really held at its peak (every allocation, CPU size classes included):
/// for every layout, the largest rank's measured peak lies within
/// [0.5, 1.25] of its estimate, and the metrics name that rank.
TEST(MemoryPlan, EstimateBoundsTheMeasuredPeakOfEveryLayout) {
  for (const test::Layout &layout : test::equivalenceLayouts()) {
    SCOPED_TRACE(layout.name);
    expectPeakNearEstimate(planOf(layout.model));
  }
}

/// precision "bf16" keeps activations as bfloat16 between forward and
/// backward: the peak beyond the parameters and their state falls well
/// below fp32's, and the estimate, which counts them at two bytes, still
/// bounds the peak. (lm-cp2-sp.json: 6.93e6 bytes against 8.41e6, 0.82,
/// since a layer's backward frees its MLP's gradients before the
/// attention's, which lowered fp32's peak from 8.73e6 and left bf16's.)
TEST(MemoryPlan, FrozenParametersKeepNoGradientsOrMoments) {
  // LLaVA stage 1: the language model and the encoder's body frozen. The
  // estimate still bounds the measured peak, the frozen ranks hold no
  // moments and one scratch gradient, and the measured peak drops.
  json full = example("vlm-fan-in.json");
  json stageOne = full;
  stageOne["modules"][0]["freeze"] = {"patch", "layers"};
  stageOne["modules"][1]["freeze"] = true;
  Plan a = planOf(full), b = planOf(stageOne);
  std::vector<RankMemory> ea = memoryPlan(a.topology, a.config);
  std::vector<RankMemory> eb = memoryPlan(b.topology, b.config);
  for (size_t r = 0; r < ea.size(); ++r) {
    EXPECT_LT(eb[r].gradBytes, ea[r].gradBytes) << "rank " << r;
    EXPECT_LT(eb[r].optimizerBytes, ea[r].optimizerBytes) << "rank " << r;
    EXPECT_EQ(eb[r].paramBytes, ea[r].paramBytes) << "rank " << r;
  }
  EXPECT_EQ(eb[4].optimizerBytes, 0); // a language rank: all frozen
  exec::RunResult runA, runB;
  runTwoSteps(a, exec::RunOptions(), runA);
  expectPeakNearEstimate(b);
  runTwoSteps(b, exec::RunOptions(), runB);
  ASSERT_FALSE(runA.steps.empty());
  ASSERT_FALSE(runB.steps.empty());
  EXPECT_LT(runB.steps.back().peakBytes, runA.steps.back().peakBytes);
}

TEST(MemoryPlan, Bf16KeepsActivationsInHalfTheBytes) {
  for (const char *name : {"vlm-fan-in.json", "lm-cp2-sp.json"}) {
    SCOPED_TRACE(name);
    json model = example(name);
    int64_t fp32 = expectPeakNearEstimate(planOf(model));
    model["precision"] = "bf16";
    int64_t bf16 = expectPeakNearEstimate(planOf(model));
    EXPECT_LT(double(bf16), 0.85 * double(fp32))
        << "bf16 activations' peak " << bf16 << " bytes, fp32 " << fp32;
  }
}

/// docs/gpu.md nccl: NCCL pairs a send with a receive by posting order per
/// peer, not by tag. Every layout runs with the local backend pairing
/// messages that way (each batch in canonical order, a differing tag is an
/// error), with overlapped buckets on their own channels, and trains bit-
/// identically to tag matching.
TEST(NcclOrder, EveryLayoutPairsItsMessagesInPostingOrder) {
  for (const test::Layout &layout : test::equivalenceLayouts()) {
    SCOPED_TRACE(layout.name);
    Plan plan = planOf(layout.model);
    exec::RunOptions options;
    exec::RunResult byTag, inOrder;
    ASSERT_NO_FATAL_FAILURE(runTwoSteps(plan, options, byTag));
    options.matching = comm::Matching::InPostingOrder;
    options.overlap = true;
    options.gradBucketBytes = 4096;
    ASSERT_NO_FATAL_FAILURE(runTwoSteps(plan, options, inOrder));
    // The distributed optimizer's norm sums each member's pieces, which
    // the buckets cut: in another order than without them.
    expectSameSteps(inOrder, byTag,
                    layout.name.find("Distributed") != std::string::npos ? 1e-12
                                                                         : 0);
  }
}

TEST(Runtime, InjectedFaultStopsEveryRank) {
  exec::RunOptions options;
  options.steps = 4;
  options.timeoutSeconds = 30;
  options.fault = std::make_pair(int64_t(6), int64_t(3));
  exec::RunResult result =
      exec::runLocal(planOf(example("vlm-fan-in.json")), options);
  EXPECT_EQ(result.exitCode, 2);
  // Step 1 completed before the fault; step 2 may or may not be reported
  // (rank 0 can still be finishing its last collective of step 2 when rank
  // 6 fails); step 3 never completes.
  EXPECT_GE(result.steps.size(), 1u);
  EXPECT_LE(result.steps.size(), 2u);
  EXPECT_NE(result.error.find("rank 6 failed at the start of step 3"),
            std::string::npos)
      << result.error;
}

} // namespace

/// train.grad_reduce_dtype "bf16" (docs/model.md "Gradient reduction in
/// bf16"): every rank rounds its gradients to bf16 before the data-parallel
/// sum and the sums after it, so a layout trains as its one-rank reference
/// (which rounds its whole gradient once) within 1e-3, the members' partial
/// gradients being rounded apart (measured: at most 3e-5 in the gradient
/// norm over 3 steps), whether the sum is one collective, buckets posted
/// by the backward, or reduce-scattered pieces of the distributed
/// optimizer; and not as the fp32 reduction does.
TEST(GradReduceBf16, LayoutsMatchTheirReferenceAndDifferFromFp32) {
  struct Case {
    const char *name;
    json model;
    int64_t world;
    bool buckets;
  };
  json sharded = example("vlm-fan-in.json");
  for (json &module : sharded["modules"])
    module["distributed_optimizer"] = true;
  std::vector<Case> cases = {
      {"fan-in", example("vlm-fan-in.json"), 8, false},
      {"cp2", example("lm-cp2-sp.json"), 6, false},
      {"fan-in buckets", example("vlm-fan-in.json"), 8, true},
      {"fan-in sharded", sharded, 8, false}};
  for (Case &c : cases) {
    SCOPED_TRACE(c.name);
    c.model["train"]["grad_reduce_dtype"] = "bf16";
    exec::RunOptions options;
    if (c.buckets) {
      options.overlap = true;
      options.gradBucketBytes = 2048;
    }
    expectMatchesReference(c.model, c.world, 1e-3, options);
  }
  // Not the fp32 reduction: the gradient norms differ (in the last digits).
  json model = example("vlm-fan-in.json");
  exec::RunOptions options;
  options.steps = 2;
  options.timeoutSeconds = 120;
  exec::RunResult fp32 = exec::runLocal(planOf(model), options);
  model["train"]["grad_reduce_dtype"] = "bf16";
  exec::RunResult bf16 = exec::runLocal(planOf(model), options);
  ASSERT_EQ(fp32.exitCode, 0) << fp32.error;
  ASSERT_EQ(bf16.exitCode, 0) << bf16.error;
  ASSERT_EQ(bf16.steps.size(), 2u);
  EXPECT_NE(bf16.steps[0].gradNorm, fp32.steps[0].gradNorm);
  EXPECT_LE(relative(bf16.steps[0].gradNorm, fp32.steps[0].gradNorm), 1e-2);
  EXPECT_LE(relative(bf16.steps[1].loss, fp32.steps[1].loss), 1e-2);
  // Buckets round each range before they post it: bit-identical to the
  // whole buffer rounded and summed at reduce_grads.
  exec::RunResult whole, buckets;
  options.overlap = false;
  ASSERT_NO_FATAL_FAILURE(runTwoSteps(planOf(model), options, whole));
  options.overlap = true;
  options.gradBucketBytes = 2048;
  ASSERT_NO_FATAL_FAILURE(runTwoSteps(planOf(model), options, buckets));
  expectSameSteps(buckets, whole);
}
