//===- ExplainTest.cpp - mimoc explain --json of the examples -------------===//

#include "TestModels.h"

#include "codegen/Explain.h"
#include "codegen/JsonStream.h"
#include "runtime/schedule/Formulas.h"
#include "runtime/schedule/PipelineSchedule.h"
#include "tools/driver/Driver.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mimo;
using json = nlohmann::json;

namespace {

/// Compiles `text` and explains its model.
json explain(const std::string &text, const std::string &file = "model.json") {
  static mlir::MLIRContext *context = new mlir::MLIRContext();
  CompileResult result = compileModel(*context, file, text);
  EXPECT_TRUE(result.succeeded())
      << (result.diagnostics.empty() ? "" : result.diagnostics[0].message);
  if (!result.succeeded())
    return json();
  return json::parse(explainPlan(*result.plan).dump());
}

/// Compiles `text` and renders its explanation as explain's text.
std::string explainText(const std::string &text) {
  static mlir::MLIRContext *context = new mlir::MLIRContext();
  CompileResult result = compileModel(*context, "model.json", text);
  EXPECT_TRUE(result.succeeded());
  if (!result.succeeded())
    return "";
  return renderExplainText(Explanation(*result.plan), "m");
}

/// {name, tp, cp, dp, pp, first, last} of one role, for compact expectations.
std::string role(const json &entry) {
  return entry["name"].get<std::string>() + " tp" +
         std::to_string(entry["tp"].get<int>()) + " cp" +
         std::to_string(entry["cp"].get<int>()) + " dp" +
         std::to_string(entry["dp"].get<int>()) + " pp" +
         std::to_string(entry["pp"].get<int>()) +
         (entry["first_stage"].get<bool>() ? " first" : "") +
         (entry["last_stage"].get<bool>() ? " last" : "");
}

TEST(ExplainTest, FanInExample) {
  json e = explain(test::readExample("vlm-fan-in.json"));
  EXPECT_EQ(e["world_size"], 8);
  EXPECT_EQ(e["layout"], "non_colocated");
  ASSERT_EQ(e["modules"].size(), 2u);
  // Each module's FLOPs sum to the model's; per rank they are shared out.
  double images = e["modules"][0]["flops_per_step"];
  double language = e["modules"][1]["flops_per_step"];
  EXPECT_NEAR(images + language, e["model_flops_per_step"].get<double>(),
              1e-9 * language);
  EXPECT_DOUBLE_EQ(e["modules"][0]["flops_per_rank"].get<double>(), images / 4);
  e["modules"][0].erase("flops_per_step");
  e["modules"][0].erase("flops_per_rank");
  // Nothing frozen: every parameter of the module trains, at the model's
  // learning rate.
  EXPECT_GT(e["modules"][0]["trainable_params"].get<int64_t>(), 0);
  EXPECT_EQ(e["modules"][0]["frozen_params"], 0);
  EXPECT_EQ(e["modules"][0]["lr_mult"], 1.0);
  e["modules"][0].erase("trainable_params");
  e["modules"][0].erase("frozen_params");
  e["modules"][0].erase("lr_mult");
  EXPECT_EQ(e["modules"][0]["forward_only"], false);
  e["modules"][0].erase("forward_only");
  EXPECT_EQ(e["modules"][0]["stage_layers"], json({2}));
  EXPECT_EQ(e["modules"][1]["stage_layers"], json({2, 2}));
  e["modules"][0].erase("stage_layers");
  EXPECT_EQ(e["modules"][0]["recompute"], "none");
  EXPECT_TRUE(e["modules"][0]["recompute_layers"].is_null());
  e["modules"][0].erase("recompute");
  e["modules"][0].erase("recompute_layers");
  EXPECT_EQ(e["modules"][0]["optimizer_shards"], 1);
  e["modules"][0].erase("optimizer_shards");
  EXPECT_EQ(e["modules"][0]["cp_comm"], "ring"); // the default
  e["modules"][0].erase("cp_comm");
  EXPECT_TRUE(e["modules"][0]["lora"].is_null()); // docs/model.md LoRA
  e["modules"][0].erase("lora");
  EXPECT_TRUE(e["modules"][0]["moe"].is_null()); // dense
  e["modules"][0].erase("moe");
  EXPECT_EQ(e["modules"][0], json({{"name", "images"},
                                   {"kind", "encoder"},
                                   {"rank_offset", 0},
                                   {"tp", 1},
                                   {"cp", 1},
                                   {"pp", 1},
                                   {"dp", 4},
                                   {"order", {"tp", "cp", "dp", "pp"}}}));
  ASSERT_EQ(e["ranks"].size(), 8u);
  std::vector<std::string> roles;
  for (const json &rank : e["ranks"]) {
    ASSERT_EQ(rank["modules"].size(), 1u);
    roles.push_back(role(rank["modules"][0]));
  }
  EXPECT_EQ(roles,
            (std::vector<std::string>{"images tp0 cp0 dp0 pp0 first last",
                                      "images tp0 cp0 dp1 pp0 first last",
                                      "images tp0 cp0 dp2 pp0 first last",
                                      "images tp0 cp0 dp3 pp0 first last",
                                      "language tp0 cp0 dp0 pp0 first",
                                      "language tp1 cp0 dp0 pp0 first",
                                      "language tp0 cp0 dp0 pp1 last",
                                      "language tp1 cp0 dp0 pp1 last"}));
}

TEST(ExplainTest, ColocatedExampleGivesEveryRankBothRoles) {
  json e = explain(test::readExample("vlm-colocated.json"));
  EXPECT_EQ(e["world_size"], 8);
  EXPECT_EQ(e["layout"], "colocated");
  for (const json &rank : e["ranks"]) {
    int r = rank["rank"];
    ASSERT_EQ(rank["modules"].size(), 2u);
    // §11.9: encoder tp2·dp4 -> (dp, tp) = (r div 2, r mod 2); language
    // tp4·dp2 -> (r div 4, r mod 4).
    EXPECT_EQ(rank["modules"][0]["dp"], r / 2);
    EXPECT_EQ(rank["modules"][0]["tp"], r % 2);
    EXPECT_EQ(rank["modules"][1]["dp"], r / 4);
    EXPECT_EQ(rank["modules"][1]["tp"], r % 4);
  }
}

TEST(ExplainTest, AllExamplesCompile) {
  for (const char *name : {"vlm-fan-in.json", "vlm-fan-out.json",
                           "vlm-colocated.json", "vlm-colocated-pp2.json",
                           "avlm.json", "lm-cp2-sp.json", "packed-thd.json"}) {
    json e = explain(test::readExample(name), name);
    ASSERT_TRUE(e.is_object()) << name;
    int64_t world = e["world_size"];
    EXPECT_EQ(e["ranks"].size(), static_cast<size_t>(world)) << name;
    for (const json &rank : e["ranks"])
      EXPECT_FALSE(rank["modules"].empty()) << name;
  }
}

TEST(ExplainTest, CoordinatesFollowAnyOrder) {
  // Language tp2·cp2·dp2·pp2 at offset 2 behind an encoder dp2, for all 24
  // orders: rank = offset + Σ coordinate · stride, first name fastest.
  std::vector<std::string> names = {"cp", "dp", "pp", "tp"};
  int orders = 0;
  do {
    ++orders;
    json document = test::baseModel();
    document["modules"][0]["parallel"] = {{"dp", 2}};
    document["modules"][1]["parallel"] = {{"tp", 2},          {"cp", 2},
                                          {"dp", 2},          {"pp", 2},
                                          {"rank_offset", 2}, {"order", names}};
    document["modules"][1]["arch"]["num_layers"] = 4;
    json e = explain(document.dump());
    ASSERT_EQ(e["world_size"], 18);
    for (int rank = 2; rank < 18; ++rank) {
      const json &entry = e["ranks"][rank]["modules"][0];
      int expected = 2, stride = 1;
      for (const std::string &dim : names) {
        expected += entry[dim].get<int>() * stride;
        stride *= 2;
      }
      EXPECT_EQ(expected, rank);
      EXPECT_EQ(entry["first_stage"], entry["pp"] == 0);
      EXPECT_EQ(entry["last_stage"], entry["pp"] == 1);
    }
  } while (std::next_permutation(names.begin(), names.end()));
  EXPECT_EQ(orders, 24);
}

// README.md keys: bridges, stages and warm-ups (docs/plan.md's fan-in row,
// with the example's M = 4), against the compiled IR.
TEST(ExplainTest, FanInBridgeStagesAndWarmups) {
  json e = explain(test::readExample("vlm-fan-in.json"));
  ASSERT_EQ(e["bridges"].size(), 1u);
  const json &b = e["bridges"][0];
  EXPECT_EQ(b["src"], "images");
  EXPECT_EQ(b["dst"], "language");
  EXPECT_EQ(b["mode"], "fan_in");
  EXPECT_EQ(b["ratio"], 4);
  EXPECT_EQ(b["tensor_ndim"], 2);
  EXPECT_EQ(b["batch_dim"], 0);
  EXPECT_EQ(b["src_leaders"], json::parse("[0,1,2,3]"));
  EXPECT_EQ(b["dst_leaders"], json::parse("[4]"));
  EXPECT_EQ(b["routes"], json::parse(R"([{"from":0,"to":4},{"from":1,"to":4},
                                         {"from":2,"to":4},{"from":3,"to":4}])"));
  EXPECT_EQ(b["src_broadcast_groups"], json::parse("[[0],[1],[2],[3]]"));
  EXPECT_EQ(b["dst_broadcast_groups"], json::parse("[[4,5]]"));
  std::vector<int> stages, warmups;
  for (const json &rank : e["ranks"]) {
    stages.push_back(rank["stage"].get<int>());
    warmups.push_back(rank["warmup"].get<int>());
  }
  EXPECT_EQ(stages, (std::vector<int>{0, 0, 0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(warmups, (std::vector<int>{2, 2, 2, 2, 1, 1, 0, 0}));
  // SP over tp2 without CP: each TP rank of the first stage holds half.
  EXPECT_EQ(e["shards"], json::parse(R"([{"rank":4,"positions":[[0,64]]},
                                         {"rank":5,"positions":[[64,128]]}])"));
}

// Reference §11.8 CP zigzag then SP, on the lm-cp2-sp example (S = 128).
TEST(ExplainTest, CpZigzagThenSpShards) {
  json e = explain(test::readExample("lm-cp2-sp.json"));
  EXPECT_EQ(e["shards"], json::parse(R"([
      {"rank":2,"positions":[[0,32]]}, {"rank":3,"positions":[[96,128]]},
      {"rank":4,"positions":[[32,64]]}, {"rank":5,"positions":[[64,96]]}])"));
  EXPECT_EQ(e["bridges"][0]["dst_broadcast_groups"],
            json::parse("[[2,3,4,5]]"));
  EXPECT_EQ(e["bridges"][0]["dst_leaders"], json::parse("[2]"));
}

TEST(ExplainTest, ColocatedBridge) {
  json e = explain(test::readExample("vlm-colocated.json"));
  const json &b = e["bridges"][0];
  EXPECT_EQ(b["mode"], "colocated");
  EXPECT_EQ(b["direction"], "fan_in");
  EXPECT_EQ(b["ratio"], 2);
  // Reference §11.9: src tp2·dp4, dest tp4·dp2.
  EXPECT_EQ(b["gather_groups"], json::parse("[[0,2],[1,3],[4,6],[5,7]]"));
  for (const json &rank : e["ranks"]) {
    EXPECT_EQ(rank["stage"], 0);
    EXPECT_EQ(rank["warmup"], 0);
  }
}

TEST(ExplainTest, OnlyRank) {
  static mlir::MLIRContext context;
  CompileResult result =
      compileModel(context, "m.json", test::readExample("vlm-fan-out.json"));
  ASSERT_TRUE(result.succeeded());
  json e = json::parse(explainPlan(*result.plan, 3).dump());
  ASSERT_EQ(e["ranks"].size(), 1u);
  EXPECT_EQ(e["ranks"][0]["rank"], 3);
  EXPECT_EQ(role(e["ranks"][0]["modules"][0]), "images tp1 cp0 dp0 pp1 last");
  std::string text =
      renderExplainText(Explanation(*result.plan), "vlm-fan-out");
  EXPECT_NE(text.find("model vlm-fan-out: 8 ranks, non_colocated"),
            std::string::npos);
}

TEST(ExplainTest, RangeListWritesRunsAndElidesLongLists) {
  EXPECT_EQ(rangeList({}, 40), "");
  EXPECT_EQ(rangeList({5}, 40), "5");
  EXPECT_EQ(rangeList({3, 1, 2, 2, 7}, 40), "1-3, 7");
  std::vector<int64_t> leaders, members;
  for (int64_t r = 0; r < 1024; ++r)
    (r % 8 == 7 ? leaders : members).push_back(r);
  EXPECT_EQ(rangeList(leaders, 40), "7, 15, ..., 1023 (128 values)");
  EXPECT_EQ(rangeList(members, 40), "0-6, 8-14, ..., 1016-1022 (128 blocks)");
  // Three runs are never elided, however long.
  EXPECT_EQ(rangeList({1000000, 2000000, 3000000}, 4),
            "1000000, 2000000, 3000000");
}

TEST(ExplainTest, BubbleFormula) {
  EXPECT_DOUBLE_EQ(pipelineBubble(1, 4), 0.0);
  EXPECT_DOUBLE_EQ(pipelineBubble(3, 4), 2.0 / 6);
  EXPECT_DOUBLE_EQ(pipelineBubble(5, 8), 4.0 / 12);
  // (P - 1) / (M + P - 1) <= 1/4 from M = 3 (P - 1).
  EXPECT_EQ(microbatchesForBubble(5, 0.25), 12);
  EXPECT_LE(pipelineBubble(5, 12), 0.25);
  EXPECT_GT(pipelineBubble(5, 11), 0.25);
  EXPECT_EQ(microbatchesForBubble(1, 0.25), 1);
  EXPECT_EQ(microbatchesForBubble(4, 0.1), 27);
}

/// The fan-in example's model with the language grid and microbatches
/// replaced.
std::string fanIn(int64_t microbatches, int64_t encoderHidden) {
  json m = json::parse(test::readExample("vlm-fan-in.json"));
  m["batch"]["num_microbatches"] = microbatches;
  m["modules"][0]["arch"]["hidden_size"] = encoderHidden;
  m["modules"][0]["arch"]["ffn_hidden_size"] = 4 * encoderHidden;
  return m.dump();
}

TEST(ExplainTest, WarnsOnImbalanceAndBubble) {
  json e = explain(fanIn(4, 64));
  ASSERT_EQ(e["warnings"].size(), 2u);
  EXPECT_EQ(e["warnings"][0].get<std::string>().rfind(
                "imbalance: each 'language' rank does ", 0),
            0u);
  EXPECT_EQ(e["warnings"][1],
            "pipeline bubble 33% (3 stages, 4 microbatches: each rank idles "
            "2 of 6 slots); num_microbatches >= 6 brings it to 25% or below");
  // Enough microbatches: no bubble warning. An encoder as heavy per rank as
  // the language stages: no imbalance warning.
  e = explain(fanIn(6, 64));
  ASSERT_EQ(e["warnings"].size(), 1u);
  EXPECT_EQ(e["warnings"][0].get<std::string>().rfind("imbalance", 0), 0u);
  e = explain(fanIn(6, 512));
  double images = e["modules"][0]["flops_per_rank"];
  double language = e["modules"][1]["flops_per_rank"];
  EXPECT_LT(std::max(images, language) / std::min(images, language), 4);
  EXPECT_TRUE(e["warnings"].empty()) << e["warnings"].dump();
}

/// Zero bubble (docs/plan.md): the bubble of Schedule.h's
/// zeroBubbleUnits in the JSON, the header and the warning, whose advice
/// counts about a third of the microbatches: with 3 stages and M = 2,
/// 2(M + P) - 1 = 9 units of which 3 idle; M = 1, 7 of which 4; M = 3,
/// 3M + P - 1 = 11 of which 2 (18%); M = 4, 3M + 2(P - 1) = 16 of which 4
/// (25%).
TEST(ExplainTest, ZeroBubbleShowsItsSmallerBubble) {
  json m = json::parse(fanIn(2, 64));
  m["batch"]["schedule"] = "zero_bubble";
  json e = explain(m.dump());
  EXPECT_EQ(e["schedule"], "zero_bubble");
  EXPECT_DOUBLE_EQ(e["pipeline_bubble"].get<double>(), 3.0 / 9);
  EXPECT_DOUBLE_EQ(e["pipeline_bubble"].get<double>(), zeroBubbleShare(3, 2));
  EXPECT_DOUBLE_EQ(zeroBubbleShare(3, 1), 4.0 / 7);
  EXPECT_DOUBLE_EQ(zeroBubbleShare(3, 3), 2.0 / 11);
  EXPECT_DOUBLE_EQ(zeroBubbleShare(3, 4), 4.0 / 16);
  EXPECT_EQ(findSchedule("zero_bubble")->microbatchesForBubble(3, 0.25, 1), 3);
  // 18% at M = 3 but 25% at M = 4: from M = 5 (21%) on it stays below.
  EXPECT_EQ(findSchedule("zero_bubble")->microbatchesForBubble(3, 0.22, 1), 5);
  EXPECT_EQ(findSchedule("zero_bubble")->microbatchesForBubble(3, 0.2, 1), 6);
  EXPECT_EQ(findSchedule("zero_bubble")->microbatchesForBubble(3, 0.15, 1),
            8); // 4 of 28 units
  EXPECT_LE(zeroBubbleShare(3, 8), 0.15);
  EXPECT_GT(zeroBubbleShare(3, 7), 0.15);
  m["batch"]["num_microbatches"] = 1;
  e = explain(m.dump());
  ASSERT_FALSE(e["warnings"].empty());
  EXPECT_EQ(e["warnings"].back(),
            "pipeline bubble 57% (3 stages, 1 microbatches, zero bubble: "
            "each rank idles 4 of 7 thirds of a slot); num_microbatches >= 3 "
            "brings it to 25% or below");
  EXPECT_NE(explainText(m.dump()).find("(bubble 57%, zero bubble)"),
            std::string::npos);
}

TEST(ExplainTest, InterleavedShowsItsSmallerBubble) {
  json m = json::parse(fanIn(2, 64)); // 3 stages (language pp 2), M = 2
  m["batch"]["schedule"] = "interleaved";
  m["modules"][1]["parallel"]["virtual_stages"] = 2;
  m["modules"][1]["arch"]["num_layers"] = 4;
  json e = explain(m.dump());
  EXPECT_EQ(e["schedule"], "interleaved");
  EXPECT_EQ(e["virtual_stages"], 2);
  EXPECT_DOUBLE_EQ(e["pipeline_bubble"].get<double>(), 2.0 / 6);
  ASSERT_FALSE(e["warnings"].empty());
  EXPECT_EQ(e["warnings"].back(),
            "pipeline bubble 33% (3 stages, 2 microbatches, 2 virtual "
            "stages: each rank idles 2 of 6 chunk slots); num_microbatches "
            ">= 4 brings it to 25% or below");
  EXPECT_NE(
      explainText(m.dump()).find("(bubble 33%, interleaved, 2 virtual stages)"),
      std::string::npos);
}

TEST(ExplainTest, TextStaysSmallAtAnyScale) {
  // Same roles, 16x the ranks: the text has the same number of lines.
  auto lines = [](const std::string &text) {
    size_t widest = 0, count = 0, start = 0;
    for (size_t end; (end = text.find('\n', start)) != std::string::npos;
         start = end + 1, ++count)
      widest = std::max(widest, end - start);
    return std::make_pair(count, widest);
  };
  json m = json::parse(test::readExample("vlm-fan-in.json"));
  std::string small = explainText(m.dump());
  m["modules"][0]["parallel"]["dp"] = 64;
  m["modules"][1]["parallel"]["dp"] = 16;
  m["modules"][1]["parallel"]["rank_offset"] = 64;
  m["batch"]["micro_batch_size"] = 128;
  std::string large = explainText(m.dump());
  EXPECT_EQ(lines(large).first, lines(small).first + 0) << large;
  EXPECT_LE(lines(large).second, 200u) << large;
}

TEST(ExplainTest, StreamedJsonIsTheWholeDocument) {
  // explain --json writes ranks[] and shards[] one item at a time: the text
  // is exactly the whole document's dump(2), for every example and for one
  // rank.
  static mlir::MLIRContext context;
  for (const char *example :
       {"vlm-fan-in.json", "vlm-fan-out.json", "vlm-colocated.json",
        "vlm-colocated-pp2.json", "avlm.json"}) {
    CompileResult result =
        compileModel(context, example, test::readExample(example));
    ASSERT_TRUE(result.succeeded()) << example;
    for (std::optional<int64_t> rank :
         {std::optional<int64_t>(), std::optional<int64_t>(1)}) {
      Explanation e(*result.plan, rank);
      std::string streamed;
      e.writeJson([&](std::string_view piece) { streamed += piece; });
      EXPECT_EQ(streamed, e.toJson().dump(2)) << example;
      EXPECT_EQ(json::parse(streamed)["ranks"].size(),
                rank ? 1u
                     : static_cast<size_t>(result.plan->topology.worldSize));
    }
  }
  // Empty arrays and nested values keep dump(2)'s shape.
  nlohmann::ordered_json doc = {{"a", nlohmann::ordered_json::array()},
                                {"b", nullptr},
                                {"c", {{"d", {1, 2}}, {"e", "x\"y"}}},
                                {"f", nullptr}};
  std::string text;
  writeJsonStreamed(
      doc,
      {{"b", 0, nullptr},
       {"f", 2,
        [](size_t i) { return nlohmann::ordered_json{{"i", i}, {"l", {i}}}; }}},
      [&](std::string_view piece) { text += piece; });
  nlohmann::ordered_json expected = doc;
  expected["b"] = nlohmann::ordered_json::array();
  expected["f"] = {{{"i", 0}, {"l", {0}}}, {{"i", 1}, {"l", {1}}}};
  EXPECT_EQ(text, expected.dump(2));
}

TEST(ExplainTest, FrozenAndTrainableParametersPerModule) {
  json m = json::parse(test::readExample("vlm-fan-in.json"));
  json whole = explain(m.dump());
  m["modules"][0]["freeze"] = {"patch", "layers"};
  m["modules"][0]["lr_mult"] = 0.1;
  m["modules"][1]["freeze"] = true;
  json e = explain(m.dump());
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(e["modules"][i]["trainable_params"].get<int64_t>() +
                  e["modules"][i]["frozen_params"].get<int64_t>(),
              whole["modules"][i]["trainable_params"].get<int64_t>());
  // The images encoder trains its projector alone: two linear layers with
  // biases, hidden 64 -> 128 -> 128 (the language width).
  EXPECT_EQ(e["modules"][0]["trainable_params"],
            64 * 128 + 128 + 128 * 128 + 128);
  EXPECT_EQ(e["modules"][1]["trainable_params"], 0);
  // Per rank: the language ranks (4-7) train nothing; an images rank
  // (DP4: each holds the whole encoder) trains its projector.
  for (int r = 4; r < 8; ++r)
    EXPECT_EQ(e["ranks"][r]["memory"]["trainable_params"], 0) << r;
  EXPECT_EQ(e["ranks"][0]["memory"]["trainable_params"],
            e["modules"][0]["trainable_params"]);
  EXPECT_GT(e["ranks"][0]["memory"]["params"].get<int64_t>(),
            e["ranks"][0]["memory"]["trainable_params"].get<int64_t>());
  std::string text = explainText(m.dump());
  EXPECT_NE(text.find("training:\n  images: 24832 of 126784 parameters "
                      "trained, learning rate x0.1\n  language: frozen\n"),
            std::string::npos)
      << text;
}

/// pipeline_layers: the module table gives each stage's layers.
TEST(ExplainTest, UnevenStagesShowTheirLayers) {
  json m = json::parse(test::readExample("vlm-fan-in.json"));
  m["modules"][1]["pipeline_layers"] = {3, 1};
  json e = explain(m.dump());
  EXPECT_EQ(e["modules"][1]["stage_layers"], json({3, 1}));
  std::string text = explainText(m.dump());
  EXPECT_NE(text.find(" 2 (3+1) "), std::string::npos) << text;
  EXPECT_EQ(explainText(test::readExample("vlm-fan-in.json")).find("(2+2)"),
            std::string::npos);
}

/// Recomputation (docs/model.md): the memory column and the memory plan
/// count it, the training lines say it.
TEST(ExplainTest, RecomputationShowsAndSavesActivationMemory) {
  json m = json::parse(test::readExample("vlm-fan-in.json"));
  json plain = explain(m.dump());
  m["modules"][0]["recompute"] = "selective";
  m["modules"][1]["recompute"] = "full";
  m["modules"][1]["recompute_layers"] = 1;
  json e = explain(m.dump());
  EXPECT_EQ(e["modules"][1]["recompute"], "full");
  EXPECT_EQ(e["modules"][1]["recompute_layers"], 1);
  // A language rank keeps one layer's cache of its two less per microbatch
  // in flight; an encoder rank (one microbatch at a time) saves its
  // activations' output only to make it again in the backward.
  auto activations = [](const json &x, int r) {
    return x["ranks"][r]["memory"]["activation_bytes"].get<double>();
  };
  EXPECT_LT(activations(e, 4), activations(plain, 4));
  EXPECT_LE(activations(e, 0), activations(plain, 0));
  std::string text = explainText(m.dump());
  EXPECT_NE(text.find("  images: 126784 of 126784 parameters trained, "
                      "recomputes its MLP activations\n  language: "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("recomputes the first 1 layer(s) of each stage\n"),
            std::string::npos)
      << text;
}

/// The distributed optimizer (docs/model.md): the module's ranks keep
/// 1/(dp·cp) of its moments in the memory plan, and the training lines say
/// over how many ranks; a module of one DP x CP rank shards nothing.
TEST(ExplainTest, DistributedOptimizerShardsTheMoments) {
  json m = json::parse(test::readExample("vlm-fan-in.json"));
  json plain = explain(m.dump());
  for (json &module : m["modules"])
    module["distributed_optimizer"] = true;
  json e = explain(m.dump());
  EXPECT_EQ(e["modules"][0]["optimizer_shards"], 4); // images: DP4
  EXPECT_EQ(e["modules"][1]["optimizer_shards"], 1); // language: TP2 x PP2
  auto optimizer = [](const json &x, int r) {
    return x["ranks"][r]["memory"]["optimizer_bytes"].get<double>();
  };
  // The encoder's 126784 parameters, each padded to 64 values, over 4.
  EXPECT_NEAR(optimizer(e, 0), optimizer(plain, 0) / 4, 8.0);
  EXPECT_EQ(optimizer(e, 4), optimizer(plain, 4));
  std::string text = explainText(m.dump());
  EXPECT_NE(text.find("  images: 126784 of 126784 parameters trained, "
                      "optimizer state sharded over 4 ranks\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("  language:"), std::string::npos) << text;
  // Under bf16 the fp32 masters are sharded too: 2 bytes a value for the
  // working weights and 4 for a quarter of the masters.
  json bf16 = m;
  bf16["precision"] = "bf16";
  for (json &module : bf16["modules"])
    module.erase("distributed_optimizer");
  json plainBf16 = explain(bf16.dump());
  for (json &module : bf16["modules"])
    module["distributed_optimizer"] = true;
  json shardedBf16 = explain(bf16.dump());
  auto params = [](const json &x, int r) {
    return x["ranks"][r]["memory"]["param_bytes"].get<double>();
  };
  EXPECT_NEAR(params(shardedBf16, 0), params(plainBf16, 0) * 3.0 / 6.0, 64.0);
  EXPECT_EQ(params(shardedBf16, 4), params(plainBf16, 4));
}

} // namespace
