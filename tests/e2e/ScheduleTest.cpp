//===- ScheduleTest.cpp - Zero bubble and interleaved train as 1F1B does --===//
//
// docs/plan.md "Zero bubble": the split backward's weight gradients
// accumulate in the order a whole backward gives them, so a zero-bubble
// step is 1F1B's, bit for bit, whatever else the layout does (recomputed
// layers, bf16, a head tied across stages, the distributed optimizer,
// gradient buckets started by the weight gradients' notices).
// docs/plan.md "Interleaved 1F1B": each chunk's parameters accumulate the
// microbatches in order, so the losses are 1F1B's bit for bit (the norm's
// double sum goes through other partial sums: within 1e-12).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Executor.h"
#include "tests/e2e/Layouts.h"

#include <gtest/gtest.h>

using namespace mimo;
using nlohmann::json;

namespace {

using test::example;
using test::planOf;

json withSchedule(json model, const char *schedule) {
  model["batch"]["schedule"] = schedule;
  return model;
}

TEST(ZeroBubble, TrainsBitForBitAsOneFOneB) {
  // An encoder stage and four language stages, the encoder recomputing
  // its activations, more microbatches than stages (steady slots that run
  // weight gradients after their exchange).
  json pipeline = example("vlm-fan-in.json");
  pipeline["modules"][1]["parallel"] = {{"pp", 4}, {"rank_offset", 4}};
  pipeline["modules"][0]["recompute"] = "selective";
  pipeline["batch"]["num_microbatches"] = 8;
  pipeline["batch"]["micro_batch_size"] = 4;
  // Colocated, bf16, the head tied across pp2 with SP, the language stages
  // recomputing whole, and the optimizer sharded.
  json colocated = example("vlm-colocated-pp2.json");
  colocated["precision"] = "bf16";
  colocated["modules"][1]["arch"]["tie_embeddings"] = true;
  colocated["modules"][1]["recompute"] = "full";
  for (json &module : colocated["modules"])
    module["distributed_optimizer"] = true;
  // Two encoder stages feeding two language stages under TP2 + SP.
  json deep = example("vlm-fan-out.json");
  deep["modules"][0]["arch"]["num_layers"] = 4;
  deep["modules"][0]["parallel"] = {{"pp", 2}, {"dp", 2}};
  deep["modules"][1]["parallel"] = {
      {"tp", 2}, {"pp", 2}, {"sequence_parallel", true}, {"rank_offset", 4}};
  for (const auto &[name, model] :
       {std::pair<const char *, json>{"encoder + language pp4", pipeline},
        {"colocated bf16, tied, recomputed, sharded", colocated},
        {"encoder pp2 + language tp2 pp2 sp", deep}}) {
    SCOPED_TRACE(name);
    for (bool buckets : {false, true}) {
      SCOPED_TRACE(buckets ? "buckets" : "one collective");
      exec::RunOptions options;
      options.steps = 3;
      options.timeoutSeconds = 120;
      options.overlap = buckets;
      options.gradBucketBytes = 2048;
      Plan zbPlan = planOf(withSchedule(model, "zero_bubble"));
      size_t weightGrads = 0;
      for (const Program &p : zbPlan.programs)
        for (const Instr &in : p.instrs)
          weightGrads += in.op == InstrOp::WeightGrad;
      ASSERT_GT(weightGrads, 0u);
      exec::RunResult oneF = exec::runLocal(planOf(model), options);
      ASSERT_EQ(oneF.exitCode, 0) << oneF.error;
      exec::RunResult zb = exec::runLocal(zbPlan, options);
      ASSERT_EQ(zb.exitCode, 0) << zb.error;
      ASSERT_EQ(zb.steps.size(), 3u);
      for (size_t s = 0; s < 3; ++s) {
        EXPECT_EQ(zb.steps[s].loss, oneF.steps[s].loss) << "step " << s + 1;
        EXPECT_EQ(zb.steps[s].gradNorm, oneF.steps[s].gradNorm)
            << "step " << s + 1;
      }
    }
  }
}

TEST(Interleaved, TrainsAsOneFOneB) {
  // Behind an encoder, four language stages of two chunks; colocated, bf16,
  // the head tied across the first and last virtual stages, the language
  // recomputing whole and every optimizer sharded.
  json pipeline = example("vlm-fan-in.json");
  pipeline["modules"][1]["parallel"] = {{"pp", 4}, {"rank_offset", 4}};
  pipeline["modules"][1]["arch"]["num_layers"] = 8;
  json colocated = example("vlm-colocated-pp2.json");
  colocated["precision"] = "bf16";
  colocated["modules"][1]["arch"]["tie_embeddings"] = true;
  colocated["modules"][1]["recompute"] = "full";
  for (json &module : colocated["modules"])
    module["distributed_optimizer"] = true;
  // Two stages of four chunks (tags of chunks 0-3), TP2 with SP.
  json deep = example("vlm-fan-in.json");
  deep["modules"][1]["arch"]["num_layers"] = 8;
  for (const auto &[name, model, chunks] :
       {std::tuple<const char *, json, int>{"encoder + language pp4 x v2",
                                            pipeline, 2},
        {"colocated bf16, tied, recomputed, sharded", colocated, 2},
        {"language tp2 pp2 x v4", deep, 4}}) {
    SCOPED_TRACE(name);
    json interleaved = withSchedule(model, "interleaved");
    interleaved["modules"][1]["parallel"]["virtual_stages"] = chunks;
    for (bool buckets : {false, true}) {
      SCOPED_TRACE(buckets ? "buckets" : "one collective");
      exec::RunOptions options;
      options.steps = 3;
      options.timeoutSeconds = 120;
      options.overlap = buckets;
      options.gradBucketBytes = 2048;
      exec::RunResult oneF = exec::runLocal(planOf(model), options);
      ASSERT_EQ(oneF.exitCode, 0) << oneF.error;
      exec::RunResult chunked = exec::runLocal(planOf(interleaved), options);
      ASSERT_EQ(chunked.exitCode, 0) << chunked.error;
      ASSERT_EQ(chunked.steps.size(), 3u);
      for (size_t s = 0; s < 3; ++s) {
        EXPECT_EQ(chunked.steps[s].loss, oneF.steps[s].loss)
            << "step " << s + 1;
        EXPECT_NEAR(chunked.steps[s].gradNorm, oneF.steps[s].gradNorm,
                    1e-12 * oneF.steps[s].gradNorm)
            << "step " << s + 1;
      }
    }
  }
}

} // namespace
