//===- GridTest.cpp - Grid arithmetic, layout, lanes, sharding factors ----===//
//
// Vectors from ../shared/reference/megatron-mimo-semantics.md §11.1, §11.2,
// §11.3, §11.9, translated to mimo's (tp, cp, dp, pp) grid and `order`.
//
//===----------------------------------------------------------------------===//

#include "runtime/config/Grid.h"
#include "runtime/json/Diagnostic.h"
#include "runtime/json/JsonLocator.h"
#include "runtime/json/JsonReader.h"
#include "runtime/plan/Topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

using namespace mimo;
using Groups = std::vector<std::vector<int64_t>>;

namespace {

DimOrder order(const std::string &dashed) {
  std::optional<DimOrder> parsed = parseOrder(dashed);
  if (!parsed)
    throw std::runtime_error("not an order: " + dashed);
  return *parsed;
}

Groups sortedMembers(Groups groups) {
  for (auto &group : groups)
    std::sort(group.begin(), group.end());
  std::sort(groups.begin(), groups.end());
  return groups;
}

struct EnumerationCase {
  const char *name;
  Coords sizes; // tp, cp, dp, pp
  const char *order;
  int64_t offset;
  std::vector<Dim> dims;
  Groups expected; // group membership (the reference's raw order, sorted)
};

class EnumerationTest : public testing::TestWithParam<EnumerationCase> {};

TEST_P(EnumerationTest, GroupsMatchReference) {
  const EnumerationCase &c = GetParam();
  Grid grid(c.sizes, order(c.order), c.offset);
  Groups groups = grid.groups(c.dims);
  // Canonical enumeration: ascending members, groups by smallest rank.
  for (const auto &group : groups)
    EXPECT_TRUE(std::is_sorted(group.begin(), group.end()));
  EXPECT_TRUE(std::is_sorted(groups.begin(), groups.end()));
  EXPECT_EQ(groups, sortedMembers(c.expected));
  for (const auto &group : groups)
    for (int64_t rank : group)
      EXPECT_EQ(grid.groupOf(rank, c.dims), group);
}

// §11.1, with a = tp, b = cp, c = dp where the reference uses other names.
INSTANTIATE_TEST_SUITE_P(
    Reference11_1, EnumerationTest,
    testing::Values(
        EnumerationCase{"tp2_dp4_tp",
                        {2, 1, 4, 1},
                        "tp-dp-cp-pp",
                        0,
                        {Dim::TP},
                        {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
        EnumerationCase{"tp2_cp2_dp2_tpcp",
                        {2, 2, 2, 1},
                        "tp-cp-dp-pp",
                        0,
                        {Dim::TP, Dim::CP},
                        {{0, 2, 1, 3}, {4, 6, 5, 7}}},
        EnumerationCase{"offset4_tp",
                        {2, 1, 2, 1},
                        "tp-dp-cp-pp",
                        4,
                        {Dim::TP},
                        {{4, 5}, {6, 7}}},
        EnumerationCase{"abc_a",
                        {2, 2, 2, 1},
                        "tp-cp-dp-pp",
                        0,
                        {Dim::TP},
                        {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
        EnumerationCase{"abc_c",
                        {2, 2, 2, 1},
                        "tp-cp-dp-pp",
                        0,
                        {Dim::DP},
                        {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
        EnumerationCase{"abc_ab",
                        {2, 2, 2, 1},
                        "tp-cp-dp-pp",
                        0,
                        {Dim::TP, Dim::CP},
                        {{0, 2, 1, 3}, {4, 6, 5, 7}}},
        EnumerationCase{"tp1_singletons",
                        {1, 2, 4, 1},
                        "tp-cp-dp-pp",
                        0,
                        {Dim::TP},
                        {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}},
        EnumerationCase{"tp1_cp2",
                        {1, 2, 4, 1},
                        "tp-cp-dp-pp",
                        0,
                        {Dim::TP, Dim::CP},
                        {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
        // §11.3 boundary tp-cp groups of tp2 pp2 dp2, order [tp,cp,pp,dp].
        EnumerationCase{"bridge_tpcp",
                        {2, 1, 2, 2},
                        "tp-cp-pp-dp",
                        0,
                        {Dim::TP, Dim::CP},
                        {{0, 1}, {2, 3}, {4, 5}, {6, 7}}}),
    [](const testing::TestParamInfo<EnumerationCase> &info) {
      return std::string(info.param.name);
    });

TEST(GridTest, ComplexGridHas24GroupsOf5) {
  // §11.1 test_complex_grid_scenario: [2,3,4,5] over [tp,cp,pp,dp].
  Grid grid({2, 3, 5, 4}, order("tp-cp-pp-dp"));
  Groups groups = grid.groups({Dim::DP});
  ASSERT_EQ(groups.size(), 24u);
  for (const auto &group : groups) {
    ASSERT_EQ(group.size(), 5u);
    for (size_t i = 1; i < group.size(); ++i)
      EXPECT_EQ(group[i] - group[i - 1], 2 * 3 * 4); // dp is slowest
  }
}

TEST(GridTest, DefaultOrderFormula) {
  // docs/model-json.md: rank = off + tp + TP·(cp + CP·(dp + DP·pp)).
  Grid grid({2, 3, 4, 5}, kDefaultOrder, 7);
  for (int64_t pp = 0; pp < 5; ++pp)
    for (int64_t dp = 0; dp < 4; ++dp)
      for (int64_t cp = 0; cp < 3; ++cp)
        for (int64_t tp = 0; tp < 2; ++tp) {
          int64_t rank = 7 + tp + 2 * (cp + 3 * (dp + 4 * pp));
          EXPECT_EQ(grid.rankOf({tp, cp, dp, pp}), rank);
          EXPECT_EQ(grid.coordsOf(rank), (Coords{tp, cp, dp, pp}));
        }
}

TEST(GridTest, EveryOrderRoundTripsAndFirstVariesFastest) {
  DimOrder dims = {Dim::TP, Dim::CP, Dim::DP, Dim::PP};
  std::sort(dims.begin(), dims.end());
  int permutations = 0;
  do {
    ++permutations;
    Grid grid({2, 3, 2, 3}, dims, 5);
    EXPECT_EQ(grid.stride(dims[0]), 1);
    EXPECT_EQ(grid.stride(dims[1]), grid.size(dims[0]));
    for (int64_t rank = grid.rankOffset(); rank < grid.endRank(); ++rank)
      EXPECT_EQ(grid.rankOf(grid.coordsOf(rank)), rank) << formatOrder(dims);
    EXPECT_EQ(grid.coordsOf(6)[dims[0]], 1) << formatOrder(dims);
  } while (std::next_permutation(dims.begin(), dims.end()));
  EXPECT_EQ(permutations, 24);
}

TEST(GridTest, BridgeLeaderCoordinatesOfSpecExample) {
  // docs/plan.md: tp2·pp2·dp2 at 0; source leader (tp=TP-1, cp=CP-1, pp=PP-1),
  // destination leader (tp=0, cp=0, pp=0) of each lane.
  auto leaders = [](const Grid &grid, bool source) {
    std::vector<int64_t> ranks;
    for (int64_t dp = 0; dp < grid.size(Dim::DP); ++dp)
      ranks.push_back(
          source ? grid.rankOf({grid.size(Dim::TP) - 1, grid.size(Dim::CP) - 1,
                                dp, grid.size(Dim::PP) - 1})
                 : grid.rankOf({0, 0, dp, 0}));
    return ranks;
  };
  Grid reference({2, 1, 2, 2}, order("tp-cp-pp-dp"));
  EXPECT_EQ(leaders(reference, true), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(leaders(reference, false), (std::vector<int64_t>{0, 4}));
  Grid standard({2, 1, 2, 2}, kDefaultOrder);
  EXPECT_EQ(leaders(standard, true), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(leaders(standard, false), (std::vector<int64_t>{0, 2}));
}

TEST(GridTest, ColocatedPositions) {
  // §11.9: grid [tp,cp,pp,dp]; src tp2·dp4: r -> (r div 2, r mod 2).
  Grid source({2, 1, 4, 1}, order("tp-cp-pp-dp"));
  Grid destination({4, 1, 2, 1}, order("tp-cp-pp-dp"));
  for (int64_t rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(source.coordsOf(rank).dp, rank / 2);
    EXPECT_EQ(source.coordsOf(rank).tp, rank % 2);
    EXPECT_EQ(destination.coordsOf(rank).dp, rank / 4);
    EXPECT_EQ(destination.coordsOf(rank).tp, rank % 4);
  }
  // Offset 4: dest tp1·dp4 -> {4:(0,0), 5:(1,0), 6:(2,0), 7:(3,0)}.
  Grid offset({1, 1, 4, 1}, order("tp-cp-pp-dp"), 4);
  for (int64_t rank = 4; rank < 8; ++rank)
    EXPECT_EQ(offset.coordsOf(rank), (Coords{0, 0, rank - 4, 0}));
}

TEST(GridTest, StagesFollowPp) {
  Grid grid({2, 1, 1, 3}, kDefaultOrder, 4); // language tp2·pp3 at 4
  EXPECT_TRUE(grid.isFirstStage(4));
  EXPECT_TRUE(grid.isFirstStage(5));
  EXPECT_FALSE(grid.isFirstStage(6));
  EXPECT_FALSE(grid.isLastStage(7));
  EXPECT_TRUE(grid.isLastStage(8));
  EXPECT_TRUE(grid.isLastStage(9));
}

TEST(GridTest, ParseOrderRejectsBadNames) {
  std::string why;
  EXPECT_FALSE(parseOrder(std::vector<std::string>{"tp", "cp", "dp"}, &why));
  EXPECT_NE(why.find("expected the 4 names"), std::string::npos);
  EXPECT_FALSE(parseOrder("tp-tp-dp-pp", &why));
  EXPECT_NE(why.find("appears twice"), std::string::npos);
  EXPECT_FALSE(parseOrder("tp-cp-ep-pp", &why));
  EXPECT_NE(why.find("unknown dimension 'ep'"), std::string::npos);
  EXPECT_EQ(formatOrder(*parseOrder("pp-dp-cp-tp")), "pp-dp-cp-tp");
}

struct LayoutCase {
  const char *name;
  std::vector<RankSpan> spans;
  std::optional<Layout> layout; // nullopt: a problem
  int64_t worldSize;
  std::optional<LayoutProblem::Kind> problem;
};

class LayoutTest : public testing::TestWithParam<LayoutCase> {};

TEST_P(LayoutTest, Classifies) {
  const LayoutCase &c = GetParam();
  LayoutResult result = classifyLayout(c.spans);
  if (c.problem) {
    ASSERT_TRUE(result.problem);
    EXPECT_EQ(result.problem->kind, *c.problem);
  } else {
    ASSERT_FALSE(result.problem);
    EXPECT_EQ(result.layout, *c.layout);
    EXPECT_EQ(result.worldSize, c.worldSize);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Spans, LayoutTest,
    testing::Values(
        LayoutCase{"colocated", {{0, 8}, {0, 8}}, Layout::Colocated, 8, {}},
        LayoutCase{
            "non_colocated", {{0, 4}, {4, 8}}, Layout::NonColocated, 8, {}},
        LayoutCase{
            "unsorted", {{4, 8}, {0, 3}, {3, 4}}, Layout::NonColocated, 8, {}},
        LayoutCase{"single", {{0, 4}}, Layout::Colocated, 4, {}},
        // §11.2: spans 0-3 and 2-5 overlap; 0-1 and 4-5 leave a gap.
        LayoutCase{"partial_overlap",
                   {{0, 4}, {2, 6}},
                   {},
                   0,
                   LayoutProblem::Kind::Overlap},
        LayoutCase{"gap", {{0, 2}, {4, 6}}, {}, 0, LayoutProblem::Kind::Gap},
        LayoutCase{
            "gap_at_zero", {{2, 4}, {4, 6}}, {}, 0, LayoutProblem::Kind::Gap},
        LayoutCase{"colocated_offset",
                   {{2, 4}, {2, 4}},
                   {},
                   0,
                   LayoutProblem::Kind::Gap},
        LayoutCase{"equal_plus_disjoint",
                   {{0, 4}, {0, 4}, {4, 8}},
                   {},
                   0,
                   LayoutProblem::Kind::Overlap}),
    [](const testing::TestParamInfo<LayoutCase> &info) {
      return std::string(info.param.name);
    });

TEST(LayoutTest, ProblemNamesBothModules) {
  LayoutResult overlap = classifyLayout({{0, 4}, {4, 8}, {6, 10}});
  ASSERT_TRUE(overlap.problem);
  EXPECT_EQ(overlap.problem->first, 1u);
  EXPECT_EQ(overlap.problem->second, 2u);
  LayoutResult gap = classifyLayout({{6, 8}, {0, 4}});
  ASSERT_TRUE(gap.problem);
  EXPECT_EQ(gap.problem->first, 1u);
  EXPECT_EQ(gap.problem->second, 0u);
  EXPECT_EQ(gap.problem->gapBegin, 4);
  EXPECT_EQ(gap.problem->gapEnd, 6);
}

TEST(TopologyTest, LaneRelations) {
  auto relation = [](int64_t source, int64_t destination, bool colocated) {
    std::optional<LaneRelation> r = relateLanes(source, destination, colocated);
    return r ? std::string(bridgeModeName(r->mode)) + ":" +
                   std::to_string(r->ratio)
             : std::string("none");
  };
  EXPECT_EQ(relation(4, 1, false), "fan_in:4");
  EXPECT_EQ(relation(2, 4, false), "fan_out:2");
  EXPECT_EQ(relation(2, 2, false), "one_to_one:1");
  EXPECT_EQ(relation(3, 2, false), "none");
  EXPECT_EQ(relation(4, 2, true), "colocated:2");
  EXPECT_EQ(relation(2, 4, true), "colocated:2");
  EXPECT_EQ(relation(3, 2, true), "none");
}

TEST(TopologyTest, SequenceShardFactor) {
  // docs/plan.md: 2·cp·tp (CP+SP), 2·cp (CP), tp (SP).
  EXPECT_EQ(sequenceShardFactor(2, 2, true), 8);
  EXPECT_EQ(sequenceShardFactor(2, 2, false), 4);
  EXPECT_EQ(sequenceShardFactor(1, 8, true), 8);
  EXPECT_EQ(sequenceShardFactor(1, 8, false), 1);
  EXPECT_EQ(sequenceShardFactor(8, 1, false), 16);
}

TEST(JsonLocatorTest, FindsNestedValuesAndFallsBack) {
  std::string text =
      "{\n  \"a\": {\"b\": [10, {\"c/d\": 3}]},\n  \"e\": \"x\"\n}";
  JsonLocator locator(text);
  EXPECT_EQ(locator.find("").line, 1);
  SourcePosition a = locator.find("/a");
  EXPECT_EQ(a.line, 2);
  EXPECT_EQ(a.column, 8);
  SourcePosition element = locator.find("/a/b/1");
  EXPECT_EQ(element.line, 2);
  EXPECT_EQ(element.column, 19);
  SourcePosition escaped = locator.find("/a/b/1/c~1d");
  EXPECT_EQ(escaped.column, 27);
  SourcePosition missing = locator.find("/a/b/1/zz");
  EXPECT_EQ(missing.column, element.column);
  EXPECT_EQ(locator.find("/e").line, 3);
}

TEST(DiagnosticTest, FormatsPointerAndSyntaxErrors) {
  Diagnostic error = Diagnostic::error("/modules/1/parallel/tp", "bad tp");
  EXPECT_EQ(formatDiagnostic("model.json", error),
            "model.json: /modules/1/parallel/tp: error: bad tp");
  Diagnostic syntax;
  syntax.syntax = true;
  syntax.position = {3, 14};
  syntax.message = "invalid JSON";
  EXPECT_EQ(formatDiagnostic("m.json", syntax),
            "m.json:3:14: error: invalid JSON");
  EXPECT_EQ(escapePointerToken("a/b~c"), "a~1b~0c");
}

TEST(DiagnosticTest, ClosestMatchSuggestsTypos) {
  std::vector<std::string> keys = {
      "tp", "cp", "pp", "dp", "rank_offset", "sequence_parallel", "order"};
  EXPECT_EQ(closestMatch("tpp", keys), "tp");
  EXPECT_EQ(closestMatch("rank_ofset", keys), "rank_offset");
  EXPECT_EQ(closestMatch("sequence", keys), "sequence_parallel");
  EXPECT_EQ(closestMatch("foo_bar_baz", keys), "");
}

} // namespace
