//===- FormulasTest.cpp - Leaders, routes, split sizes, zigzag, warm-ups --===//
//
// The shared formulas the bridge, sharding and schedule passes build on,
// table-driven from docs/plan.md's worked examples (grid
// [tp,gtp_remat,cp,pp,dp] is mimo's order "tp-cp-pp-dp").
//
//===----------------------------------------------------------------------===//

#include "runtime/schedule/Formulas.h"
#include "runtime/config/Grid.h"
#include "runtime/plan/Sharding.h"
#include "runtime/plan/Topology.h"

#include <gtest/gtest.h>

using namespace mimo;
using Ranks = std::vector<int64_t>;
using Groups = std::vector<std::vector<int64_t>>;

namespace {

Grid referenceGrid(int64_t tp, int64_t cp, int64_t pp, int64_t dp,
                   int64_t offset = 0) {
  return Grid({tp, cp, dp, pp}, *parseOrder("tp-cp-pp-dp"), offset);
}

struct LeaderCase {
  int64_t tp, cp, pp, dp;
  Ranks sourceLeaders, destinationLeaders;
  Groups sourceBoundary, destinationBoundary;
};

class LeaderTest : public testing::TestWithParam<LeaderCase> {};

TEST_P(LeaderTest, MatchesReference11_3) {
  const LeaderCase &c = GetParam();
  Grid grid = referenceGrid(c.tp, c.cp, c.pp, c.dp);
  EXPECT_EQ(sourceLeaders(grid), c.sourceLeaders);
  EXPECT_EQ(destinationLeaders(grid), c.destinationLeaders);
  EXPECT_EQ(boundaryGroups(grid, true), c.sourceBoundary);
  EXPECT_EQ(boundaryGroups(grid, false), c.destinationBoundary);
}

INSTANTIATE_TEST_SUITE_P(
    Reference, LeaderTest,
    testing::Values(
        LeaderCase{
            2, 1, 2, 2, {3, 7}, {0, 4}, {{2, 3}, {6, 7}}, {{0, 1}, {4, 5}}},
        LeaderCase{4, 1, 2, 1, {7}, {0}, {{4, 5, 6, 7}}, {{0, 1, 2, 3}}},
        LeaderCase{1,
                   1,
                   2,
                   4,
                   {1, 3, 5, 7},
                   {0, 2, 4, 6},
                   {{1}, {3}, {5}, {7}},
                   {{0}, {2}, {4}, {6}}},
        LeaderCase{2, 1, 4, 1, {7}, {0}, {{6, 7}}, {{0, 1}}}));

TEST(LeaderTest, SourceLeaderIsLastCpRank) {
  // docs/plan.md (beyond): cp = CP-1 at the source; tp2·cp2 dp1, default order.
  Grid grid({2, 2, 1, 1});
  EXPECT_EQ(sourceLeaders(grid), (Ranks{3}));
  EXPECT_EQ(destinationLeaders(grid), (Ranks{0}));
  EXPECT_EQ(boundaryGroups(grid, false), (Groups{{0, 1, 2, 3}}));
}

struct RouteCase {
  const char *name;
  Grid source, destination;
  std::vector<BridgeRoute> routes;
};

class RouteTest : public testing::TestWithParam<RouteCase> {};

TEST_P(RouteTest, MatchesReference11_4) {
  const RouteCase &c = GetParam();
  EXPECT_EQ(
      bridgeRoutes(sourceLeaders(c.source), destinationLeaders(c.destination)),
      c.routes);
}

INSTANTIATE_TEST_SUITE_P(
    Reference, RouteTest,
    testing::Values(RouteCase{"tp2dp2_to_tp4",
                              referenceGrid(2, 1, 1, 2),
                              referenceGrid(4, 1, 1, 1, 4),
                              {{1, 4}, {3, 4}}},
                    RouteCase{"dp4_to_tp4",
                              referenceGrid(1, 1, 1, 4),
                              referenceGrid(4, 1, 1, 1, 4),
                              {{0, 4}, {1, 4}, {2, 4}, {3, 4}}},
                    RouteCase{"tp4_to_dp4",
                              referenceGrid(4, 1, 1, 1),
                              referenceGrid(1, 1, 1, 4, 4),
                              {{3, 4}, {3, 5}, {3, 6}, {3, 7}}},
                    RouteCase{"tp4_to_tp2dp2",
                              referenceGrid(4, 1, 1, 1),
                              referenceGrid(2, 1, 1, 2, 4),
                              {{3, 4}, {3, 6}}},
                    RouteCase{"tp2dp2_to_dp4",
                              referenceGrid(2, 1, 1, 2),
                              referenceGrid(1, 1, 1, 4, 4),
                              {{1, 4}, {1, 5}, {3, 6}, {3, 7}}},
                    RouteCase{"one_to_one",
                              referenceGrid(1, 1, 1, 2),
                              referenceGrid(1, 1, 2, 2, 2),
                              {{0, 2}, {1, 4}}}),
    [](const testing::TestParamInfo<RouteCase> &info) {
      return std::string(info.param.name);
    });

TEST(SplitSizesTest, Reference11_5) {
  std::string error;
  EXPECT_EQ(foldSplitSizes({0, 3, 1, 2}, 2, 6), (Ranks{3, 3}));
  EXPECT_EQ(foldSplitSizes({1, 3, 2}, 3, 6), (Ranks{1, 3, 2}));
  EXPECT_EQ(foldSplitSizes({1, 5}, 1, 6), (Ranks{6}));
  EXPECT_EQ(foldSplitSizes({3, 1, 2, 2}, 2, 8), (Ranks{4, 4}));
  EXPECT_EQ(foldSplitSizes({3, 1, 2, 2}, 4, 8), (Ranks{3, 1, 2, 2}));
  EXPECT_EQ(foldSplitSizes({0, 0}, 2, 0), (Ranks{0, 0})); // zero-token piece
  EXPECT_FALSE(foldSplitSizes({1, 2, 3}, 2, 6, &error));
  EXPECT_NE(error.find("bridge split metadata has 3 entries"),
            std::string::npos);
  EXPECT_FALSE(foldSplitSizes({2, 2}, 2, 6, &error));
  EXPECT_NE(error.find("bridge split metadata sums to 4"), std::string::npos);
  EXPECT_FALSE(foldSplitSizes({1, 2, 3, 4, 5, 6}, 4, 21, &error));
  EXPECT_NE(error.find("has 6 entries"), std::string::npos);
}

TEST(ShardingTest, CpZigzagReference11_8) {
  EXPECT_EQ(expandRanges(zigzagRanges(8, 2, 0)), (Ranks{0, 1, 6, 7}));
  EXPECT_EQ(expandRanges(zigzagRanges(8, 2, 1)), (Ranks{2, 3, 4, 5}));
  EXPECT_EQ(zigzagRanges(16, 2, 0), (PositionRanges{{0, 4}, {12, 16}}));
  EXPECT_EQ(zigzagRanges(16, 2, 1), (PositionRanges{{4, 12}}));
  EXPECT_EQ(expandRanges(zigzagRanges(16, 4, 0)), (Ranks{0, 1, 14, 15}));
  EXPECT_EQ(expandRanges(zigzagRanges(16, 4, 1)), (Ranks{2, 3, 12, 13}));
  EXPECT_EQ(expandRanges(zigzagRanges(16, 4, 2)), (Ranks{4, 5, 10, 11}));
  EXPECT_EQ(expandRanges(zigzagRanges(16, 4, 3)), (Ranks{6, 7, 8, 9}));
  // CP 8, S 64: rank r holds 4r..4r+3 then 60-4r..63-4r (adjacent chunks
  // of the middle rank merge into one range).
  for (int64_t r = 0; r < 8; ++r) {
    Ranks expected;
    for (int64_t i = 0; i < 4; ++i)
      expected.push_back(4 * r + i);
    for (int64_t i = 0; i < 4; ++i)
      expected.push_back(60 - 4 * r + i);
    EXPECT_EQ(expandRanges(zigzagRanges(64, 8, r)), expected);
  }
  EXPECT_EQ(zigzagRanges(64, 8, 7), (PositionRanges{{28, 36}}));
  EXPECT_EQ(zigzagRanges(10, 1, 0), (PositionRanges{{0, 10}}));
}

TEST(ShardingTest, SequenceParallelReference11_8) {
  // SP only, tp 8, S 64: TP rank t holds 8t..8t+7.
  for (int64_t t = 0; t < 8; ++t)
    EXPECT_EQ(sequenceParallelSlice(zigzagRanges(64, 1, 0), 8, t),
              (PositionRanges{{8 * t, 8 * t + 8}}));
  // CP 2 + SP tp 2, S 8.
  EXPECT_EQ(expandRanges(sequenceParallelSlice(zigzagRanges(8, 2, 0), 2, 0)),
            (Ranks{0, 1}));
  EXPECT_EQ(expandRanges(sequenceParallelSlice(zigzagRanges(8, 2, 0), 2, 1)),
            (Ranks{6, 7}));
  EXPECT_EQ(expandRanges(sequenceParallelSlice(zigzagRanges(8, 2, 1), 2, 0)),
            (Ranks{2, 3}));
  EXPECT_EQ(expandRanges(sequenceParallelSlice(zigzagRanges(8, 2, 1), 2, 1)),
            (Ranks{4, 5}));
  // CP 2 + SP tp 2, S 64.
  EXPECT_EQ(sequenceParallelSlice(zigzagRanges(64, 2, 0), 2, 0),
            (PositionRanges{{0, 16}}));
  EXPECT_EQ(sequenceParallelSlice(zigzagRanges(64, 2, 0), 2, 1),
            (PositionRanges{{48, 64}}));
  EXPECT_EQ(sequenceParallelSlice(zigzagRanges(64, 2, 1), 2, 0),
            (PositionRanges{{16, 32}}));
  EXPECT_EQ(sequenceParallelSlice(zigzagRanges(64, 2, 1), 2, 1),
            (PositionRanges{{32, 48}}));
}

TEST(ShardingTest, ThdZigzagReference11_8) {
  EXPECT_EQ(expandRanges(thdZigzagRanges({0, 8, 16}, 2, 0)),
            (Ranks{0, 1, 6, 7, 8, 9, 14, 15}));
  EXPECT_EQ(expandRanges(thdZigzagRanges({0, 8, 16}, 2, 1)),
            (Ranks{2, 3, 4, 5, 10, 11, 12, 13}));
  EXPECT_EQ(expandRanges(thdZigzagRanges({0, 4, 12}, 2, 0)),
            (Ranks{0, 3, 4, 5, 10, 11}));
  EXPECT_EQ(expandRanges(thdZigzagRanges({0, 4, 12}, 2, 1)),
            (Ranks{1, 2, 6, 7, 8, 9}));
  EXPECT_EQ(expandRanges(thdZigzagRanges({0, 8, 24}, 4, 0)),
            (Ranks{0, 7, 8, 9, 22, 23}));
  EXPECT_EQ(expandRanges(thdZigzagRanges({0, 8, 24}, 4, 1)),
            (Ranks{1, 6, 10, 11, 20, 21}));
  EXPECT_EQ(expandRanges(thdZigzagRanges({0, 8, 24}, 4, 2)),
            (Ranks{2, 5, 12, 13, 18, 19}));
  EXPECT_EQ(expandRanges(thdZigzagRanges({0, 8, 24}, 4, 3)),
            (Ranks{3, 4, 14, 15, 16, 17}));
  EXPECT_EQ(expandRanges(thdZigzagRanges({0, 4, 8, 16}, 2, 0)),
            (Ranks{0, 3, 4, 7, 8, 9, 14, 15}));
  EXPECT_EQ(expandRanges(thdZigzagRanges({0, 4, 8, 16}, 2, 1)),
            (Ranks{1, 2, 5, 6, 10, 11, 12, 13}));
}

struct WarmupCase {
  const char *name;
  std::vector<int64_t> encoderPp;
  int64_t languagePp;
  int64_t total;
  std::vector<int64_t> encoderWarmups;  // by encoder pp
  std::vector<int64_t> languageWarmups; // by language pp
};

class WarmupTest : public testing::TestWithParam<WarmupCase> {};

TEST_P(WarmupTest, MatchesReference11_10) {
  const WarmupCase &c = GetParam();
  const int64_t microbatches = 4;
  int64_t total = totalStages(c.encoderPp, c.languagePp, false);
  EXPECT_EQ(total, c.total);
  for (int64_t pp = 0; pp < static_cast<int64_t>(c.encoderWarmups.size()); ++pp)
    EXPECT_EQ(warmupMicrobatches(total, pp, microbatches),
              c.encoderWarmups[pp]);
  for (int64_t pp = 0; pp < c.languagePp; ++pp)
    EXPECT_EQ(warmupMicrobatches(total, languageStage(c.encoderPp, pp, false),
                                 microbatches),
              c.languageWarmups[pp]);
}

INSTANTIATE_TEST_SUITE_P(
    Reference, WarmupTest,
    testing::Values(WarmupCase{"baseline_2gpu", {1}, 1, 2, {1}, {0}},
                    WarmupCase{"lm_pp3_4gpu", {1}, 3, 4, {3}, {2, 1, 0}},
                    WarmupCase{"full_pp_8gpu", {2}, 2, 4, {3, 2}, {1, 0}},
                    WarmupCase{"fan_in_llm_pp2", {1}, 2, 3, {2}, {1, 0}},
                    WarmupCase{"fan_out_enc_pp2", {2}, 1, 3, {2, 1}, {0}},
                    WarmupCase{"two_encoders", {1, 2}, 2, 4, {3, 2}, {1, 0}}),
    [](const testing::TestParamInfo<WarmupCase> &info) {
      return std::string(info.param.name);
    });

TEST(WarmupTest, ColocatedCountsOnlyTheLanguagePipeline) {
  EXPECT_EQ(totalStages({1}, 2, true), 2);
  EXPECT_EQ(languageStage({1}, 1, true), 1);
  EXPECT_EQ(warmupMicrobatches(2, 0, 4), 1);
  // More stages than microbatches: warm-up is capped at M.
  EXPECT_EQ(warmupMicrobatches(8, 0, 4), 4);
}

} // namespace
