//===- LoraTest.cpp - LoRA's keys, parameters and plans -------------------===//
//
// docs/model-json.md `lora` and docs/model.md "LoRA": what the parser takes
// and refuses, the adapter factors each targeted weight gets (shapes, TP
// cut, initialisation), what is frozen, what checkpoints hold and what the
// memory plan counts. The training itself: ModelGradientTest (finite
// differences) and the e2e layouts (every parallelism against --reference).
//
//===----------------------------------------------------------------------===//

#include "runtime/config/Lora.h"
#include "runtime/checkpoint/PeftAdapter.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/config/Parameters.h"
#include "runtime/cost/MemoryPlan.h"
#include "tests/unit/TestModels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

using namespace mimo;
using nlohmann::json;

namespace {

json withLora(json lora, size_t module = 1) {
  json m = test::baseModel();
  m["modules"][module]["lora"] = std::move(lora);
  return m;
}

ParseResult parse(const json &m) {
  return parseModelConfig(m.dump(), "model.json");
}

/// The first diagnostic's pointer and message ("" when it parses).
std::pair<std::string, std::string> firstError(const json &m) {
  ParseResult r = parse(m);
  if (r.diagnostics.empty())
    return {"", ""};
  return {r.diagnostics[0].pointer, r.diagnostics[0].message};
}

const ParamSpec *find(const std::vector<ParamSpec> &specs,
                      const std::string &local) {
  for (const ParamSpec &s : specs)
    if (s.local == local)
      return &s;
  return nullptr;
}

} // namespace

TEST(Lora, TargetsScaleAndDefaults) {
  ModelConfig c = test::requireConfig(parse(
      withLora({{"r", 8}, {"targets", {"q_proj", "v", "down_proj", "wo"}}})));
  const LoraConfig &l = *c.language().lora;
  EXPECT_EQ(l.rank, 8);
  EXPECT_EQ(l.alpha, 8.0) << "alpha defaults to r: s = 1";
  EXPECT_EQ(l.targets, (std::vector<std::string>{"q", "v", "down", "o"}));
  EXPECT_DOUBLE_EQ(l.scale(), 1.0);
  LoraConfig rs = l;
  rs.alpha = 16;
  EXPECT_DOUBLE_EQ(rs.scale(), 2.0);
  rs.rslora = true;
  EXPECT_DOUBLE_EQ(rs.scale(), 16.0 / std::sqrt(8.0));
  // "all-linear": the module's own linears.
  ModelConfig all = test::requireConfig(
      parse(withLora({{"r", 2}, {"targets", "all-linear"}}, 0)));
  EXPECT_EQ(all.modules[0].lora->targets,
            (std::vector<std::string>{"q", "k", "v", "o", "fc1", "fc2"}));
  EXPECT_EQ(
      loraTargetNames(true),
      (std::vector<std::string>{"q", "k", "v", "o", "gate", "up", "down"}));
}

TEST(Lora, WrittenBackAsParsed) {
  json m = withLora({{"r", 4},
                     {"alpha", 12.5},
                     {"targets", {"gate", "q"}},
                     {"rslora", true},
                     {"modules_to_save", {"head"}}});
  ModelConfig c = test::requireConfig(parse(m));
  json written = toJson(c);
  EXPECT_EQ(written["modules"][1]["lora"],
            json({{"r", 4},
                  {"alpha", 12.5},
                  {"targets", {"gate", "q"}},
                  {"rslora", true},
                  {"modules_to_save", {"head"}}}));
  ModelConfig again = test::requireConfig(parse(written));
  EXPECT_EQ(again.language().lora->targets, c.language().lora->targets);
  EXPECT_FALSE(
      toJson(test::requireConfig(parse(test::baseModel())))["modules"][1]
          .contains("lora"))
      << "a model without lora keeps its digest";
}

TEST(Lora, BadKeysAreRefusedAtTheirPointer) {
  auto [at, message] =
      firstError(withLora({{"r", 4}, {"targets", {"q", "qq"}}}));
  EXPECT_EQ(at, "/modules/1/lora/targets/1");
  EXPECT_NE(message.find("did you mean \"q\""), std::string::npos) << message;
  std::tie(at, message) =
      firstError(withLora({{"r", 4}, {"targets", {"gate"}}}, 0));
  EXPECT_EQ(at, "/modules/0/lora/targets/0");
  EXPECT_NE(message.find("an encoder's are"), std::string::npos) << message;
  std::tie(at, message) =
      firstError(withLora({{"r", 4}, {"targets", {"q", "q_proj"}}}));
  EXPECT_EQ(at, "/modules/1/lora/targets/1");
  EXPECT_NE(message.find("twice"), std::string::npos) << message;
  std::tie(at, message) = firstError(withLora({{"r", 0}, {"targets", {"q"}}}));
  EXPECT_EQ(at, "/modules/1/lora/r");
  std::tie(at, message) = firstError(withLora({{"r", 4}}));
  EXPECT_EQ(at, "/modules/1/lora/targets");
  std::tie(at, message) =
      firstError(withLora({{"r", 4}, {"targets", json::array()}}));
  EXPECT_EQ(at, "/modules/1/lora/targets");
  std::tie(at, message) = firstError(
      withLora({{"r", 4}, {"alpha", -1}, {"targets", "all-linear"}}));
  EXPECT_EQ(at, "/modules/1/lora/alpha");
  std::tie(at, message) = firstError(withLora(
      {{"r", 4}, {"targets", "all-linear"}, {"modules_to_save", {"heads"}}}));
  EXPECT_EQ(at, "/modules/1/lora/modules_to_save/0");
  EXPECT_NE(message.find("names none"), std::string::npos) << message;
  // PEFT's key names point to mimo's.
  std::tie(at, message) = firstError(
      withLora({{"r", 4}, {"lora_alpha", 8}, {"targets", "all-linear"}}));
  EXPECT_EQ(at, "/modules/1/lora/lora_alpha");
  EXPECT_NE(message.find("'alpha'"), std::string::npos) << message;
  std::tie(at, message) = firstError(
      withLora({{"r", 4}, {"lora_dropout", 0.05}, {"targets", "all-linear"}}));
  EXPECT_NE(message.find("dropout"), std::string::npos) << message;
  std::tie(at, message) = firstError(withLora(json::array({1})));
  EXPECT_EQ(at, "/modules/1/lora");
  // A weight adapted and trained whole: refused.
  std::tie(at, message) = firstError(withLora(
      {{"r", 4}, {"targets", {"q"}}, {"modules_to_save", {"layers.1"}}}));
  EXPECT_EQ(at, "/modules/1/lora/modules_to_save/0");
  EXPECT_NE(message.find("covers layers.1.wq"), std::string::npos) << message;
}

TEST(Lora, FreezeAddsNothingToLora) {
  // freeze: true beside lora leaves the adapters training: an encoder so
  // configured is not forward only, and a model whose every module says
  // freeze: true still trains its adapters.
  json m = withLora({{"r", 2}, {"targets", "all-linear"}}, 0);
  m["modules"][0]["freeze"] = true;
  m["modules"][1]["freeze"] = true;
  ModelConfig c = test::requireConfig(parse(m));
  EXPECT_FALSE(everyParameterFrozen(c, c.modules[0]));
  EXPECT_FALSE(runsForwardOnly(c, c.modules[0]));
  EXPECT_TRUE(everyParameterFrozen(c, c.modules[1]));
}

TEST(Lora, FactorsFollowTheirWeightsCut) {
  ModelConfig c =
      test::requireConfig(parse(withLora({{"r", 4},
                                          {"targets", {"q", "o", "down"}},
                                          {"modules_to_save", {"head"}}})));
  const ModuleConfig &lm = c.language();
  // Stage 0 of 2 (layers 0 and 1), SP on.
  std::vector<ParamSpec> specs = stageParameters(lm, 128, true, 2, 0);
  const int64_t H = lm.hiddenSize, F = lm.ffnHiddenSize;
  // Column-parallel q: A [H, r] whole, its gradient summed over TP; B
  // [r, H] cut by columns, from zeros.
  const ParamSpec *qa = find(specs, "layers.0.wq.lora_A");
  const ParamSpec *qb = find(specs, "layers.0.wq.lora_B");
  ASSERT_TRUE(qa && qb);
  EXPECT_EQ(qa->rows, H);
  EXPECT_EQ(qa->cols, 4);
  EXPECT_EQ(qa->layout, ParamLayout::Replicated);
  EXPECT_TRUE(qa->partialOverTp);
  EXPECT_EQ(qa->init, ParamInit::Weight);
  EXPECT_EQ(qa->scale, 0) << "1 / sqrt(K): PEFT's Kaiming-uniform bound";
  EXPECT_EQ(qb->layout, ParamLayout::ColumnParallel);
  EXPECT_FALSE(qb->partialOverTp);
  EXPECT_EQ(qb->init, ParamInit::Zeros);
  // Row-parallel down: A [F, r] cut by rows, B [r, H] whole and summed.
  const ParamSpec *da = find(specs, "layers.1.down.lora_A");
  const ParamSpec *db = find(specs, "layers.1.down.lora_B");
  ASSERT_TRUE(da && db);
  EXPECT_EQ(da->rows, F);
  EXPECT_EQ(da->layout, ParamLayout::RowParallel);
  EXPECT_FALSE(da->partialOverTp);
  EXPECT_EQ(db->rows, 4);
  EXPECT_EQ(db->cols, H);
  EXPECT_EQ(db->layout, ParamLayout::Replicated);
  EXPECT_TRUE(db->partialOverTp);
  EXPECT_EQ(find(specs, "layers.0.wk.lora_A"), nullptr) << "not targeted";
  EXPECT_EQ(find(specs, "layers.0.gate.lora_A"), nullptr);
  // Each factor right after its weight.
  for (size_t i = 0; i + 2 < specs.size(); ++i)
    if (loraTargetOf(*lm.lora, specs[i].local)) {
      EXPECT_EQ(specs[i + 1].local, loraAName(specs[i].local));
      EXPECT_EQ(specs[i + 2].local, loraBName(specs[i].local));
    }
  // Frozen: the base but head; never a factor, whatever freeze says.
  ModuleConfig frozen = lm;
  frozen.freezeAll = true;
  for (const ModuleConfig *m :
       {&lm, const_cast<const ModuleConfig *>(&frozen)}) {
    EXPECT_TRUE(m->frozen("layers.0.wq"));
    EXPECT_TRUE(m->frozen("embedding"));
    EXPECT_FALSE(m->frozen("layers.0.wq.lora_A"));
    EXPECT_FALSE(m->frozen("layers.1.down.lora_B"));
    EXPECT_FALSE(m->frozen("head"));
    EXPECT_TRUE(m->freezesAny());
  }
  std::string base;
  bool isB = false;
  EXPECT_TRUE(isLoraFactor("language.layers.1.down.lora_B", &base, &isB));
  EXPECT_EQ(base, "language.layers.1.down");
  EXPECT_TRUE(isB);
  EXPECT_FALSE(isLoraFactor("language.layers.1.down"));
}

TEST(Lora, CheckpointsAndTheMemoryPlanCountTheAdaptersOnly) {
  json m = withLora({{"r", 4}, {"targets", "all-linear"}});
  ModelConfig c = test::requireConfig(parse(m));
  ModelConfig plain = test::requireConfig(parse(test::baseModel()));
  int64_t adapters = 0, stored = 0;
  for (const ParamSpec &s : modelParameters(c))
    adapters += isLoraFactor(s.local) ? s.size() : 0;
  for (const ParamSpec &s : checkpointParameters(c)) {
    if (s.module == "language") {
      EXPECT_TRUE(isLoraFactor(s.local))
          << s.name() << ": the base is not kept";
    }
    stored += s.module == "language" ? s.size() : 0;
  }
  EXPECT_EQ(stored, adapters);
  const ModuleConfig &lm = c.language();
  const int64_t H = lm.hiddenSize, F = lm.ffnHiddenSize, r = 4;
  EXPECT_EQ(adapters, lm.numLayers * r * ((H + H) * 4 + (H + F) * 2 + (F + H)))
      << "q, k, v, o [H, H]; gate, up [H, F]; down [F, H] (no GQA here)";
  // The memory plan: the same parameters held, only the adapters trained
  // (the encoder trains whole: it has no lora).
  Plan plan = test::requirePlan(c), before = test::requirePlan(plain);
  std::vector<RankMemory> mem = memoryPlan(plan.topology, c);
  std::vector<RankMemory> full = memoryPlan(before.topology, plain);
  int64_t trainable = 0;
  for (size_t rank = 4; rank < 8; ++rank) { // the language ranks
    EXPECT_GT(mem[rank].params, full[rank].params);
    EXPECT_LT(mem[rank].trainableParams * 10, full[rank].trainableParams);
    EXPECT_LT(mem[rank].optimizerBytes * 10, full[rank].optimizerBytes);
    trainable += mem[rank].trainableParams;
  }
  // TP2 x PP2: the factors whole on both TP ranks (A beside q, k, v,
  // gate and up; B beside o and down) twice, the cut ones once.
  const int64_t whole = lm.numLayers * r * (5 * H + 2 * H);
  const int64_t cut = lm.numLayers * r * (4 * H + 3 * F);
  EXPECT_EQ(trainable, 2 * whole + cut);
  EXPECT_EQ(mem[0].trainableParams, full[0].trainableParams);
}

namespace {

/// A one-layer Llama base folder (config and one tensor: names only
/// matter) and an adapter folder of `tensors` (name, shape) with `config`.
struct PeftFolders {
  std::filesystem::path dir;
  PeftFolders(const json &config,
              const std::vector<std::pair<std::string, std::vector<int64_t>>>
                  &tensors) {
    dir = std::filesystem::temp_directory_path() /
          ("mimo-peft-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / "base");
    std::filesystem::create_directories(dir / "adapter");
    std::ofstream(dir / "base/config.json")
        << json({{"model_type", "llama"}}).dump();
    write(dir / "base/model.safetensors", {{"model.norm.weight", {4}}});
    std::ofstream(dir / "adapter/adapter_config.json") << config.dump();
    write(dir / "adapter/adapter_model.safetensors", tensors);
  }
  ~PeftFolders() { std::filesystem::remove_all(dir); }
  static void
  write(const std::filesystem::path &path,
        const std::vector<std::pair<std::string, std::vector<int64_t>>> &t) {
    safetensors::Header header;
    int64_t bytes = 0;
    for (const auto &[name, shape] : t) {
      int64_t n = 4;
      for (int64_t d : shape)
        n *= d;
      header.tensors.push_back({name, "F32", shape, bytes, bytes + n});
      bytes += n;
    }
    std::ofstream(path, std::ios::binary)
        << safetensors::encodeHeader(header) << std::string(bytes, '\0');
  }
  /// "" or openPeftAdapter's error for a language module with `lora`.
  std::string open(const LoraConfig &lora) {
    ModelConfig config;
    ModuleConfig m;
    m.name = "language";
    m.kind = ModuleKind::Language;
    m.vocabSize = 8, m.hiddenSize = 4, m.numLayers = 1, m.numHeads = 2;
    m.ffnHiddenSize = 8;
    m.lora = lora;
    config.modules.push_back(m);
    std::string error;
    std::optional<exec::HfFolder> base =
        exec::openHfFolder((dir / "base").string(), error);
    if (!base)
      return "base: " + error;
    std::optional<exec::PeftAdapter> adapter = exec::openPeftAdapter(
        (dir / "adapter").string(), *base, config, m, error);
    return adapter ? "" : error;
  }
};

} // namespace

TEST(Lora, PeftFoldersAreCheckedAgainstTheModel) {
  const std::string q = "base_model.model.model.layers.0.self_attn.q_proj.";
  const json config = {
      {"peft_type", "LORA"}, {"r", 2}, {"lora_alpha", 4}, {"bias", "none"}};
  const std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {q + "lora_A.weight", {2, 4}}, {q + "lora_B.weight", {4, 2}}};
  LoraConfig lora;
  lora.rank = 2, lora.alpha = 4, lora.targets = {"q"};
  EXPECT_EQ(PeftFolders(config, tensors).open(lora), "");
  auto error = [&](const json &c, auto t, const LoraConfig &l) {
    return PeftFolders(c, t).open(l);
  };
  LoraConfig rank3 = lora;
  rank3.rank = 3;
  EXPECT_NE(error(config, tensors, rank3).find("has rank 2"),
            std::string::npos);
  LoraConfig alpha8 = lora;
  alpha8.alpha = 8;
  EXPECT_NE(error(config, tensors, alpha8).find("/lora_alpha"),
            std::string::npos);
  json patterned = config;
  patterned["alpha_pattern"] = {{"q_proj", 8}};
  EXPECT_EQ(error(patterned, tensors, alpha8), "") << "alpha_pattern counts";
  LoraConfig rs = lora;
  rs.rslora = true;
  EXPECT_NE(error(config, tensors, rs).find("/use_rslora"), std::string::npos);
  json dora = config;
  dora["use_dora"] = true;
  EXPECT_NE(error(dora, tensors, lora).find("/use_dora"), std::string::npos);
  // Malformed values: errors naming the key, never an exception.
  json notBool = config;
  notBool["use_rslora"] = "true";
  EXPECT_NE(
      error(notBool, tensors, lora).find("/use_rslora: expected true or false"),
      std::string::npos);
  json longPattern = config;
  longPattern["alpha_pattern"] = {{std::string(5000, '('), 8}};
  EXPECT_NE(error(longPattern, tensors, lora).find("/alpha_pattern"),
            std::string::npos);
  LoraConfig qv = lora;
  qv.targets = {"q", "v"};
  EXPECT_NE(error(config, tensors, qv).find("v_proj.lora_A.weight' is missing"),
            std::string::npos);
  auto extra = tensors;
  extra.push_back(
      {"base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight",
       {2, 4}});
  EXPECT_NE(error(config, extra, lora).find("leaves out"), std::string::npos);
  // An adapter of the LLaVA model (either layout) over the language
  // model's own folder.
  for (const char *prefix :
       {"base_model.model.language_model.model.layers.0.self_attn.q_proj.",
        "base_model.model.model.language_model.layers.0.self_attn.q_proj."}) {
    const std::string p = prefix;
    EXPECT_EQ(
        error(config,
              std::vector<std::pair<std::string, std::vector<int64_t>>>{
                  {p + "lora_A.weight", {2, 4}}, {p + "lora_B.weight", {4, 2}}},
              lora),
        "")
        << p;
  }
}
