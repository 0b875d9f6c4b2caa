//===- ExplainTest.cpp - mimoc explain --json of the examples -------------===//

#include "TestModels.h"

#include "codegen/Explain.h"
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
  auto model = *result.module->getOps<ir::ModelOp>().begin();
  return json::parse(explainModel(model).dump());
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
  for (const char *name :
       {"vlm-fan-in.json", "vlm-fan-out.json", "vlm-colocated.json",
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

TEST(ExplainTest, OnlyRank) {
  static mlir::MLIRContext context;
  CompileResult result =
      compileModel(context, "m.json", test::readExample("vlm-fan-out.json"));
  ASSERT_TRUE(result.succeeded());
  auto model = *result.module->getOps<ir::ModelOp>().begin();
  json e = json::parse(explainModel(model, 3).dump());
  ASSERT_EQ(e["ranks"].size(), 1u);
  EXPECT_EQ(e["ranks"][0]["rank"], 3);
  EXPECT_EQ(role(e["ranks"][0]["modules"][0]), "images tp1 cp0 dp0 pp1 last");
  std::string text = renderExplainText(explainModel(model), "vlm-fan-out");
  EXPECT_NE(text.find("model vlm-fan-out: 8 ranks, non_colocated"),
            std::string::npos);
}

} // namespace
