//===- SymmetryTest.cpp - Representatives stand for every replica ---------===//
//
// plan/Symmetry.h: the verifier and the timed simulation run one rank per
// orbit of the data-parallel replicas' turn. Each check here runs the same
// plan both ways and compares: what the representatives find must be what
// every rank finds.
//
//===----------------------------------------------------------------------===//

#include "tests/e2e/Layouts.h"

#include "runtime/cost/CostModel.h"
#include "runtime/cost/Simulate.h"
#include "runtime/plan/Symmetry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

using namespace mimo;
using namespace mimo::test;
using json = nlohmann::json;

namespace {

/// `model` with every module's dp (and the batch) `k` times larger, the
/// non-colocated spans laid end to end again.
json scaleDp(json model, int64_t k) {
  model["batch"]["micro_batch_size"] =
      model["batch"]["micro_batch_size"].get<int64_t>() * k;
  std::vector<std::pair<int64_t, size_t>> byOffset;
  bool colocated = true;
  for (size_t m = 0; m < model["modules"].size(); ++m) {
    json &p = model["modules"][m]["parallel"];
    p["dp"] = p.value("dp", 1) * k;
    byOffset.push_back({p.value("rank_offset", int64_t{0}), m});
    colocated &= p.value("rank_offset", int64_t{0}) == 0;
  }
  if (colocated)
    return model;
  std::sort(byOffset.begin(), byOffset.end());
  int64_t next = 0;
  for (const auto &[offset, m] : byOffset) {
    json &p = model["modules"][m]["parallel"];
    p["rank_offset"] = next;
    next += p.value("tp", 1) * p.value("cp", 1) * p.value("pp", 1) *
            p.value("dp", 1);
  }
  return model;
}

std::string problemsText(const std::vector<PlanProblem> &problems) {
  std::string text;
  for (const PlanProblem &p : problems)
    text += p.message + "\n";
  return text;
}

/// A cluster of `nodes` nodes of `perNode` devices, with slower links the
/// farther apart (ranks wrap around its devices when it has fewer).
ClusterConfig steppedCluster(int64_t perNode, int64_t nodes) {
  ClusterConfig c;
  c.name = "stepped";
  c.devicesPerNode = perNode;
  c.nodes = nodes;
  c.sameDevice = {1, 400};
  c.sameNode = {5, 100};
  c.crossNode = {20, 10};
  return c;
}

struct Costed {
  std::string name;
  DeviceProfile profile;
  ClusterConfig cluster;
};

std::vector<Costed> costings() {
  DeviceProfile h100 = *builtinProfile("h100");
  DeviceProfile cpu = *builtinProfile("cpu");
  return {{"h100", h100, defaultCluster(h100)},
          {"cpu", cpu, defaultCluster(cpu)},
          {"h100-2x2", h100, steppedCluster(2, 2)},
          {"cpu-4x2", cpu, steppedCluster(4, 2)}};
}

} // namespace

// Every equivalence layout as it is and with 4x the replicas: the verifier
// finds nothing either way, and the timed simulation predicts the same
// step, and each rank the same busy and finish times, from the
// representatives as from every rank, on GPUs, a CPU and clusters whose
// nodes split the replicas.
TEST(Symmetry, RepresentativesStandForEveryRank) {
  int symmetric = 0, simulated = 0;
  for (const test::Layout &layout : equivalenceLayouts()) {
    for (int64_t k : {1, 4}) {
      SCOPED_TRACE(layout.name + " dp x" + std::to_string(k));
      Plan plan = planOf(scaleDp(layout.model, k));
      const ReplicaSymmetry symmetry =
          findReplicaSymmetry(plan.topology, plan.rankProgram);
      symmetric += !symmetry.trivial();
      if (!symmetry.trivial()) {
        // Each orbit has `order` ranks, one of them its representative.
        const std::vector<int64_t> reps = symmetry.representatives();
        EXPECT_EQ(static_cast<int64_t>(reps.size()) * symmetry.order(),
                  plan.topology.worldSize);
        for (int64_t r = 0; r < plan.topology.worldSize; ++r) {
          EXPECT_EQ(
              symmetry.turn(symmetry.representativeOf(r), symmetry.turnsOf(r)),
              r);
          EXPECT_EQ(plan.rankProgram[symmetry.representativeOf(r)],
                    plan.rankProgram[r]);
        }
      }
      EXPECT_EQ(problemsText(verifyPrograms(plan.topology, plan.programs,
                                            plan.rankProgram, 8, true)),
                "");
      EXPECT_EQ(problemsText(verifyPrograms(plan.topology, plan.programs,
                                            plan.rankProgram, 8, false)),
                "");
      for (const Costed &c : costings()) {
        SCOPED_TRACE(c.name);
        CostModel costs(plan.topology, plan.config, c.profile, c.cluster);
        Simulation fast = simulateStep(plan.topology, plan.programs,
                                       plan.rankProgram, costs, true);
        Simulation every = simulateStep(plan.topology, plan.programs,
                                        plan.rankProgram, costs, false);
        ASSERT_EQ(fast.problem, "");
        ASSERT_EQ(every.problem, "");
        simulated += !fast.symmetry.trivial();
        const double tolerance = 1e-9 * every.stepSeconds;
        EXPECT_NEAR(fast.stepSeconds, every.stepSeconds, tolerance);
        for (int64_t r = 0; r < plan.topology.worldSize; ++r) {
          EXPECT_NEAR(fast.busySeconds[r], every.busySeconds[r], tolerance)
              << "rank " << r;
          EXPECT_NEAR(fast.finishSeconds[r], every.finishSeconds[r], tolerance)
              << "rank " << r;
          // Each instruction's times, as its representative ran it.
          const size_t n = plan.programs[plan.rankProgram[r]].instrs.size();
          for (size_t i = 0; i < n; ++i) {
            const auto instr = static_cast<int32_t>(i);
            EXPECT_NEAR(fast.instrs[fast.entry(r, instr)].end,
                        every.instrs[every.entry(r, instr)].end, tolerance);
          }
        }
        EXPECT_NEAR(fast.instrs[fast.criticalPath.back()].end, fast.stepSeconds,
                    tolerance);
      }
    }
  }
  // Most layouts have replicas to fold, and the clusters fold some of them.
  EXPECT_GT(symmetric, 20);
  EXPECT_GT(simulated, 20);
}

// The order found: every module's replicas turn together, as far as the
// cluster lets (a turn must carry whole nodes onto whole nodes).
TEST(Symmetry, TheOrderIsTheLargestTheLayoutAndClusterAllow) {
  json model = example("vlm-fan-in.json"); // images dp4, language dp1
  Plan one = planOf(model);
  EXPECT_TRUE(findReplicaSymmetry(one.topology, one.rankProgram).trivial());

  // Language tp2 pp2 dp8 fed by images dp32: order gcd(8, 32) = 8.
  Plan many = planOf(scaleDp(model, 8));
  const ReplicaSymmetry symmetry =
      findReplicaSymmetry(many.topology, many.rankProgram);
  EXPECT_EQ(symmetry.order(), 8);
  EXPECT_EQ(symmetry.step(0), 4); // the images' lanes move 4 a turn
  EXPECT_EQ(symmetry.step(1), 1);

  // On nodes of 8 GPUs a turn moves the language's ranks by 2 (tp 2): only
  // orders whose turn moves whole nodes hold for the simulation.
  DeviceProfile h100 = *builtinProfile("h100");
  CostModel costs(many.topology, many.config, h100, defaultCluster(h100));
  Simulation sim =
      simulateStep(many.topology, many.programs, many.rankProgram, costs);
  ASSERT_EQ(sim.problem, "");
  EXPECT_GT(sim.symmetry.order(), 1);
  EXPECT_LT(sim.symmetry.order(), 8);
  std::map<int64_t, int64_t> nodeTurn; // each node's ranks onto one node
  for (int64_t r = 0; r < many.topology.worldSize; ++r) {
    const int64_t to = costs.nodeOf(sim.symmetry.turn(r, 1));
    EXPECT_EQ(nodeTurn.emplace(costs.nodeOf(r), to).first->second, to)
        << "rank " << r;
  }
}

// A rank whose program is not its replicas' breaks the symmetry it would
// have: the order drops to what still holds.
TEST(Symmetry, AnOddProgramBreaksTheTurn) {
  Plan plan = planOf(scaleDp(example("vlm-fan-in.json"), 4));
  ASSERT_EQ(findReplicaSymmetry(plan.topology, plan.rankProgram).order(), 4);
  // The last language rank gets a copy of its own program.
  const int64_t last = plan.topology.worldSize - 1;
  plan.programs.push_back(plan.programs[plan.rankProgram[last]]);
  plan.rankProgram[last] = static_cast<int32_t>(plan.programs.size() - 1);
  EXPECT_TRUE(findReplicaSymmetry(plan.topology, plan.rankProgram).trivial());
  EXPECT_EQ(problemsText(
                verifyPrograms(plan.topology, plan.programs, plan.rankProgram)),
            "");
}

// A deadlock in a program every replica shares is found from the
// representatives, in the same words as from every rank: the cycle runs
// through the lowest ranks, which are representatives.
TEST(Symmetry, ADeadlockIsFoundFromTheRepresentatives) {
  Plan plan = planOf(scaleDp(example("vlm-fan-in.json"), 4));
  ASSERT_GT(findReplicaSymmetry(plan.topology, plan.rankProgram).order(), 1);
  // The language's last stage receives its first activation after its
  // first backward's gradient send: no rank can go on.
  std::map<int32_t, bool> swapped;
  for (int64_t r = 0; r < plan.topology.worldSize; ++r) {
    const int32_t p = plan.rankProgram[r];
    Program &program = plan.programs[p];
    if (swapped[p] || program.role.find("language/pp1") != 0)
      continue;
    auto recv =
        std::find_if(program.instrs.begin(), program.instrs.end(),
                     [](const Instr &in) { return in.op == InstrOp::RecvAct; });
    auto send = std::find_if(
        program.instrs.begin(), program.instrs.end(),
        [](const Instr &in) { return in.op == InstrOp::SendGrad; });
    ASSERT_NE(recv, program.instrs.end());
    ASSERT_NE(send, program.instrs.end());
    std::swap(recv->fused, send->fused); // the runs stay as they were
    std::iter_swap(recv, send);
    swapped[p] = true;
  }
  ASSERT_FALSE(swapped.empty());
  const std::string folded = problemsText(
      verifyPrograms(plan.topology, plan.programs, plan.rankProgram, 8, true));
  const std::string every = problemsText(
      verifyPrograms(plan.topology, plan.programs, plan.rankProgram, 8, false));
  EXPECT_NE(folded.find("deadlocks"), std::string::npos) << folded;
  EXPECT_EQ(folded, every);
}
