//===- TopologyRoundTripTest.cpp - config -> topology -> IR -> topology ---===//
//
// docs/plan.md "One topology": the compiled topology is one function of the
// model configuration (plan/BuildTopology.h). mimoc's passes read the same
// function's inputs from the IR and annotate the IR with its bridges and
// stages; for every example and every equivalence layout the topology read
// back from the compiled IR equals the one built from model.json, and the
// plan mimoc writes equals the one the runtime rebuilds.
//
//===----------------------------------------------------------------------===//

#include "tests/e2e/Layouts.h"

#include "passes/TopologyFromIR.h"
#include "runtime/plan/BuildTopology.h"
#include "tools/driver/Driver.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cctype>

using namespace mimo;

namespace {

std::vector<test::Layout> everyLayout() {
  std::vector<test::Layout> layouts = test::equivalenceLayouts();
  for (const char *file :
       {"avlm.json", "llava-lora.json", "llava-stage1.json",
        "llava-stage2.json", "lm-cp2-sp.json", "packed-thd.json",
        "vlm-colocated-pp2.json", "vlm-colocated.json", "vlm-fan-in.json",
        "vlm-fan-out.json"}) {
    std::string name = std::string("Example_") + file;
    for (char &c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)))
        c = '_';
    layouts.push_back({name, test::example(file), 0});
  }
  return layouts;
}

class TopologyRoundTrip : public testing::TestWithParam<test::Layout> {};

TEST_P(TopologyRoundTrip, ConfigToTopologyToIRToTopologyIsEqual) {
  static mlir::MLIRContext *context = new mlir::MLIRContext();
  const std::string text = GetParam().model.dump(2);
  CompileResult result = compileModel(*context, "model.json", text);
  ASSERT_TRUE(result.succeeded());
  ModelConfig config =
      test::requireConfig(parseModelConfig(text, "model.json"));

  std::string error;
  std::optional<Topology> fromConfig = buildTopology(config, &error);
  ASSERT_TRUE(fromConfig) << error;
  auto models = llvm::to_vector(result.module->getOps<ir::ModelOp>());
  ASSERT_EQ(models.size(), 1u);
  mlir::FailureOr<Topology> fromIR =
      readTopology(models.front(), TopologyParts::Stages);
  ASSERT_TRUE(mlir::succeeded(fromIR));
  std::optional<std::string> difference =
      topologyDifference(*fromConfig, *fromIR);
  EXPECT_FALSE(difference) << *difference;

  // The plan mimoc writes is the one the runtime rebuilds from the model.
  Plan rebuilt = test::requirePlan(config);
  EXPECT_EQ(planToJson(*result.plan), planToJson(rebuilt));
}

TEST(TopologyDifference, NamesTheFirstFieldThatDiffers) {
  Topology a =
      test::requirePlan(
          test::requireConfig(parseModelConfig(
              test::example("vlm-colocated-pp2.json").dump(), "model.json")))
          .topology;
  EXPECT_FALSE(topologyDifference(a, a));
  Topology b = a;
  b.modules.back().tiedAcrossStages = !b.modules.back().tiedAcrossStages;
  ASSERT_TRUE(topologyDifference(a, b));
  EXPECT_EQ(*topologyDifference(a, b),
            "/modules/1/tied_across_stages: expected false, found true");
  b = a;
  b.stages.back().weightLag = 3;
  ASSERT_TRUE(topologyDifference(a, b));
  EXPECT_NE(topologyDifference(a, b)->find("/schedule/stages/"),
            std::string::npos);
  b = a;
  b.bridges.front().ratio += 1;
  ASSERT_TRUE(topologyDifference(a, b));
  EXPECT_NE(topologyDifference(a, b)->find("/bridges/0/ratio"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(EveryLayout, TopologyRoundTrip,
                         testing::ValuesIn(everyLayout()),
                         [](const testing::TestParamInfo<test::Layout> &info) {
                           return info.param.name;
                         });

} // namespace
