//===- Grid.cpp - Rank <-> coordinate arithmetic of a module grid ---------===//

#include "runtime/config/Grid.h"

#include <climits>
#include <cstdint>

#include <algorithm>
#include <cassert>

namespace mimo {

const char *dimName(Dim dim) {
  switch (dim) {
  case Dim::TP:
    return "tp";
  case Dim::CP:
    return "cp";
  case Dim::DP:
    return "dp";
  case Dim::PP:
    return "pp";
  }
  return "?";
}

std::optional<Dim> parseDimName(std::string_view name) {
  for (Dim dim : kDefaultOrder)
    if (name == dimName(dim))
      return dim;
  return std::nullopt;
}

std::optional<DimOrder> parseOrder(const std::vector<std::string> &names,
                                   std::string *error) {
  auto fail = [&](std::string why) -> std::optional<DimOrder> {
    if (error)
      *error = std::move(why);
    return std::nullopt;
  };
  if (names.size() != 4)
    return fail("expected the 4 names tp, cp, dp, pp, found " +
                std::to_string(names.size()));
  DimOrder order{};
  bool seen[4] = {false, false, false, false};
  for (size_t i = 0; i < names.size(); ++i) {
    std::optional<Dim> dim = parseDimName(names[i]);
    if (!dim)
      return fail("unknown dimension '" + names[i] +
                  "' (expected tp, cp, dp or pp)");
    if (seen[static_cast<int>(*dim)])
      return fail("dimension '" + names[i] + "' appears twice");
    seen[static_cast<int>(*dim)] = true;
    order[i] = *dim;
  }
  return order;
}

std::optional<DimOrder> parseOrder(std::string_view dashed,
                                   std::string *error) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    size_t dash = dashed.find('-', start);
    names.emplace_back(dashed.substr(start, dash - start));
    if (dash == std::string_view::npos)
      break;
    start = dash + 1;
  }
  return parseOrder(names, error);
}

std::string formatOrder(const DimOrder &order) {
  std::string text;
  for (Dim dim : order) {
    if (!text.empty())
      text += '-';
    text += dimName(dim);
  }
  return text;
}

Grid::Grid(Coords sizes, DimOrder order, int64_t rankOffset)
    : sizes(sizes), dimOrder(order), offset(rankOffset) {
  int64_t stride = 1;
  for (Dim dim : dimOrder) {
    assert(this->sizes[dim] >= 1 && "grid sizes must be positive");
    strides[dim] = stride;
    stride *= this->sizes[dim];
  }
}

int64_t Grid::rankOf(const Coords &coords) const {
  int64_t rank = offset;
  for (Dim dim : dimOrder)
    rank += coords[dim] * strides[dim];
  return rank;
}

Coords Grid::coordsOf(int64_t rank) const {
  assert(contains(rank) && "rank outside the grid");
  Coords coords;
  int64_t relative = rank - offset;
  // Mixed-radix digits, innermost dimension first (the order's strides
  // grow in it): one division and one remainder a dimension, in 32 bits
  // where the rank fits (the verifier asks for every rank's coordinates).
  if (relative >= 0 && relative <= INT32_MAX) {
    uint32_t rest = static_cast<uint32_t>(relative);
    for (Dim dim : dimOrder) {
      const uint32_t size = static_cast<uint32_t>(sizes[dim]);
      coords[dim] = rest % size;
      rest /= size;
    }
    return coords;
  }
  for (Dim dim : dimOrder) {
    coords[dim] = relative % sizes[dim];
    relative /= sizes[dim];
  }
  return coords;
}

std::vector<int64_t> Grid::groupOf(int64_t rank,
                                   const std::vector<Dim> &dims) const {
  Coords base = coordsOf(rank);
  for (Dim dim : dims)
    base[dim] = 0;
  int64_t groupSize = 1;
  for (Dim dim : dims)
    groupSize *= sizes[dim];
  std::vector<int64_t> members;
  members.reserve(groupSize);
  int64_t root = rankOf(base);
  for (int64_t index = 0; index < groupSize; ++index) {
    // Mixed radix over `dims` (first listed fastest); sorted afterwards.
    int64_t rest = index, member = root;
    for (Dim dim : dims) {
      member += (rest % sizes[dim]) * strides[dim];
      rest /= sizes[dim];
    }
    members.push_back(member);
  }
  std::sort(members.begin(), members.end());
  return members;
}

std::vector<std::vector<int64_t>>
Grid::groups(const std::vector<Dim> &dims) const {
  std::vector<std::vector<int64_t>> result;
  // A group's smallest rank has coordinate 0 on every grouped dimension;
  // visiting ranks in ascending order yields groups by smallest rank.
  for (int64_t rank = offset; rank < endRank(); ++rank) {
    Coords coords = coordsOf(rank);
    bool isRoot = true;
    for (Dim dim : dims)
      isRoot = isRoot && coords[dim] == 0;
    if (isRoot)
      result.push_back(groupOf(rank, dims));
  }
  return result;
}

const char *layoutName(Layout layout) {
  return layout == Layout::Colocated ? "colocated" : "non_colocated";
}

LayoutResult classifyLayout(const std::vector<RankSpan> &spans) {
  LayoutResult result;
  if (spans.empty())
    return result;
  bool allEqual = std::all_of(spans.begin(), spans.end(),
                              [&](const RankSpan &s) { return s == spans[0]; });
  if (allEqual) {
    result.layout = Layout::Colocated;
    result.worldSize = spans[0].end;
    if (spans[0].begin != 0)
      result.problem = LayoutProblem{LayoutProblem::Kind::Gap, std::nullopt, 0,
                                     0, spans[0].begin};
    return result;
  }
  result.layout = Layout::NonColocated;
  for (size_t i = 0; i < spans.size(); ++i)
    for (size_t j = i + 1; j < spans.size(); ++j)
      if (spans[i].begin < spans[j].end && spans[j].begin < spans[i].end) {
        result.problem = LayoutProblem{LayoutProblem::Kind::Overlap, i, j};
        return result;
      }
  std::vector<size_t> byStart(spans.size());
  for (size_t i = 0; i < spans.size(); ++i)
    byStart[i] = i;
  std::sort(byStart.begin(), byStart.end(), [&](size_t a, size_t b) {
    return spans[a].begin < spans[b].begin;
  });
  int64_t covered = 0;
  std::optional<size_t> previous;
  for (size_t index : byStart) {
    if (spans[index].begin != covered) {
      result.problem = LayoutProblem{LayoutProblem::Kind::Gap, previous, index,
                                     covered, spans[index].begin};
      return result;
    }
    covered = spans[index].end;
    previous = index;
  }
  result.worldSize = covered;
  return result;
}

std::pair<int64_t, int64_t>
Grid::groupKey(int64_t rank, std::initializer_list<Dim> dims) const {
  Coords coords = coordsOf(rank);
  int64_t members = 1;
  for (Dim dim : dims) {
    coords[dim] = 0;
    members *= size(dim);
  }
  return {rankOf(coords), members};
}

} // namespace mimo
