//===- PlanTest.cpp - Programs, verification and the plan file ------------===//
//
// The per-rank programs against docs/plan.md's tables (stages, warm-ups, bridge
// leaders), the simulator-based verifier against hand-made deadlocks and
// mismatches, and the plan file's round trip and rejection of bad plans.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/PlanFile.h"
#include "runtime/schedule/Formulas.h"

#include "tests/e2e/Layouts.h"
#include "tests/unit/TestModels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

namespace {

using namespace mimo;
using nlohmann::json;
using Ranks = std::vector<int64_t>;

struct Side {
  int64_t tp = 1, cp = 1, pp = 1, dp = 1, offset = 0;
  bool sp = false;
  std::vector<std::string> order = {"tp", "cp", "dp", "pp"};
};

/// A model with one encoder per entry of `encoders` and a language module.
json makeModel(const std::vector<Side> &encoders, const Side &lm,
               int64_t mbs = 8, int64_t microbatches = 4, int64_t seq = 64) {
  json model = {{"version", 1},
                {"name", "t"},
                {"batch",
                 {{"micro_batch_size", mbs},
                  {"num_microbatches", microbatches},
                  {"seq_length", seq}}}};
  auto parallel = [](const Side &s) {
    json p = {{"tp", s.tp},
              {"cp", s.cp},
              {"pp", s.pp},
              {"dp", s.dp},
              {"rank_offset", s.offset},
              {"order", s.order}};
    if (s.sp)
      p["sequence_parallel"] = true;
    return p;
  };
  for (size_t i = 0; i < encoders.size(); ++i)
    model["modules"].push_back({{"name", "enc" + std::to_string(i)},
                                {"kind", "encoder"},
                                {"special_token_id", 1000 + i},
                                {"arch",
                                 {{"feature_dim", 16},
                                  {"hidden_size", 32},
                                  {"num_layers", 4},
                                  {"num_heads", 4},
                                  {"ffn_hidden_size", 64}}},
                                {"parallel", parallel(encoders[i])}});
  model["modules"].push_back({{"name", "language"},
                              {"kind", "language"},
                              {"arch",
                               {{"vocab_size", 1024},
                                {"hidden_size", 64},
                                {"num_layers", 12},
                                {"num_heads", 8},
                                {"ffn_hidden_size", 128}}},
                              {"parallel", parallel(lm)}});
  return model;
}

Plan planOf(const json &model) {
  return test::requirePlan(
      test::requireConfig(validateModelConfig(model, "model.json")));
}

std::string problemsText(const std::vector<PlanProblem> &problems) {
  std::string text;
  for (const PlanProblem &p : problems)
    text += p.message + "\n";
  return text;
}

struct ScheduleCase {
  const char *name;
  Side encoder, language;
  int64_t total;
  Ranks warmups; // by rank
};

class ScheduleTest : public testing::TestWithParam<ScheduleCase> {};

// Reference §11.10 (grid [tp,cp,pp,dp], i.e. our order tp-cp-pp-dp; M = 4).
TEST_P(ScheduleTest, MatchesReference11_10) {
  const ScheduleCase &c = GetParam();
  Plan plan = planOf(makeModel({c.encoder}, c.language, 4, 4));
  EXPECT_EQ(plan.topology.totalStages, c.total);
  ASSERT_EQ(plan.topology.worldSize, int64_t(c.warmups.size()));
  for (int64_t rank = 0; rank < plan.topology.worldSize; ++rank) {
    size_t m = plan.topology.modulesOf(rank).front();
    const StageTopology *stage = plan.topology.stageOf(
        m, plan.topology.modules[m].grid.coordsOf(rank).pp);
    ASSERT_TRUE(stage);
    EXPECT_EQ(stage->warmup, c.warmups[rank]) << "rank " << rank;
    // Warm-up W means W forwards run before the steady state's first
    // forward-backward pair (M = 4 > W here).
    const Program &program = plan.programs[plan.rankProgram[rank]];
    int64_t forwards = 0;
    for (const Instr &in : program.instrs) {
      if (in.op == InstrOp::Backward && in.index == int32_t(m))
        break;
      forwards += in.op == InstrOp::Forward;
    }
    EXPECT_EQ(forwards, c.warmups[rank] + 1) << "rank " << rank;
  }
  EXPECT_EQ(problemsText(
                verifyPrograms(plan.topology, plan.programs, plan.rankProgram)),
            "");
}

const std::vector<std::string> kRefOrder = {"tp", "cp", "pp", "dp"};

INSTANTIATE_TEST_SUITE_P(
    Reference, ScheduleTest,
    testing::Values(
        ScheduleCase{
            "baseline_2gpu", {1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}, 2, {1, 0}},
        ScheduleCase{
            "lm_pp3_4gpu", {1, 1, 1, 1, 0}, {1, 1, 3, 1, 1}, 4, {3, 2, 1, 0}},
        ScheduleCase{"encoder_tp2_llm_tp2_pp3_8gpu",
                     {2, 1, 1, 1, 0, false, kRefOrder},
                     {2, 1, 3, 1, 2, false, kRefOrder},
                     4,
                     {3, 3, 2, 2, 1, 1, 0, 0}},
        ScheduleCase{"full_pp_8gpu",
                     {2, 1, 2, 1, 0, false, kRefOrder},
                     {2, 1, 2, 1, 4, false, kRefOrder},
                     4,
                     {3, 3, 2, 2, 1, 1, 0, 0}},
        ScheduleCase{"fan_in_dp4_to_dp1_llm_tp2_pp2_8gpu",
                     {1, 1, 1, 4, 0, false, kRefOrder},
                     {2, 1, 2, 1, 4, false, kRefOrder},
                     3,
                     {2, 2, 2, 2, 1, 1, 0, 0}},
        ScheduleCase{"fan_out_dp1_to_dp4_enc_tp2_pp2_8gpu",
                     {2, 1, 2, 1, 0, false, kRefOrder},
                     {1, 1, 1, 4, 4, false, kRefOrder},
                     3,
                     {2, 2, 1, 1, 0, 0, 0, 0}},
        ScheduleCase{"fan_in_dp2_to_dp1_llm_pp3_8gpu",
                     {1, 1, 1, 2, 0, false, kRefOrder},
                     {2, 1, 3, 1, 2, false, kRefOrder},
                     4,
                     {3, 3, 2, 2, 1, 1, 0, 0}}),
    [](const testing::TestParamInfo<ScheduleCase> &info) {
      return std::string(info.param.name);
    });

// Reference §11.10, bridge column.
TEST(PlanBridgeTest, LeadersAndBroadcastGroupsOfReference11_10) {
  {
    Plan plan = planOf(makeModel({{2, 1, 1, 1, 0, false, kRefOrder}},
                                 {2, 1, 3, 1, 2, false, kRefOrder}, 4));
    const BridgeTopology &b = plan.topology.bridges[0];
    EXPECT_EQ(b.srcLeaders, Ranks{1});
    EXPECT_EQ(b.dstLeaders, Ranks{2});
    EXPECT_EQ(b.dstBroadcastGroups, (std::vector<Ranks>{{2, 3}}));
  }
  {
    Plan plan = planOf(makeModel({{2, 1, 2, 1, 0, false, kRefOrder}},
                                 {2, 1, 2, 1, 4, false, kRefOrder}, 4));
    const BridgeTopology &b = plan.topology.bridges[0];
    EXPECT_EQ(b.routes, (std::vector<BridgeRoute>{{3, 4}}));
    EXPECT_EQ(b.srcBroadcastGroups, (std::vector<Ranks>{{2, 3}}));
    EXPECT_EQ(b.dstBroadcastGroups, (std::vector<Ranks>{{4, 5}}));
  }
  {
    Plan plan = planOf(makeModel({{1, 1, 1, 4, 0, false, kRefOrder}},
                                 {2, 1, 2, 1, 4, false, kRefOrder}, 4));
    const BridgeTopology &b = plan.topology.bridges[0];
    EXPECT_EQ(b.mode, BridgeMode::FanIn);
    EXPECT_EQ(b.ratio, 4);
    EXPECT_EQ(b.routes,
              (std::vector<BridgeRoute>{{0, 4}, {1, 4}, {2, 4}, {3, 4}}));
  }
  {
    Plan plan = planOf(makeModel({{2, 1, 2, 1, 0, false, kRefOrder}},
                                 {1, 1, 1, 4, 4, false, kRefOrder}, 4));
    const BridgeTopology &b = plan.topology.bridges[0];
    EXPECT_EQ(b.mode, BridgeMode::FanOut);
    EXPECT_EQ(b.routes,
              (std::vector<BridgeRoute>{{3, 4}, {3, 5}, {3, 6}, {3, 7}}));
    // Rank 3 sends microbatch pieces to all four lanes; rank 2 is its
    // TP peer and only receives the gradient by broadcast.
    EXPECT_EQ(roleOf(plan.topology, 3), "enc0/pp1/language:src-leader");
    EXPECT_EQ(roleOf(plan.topology, 2), "enc0/pp1/language:src-member");
  }
}

// Reference §11.9: colocated gather groups.
TEST(PlanBridgeTest, ColocatedGatherGroupsOfReference11_9) {
  Side enc{2, 1, 1, 4, 0}, lm{4, 1, 1, 2, 0};
  Plan fanIn = planOf(makeModel({enc}, lm));
  const BridgeTopology &in = fanIn.topology.bridges[0];
  EXPECT_EQ(in.mode, BridgeMode::Colocated);
  EXPECT_EQ(in.direction, "fan_in");
  EXPECT_EQ(in.ratio, 2);
  EXPECT_EQ(in.gatherGroups,
            (std::vector<Ranks>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  Plan fanOut = planOf(makeModel({{4, 1, 1, 2, 0}}, {2, 1, 1, 4, 0}));
  EXPECT_EQ(fanOut.topology.bridges[0].direction, "fan_out");
  EXPECT_EQ(fanOut.topology.bridges[0].gatherGroups,
            (std::vector<Ranks>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  for (const Plan *plan : {&fanIn, &fanOut})
    EXPECT_EQ(problemsText(verifyPrograms(plan->topology, plan->programs,
                                          plan->rankProgram)),
              "");
}

TEST(PlanBridgeTest, ColocatedGridsThatDoNotNestAreRejected) {
  // Encoder lanes vary fastest, language lanes slowest: rank 1 is in
  // encoder lane 1 but language lane 0 of a fan-out... that does not nest.
  Side enc{1, 1, 1, 4, 0}, lm{2, 1, 1, 2, 0};
  lm.order = {"dp", "tp", "cp", "pp"};
  ParseResult parsed = validateModelConfig(makeModel({enc}, lm), "m.json");
  ASSERT_TRUE(parsed.config);
  std::string error;
  EXPECT_FALSE(buildTopology(*parsed.config, &error));
  EXPECT_NE(error.find("colocated grids must nest"), std::string::npos)
      << error;
}

TEST(PlanTest, ProgramsGrowWithRolesNotRanks) {
  // 1,024 ranks: encoder dp 512 and language tp2·pp2·dp 128 (fan-in 4:1).
  Plan plan =
      planOf(makeModel({{1, 1, 1, 512, 0}}, {2, 1, 2, 128, 512}, 512, 4, 64));
  EXPECT_EQ(plan.topology.worldSize, 1024);
  EXPECT_LE(plan.programs.size(), 6u);
  EXPECT_EQ(problemsText(
                verifyPrograms(plan.topology, plan.programs, plan.rankProgram)),
            "");
}

/// The plan verifies (every send meets its receive, no deadlock) and
/// loads back from its file with the same programs.
void expectVerifiesAndRoundTrips(const Plan &plan) {
  EXPECT_EQ(problemsText(
                verifyPrograms(plan.topology, plan.programs, plan.rankProgram)),
            "");
  PlanLoadResult loaded = loadPlan(planToJson(plan).dump(1), "plan.json");
  ASSERT_TRUE(loaded.plan) << formatDiagnostic("plan.json",
                                               loaded.diagnostics[0]);
  EXPECT_EQ(loaded.plan->rankProgram, plan.rankProgram);
  ASSERT_EQ(loaded.plan->programs.size(), plan.programs.size());
  for (size_t p = 0; p < plan.programs.size(); ++p) {
    EXPECT_EQ(loaded.plan->programs[p].role, plan.programs[p].role);
    EXPECT_EQ(loaded.plan->programs[p].instrs, plan.programs[p].instrs);
  }
}

TEST(PlanTest, EveryExampleVerifiesAndRoundTrips) {
  for (const char *name : {"vlm-fan-in.json", "vlm-fan-out.json",
                           "vlm-colocated.json", "vlm-colocated-pp2.json",
                           "avlm.json", "lm-cp2-sp.json", "packed-thd.json"}) {
    SCOPED_TRACE(name);
    ParseResult parsed = parseModelConfig(test::readExample(name), name);
    ASSERT_TRUE(parsed.config);
    std::string error;
    std::optional<Plan> plan = buildPlan(*parsed.config, &error);
    ASSERT_TRUE(plan) << error;
    expectVerifiesAndRoundTrips(*plan);
  }
}

TEST(PlanTest, ForwardHalvesOfEveryLayoutStillVerify) {
  // A held-out evaluation runs only the forward half of each program: the
  // sends must still meet their receives, with no deadlock, in every layout.
  for (const test::Layout &layout : test::equivalenceLayouts()) {
    SCOPED_TRACE(layout.name);
    ParseResult parsed = parseModelConfig(layout.model.dump(), "model.json");
    ASSERT_TRUE(parsed.config);
    std::string error;
    std::optional<Plan> plan = buildPlan(*parsed.config, &error);
    ASSERT_TRUE(plan) << error;
    std::vector<Program> forward;
    for (const Program &p : plan->programs) {
      forward.push_back(forwardOnly(p));
      size_t kept = 0;
      for (const Instr &in : p.instrs)
        kept += instrInfo(in.op).isGrad ? 0 : 1;
      EXPECT_EQ(forward.back().instrs.size(), kept);
      for (const Instr &in : forward.back().instrs)
        EXPECT_FALSE(instrInfo(in.op).isGrad);
      ASSERT_FALSE(forward.back().instrs.empty());
      EXPECT_FALSE(forward.back().instrs.back().fused);
    }
    EXPECT_EQ(problemsText(
                  verifyPrograms(plan->topology, forward, plan->rankProgram)),
              "");
  }
}

/// Under the interleaved schedule, each rank of the language pipeline runs
/// the forward and the backward of each of its chunks once per microbatch,
/// every forward before its backward, and the plan and its forward half
/// verify (no deadlock) and round-trip.
void expectInterleavedVerifies(const nlohmann::json &model) {
  ParseResult parsed = parseModelConfig(model.dump(), "model.json");
  ASSERT_TRUE(parsed.config)
      << parsed.diagnostics[0].pointer << ": " << parsed.diagnostics[0].message;
  std::string error;
  std::optional<Plan> plan = buildPlan(*parsed.config, &error);
  ASSERT_TRUE(plan) << error;
  expectVerifiesAndRoundTrips(*plan);
  const Topology &t = plan->topology;
  const size_t lm = t.languageIndex();
  const ModuleTopology &language = t.modules[lm];
  ASSERT_GT(language.virtualStages, 1);
  for (int64_t rank = language.grid.rankOffset();
       rank < language.grid.endRank(); ++rank) {
    const Program &program =
        plan->programs[static_cast<size_t>(plan->rankProgram[rank])];
    std::map<std::pair<int32_t, int32_t>, int> forwards, backwards;
    for (const Instr &in : program.instrs) {
      if (in.index != static_cast<int32_t>(lm))
        continue;
      if (in.op == InstrOp::Forward)
        ++forwards[std::make_pair(in.chunk, in.mb)];
      if (in.chunk > 0) { // errors and traces name it
        EXPECT_NE(
            describeInstr(t, in).find(" chunk " + std::to_string(in.chunk)),
            std::string::npos);
      }
      if (in.op == InstrOp::Backward) {
        EXPECT_EQ(forwards[std::make_pair(in.chunk, in.mb)], 1)
            << "rank " << rank << " backward of chunk " << in.chunk << " mb "
            << in.mb << " before its forward";
        ++backwards[std::make_pair(in.chunk, in.mb)];
      }
    }
    EXPECT_EQ(static_cast<int64_t>(forwards.size()),
              language.virtualStages * t.microbatches);
    for (const auto &[work, count] : forwards)
      EXPECT_EQ(count, 1);
    EXPECT_EQ(backwards, forwards) << "rank " << rank;
  }
  std::vector<Program> forward;
  for (const Program &p : plan->programs)
    forward.push_back(mimo::forwardOnly(p));
  EXPECT_EQ(problemsText(verifyPrograms(t, forward, plan->rankProgram)), "");
}

TEST(PlanTest, InterleavedVerifiesAtEveryDepth) {
  // A language model alone (ranks 0-7: pp P x dp), P stages of v chunks,
  // M microbatches in groups of P.
  for (int64_t pp : {2, 4, 8})
    for (int64_t chunks : {2, 3, 4})
      for (int64_t groups : {1, 2, 3}) {
        SCOPED_TRACE("pp " + std::to_string(pp) + ", virtual_stages " +
                     std::to_string(chunks) + ", microbatches " +
                     std::to_string(pp * groups));
        nlohmann::json model = test::baseModel();
        model["modules"].erase(0);
        model["data"].erase("tokens_per_sample");
        nlohmann::json &lm = model["modules"][0];
        lm["parallel"] = {{"pp", pp}, {"virtual_stages", chunks}};
        lm["arch"]["num_layers"] = pp * chunks;
        model["batch"]["schedule"] = "interleaved";
        model["batch"]["num_microbatches"] = pp * groups;
        expectInterleavedVerifies(model);
      }
}

TEST(PlanTest, InterleavedVerifiesBehindEncodersAndColocated) {
  // vlm-fan-in: an encoder feeding language TP2 x PP2; vlm-colocated-pp2:
  // encoders and language on the same 8 ranks; a two-stage encoder ahead.
  for (const char *name :
       {"vlm-fan-in.json", "vlm-colocated-pp2.json", "vlm-fan-out.json"}) {
    SCOPED_TRACE(name);
    nlohmann::json model = nlohmann::json::parse(test::readExample(name));
    nlohmann::json &lm = model["modules"][model["modules"].size() - 1];
    int64_t pp = lm["parallel"].value("pp", 1);
    if (pp == 1) { // vlm-fan-out: language dp4 -> pp2 x dp2
      lm["parallel"]["pp"] = pp = 2;
      lm["parallel"]["dp"] = 2;
    }
    lm["parallel"]["virtual_stages"] = 2;
    lm["arch"]["num_layers"] = 2 * pp;
    model["batch"]["schedule"] = "interleaved";
    expectInterleavedVerifies(model);
  }
}

TEST(PlanTest, ZeroBubbleSplitsEveryPipelinedBackwardAndStillVerifies) {
  // Every layout under batch.schedule "zero_bubble": each backward of a
  // split stage is followed, on the same rank, by exactly one weight_grad
  // of its module and microbatch; the weight gradients run in microbatch
  // order (the accumulation order of a whole backward) and never more than
  // the stage's weight_lag wait after a steady 1F1B slot; all are made
  // before the gradient reduction; and the plan verifies (no deadlock) and
  // round-trips through the plan file.
  int splitLayouts = 0;
  for (test::Layout layout : test::equivalenceLayouts()) {
    SCOPED_TRACE(layout.name);
    if (layout.model["batch"].value("schedule", "") == "interleaved")
      continue; // a schedule of its own
    layout.model["batch"]["schedule"] = "zero_bubble";
    ParseResult parsed = parseModelConfig(layout.model.dump(), "model.json");
    ASSERT_TRUE(parsed.config);
    std::string error;
    std::optional<Plan> plan = buildPlan(*parsed.config, &error);
    ASSERT_TRUE(plan) << error;
    expectVerifiesAndRoundTrips(*plan);
    bool split = false;
    for (int64_t rank = 0; rank < plan->topology.worldSize; ++rank) {
      const Program &program =
          plan->programs[static_cast<size_t>(plan->rankProgram[rank])];
      for (size_t m = 0; m < plan->topology.modules.size(); ++m) {
        const Grid &grid = plan->topology.modules[m].grid;
        if (rank < grid.rankOffset() || rank >= grid.endRank())
          continue;
        const StageTopology *stage =
            plan->topology.stageOf(m, grid.coordsOf(rank).pp);
        const int32_t index = static_cast<int32_t>(m);
        std::vector<int32_t> backwards, weights;
        size_t reduce = program.instrs.size(), lastWeight = 0;
        for (size_t i = 0; i < program.instrs.size(); ++i) {
          const Instr &in = program.instrs[i];
          if (in.index != index)
            continue;
          if (in.op == InstrOp::Backward)
            backwards.push_back(in.mb);
          if (in.op == InstrOp::WeightGrad) {
            // Its backward came first.
            EXPECT_NE(std::find(backwards.begin(), backwards.end(), in.mb),
                      backwards.end());
            weights.push_back(in.mb);
            lastWeight = i;
          }
          if (in.op == InstrOp::ReduceGrads)
            reduce = i;
          if (in.op == InstrOp::Forward && stage && stage->weightLag >= 0) {
            EXPECT_LE(static_cast<int64_t>(backwards.size() - weights.size()),
                      stage->weightLag)
                << "before forward mb " << in.mb;
          }
        }
        if (!stage || stage->weightLag < 0 ||
            plan->topology.modules[m].forwardOnly) {
          EXPECT_TRUE(weights.empty());
          continue;
        }
        split = true;
        EXPECT_EQ(weights, backwards); // each once, in microbatch order
        EXPECT_LT(lastWeight, reduce);
        EXPECT_EQ(stage->weightLag,
                  std::min(stage->stage, plan->topology.microbatches));
      }
    }
    splitLayouts += split;
  }
  EXPECT_GE(splitLayouts, 10);
}

//===----------------------------------------------------------------------===//
// The verifier on hand-made programs
//===----------------------------------------------------------------------===//

/// Encoder dp1 at rank 0, language pp2 at ranks 1-2, one microbatch.
Plan twoStagePlan() {
  return planOf(makeModel({{1, 1, 1, 1, 0}}, {1, 1, 2, 1, 1}, 2, 1));
}

Program &programOf(Plan &plan, int64_t rank) {
  return plan.programs[plan.rankProgram[rank]];
}

Instr op(InstrOp kind, int32_t index, int32_t mb = 0, bool fused = false) {
  return Instr{kind, index, mb, fused, 0};
}

TEST(VerifyTest, GeneratedTwoStagePlanIsClean) {
  Plan plan = twoStagePlan();
  EXPECT_EQ(problemsText(
                verifyPrograms(plan.topology, plan.programs, plan.rankProgram)),
            "");
}

TEST(VerifyTest, ReceivesBeforeSendsDeadlock) {
  Plan plan = twoStagePlan();
  // Stage 0 waits for the gradient before sending the activation; stage 1
  // waits for the activation before sending the gradient.
  std::vector<Instr> &first = programOf(plan, 1).instrs;
  auto send = std::find_if(first.begin(), first.end(), [](const Instr &in) {
    return in.op == InstrOp::SendAct;
  });
  auto recv = std::find_if(first.begin(), first.end(), [](const Instr &in) {
    return in.op == InstrOp::RecvGrad;
  });
  ASSERT_TRUE(send != first.end() && recv != first.end());
  send->fused = recv->fused = false;
  std::iter_swap(send, recv);
  std::vector<PlanProblem> problems =
      verifyPrograms(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_EQ(problems.size(), 1u);
  const std::string &message = problems[0].message;
  EXPECT_NE(message.find("the plan deadlocks"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  EXPECT_NE(message.find("recv_grad language mb 0"), std::string::npos)
      << message;
  EXPECT_NE(message.find("rank 2"), std::string::npos) << message;
  EXPECT_GE(problems[0].places.size(), 2u);
}

/// The kinds of a program's instructions, in order.
std::vector<InstrOp> kinds(const Program &program) {
  std::vector<InstrOp> result;
  for (const Instr &in : program.instrs)
    result.push_back(in.op);
  return result;
}

TEST(PlanTest, UnshardFollowsTheFirstStageBackwardUnderCpOrSp) {
  // CP2 + SP: the first stage gathers the input-embedding gradient before
  // the bridge sends it back; without CP or SP there is nothing to gather.
  Plan sharded =
      planOf(makeModel({{1, 1, 1, 2, 0}}, {2, 2, 1, 1, 2, /*sp=*/true}, 4, 2));
  const Program &leader = sharded.programs[sharded.rankProgram[2]];
  auto ops = kinds(leader);
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i] == InstrOp::Backward) {
      ASSERT_LT(i + 1, ops.size());
      EXPECT_EQ(ops[i + 1], InstrOp::Unshard);
    }
  EXPECT_EQ(std::count(ops.begin(), ops.end(), InstrOp::Unshard), 2);
  Plan plain = planOf(makeModel({{1, 1, 1, 2, 0}}, {2, 1, 1, 1, 2}, 4, 2));
  auto plainOps = kinds(plain.programs[plain.rankProgram[2]]);
  EXPECT_EQ(std::count(plainOps.begin(), plainOps.end(), InstrOp::Unshard), 0);
}

TEST(VerifyTest, TensorParallelPeersMustComputeInStep) {
  // Language TP2 on one stage: the leader and its TP peer run different
  // programs but must shard and compute the same microbatches in the same
  // order; the member computing before it shards deadlocks the pair.
  Plan plan = planOf(makeModel({{1, 1, 1, 2, 0}}, {2, 1, 1, 1, 2}, 4, 2));
  ASSERT_NE(plan.rankProgram[2], plan.rankProgram[3]);
  std::vector<Instr> &member = programOf(plan, 3).instrs;
  auto shard = std::find_if(member.begin(), member.end(), [](const Instr &in) {
    return in.op == InstrOp::Shard;
  });
  ASSERT_NE(shard, member.end());
  std::iter_swap(shard, shard + 1); // forward mb 0 before shard mb 0
  std::vector<PlanProblem> problems =
      verifyPrograms(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("the plan deadlocks"), std::string::npos)
      << problems[0].message;
  EXPECT_NE(problems[0].message.find("rank 3 waits at instruction"),
            std::string::npos)
      << problems[0].message;
}

TEST(VerifyTest, SendWithoutReceiveIsNamed) {
  Plan plan = twoStagePlan();
  std::vector<Instr> &last = programOf(plan, 2).instrs;
  auto recv = std::find_if(last.begin(), last.end(), [](const Instr &in) {
    return in.op == InstrOp::RecvAct;
  });
  ASSERT_NE(recv, last.end());
  last.erase(recv);
  std::vector<PlanProblem> problems =
      verifyPrograms(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find(
                "sends the activation of microbatch 0 from rank 1 to rank "
                "2, but rank 2 never receives it"),
            std::string::npos)
      << problems[0].message;
}

TEST(VerifyTest, MismatchedMicrobatchesAreNamed) {
  Plan plan = planOf(makeModel({{1, 1, 1, 1, 0}}, {1, 1, 2, 1, 1}, 2, 2));
  std::vector<Instr> &last = programOf(plan, 2).instrs;
  for (Instr &in : last)
    if (in.op == InstrOp::RecvAct)
      in.mb = 1 - in.mb; // expects microbatch 1 first
  std::vector<PlanProblem> problems =
      verifyPrograms(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problemsText(problems).find("deadlocks"), std::string::npos)
      << problemsText(problems);
}

TEST(VerifyTest, InstructionsThatDoNotApplyAreRejected) {
  Plan plan = twoStagePlan();
  // The encoder rank has no next stage, and is no bridge destination.
  programOf(plan, 0).instrs.insert(programOf(plan, 0).instrs.begin(),
                                   op(InstrOp::SendAct, 0));
  std::vector<PlanProblem> problems =
      verifyPrograms(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find("has no pipeline stage 1"),
            std::string::npos)
      << problems[0].message;
}

TEST(VerifyTest, FusedComputeIsRejected) {
  Plan plan = twoStagePlan();
  for (Instr &in : programOf(plan, 0).instrs)
    if (in.op == InstrOp::Forward)
      in.fused = true;
  std::vector<PlanProblem> problems =
      verifyPrograms(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find("only sends and receives"),
            std::string::npos);
}

/// The layout of test::equivalenceLayouts() named `name`, as a plan.
Plan layoutPlan(const std::string &name) {
  for (const test::Layout &layout : test::equivalenceLayouts())
    if (layout.name == name)
      return planOf(layout.model);
  ADD_FAILURE() << "no layout " << name;
  return twoStagePlan();
}

TEST(PlanTest, ZeroBubbleAcrossModulesPostsBridgeGradientsAndFillsCooldown) {
  // docs/plan.md "Zero bubble across modules": the first stage's leader
  // posts each microbatch's bridge gradients right after its backward
  // (and unshard); every rank runs a microbatch's encoder backward after
  // receiving them, posted; with the encoder's TP groups within a stage
  // some of it comes before the rank's last language gradient (the
  // cool-down), with a group across stages none does. Both verify and
  // round-trip.
  for (const char *name : {"ZeroBubbleAcrossModulesPp4",
                           "ZeroBubbleAcrossModulesEncoderTpAcrossStages"}) {
    SCOPED_TRACE(name);
    const bool within = std::string(name) == "ZeroBubbleAcrossModulesPp4";
    Plan plan = layoutPlan(name);
    expectVerifiesAndRoundTrips(plan);
    const Topology &t = plan.topology;
    const int32_t lm = static_cast<int32_t>(t.languageIndex());
    int posts = 0;
    for (int64_t rank = 0; rank < t.worldSize; ++rank) {
      const std::vector<Instr> &s =
          plan.programs[static_cast<size_t>(plan.rankProgram[rank])].instrs;
      size_t lastLanguage = 0, firstEncoderBackward = s.size();
      size_t firstLanguage = s.size(), lastEncoderForward = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        const Instr &in = s[i];
        if (in.op == InstrOp::Forward && in.index == lm)
          firstLanguage = std::min(firstLanguage, i);
        if (in.op == InstrOp::Forward && in.index != lm) {
          lastEncoderForward = i;
          // Its microbatch's language forward comes after it.
          for (size_t j = 0; j < i; ++j)
            EXPECT_FALSE(s[j].op == InstrOp::Forward && s[j].index == lm &&
                         s[j].mb == in.mb)
                << "rank " << rank << " mb " << in.mb;
        }
        if (in.op == InstrOp::BridgeSend || in.op == InstrOp::BridgeRecv) {
          EXPECT_EQ(in.posted, within);
        }
        if (in.op == InstrOp::BridgeSendGrad) {
          EXPECT_TRUE(in.posted);
          ++posts;
          // Right behind its microbatch's backward (and unshard).
          size_t back = i;
          while (back > 0 && (s[back - 1].op == InstrOp::Unshard ||
                              s[back - 1].op == InstrOp::BridgeSendGrad))
            --back;
          ASSERT_GT(back, 0u);
          EXPECT_EQ(s[back - 1].op, InstrOp::Backward);
          EXPECT_EQ(s[back - 1].index, lm);
          EXPECT_EQ(s[back - 1].mb, in.mb);
        }
        if (in.op == InstrOp::BridgeRecvGrad) {
          EXPECT_TRUE(in.posted);
        }
        if (in.index == lm &&
            (in.op == InstrOp::RecvGrad || in.op == InstrOp::Backward ||
             in.op == InstrOp::WeightGrad))
          lastLanguage = i;
        if (in.op == InstrOp::Backward && in.index != lm) {
          firstEncoderBackward = std::min(firstEncoderBackward, i);
          // Its gradients arrived before.
          bool received = false;
          for (size_t j = 0; j < i; ++j)
            received |= (s[j].op == InstrOp::BridgeRecvGrad ||
                         s[j].op == InstrOp::BridgeBroadcastGrad) &&
                        s[j].mb == in.mb;
          EXPECT_TRUE(received) << "rank " << rank << " mb " << in.mb;
        }
      }
      ASSERT_LT(firstEncoderBackward, s.size());
      const int64_t stage = t.modules[lm].grid.coordsOf(rank).pp;
      if (within && stage < t.modules[lm].grid.size(Dim::PP) - 1) {
        EXPECT_LT(firstEncoderBackward, lastLanguage) << "rank " << rank;
      }
      // The first stage's forwards fill its ramp (after its first language
      // forward); elsewhere, and across stages, they all come first.
      if (within && stage == 0) {
        EXPECT_GT(lastEncoderForward, firstLanguage) << "rank " << rank;
      } else {
        EXPECT_LT(lastEncoderForward, firstLanguage) << "rank " << rank;
      }
      if (!within) {
        EXPECT_GT(firstEncoderBackward, lastLanguage) << "rank " << rank;
      }
    }
    EXPECT_EQ(posts, 2 * t.microbatches); // one leader per language lane
  }
}

TEST(VerifyTest, PostedMessagesAreWhatLetsCrossModuleZeroBubbleRun) {
  // The same plan with blocking bridge gradients deadlocks: the first
  // stage would wait in its steady 1F1B for the last stage's receive,
  // which comes after the pipeline.
  Plan plan = layoutPlan("ZeroBubbleAcrossModulesPp4");
  for (Program &program : plan.programs)
    for (Instr &in : program.instrs)
      in.posted = false;
  std::vector<PlanProblem> problems =
      verifyPrograms(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find("the plan deadlocks"), std::string::npos)
      << problems[0].message;
  // One end posted, the other not: named.
  plan = layoutPlan("ZeroBubbleAcrossModulesPp4");
  for (Program &program : plan.programs)
    for (Instr &in : program.instrs)
      if (in.op == InstrOp::BridgeRecvGrad)
        in.posted = false;
  problems = verifyPrograms(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find("both ends of a message say whether it "
                                     "is posted"),
            std::string::npos)
      << problems[0].message;
  // Only a bridge's messages are posted, and never fused.
  plan = twoStagePlan();
  for (Instr &in : programOf(plan, 1).instrs)
    if (in.op == InstrOp::SendAct)
      in.posted = true;
  problems = verifyPrograms(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find("only a bridge's sends and receives"),
            std::string::npos)
      << problems[0].message;
  plan = twoStagePlan();
  bool marked = false;
  for (Instr &in : programOf(plan, 0).instrs)
    if (in.op == InstrOp::BridgeSend) {
      in.posted = in.fused = marked = true;
    }
  ASSERT_TRUE(marked);
  problems = verifyPrograms(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find("posted and fused"), std::string::npos)
      << problems[0].message;
}

TEST(VerifyTest, PostedMessagesKeepNcclsIssueOrder) {
  // Under NCCL a communicator's operations run in the order each rank
  // issued them, and a send completes only when its receive is posted
  // too: a rank that takes two posted messages from one peer in the other
  // order than the peer posted them hangs on 8 GPUs, though buffered
  // messages (the local backend's, simulate()'s first pass) never do.
  Plan plan = layoutPlan("ZeroBubbleAcrossModulesPp4");
  EXPECT_EQ(problemsText(
                verifyPrograms(plan.topology, plan.programs, plan.rankProgram)),
            "");
  bool swapped = false;
  for (int64_t rank = 0; rank < plan.topology.worldSize && !swapped; ++rank) {
    Program &program =
        plan.programs[static_cast<size_t>(plan.rankProgram[rank])];
    std::vector<size_t> receives;
    for (size_t i = 0; i < program.instrs.size(); ++i)
      if (program.instrs[i].op == InstrOp::BridgeRecvGrad &&
          program.instrs[i].posted)
        receives.push_back(i);
    for (size_t a = 0; a + 1 < receives.size() && !swapped; ++a) {
      Instr &first = program.instrs[receives[a]];
      Instr &second = program.instrs[receives[a + 1]];
      auto peerOf = [&](const Instr &in) {
        return resolvePeers(plan.topology, rank, in, nullptr)->ranks.at(0);
      };
      if (first.index != second.index || peerOf(first) != peerOf(second) ||
          peerOf(first) == rank)
        continue;
      std::swap(first.mb, second.mb);
      swapped = true;
    }
  }
  ASSERT_TRUE(swapped) << "no rank takes two posted messages from one peer";
  std::vector<PlanProblem> problems =
      verifyPrograms(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find("deadlocks under NCCL's rules"),
            std::string::npos)
      << problems[0].message;
  EXPECT_NE(problems[0].message.find("posted queue's first operation"),
            std::string::npos)
      << problems[0].message;
}

TEST(PlanTest, PostedChannelsAreOpenedInRoundsOfDisjointPairs) {
  // The nccl backend opens a channel per (sender, receiver) of posted
  // messages, one ncclCommSplit per round in which no rank is in two
  // channels.
  Plan plan = layoutPlan("ZeroBubbleAcrossModulesPp4");
  const auto channels =
      postedChannels(plan.topology, plan.programs, plan.rankProgram);
  ASSERT_FALSE(channels.empty());
  for (const auto &[sender, receiver] : channels)
    EXPECT_NE(sender, receiver);
  EXPECT_TRUE(std::is_sorted(channels.begin(), channels.end()));
  // Every posted send's pair is one of them.
  for (int64_t rank = 0; rank < plan.topology.worldSize; ++rank)
    for (const Instr &in : programOf(plan, rank).instrs) {
      if (!in.posted || !instrInfo(in.op).isSend)
        continue;
      const auto peers = resolvePeers(plan.topology, rank, in, nullptr);
      ASSERT_TRUE(peers.has_value());
      for (int64_t peer : peers->ranks) {
        if (peer != rank) {
          EXPECT_TRUE(std::binary_search(channels.begin(), channels.end(),
                                         std::make_pair(rank, peer)));
        }
      }
    }
  const auto rounds = channelRounds(channels, plan.topology.worldSize);
  std::vector<int> seen(channels.size(), 0);
  for (const std::vector<int64_t> &round : rounds) {
    std::vector<int> members(channels.size(), 0);
    for (int64_t rank = 0; rank < plan.topology.worldSize; ++rank)
      if (round[static_cast<size_t>(rank)] >= 0) {
        const auto c = static_cast<size_t>(round[static_cast<size_t>(rank)]);
        EXPECT_TRUE(channels[c].first == rank || channels[c].second == rank);
        ++members[c];
      }
    for (size_t c = 0; c < channels.size(); ++c)
      if (members[c]) {
        EXPECT_EQ(members[c], 2) << "both ranks of a channel in its round";
        ++seen[c];
      }
  }
  for (int n : seen)
    EXPECT_EQ(n, 1) << "each channel in exactly one round";
  // A plan without posted messages opens none.
  EXPECT_TRUE(postedChannels(twoStagePlan().topology, twoStagePlan().programs,
                             twoStagePlan().rankProgram)
                  .empty());
}

TEST(PlanTest, ChannelFamiliesGiveEachOverlappedChannelItsGroups) {
  // docs/gpu.md overlap: per module and chunk, the gradient buckets' DP x
  // CP groups, under expert parallelism the experts' edp groups, and a
  // ring's CP groups, each family split into communicators of its own on
  // the nccl backend.
  std::set<std::string> seen;
  for (const test::Layout &layout : test::equivalenceLayouts()) {
    SCOPED_TRACE(layout.name);
    const Plan plan = planOf(layout.model);
    const Topology &topo = plan.topology;
    std::vector<bool> ring;
    for (const ModuleTopology &m : topo.modules)
      for (const ModuleConfig &mc : plan.config.modules)
        if (mc.name == m.name)
          ring.push_back(m.isLanguage && mc.parallel.ringCp());
    const std::vector<ChannelFamily> families = channelFamilies(topo, ring);
    for (size_t mi = 0; mi < topo.modules.size(); ++mi) {
      const ModuleTopology &m = topo.modules[mi];
      const int64_t lanes = m.grid.size(Dim::DP) * m.grid.size(Dim::CP);
      for (int64_t chunk = 0; chunk < m.virtualStages; ++chunk) {
        const int64_t buckets =
            channelFamilyIndex(families, mi, chunk, ChannelUse::Buckets);
        const int64_t rings =
            channelFamilyIndex(families, mi, chunk, ChannelUse::Ring);
        EXPECT_EQ(buckets >= 0, lanes > 1);
        const int64_t experts =
            channelFamilyIndex(families, mi, chunk, ChannelUse::ExpertBuckets);
        const int64_t edpSize =
            lanes / m.ep * m.grid.size(Dim::TP) / m.expertTp();
        EXPECT_EQ(experts >= 0, m.expertsApart() && lanes > 1 && edpSize > 1);
        if (experts >= 0) {
          seen.insert("experts");
          for (int64_t rank = m.grid.rankOffset(); rank < m.grid.endRank();
               ++rank) {
            const auto own = expertGroups(m.grid, m.ep, m.expertTp(), rank).edp;
            EXPECT_EQ(static_cast<int64_t>(own.size()), edpSize);
            const auto &groups = families[static_cast<size_t>(experts)].groups;
            EXPECT_EQ(std::count(groups.begin(), groups.end(), own), 1);
          }
        }
        EXPECT_EQ(rings >= 0, ring[mi]);
        if (buckets >= 0) {
          seen.insert("buckets");
          if (chunk > 0)
            seen.insert("chunks");
          for (int64_t rank = m.grid.rankOffset(); rank < m.grid.endRank();
               ++rank) {
            const auto own = m.grid.groupOf(rank, {Dim::DP, Dim::CP});
            const auto &groups = families[static_cast<size_t>(buckets)].groups;
            EXPECT_EQ(std::count(groups.begin(), groups.end(), own), 1);
          }
        }
        if (rings >= 0) {
          seen.insert("ring");
          EXPECT_EQ(families[static_cast<size_t>(rings)].groups,
                    m.grid.groups({Dim::CP}));
        }
        if (m.ep > 1)
          seen.insert("ep");
      }
    }
    // Nothing else: a family per (module, chunk, use) at most.
    std::set<std::tuple<size_t, int64_t, ChannelUse>> keys;
    for (const ChannelFamily &f : families)
      EXPECT_TRUE(keys.insert({f.module, f.chunk, f.use}).second);
  }
  EXPECT_EQ(seen, (std::set<std::string>{"buckets", "chunks", "ring", "ep",
                                         "experts"}));
}

//===----------------------------------------------------------------------===//
// The plan file
//===----------------------------------------------------------------------===//

json examplePlan() {
  ParseResult parsed =
      parseModelConfig(test::readExample("vlm-fan-in.json"), "m.json");
  std::string error;
  return json(planToJson(*buildPlan(*parsed.config, &error)));
}

std::string firstError(const json &doc) {
  PlanLoadResult result = loadPlan(doc.dump(), "plan.json");
  EXPECT_FALSE(result.plan);
  return result.diagnostics.empty()
             ? ""
             : formatDiagnostic("plan.json", result.diagnostics[0]);
}

TEST(PlanFileTest, ForeignVersionIsRejected) {
  json doc = examplePlan();
  doc["version"] = 2;
  EXPECT_NE(firstError(doc).find("plan.json: /version: error: this plan has "
                                 "version 2 but this mimo reads plan version "
                                 "1; recompile"),
            std::string::npos)
      << firstError(doc);
}

TEST(PlanFileTest, ModelJsonIsNotAPlan) {
  json doc = json::parse(test::readExample("vlm-fan-in.json"));
  EXPECT_NE(firstError(doc).find("/format: error: expected \"mimo-plan\""),
            std::string::npos);
}

TEST(PlanFileTest, SyntaxErrorsHaveLineAndColumn) {
  PlanLoadResult result = loadPlan("{\n  \"format\": ,\n}", "plan.json");
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(formatDiagnostic("plan.json", result.diagnostics[0])
                .rfind("plan.json:2:", 0),
            0u);
}

TEST(PlanFileTest, EditedDerivedFieldsAreRejected) {
  json doc = examplePlan();
  doc["bridges"][0]["routes"][0]["to"] = 5;
  EXPECT_NE(firstError(doc).find("/bridges/0/routes/0/to: error: expected 4, "
                                 "found 5: the plan disagrees with its own "
                                 "model"),
            std::string::npos)
      << firstError(doc);
  doc = examplePlan();
  doc["groups"][1]["tp"][0] = {4, 6};
  EXPECT_NE(firstError(doc).find("/groups/1/tp/0/1"), std::string::npos)
      << firstError(doc);
  doc = examplePlan();
  doc["world_size"] = 16;
  EXPECT_NE(firstError(doc).find("/world_size"), std::string::npos);
  doc = examplePlan();
  doc["extra"] = 1;
  EXPECT_NE(firstError(doc).find("/extra: error: unknown key"),
            std::string::npos);
}

TEST(PlanFileTest, BadModelIsReportedUnderModel) {
  json doc = examplePlan();
  doc["model"]["modules"][1]["parallel"]["tp"] = "two";
  EXPECT_NE(firstError(doc).find("/model/modules/1/parallel/tp"),
            std::string::npos)
      << firstError(doc);
}

TEST(PlanFileTest, UntrainableModelShapesAreRejected) {
  // No derived section mentions num_layers or num_heads: the loader checks
  // the model's shapes itself, in the compiler's words (plan/ShapeRules.h).
  json doc = examplePlan();
  doc["model"]["modules"][1]["arch"]["num_layers"] = 3;
  EXPECT_NE(firstError(doc).find(
                "plan.json: /model/modules/1/parallel/pp: error: num_layers 3 "
                "of language module 'language' is not divisible by pp 2; use "
                "a pp that divides 3 or change arch.num_layers"),
            std::string::npos)
      << firstError(doc);
  doc = examplePlan();
  doc["model"]["modules"][0]["arch"]["ffn_hidden_size"] = 255;
  doc["model"]["modules"][0]["parallel"]["tp"] = 2;
  doc["model"]["modules"][0]["parallel"]["dp"] = 2;
  EXPECT_NE(firstError(doc).find("/model/modules/0/parallel/tp: error: "
                                 "ffn_hidden_size 255 of encoder 'images' "
                                 "is not divisible by tp 2"),
            std::string::npos)
      << firstError(doc);
  doc = examplePlan();
  doc["model"]["batch"]["seq_length"] = 127;
  EXPECT_NE(firstError(doc).find("/model/batch/seq_length: error: seq_length "
                                 "127 is not divisible by 2"),
            std::string::npos)
      << firstError(doc);
}

TEST(PlanFileTest, BadInstructionsAreRejected) {
  json doc = examplePlan();
  doc["programs"][0]["instructions"][0]["op"] = "teleport";
  EXPECT_NE(firstError(doc).find("/programs/0/instructions/0/op"),
            std::string::npos)
      << firstError(doc);
  doc = examplePlan();
  doc["programs"][0]["instructions"][0]["mb"] = 99;
  EXPECT_NE(firstError(doc).find("/programs/0/instructions/0/mb"),
            std::string::npos)
      << firstError(doc);
  doc = examplePlan();
  doc["programs"][0]["instructions"][0]["posted"] = true;
  EXPECT_NE(firstError(doc).find("/programs/0/instructions/0/posted"),
            std::string::npos)
      << firstError(doc);
  EXPECT_NE(firstError(doc).find("only a bridge's sends and receives"),
            std::string::npos)
      << firstError(doc);
  // An instruction key this mimo does not know.
  doc = examplePlan();
  doc["programs"][0]["instructions"][0]["async"] = true;
  EXPECT_NE(firstError(doc).find("/programs/0/instructions/0/async"),
            std::string::npos)
      << firstError(doc);
  EXPECT_NE(firstError(doc).find("unknown key"), std::string::npos)
      << firstError(doc);
  // A posted bridge message that is also fused.
  doc = examplePlan();
  json &instrs = doc["programs"][0]["instructions"];
  size_t send = 0;
  while (send < instrs.size() && instrs[send]["op"] != "bridge_send")
    ++send;
  ASSERT_LT(send, instrs.size());
  instrs[send]["posted"] = true;
  instrs[send]["fused"] = true;
  EXPECT_NE(firstError(doc).find("/programs/0/instructions/" +
                                 std::to_string(send) + "/posted"),
            std::string::npos)
      << firstError(doc);
  EXPECT_NE(firstError(doc).find("a posted message is never fused"),
            std::string::npos)
      << firstError(doc);
  doc = examplePlan();
  doc["programs"][0]["role"] = "nobody";
  EXPECT_NE(firstError(doc).find("no program for rank 0"), std::string::npos)
      << firstError(doc);
}

TEST(PlanFileTest, RanksMustMatchTheRoles) {
  json doc = examplePlan();
  doc["programs"][0]["ranks"] = {0, 1, 2};
  EXPECT_NE(firstError(doc).find("/programs/0/ranks: error: expected the ranks "
                                 "whose role is"),
            std::string::npos)
      << firstError(doc);
}

TEST(PlanFileTest, UnmatchedInstructionsAreRejectedOnLoad) {
  json doc = examplePlan();
  // Drop the first instruction of the language last stage (a receive).
  for (json &program : doc["programs"])
    if (program["role"] == "language/pp1")
      program["instructions"].erase(0);
  std::string error = firstError(doc);
  EXPECT_NE(error.find("never receives it"), std::string::npos) << error;
}

} // namespace

namespace {

TEST(VerifyTest, RoutesBetweenLanesThatShareNoSamplesAreNamed) {
  // Encoder DP4 fanning in to language DP1: with one sample per microbatch
  // (a topology edited after planning) three encoder lanes own no sample,
  // yet their bridge sends remain: each would carry nothing.
  Plan plan = planOf(test::baseModel());
  ASSERT_EQ(problemsText(
                verifyPrograms(plan.topology, plan.programs, plan.rankProgram)),
            "");
  plan.topology.microBatchSize = 1;
  std::string text = problemsText(
      verifyPrograms(plan.topology, plan.programs, plan.rankProgram));
  EXPECT_NE(text.find("their lanes share no samples"), std::string::npos)
      << text;
}

} // namespace

namespace {

/// `plan` with rank `rank` on a program of its own in which its first two
/// forwards of module `m` (two microbatches) run the other way round.
Plan withForwardsSwapped(Plan plan, int64_t rank, size_t m) {
  Program own = plan.programs[static_cast<size_t>(plan.rankProgram[rank])];
  std::vector<size_t> forwards;
  for (size_t i = 0; i < own.instrs.size(); ++i)
    if (own.instrs[i].op == InstrOp::Forward &&
        own.instrs[i].index == static_cast<int32_t>(m))
      forwards.push_back(i);
  if (forwards.size() >= 2)
    std::swap(own.instrs[forwards[0]], own.instrs[forwards[1]]);
  plan.programs.push_back(own);
  plan.rankProgram[static_cast<size_t>(rank)] =
      static_cast<int32_t>(plan.programs.size() - 1);
  return plan;
}

} // namespace

/// docs/model.md Mixture of experts: a sparse module's forwards and
/// backwards meet its DP x CP group (the routing statistics, expert
/// parallelism's rows), so the verifier takes them as collectives of the
/// stage's every rank: one data-parallel lane running its forwards in
/// another order is a deadlock it names, where a dense module's lanes are
/// free to.
TEST(PlanTest, SparseLayersMeetEveryDataParallelLane) {
  json dense = test::example("vlm-fan-out.json"); // language dp 4, pp 1
  json sparse = test::withMoe(dense, 4, 2, "all", false);
  sparse["modules"][1]["parallel"]["ep"] = 2;
  for (bool moe : {false, true}) {
    SCOPED_TRACE(moe ? "sparse" : "dense");
    Plan plan = planOf(moe ? sparse : dense);
    const size_t lm = plan.topology.languageIndex();
    const int64_t rank = plan.topology.modules[lm].grid.rankOffset() + 1;
    EXPECT_EQ(problemsText(verifyPrograms(plan.topology, plan.programs,
                                          plan.rankProgram)),
              "");
    Plan swapped = withForwardsSwapped(plan, rank, lm);
    std::string problems = problemsText(verifyPrograms(
        swapped.topology, swapped.programs, swapped.rankProgram));
    if (!moe) {
      EXPECT_EQ(problems, "");
      continue;
    }
    EXPECT_NE(problems.find("deadlock"), std::string::npos) << problems;
    EXPECT_NE(problems.find("rank " + std::to_string(rank)), std::string::npos)
        << problems;
  }
}
