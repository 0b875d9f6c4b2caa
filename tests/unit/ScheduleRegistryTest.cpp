//===- ScheduleRegistryTest.cpp - A schedule added from a test ------------===//
//
// docs/plan.md "Schedules": a schedule is one PipelineSchedule in one
// registry. GPipe (every forward, then every backward) registered here,
// from the test alone, parses from model.json, compiles through mimoc's
// passes to a verified plan, round-trips config -> topology -> IR ->
// topology, is planned for memory and explained, and trains to the very
// losses of 1F1B: no other file of mimo knows it.
//
//===----------------------------------------------------------------------===//

#include "tests/e2e/Layouts.h"
#include "tests/e2e/SameTraining.h"

#include "passes/TopologyFromIR.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/plan/BuildTopology.h"
#include "runtime/schedule/PipelineSchedule.h"
#include "tools/driver/Driver.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mimo;

namespace {

/// GPipe: each stage runs all its forwards, then all its backwards; it
/// holds every microbatch's activations; its bubble is 1F1B's.
class GPipe final : public PipelineSchedule {
public:
  std::string_view name() const override { return "gpipe"; }
  std::string_view label() const override { return "GPipe"; }
  int64_t warmup(const StageSlot &slot) const override {
    return slot.microbatches;
  }
  int64_t inFlight(int64_t, int64_t, int64_t microbatches, int64_t, int64_t,
                   int64_t) const override {
    return microbatches;
  }
};

const PipelineSchedule &gpipe() {
  static const bool registered = registerSchedule(std::make_unique<GPipe>());
  (void)registered;
  return *findSchedule("gpipe");
}

nlohmann::json fanIn(const char *schedule) {
  nlohmann::json model = test::example("vlm-fan-in.json");
  model["batch"]["schedule"] = schedule;
  return model;
}

TEST(ScheduleRegistry, NamesAreUniqueAndTheDefaultIsOneFOneB) {
  EXPECT_EQ(defaultSchedule().name(), "1f1b");
  EXPECT_EQ(findSchedule("1f1b"), &defaultSchedule());
  EXPECT_EQ(findSchedule("no_such_schedule"), nullptr);
  gpipe();
  EXPECT_FALSE(registerSchedule(std::make_unique<GPipe>()));
  std::vector<std::string> names;
  for (const PipelineSchedule *schedule : schedules())
    names.emplace_back(schedule->name());
  EXPECT_EQ(names, (std::vector<std::string>{"1f1b", "zero_bubble",
                                             "interleaved", "gpipe"}));
}

TEST(ScheduleRegistry, ATestScheduleCompilesVerifiesAndTrainsLikeOneFOneB) {
  const PipelineSchedule &schedule = gpipe();
  const std::string text = fanIn("gpipe").dump(2);
  ModelConfig config =
      test::requireConfig(parseModelConfig(text, "model.json"));
  ASSERT_EQ(config.batch.schedule, &schedule);
  EXPECT_EQ(toJson(config)["batch"]["schedule"], "gpipe");

  // mimoc: the passes build its stages, the verifier proves the plan.
  static mlir::MLIRContext *context = new mlir::MLIRContext();
  CompileResult compiled = compileModel(*context, "model.json", text);
  ASSERT_TRUE(compiled.succeeded())
      << (compiled.diagnostics.empty() ? "" : compiled.diagnostics[0].message);
  const Plan &plan = *compiled.plan;
  EXPECT_EQ(plan.topology.schedule, &schedule);
  EXPECT_EQ(planToJson(plan)["schedule"]["kind"], "gpipe");
  for (const StageTopology &stage : plan.topology.stages)
    EXPECT_EQ(stage.warmup, plan.topology.microbatches);
  auto models = llvm::to_vector(compiled.module->getOps<ir::ModelOp>());
  mlir::FailureOr<Topology> fromIR =
      readTopology(models.front(), TopologyParts::Stages);
  ASSERT_TRUE(mlir::succeeded(fromIR));
  std::string error;
  std::optional<Topology> fromConfig = buildTopology(config, &error);
  ASSERT_TRUE(fromConfig) << error;
  EXPECT_FALSE(topologyDifference(*fromConfig, *fromIR));

  // Every program runs all its forwards before its first backward.
  for (const Program &program : plan.programs) {
    bool backward = false;
    for (const Instr &in : program.instrs) {
      backward = backward || in.op == InstrOp::Backward;
      EXPECT_FALSE(backward && in.op == InstrOp::Forward) << program.role;
    }
  }

  // The memory plan holds every microbatch on the first language stage,
  // more than 1F1B's warm-up + 1 there.
  ModelConfig oneFOneB = config;
  oneFOneB.batch.schedule = &defaultSchedule();
  Plan plain = test::requirePlan(oneFOneB);
  const int64_t firstLanguageRank =
      plan.topology.modules[plan.topology.languageIndex()].grid.rankOffset();
  EXPECT_GT(
      memoryPlan(plan.topology, config)[firstLanguageRank].activationBytes,
      memoryPlan(plain.topology, oneFOneB)[firstLanguageRank].activationBytes);

  // The same losses as 1F1B, bit for bit: the schedule moves work, not
  // arithmetic.
  test::expectSameTraining(plan, plain);
}

TEST(ScheduleRegistry, AnUnknownScheduleIsRefusedWithTheRegisteredNames) {
  gpipe();
  ParseResult parsed = parseModelConfig(fanIn("gpipes").dump(), "model.json");
  ASSERT_FALSE(parsed.config);
  ASSERT_FALSE(parsed.diagnostics.empty());
  EXPECT_EQ(parsed.diagnostics[0].pointer, "/batch/schedule");
  EXPECT_NE(parsed.diagnostics[0].message.find("did you mean \"gpipe\"?"),
            std::string::npos)
      << parsed.diagnostics[0].message;
}

} // namespace
