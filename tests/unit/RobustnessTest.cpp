//===- RobustnessTest.cpp - Every reader refuses bad input, located -------===//
//
// docs/limits.md: one test per class of hostile input that once crashed,
// aborted or hung a tool; each must now be exit-1 material: a Diagnostic (or
// error text) naming the place and the fix.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/data/Data.h"
#include "runtime/json/JsonReader.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/support/Limits.h"
#include "tests/unit/TestModels.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace mimo;
using nlohmann::json;

namespace {

std::string firstMessage(const std::vector<Diagnostic> &diagnostics) {
  return diagnostics.empty()
             ? std::string("(none)")
             : diagnostics[0].pointer + ": " + diagnostics[0].message;
}

std::string nested(int depth) {
  return "{\"version\": 1, \"x\": " + std::string(depth, '[') +
         std::string(depth, ']') + "}";
}

//===----------------------------------------------------------------------===//
// The shared JSON reader
//===----------------------------------------------------------------------===//

TEST(JsonReader, DeepNestingIsRefusedBeforeParsing) {
  Diagnostic error;
  EXPECT_TRUE(parseJsonText(nested(kMaxJsonDepth - 1), error));
  // A million levels would overflow the stack of a recursive parser (and of
  // the destructor of the tree it builds).
  for (int depth : {kMaxJsonDepth, 1000000}) {
    ASSERT_FALSE(parseJsonText(nested(depth), error));
    EXPECT_TRUE(error.syntax);
    EXPECT_EQ(error.position.line, 1);
    EXPECT_EQ(error.position.column, 21 + kMaxJsonDepth - 1);
    EXPECT_NE(error.message.find("nests deeper than 64 levels"),
              std::string::npos)
        << error.message;
  }
  // Brackets inside strings do not count.
  EXPECT_TRUE(
      parseJsonText("{\"a\": \"" + std::string(1000, '[') + "\"}", error));
}

TEST(JsonReader, AKeyGivenTwiceInOneObjectIsRefusedWithBothPlaces) {
  // nlohmann would keep the last silently: a model.json with two "tp" or a
  // safetensors header naming a tensor twice is refused.
  Diagnostic error;
  ASSERT_FALSE(parseJsonText(
      "{\n  \"a\": 1,\n  \"b\": {\"a\": 2},\n  \"a\": 3\n}", error));
  EXPECT_EQ(error.position.line, 4);
  EXPECT_EQ(error.position.column, 3);
  EXPECT_NE(error.message.find("the key 'a' appears twice in one object "
                               "(first at line 2)"),
            std::string::npos)
      << error.message;
  // The same key in sibling or nested objects, or as a value, is fine.
  EXPECT_TRUE(parseJsonText(
      "[{\"a\": 1}, {\"a\": 2, \"b\": {\"a\": \"a\"}}, \"a\"]", error));
  EXPECT_TRUE(
      parseJsonText("{\"k\": [\"k\", {\"k\": 1}], \"x\": \"k\"}", error));
}

TEST(JsonReader, NumbersBeyondDoubleAreRefusedWithTheirPlace) {
  Diagnostic error;
  for (const char *number : {"1e999", "-1e999", "1E+400"}) {
    std::string text = std::string("{\n  \"seq_length\": ") + number + "\n}";
    ASSERT_FALSE(parseJsonText(text, error)) << number;
    EXPECT_EQ(error.position.line, 2);
    EXPECT_EQ(error.position.column, 17);
    EXPECT_NE(error.message.find("out of range"), std::string::npos)
        << error.message;
  }
  // A 400-digit integer is beyond double too.
  ASSERT_FALSE(parseJsonText("[" + std::string(400, '9') + "]", error));
  EXPECT_TRUE(parseJsonText("[1e308, -2.5e-300, 18446744073709551616]", error));
}

TEST(JsonReader, InvalidUtf8IsRefusedWithItsPlace) {
  Diagnostic error;
  for (std::string bad : {std::string("\xff"), std::string("\xc0\xaf"),
                          std::string("\xed\xa0\x80"), std::string("\xe2\x82"),
                          std::string("\xf4\x90\x80\x80")}) {
    std::string text = "{\"name\": \"ab" + bad + "\"}";
    ASSERT_FALSE(parseJsonText(text, error));
    EXPECT_EQ(error.position.column, 13);
    EXPECT_NE(error.message.find("invalid UTF-8"), std::string::npos);
  }
  EXPECT_TRUE(parseJsonText(
      "{\"name\": \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}", error));
}

TEST(JsonReader, TruncatedDocumentsAreSyntaxErrors) {
  std::string text = test::readExample("vlm-fan-in.json");
  Diagnostic error;
  for (size_t cut : {size_t(0), size_t(1), text.size() / 2, text.size() - 2}) {
    ASSERT_FALSE(parseJsonText(text.substr(0, cut), error)) << cut;
    EXPECT_TRUE(error.syntax);
    EXPECT_GE(error.position.line, 1);
  }
}

TEST(JsonReader, ANulByteAnywhereIsRefusedNotTheDocumentsEnd) {
  // Round 3: a NUL after a document hid everything behind it.
  std::string text = test::readExample("vlm-fan-in.json");
  Diagnostic error;
  for (size_t at : {text.size(), text.size() / 2, size_t(0)}) {
    std::string damaged = text;
    damaged.insert(at, std::string("\0{\"extra\": 1}", 13));
    ASSERT_FALSE(parseJsonText(damaged, error)) << at;
    EXPECT_NE(error.message.find("NUL byte"), std::string::npos)
        << error.message;
  }
}

TEST(JsonReader, BriefNeverThrowsAndStaysShort) {
  json value = std::string("ab\xff"
                           "cd") +
               std::string(500, 'x');
  std::string text = briefJson(value);
  EXPECT_LE(text.size(), 60u);
}

//===----------------------------------------------------------------------===//
// model.json
//===----------------------------------------------------------------------===//

ParseResult parseEdited(const std::string &pointer, const json &value) {
  json model = test::baseModel();
  model[json::json_pointer(pointer)] = value;
  return parseModelConfig(model.dump(), "model.json");
}

struct LimitCase {
  const char *pointer;
  int64_t maximum;
};

class ModelLimits : public ::testing::TestWithParam<LimitCase> {};

TEST_P(ModelLimits, AboveTheLimitIsLocatedAndNamesTheLimit) {
  const LimitCase &c = GetParam();
  for (int64_t value : {c.maximum + 1, int64_t(1) << 62}) {
    ParseResult result = parseEdited(c.pointer, value);
    ASSERT_FALSE(result.config) << c.pointer << " = " << value;
    EXPECT_EQ(result.diagnostics[0].pointer, c.pointer)
        << firstMessage(result.diagnostics);
    EXPECT_NE(
        result.diagnostics[0].message.find("<= " + std::to_string(c.maximum)),
        std::string::npos)
        << result.diagnostics[0].message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fields, ModelLimits,
    ::testing::Values(
        LimitCase{"/batch/num_microbatches", kMaxMicrobatches},
        LimitCase{"/batch/micro_batch_size", kMaxMicroBatchSize},
        LimitCase{"/batch/seq_length", kMaxSeqLength},
        LimitCase{"/modules/0/arch/feature_dim", kMaxWidth},
        LimitCase{"/modules/1/arch/vocab_size", kMaxVocab},
        LimitCase{"/modules/1/arch/hidden_size", kMaxWidth},
        LimitCase{"/modules/1/arch/ffn_hidden_size", kMaxFfnWidth},
        LimitCase{"/modules/1/arch/num_layers", kMaxLayers},
        LimitCase{"/modules/0/parallel/dp", kMaxRanks},
        LimitCase{"/modules/1/parallel/tp", kMaxRanks},
        LimitCase{"/modules/1/parallel/rank_offset", kMaxRanks},
        LimitCase{"/data/tokens_per_sample/images/1", kMaxSeqLength},
        LimitCase{"/train/steps", kMaxSteps}),
    [](const ::testing::TestParamInfo<LimitCase> &info) {
      std::string name = info.param.pointer;
      for (char &ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch)))
          ch = '_';
      return name;
    });

TEST(ModelLimits, GridsLargerThanTheWorldLimitDoNotOverflow) {
  // Each size alone is accepted; their product is 2^80.
  json model = test::baseModel();
  model["modules"][0]["parallel"] = {
      {"tp", kMaxRanks}, {"pp", kMaxRanks}, {"dp", kMaxRanks}};
  ParseResult result = parseModelConfig(model.dump(), "model.json");
  ASSERT_FALSE(result.config);
  EXPECT_EQ(result.diagnostics[0].pointer, "/modules/0/parallel");
  EXPECT_NE(result.diagnostics[0].message.find("above 1048576"),
            std::string::npos)
      << result.diagnostics[0].message;
}

TEST(ModelLimits, ProductsOfAcceptedSizesAreBounded) {
  // Parameters: every size within its limit, the product beyond 2^50.
  json model = test::baseModel();
  model["modules"][1]["arch"] = {{"vocab_size", kMaxVocab},
                                 {"hidden_size", kMaxWidth},
                                 {"num_layers", 64},
                                 {"num_heads", 4096},
                                 {"ffn_hidden_size", kMaxFfnWidth}};
  ParseResult result = parseModelConfig(model.dump(), "model.json");
  ASSERT_FALSE(result.config);
  EXPECT_EQ(result.diagnostics[0].pointer, "/modules/1/arch");
  EXPECT_NE(result.diagnostics[0].message.find("at most 2^50 parameters"),
            std::string::npos);
  // Activations: micro_batch_size x seq_length x the widest dimension.
  model = test::baseModel();
  model["batch"]["micro_batch_size"] = kMaxMicroBatchSize;
  model["batch"]["seq_length"] = kMaxSeqLength;
  model["modules"][0]["parallel"]["dp"] = 1;
  result = parseModelConfig(model.dump(), "model.json");
  ASSERT_FALSE(result.config);
  EXPECT_EQ(result.diagnostics[0].pointer, "/batch");
  EXPECT_NE(result.diagnostics[0].message.find("at most 2^50 values"),
            std::string::npos)
      << result.diagnostics[0].message;
}

TEST(ModelLimits, TokenCountsThatWouldWrapAreRefused) {
  // Two encoders with 2^62 tokens each once summed to a negative budget.
  json model = test::readExample("avlm.json").empty()
                   ? json()
                   : json::parse(test::readExample("avlm.json"));
  ASSERT_TRUE(model.is_object());
  json tokens = json::object();
  for (const json &m : model["modules"])
    if (m["kind"] == "encoder")
      tokens[m["name"].get<std::string>()] = {0, int64_t(1) << 62};
  model["data"]["tokens_per_sample"] = tokens;
  ParseResult result = parseModelConfig(model.dump(), "model.json");
  ASSERT_FALSE(result.config);
  EXPECT_NE(result.diagnostics[0].pointer.find("/data/tokens_per_sample/"),
            std::string::npos);
}

TEST(ModelLimits, MessagesStayShortWhateverTheInput) {
  // A 100,000-character name or key is quoted in part, not whole.
  std::string huge(100000, 'x');
  json model = test::baseModel();
  model["modules"][0]["name"] = huge + " !";
  model["batch"][huge] = 1;
  ParseResult result = parseModelConfig(model.dump(), "model.json");
  ASSERT_GE(result.diagnostics.size(), 2u); // the name, the key, ...
  for (const Diagnostic &d : result.diagnostics)
    EXPECT_LT(d.message.size(), 600u) << d.message.substr(0, 200);
  Diagnostic syntax;
  ASSERT_FALSE(parseJsonText("{\"" + huge, syntax));
  EXPECT_LT(syntax.message.size(), 600u);
}

TEST(ModelLimits, APlanIsNotAModel) {
  std::string error;
  Plan plan = test::requirePlan(test::requireConfig(
      parseModelConfig(test::readExample("vlm-fan-in.json"), "model.json")));
  ParseResult result = parseModelConfig(planToJson(plan).dump(), "plan.json");
  ASSERT_EQ(result.diagnostics.size(), 1u) << firstMessage(result.diagnostics);
  EXPECT_EQ(result.diagnostics[0].pointer, "/format");
  EXPECT_NE(result.diagnostics[0].message.find("this is a plan"),
            std::string::npos);
}

TEST(MemoryPlan, SaturatesInsteadOfOverflowing) {
  // The largest model the readers accept: every byte count stays positive
  // (the memory check then refuses it with exit 1).
  json model = test::baseModel();
  model["batch"]["num_microbatches"] = kMaxMicrobatches;
  model["modules"][1]["arch"] = {{"vocab_size", 65536},
                                 {"hidden_size", 65536},
                                 {"num_layers", 4096},
                                 {"num_heads", 512},
                                 {"ffn_hidden_size", 65536}};
  model["modules"][1]["parallel"] = {{"rank_offset", 4}};
  Plan plan = test::requirePlan(
      test::requireConfig(parseModelConfig(model.dump(), "model.json")));
  for (const RankMemory &r : memoryPlan(plan.topology, plan.config)) {
    EXPECT_GT(r.totalBytes, 0);
    EXPECT_GE(r.totalBytes, r.activationBytes);
  }
}

//===----------------------------------------------------------------------===//
// Plans: validated completely before any rank starts
//===----------------------------------------------------------------------===//

class PlanEdits : public ::testing::Test {
protected:
  void SetUp() override {
    Plan plan = test::requirePlan(test::requireConfig(parseModelConfig(
        test::readExample("vlm-colocated-pp2.json"), "model.json")));
    document = json::parse(planToJson(plan).dump());
  }
  /// The program of the last role (a language stage) and its instructions.
  json &instructions(size_t program) {
    return document["programs"][program]["instructions"];
  }
  /// Loads the edited plan: it must be refused at a /programs pointer.
  std::string refusal() {
    PlanLoadResult loaded = loadPlanDocument(document, "plan.json");
    EXPECT_FALSE(loaded.plan) << "the edited plan was accepted";
    if (loaded.plan || loaded.diagnostics.empty())
      return "";
    EXPECT_EQ(loaded.diagnostics[0].pointer.rfind("/programs", 0), 0u)
        << firstMessage(loaded.diagnostics);
    return loaded.diagnostics[0].message;
  }
  size_t find(size_t program, const std::string &op) {
    json &list = instructions(program);
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i]["op"] == op)
        return i;
    ADD_FAILURE() << "no " << op;
    return 0;
  }
  json document;
};

TEST_F(PlanEdits, TheUneditedPlanLoads) {
  EXPECT_TRUE(loadPlanDocument(document, "plan.json").plan);
}

TEST_F(PlanEdits, AMissingGradientReductionIsRefused) {
  // Every rank of the role skips it: the collective still matches, but the
  // ranks would train apart. Once this hung until the timeout.
  for (size_t p = 0; p < document["programs"].size(); ++p) {
    json &list = instructions(p);
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i]["op"] == "reduce_grads") {
        list.erase(i);
        break;
      }
  }
  EXPECT_NE(refusal().find("never runs reduce_grads"), std::string::npos);
}

TEST_F(PlanEdits, ADeletedInstructionIsRefused) {
  size_t last = document["programs"].size() - 1;
  instructions(last).erase(find(last, "backward"));
  EXPECT_FALSE(refusal().empty());
}

TEST_F(PlanEdits, ADuplicatedInstructionIsRefused) {
  size_t last = document["programs"].size() - 1;
  json &list = instructions(last);
  list.push_back(list[find(last, "forward")]);
  std::string why = refusal();
  EXPECT_FALSE(why.empty());
}

TEST_F(PlanEdits, ABackwardBeforeItsForwardIsRefused) {
  // One rank, no messages: only the dataflow check can see it.
  Plan plan = test::requirePlan(test::requireConfig(parseModelConfig(
      R"({"version": 1,
          "batch": {"micro_batch_size": 2, "num_microbatches": 2,
                    "seq_length": 16},
          "modules": [{"name": "language", "kind": "language",
                       "arch": {"vocab_size": 64, "hidden_size": 16,
                                "num_layers": 1, "num_heads": 2,
                                "ffn_hidden_size": 32}}]})",
      "model.json")));
  document = json::parse(planToJson(plan).dump());
  json &list = instructions(0);
  size_t f = find(0, "forward"), b = find(0, "backward");
  std::swap(list[f], list[b]);
  EXPECT_NE(refusal().find("out of the order its data needs"),
            std::string::npos);
  // Microbatches may interleave differently: forward 1 before backward 0.
  document = json::parse(planToJson(plan).dump());
  json &again = instructions(0);
  std::vector<std::string> ops;
  for (const json &in : again)
    ops.push_back(in["op"].get<std::string>() +
                  std::to_string(in.value("mb", -1)));
  // shard0 forward0 backward0 shard1 forward1 backward1 ...
  ASSERT_EQ(ops[2], "backward0") << again.dump();
  ASSERT_EQ(ops[4], "forward1") << again.dump();
  json backward0 = again[2];
  again.erase(2);
  again.insert(again.begin() + 4, backward0);
  EXPECT_TRUE(loadPlanDocument(document, "plan.json").plan);
}

TEST_F(PlanEdits, PostingComputeWithMessagesIsRefused) {
  // A send fused with a forward once failed mid-run with exit 2.
  size_t last = document["programs"].size() - 1;
  json &list = instructions(last);
  size_t s = find(last, "send_grad");
  list[s]["fused"] = true;
  list[s + 1] = list[find(last, "forward")];
  EXPECT_FALSE(refusal().empty());
}

TEST_F(PlanEdits, AnInstructionAfterTheStepIsRefused) {
  size_t last = document["programs"].size() - 1;
  json &list = instructions(last);
  size_t step = find(last, "optimizer_step");
  std::swap(list[step], list[step - 1]);
  EXPECT_NE(refusal().find("out of the order"), std::string::npos);
}

TEST(PlanFile, DeepAndOutOfRangePlansAreSyntaxErrors) {
  for (std::string text :
       {nested(100000), std::string("{\"version\": 1e999}")}) {
    PlanLoadResult loaded = loadPlan(text, "plan.json");
    ASSERT_FALSE(loaded.plan);
    ASSERT_EQ(loaded.diagnostics.size(), 1u);
    EXPECT_TRUE(loaded.diagnostics[0].syntax);
  }
}

//===----------------------------------------------------------------------===//
// Data files and checkpoints
//===----------------------------------------------------------------------===//

ModelConfig jsonlModel() {
  json model = test::baseModel();
  model["data"] = {{"source", "jsonl"}, {"path", "data.jsonl"}};
  return test::requireConfig(parseModelConfig(model.dump(), "model.json"));
}

std::vector<std::string> jsonlErrors(const std::string &text) {
  std::istringstream in(text);
  std::vector<std::string> errors;
  EXPECT_FALSE(exec::readJsonl(jsonlModel(), in, "data.jsonl", errors));
  return errors;
}

/// docs/data.md loss_mask: 0/1 (or booleans) per input id; a wrong length
/// or value is located, and the mask leaves its tokens out as targets.
TEST(Jsonl, LossMasksAreCheckedAndLeaveTargetsOut) {
  std::vector<std::string> errors =
      jsonlErrors("{\"input_ids\": [1, 2, 3], \"loss_mask\": [0, 1]}\n"
                  "{\"input_ids\": [1, 2], \"loss_mask\": [0, 2]}\n"
                  "{\"input_ids\": [1, 2], \"loss_mask\": \"yes\"}\n");
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0], "data.jsonl:1: /loss_mask: error: expected an array of "
                       "3 0s and 1s (one per input id), found 2 values");
  EXPECT_EQ(errors[1].rfind("data.jsonl:2: /loss_mask/1: error: expected 0 or "
                            "1 (1: token 1 is a target), found 2",
                            0),
            0u)
      << errors[1];
  EXPECT_NE(errors[2].find("found \"yes\""), std::string::npos) << errors[2];
  std::istringstream in("{\"input_ids\": [1, 2, 3, 4, 5], "
                        "\"loss_mask\": [0, false, 1, true, 0]}\n");
  std::vector<std::string> none;
  std::unique_ptr<exec::DataSource> data =
      exec::readJsonl(jsonlModel(), in, "data.jsonl", none);
  ASSERT_TRUE(data) << (none.empty() ? "" : none[0]);
  const exec::Sample s = data->get(0, 0).samples[0];
  std::vector<bool> masked;
  for (int64_t p = 0; p < 5; ++p)
    masked.push_back(exec::lossMasked(s, {}, p));
  // Position p predicts token p + 1: tokens 1 and 4 are no targets (the
  // mask of token 0 never matters), and the last position predicts nothing.
  EXPECT_EQ(masked, (std::vector<bool>{true, false, false, true, true}));
}

TEST(Jsonl, DeepLinesAreLocatedErrors) {
  std::vector<std::string> errors =
      jsonlErrors("{\"input_ids\": [1, 2]}\n" + nested(100000) + "\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rfind("data.jsonl:2:", 0), 0u) << errors[0];
  EXPECT_NE(errors[0].find("nests deeper"), std::string::npos);
}

TEST(Jsonl, FeaturesBeyondFloatAreRefused) {
  std::string row = "[1e300" + std::string(47 * 3, ' ') + "]";
  std::string features = "[";
  for (int i = 0; i < 48; ++i)
    features += std::string(i ? ", " : "") + (i ? "0" : "1e300");
  features += "]";
  std::vector<std::string> errors =
      jsonlErrors("{\"input_ids\": [1, 1000, 2], \"images\": {\"features\": [" +
                  features + "]}}\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("within float's range"), std::string::npos)
      << errors[0];
}

TEST(Jsonl, ManyBadLinesReportTwentyAndACount) {
  std::string text;
  for (int i = 0; i < 1000; ++i)
    text += "{\"input_ids\": [-1]}\n";
  std::vector<std::string> errors = jsonlErrors(text);
  ASSERT_EQ(errors.size(), 21u);
  EXPECT_NE(errors.back().find("and 980 more problems"), std::string::npos)
      << errors.back();
}

TEST(Safetensors, HostileHeadersAreRefused) {
  std::string error;
  for (std::string header :
       {nested(100000), std::string("{\"a\": 1e999}"), std::string("\xff"),
        std::string(
            "{\"a\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904, 4], "
            "\"data_offsets\": [0, 0]}}")}) {
    EXPECT_FALSE(safetensors::parseHeader(header, 0, "m.safetensors", error));
    EXPECT_EQ(error.rfind("m.safetensors: error: ", 0), 0u) << error;
  }
}

TEST(CheckpointState, WrongTypesAreRefusedNotThrown) {
  json state;
  std::string error;
  for (std::string text :
       {std::string("{\"format\": 5, \"version\": 1, \"step\": 3}"),
        std::string("{\"format\": \"mimo-checkpoint\", \"version\": -1, "
                    "\"step\": 3}"),
        std::string("{\"format\": \"mimo-checkpoint\", \"version\": 1, "
                    "\"step\": 1e999}"),
        std::string("[1, 2]"), nested(100000)}) {
    EXPECT_FALSE(exec::parseCheckpointState(text, "state.json", state, error))
        << text.substr(0, 80);
    EXPECT_EQ(error.rfind("state.json", 0), 0u) << error;
  }
  EXPECT_EQ(
      exec::parseCheckpointState(
          "{\"format\": \"mimo-checkpoint\", \"version\": 1, \"step\": 7}",
          "state.json", state, error),
      std::optional<int64_t>(7));
}

} // namespace
