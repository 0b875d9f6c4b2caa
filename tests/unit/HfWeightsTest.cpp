//===- HfWeightsTest.cpp - Hugging Face folders in ------------------------===//
//
// docs/pretrained.md: what mimoc compile says of a Hugging Face folder that
// does not fit the model (config.json against arch, with both pointers;
// missing, unexpected, misshapen and unreadable tensors; broken indexes),
// and how a rank's block of each tensor is read (transposed, converted).
// The end-to-end proof against an independent model is tests/e2e/twin.py.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/HfWeights.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/FileIo.h"
#include "runtime/checkpoint/HfExport.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/config/Parameters.h"
#include "runtime/device/Device.h"
#include "runtime/exec/Executor.h"
#include "runtime/model/Model.h"
#include "runtime/plan/PlanFile.h"
#include "tests/unit/HfReadBack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <sys/stat.h>

using namespace mimo;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "mimo-hf-XXXXXX");
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

constexpr int64_t V = 16, H = 8, L = 2, N = 2, G = 1, F = 12;

/// A one-module model.json (the language model) starting from `dir`.
json modelJson(const std::string &dir) {
  return {
      {"version", 1},
      {"name", "hf"},
      {"world_size", 1},
      {"batch",
       {{"micro_batch_size", 1}, {"num_microbatches", 1}, {"seq_length", 8}}},
      {"modules",
       {{{"name", "language"},
         {"kind", "language"},
         {"arch",
          {{"vocab_size", V},
           {"hidden_size", H},
           {"num_layers", L},
           {"num_heads", N},
           {"num_query_groups", G},
           {"ffn_hidden_size", F},
           {"rope_theta", 500000},
           {"norm_eps", 1e-6}}},
         {"init", {{"from", dir}, {"format", "hf"}}}}}}};
}

json hfConfig() {
  return {{"model_type", "llama"},
          {"hidden_size", H},
          {"num_hidden_layers", L},
          {"num_attention_heads", N},
          {"num_key_value_heads", G},
          {"intermediate_size", F},
          {"vocab_size", V},
          {"rope_theta", 500000.0},
          {"rms_norm_eps", 1e-6},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false}};
}

/// Every tensor of the model above under its Hugging Face name and shape
/// ([out, in] for linear layers), element i = value(name) + i / 1000.
std::vector<std::pair<std::string, std::vector<int64_t>>> hfTensors() {
  const int64_t d = H / N, KV = G * d;
  std::vector<std::pair<std::string, std::vector<int64_t>>> t = {
      {"model.embed_tokens.weight", {V, H}},
      {"model.norm.weight", {H}},
      {"lm_head.weight", {V, H}}};
  for (int64_t l = 0; l < L; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {H}});
    t.push_back({p + "post_attention_layernorm.weight", {H}});
    t.push_back({p + "self_attn.q_proj.weight", {H, H}});
    t.push_back({p + "self_attn.k_proj.weight", {KV, H}});
    t.push_back({p + "self_attn.v_proj.weight", {KV, H}});
    t.push_back({p + "self_attn.o_proj.weight", {H, H}});
    t.push_back({p + "mlp.gate_proj.weight", {F, H}});
    t.push_back({p + "mlp.up_proj.weight", {F, H}});
    t.push_back({p + "mlp.down_proj.weight", {H, F}});
  }
  return t;
}

/// Writes `tensors` as a safetensors file of `dtype` (F32 or BF16; values
/// i / 1000, bf16-exact where needed: multiples of 1/128 below 2).
void writeFile(
    const fs::path &path,
    const std::vector<std::pair<std::string, std::vector<int64_t>>> &tensors,
    const std::string &dtype = "F32") {
  safetensors::Header header;
  for (const auto &[name, shape] : tensors)
    header.tensors.push_back({name, dtype, shape, 0, 0});
  std::string bytes = safetensors::encodeHeader(header);
  for (const safetensors::TensorEntry &t : header.tensors) {
    int64_t n = 1;
    for (int64_t s : t.shape)
      n *= s;
    for (int64_t i = 0; i < n; ++i) {
      float x = static_cast<float>(i % 256) / 128.0f;
      if (dtype == "BF16") {
        uint32_t bits;
        std::memcpy(&bits, &x, 4);
        uint16_t top = static_cast<uint16_t>(bits >> 16);
        bytes.append(reinterpret_cast<const char *>(&top), 2);
      } else if (dtype == "F32") {
        bytes.append(reinterpret_cast<const char *>(&x), 4);
      } else {
        bytes.append(static_cast<size_t>(safetensors::dtypeSize(dtype)), '\0');
      }
    }
  }
  std::ofstream(path, std::ios::binary) << bytes;
}

void writeFolder(
    const fs::path &dir, const json &config,
    const std::vector<std::pair<std::string, std::vector<int64_t>>> &tensors,
    const std::string &dtype = "F32") {
  std::ofstream(dir / "config.json") << config.dump(2);
  writeFile(dir / "model.safetensors", tensors, dtype);
}

std::vector<Diagnostic> problemsOf(const json &model) {
  ParseResult parsed = parseModelConfig(model.dump(), "model.json");
  if (!parsed.config)
    return parsed.diagnostics;
  return exec::initProblems(*parsed.config);
}

std::string describe(const std::vector<Diagnostic> &problems) {
  std::string out;
  for (const Diagnostic &d : problems)
    out += d.pointer + ": " + d.message + "\n";
  return out;
}

TEST(HfWeights, AFolderThatFitsHasNoProblems) {
  TempDir dir;
  writeFolder(dir.path, hfConfig(), hfTensors(), "BF16");
  std::vector<Diagnostic> problems = problemsOf(modelJson(dir.path.string()));
  EXPECT_TRUE(problems.empty()) << describe(problems);
}

/// Every config.json mismatch is named at the model.json key, with the
/// config's key and value and the fix.
TEST(HfWeights, ConfigMismatchesNameBothPointers) {
  TempDir dir;
  json config = hfConfig();
  config["hidden_size"] = 16;
  config["num_key_value_heads"] = 2;
  config["rope_theta"] = 10000.0;
  config["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", 8.0},
                            {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 8192}};
  writeFolder(dir.path, config, hfTensors());
  std::vector<Diagnostic> problems = problemsOf(modelJson(dir.path.string()));
  std::string all = describe(problems);
  ASSERT_EQ(problems.size(), 4u) << all;
  EXPECT_EQ(problems[0].pointer, "/modules/0/arch/hidden_size");
  EXPECT_NE(problems[0].message.find("8 here, but /hidden_size of " +
                                     (dir.path / "config.json").string() +
                                     " is 16: set arch.hidden_size to 16"),
            std::string::npos)
      << all;
  EXPECT_EQ(problems[1].pointer, "/modules/0/arch/num_query_groups");
  EXPECT_EQ(problems[2].pointer, "/modules/0/arch/rope_theta");
  EXPECT_NE(problems[2].message.find("500000 here, but /rope_theta"),
            std::string::npos)
      << all;
  EXPECT_EQ(problems[3].pointer, "/modules/0/arch/rope_scaling");
  EXPECT_NE(problems[3].message.find("copy it into arch.rope_scaling"),
            std::string::npos)
      << all;
  // Another family, and what mimo does not compute.
  config = hfConfig();
  config["model_type"] = "gpt2";
  writeFolder(dir.path, config, hfTensors());
  problems = problemsOf(modelJson(dir.path.string()));
  ASSERT_EQ(problems.size(), 1u) << describe(problems);
  EXPECT_EQ(problems[0].pointer, "/modules/0/init/from");
  EXPECT_NE(problems[0].message.find("a 'gpt2'"), std::string::npos);
  config = hfConfig();
  config["attention_bias"] = true;
  writeFolder(dir.path, config, hfTensors());
  problems = problemsOf(modelJson(dir.path.string()));
  ASSERT_EQ(problems.size(), 1u) << describe(problems);
  EXPECT_NE(problems[0].message.find("none on o"), std::string::npos);
}

/// head_dim (Qwen3's wider heads): config.json's against arch.head_dim,
/// absent meaning hidden_size / num_heads on both sides; a mismatch names
/// arch.head_dim and the value to set.
TEST(HfWeights, HeadDimIsCheckedAgainstTheArch) {
  TempDir dir;
  json config = hfConfig();
  config["head_dim"] = H / N;
  writeFolder(dir.path, config, hfTensors());
  EXPECT_TRUE(problemsOf(modelJson(dir.path.string())).empty());
  config["head_dim"] = 2 * H / N;
  writeFolder(dir.path, config, hfTensors());
  std::vector<Diagnostic> problems = problemsOf(modelJson(dir.path.string()));
  std::string all = describe(problems);
  ASSERT_FALSE(problems.empty()) << all;
  EXPECT_EQ(problems[0].pointer, "/modules/0/arch/head_dim") << all;
  EXPECT_NE(problems[0].message.find("set arch.head_dim to " +
                                     std::to_string(2 * H / N)),
            std::string::npos)
      << all;
}

/// Round 3: a value of config.json given as the wrong JSON type (a string
/// "500000") is named, never replaced by the default.
TEST(HfWeights, ValuesOfTheWrongTypeAreNamedNotDefaulted) {
  TempDir dir;
  json config = hfConfig();
  config["rope_theta"] = "500000";
  config["rope_scaling"] = "llama3";
  config["tie_word_embeddings"] = "false";
  config["num_key_value_heads"] = 4.0;
  writeFolder(dir.path, config, hfTensors());
  std::vector<Diagnostic> problems = problemsOf(modelJson(dir.path.string()));
  std::string all = describe(problems);
  ASSERT_EQ(problems.size(), 4u) << all;
  for (const char *key :
       {"rope_theta", "rope_scaling", "tie_embeddings", "num_query_groups"})
    EXPECT_NE(all.find(std::string("/modules/0/arch/") + key + ": "),
              std::string::npos)
        << key << "\n"
        << all;
  EXPECT_NE(all.find("/rope_theta of " + (dir.path / "config.json").string() +
                     " is \"500000\", not a number"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("not an object (or null)"), std::string::npos) << all;
  EXPECT_NE(all.find("not an integer"), std::string::npos) << all;
  // null is absent: the default.
  config = hfConfig();
  config["rope_scaling"] = nullptr;
  writeFolder(dir.path, config, hfTensors());
  EXPECT_TRUE(problemsOf(modelJson(dir.path.string())).empty());
}

/// Round 3: mimoc compile checks a mimo checkpoint init as mimo-run will
/// (it accepted a missing one).
TEST(HfWeights, AMissingMimoCheckpointInitIsAProblemAtCompileTime) {
  TempDir dir;
  json model = modelJson(dir.path.string());
  model["modules"][0]["init"] = {{"from", (dir.path / "no-such-run").string()},
                                 {"format", "mimo"}};
  std::vector<Diagnostic> problems = problemsOf(model);
  ASSERT_EQ(problems.size(), 1u) << describe(problems);
  EXPECT_EQ(problems[0].pointer, "/modules/0/init/from");
  EXPECT_NE(problems[0].message.find("no-such-run"), std::string::npos)
      << describe(problems);
}

/// Mistral's sliding window: the same as whole-sample attention while
/// samples fit it; past that, refused at /batch/seq_length.
TEST(HfWeights, ASlidingWindowShorterThanTheSamplesIsRefused) {
  TempDir dir;
  json config = hfConfig();
  config["model_type"] = "mistral";
  config["sliding_window"] = 4;
  writeFolder(dir.path, config, hfTensors());
  std::vector<Diagnostic> problems = problemsOf(modelJson(dir.path.string()));
  ASSERT_EQ(problems.size(), 1u) << describe(problems);
  EXPECT_EQ(problems[0].pointer, "/batch/seq_length");
  EXPECT_NE(problems[0].message.find("keep seq_length at most 4"),
            std::string::npos);
  config["sliding_window"] = 8; // seq_length 8
  writeFolder(dir.path, config, hfTensors());
  EXPECT_TRUE(problemsOf(modelJson(dir.path.string())).empty());
  config["sliding_window"] = 4;
  config["use_sliding_window"] = false; // Qwen2's switch
  writeFolder(dir.path, config, hfTensors());
  EXPECT_TRUE(problemsOf(modelJson(dir.path.string())).empty());
}

TEST(HfWeights, TensorProblemsNameTheFileAndTheTensor) {
  TempDir dir;
  auto tensors = hfTensors();
  // Missing.
  auto missing = tensors;
  missing.pop_back(); // layer 1's down_proj
  writeFolder(dir.path, hfConfig(), missing);
  std::vector<Diagnostic> problems = problemsOf(modelJson(dir.path.string()));
  ASSERT_EQ(problems.size(), 1u) << describe(problems);
  EXPECT_EQ(problems[0].pointer, "/modules/0/init/from");
  EXPECT_NE(problems[0].message.find(
                "tensor 'model.layers.1.mlp.down_proj.weight' is missing "
                "(mimo's 'language.layers.1.down')"),
            std::string::npos)
      << problems[0].message;
  // Unexpected: a third layer's.
  auto extra = tensors;
  extra.push_back({"model.layers.2.self_attn.q_proj.weight", {H, H}});
  writeFolder(dir.path, hfConfig(), extra);
  problems = problemsOf(modelJson(dir.path.string()));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("tensor "
                                     "'model.layers.2.self_attn.q_proj.weight' "
                                     "is not a parameter of this model"),
            std::string::npos)
      << problems[0].message;
  // RoPE's cached frequencies are not an error.
  auto cached = tensors;
  cached.push_back(
      {"model.layers.0.self_attn.rotary_emb.inv_freq", {H / N / 2}});
  writeFolder(dir.path, hfConfig(), cached);
  problems = problemsOf(modelJson(dir.path.string()));
  EXPECT_TRUE(problems.empty()) << describe(problems);
  // Misshapen: k_proj as if every head had its own.
  auto shaped = tensors;
  for (auto &[name, shape] : shaped)
    if (name == "model.layers.0.self_attn.k_proj.weight")
      shape = {H, H};
  writeFolder(dir.path, hfConfig(), shaped);
  problems = problemsOf(modelJson(dir.path.string()));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("has shape [8, 8], but mimo's "
                                     "'language.layers.0.wk' needs [4, 8]"),
            std::string::npos)
      << problems[0].message;
  // An integer dtype.
  writeFolder(dir.path, hfConfig(), tensors, "I8");
  problems = problemsOf(modelJson(dir.path.string()));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("is I8; mimo reads BF16, F16 and F32"),
            std::string::npos)
      << problems[0].message;
  // No folder at all.
  problems = problemsOf(modelJson((dir.path / "nowhere").string()));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("config.json"), std::string::npos);
}

TEST(HfWeights, ShardsAndTheLlavaLayout) {
  TempDir dir;
  // Two shards; the index names a third file that is not there.
  auto tensors = hfTensors();
  std::vector<std::pair<std::string, std::vector<int64_t>>> a(
      tensors.begin(), tensors.begin() + 5),
      b(tensors.begin() + 5, tensors.end());
  writeFile(dir.path / "model-1.safetensors", a);
  writeFile(dir.path / "model-2.safetensors", b);
  std::ofstream(dir.path / "config.json") << hfConfig().dump();
  json map;
  for (auto &[name, shape] : a)
    map[name] = "model-1.safetensors";
  for (auto &[name, shape] : b)
    map[name] = "model-2.safetensors";
  std::ofstream(dir.path / "model.safetensors.index.json")
      << json{{"weight_map", map}}.dump();
  EXPECT_TRUE(problemsOf(modelJson(dir.path.string())).empty());
  map["model.norm.weight"] = "model-3.safetensors";
  std::ofstream(dir.path / "model.safetensors.index.json")
      << json{{"weight_map", map}}.dump();
  std::vector<Diagnostic> problems = problemsOf(modelJson(dir.path.string()));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("model-3.safetensors"), std::string::npos)
      << problems[0].message;

  // LLaVA: the language model under language_model., its config the
  // text_config; the vision tower's tensors are another module's.
  TempDir llava;
  auto prefixed = hfTensors();
  for (auto &[name, shape] : prefixed)
    name = "language_model." + name;
  prefixed.push_back({"vision_tower.vision_model.post_layernorm.weight", {4}});
  writeFolder(llava.path,
              {{"model_type", "llava"}, {"text_config", hfConfig()}}, prefixed);
  problems = problemsOf(modelJson(llava.path.string()));
  EXPECT_TRUE(problems.empty()) << describe(problems);
}

/// A rank's block: mimo's [in, out] block of a transposed [out, in] tensor,
/// bf16 widened exactly.
TEST(HfWeights, EachRankReadsItsBlockTransposedAndWidened) {
  TempDir dir;
  writeFolder(dir.path, hfConfig(), hfTensors(), "BF16");
  ParseResult parsed =
      parseModelConfig(modelJson(dir.path.string()).dump(), "m.json");
  ASSERT_TRUE(parsed.config);
  std::string error;
  std::optional<exec::HfFolder> folder =
      exec::openHfFolder(dir.path.string(), error);
  ASSERT_TRUE(folder) << error;
  std::unique_ptr<device::Device> cpu = device::makeCpuDevice();
  // TP rank 1 of 2's block of wq [H, H] (columns 4..8) and of the head
  // [H, V] (columns 8..16), and the embedding's rows 8..16.
  auto block = [&](const std::string &local, int64_t r0, int64_t r1, int64_t c0,
                   int64_t c1, int64_t rows, int64_t cols) {
    exec::Param p;
    p.name = "language." + local;
    p.rowBegin = r0, p.rowEnd = r1, p.colBegin = c0, p.colEnd = c1;
    p.globalRows = rows, p.globalCols = cols;
    p.value = device::Tensor::empty(*cpu, (r1 - r0) * (c1 - c0));
    return p;
  };
  exec::Param wq = block("layers.0.wq", 0, H, 4, 8, H, H);
  exec::Param head = block("head", 0, H, 8, 16, H, V);
  exec::Param embedding = block("embedding", 8, 16, 0, H, V, H);
  exec::readHfWeights(*folder, parsed.config->language(),
                      {&wq, &head, &embedding});
  auto expect = [](int64_t element) {
    return static_cast<float>(element % 256) / 128.0f;
  };
  std::vector<float> got = wq.value.toHost();
  for (int64_t r = 0; r < H; ++r)
    for (int64_t c = 4; c < 8; ++c) // mimo wq[r][c] = q_proj[c][r]
      ASSERT_EQ(got[static_cast<size_t>(r * 4 + c - 4)], expect(c * H + r))
          << r << ", " << c;
  got = head.value.toHost();
  for (int64_t r = 0; r < H; ++r)
    for (int64_t c = 8; c < 16; ++c) // head[h][v] = lm_head[v][h]
      ASSERT_EQ(got[static_cast<size_t>(r * 8 + c - 8)], expect(c * H + r));
  got = embedding.value.toHost();
  for (int64_t r = 8; r < 16; ++r)
    for (int64_t c = 0; c < H; ++c)
      ASSERT_EQ(got[static_cast<size_t>((r - 8) * H + c)], expect(r * H + c));
}

/// --export-hf (docs/pretrained.md): a trained checkpoint's language model
/// as a Hugging Face folder that init format hf accepts as it is (config
/// and tensors), sharded when a file would pass the limit, fp32 or bf16;
/// an existing folder is never overwritten. (tests/e2e/twin.py checks the
/// exported model's losses against an independent PyTorch model.)
/// Trains `model` one step, saving into `saveDir`.
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

exec::HfExportOptions exportOptions(const std::string &dtype,
                                    int64_t shardBytes = exec::kHfShardBytes,
                                    bool perModule = false) {
  exec::HfExportOptions options;
  options.dtype = dtype;
  options.shardBytes = shardBytes;
  options.perModule = perModule;
  return options;
}

TEST(HfExport, ACheckpointExportsToAFolderInitReads) {
  TempDir dir;
  json model = modelJson("");
  model["modules"][0].erase("init");
  model["modules"][0]["arch"]["qkv_bias"] = true; // a Qwen2
  ParseResult parsed = parseModelConfig(model.dump(), "m.json");
  ASSERT_TRUE(parsed.config) << describe(parsed.diagnostics);
  exec::RunOptions options;
  options.saveDir = (dir.path / "save").string();
  ASSERT_NO_FATAL_FAILURE(trainOneStep(*parsed.config, options.saveDir));
  std::string error;

  const ModuleConfig &language = parsed.config->language();
  for (const char *dtype : {"fp32", "bf16"}) {
    SCOPED_TRACE(dtype);
    const fs::path out = dir.path / dtype;
    std::vector<std::string> written;
    error = exec::exportHf(*parsed.config, options.saveDir, out.string(),
                           exportOptions(dtype, 1024), written);
    ASSERT_EQ(error, "");
    ASSERT_EQ(written.size(), 2u); // the folder, and no tokenizer to copy
    EXPECT_NE(written[0].find("shards"), std::string::npos) << written[0];
    EXPECT_NE(written[1].find("no tokenizer"), std::string::npos) << written[1];
    const fs::path folderPath = out; // a language model alone: OUT itself
    EXPECT_TRUE(fs::exists(folderPath / "model.safetensors.index.json"));
    EXPECT_FALSE(
        fs::exists(dir.path / ("." + std::string(dtype) + ".partial")));
    std::optional<exec::HfFolder> folder =
        exec::openHfFolder(folderPath.string(), error);
    ASSERT_TRUE(folder) << error;
    EXPECT_GT(folder->files.size(), 1u);
    EXPECT_EQ(folder->config["model_type"], "qwen2");
    std::vector<Diagnostic> problems =
        exec::hfConfigProblems(*folder, language);
    EXPECT_TRUE(problems.empty()) << describe(problems);
    EXPECT_EQ(exec::hfTensorProblem(*folder, *parsed.config, language), "");
    const safetensors::TensorEntry *k =
        folder->find("model.layers.1.self_attn.k_proj.weight");
    ASSERT_TRUE(k);
    EXPECT_EQ(k->dtype, std::string(dtype) == "bf16" ? "BF16" : "F32");
    EXPECT_EQ(k->shape, (std::vector<int64_t>{G * H / N, H}));
    // Never over an earlier export.
    written.clear();
    error = exec::exportHf(*parsed.config, options.saveDir, out.string(),
                           exportOptions(dtype, 1024), written);
    EXPECT_NE(error.find("it exists; remove it"), std::string::npos) << error;
  }
}

/// docs/pretrained.md: the export keeps what the pretrained folder said (bos
/// and eos ids, max_position_embeddings, not this run's seq_length) and copies
/// its tokenizer and generation_config.json, also two stages later (the first
/// stage's checkpoint records the folder it started from); integers stay
/// integers; a FIFO where a tokenizer file would be is left alone.
TEST(HfExport, PretrainedValuesAndTokenizerFilesComeAlong) {
  TempDir dir;
  const fs::path pretrained = dir.path / "pretrained";
  fs::create_directories(pretrained);
  json config = hfConfig();
  config["bos_token_id"] = 1;
  config["eos_token_id"] = {2, 3};
  config["max_position_embeddings"] = 4096;
  writeFolder(pretrained, config, hfTensors());
  std::ofstream(pretrained / "tokenizer.json") << "{\"model\": {}}\n";
  std::ofstream(pretrained / "generation_config.json")
      << "{\"bos_token_id\": 1, \"eos_token_id\": [2, 3]}\n";
  ASSERT_EQ(::mkfifo((pretrained / "tokenizer.model").c_str(), 0600), 0);

  ParseResult stage1 =
      parseModelConfig(modelJson(pretrained.string()).dump(), "m.json");
  ASSERT_TRUE(stage1.config) << describe(stage1.diagnostics);
  const fs::path save1 = dir.path / "stage1";
  ASSERT_NO_FATAL_FAILURE(trainOneStep(*stage1.config, save1.string()));
  json model2 = modelJson("");
  model2["modules"][0]["init"] = {{"from", save1.string()}, {"format", "mimo"}};
  ParseResult stage2 = parseModelConfig(model2.dump(), "m.json");
  ASSERT_TRUE(stage2.config) << describe(stage2.diagnostics);
  const fs::path save2 = dir.path / "stage2";
  ASSERT_NO_FATAL_FAILURE(trainOneStep(*stage2.config, save2.string()));
  std::ifstream stateFile(save2 / "step-1" / "state.json");
  json state = json::parse(stateFile);
  EXPECT_EQ(state["hf_origin"]["language"], pretrained.string());

  for (const auto &[save, parsed] :
       {std::pair{save1, &stage1}, std::pair{save2, &stage2}}) {
    SCOPED_TRACE(save.string());
    const fs::path out = dir.path / ("out-" + save.filename().string());
    fs::create_directories(out); // an empty folder may be given
    std::vector<std::string> written;
    std::string error =
        exec::exportHf(*parsed->config, save.string(), out.string(),
                       exportOptions("fp32"), written);
    ASSERT_EQ(error, "");
    ASSERT_EQ(written.size(), 1u);
    EXPECT_NE(written[0].find("copied tokenizer.json, generation_config.json"),
              std::string::npos)
        << written[0];
    EXPECT_TRUE(fs::is_regular_file(out / "tokenizer.json"));
    EXPECT_TRUE(fs::is_regular_file(out / "generation_config.json"));
    EXPECT_FALSE(fs::exists(out / "tokenizer.model"));
    std::ifstream in(out / "config.json");
    json c = json::parse(in);
    EXPECT_EQ(c["bos_token_id"], 1);
    EXPECT_EQ(c["eos_token_id"], json({2, 3}));
    EXPECT_EQ(c["max_position_embeddings"], 4096);
    EXPECT_TRUE(c["max_position_embeddings"].is_number_integer());
  }

  // Without a pretrained folder: seq_length, and a llama3 rescaling's
  // original_max_position_embeddings as an integer.
  json scaled = modelJson("");
  scaled["modules"][0].erase("init");
  scaled["modules"][0]["arch"]["rope_scaling"] = {
      {"type", "llama3"},
      {"factor", 8},
      {"low_freq_factor", 1},
      {"high_freq_factor", 4},
      {"original_max_position_embeddings", 64}};
  ParseResult parsed = parseModelConfig(scaled.dump(), "m.json");
  ASSERT_TRUE(parsed.config) << describe(parsed.diagnostics);
  const nlohmann::ordered_json c =
      exec::hfConfigOf(*parsed.config, parsed.config->language(), "bf16");
  EXPECT_EQ(c["max_position_embeddings"], 8);
  EXPECT_TRUE(
      c["rope_scaling"]["original_max_position_embeddings"].is_number_integer())
      << c["rope_scaling"].dump();
  EXPECT_EQ(c["rope_scaling"]["original_max_position_embeddings"], 64);
}

// ---------------------------------------------------------------------------
// Vision towers (CLIP, SigLIP) and LLaVA's projector.

constexpr int64_t EH = 8, EL = 2, EN = 2, EF = 12, ED = 12; // 3 x 2 x 2

/// A two-module model: a CLIP-like encoder (4 patches of a 4x4 image, the
/// class token's row: 5 positions; the penultimate layer) starting from
/// `dir`, and the language model above from random weights.
json visionModelJson(const std::string &dir) {
  json model = modelJson("");
  model["world_size"] = 2;
  json language = model["modules"][0];
  language.erase("init");
  language["parallel"] = {{"rank_offset", 1}};
  json encoder = {{"name", "images"},
                  {"kind", "encoder"},
                  {"special_token_id", V - 1},
                  {"arch",
                   {{"feature_dim", ED},
                    {"hidden_size", EH},
                    {"num_layers", EL},
                    {"num_heads", EN},
                    {"ffn_hidden_size", EF},
                    {"bias", true},
                    {"position_embeddings", "learned"},
                    {"max_positions", 5},
                    {"pre_norm", true},
                    {"class_token", true},
                    {"patch_bias", false},
                    {"output_layer", -2},
                    {"activation", "quick_gelu"},
                    {"projector_activation", "gelu"}}}};
  if (!dir.empty())
    encoder["init"] = {{"from", dir}, {"format", "hf"}};
  model["modules"] = {encoder, language};
  model["data"] = {{"source", "synthetic"},
                   {"tokens_per_sample", {{"images", {4, 4}}}}};
  return model;
}

json clipConfig() {
  return {{"model_type", "clip_vision_model"},
          {"hidden_size", EH},
          {"intermediate_size", EF},
          {"num_hidden_layers", EL},
          {"num_attention_heads", EN},
          {"num_channels", 3},
          {"patch_size", 2},
          {"image_size", 4},
          {"layer_norm_eps", 1e-5},
          {"hidden_act", "quick_gelu"}};
}

/// A CLIPVisionModel's tensors (every layer, the post-layernorm, a cached
/// position_ids), with LLaVA's projector when `projector`.
std::vector<std::pair<std::string, std::vector<int64_t>>>
clipTensors(const std::string &prefix, bool projector,
            const std::string &projectorPrefix = "multi_modal_projector.") {
  std::vector<std::pair<std::string, std::vector<int64_t>>> t = {
      {prefix + "embeddings.patch_embedding.weight", {EH, 3, 2, 2}},
      {prefix + "embeddings.class_embedding", {EH}},
      {prefix + "embeddings.position_embedding.weight", {5, EH}},
      {prefix + "embeddings.position_ids", {1, 5}},
      {prefix + "pre_layrnorm.weight", {EH}},
      {prefix + "pre_layrnorm.bias", {EH}},
      {prefix + "post_layernorm.weight", {EH}},
      {prefix + "post_layernorm.bias", {EH}}};
  for (int64_t l = 0; l < EL; ++l) {
    std::string p = prefix + "encoder.layers." + std::to_string(l) + ".";
    for (const char *n : {"layer_norm1", "layer_norm2"}) {
      t.push_back({p + n + ".weight", {EH}});
      t.push_back({p + n + ".bias", {EH}});
    }
    for (const char *n : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      t.push_back({p + "self_attn." + n + ".weight", {EH, EH}});
      t.push_back({p + "self_attn." + n + ".bias", {EH}});
    }
    t.push_back({p + "mlp.fc1.weight", {EF, EH}});
    t.push_back({p + "mlp.fc1.bias", {EF}});
    t.push_back({p + "mlp.fc2.weight", {EH, EF}});
    t.push_back({p + "mlp.fc2.bias", {EH}});
  }
  if (projector) {
    t.push_back({projectorPrefix + "linear_1.weight", {H, EH}});
    t.push_back({projectorPrefix + "linear_1.bias", {H}});
    t.push_back({projectorPrefix + "linear_2.weight", {H, H}});
    t.push_back({projectorPrefix + "linear_2.bias", {H}});
  }
  return t;
}

template <typename Pred>
void dropTensors(
    std::vector<std::pair<std::string, std::vector<int64_t>>> &tensors,
    Pred pred) {
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(), pred),
                tensors.end());
}

/// docs/pretrained.md: an encoder reads a CLIP vision model folder (its
/// projector then starts from mimo's init), a LLaVA folder (tower under
/// vision_tower., projector, language model), and SigLIP's; the layers
/// after output_layer, CLIP's post-layernorm and cached buffers are read
/// past.
TEST(HfVision, ClipLlavaAndSiglipFoldersFitTheirArch) {
  TempDir clip;
  writeFolder(clip.path, clipConfig(), clipTensors("vision_model.", false));
  std::vector<Diagnostic> problems =
      problemsOf(visionModelJson(clip.path.string()));
  EXPECT_TRUE(problems.empty()) << describe(problems);

  TempDir llava;
  auto tensors = clipTensors("vision_tower.vision_model.", true);
  for (auto [name, shape] : hfTensors())
    tensors.push_back({"language_model." + name, shape});
  json config = {{"model_type", "llava"},
                 {"vision_config", clipConfig()},
                 {"text_config", hfConfig()},
                 {"projector_hidden_act", "gelu"},
                 {"vision_feature_layer", -2},
                 {"vision_feature_select_strategy", "default"}};
  writeFolder(llava.path, config, tensors, "BF16");
  json model = visionModelJson(llava.path.string());
  model["modules"][1]["init"] = {{"from", llava.path.string()},
                                 {"format", "hf"}};
  problems = problemsOf(model);
  EXPECT_TRUE(problems.empty()) << describe(problems);

  // The layout transformers writes since 4.52: model.language_model.*,
  // lm_head, model.vision_tower.*, model.multi_modal_projector.*.
  TempDir since452;
  tensors = clipTensors("model.vision_tower.vision_model.", true,
                        "model.multi_modal_projector.");
  for (auto [name, shape] : hfTensors())
    tensors.push_back({name.rfind("model.", 0) == 0
                           ? "model.language_model." + name.substr(6)
                           : name,
                       shape});
  writeFolder(since452.path, config, tensors, "BF16");
  model = visionModelJson(since452.path.string());
  model["modules"][1]["init"] = {{"from", since452.path.string()},
                                 {"format", "hf"}};
  problems = problemsOf(model);
  EXPECT_TRUE(problems.empty()) << describe(problems);
  std::string error;
  std::optional<exec::HfFolder> opened =
      exec::openHfFolder(since452.path.string(), error);
  ASSERT_TRUE(opened) << error;
  EXPECT_EQ(opened->layout.languageBody, "model.language_model.");
  EXPECT_EQ(opened->layout.languageHead, "");
  EXPECT_EQ(opened->layout.vision, "model.vision_tower.vision_model.");
  EXPECT_EQ(opened->layout.projector, "model.multi_modal_projector.");

  TempDir siglip;
  json sc = clipConfig();
  sc["model_type"] = "siglip_vision_model";
  sc["hidden_act"] = "gelu_pytorch_tanh";
  sc["layer_norm_eps"] = 1e-6;
  tensors = clipTensors("vision_model.", true);
  dropTensors(tensors, [](const auto &t) {
    return t.first.find("class_embedding") != std::string::npos ||
           t.first.find("pre_layrnorm") != std::string::npos ||
           t.first.find("position_ids") != std::string::npos;
  });
  for (auto &[name, shape] : tensors)
    if (name.find("position_embedding") != std::string::npos)
      shape = {4, EH};
  tensors.push_back({"vision_model.embeddings.patch_embedding.bias", {EH}});
  tensors.push_back({"vision_model.head.probe", {1, 1, EH}}); // pooling head
  writeFolder(siglip.path, sc, tensors);
  model = visionModelJson(siglip.path.string());
  json &arch = model["modules"][0]["arch"];
  arch.erase("pre_norm"), arch.erase("class_token"), arch.erase("patch_bias");
  arch["max_positions"] = 4;
  arch["final_norm"] = true;
  arch["norm_eps"] = 1e-6;
  arch["activation"] = "gelu_tanh";
  arch["output_layer"] = -1;
  problems = problemsOf(model);
  EXPECT_TRUE(problems.empty()) << describe(problems);
}

TEST(HfVision, MismatchesNameBothPointersAndTheFix) {
  TempDir dir;
  json config = {{"model_type", "llava"},
                 {"vision_config", clipConfig()},
                 {"text_config", hfConfig()},
                 {"projector_hidden_act", "gelu_pytorch_tanh"},
                 {"vision_feature_layer", -1},
                 {"vision_feature_select_strategy", "full"}};
  config["vision_config"]["patch_size"] = 4; // 48 values, 1 patch
  config["vision_config"]["hidden_act"] = "relu";
  writeFolder(dir.path, config,
              clipTensors("vision_tower.vision_model.", true));
  json model = visionModelJson(dir.path.string());
  model["modules"][0]["arch"]["final_norm"] = true;
  std::vector<Diagnostic> problems = problemsOf(model);
  const std::string all = describe(problems);
  auto has = [&](const std::string &pointer, const std::string &text) {
    for (const Diagnostic &d : problems)
      if (d.pointer == pointer && d.message.find(text) != std::string::npos)
        return true;
    return false;
  };
  EXPECT_TRUE(has("/modules/0/arch/feature_dim",
                  "/vision_config/patch_size of " + dir.path.string()))
      << all;
  EXPECT_TRUE(has("/modules/0/arch/feature_dim", "48 values")) << all;
  EXPECT_TRUE(
      has("/modules/0/arch/max_positions", "set arch.max_positions to 2"))
      << all;
  EXPECT_TRUE(has("/modules/0/arch/activation", "'relu', which mimo does not"))
      << all;
  EXPECT_TRUE(has("/modules/0/arch/output_layer",
                  "/vision_feature_layer of " + dir.path.string()))
      << all;
  EXPECT_TRUE(has("/modules/0/arch/class_token", "keeps every row")) << all;
  EXPECT_TRUE(has("/modules/0/arch/projector_activation",
                  "set arch.projector_activation to \"gelu_tanh\""))
      << all;
  EXPECT_TRUE(has("/modules/0/arch/final_norm", "post_layernorm")) << all;

  // A language model's folder has no tower; a Llama is not a tower.
  TempDir llama;
  writeFolder(llama.path, hfConfig(), hfTensors());
  problems = problemsOf(visionModelJson(llama.path.string()));
  ASSERT_EQ(problems.size(), 1u) << describe(problems);
  EXPECT_EQ(problems[0].pointer, "/modules/0/init/from");
  EXPECT_NE(problems[0].message.find("no vision tower"), std::string::npos);
}

/// A tower whose structure the arch does not spell out: each key is named,
/// and a note says the family sets them all; naming it fits the folder.
TEST(HfVision, AStructureMismatchPointsToTheFamily) {
  TempDir dir;
  writeFolder(dir.path, clipConfig(), clipTensors("vision_model.", false));
  json model = visionModelJson(dir.path.string());
  json &arch = model["modules"][0]["arch"];
  for (const char *key :
       {"bias", "pre_norm", "class_token", "patch_bias", "activation"})
    arch.erase(key);
  std::vector<Diagnostic> problems = problemsOf(model);
  ASSERT_FALSE(problems.empty());
  EXPECT_TRUE(problems.back().note) << describe(problems);
  EXPECT_EQ(problems.back().pointer, "/modules/0/arch/family");
  EXPECT_NE(problems.back().message.find("\"family\": \"clip\""),
            std::string::npos)
      << problems.back().message;
  arch["family"] = "clip";
  problems = problemsOf(model);
  EXPECT_TRUE(problems.empty()) << describe(problems);

  // A Qwen2 folder read by a module without q/k/v biases.
  TempDir qwen;
  json config = hfConfig();
  config["model_type"] = "qwen2";
  writeFolder(qwen.path, config, hfTensors());
  problems = problemsOf(modelJson(qwen.path.string()));
  ASSERT_EQ(problems.size(), 1u) << describe(problems);
  EXPECT_EQ(problems[0].pointer, "/modules/0/arch/qkv_bias");
  EXPECT_NE(problems[0].message.find("or arch.family to \"qwen2\""),
            std::string::npos)
      << problems[0].message;
}

TEST(HfVision, TensorProblemsNameTheTensor) {
  // A layer past num_layers is another architecture's; a missing tensor
  // is named with mimo's parameter.
  TempDir dir;
  auto tensors = clipTensors("vision_model.", false);
  tensors.push_back({"vision_model.encoder.layers.2.mlp.fc1.bias", {EF}});
  writeFolder(dir.path, clipConfig(), tensors);
  std::vector<Diagnostic> problems =
      problemsOf(visionModelJson(dir.path.string()));
  ASSERT_EQ(problems.size(), 1u) << describe(problems);
  EXPECT_NE(problems[0].message.find(
                "'vision_model.encoder.layers.2.mlp.fc1.bias' is not a "
                "parameter of this model"),
            std::string::npos)
      << problems[0].message;

  tensors = clipTensors("vision_model.", false);
  dropTensors(tensors, [](const auto &t) {
    return t.first == "vision_model.encoder.layers.0.self_attn.out_proj.bias";
  });
  writeFolder(dir.path, clipConfig(), tensors);
  problems = problemsOf(visionModelJson(dir.path.string()));
  ASSERT_EQ(problems.size(), 1u) << describe(problems);
  EXPECT_NE(problems[0].message.find("'vision_model.encoder.layers.0.self_"
                                     "attn.out_proj.bias' is missing (mimo's "
                                     "'images.layers.0.bo')"),
            std::string::npos)
      << problems[0].message;

  // The patch convolution of another shape.
  tensors = clipTensors("vision_model.", false);
  tensors[0].second = {EH, 3, 2, 3};
  writeFolder(dir.path, clipConfig(), tensors);
  problems = problemsOf(visionModelJson(dir.path.string()));
  ASSERT_EQ(problems.size(), 1u) << describe(problems);
  EXPECT_NE(problems[0].message.find("has shape [8, 3, 2, 3]"),
            std::string::npos)
      << problems[0].message;
}

/// --export-hf of a language model and a CLIP encoder: one
/// LlavaForConditionalGeneration folder (config.json with text_config and
/// vision_config, the names transformers writes before 4.52), or with
/// --export-hf-per-module a CLIP vision model folder with LLaVA's
/// projector beside it and the language model's; the convolution's
/// [H, C, p, p]; init format hf reads every parameter back bit for bit.
TEST(HfVision, AnEncoderExportsAndReadsBackBitForBit) {
  TempDir dir;
  ParseResult parsed = parseModelConfig(visionModelJson("").dump(), "m.json");
  ASSERT_TRUE(parsed.config) << describe(parsed.diagnostics);
  exec::RunOptions options;
  options.saveDir = (dir.path / "save").string();
  ASSERT_NO_FATAL_FAILURE(trainOneStep(*parsed.config, options.saveDir));
  std::string error;
  std::optional<exec::Checkpoint> ckpt =
      exec::openCheckpoint(options.saveDir, *parsed.config, error, true);
  ASSERT_TRUE(ckpt) << error;
  for (bool perModule : {false, true}) {
    SCOPED_TRACE(perModule ? "per module" : "one LLaVA folder");
    std::vector<std::string> written;
    const fs::path out = dir.path / (perModule ? "per-module" : "llava");
    error = exec::exportHf(
        *parsed.config, options.saveDir, out.string(),
        exportOptions("fp32", exec::kHfShardBytes, perModule), written);
    ASSERT_EQ(error, "");
    // The folder(s), and the note that no tokenizer came along.
    ASSERT_EQ(written.size(), perModule ? 3u : 2u);
    if (!perModule) {
      std::ifstream in(out / "config.json");
      json c = json::parse(in);
      EXPECT_EQ(c["architectures"], json({"LlavaForConditionalGeneration"}));
      EXPECT_EQ(c["model_type"], "llava");
      EXPECT_EQ(c["image_token_index"], V - 1);
      EXPECT_EQ(c["image_seq_length"], 4);
      EXPECT_EQ(c["vision_feature_layer"], -2);
      EXPECT_EQ(c["vision_feature_select_strategy"], "default");
      EXPECT_EQ(c["projector_hidden_act"], "gelu");
      EXPECT_EQ(c["text_config"]["model_type"], "llama");
      EXPECT_EQ(c["vision_config"]["model_type"], "clip_vision_model");
      EXPECT_FALSE(c["vision_config"].contains("vision_feature_layer"));
    }
    for (const ModuleConfig &module : parsed.config->modules) {
      SCOPED_TRACE(module.name);
      const fs::path folderPath = perModule ? out / module.name : out;
      std::optional<exec::HfFolder> folder =
          exec::openHfFolder(folderPath.string(), error);
      ASSERT_TRUE(folder) << error;
      std::vector<Diagnostic> problems =
          exec::hfConfigProblems(*folder, module);
      EXPECT_TRUE(problems.empty()) << describe(problems);
      EXPECT_EQ(exec::hfTensorProblem(*folder, *parsed.config, module), "");
      const std::string tower =
          perModule ? "vision_model." : "vision_tower.vision_model.";
      if (module.kind == ModuleKind::Encoder) {
        EXPECT_EQ(perModule ? folder->config["image_size"]
                            : folder->config["vision_config"]["image_size"],
                  4);
        const safetensors::TensorEntry *patch =
            folder->find(tower + "embeddings.patch_embedding.weight");
        ASSERT_TRUE(patch);
        EXPECT_EQ(patch->shape, (std::vector<int64_t>{EH, 3, 2, 2}));
        EXPECT_TRUE(folder->find("multi_modal_projector.linear_2.bias"));
      } else if (!perModule) {
        EXPECT_TRUE(folder->find("language_model.model.embed_tokens.weight"));
        EXPECT_TRUE(folder->find("language_model.lm_head.weight"));
      }
      ASSERT_NO_FATAL_FAILURE(
          hftest::expectReadsBackBitForBit(*folder, module, H, *ckpt));
    }
  }
}

/// One folder holds one image encoder of LLaVA's kind; anything else is
/// refused before anything is written, naming --export-hf-per-module.
TEST(HfVision, WhatALlavaFolderCannotHoldIsRefused) {
  TempDir dir;
  json m = visionModelJson("");
  m["modules"][0]["arch"]["final_norm"] = true; // CLIP's is not applied
  ParseResult parsed = parseModelConfig(m.dump(), "m.json");
  ASSERT_TRUE(parsed.config) << describe(parsed.diagnostics);
  const std::string save = (dir.path / "save").string();
  ASSERT_NO_FATAL_FAILURE(trainOneStep(*parsed.config, save));
  std::vector<std::string> written;
  const fs::path out = dir.path / "out";
  std::string error = exec::exportHf(*parsed.config, save, out.string(),
                                     exportOptions("bf16"), written);
  EXPECT_NE(error.find("module 'images' cannot be its tower"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("--export-hf-per-module"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(written.empty());
  // Per module, the language model is written and the encoder named.
  error =
      exec::exportHf(*parsed.config, save, out.string(),
                     exportOptions("bf16", exec::kHfShardBytes, true), written);
  ASSERT_EQ(error, "");
  EXPECT_TRUE(fs::exists(out / "language" / "config.json"));
  EXPECT_FALSE(fs::exists(out / "images"));
  EXPECT_NE(std::find_if(written.begin(), written.end(),
                         [](const std::string &line) {
                           return line.find("module 'images' (an encoder) is "
                                            "not exported") !=
                                  std::string::npos;
                         }),
            written.end());
}

} // namespace
