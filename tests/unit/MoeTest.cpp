//===- MoeTest.cpp - Mixture of experts: routing, losses, model.json ------===//
//
// family/Moe.h's routing against its definition in docs/model.md, written
// again here in double, and its router backward against central
// differences of that definition; then arch.moe's keys in model.json.
//
//===----------------------------------------------------------------------===//

#include "runtime/family/Moe.h"
#include "runtime/config/Flops.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/config/Parameters.h"
#include "runtime/family/HfConfigCheck.h"
#include "runtime/family/ModuleFamily.h"
#include "runtime/plan/BuildTopology.h"
#include "runtime/plan/Plan.h"
#include "runtime/support/Random.h"
#include "tests/unit/TestModels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>
#include <tuple>

using namespace mimo;
using mimo::exec::Stream;
using nlohmann::json;

namespace {

MoeConfig config(int64_t experts, int64_t topK, bool sigmoid, bool norm) {
  MoeConfig moe;
  moe.experts = experts;
  moe.topK = topK;
  moe.router.sigmoid = sigmoid;
  moe.router.normTopk = norm;
  return moe;
}

std::vector<float> randomLogits(int64_t rows, int64_t experts, uint64_t seed) {
  Stream rng(seed);
  std::vector<float> z(static_cast<size_t>(rows * experts));
  for (float &v : z)
    v = static_cast<float>(4 * rng.uniform() - 2);
  return z;
}

/// docs/model.md's objective of one microbatch's routing, in double, for
/// fixed routes `choice`: Σ_t Σ_j c[t, j] · w[t, j] + a · aux + b · z, over
/// the real rows for the two losses.
double objective(const MoeConfig &moe, const std::vector<double> &z,
                 const std::vector<int32_t> &choice,
                 const std::vector<double> &c, const std::vector<uint8_t> &real,
                 double a, double b) {
  const auto E = static_cast<size_t>(moe.experts),
             K = static_cast<size_t>(moe.topK);
  const size_t rows = z.size() / E;
  double total = 0, n = 0, zsum = 0;
  std::vector<double> count(E, 0), prob(E, 0);
  for (size_t t = 0; t < rows; ++t) {
    std::vector<double> s(E), p(E);
    double top = -HUGE_VAL, sum = 0;
    for (size_t e = 0; e < E; ++e)
      top = std::max(top, z[t * E + e]);
    for (size_t e = 0; e < E; ++e)
      sum += std::exp(z[t * E + e] - top);
    const double lse = top + std::log(sum);
    double all = 0;
    for (size_t e = 0; e < E; ++e) {
      s[e] = moe.router.sigmoid ? 1 / (1 + std::exp(-z[t * E + e]))
                                : std::exp(z[t * E + e] - lse);
      all += s[e];
    }
    for (size_t e = 0; e < E; ++e)
      p[e] = moe.router.sigmoid ? s[e] / all : s[e];
    double chosen = 0;
    for (size_t j = 0; j < K; ++j)
      chosen += s[static_cast<size_t>(choice[t * K + j])];
    for (size_t j = 0; j < K; ++j) {
      const double w = s[static_cast<size_t>(choice[t * K + j])] /
                       (moe.router.normTopk ? chosen : 1.0);
      total += c[t * K + j] * w;
    }
    if (!real[t])
      continue;
    n += 1;
    zsum += lse * lse;
    for (size_t j = 0; j < K; ++j)
      count[static_cast<size_t>(choice[t * K + j])] += 1;
    for (size_t e = 0; e < E; ++e)
      prob[e] += p[e];
  }
  double aux = 0;
  for (size_t e = 0; e < E; ++e)
    aux += count[e] / (static_cast<double>(K) * n) * prob[e] / n;
  aux *= static_cast<double>(E);
  return total + a * aux + b * zsum / n;
}

TEST(Moe, RoutesToTheTopKWithTheirWeights) {
  const float z[] = {0.5f, 2.0f, -1.0f, 2.0f}; // a tie: the lower index first
  for (bool sigmoid : {false, true})
    for (bool norm : {false, true}) {
      MoeRouting r = routeTokens(config(4, 2, sigmoid, norm), z, 1, 4);
      ASSERT_EQ(r.choice, (std::vector<int32_t>{1, 3}));
      const double s =
          sigmoid ? 1 / (1 + std::exp(-2.0))
                  : std::exp(2.0) /
                        (std::exp(0.5) + 2 * std::exp(2.0) + std::exp(-1.0));
      const double w = norm ? 0.5 : s;
      EXPECT_NEAR(r.weight[0], w, 1e-7);
      EXPECT_NEAR(r.weight[1], w, 1e-7);
      double total = 0;
      for (double p : r.prob)
        total += p;
      EXPECT_NEAR(total, 1.0, 1e-12); // P is a distribution either way
    }
}

TEST(Moe, LossesOfABalancedAndAnUnbalancedRouter) {
  // Uniform probabilities and counts: aux = E · Σ (1/E)(1/E) = 1.
  MoeConfig moe = config(4, 1, false, false);
  std::vector<float> z(4 * 4, 0.0f);
  MoeRouting r = routeTokens(moe, z.data(), 4, 4);
  std::vector<uint8_t> real(4, 1);
  std::vector<double> stats = moeStatistics(r, real);
  EXPECT_EQ(r.choice, (std::vector<int32_t>{0, 0, 0, 0})); // ties: expert 0
  // Every slot chose expert 0 with P = 1/4 each: aux = 4 · 1 · 1/4 = 1.
  EXPECT_NEAR(moeLosses(moe, stats).aux, 1.0, 1e-12);
  EXPECT_NEAR(moeLosses(moe, stats).z, std::log(4.0) * std::log(4.0), 1e-12);
  // Collapsed onto expert 2 with probability ~1: aux -> E.
  for (size_t t = 0; t < 4; ++t)
    z[t * 4 + 2] = 30.0f;
  r = routeTokens(moe, z.data(), 4, 4);
  stats = moeStatistics(r, real);
  EXPECT_NEAR(moeLosses(moe, stats).aux, 4.0, 1e-9);
  // Padding rows count nowhere; statistics add across ranks.
  real = {1, 1, 0, 0};
  std::vector<double> half = moeStatistics(r, real);
  EXPECT_EQ(half.back(), 2.0);
  std::vector<double> other = moeStatistics(r, {0, 0, 1, 1});
  for (size_t i = 0; i < half.size(); ++i)
    EXPECT_DOUBLE_EQ(half[i] + other[i], stats[i]);
  // No real row: no loss.
  EXPECT_EQ(moeLosses(moe, moeStatistics(r, {0, 0, 0, 0})).aux, 0.0);
}

TEST(Moe, RouterBackwardMatchesFiniteDifferences) {
  const int64_t rows = 6, E = 5;
  for (bool sigmoid : {false, true})
    for (bool norm : {false, true})
      for (int64_t K : {int64_t(1), int64_t(2), int64_t(5)}) {
        SCOPED_TRACE(std::string(sigmoid ? "sigmoid" : "softmax") +
                     (norm ? " normalised" : "") + " top-" + std::to_string(K));
        MoeConfig moe = config(E, K, sigmoid, norm);
        std::vector<float> z = randomLogits(rows, E, 7 + K);
        MoeRouting r = routeTokens(moe, z.data(), rows, E);
        std::vector<uint8_t> real = {1, 1, 0, 1, 1, 1};
        Stream rng(3);
        std::vector<float> dweight(static_cast<size_t>(rows * K));
        std::vector<double> c(dweight.size());
        for (size_t i = 0; i < c.size(); ++i)
          dweight[i] = static_cast<float>(c[i] = rng.uniform() - 0.5);
        const double a = 0.7, b = 0.3;
        std::vector<double> stats = moeStatistics(r, real);
        std::vector<float> dz =
            moeRouterBackward(moe, r, dweight, real, stats, a, b);
        std::vector<double> x(z.begin(), z.end());
        for (size_t i = 0; i < x.size(); ++i) {
          const double h = 1e-6, saved = x[i];
          x[i] = saved + h;
          double up = objective(moe, x, r.choice, c, real, a, b);
          x[i] = saved - h;
          double down = objective(moe, x, r.choice, c, real, a, b);
          x[i] = saved;
          EXPECT_NEAR(dz[i], (up - down) / (2 * h), 2e-6) << "logit " << i;
        }
      }
}

/// plan/Plan.h expertGroups: the DP x CP group (ascending) cut into ep
/// consecutive members, and the members at the same place of every cut.
TEST(Moe, ExpertGroupsCutTheDpCpGroup) {
  // tp 2, cp 2, dp 2 (default order: tp fastest): rank 1's DP x CP group
  // is {1, 3, 5, 7}.
  Grid grid({2, 2, 2, 1}, kDefaultOrder, 0);
  ExpertGroups g = expertGroups(grid, 2, 2, 5);
  EXPECT_EQ(g.ep, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(g.edp, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(g.epRank, 0);
  EXPECT_EQ(g.edpRank, 1);
  g = expertGroups(grid, 4, 2, 3);
  EXPECT_EQ(g.ep, (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(g.edp, (std::vector<int64_t>{3}));
  EXPECT_EQ(g.epRank, 1);
  g = expertGroups(grid, 1, 2, 3); // no expert parallelism: edp is DP x CP
  EXPECT_EQ(g.ep, (std::vector<int64_t>{3}));
  EXPECT_EQ(g.edp, (std::vector<int64_t>{1, 3, 5, 7}));
  // Experts cut over etp 1 of the two TP ranks: both TP ranks hold the
  // same (whole) experts, so edp spans them.
  g = expertGroups(grid, 2, 1, 5);
  EXPECT_EQ(g.ep, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(g.edp, (std::vector<int64_t>{0, 1, 4, 5}));
  EXPECT_EQ(g.edpRank, 3);
  g = expertGroups(grid, 1, 1, 0);
  EXPECT_EQ(g.edp, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(g.edpRank, 0);
  // tp 4, dp 2, etp 2: TP ranks 0 and 2 hold cut 0, 1 and 3 cut 1.
  Grid wide({4, 1, 2, 1}, kDefaultOrder, 0);
  g = expertGroups(wide, 1, 2, 3);
  EXPECT_EQ(g.edp, (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(g.edpRank, 1);
  EXPECT_EQ(
      allExpertGroups(wide, 2, 2, /*edp=*/true),
      (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(moeExpertOf("layers.2.experts.13.down"), 13);
  EXPECT_EQ(moeExpertOf("layers.2.shared.down"), -1);
  EXPECT_EQ(moeExpertOf("layers.2.experts.x.down"), -1);
}

/// A topology (as read from hand-written IR) whose ep or etp the parser
/// would refuse is refused: the expert groups must tile the grid.
TEST(Moe, TopologiesRefuseExpertGroupsThatDoNotTile) {
  json model = test::baseModel(); // language TP2 x PP2, dp 1
  model["modules"][1]["arch"]["moe"] = {{"num_experts", 4}, {"top_k", 1}};
  model["modules"][1]["parallel"]["etp"] = 1;
  const TopologySource good = topologySource(
      test::requireConfig(parseModelConfig(model.dump(), "model.json")));
  std::string error;
  ASSERT_TRUE(buildTopology(good, TopologyParts::Stages, &error)) << error;
  TopologySource bad = good;
  bad.modules.back().etp = 3;
  EXPECT_FALSE(buildTopology(bad, TopologyParts::Stages, &error));
  EXPECT_NE(error.find("etp 3"), std::string::npos) << error;
  bad = good;
  bad.modules.back().ep = 2; // dp x cp 1
  EXPECT_FALSE(buildTopology(bad, TopologyParts::Stages, &error));
  EXPECT_NE(error.find("ep 2"), std::string::npos) << error;
  bad = good;
  bad.modules.front().etp = 1; // the dense encoder
  EXPECT_FALSE(buildTopology(bad, TopologyParts::Stages, &error));
}

TEST(Moe, SparseLayersAndNames) {
  MoeConfig moe = config(8, 2, false, true);
  EXPECT_TRUE(moe.sparse(0));
  EXPECT_EQ(moe.sparseLayers(6), 6);
  moe.allLayers = false;
  moe.layers = {1, 3};
  EXPECT_FALSE(moe.sparse(0));
  EXPECT_TRUE(moe.sparse(3));
  EXPECT_EQ(moe.sparseLayers(4), 2);
  EXPECT_EQ(moeExpertName(7, "down"), "experts.7.down");
  EXPECT_EQ(moeSharedName("up"), "shared.up");
  EXPECT_FALSE(MoeConfig().sparse(0)); // no experts: dense
}

/// vlm-fan-in.json with `moe` on its language model (and `arch` keys).
json withMoe(json moe, json arch = json::object()) {
  json m = test::baseModel();
  m["modules"][1]["arch"]["moe"] = std::move(moe);
  for (auto &[key, value] : arch.items())
    m["modules"][1]["arch"][key] = value;
  return m;
}

std::pair<std::string, std::string> firstError(const json &m) {
  ParseResult r = parseModelConfig(m.dump(), "model.json");
  if (r.diagnostics.empty())
    return {"", ""};
  return {r.diagnostics[0].pointer, r.diagnostics[0].message};
}

TEST(Moe, KeysParseAndAreWrittenBack) {
  json moe = {{"num_experts", 8},
              {"top_k", 2},
              {"expert_ffn_hidden_size", 64},
              {"shared_expert_ffn_hidden_size", 128},
              {"layers", {3, 1}},
              {"router",
               {{"score", "sigmoid"},
                {"norm_topk", false},
                {"aux_loss_coef", 0.02},
                {"z_loss_coef", 0.001}}}};
  ModelConfig c =
      test::requireConfig(parseModelConfig(withMoe(moe).dump(), "model.json"));
  const MoeConfig &e = c.language().moe;
  EXPECT_EQ(e.experts, 8);
  EXPECT_EQ(e.topK, 2);
  EXPECT_EQ(e.expertFfn, 64);
  EXPECT_EQ(e.sharedFfn, 128);
  EXPECT_TRUE(e.sharedGate) << "a shared expert is gated by default";
  EXPECT_EQ(e.layers, (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(e.router.sigmoid);
  EXPECT_FALSE(e.router.normTopk);
  EXPECT_EQ(e.router.zLossCoef, 0.001);
  // Written back, it parses to the same.
  ModelConfig again =
      test::requireConfig(parseModelConfig(toJson(c).dump(), "model.json"));
  EXPECT_EQ(again.language().moe.layers, e.layers);
  EXPECT_EQ(again.language().moe.router.auxLossCoef, 0.02);
  // Defaults: every layer sparse, experts as wide as ffn_hidden_size,
  // softmax, normalised, aux 0.01, no z loss; the family inferred.
  ModelConfig d = test::requireConfig(parseModelConfig(
      withMoe({{"num_experts", 4}, {"top_k", 1}}).dump(), "model.json"));
  EXPECT_TRUE(d.language().moe.allLayers);
  EXPECT_EQ(d.language().moe.expertFfn, d.language().ffnHiddenSize);
  EXPECT_TRUE(d.language().moe.router.normTopk);
  EXPECT_EQ(d.language().moe.router.auxLossCoef, 0.01);
  EXPECT_EQ(d.language().family().name(), "mixtral");
  // The sparse layers' parameters (family/Moe.h names), the dense ones'
  // MLP unchanged; qk norms under the qwen3_moe family's default.
  ModelConfig q = test::requireConfig(parseModelConfig(
      withMoe({{"num_experts", 2}, {"top_k", 1}, {"layers", {1}}},
              {{"family", "qwen3_moe"}})
          .dump(),
      "model.json"));
  EXPECT_TRUE(q.language().qkNorm);
  std::vector<std::string> names;
  for (const ParamSpec &p :
       stageParameters(q.language(), q.language().hiddenSize, false, 1, 0))
    names.push_back(p.local);
  for (const char *name :
       {"layers.0.gate", "layers.1.router", "layers.1.experts.1.down",
        "layers.1.q_norm", "layers.1.k_norm"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  EXPECT_EQ(std::find(names.begin(), names.end(), "layers.1.gate"),
            names.end());
}

TEST(Moe, BadKeysAreRefusedAtTheirPointer) {
  auto [at, message] = firstError(withMoe({{"num_experts", 4}, {"top_k", 5}}));
  EXPECT_EQ(at, "/modules/1/arch/moe/top_k");
  std::tie(at, message) = firstError(withMoe({{"top_k", 1}}));
  EXPECT_EQ(at, "/modules/1/arch/moe/num_experts");
  std::tie(at, message) = firstError(
      withMoe({{"num_experts", 4}, {"top_k", 1}, {"layers", {0, 4}}}));
  EXPECT_EQ(at, "/modules/1/arch/moe/layers/1");
  EXPECT_NE(message.find("0 to 3"), std::string::npos) << message;
  std::tie(at, message) = firstError(
      withMoe({{"num_experts", 4}, {"top_k", 1}, {"layers", "some"}}));
  EXPECT_EQ(at, "/modules/1/arch/moe/layers");
  std::tie(at, message) = firstError(withMoe(
      {{"num_experts", 4}, {"top_k", 1}, {"shared_expert_gate", true}}));
  EXPECT_EQ(at, "/modules/1/arch/moe/shared_expert_gate");
  std::tie(at, message) = firstError(withMoe(
      {{"num_experts", 4}, {"top_k", 1}, {"router", {{"score", "softmx"}}}}));
  EXPECT_EQ(at, "/modules/1/arch/moe/router/score");
  EXPECT_NE(message.find("softmax"), std::string::npos) << message;
  // Hugging Face's and Megatron's names point to mimo's.
  std::tie(at, message) =
      firstError(withMoe({{"num_local_experts", 4}, {"top_k", 1}}));
  EXPECT_EQ(at, "/modules/1/arch/moe/num_local_experts");
  EXPECT_NE(message.find("num_experts"), std::string::npos) << message;
  // The experts cut over TP (2 in vlm-fan-in.json).
  std::tie(at, message) = firstError(withMoe(
      {{"num_experts", 4}, {"top_k", 1}, {"expert_ffn_hidden_size", 33}}));
  EXPECT_EQ(at, "/modules/1/parallel/tp");
  // Expert parallelism: ep divides DP x CP (1 here) and the experts; etp
  // is tp. (With the distributed optimizer: the equivalence layouts.)
  json ep = withMoe({{"num_experts", 4}, {"top_k", 1}});
  ep["modules"][1]["parallel"]["ep"] = 2;
  std::tie(at, message) = firstError(ep);
  EXPECT_EQ(at, "/modules/1/parallel/ep");
  EXPECT_NE(message.find("dp x cp 1"), std::string::npos) << message;
  ep["modules"][1]["parallel"]["dp"] = 2;
  ep["modules"][1]["parallel"]["ep"] = 3;
  std::tie(at, message) = firstError(ep);
  EXPECT_EQ(at, "/modules/1/parallel/ep");
  ep["modules"][1]["parallel"]["ep"] = 2;
  ep["modules"][1]["parallel"]["rank_offset"] = 4;
  ModelConfig parsed =
      test::requireConfig(parseModelConfig(ep.dump(), "model.json"));
  EXPECT_EQ(parsed.language().parallel.ep, 2);
  EXPECT_EQ(toJson(parsed)["modules"][1]["parallel"]["ep"], 2);
  ep["modules"][1]["parallel"]["ep"] = 1;
  ep["modules"][1]["parallel"]["dp"] = 1;
  // etp divides tp (2 here), and the experts' width; the shared expert's
  // is cut over tp still. etp equal to tp is the default, not written.
  ep["modules"][1]["parallel"]["etp"] = 4;
  std::tie(at, message) = firstError(ep);
  EXPECT_EQ(at, "/modules/1/parallel/etp");
  EXPECT_NE(message.find("does not divide tp 2"), std::string::npos) << message;
  ep["modules"][1]["parallel"]["etp"] = 1;
  parsed = test::requireConfig(parseModelConfig(ep.dump(), "model.json"));
  EXPECT_EQ(parsed.language().parallel.expertTp(), 1);
  EXPECT_EQ(toJson(parsed)["modules"][1]["parallel"]["etp"], 1);
  ep["modules"][1]["arch"]["moe"]["expert_ffn_hidden_size"] = 33;
  EXPECT_EQ(firstError(ep).first, "")
      << "one TP rank holds each expert whole: any width";
  ep["modules"][1]["arch"]["moe"]["shared_expert_ffn_hidden_size"] = 33;
  EXPECT_EQ(firstError(ep).first, "/modules/1/parallel/tp");
  ep["modules"][1]["parallel"]["etp"] = 2;
  ep["modules"][1]["arch"]["moe"].erase("shared_expert_ffn_hidden_size");
  EXPECT_EQ(firstError(ep).first, "/modules/1/parallel/tp")
      << "etp 2 is tp's default: the width must divide by it";
  ep["modules"][1]["arch"]["moe"]["expert_ffn_hidden_size"] = 64;
  parsed = test::requireConfig(parseModelConfig(ep.dump(), "model.json"));
  EXPECT_EQ(parsed.language().parallel.etp, 0);
  EXPECT_FALSE(toJson(parsed)["modules"][1]["parallel"].contains("etp"));
  json dense = test::baseModel();
  dense["modules"][1]["parallel"]["etp"] = 1;
  std::tie(at, message) = firstError(dense);
  EXPECT_EQ(at, "/modules/1/parallel/etp");
  EXPECT_NE(message.find("no experts"), std::string::npos) << message;
  // A family's structure: Mixtral has no shared expert; a dense family
  // no experts.
  std::tie(at, message) = firstError(withMoe(
      {{"num_experts", 4}, {"top_k", 1}, {"shared_expert_ffn_hidden_size", 8}},
      {{"family", "mixtral"}}));
  EXPECT_EQ(at, "/modules/1/arch/moe");
  EXPECT_NE(message.find("no shared expert"), std::string::npos) << message;
  EXPECT_EQ(message.find("\"mixtral\""), std::string::npos) << message;
  std::tie(at, message) = firstError(
      withMoe({{"num_experts", 4}, {"top_k", 1}}, {{"family", "llama"}}));
  EXPECT_EQ(at, "/modules/1/arch/moe");
  EXPECT_NE(message.find("mixtral"), std::string::npos) << message;
  // A CLIP or SigLIP tower has no sparse layers; mimo's ViT may.
  json encoder = test::baseModel();
  encoder["modules"][0]["arch"]["moe"] = {{"num_experts", 4}, {"top_k", 1}};
  encoder["modules"][0]["arch"]["family"] = "siglip";
  encoder["modules"][0]["arch"]["max_positions"] = 64;
  std::tie(at, message) = firstError(encoder);
  EXPECT_EQ(at, "/modules/0/arch/moe");
  EXPECT_NE(message.find("no sparse layers"), std::string::npos) << message;
  encoder["modules"][0]["arch"].erase("family");
  encoder["modules"][0]["arch"].erase("max_positions");
  encoder["modules"][0]["parallel"]["ep"] = 3; // DP4
  std::tie(at, message) = firstError(encoder);
  EXPECT_EQ(at, "/modules/0/parallel/ep");
  // A sparse layer past output_layer would never run.
  encoder["modules"][0]["parallel"]["ep"] = 2;
  encoder["modules"][0]["arch"]["output_layer"] = -2; // of 2 layers
  encoder["modules"][0]["arch"]["moe"]["layers"] = {1};
  std::tie(at, message) = firstError(encoder);
  EXPECT_EQ(at, "/modules/0/arch/moe/layers");
  EXPECT_NE(message.find("output_layer"), std::string::npos) << message;
  encoder["modules"][0]["arch"]["moe"]["layers"] = {0};
  EXPECT_EQ(firstError(encoder).first, "");
  encoder["modules"][0]["lora"] = {{"r", 4}, {"targets", {"q", "fc1"}}};
  std::tie(at, message) = firstError(encoder);
  EXPECT_EQ(at, "/modules/0/lora/targets");
  EXPECT_NE(message.find("\"fc1\""), std::string::npos) << message;
  // LoRA on the MLP of a model whose every layer is sparse adapts nothing.
  json lora = withMoe({{"num_experts", 4}, {"top_k", 1}});
  lora["modules"][1]["lora"] = {{"r", 4}, {"targets", "all-linear"}};
  std::tie(at, message) = firstError(lora);
  EXPECT_EQ(at, "/modules/1/lora/targets");
}

/// A sparse tower (mimo's ViT with arch.moe): its sparse layers hold the
/// router and experts in place of fc1, fc2 and their biases, the rank's
/// block of them under ep; its FLOPs count the active experts; a CLIP
/// folder is refused for it and it exports to none.
TEST(Moe, ASparseTowerHasExpertsForItsMlp) {
  json m = test::baseModel();
  json &arch = m["modules"][0]["arch"];
  arch["bias"] = true;
  arch["moe"] = {{"num_experts", 4},
                 {"top_k", 2},
                 {"expert_ffn_hidden_size", 32},
                 {"shared_expert_ffn_hidden_size", 16},
                 {"layers", {1}}};
  m["modules"][0]["parallel"]["ep"] = 2;
  ModelConfig c = test::requireConfig(parseModelConfig(m.dump(), "model.json"));
  const ModuleConfig &tower = c.modules[0];
  EXPECT_EQ(tower.family().name(), "vit");
  std::set<std::string> names;
  for (const ParamSpec &spec :
       stageParameters(tower, c.language().hiddenSize, false, 1, 0))
    names.insert(spec.local);
  for (const char *held :
       {"layers.0.fc1", "layers.0.fc2_bias", "layers.1.router",
        "layers.1.experts.3.down", "layers.1.shared.up", "layers.1.shared_gate",
        "layers.1.ln2.bias"})
    EXPECT_TRUE(names.count(held)) << held;
  for (const char *absent :
       {"layers.1.fc1", "layers.1.fc1_bias", "layers.1.fc2", "layers.0.router"})
    EXPECT_FALSE(names.count(absent)) << absent;
  // FLOPs: the dense model's, less layer 1's MLP (2·H·F a token), plus its
  // router, two experts and gated shared expert.
  ModuleConfig dense = tower;
  dense.moe = MoeConfig();
  const double H = static_cast<double>(tower.hiddenSize);
  const double F = static_cast<double>(tower.ffnHiddenSize);
  const double tokens = 100;
  const double sparseMacs = H * 4 + 3 * H * (2 * 32 + 16) + H;
  EXPECT_DOUBLE_EQ(tower.moe.activeMacs(tower.hiddenSize), sparseMacs);
  EXPECT_NEAR(
      encoderForwardFlops(tower, c.language().hiddenSize, tokens, 0) -
          encoderForwardFlops(dense, c.language().hiddenSize, tokens, 0),
      tokens * 2 * (sparseMacs - 2 * H * F), 1e-6);
  // Hugging Face: no tower family of theirs is sparse.
  EXPECT_NE(tower.family().hfExportProblem(tower).find("sparse"),
            std::string::npos);
  std::vector<Diagnostic> found;
  json folder = {{"model_type", "clip_vision_model"}, {"patch_size", 4}};
  ConfigCheck k{folder,       "", "config.json", "/modules/0/arch/", found,
                "/modules/0", ""};
  tower.family().hfCheck(k, tower, c.batch.seqLength);
  bool named = false;
  for (const Diagnostic &d : found)
    named = named || d.pointer == "/modules/0/arch/moe";
  EXPECT_TRUE(named);
}

/// A MoE family's config.json against the arch (LlamaStyle.cpp): each
/// disagreement at its arch key; a sigmoid router has no Hugging Face
/// form; a family's structure names its qk norms.
TEST(Moe, HuggingFaceConfigsAreCheckedAndExportsRefused) {
  ModelConfig c = test::requireConfig(
      parseModelConfig(withMoe({{"num_experts", 4},
                                {"top_k", 2},
                                {"expert_ffn_hidden_size", 64},
                                {"layers", {1, 2, 3}}},
                               {{"family", "qwen3_moe"}})
                           .dump(),
                       "model.json"));
  const ModuleConfig &lm = c.language();
  json config = {{"model_type", "qwen3_moe"},
                 {"vocab_size", lm.vocabSize},
                 {"hidden_size", lm.hiddenSize},
                 {"num_hidden_layers", lm.numLayers},
                 {"num_attention_heads", lm.numHeads},
                 {"num_key_value_heads", lm.kvHeads()},
                 {"intermediate_size", lm.ffnHiddenSize},
                 {"rms_norm_eps", lm.normEps},
                 {"rope_theta", lm.ropeTheta},
                 {"num_experts", 4},
                 {"num_experts_per_tok", 2},
                 {"moe_intermediate_size", 64},
                 {"norm_topk_prob", true},
                 {"mlp_only_layers", {0}}};
  auto problems = [&](const json &folder) {
    std::vector<Diagnostic> found;
    ConfigCheck k{folder,       "", "config.json", "/modules/1/arch/", found,
                  "/modules/1", ""};
    lm.family().hfCheck(k, lm, c.batch.seqLength);
    std::string text;
    for (const Diagnostic &d : found)
      text += d.pointer + ": " + d.message + "\n";
    return text;
  };
  EXPECT_EQ(problems(config), "");
  json other = config;
  other["num_experts"] = 8;
  other["norm_topk_prob"] = false;
  other["mlp_only_layers"] = json::array();
  const std::string text = problems(other);
  for (const char *key :
       {"/modules/1/arch/moe/num_experts",
        "/modules/1/arch/moe/router/norm_topk", "/modules/1/arch/moe/layers"})
    EXPECT_NE(text.find(key), std::string::npos) << key << " in\n" << text;
  other = config;
  other["model_type"] = "qwen3"; // a dense folder
  EXPECT_NE(problems(other).find("/modules/1/arch/moe"), std::string::npos);
  // Exports: softmax is Hugging Face's; sigmoid has no form there.
  EXPECT_EQ(lm.family().hfExportProblem(lm), "");
  ModuleConfig sigmoid = lm;
  sigmoid.moe.router.sigmoid = true;
  EXPECT_NE(lm.family().hfExportProblem(sigmoid).find("sigmoid"),
            std::string::npos);
  // A Qwen3 family without its q/k norms names the key.
  auto [at, message] =
      firstError(withMoe({{"num_experts", 4}, {"top_k", 1}},
                         {{"family", "qwen3_moe"}, {"qk_norm", false}}));
  EXPECT_EQ(at, "/modules/1/arch/qk_norm");
  EXPECT_NE(message.find("mixtral"), std::string::npos) << message;
}

TEST(Moe, StackedExpertsOfTransformers5AreSlabsOfOneTensor) {
  // docs/pretrained.md "Mixtures of experts": mlp.experts.gate_up_proj
  // [E, 2F, H] holds expert J's gate then up rows, down_proj [E, H, F] its
  // down; the router is mlp.gate for Mixtral too.
  for (const char *family : {"mixtral", "qwen3_moe", "qwen2_moe"}) {
    SCOPED_TRACE(family);
    json moe = {{"num_experts", 4}, {"top_k", 2}};
    if (std::string(family) == "qwen2_moe")
      moe["shared_expert_ffn_hidden_size"] = 64;
    ModelConfig c = test::requireConfig(parseModelConfig(
        withMoe(moe, {{"family", family}}).dump(), "model.json"));
    const ModuleConfig &lm = c.language();
    HfLayout stacked;
    stacked.fusedExperts = true;
    auto source = [&](const HfLayout &layout, const std::string &local) {
      std::optional<HfSource> s = lm.family().hfSource(layout, local);
      EXPECT_TRUE(s.has_value()) << local;
      return s.value_or(HfSource{});
    };
    HfSource gate = source(stacked, "layers.1.experts.3.gate"),
             up = source(stacked, "layers.1.experts.3.up"),
             down = source(stacked, "layers.1.experts.3.down"),
             router = source(stacked, "layers.1.router");
    EXPECT_EQ(gate.name, "model.layers.1.mlp.experts.gate_up_proj");
    EXPECT_EQ(up.name, gate.name);
    EXPECT_EQ(std::tie(gate.slab, gate.part, gate.parts),
              std::make_tuple(int64_t(3), int64_t(0), int64_t(2)));
    EXPECT_EQ(std::tie(up.slab, up.part, up.parts),
              std::make_tuple(int64_t(3), int64_t(1), int64_t(2)));
    EXPECT_EQ(down.name, "model.layers.1.mlp.experts.down_proj");
    EXPECT_EQ(std::tie(down.slab, down.part, down.parts),
              std::make_tuple(int64_t(3), int64_t(0), int64_t(1)));
    EXPECT_TRUE(gate.transposed && up.transposed && down.transposed);
    EXPECT_EQ(router.name, "model.layers.1.mlp.gate.weight");
    // A tensor per expert otherwise; the shared expert's either way.
    EXPECT_EQ(source(HfLayout{}, "layers.1.experts.3.up").slab, -1);
    if (lm.moe.sharedFfn > 0) {
      EXPECT_EQ(source(stacked, "layers.1.shared.up").name,
                "model.layers.1.mlp.shared_expert.up_proj.weight");
    }
  }
}

} // namespace
