//===- ModelConfigTest.cpp - The model.json front end ---------------------===//

#include "TestModels.h"

#include "runtime/config/ModelConfig.h"
#include "runtime/config/Parameters.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

using namespace mimo;
using json = nlohmann::json;

namespace {

ParseResult parse(const json &document) {
  return parseModelConfig(document.dump(2), "model.json");
}

TEST(ModelConfigTest, ParsesExampleWithDefaults) {
  ParseResult result = parseModelConfig(test::readExample("vlm-fan-out.json"),
                                        "examples/vlm-fan-out.json");
  ASSERT_TRUE(result.config) << result.diagnostics.front().message;
  const ModelConfig &config = *result.config;
  EXPECT_EQ(config.name, "vlm-fan-out");
  EXPECT_EQ(config.precision, "fp32");
  EXPECT_EQ(config.batch.attentionMask, "causal");
  EXPECT_FALSE(config.batch.packing);
  ASSERT_EQ(config.modules.size(), 2u);
  EXPECT_EQ(config.languageIndex(), 1u);
  const ModuleConfig &images = config.modules[0];
  EXPECT_EQ(images.kind, ModuleKind::Encoder);
  EXPECT_EQ(images.specialTokenId, 1000);
  EXPECT_EQ(images.parallel.tp, 2);
  EXPECT_EQ(images.parallel.cp, 1); // default
  EXPECT_EQ(images.parallel.order, kDefaultOrder);
  EXPECT_EQ(config.language().parallel.dp, 4);
  EXPECT_EQ(config.train.optimizer, "adamw");
  EXPECT_DOUBLE_EQ(config.train.beta2, 0.999);
  ASSERT_EQ(config.data.tokensPerSample.size(), 1u);
  EXPECT_EQ(config.data.tokensPerSample[0].second.max, 32);
}

TEST(ModelConfigTest, NameDefaultsToFileStem) {
  json document = test::baseModel();
  document.erase("name");
  ParseResult result = parseModelConfig(document.dump(), "dir/my-model.json");
  ASSERT_TRUE(result.config);
  EXPECT_EQ(result.config->name, "my-model");
}

TEST(ModelConfigTest, CanonicalJsonRoundTrips) {
  ParseResult first = parse(test::baseModel());
  ASSERT_TRUE(first.config);
  json canonical = toJson(*first.config);
  ParseResult second = parse(canonical);
  ASSERT_TRUE(second.config);
  EXPECT_EQ(toJson(*second.config), canonical);
  EXPECT_EQ(canonical["modules"][1]["parallel"]["order"],
            json({"tp", "cp", "dp", "pp"}));
}

/// docs/model-json.md `virtual_stages`: the interleaved schedule's chunks
/// divide the layers, need a pipeline and microbatches in groups of pp, and
/// round-trip.
TEST(ModelConfigTest, VirtualStagesDivideLayersAndMicrobatches) {
  json document = test::baseModel(); // language tp2 pp2, 4 microbatches
  document["batch"]["schedule"] = "interleaved";
  json &parallel = document["modules"][1]["parallel"];
  parallel["virtual_stages"] = 2;
  document["modules"][1]["arch"]["num_layers"] = 4;
  ModelConfig ok = test::requireConfig(parse(document));
  EXPECT_EQ(ok.modules[1].parallel.virtualStages, 2);
  EXPECT_EQ(ok.batch.schedule, findSchedule("interleaved"));
  EXPECT_TRUE(ok.batch.schedule->chunked());
  json canonical = toJson(ok);
  EXPECT_EQ(canonical["modules"][1]["parallel"]["virtual_stages"], 2);
  EXPECT_EQ(canonical["batch"]["schedule"], "interleaved");
  auto firstError = [&](const json &doc) {
    ParseResult r = parse(doc);
    EXPECT_FALSE(r.config);
    return r.diagnostics.empty()
               ? std::string()
               : r.diagnostics[0].pointer + ": " + r.diagnostics[0].message;
  };
  json layers = document;
  layers["modules"][1]["arch"]["num_layers"] = 6;
  EXPECT_NE(firstError(layers).find("/modules/1/parallel/virtual_stages: "
                                    "expected pp x virtual_stages to divide "
                                    "num_layers, found 2 x 2 for 6 layers"),
            std::string::npos)
      << firstError(layers);
  json microbatches = document;
  microbatches["batch"]["num_microbatches"] = 3;
  EXPECT_NE(firstError(microbatches)
                .find("/batch/num_microbatches: the interleaved schedule takes "
                      "the microbatches in groups of pp, found 3 for pp 2"),
            std::string::npos);
  json noPipeline = document;
  noPipeline["modules"][1]["parallel"]["pp"] = 1;
  noPipeline["modules"][1]["parallel"]["dp"] = 2;
  EXPECT_NE(firstError(noPipeline).find("needs a pipeline"), std::string::npos)
      << firstError(noPipeline);
  json uneven = document;
  uneven["modules"][1]["pipeline_layers"] = {1, 3};
  EXPECT_NE(firstError(uneven).find("cannot follow pipeline_layers"),
            std::string::npos)
      << firstError(uneven);
}

/// batch.schedule: "1f1b" by default and then not written (the plans of
/// models without it keep their digest); "zero_bubble", and a named
/// "1f1b", survive the canonical JSON.
TEST(ModelConfigTest, ScheduleIsWrittenOnlyWhereItIsNotTheDefault) {
  json document = test::baseModel();
  ModelConfig plain = test::requireConfig(parse(document));
  EXPECT_EQ(plain.batch.schedule, &defaultSchedule());
  EXPECT_EQ(plain.batch.schedule->name(), "1f1b");
  EXPECT_FALSE(toJson(plain)["batch"].contains("schedule"));
  document["batch"]["schedule"] = "zero_bubble";
  ModelConfig zb = test::requireConfig(parse(document));
  EXPECT_EQ(zb.batch.schedule->name(), "zero_bubble");
  json canonical = toJson(zb);
  EXPECT_EQ(canonical["batch"]["schedule"], "zero_bubble");
  EXPECT_EQ(test::requireConfig(parse(canonical)).batch.schedule,
            zb.batch.schedule);
  // Named, "1f1b" is written back (tune keeps a schedule the model names).
  document["batch"]["schedule"] = "1f1b";
  ModelConfig named = test::requireConfig(parse(document));
  EXPECT_TRUE(named.batch.scheduleNamed);
  EXPECT_FALSE(plain.batch.scheduleNamed);
  EXPECT_EQ(toJson(named)["batch"]["schedule"], "1f1b");
}

/// docs/model-json.md: the Llama-style keys parse, survive the canonical
/// JSON, and are written there only when set (a model without them keeps
/// its canonical form, hence its plan's digest).
TEST(ModelConfigTest, LlamaStyleArchitectureKeys) {
  json document = test::baseModel();
  ModelConfig plain = test::requireConfig(parse(document));
  EXPECT_EQ(plain.language().kvHeads(), plain.language().numHeads);
  EXPECT_EQ(plain.language().kvHidden(), plain.language().hiddenSize);
  EXPECT_DOUBLE_EQ(plain.language().ropeTheta, 10000.0);
  EXPECT_FALSE(plain.language().ropeScaling);
  EXPECT_DOUBLE_EQ(plain.language().normEps, 1e-5);
  json canonical = toJson(plain);
  for (const char *key :
       {"num_query_groups", "rope_theta", "rope_scaling", "norm_eps"})
    EXPECT_FALSE(canonical["modules"][1]["arch"].contains(key)) << key;

  json &arch = document["modules"][1]["arch"];
  arch["num_query_groups"] = 2;
  arch["rope_theta"] = 500000;
  arch["rope_scaling"] = {{"type", "llama3"},
                          {"factor", 8},
                          {"low_freq_factor", 1},
                          {"high_freq_factor", 4},
                          {"original_max_position_embeddings", 8192}};
  arch["norm_eps"] = 1e-6;
  document["modules"][0]["arch"]["norm_eps"] = 1e-6;
  ModelConfig llama = test::requireConfig(parse(document));
  const ModuleConfig &language = llama.language();
  EXPECT_EQ(language.kvHeads(), 2);
  EXPECT_EQ(language.kvHidden(), language.hiddenSize / 2);
  EXPECT_DOUBLE_EQ(language.ropeTheta, 500000.0);
  ASSERT_TRUE(language.ropeScaling);
  EXPECT_DOUBLE_EQ(language.ropeScaling->originalMaxPositions, 8192);
  EXPECT_DOUBLE_EQ(language.normEps, 1e-6);
  EXPECT_DOUBLE_EQ(llama.modules[0].normEps, 1e-6);
  canonical = toJson(llama);
  ModelConfig again = test::requireConfig(parse(canonical));
  EXPECT_EQ(toJson(again), canonical);
  EXPECT_EQ(canonical["modules"][1]["arch"]["rope_scaling"]["type"], "llama3");
}

/// A class token keeps its encoder on one pipeline stage.
TEST(ModelConfigTest, ClassTokenRefusesPipelineStages) {
  json document = test::baseModel();
  document["modules"][0]["arch"]["class_token"] = true;
  document["modules"][0]["parallel"] = {{"pp", 2}, {"dp", 2}};
  ParseResult result = parse(document);
  ASSERT_FALSE(result.config);
  EXPECT_EQ(result.diagnostics[0].pointer, "/modules/0/parallel/pp");
  EXPECT_NE(result.diagnostics[0].message.find("has a class token"),
            std::string::npos);
}

/// pipeline_layers: uneven stages, written back, and cut at an encoder's
/// output_layer; a stage left with nothing to compute is refused.
TEST(ModelConfigTest, PipelineLayersSplitTheStages) {
  json document = test::baseModel();
  document["modules"][1]["pipeline_layers"] = {3, 1};
  ModelConfig config = test::requireConfig(parse(document));
  const ModuleConfig &lm = config.language();
  EXPECT_EQ(stageLayerCounts(lm, 2), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(stageLayers(lm, 2, 1), (std::pair<int64_t, int64_t>{3, 4}));
  json canonical = toJson(config);
  EXPECT_EQ(canonical["modules"][1]["pipeline_layers"], json({3, 1}));
  // Recomputation round-trips too; each stage's first N layers recompute.
  document["modules"][1]["recompute"] = "full";
  document["modules"][1]["recompute_layers"] = 2;
  ModelConfig recompute = test::requireConfig(parse(document));
  EXPECT_EQ(toJson(recompute)["modules"][1]["recompute_layers"], 2);
  EXPECT_EQ(toJson(test::requireConfig(parse(toJson(recompute)))),
            toJson(recompute));
  const ModuleConfig &rl = recompute.language();
  EXPECT_TRUE(rl.recomputes(1, 3));
  EXPECT_FALSE(rl.recomputes(2, 3));
  EXPECT_EQ(rl.recomputed(1), 1);
  EXPECT_EQ(rl.recomputed(3), 2);
  EXPECT_EQ(toJson(test::requireConfig(parse(canonical))), canonical);
  // cp_comm round-trips; the default ring stays out.
  document["modules"][1]["parallel"]["cp_comm"] = "all_gather";
  ModelConfig gathered = test::requireConfig(parse(document));
  EXPECT_EQ(gathered.language().parallel.cpComm, "all_gather");
  EXPECT_EQ(toJson(gathered)["modules"][1]["parallel"]["cp_comm"],
            "all_gather");
  document["modules"][1]["parallel"].erase("cp_comm");
  EXPECT_EQ(test::requireConfig(parse(document)).language().parallel.cpComm,
            "ring");
  EXPECT_FALSE(
      toJson(test::requireConfig(parse(document)))["modules"][1]["parallel"]
          .contains("cp_comm"));
  // The distributed optimizer round-trips; off, it stays out.
  document["modules"][1]["distributed_optimizer"] = true;
  ModelConfig sharded = test::requireConfig(parse(document));
  EXPECT_TRUE(sharded.language().distributedOptimizer);
  EXPECT_FALSE(sharded.modules[0].distributedOptimizer);
  EXPECT_EQ(toJson(sharded)["modules"][1]["distributed_optimizer"], true);
  EXPECT_FALSE(toJson(sharded)["modules"][0].contains("distributed_optimizer"));
  // Without the key each stage holds num_layers / pp, and the key stays
  // out of the canonical form (the model's digest is unchanged).
  EXPECT_EQ(stageLayerCounts(
                test::requireConfig(parse(test::baseModel())).language(), 2),
            (std::vector<int64_t>{2, 2}));
  EXPECT_FALSE(
      toJson(test::requireConfig(parse(test::baseModel())))["modules"][1]
          .contains("pipeline_layers"));

  json encoder = test::baseModel();
  encoder["modules"][0]["arch"]["num_layers"] = 5;
  encoder["modules"][0]["arch"]["output_layer"] = -2; // computes 4
  encoder["modules"][0]["parallel"] = {{"pp", 2}, {"dp", 2}};
  encoder["modules"][0]["pipeline_layers"] = {3, 2};
  ModelConfig cut = test::requireConfig(parse(encoder));
  EXPECT_EQ(stageLayerCounts(cut.modules[0], 2), (std::vector<int64_t>{3, 1}));
  encoder["modules"][0]["pipeline_layers"] = {4, 1};
  ParseResult result = parse(encoder);
  ASSERT_FALSE(result.config);
  EXPECT_EQ(result.diagnostics[0].pointer, "/modules/0/pipeline_layers");
  EXPECT_NE(result.diagnostics[0].message.find(
                "leaves stage 1 no layer to compute (only the first 4 of 5"),
            std::string::npos)
      << result.diagnostics[0].message;
}

TEST(ModelConfigTest, LanguageTokenIdHintStaysOnItsKey) {
  json document = test::baseModel();
  document["modules"][1]["special_token_id"] = 5;
  document["modules"][1]["zzz"] = 1;
  ParseResult result = parse(document);
  ASSERT_EQ(result.diagnostics.size(), 2u);
  EXPECT_EQ(result.diagnostics[0].pointer, "/modules/1/special_token_id");
  EXPECT_NE(result.diagnostics[0].message.find("only encoders"),
            std::string::npos);
  EXPECT_EQ(result.diagnostics[1].pointer, "/modules/1/zzz");
  EXPECT_EQ(result.diagnostics[1].message.find("only encoders"),
            std::string::npos);
}

TEST(ModelConfigTest, OrderIsParsed) {
  json document = test::baseModel();
  document["modules"][1]["parallel"]["order"] = {"pp", "tp", "dp", "cp"};
  ParseResult result = parse(document);
  ASSERT_TRUE(result.config);
  EXPECT_EQ(formatOrder(result.config->language().parallel.order),
            "pp-tp-dp-cp");
}

TEST(ModelConfigTest, SyntaxErrorHasLineAndColumn) {
  ParseResult result =
      parseModelConfig("{\n  \"version\": 1,\n  \"batch\": {,}\n}", "m.json");
  ASSERT_EQ(result.diagnostics.size(), 1u);
  const Diagnostic &diag = result.diagnostics[0];
  EXPECT_TRUE(diag.syntax);
  EXPECT_EQ(diag.position.line, 3);
  EXPECT_EQ(diag.position.column, 13);
  EXPECT_NE(diag.message.find("invalid JSON"), std::string::npos);
  EXPECT_EQ(formatDiagnostic("m.json", diag).rfind("m.json:3:13: error:", 0),
            0u);
}

TEST(ModelConfigTest, ReportsEveryErrorAtOnce) {
  json document = test::baseModel();
  document["modules"][0]["parallel"]["tp"] = 0;
  document["train"]["lr"] = -1;
  document["batch"]["seq_lenght"] = 128;
  ParseResult result = parse(document);
  ASSERT_FALSE(result.config);
  std::vector<std::string> pointers;
  for (const Diagnostic &diag : result.diagnostics)
    pointers.push_back(diag.pointer);
  EXPECT_EQ(pointers,
            (std::vector<std::string>{"/batch/seq_lenght",
                                      "/modules/0/parallel/tp", "/train/lr"}));
  EXPECT_NE(result.diagnostics[0].message.find("did you mean 'seq_length'?"),
            std::string::npos);
}

struct FieldCase {
  const char *name;
  const char *pointer;
  json value; // null: erase the key
  const char *expectedPointer;
  const char *expectedMessage;
};

class FieldErrorTest : public testing::TestWithParam<FieldCase> {};

TEST_P(FieldErrorTest, ReportsPointerAndFix) {
  const FieldCase &c = GetParam();
  json document = test::baseModel();
  json::json_pointer pointer(c.pointer);
  if (c.value.is_null())
    document[pointer.parent_pointer()].erase(pointer.back());
  else
    document[pointer] = c.value;
  ParseResult result = parse(document);
  ASSERT_FALSE(result.config);
  ASSERT_EQ(result.diagnostics.size(), 1u)
      << (result.diagnostics.empty() ? std::string("no diagnostic")
                                     : result.diagnostics[0].pointer + ": " +
                                           result.diagnostics[0].message);
  EXPECT_EQ(result.diagnostics[0].pointer, c.expectedPointer);
  EXPECT_NE(result.diagnostics[0].message.find(c.expectedMessage),
            std::string::npos)
      << result.diagnostics[0].message;
}

INSTANTIATE_TEST_SUITE_P(
    Fields, FieldErrorTest,
    testing::Values(
        FieldCase{"version", "/version", 2, "/version",
                  "expected version 1, found 2"},
        FieldCase{"recompute_value", "/modules/1/recompute", "block",
                  "/modules/1/recompute",
                  "expected one of \"none\", \"selective\" or \"full\""},
        FieldCase{"recompute_layers_without_full",
                  "/modules/1/recompute_layers", 2,
                  "/modules/1/recompute_layers",
                  "recompute_layers applies with recompute \"full\" only"},
        FieldCase{"recompute_layers_negative", "/modules/1/recompute_layers",
                  -1, "/modules/1/recompute_layers", "expected"},
        FieldCase{"cp_comm_value", "/modules/1/parallel/cp_comm", "p2p",
                  "/modules/1/parallel/cp_comm",
                  "expected one of \"ring\" or \"all_gather\""},
        FieldCase{"distributed_optimizer_type",
                  "/modules/1/distributed_optimizer", "yes",
                  "/modules/1/distributed_optimizer", "expected"},
        FieldCase{"pipeline_layers_type", "/modules/1/pipeline_layers", 4,
                  "/modules/1/pipeline_layers",
                  "expected an array of layer counts, one per pipeline stage"},
        FieldCase{"pipeline_layers_count", "/modules/1/pipeline_layers",
                  json{1, 1, 2}, "/modules/1/pipeline_layers",
                  "pipeline_layers of language module 'language' gives 3 "
                  "layer counts for pp 2; give one count per pipeline stage"},
        FieldCase{"pipeline_layers_sum", "/modules/1/pipeline_layers",
                  json{1, 2}, "/modules/1/pipeline_layers",
                  "adds up to 3 layers, not num_layers 4"},
        FieldCase{"pipeline_layers_empty_stage", "/modules/1/pipeline_layers",
                  json{4, 0}, "/modules/1/pipeline_layers",
                  "gives stage 1 0 layers; every stage holds at least one"},
        FieldCase{"pipeline_layers_fraction", "/modules/1/pipeline_layers",
                  json{1.5, 2.5}, "/modules/1/pipeline_layers",
                  "expected an array of layer counts"},
        FieldCase{"precision", "/precision", "fp16", "/precision",
                  "expected one of \"fp32\" or \"bf16\""},
        FieldCase{"order_duplicate", "/modules/1/parallel/order",
                  json{"tp", "tp", "dp", "pp"}, "/modules/1/parallel/order",
                  "dimension 'tp' appears twice"},
        FieldCase{"order_type", "/modules/1/parallel/order", "tp-cp-dp-pp",
                  "/modules/1/parallel/order", "expected a permutation"},
        FieldCase{"encoder_sp", "/modules/0/parallel/sequence_parallel", true,
                  "/modules/0/parallel/sequence_parallel",
                  "applies to the language module only"},
        FieldCase{"language_token_id", "/modules/1/special_token_id", 5,
                  "/modules/1/special_token_id",
                  "only encoders have a special_token_id"},
        FieldCase{"token_id_range", "/modules/0/special_token_id", 1024,
                  "/modules/0/special_token_id",
                  "below the language vocab_size 1024"},
        FieldCase{"heads_divide_hidden", "/modules/0/arch/num_heads", 5,
                  "/modules/0/arch/num_heads",
                  "expected num_heads to divide hidden_size 64, found 5"},
        FieldCase{"odd_head_size", "/modules/1/arch/hidden_size", 132,
                  "/modules/1/arch/num_heads", "expected an even head size"},
        FieldCase{"groups_divide_heads", "/modules/1/arch/num_query_groups", 3,
                  "/modules/1/arch/num_query_groups",
                  "expected num_query_groups to divide num_heads 4, found 3"},
        FieldCase{"tp_divides_groups", "/modules/1/arch/num_query_groups", 1,
                  "/modules/1/parallel/tp",
                  "num_query_groups 1 of module 'language' is not divisible "
                  "by tp 2"},
        FieldCase{"rope_scaling_type", "/modules/1/arch/rope_scaling",
                  json{{"type", "yarn"},
                       {"factor", 4},
                       {"low_freq_factor", 1},
                       {"high_freq_factor", 4},
                       {"original_max_position_embeddings", 8192}},
                  "/modules/1/arch/rope_scaling/type",
                  "other kinds (linear, dynamic, yarn) are not supported"},
        FieldCase{"rope_scaling_missing", "/modules/1/arch/rope_scaling",
                  json{{"type", "llama3"},
                       {"factor", 8},
                       {"low_freq_factor", 1},
                       {"high_freq_factor", 4}},
                  "/modules/1/arch/rope_scaling/"
                  "original_max_position_embeddings",
                  "missing original_max_position_embeddings"},
        FieldCase{"rope_scaling_bands", "/modules/1/arch/rope_scaling",
                  json{{"type", "llama3"},
                       {"factor", 8},
                       {"low_freq_factor", 4},
                       {"high_freq_factor", 1},
                       {"original_max_position_embeddings", 8192}},
                  "/modules/1/arch/rope_scaling/high_freq_factor",
                  "expected high_freq_factor above low_freq_factor 4"},
        FieldCase{"positions_need_rows", "/modules/0/arch/position_embeddings",
                  "learned", "/modules/0/arch/max_positions",
                  "missing max_positions"},
        FieldCase{"rows_need_positions", "/modules/0/arch/max_positions", 10,
                  "/modules/0/arch/max_positions",
                  "add \"position_embeddings\": \"learned\""},
        FieldCase{"output_layer", "/modules/0/arch/output_layer", 0,
                  "/modules/0/arch/output_layer",
                  "expected an integer from -1 (the last layer) down to -2, "
                  "found 0"},
        FieldCase{"output_layer_deep", "/modules/0/arch/output_layer", -3,
                  "/modules/0/arch/output_layer", "found -3"},
        FieldCase{"projector", "/modules/0/arch/projector", "mlp3x",
                  "/modules/0/arch/projector", "\"mlp2x_gelu\""},
        FieldCase{"norm_eps", "/modules/0/arch/norm_eps", 0,
                  "/modules/0/arch/norm_eps", "expected a number in (0, 1)"},
        FieldCase{"module_name", "/modules/1/name", "my language",
                  "/modules/1/name", "expected a name of letters"},
        FieldCase{"jsonl_needs_path", "/data", json{{"source", "jsonl"}},
                  "/data/path", "missing required key 'path'"},
        FieldCase{"jsonl_no_tokens", "/data",
                  json{{"source", "jsonl"},
                       {"path", "d.jsonl"},
                       {"tokens_per_sample", {{"images", {1, 2}}}}},
                  "/data/tokens_per_sample", "only with the synthetic source"},
        FieldCase{"tokens_unknown_modality", "/data/tokens_per_sample",
                  json{{"imagse", {1, 2}}}, "/data/tokens_per_sample/imagse",
                  "did you mean 'images'?"},
        FieldCase{"tokens_range_order", "/data/tokens_per_sample/images",
                  json{5, 2}, "/data/tokens_per_sample/images",
                  "expected min <= max, found [5, 2]"},
        FieldCase{"tokens_budget", "/data/tokens_per_sample/images",
                  json{0, 128}, "/data/tokens_per_sample",
                  "expected at most 127 modality tokens"},
        FieldCase{"text_only_fraction", "/data/text_only_fraction", 1.5,
                  "/data/text_only_fraction", "expected a number in [0, 1]"},
        FieldCase{"optimizer", "/train/optimizer", "sgd", "/train/optimizer",
                  "expected one of \"adamw\""},
        FieldCase{"betas", "/train/betas", json{0.9, 1.0}, "/train/betas/1",
                  "expected a number in [0, 1)"},
        FieldCase{"packing_dense", "/batch",
                  json{{"micro_batch_size", 8},
                       {"num_microbatches", 4},
                       {"seq_length", 128},
                       {"packing", true},
                       {"attention_mask", "dense"}},
                  "/batch/attention_mask", "expected \"causal\" with packing"},
        FieldCase{"attention_mask", "/batch/attention_mask", "casual",
                  "/batch/attention_mask", "did you mean \"causal\"?"},
        FieldCase{"schedule", "/batch/schedule", "zero-bubble",
                  "/batch/schedule", "did you mean \"zero_bubble\"?"},
        FieldCase{"schedule_interleaved", "/batch/schedule", "interleaved",
                  "/batch/schedule",
                  "\"interleaved\" needs the language module's "
                  "parallel.virtual_stages of 2 or more"},
        FieldCase{"virtual_stages_alone", "/modules/1/parallel/virtual_stages",
                  2, "/modules/1/parallel/virtual_stages",
                  "runs under the interleaved schedule only"},
        FieldCase{"virtual_stages_encoder",
                  "/modules/0/parallel/virtual_stages", 2,
                  "/modules/0/parallel/virtual_stages",
                  "applies to the language module only"},
        FieldCase{"virtual_stages_range", "/modules/1/parallel/virtual_stages",
                  9, "/modules/1/parallel/virtual_stages",
                  "expected a positive integer <= 8"},
        FieldCase{"float_for_int", "/batch/num_microbatches", 2.5,
                  "/batch/num_microbatches",
                  "expected a positive integer <= 16384 (microbatches per "
                  "optimizer "
                  "step), found the number 2.5"}),
    [](const testing::TestParamInfo<FieldCase> &info) {
      return std::string(info.param.name);
    });

/// docs/model-json.md documents every key the parser accepts, and every key
/// in its tables is one the parser accepts.
TEST(ModelConfigTest, EveryKeyIsDocumented) {
  std::ifstream in(std::string(MIMO_DOCS_DIR) + "/model-json.md");
  ASSERT_TRUE(in) << "docs/model-json.md is missing";
  std::string doc((std::istreambuf_iterator<char>(in)),
                  std::istreambuf_iterator<char>());
  // The keys' tables end where the names of other frameworks begin.
  std::string tables = doc.substr(0, doc.find("## Names from other"));
  std::set<std::string> accepted;
  for (const ModelJsonObject &object : modelJsonObjects())
    for (const std::string &key : object.keys) {
      accepted.insert(key);
      EXPECT_NE(tables.find("| `" + key + "` |"), std::string::npos)
          << "'" << key << "' of " << (object.pointer.empty() ? "/" : "")
          << object.pointer << " has no row in docs/model-json.md";
    }
  std::istringstream lines(tables);
  int rows = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0)
      continue;
    size_t end = line.find("` |");
    ASSERT_NE(end, std::string::npos) << line;
    std::string key = line.substr(3, end - 3);
    EXPECT_TRUE(accepted.count(key)) << "docs/model-json.md documents '" << key
                                     << "', which the parser does not accept";
    ++rows;
  }
  EXPECT_GE(rows, static_cast<int>(accepted.size()));
}

/// The parser checks each object against modelJsonObjects(): a key of one
/// object is unknown in another.
/// docs/model-json.md train.grad_reduce_dtype: "fp32" (the default, not
/// written back) or "bf16"; anything else, or Megatron's flag, names the
/// key.
TEST(ModelConfigTest, GradReduceDtype) {
  json m = test::baseModel();
  ModelConfig plain = test::requireConfig(parse(m));
  EXPECT_FALSE(plain.train.reducesInBf16());
  EXPECT_FALSE(toJson(plain)["train"].contains("grad_reduce_dtype"));
  m["train"]["grad_reduce_dtype"] = "bf16";
  ModelConfig bf16 = test::requireConfig(parse(m));
  EXPECT_TRUE(bf16.train.reducesInBf16());
  EXPECT_EQ(toJson(bf16)["train"]["grad_reduce_dtype"], "bf16");
  EXPECT_TRUE(test::requireConfig(parse(toJson(bf16))).train.reducesInBf16());
  m["train"]["grad_reduce_dtype"] = "fp16";
  ParseResult bad = parse(m);
  ASSERT_FALSE(bad.config);
  ASSERT_EQ(bad.diagnostics.size(), 1u);
  EXPECT_EQ(bad.diagnostics[0].pointer, "/train/grad_reduce_dtype");
  m["train"].erase("grad_reduce_dtype");
  m["train"]["grad_reduce_in_bf16"] = true;
  bad = parse(m);
  ASSERT_EQ(bad.diagnostics.size(), 1u);
  EXPECT_NE(bad.diagnostics[0].message.find("/train/grad_reduce_dtype"),
            std::string::npos)
      << bad.diagnostics[0].message;
}

/// docs/model-json.md arch.head_dim: the language model's heads of any
/// even width (hidden_size need not divide by num_heads then), written
/// back only when given; odd widths, encoders' head_dim and Megatron's
/// kv_channels name their key.
TEST(ModelConfigTest, HeadDim) {
  json m = test::baseModel();
  const size_t lm = m["modules"].size() - 1;
  ASSERT_EQ(m["modules"][lm]["kind"], "language");
  json &arch = m["modules"][lm]["arch"];
  const int64_t H = arch["hidden_size"].get<int64_t>();
  const int64_t heads = arch["num_heads"].get<int64_t>();
  ModelConfig plain = test::requireConfig(parse(m));
  EXPECT_EQ(plain.modules[lm].headDim(), H / heads);
  EXPECT_EQ(plain.modules[lm].attentionWidth(), H);
  EXPECT_FALSE(toJson(plain)["modules"][lm]["arch"].contains("head_dim"));
  arch["head_dim"] = 2 * H / heads;
  ModelConfig wide = test::requireConfig(parse(m));
  EXPECT_EQ(wide.modules[lm].attentionWidth(), 2 * H);
  EXPECT_EQ(wide.modules[lm].kvHidden(), 2 * H);
  EXPECT_EQ(toJson(wide)["modules"][lm]["arch"]["head_dim"], 2 * H / heads);
  EXPECT_EQ(test::requireConfig(parse(toJson(wide))).modules[lm].headDim(),
            2 * H / heads);
  // A head count that does not divide hidden_size, with head_dim.
  arch["num_heads"] = 6;
  arch["head_dim"] = 8;
  EXPECT_EQ(test::requireConfig(parse(m)).modules[lm].attentionWidth(), 48);
  arch["head_dim"] = 7;
  ParseResult odd = parse(m);
  ASSERT_EQ(odd.diagnostics.size(), 1u);
  EXPECT_EQ(odd.diagnostics[0].pointer,
            "/modules/" + std::to_string(lm) + "/arch/head_dim");
  arch.erase("head_dim");
  arch["num_heads"] = heads;
  arch["kv_channels"] = 8;
  ParseResult megatron = parse(m);
  ASSERT_EQ(megatron.diagnostics.size(), 1u);
  EXPECT_NE(megatron.diagnostics[0].message.find("did you mean 'head_dim'"),
            std::string::npos)
      << megatron.diagnostics[0].message;
  arch.erase("kv_channels");
  m["modules"][0]["arch"]["head_dim"] = 8; // an encoder
  ParseResult encoder = parse(m);
  ASSERT_EQ(encoder.diagnostics.size(), 1u);
  EXPECT_EQ(encoder.diagnostics[0].pointer, "/modules/0/arch/head_dim");
}

TEST(ModelConfigTest, KeyTablesAreTheParsers) {
  json m = test::baseModel();
  m["batch"]["lr"] = 1;
  m["train"]["seq_length"] = 2;
  ParseResult result = parse(m);
  ASSERT_FALSE(result.config);
  ASSERT_EQ(result.diagnostics.size(), 2u);
  EXPECT_EQ(result.diagnostics[0].pointer, "/batch/lr");
  EXPECT_EQ(result.diagnostics[1].pointer, "/train/seq_length");
  EXPECT_NE(result.diagnostics[1].message.find("it belongs in "
                                               "/batch/seq_length"),
            std::string::npos)
      << result.diagnostics[1].message;
  // A key some other object takes: the nearest such object is named.
  m = test::baseModel();
  m["modules"][0]["arch"]["name"] = "x";
  m["batch"]["global_batch_size"] = 32;
  result = parse(m);
  ASSERT_EQ(result.diagnostics.size(), 2u);
  EXPECT_NE(result.diagnostics[0].message.find(
                "; Megatron's 'global_batch_size' is /batch/micro_batch_size x "
                "/batch/num_microbatches"),
            std::string::npos)
      << result.diagnostics[0].message;
  EXPECT_EQ(result.diagnostics[1].pointer, "/modules/0/arch/name");
  EXPECT_NE(result.diagnostics[1].message.find("it belongs in /modules/N/name"),
            std::string::npos)
      << result.diagnostics[1].message;
  EXPECT_EQ(modelJsonKeys("/nowhere").size(), 0u);
  EXPECT_EQ(modelJsonKeys("/train/lr_schedule"),
            (std::vector<std::string>{"warmup_steps", "decay", "decay_steps",
                                      "min_lr"}));
}

} // namespace
