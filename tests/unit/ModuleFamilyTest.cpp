//===- ModuleFamilyTest.cpp - Module families: one entry each -------------===//
//
// docs/model-json.md `arch.family`, CONTRIBUTING.md: the built-in
// families are inferred from the keys as before, naming one changes
// nothing else, its defaults and structure are applied and checked at the
// key's pointer, and a family defined here, in the test, reads and writes
// its own Hugging Face folder with no other file changed.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/HfExport.h"
#include "runtime/checkpoint/HfWeights.h"
#include "runtime/config/Flops.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/config/Parameters.h"
#include "runtime/exec/Executor.h"
#include "runtime/family/LlamaStyle.h"
#include "runtime/plan/PlanFile.h"
#include "tests/unit/HfReadBack.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

using namespace mimo;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "mimo-family-XXXXXX");
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string describe(const std::vector<Diagnostic> &diagnostics) {
  std::string out;
  for (const Diagnostic &d : diagnostics)
    out += d.pointer + ": " + d.message + "\n";
  return out;
}

/// A language model and an encoder; `language` and `encoder` are merged
/// into their arch objects.
json model(const json &language, const json &encoder) {
  json m = {
      {"version", 1},
      {"name", "family"},
      {"batch",
       {{"micro_batch_size", 1}, {"num_microbatches", 1}, {"seq_length", 16}}},
      {"modules",
       {{{"name", "images"},
         {"kind", "encoder"},
         {"special_token_id", 63},
         {"arch",
          {{"feature_dim", 12},
           {"hidden_size", 8},
           {"num_layers", 2},
           {"num_heads", 2},
           {"ffn_hidden_size", 16}}}},
        {{"name", "language"},
         {"kind", "language"},
         {"arch",
          {{"vocab_size", 64},
           {"hidden_size", 8},
           {"num_layers", 2},
           {"num_heads", 2},
           {"ffn_hidden_size", 12}}},
         {"parallel", {{"rank_offset", 1}}}}}},
      {"data",
       {{"source", "synthetic"}, {"tokens_per_sample", {{"images", {4, 4}}}}}}};
  m["modules"][0]["arch"].update(encoder);
  m["modules"][1]["arch"].update(language);
  return m;
}

ParseResult parse(const json &m) {
  return parseModelConfig(m.dump(), "m.json");
}

const json kClip = {{"bias", true},
                    {"position_embeddings", "learned"},
                    {"max_positions", 5},
                    {"class_token", true},
                    {"pre_norm", true},
                    {"patch_bias", false},
                    {"activation", "quick_gelu"}};
const json kSiglip = {{"bias", true},
                      {"position_embeddings", "learned"},
                      {"max_positions", 4},
                      {"norm_eps", 1e-6}};

} // namespace

/// A module that names no family is of the one its keys describe, as the
/// Hugging Face reader and writer told them apart before families.
TEST(ModuleFamily, TheKeysDecideAnUnnamedFamily) {
  struct Case {
    json language, encoder;
    const char *languageFamily, *encoderFamily;
  };
  json notQuiteClip = kClip;
  notQuiteClip["bias"] = false;
  for (const Case &c : {Case{json::object(), json::object(), "llama", "vit"},
                        Case{{{"qkv_bias", true}}, kClip, "qwen2", "clip"},
                        Case{json::object(), kSiglip, "llama", "siglip"},
                        Case{json::object(), notQuiteClip, "llama", "vit"}}) {
    ParseResult parsed = parse(model(c.language, c.encoder));
    ASSERT_TRUE(parsed.config) << describe(parsed.diagnostics);
    EXPECT_EQ(parsed.config->modules[0].family().name(), c.encoderFamily);
    EXPECT_EQ(parsed.config->language().family().name(), c.languageFamily);
    EXPECT_EQ(parsed.config->modules[0].namedFamily, nullptr);
  }
}

/// Naming the family a module has (its other defaults written out)
/// changes nothing but the key: the same parameters, FLOPs and model, for
/// every example.
TEST(ModuleFamily, NamingTheFamilyAModuleHasChangesNothing) {
  std::vector<fs::path> files;
  for (const auto &entry : fs::directory_iterator(MIMO_EXAMPLES_DIR))
    if (entry.path().extension() == ".json")
      files.push_back(entry.path());
  files.push_back("clip");
  files.push_back("siglip");
  ASSERT_GE(files.size(), 9u);
  for (const fs::path &file : files) {
    SCOPED_TRACE(file.string());
    json doc;
    if (file == "clip" || file == "siglip") {
      doc = model({{"qkv_bias", true}}, file == "clip" ? kClip : kSiglip);
    } else {
      std::ifstream in(file);
      doc = json::parse(in);
    }
    ParseResult plain = parse(doc);
    ASSERT_TRUE(plain.config) << describe(plain.diagnostics);
    json named = doc;
    // With the values the family defaults otherwise written out.
    for (size_t i = 0; i < plain.config->modules.size(); ++i) {
      const ModuleConfig &m = plain.config->modules[i];
      json &arch = named["modules"][i]["arch"];
      arch["family"] = std::string(m.family().name());
      arch["norm_eps"] = m.normEps;
      if (m.kind == ModuleKind::Encoder)
        arch["activation"] = m.activation;
    }
    ParseResult withName = parse(named);
    ASSERT_TRUE(withName.config) << describe(withName.diagnostics);
    // Every field the same: the model written without the name is
    // plain's (written with it, the family's defaults go unsaid).
    ModelConfig unnamed = *withName.config;
    for (ModuleConfig &module : unnamed.modules) {
      EXPECT_NE(module.namedFamily, nullptr);
      module.namedFamily = nullptr;
    }
    EXPECT_EQ(toJson(*plain.config), toJson(unnamed));
    ParseResult again = parse(toJson(*withName.config));
    ASSERT_TRUE(again.config) << describe(again.diagnostics);
    EXPECT_EQ(toJson(*again.config), toJson(*withName.config));
    std::vector<ParamSpec> pa = modelParameters(*plain.config),
                           pb = modelParameters(*withName.config);
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i].name(), pb[i].name());
      EXPECT_EQ(pa[i].rows, pb[i].rows);
      EXPECT_EQ(pa[i].cols, pb[i].cols);
      EXPECT_EQ(pa[i].layout, pb[i].layout);
      EXPECT_EQ(pa[i].init, pb[i].init);
      EXPECT_EQ(pa[i].scale, pb[i].scale);
    }
    EXPECT_EQ(moduleFlopsPerStep(*plain.config),
              moduleFlopsPerStep(*withName.config));
  }
}

/// A named family's defaults stand where model.json is silent; the
/// canonical model.json keeps what it says against them.
TEST(ModuleFamily, ANamedFamilySetsItsDefaults) {
  ParseResult parsed = parse(
      model({{"family", "qwen2"}}, {{"family", "clip"}, {"max_positions", 5}}));
  ASSERT_TRUE(parsed.config) << describe(parsed.diagnostics);
  const ModuleConfig &clip = parsed.config->modules[0];
  EXPECT_TRUE(clip.bias && clip.learnedPositions && clip.classToken &&
              clip.preNorm && !clip.patchBias && !clip.finalNorm);
  EXPECT_EQ(clip.activation, "quick_gelu");
  EXPECT_EQ(clip.family().name(), "clip");
  const ModuleConfig &qwen = parsed.config->language();
  EXPECT_TRUE(qwen.qkvBias);
  EXPECT_EQ(qwen.normEps, 1e-6);
  // The same parameters as spelling the keys out.
  ParseResult spelled =
      parse(model({{"qkv_bias", true}, {"norm_eps", 1e-6}}, kClip));
  ASSERT_TRUE(spelled.config) << describe(spelled.diagnostics);
  EXPECT_EQ(modelParameters(*parsed.config).size(),
            modelParameters(*spelled.config).size());

  // A value at the kind's default but not the family's is written back.
  ParseResult siglip = parse(model(json::object(), {{"family", "siglip"},
                                                    {"max_positions", 4},
                                                    {"norm_eps", 1e-5},
                                                    {"activation", "gelu"},
                                                    {"final_norm", true}}));
  ASSERT_TRUE(siglip.config) << describe(siglip.diagnostics);
  json written = toJson(*siglip.config);
  EXPECT_EQ(written["modules"][0]["arch"]["family"], "siglip");
  ParseResult again = parse(written);
  ASSERT_TRUE(again.config) << describe(again.diagnostics);
  EXPECT_EQ(again.config->modules[0].normEps, 1e-5);
  EXPECT_EQ(again.config->modules[0].activation, "gelu");
  EXPECT_TRUE(again.config->modules[0].finalNorm);
  EXPECT_EQ(toJson(*again.config), written);
}

/// A key against the named family's structure, a family of the other kind
/// and an unknown name: each an error at its pointer naming the fix.
TEST(ModuleFamily, WhatAFamilyForbidsIsAnErrorAtTheKey) {
  struct Case {
    json language, encoder;
    const char *pointer, *says;
  };
  for (const Case &c :
       {Case{json::object(),
             {{"family", "clip"}, {"max_positions", 5}, {"class_token", false}},
             "/modules/0/arch/class_token",
             "has a class token"},
        Case{{{"family", "llama"}, {"qkv_bias", true}},
             json::object(),
             "/modules/1/arch/qkv_bias",
             "\"qwen2\""},
        Case{json::object(),
             {{"family", "llama"}},
             "/modules/0/arch/family",
             "a Llama-style language model"},
        Case{json::object(),
             {{"family", "sigclip"}},
             "/modules/0/arch/family",
             "\"siglip\""},
        Case{{{"family", 3}},
             json::object(),
             "/modules/1/arch/family",
             "llama"}}) {
    ParseResult parsed = parse(model(c.language, c.encoder));
    SCOPED_TRACE(describe(parsed.diagnostics));
    EXPECT_FALSE(parsed.config);
    bool found = false;
    for (const Diagnostic &d : parsed.diagnostics)
      found = found || (d.pointer == c.pointer &&
                        d.message.find(c.says) != std::string::npos);
    EXPECT_TRUE(found) << c.pointer << " / " << c.says;
  }
}

namespace {

/// A family defined by the test alone: a Llama-style model under Meta's
/// original names (tok_embeddings, attention.wq, feed_forward.w1/w2/w3)
/// and a config.json of its own ("meta_llama": dim, n_layers, ...).
class MetaFamily final : public LlamaStyleFamily {
public:
  std::string_view name() const override { return "meta"; }
  std::string_view label() const override {
    return "a Llama under Meta's names";
  }
  std::optional<HfSource> hfSource(const HfLayout &layout,
                                   const std::string &local) const override {
    (void)layout;
    static const std::map<std::string, std::pair<const char *, bool>> top = {
        {"embedding", {"tok_embeddings.weight", false}},
        {"final_norm", {"norm.weight", false}},
        {"head", {"output.weight", true}}};
    static const std::map<std::string, std::pair<const char *, bool>> layer = {
        {"attn_norm", {"attention_norm.weight", false}},
        {"mlp_norm", {"ffn_norm.weight", false}},
        {"wq", {"attention.wq.weight", true}},
        {"wk", {"attention.wk.weight", true}},
        {"wv", {"attention.wv.weight", true}},
        {"wo", {"attention.wo.weight", true}},
        {"gate", {"feed_forward.w1.weight", true}},
        {"down", {"feed_forward.w2.weight", true}},
        {"up", {"feed_forward.w3.weight", true}}};
    if (auto it = top.find(local); it != top.end())
      return HfSource{it->second.first, it->second.second};
    auto parts = splitLayerName(local);
    if (!parts)
      return std::nullopt;
    auto it = layer.find(parts->second);
    if (it == layer.end())
      return std::nullopt;
    return HfSource{"layers." + parts->first + "." + it->second.first,
                    it->second.second};
  }
  HfClaim hfClaim(const ModuleArch &arch, const HfLayout &layout,
                  const std::string &name) const override {
    (void)arch, (void)layout, (void)name;
    return HfClaim::Ours; // the folder holds this model alone
  }
  bool hfCheck(ConfigCheck &k, const ModuleArch &arch,
               int64_t seqLength) const override {
    (void)seqLength;
    if (k.text("model_type", "") != "meta_llama") {
      k.otherFamily("model", k.text("model_type", ""),
                    "the meta family reads meta_llama folders");
      return false;
    }
    k.size("hidden_size", "dim", arch.hiddenSize);
    k.size("num_layers", "n_layers", arch.numLayers);
    k.size("num_heads", "n_heads", arch.numHeads);
    k.size("num_query_groups", "n_kv_heads", arch.kvHeads());
    k.size("vocab_size", "vocab_size", arch.vocabSize);
    k.size("ffn_hidden_size", "ffn_dim", arch.ffnHiddenSize);
    k.number("norm_eps", "norm_eps", arch.normEps, 1e-5);
    return true;
  }
  nlohmann::ordered_json
  hfConfig(const ModuleArch &arch,
           const HfExportContext &context) const override {
    (void)context;
    return {{"model_type", "meta_llama"},    {"dim", arch.hiddenSize},
            {"n_layers", arch.numLayers},    {"n_heads", arch.numHeads},
            {"n_kv_heads", arch.kvHeads()},  {"vocab_size", arch.vocabSize},
            {"ffn_dim", arch.ffnHiddenSize}, {"norm_eps", arch.normEps}};
  }

protected:
  std::string hfModelType() const override { return "meta_llama"; }
  std::string hfArchitecture() const override { return "Transformer"; }
};

void trainOneStep(const ModelConfig &config, const std::string &saveDir) {
  std::string error;
  std::optional<Plan> plan = buildPlan(config, &error);
  ASSERT_TRUE(plan) << error;
  exec::RunOptions options;
  options.steps = 1;
  options.saveDir = saveDir;
  exec::RunResult run = exec::runLocal(*plan, options);
  ASSERT_EQ(run.exitCode, 0) << run.error;
}

} // namespace

/// A family is one entry (CONTRIBUTING.md). This one, registered from
/// the test, trains, writes its folder under its own names and config.json,
/// checks a folder's config against the arch, and reads its weights back bit
/// for bit, with no file outside the test knowing it.
TEST(ModuleFamily, AFamilyRegisteredFromATestReadsAndWritesItsFolder) {
  ASSERT_TRUE(registerFamily(std::make_unique<MetaFamily>()));
  EXPECT_FALSE(registerFamily(std::make_unique<MetaFamily>())); // name taken
  ASSERT_TRUE(findFamily("meta"));
  TempDir dir;
  json doc = model({{"family", "meta"}}, json::object());
  doc["modules"].erase(0); // the language model alone
  doc["modules"][0].erase("parallel");
  doc.erase("data");
  ParseResult parsed = parse(doc);
  ASSERT_TRUE(parsed.config) << describe(parsed.diagnostics);
  const ModuleConfig &language = parsed.config->language();
  EXPECT_EQ(language.family().name(), "meta");
  EXPECT_EQ(toJson(*parsed.config)["modules"][0]["arch"]["family"], "meta");
  const std::string save = (dir.path / "save").string();
  ASSERT_NO_FATAL_FAILURE(trainOneStep(*parsed.config, save));

  const fs::path out = dir.path / "meta";
  std::vector<std::string> written;
  exec::HfExportOptions options;
  std::string error =
      exec::exportHf(*parsed.config, save, out.string(), options, written);
  ASSERT_EQ(error, "");
  std::optional<exec::HfFolder> folder =
      exec::openHfFolder(out.string(), error);
  ASSERT_TRUE(folder) << error;
  EXPECT_EQ(folder->config["model_type"], "meta_llama");
  EXPECT_EQ(folder->config["n_layers"], 2);
  EXPECT_TRUE(folder->find("tok_embeddings.weight"));
  EXPECT_TRUE(folder->find("layers.1.feed_forward.w3.weight"));
  EXPECT_FALSE(folder->find("model.embed_tokens.weight"));
  EXPECT_TRUE(exec::hfConfigProblems(*folder, language).empty());
  EXPECT_EQ(exec::hfTensorProblem(*folder, *parsed.config, language), "");

  // Read back, bit for bit against the checkpoint.
  std::optional<exec::Checkpoint> ckpt =
      exec::openCheckpoint(save, *parsed.config, error, true);
  ASSERT_TRUE(ckpt) << error;
  ASSERT_NO_FATAL_FAILURE(
      hftest::expectReadsBackBitForBit(*folder, language, 8, *ckpt));

  // The model starts from the folder; a config.json that disagrees with
  // the arch is named at the arch key, with the file's key.
  json init = doc;
  init["modules"][0]["init"] = {{"from", out.string()}, {"format", "hf"}};
  ParseResult fromFolder = parse(init);
  ASSERT_TRUE(fromFolder.config) << describe(fromFolder.diagnostics);
  EXPECT_TRUE(exec::initProblems(*fromFolder.config).empty())
      << describe(exec::initProblems(*fromFolder.config));
  folder->text["n_layers"] = 3;
  std::vector<Diagnostic> problems = exec::hfConfigProblems(*folder, language);
  ASSERT_EQ(problems.size(), 1u) << describe(problems);
  EXPECT_EQ(problems[0].pointer, "/modules/0/arch/num_layers");
  EXPECT_NE(problems[0].message.find("/n_layers"), std::string::npos);
}
