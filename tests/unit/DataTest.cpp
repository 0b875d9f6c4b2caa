//===- DataTest.cpp - Synthetic data and lane views (SPEC §4.2, §4.8) -----===//

#include "runtime/exec/Data.h"
#include "runtime/core/ModelConfig.h"
#include "tests/unit/TestModels.h"

#include <gtest/gtest.h>

using namespace mimo;
using namespace mimo::exec;

namespace {

ModelConfig configOf(const nlohmann::json &model) {
  ParseResult parsed = parseModelConfig(model.dump(), "model.json");
  EXPECT_TRUE(parsed.config);
  return *parsed.config;
}

TEST(DataTest, SyntheticMicrobatchIsAPureFunctionOfStepAndIndex) {
  ModelConfig config = configOf(test::baseModel());
  std::vector<std::string> errors;
  auto a = makeDataSource(config, "", "plan.json", errors);
  auto b = makeDataSource(config, "", "plan.json", errors);
  ASSERT_TRUE(a && b);
  Microbatch x = a->get(2, 1), y = b->get(2, 1), z = a->get(2, 2);
  ASSERT_EQ(x.samples.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(x.samples[i].ids, y.samples[i].ids);
    EXPECT_EQ(x.samples[i].features, y.samples[i].features);
  }
  bool differs = false;
  for (size_t i = 0; i < 8; ++i)
    differs |= x.samples[i].ids != z.samples[i].ids;
  EXPECT_TRUE(differs);
}

TEST(DataTest, ModalityCountsMatchSpecialTokensAndRanges) {
  ModelConfig config = configOf(test::baseModel()); // images [0, 24], 25 %
  std::vector<std::string> errors;
  auto data = makeDataSource(config, "", "plan.json", errors);
  int textOnly = 0, samples = 0;
  for (int64_t mb = 0; mb < 16; ++mb)
    for (const Sample &s : data->get(0, mb).samples) {
      ++samples;
      int64_t count = 0;
      for (int64_t id : s.ids) {
        EXPECT_GE(id, 0);
        EXPECT_LT(id, 1024);
        count += id == 1000;
      }
      EXPECT_EQ(count, s.counts[0]);
      EXPECT_LE(count, 24);
      EXPECT_EQ(static_cast<int64_t>(s.features[0].size()), count * 48);
      textOnly += count == 0;
    }
  // A quarter of the samples are text-only (plus draws of 0 tokens).
  EXPECT_GT(textOnly, samples / 8);
  EXPECT_LT(textOnly, samples / 2);
}

TEST(DataTest, LossMaskSkipsModalityTokensAndTheLastPosition) {
  std::vector<EncoderInfo> encoders = {{"images", 9, 2}};
  Sample s;
  s.ids = {1, 9, 9, 4, 5, 0, 0};
  s.length = 5; // positions 5, 6 are padding
  std::vector<bool> masked;
  for (int64_t p = 0; p < 7; ++p)
    masked.push_back(lossMasked(s, encoders, p));
  // 0 -> label 9 (modality), 1, 2 are modality, 3 -> 5 ok, 4 is last.
  EXPECT_EQ(masked,
            (std::vector<bool>{true, true, true, false, true, true, true}));
}

TEST(DataTest, LanguageLaneRowsAreSampleMajor) {
  std::vector<EncoderInfo> encoders = {{"images", 9, 1}};
  Microbatch mb;
  for (int b = 0; b < 2; ++b) {
    Sample s;
    s.ids = b == 0 ? std::vector<int64_t>{1, 9, 9, 2}
                   : std::vector<int64_t>{9, 3, 4, 5};
    s.length = 4;
    s.counts = {b == 0 ? 2 : 1};
    s.features = {std::vector<float>(static_cast<size_t>(s.counts[0]))};
    mb.samples.push_back(s);
  }
  LanguageLane lane = languageLane(mb, encoders, 0, 2, false, 1);
  EXPECT_EQ(lane.seq, 4);
  EXPECT_EQ(lane.batch, 2);
  EXPECT_EQ(lane.modalityRows[0], 3);
  // token = position * batch + b; sample 0's rows first, in token order.
  EXPECT_EQ(lane.modalityRow[0][1 * 2 + 0], 0);
  EXPECT_EQ(lane.modalityRow[0][2 * 2 + 0], 1);
  EXPECT_EQ(lane.modalityRow[0][0 * 2 + 1], 2);
  EXPECT_EQ(lane.modalityRow[0][3 * 2 + 1], -1);
  EXPECT_EQ(lane.segments[0 * 2 + 1], 1);
  // Packed: one row, each sample padded to a multiple of 4, positions
  // restart per sample, padding has its own segment and no loss.
  mb.samples[1].length = 3;
  mb.samples[1].ids.resize(3);
  LanguageLane packed = languageLane(mb, encoders, 0, 2, true, 4);
  EXPECT_EQ(packed.cuSeqlens, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(packed.batch, 1);
  EXPECT_EQ(packed.positions[5], 1);
  EXPECT_EQ(packed.modalityRow[0][4], 2);
  EXPECT_LT(packed.segments[7], 0);
  EXPECT_EQ(packed.mask[7], 0.0f);
}

} // namespace
