//===- Grid.h - Rank <-> coordinate arithmetic of a module grid -*- C++ -*-===//
//
// One source of truth for the grid formulas of docs/model-json.md: every module
// has a (tp, cp, dp, pp) grid over a contiguous rank span, and `order` names
// the dimensions from fastest- to slowest-varying. The passes, codegen, runtime
// and unit tests all use these functions; nothing here depends on MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CONFIG_GRID_H
#define MIMO_RUNTIME_CONFIG_GRID_H

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mimo {

/// A parallel dimension of a module grid.
enum class Dim : uint8_t { TP = 0, CP = 1, DP = 2, PP = 3 };

/// Dimension order, fastest-varying first.
using DimOrder = std::array<Dim, 4>;

/// The default order of docs/model-json.md: rank = off + tp + TP·(cp + CP·(dp +
/// DP·pp)).
inline constexpr DimOrder kDefaultOrder = {Dim::TP, Dim::CP, Dim::DP, Dim::PP};

/// "tp", "cp", "dp" or "pp".
const char *dimName(Dim dim);
std::optional<Dim> parseDimName(std::string_view name);

/// Parses a permutation of the four names. Returns std::nullopt and fills
/// `error` (when given) with the reason on failure.
std::optional<DimOrder> parseOrder(const std::vector<std::string> &names,
                                   std::string *error = nullptr);
/// Parses the dash-joined form used in the IR ("tp-cp-dp-pp").
std::optional<DimOrder> parseOrder(std::string_view dashed,
                                   std::string *error = nullptr);
/// "tp-cp-dp-pp".
std::string formatOrder(const DimOrder &order);

/// Coordinates (or sizes) along the four dimensions.
struct Coords {
  int64_t tp = 0, cp = 0, dp = 0, pp = 0;
  int64_t &operator[](Dim dim) {
    switch (dim) {
    case Dim::TP:
      return tp;
    case Dim::CP:
      return cp;
    case Dim::DP:
      return dp;
    case Dim::PP:
      break;
    }
    return pp;
  }
  int64_t operator[](Dim dim) const { return const_cast<Coords &>(*this)[dim]; }
  bool operator==(const Coords &other) const {
    return tp == other.tp && cp == other.cp && dp == other.dp && pp == other.pp;
  }
};

/// A module grid: sizes, order and the first global rank of its span.
class Grid {
public:
  /// `sizes` holds TP, CP, DP, PP (each >= 1).
  Grid(Coords sizes, DimOrder order = kDefaultOrder, int64_t rankOffset = 0);

  int64_t size(Dim dim) const { return sizes[dim]; }
  const Coords &sizesByDim() const { return sizes; }
  /// Number of ranks in the grid.
  int64_t size() const { return sizes.tp * sizes.cp * sizes.dp * sizes.pp; }
  int64_t rankOffset() const { return offset; }
  /// One past the last rank of the span.
  int64_t endRank() const { return offset + size(); }
  const DimOrder &order() const { return dimOrder; }
  bool contains(int64_t rank) const {
    return rank >= offset && rank < endRank();
  }

  /// Distance in ranks between neighbours along `dim`: the product of the
  /// sizes of the dimensions that vary faster.
  int64_t stride(Dim dim) const { return strides[dim]; }

  int64_t rankOf(const Coords &coords) const;
  /// Requires contains(rank).
  Coords coordsOf(int64_t rank) const;

  /// The data-parallel lane of `rank`.
  int64_t laneOf(int64_t rank) const { return coordsOf(rank).dp; }
  /// The group over `dims` holding `rank`, as its smallest member and size.
  std::pair<int64_t, int64_t> groupKey(int64_t rank,
                                       std::initializer_list<Dim> dims) const;
  bool isFirstStage(int64_t rank) const { return coordsOf(rank).pp == 0; }
  bool isLastStage(int64_t rank) const {
    return coordsOf(rank).pp == sizes.pp - 1;
  }

  /// Communicator groups over `dims`: the ranks that agree on every other
  /// dimension. Members are ascending and groups are ordered by their
  /// smallest rank (the canonical enumeration of docs/plan.md), so
  /// group-local rank = index in the member list.
  std::vector<std::vector<int64_t>> groups(const std::vector<Dim> &dims) const;
  /// The group over `dims` that holds `rank`, ascending.
  std::vector<int64_t> groupOf(int64_t rank,
                               const std::vector<Dim> &dims) const;

private:
  Coords sizes;
  DimOrder dimOrder;
  int64_t offset;
  Coords strides;
};

/// Rank span [begin, end) of one module.
struct RankSpan {
  int64_t begin = 0, end = 0;
  bool operator==(const RankSpan &other) const {
    return begin == other.begin && end == other.end;
  }
};

enum class Layout { Colocated, NonColocated };
const char *layoutName(Layout layout); // "colocated" / "non_colocated"

/// Why a set of module spans does not tile [0, world).
struct LayoutProblem {
  enum class Kind {
    /// spans[first] and spans[second] share some ranks but are not equal
    /// (or are equal while others are disjoint).
    Overlap,
    /// No module holds ranks [gapBegin, gapEnd); `first` is the module that
    /// ends at gapBegin (or none when the gap starts at rank 0), `second` the
    /// module that starts at gapEnd.
    Gap,
  } kind;
  std::optional<size_t> first;
  size_t second = 0;
  int64_t gapBegin = 0, gapEnd = 0;
};

struct LayoutResult {
  Layout layout = Layout::Colocated;
  int64_t worldSize = 0;
  std::optional<LayoutProblem> problem;
};

/// docs/model-json.md: all spans equal -> colocated; pairwise disjoint and
/// together [0, world) -> non-colocated; anything else is a problem naming two
/// spans.
LayoutResult classifyLayout(const std::vector<RankSpan> &spans);

} // namespace mimo

#endif // MIMO_RUNTIME_CONFIG_GRID_H
