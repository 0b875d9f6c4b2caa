//===- ScheduleUnitsTest.cpp - The schedules' formulas on their programs -===//
//
// runtime/schedule/Formulas.h's step and bubble formulas against the programs
// the compiler builds, run in unit time with sends that block until
// matched (docs/plan.md "Zero bubble").
//
//===----------------------------------------------------------------------===//

#include "runtime/config/ModelConfig.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/schedule/Formulas.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <tuple>

namespace {

using namespace mimo;
using nlohmann::json;

TEST(Schedule, ZeroBubbleIdlesAThirdOfOneFOneBWithEqualParts) {
  // Schedule.h's claim, on the shared formulas: with F = B = W the step is
  // 3M + P - 1 units against 1F1B's 3(M + P - 1).
  EXPECT_DOUBLE_EQ(zeroBubbleShare(4, 4), 3.0 / 15.0);
  EXPECT_DOUBLE_EQ(pipelineBubble(4, 4), 3.0 / 7.0);
  EXPECT_EQ(zeroBubbleLag(3, 8), 3);
  EXPECT_EQ(zeroBubbleLag(5, 2), 2);
}

/// The step, in units, of `plan`'s programs with forwards, input gradients
/// and weight gradients of one unit each (a whole backward two), nothing
/// else costing time, and point-to-point batches that complete when every
/// member's counterpart is posted (sends block until matched, as NCCL's
/// and the CPU backend's do). One rank a stage.
int64_t unitStep(const Plan &plan) {
  const Topology &topology = plan.topology;
  const auto ranks = static_cast<size_t>(topology.worldSize);
  std::vector<size_t> pc(ranks, 0);
  std::vector<int64_t> now(ranks, 0), posted(ranks, -1);
  // (sender, receiver, gradient?, microbatch) -> when each side posted.
  std::map<std::tuple<int64_t, int64_t, bool, int32_t>, int64_t> sends, recvs;
  auto streamOf = [&](size_t rank) -> const std::vector<Instr> & {
    return plan.programs[static_cast<size_t>(plan.rankProgram[rank])].instrs;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t rank = 0; rank < ranks; ++rank) {
      const std::vector<Instr> &stream = streamOf(rank);
      while (pc[rank] < stream.size()) {
        const Instr &in = stream[pc[rank]];
        const bool p2p =
            in.op == InstrOp::SendAct || in.op == InstrOp::RecvAct ||
            in.op == InstrOp::SendGrad || in.op == InstrOp::RecvGrad;
        if (!p2p) {
          const StageTopology *stage = topology.stageOf(
              0,
              topology.modules[0].grid.coordsOf(static_cast<int64_t>(rank)).pp);
          if (in.op == InstrOp::Forward || in.op == InstrOp::WeightGrad)
            now[rank] += 1;
          if (in.op == InstrOp::Backward)
            now[rank] += stage->weightLag >= 0 ? 1 : 2;
          ++pc[rank];
          progress = true;
          continue;
        }
        size_t end = pc[rank];
        while (stream[end].fused)
          ++end;
        auto key = [&](const Instr &op) {
          const bool send =
              op.op == InstrOp::SendAct || op.op == InstrOp::SendGrad;
          const bool grad =
              op.op == InstrOp::SendGrad || op.op == InstrOp::RecvGrad;
          const int64_t peer =
              resolvePeers(topology, static_cast<int64_t>(rank), op, nullptr)
                  ->ranks.at(0);
          const auto self = static_cast<int64_t>(rank);
          return std::make_pair(send, std::make_tuple(send ? self : peer,
                                                      send ? peer : self, grad,
                                                      op.mb));
        };
        if (posted[rank] < 0) {
          posted[rank] = now[rank];
          for (size_t i = pc[rank]; i <= end; ++i) {
            auto [send, k] = key(stream[i]);
            (send ? sends : recvs)[k] = now[rank];
          }
          progress = true;
        }
        int64_t done = posted[rank];
        bool matched = true;
        for (size_t i = pc[rank]; i <= end && matched; ++i) {
          auto [send, k] = key(stream[i]);
          const auto &other = send ? recvs : sends;
          auto it = other.find(k);
          matched = it != other.end();
          if (matched)
            done = std::max(done, it->second);
        }
        if (!matched)
          break;
        now[rank] = done;
        posted[rank] = -1;
        pc[rank] = end + 1;
        progress = true;
      }
    }
  }
  for (size_t rank = 0; rank < ranks; ++rank)
    EXPECT_EQ(pc[rank], streamOf(rank).size()) << "rank " << rank << " stuck";
  return *std::max_element(now.begin(), now.end());
}

TEST(Schedule, ZeroBubbleStepInUnitsIsTheFormula) {
  // Schedule.h's zeroBubbleUnits and 1F1B's 3(M + P - 1), on the programs
  // the compiler builds: a language model over pp P, one rank a stage.
  for (int64_t P : {2, 4, 8})
    for (int64_t M = 1; M <= 16; ++M) {
      SCOPED_TRACE("P " + std::to_string(P) + ", M " + std::to_string(M));
      json model = {
          {"version", 1},
          {"name", "units"},
          {"batch",
           {{"micro_batch_size", 1},
            {"num_microbatches", M},
            {"seq_length", 16}}},
          {"modules",
           {{{"name", "language"},
             {"kind", "language"},
             {"arch",
              {{"vocab_size", 64},
               {"hidden_size", 16},
               {"num_layers", 8},
               {"num_heads", 2},
               {"ffn_hidden_size", 32}}},
             {"parallel", {{"pp", P}}}}}},
          {"data", {{"source", "synthetic"}, {"text_only_fraction", 1.0}}},
          {"train", {{"steps", 1}}}};
      for (bool zeroBubble : {false, true}) {
        if (zeroBubble)
          model["batch"]["schedule"] = "zero_bubble";
        ParseResult parsed = parseModelConfig(model.dump(), "model.json");
        ASSERT_TRUE(parsed.config);
        std::string error;
        std::optional<Plan> plan = buildPlan(*parsed.config, &error);
        ASSERT_TRUE(plan) << error;
        EXPECT_EQ(unitStep(*plan),
                  zeroBubble ? zeroBubbleUnits(P, M) : 3 * (M + P - 1))
            << (zeroBubble ? "zero bubble" : "1f1b");
      }
    }
}

} // namespace
