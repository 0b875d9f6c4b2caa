//===- TrainingTest.cpp - The training loop's formulas and settings -------===//
//
// docs/runtime.md: the learning-rate schedule against a table computed by hand
// from Megatron's warmup + decay semantics, and the training and data keys
// of model.json (defaults, round trip, errors with their pointers).
//
//===----------------------------------------------------------------------===//

#include "runtime/config/Flops.h"
#include "runtime/config/LearningRate.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/config/Parameters.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/exec/MemoryCheck.h"
#include "runtime/exec/ParamGroups.h"
#include "runtime/plan/PlanFile.h"
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
    EXPECT_NEAR(
        learningRate(schedule(row.decay, row.warmup, row.decaySteps), row.step),
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
  EXPECT_NE(firstError(parse(cosine))
                .find("/train/lr_schedule/decay_steps: "
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
  EXPECT_NE(firstError(parse(evalPath))
                .find("/data/eval_path: expected no "
                      "eval_path for the synthetic"),
            std::string::npos)
      << firstError(parse(evalPath));
  // A model with encoders reads indexed data one sample per sequence
  // (binary features beside it); windows would cut its modality runs.
  json indexed = test::baseModel(); // has an encoder
  indexed["data"] = {
      {"source", "indexed"}, {"path", "corpus"}, {"samples", "windows"}};
  EXPECT_NE(firstError(parse(indexed))
                .find("/data/samples: expected \"sequences\" for a model "
                      "with encoders"),
            std::string::npos)
      << firstError(parse(indexed));
  indexed["data"].erase("samples");
  EXPECT_TRUE(parse(indexed).config);
}

Plan planOf(const json &model) {
  return test::requirePlan(test::requireConfig(parse(model)));
}

TEST(ModelFlops, LanguageModelByHand) {
  json model = test::baseModel();
  model["modules"] = json::array({model["modules"][1]});
  model["modules"][0]["parallel"] = json::object();
  model["data"] = {{"source", "synthetic"}};
  ParseResult r = parse(model);
  ASSERT_TRUE(r.config) << firstError(r);
  const ModuleConfig &m = r.config->language();
  double H = m.hiddenSize, F = m.ffnHiddenSize, V = m.vocabSize,
         L = m.numLayers, S = r.config->batch.seqLength;
  double samples =
      r.config->batch.microBatchSize * r.config->batch.numMicrobatches;
  double forward = samples * S * (L * 2 * (4 * H * H + 3 * H * F) + 2 * H * V) +
                   L * samples * S * (S + 1) / 2 * 4 * H;
  EXPECT_DOUBLE_EQ(modelFlopsPerStep(*r.config), 3 * forward);
}

/// A "linear" projector is fc1 alone (config/Parameters.h): no fc2 GEMM
/// in the forward, nor in the backward of a frozen tower's stage 1.
TEST(Flops, ALinearProjectorCountsNoSecondLayer) {
  json model = json::parse(test::readExample("vlm-fan-in.json"));
  ParseResult mlp = parse(model);
  ASSERT_TRUE(mlp.config) << firstError(mlp);
  model["modules"][0]["arch"]["projector"] = "linear";
  ParseResult linear = parse(model);
  ASSERT_TRUE(linear.config) << firstError(linear);
  const ModuleConfig &e = linear.config->modules[0];
  const double O = linear.config->language().hiddenSize, tokens = 1000;
  EXPECT_DOUBLE_EQ(
      encoderForwardFlops(mlp.config->modules[0], int64_t(O), tokens, 0) -
          encoderForwardFlops(e, int64_t(O), tokens, 0),
      tokens * 2 * O * O);
  // Trained whole: three times the forward, as with the MLP projector.
  const double samples = linear.config->batch.microBatchSize *
                         linear.config->batch.numMicrobatches;
  TokenMoments c = expectedModalityTokens(*linear.config, 0);
  EXPECT_NEAR(moduleFlopsPerStep(*linear.config)[0],
              3 * encoderForwardFlops(e, int64_t(O), samples * c.mean,
                                      samples * c.square),
              1e-9 * moduleFlopsPerStep(*linear.config)[0]);
  // Stage 1 (the body frozen): the projector's fc1 alone trains.
  model["modules"][0]["freeze"] = "encoder_body";
  model["modules"][1]["freeze"] = true;
  ParseResult frozen = parse(model);
  ASSERT_TRUE(frozen.config) << firstError(frozen);
  const ModuleConfig &f = frozen.config->modules[0];
  const double H = f.hiddenSize, tokensMean = samples * c.mean;
  EXPECT_NEAR(
      moduleFlopsPerStep(*frozen.config)[0],
      encoderForwardFlops(f, int64_t(O), tokensMean, samples * c.square) +
          2 * tokensMean * 2 * H * O,
      1e-9 * moduleFlopsPerStep(*frozen.config)[0]);
}

TEST(Flops, FrozenModulesCountTheWorkDone) {
  json model = json::parse(test::readExample("vlm-fan-in.json"));
  ParseResult whole = parse(model);
  ASSERT_TRUE(whole.config) << firstError(whole);
  std::vector<double> full = moduleFlopsPerStep(*whole.config);
  // LLaVA stage 1: the encoder's body runs forward only, its projector
  // trains; the frozen language model makes input gradients, no weight
  // gradients.
  model["modules"][0]["freeze"] = {"patch", "layers"};
  model["modules"][1]["freeze"] = true;
  ParseResult frozen = parse(model);
  ASSERT_TRUE(frozen.config) << firstError(frozen);
  std::vector<double> stageOne = moduleFlopsPerStep(*frozen.config);
  const ModuleConfig &e = frozen.config->modules[0];
  double samples = frozen.config->batch.microBatchSize *
                   frozen.config->batch.numMicrobatches;
  TokenMoments c = expectedModalityTokens(*frozen.config, 0);
  double H = e.hiddenSize, O = frozen.config->language().hiddenSize;
  double tokens = samples * c.mean;
  double forward =
      encoderForwardFlops(e, int64_t(O), tokens, samples * c.square);
  double projection = tokens * 2 * (H * O + O * O);
  EXPECT_NEAR(stageOne[0], forward + 2 * projection, 1e-9 * forward);
  EXPECT_LT(stageOne[1], full[1]);
  EXPECT_GT(stageOne[1], 2.0 / 3.0 * full[1]);
  // Freezing nothing through prefixes of nothing trainable changes nothing:
  // every parameter trains, 3 x forward.
  model["modules"][0]["freeze"] = json::array();
  model["modules"][1]["freeze"] = false;
  ParseResult none = parse(model);
  ASSERT_TRUE(none.config);
  EXPECT_EQ(moduleFlopsPerStep(*none.config), full);
}

TEST(MemoryPlan, ParametersAddUpAndShardWithTheLayout) {
  Plan plan = planOf(test::baseModel()); // images DP4, language TP2 PP2
  std::vector<RankMemory> memory = memoryPlan(plan.topology, plan.config);
  ASSERT_EQ(memory.size(), 8u);
  int64_t language = 0, images = 0;
  for (const ParamSpec &spec : modelParameters(plan.config))
    (spec.module == "language" ? language : images) += spec.size();
  // Each encoder rank holds the whole encoder (DP4); the language ranks
  // hold it cut by TP2 x PP2: replicated norms count on both TP ranks.
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(memory[r].params, images);
  int64_t languageHeld = 0;
  for (int r = 4; r < 8; ++r)
    languageHeld += memory[r].params;
  EXPECT_GT(languageHeld, language);
  EXPECT_LT(languageHeld, language + language / 20); // the norms' copies
  for (const RankMemory &m : memory) {
    EXPECT_GE(m.paramBytes, 4 * m.params); // padded to 64 values
    EXPECT_EQ(m.gradBytes, m.paramBytes);
    EXPECT_EQ(m.optimizerBytes, 2 * m.paramBytes);
    EXPECT_GT(m.activationBytes, 0);
    EXPECT_EQ(m.totalBytes, m.paramBytes + m.gradBytes + m.optimizerBytes +
                                m.activationBytes);
  }
  // 1F1B keeps warm-up + 1 microbatches in flight (here 2 on the language
  // first stage): with a single microbatch, only one.
  json single = test::baseModel();
  single["batch"]["num_microbatches"] = 1;
  Plan one = planOf(single);
  std::vector<RankMemory> fewer = memoryPlan(one.topology, one.config);
  EXPECT_LT(fewer[4].activationBytes, memory[4].activationBytes);
  json deeper = test::baseModel();
  deeper["batch"]["num_microbatches"] = 8;
  Plan eight = planOf(deeper);
  EXPECT_EQ(memoryPlan(eight.topology, eight.config)[4].activationBytes,
            memory[4].activationBytes);
  // bf16 keeps a bf16 working copy beside the fp32 masters, and the
  // activations a layer keeps in bf16.
  json bf16 = test::baseModel();
  bf16["precision"] = "bf16";
  Plan half = planOf(bf16);
  std::vector<RankMemory> withCopy = memoryPlan(half.topology, half.config);
  EXPECT_EQ(withCopy[4].paramBytes, memory[4].paramBytes * 3 / 2);
  EXPECT_EQ(withCopy[4].gradBytes, memory[4].gradBytes);
  EXPECT_LT(withCopy[4].activationBytes, memory[4].activationBytes);
}

int64_t plentyOf(device::DeviceKind, int) { return int64_t(1) << 50; }
int64_t littleOf(device::DeviceKind, int) { return int64_t(1) << 20; }
int64_t gpuZeroIsFull(device::DeviceKind, int gpu) {
  return gpu == 0 ? 1 : int64_t(1) << 50;
}

TEST(MemoryPlan, MimoRunRefusesWhatWillNotFit) {
  Plan plan = planOf(test::baseModel());
  std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_FALSE(
      exec::memoryProblem(plan, all, device::DeviceKind::Cpu, 0, 1, plentyOf));
  std::optional<std::string> cpu =
      exec::memoryProblem(plan, all, device::DeviceKind::Cpu, 0, 1, littleOf);
  ASSERT_TRUE(cpu);
  EXPECT_NE(cpu->find("for ranks 0-7, but only 1.0 MiB is available"),
            std::string::npos)
      << *cpu;
  EXPECT_NE(cpu->find("use more tp or pp"), std::string::npos);
  // Two GPUs: ranks 0 2 4 6 share GPU 0, which is full.
  std::optional<std::string> gpu = exec::memoryProblem(
      plan, all, device::DeviceKind::Cuda, 2, 1, gpuZeroIsFull);
  ASSERT_TRUE(gpu);
  EXPECT_NE(gpu->find("on GPU 0 for ranks 0 2 4 6"), std::string::npos) << *gpu;
}

/// A parameter of `rows` rows at [begin, end) of the flat buffers.
exec::Param param(const std::string &name, int64_t rows, int64_t begin,
                  int64_t end) {
  exec::Param p;
  p.name = name;
  p.globalRows = rows;
  p.rowEnd = 1;
  p.colEnd = end - begin;
  p.flatBegin = begin;
  p.flatEnd = end;
  return p;
}

TEST(ParamGroups, FreezePrefixesDecayRuleAndMergedStretches) {
  // Flat order: a norm weight, two matrices, a bias, a matrix of layer 1.
  std::vector<exec::Param> params;
  params.push_back(param("enc.layers.0.wq", 8, 4, 12));
  params.push_back(param("enc.layers.0.ln1.weight", 1, 0, 4));
  params.push_back(param("enc.layers.0.fc1", 8, 12, 20));
  params.push_back(param("enc.layers.1.wq", 8, 24, 32));
  params.push_back(param("enc.layers.0.ln1.bias", 1, 20, 24));
  params.push_back(param("enc.patch.weight", 8, 32, 40));

  ModuleConfig module;
  module.name = "enc";
  TrainConfig train;
  // No weight decay: every trainable stretch is one run.
  exec::ParamGroups g = exec::paramGroups(params, module, train);
  ASSERT_EQ(g.trainable.size(), 1u);
  EXPECT_EQ(g.trainable[0], (exec::OptimizerRun{0, 40, true}));
  EXPECT_TRUE(g.frozen.empty());
  // Weight decay skips the parameters of one row (Megatron's rule).
  train.weightDecay = 0.1;
  g = exec::paramGroups(params, module, train);
  std::vector<exec::OptimizerRun> expected = {
      {0, 4, false}, {4, 20, true}, {20, 24, false}, {24, 40, true}};
  EXPECT_EQ(g.trainable, expected);
  train.decayAll = true;
  g = exec::paramGroups(params, module, train);
  ASSERT_EQ(g.trainable.size(), 1u);
  EXPECT_EQ(g.trainable[0], (exec::OptimizerRun{0, 40, true}));
  // "layers.0" freezes layer 0 only (whole dot-separated parts: not
  // "layers.0x"), "patch" the patch embedding.
  module.freezePrefixes = {"layers.0", "patch"};
  train.decayAll = false;
  g = exec::paramGroups(params, module, train);
  EXPECT_EQ(g.trainable, (std::vector<exec::OptimizerRun>{{24, 32, true}}));
  EXPECT_EQ(g.frozen,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 24}, {32, 40}}));
  EXPECT_EQ(g.trainableElements, 8);
  EXPECT_EQ(g.frozenElements, 32);
  module.freezePrefixes.clear();
  module.freezeAll = true;
  g = exec::paramGroups(params, module, train);
  EXPECT_TRUE(g.trainable.empty());
  EXPECT_EQ(g.frozen, (std::vector<std::pair<int64_t, int64_t>>{{0, 40}}));
}

// LLaVA stage 1's freeze_vit: "encoder_body" freezes a CLIP tower's every
// part (its class token, positions and pre-norm too) but the projector.
TEST(ModelJson, FreezeEncoderBodyLeavesOnlyTheProjectorTraining) {
  json m = json::parse(test::readExample("vlm-fan-in.json"));
  json &arch = m["modules"][0]["arch"];
  arch["class_token"] = true;
  arch["position_embeddings"] = "learned";
  arch["max_positions"] = 40;
  arch["pre_norm"] = true;
  arch["final_norm"] = true;
  arch["bias"] = true;
  m["modules"][0]["parallel"] = {{"dp", 1}};
  m["modules"][0]["freeze"] = "encoder_body";
  ParseResult parsed = parseModelConfig(m.dump(), "m.json");
  ASSERT_TRUE(parsed.config) << parsed.diagnostics[0].message;
  const ModelConfig &c = *parsed.config;
  const ModuleConfig &tower = c.modules[0];
  EXPECT_TRUE(tower.freezeBody);
  EXPECT_TRUE(tower.freezesAny());
  EXPECT_FALSE(everyParameterFrozen(c, tower));
  EXPECT_TRUE(encoderBottomFrozen(tower));
  EXPECT_EQ(encoderFrozenLayers(tower), tower.layers());
  int64_t trained = 0, frozen = 0, projector = 0;
  std::vector<std::string> frozenHeads;
  for (const ParamSpec &spec :
       stageParameters(tower, c.language().hiddenSize, false, 1, 0)) {
    const bool inProjector = spec.local.rfind("projection.", 0) == 0;
    EXPECT_EQ(tower.frozen(spec.local), !inProjector) << spec.local;
    (tower.frozen(spec.local) ? frozen : trained) += spec.rows * spec.cols;
    if (inProjector)
      projector += spec.rows * spec.cols;
    std::string head = spec.local.substr(0, spec.local.find('.'));
    if (!inProjector && std::find(frozenHeads.begin(), frozenHeads.end(),
                                  head) == frozenHeads.end())
      frozenHeads.push_back(head);
  }
  EXPECT_EQ(trained, projector);
  EXPECT_GT(frozen, 0);
  EXPECT_EQ(frozenHeads, (std::vector<std::string>{
                             "patch", "class_token", "position_embedding",
                             "pre_norm", "layers", "final_norm"}));
  // Round trip.
  EXPECT_EQ(toJson(c)["modules"][0]["freeze"], "encoder_body");
  ParseResult again = parseModelConfig(toJson(c).dump(), "m.json");
  ASSERT_TRUE(again.config);
  EXPECT_TRUE(again.config->modules[0].freezeBody);
  // The old recipe ["patch", "layers"] leaves the rest of the tower training.
  m["modules"][0]["freeze"] = {"patch", "layers"};
  ParseResult old = parseModelConfig(m.dump(), "m.json");
  ASSERT_TRUE(old.config);
  EXPECT_FALSE(old.config->modules[0].frozen("class_token"));
  EXPECT_FALSE(old.config->modules[0].frozen("pre_norm.weight"));
}

/// An encoder's frozen bottom layers (no backward): a layer counts when
/// every parameter it has is frozen, a bias or one expert of a sparse
/// layer (whichever rank holds it) keeps it and those above training.
TEST(ModelJson, EncoderFrozenLayersCountEveryParameterOfALayer) {
  json m = json::parse(test::readExample("vlm-fan-in.json"));
  json &arch = m["modules"][0]["arch"];
  arch["bias"] = true;
  arch["moe"] = {{"num_experts", 4}, {"top_k", 2}, {"layers", {1}}};
  auto frozenLayers = [&](json freeze) {
    m["modules"][0]["freeze"] = std::move(freeze);
    ParseResult parsed = parseModelConfig(m.dump(), "m.json");
    if (!parsed.config)
      throw std::runtime_error(parsed.diagnostics[0].message);
    return encoderFrozenLayers(parsed.config->modules[0]);
  };
  EXPECT_EQ(frozenLayers({"patch", "layers.0", "layers.1"}), 2);
  EXPECT_EQ(frozenLayers({"layers.0", "layers.1"}), 0); // patch trains
  EXPECT_EQ(frozenLayers({"patch", "layers.0.wq", "layers.0.wk", "layers.0.wv",
                          "layers.0.wo", "layers.0.ln1", "layers.0.ln2",
                          "layers.0.fc1", "layers.0.fc2", "layers.1"}),
            0); // layer 0's biases train
  EXPECT_EQ(
      frozenLayers({"patch", "layers.0", "layers.1.wq", "layers.1.wk",
                    "layers.1.wv", "layers.1.wo", "layers.1.bq", "layers.1.bk",
                    "layers.1.bv", "layers.1.bo", "layers.1.ln1",
                    "layers.1.ln2", "layers.1.router", "layers.1.experts.0",
                    "layers.1.experts.1", "layers.1.experts.2"}),
      1); // layer 1's expert 3 trains
}

TEST(ParamGroups, PrefixesMatchWholeParts) {
  EXPECT_TRUE(namePrefixMatches("layers.1.wq", "layers"));
  EXPECT_TRUE(namePrefixMatches("layers.1.wq", "layers.1"));
  EXPECT_TRUE(namePrefixMatches("layers.1.wq", "layers.1."));
  EXPECT_TRUE(namePrefixMatches("layers.1.wq", "layers.1.wq"));
  EXPECT_FALSE(namePrefixMatches("layers.10.wq", "layers.1"));
  EXPECT_FALSE(namePrefixMatches("layers.1.wq", "lay"));
  EXPECT_FALSE(namePrefixMatches("patch", "patch.weight"));
}

TEST(ModelJson, FreezeLrMultAndDecayAllRoundTripAndAreChecked) {
  json m = json::parse(test::readExample("vlm-fan-in.json"));
  m["modules"][0]["freeze"] = {"patch", "layers"};
  m["modules"][0]["lr_mult"] = 0.1;
  m["modules"][1]["freeze"] = true;
  m["train"]["decay_all"] = true;
  ParseResult parsed = parseModelConfig(m.dump(), "m.json");
  ASSERT_TRUE(parsed.config) << parsed.diagnostics[0].message;
  const ModelConfig &c = *parsed.config;
  EXPECT_EQ(c.modules[0].freezePrefixes,
            (std::vector<std::string>{"patch", "layers"}));
  EXPECT_DOUBLE_EQ(c.modules[0].lrMult, 0.1);
  EXPECT_TRUE(c.modules[1].freezeAll);
  EXPECT_TRUE(c.train.decayAll);
  EXPECT_TRUE(c.modules[0].frozen("layers.1.fc1"));
  EXPECT_FALSE(c.modules[0].frozen("projection.fc1.weight"));
  // The canonical form keeps them, and leaves them out when unset.
  json canonical = toJson(c);
  EXPECT_EQ(canonical["modules"][0]["freeze"], json({"patch", "layers"}));
  EXPECT_EQ(canonical["modules"][1]["freeze"], true);
  EXPECT_EQ(canonical["train"]["decay_all"], true);
  json plain = toJson(
      *parseModelConfig(test::readExample("vlm-fan-in.json"), "m.json").config);
  EXPECT_FALSE(plain["modules"][0].contains("freeze"));
  EXPECT_FALSE(plain["modules"][0].contains("lr_mult"));
  EXPECT_FALSE(plain["train"].contains("decay_all"));
  // Errors name the pointer.
  auto error = [&](json bad) {
    ParseResult r = parseModelConfig(bad.dump(), "m.json");
    EXPECT_FALSE(r.config);
    return r.diagnostics.empty()
               ? std::string()
               : r.diagnostics[0].pointer + ": " + r.diagnostics[0].message;
  };
  json bad = m;
  bad["modules"][0]["freeze"] = {"layer"};
  EXPECT_EQ(error(bad).rfind("/modules/0/freeze/0: expected a prefix of a "
                             "parameter name of module 'images', found "
                             "\"layer\"",
                             0),
            0u);
  bad["modules"][0]["freeze"] = "layers";
  EXPECT_EQ(error(bad).rfind("/modules/0/freeze: expected true, false, "
                             "\"encoder_body\" or an array",
                             0),
            0u);
  bad["modules"][0]["freeze"] = "encoder_body";
  bad["modules"][1]["freeze"] = "encoder_body";
  EXPECT_EQ(error(bad).rfind("/modules/1/freeze: \"encoder_body\" freezes an "
                             "encoder's tower, and module 'language' is the "
                             "language model",
                             0),
            0u);
  bad = m;
  bad["modules"][0]["lr_mult"] = 0;
  EXPECT_EQ(error(bad).rfind("/modules/0/lr_mult:", 0), 0u);
  // init: a mimo checkpoint, or a Hugging Face folder (language only).
  json init = m;
  init["modules"][1]["init"] = {{"from", "/ckpt/stage1"}, {"format", "mimo"}};
  ParseResult withInit = parseModelConfig(init.dump(), "m.json");
  ASSERT_TRUE(withInit.config);
  ASSERT_TRUE(withInit.config->modules[1].init);
  EXPECT_EQ(withInit.config->modules[1].init->from, "/ckpt/stage1");
  EXPECT_EQ(toJson(*withInit.config)["modules"][1]["init"]["from"],
            "/ckpt/stage1");
  ModelConfig relative = *withInit.config;
  relative.modules[1].init->from = "runs/one";
  resolveInitPaths(relative, "/models");
  EXPECT_EQ(relative.modules[1].init->from, "/models/runs/one");
  // Hugging Face folders start either kind (the folder itself is checked
  // by mimoc compile: HfWeightsTest).
  init["modules"][1]["init"]["format"] = "hf";
  EXPECT_TRUE(parseModelConfig(init.dump(), "m.json").config);
  init["modules"][0]["init"] = {{"from", "/hf/clip"}, {"format", "hf"}};
  EXPECT_TRUE(parseModelConfig(init.dump(), "m.json").config);
  init["modules"][0].erase("init");
  init["modules"][1]["init"] = {{"format", "mimo"}};
  EXPECT_EQ(error(init).rfind("/modules/1/init/from:", 0), 0u);
}

} // namespace
