//===- TrainingTest.cpp - The training loop's formulas and settings -------===//
//
// SPEC §13: the learning-rate schedule against a table computed by hand
// from Megatron's warmup + decay semantics, and the training and data keys
// of model.json (defaults, round trip, errors with their pointers).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/LearningRate.h"
#include "runtime/core/ModelConfig.h"
#include "tests/unit/TestModels.h"

#include <gtest/gtest.h>

using namespace mimo;
using nlohmann::json;

namespace {

TrainConfig schedule(const std::string &decay, int64_t warmup, int64_t steps) {
  TrainConfig t;
  t.lr = 1e-3;
  t.lrSchedule.warmupSteps = warmup;
  t.lrSchedule.decay = decay;
  t.lrSchedule.decaySteps = steps;
  t.lrSchedule.minLr = 1e-4;
  return t;
}

TEST(LearningRate, MegatronWarmupThenDecayTable) {
  struct Row {
    const char *decay;
    int64_t warmup, decaySteps, step;
    double lr;
  };
  const Row table[] = {
      // linear warmup over 2 steps, from step 1
      {"cosine", 2, 4, 1, 5e-4},
      {"cosine", 2, 4, 2, 1e-3},
      // cosine over 4 steps: min + (lr - min) (1 + cos(pi x)) / 2
      {"cosine", 2, 4, 3, 1e-4 + 9e-4 * 0.8535533905932737},
      {"cosine", 2, 4, 4, 5.5e-4},
      {"cosine", 2, 4, 5, 1e-4 + 9e-4 * 0.14644660940672627},
      {"cosine", 2, 4, 6, 1e-4},
      {"cosine", 2, 4, 100, 1e-4},
      // linear: min + (lr - min) (1 - x)
      {"linear", 2, 4, 3, 7.75e-4},
      {"linear", 2, 4, 5, 3.25e-4},
      {"linear", 2, 4, 6, 1e-4},
      {"linear", 2, 4, 7, 1e-4},
      // constant after the warmup
      {"constant", 2, 0, 1, 5e-4},
      {"constant", 2, 0, 50, 1e-3},
      {"constant", 0, 0, 1, 1e-3},
      // no warmup: the decay starts at step 1
      {"cosine", 0, 2, 1, 5.5e-4},
      {"cosine", 0, 2, 2, 1e-4},
  };
  for (const Row &row : table)
    EXPECT_NEAR(learningRate(schedule(row.decay, row.warmup, row.decaySteps),
                             row.step),
                row.lr, 1e-15)
        << row.decay << " W=" << row.warmup << " D=" << row.decaySteps
        << " step " << row.step;
}

ParseResult parse(const json &model) {
  return parseModelConfig(model.dump(), "model.json");
}

std::string firstError(const ParseResult &r) {
  return r.diagnostics.empty()
             ? ""
             : r.diagnostics[0].pointer + ": " + r.diagnostics[0].message;
}

TEST(TrainingConfig, ScheduleEvalAndDataKeysParseAndRoundTrip) {
  json model = test::baseModel();
  model["train"]["lr_schedule"] = {{"warmup_steps", 3},
                                   {"decay", "cosine"},
                                   {"decay_steps", 20},
                                   {"min_lr", 1e-5}};
  model["train"]["eval_every"] = 5;
  model["train"]["eval_steps"] = 2;
  ParseResult r = parse(model);
  ASSERT_TRUE(r.config) << firstError(r);
  EXPECT_EQ(r.config->train.lrSchedule.warmupSteps, 3);
  EXPECT_EQ(r.config->train.lrSchedule.decay, "cosine");
  EXPECT_EQ(r.config->train.evalEvery, 5);
  EXPECT_EQ(r.config->train.evalSteps, 2);
  ParseResult again = parse(toJson(*r.config));
  ASSERT_TRUE(again.config) << firstError(again);
  EXPECT_EQ(toJson(*again.config), toJson(*r.config));
  // Defaults: no warmup, constant, no evaluation.
  json bare = test::baseModel();
  bare["train"].erase("lr_schedule");
  ParseResult plain = parse(bare);
  ASSERT_TRUE(plain.config);
  EXPECT_EQ(plain.config->train.lrSchedule.decay, "constant");
  EXPECT_EQ(plain.config->train.evalEvery, 0);
}

TEST(TrainingConfig, BadScheduleAndDataKeysNameTheirPointer) {
  json cosine = test::baseModel();
  cosine["train"]["lr_schedule"] = {{"decay", "cosine"}};
  EXPECT_NE(firstError(parse(cosine)).find("/train/lr_schedule/decay_steps: "
                                           "expected decay_steps >= 1"),
            std::string::npos)
      << firstError(parse(cosine));
  json high = test::baseModel();
  high["train"]["lr_schedule"] = {{"min_lr", 1.0}};
  EXPECT_NE(firstError(parse(high)).find("/train/lr_schedule/min_lr"),
            std::string::npos);
  json typo = test::baseModel();
  typo["train"]["lr_schedule"] = {{"warmup", 3}};
  EXPECT_NE(firstError(parse(typo)).find("did you mean 'warmup_steps'"),
            std::string::npos)
      << firstError(parse(typo));
  json evalPath = test::baseModel();
  evalPath["data"] = {{"eval_path", "x.jsonl"}};
  EXPECT_NE(firstError(parse(evalPath)).find("/data/eval_path: expected no "
                                             "eval_path for the synthetic"),
            std::string::npos)
      << firstError(parse(evalPath));
  json indexed = test::baseModel(); // has an encoder
  indexed["data"] = {{"source", "indexed"}, {"path", "corpus"}};
  EXPECT_NE(firstError(parse(indexed)).find("/data/source: expected jsonl for "
                                            "a model with encoders"),
            std::string::npos)
      << firstError(parse(indexed));
}

} // namespace
