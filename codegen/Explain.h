//===- Explain.h - What each rank does, from a compiled plan ---*- C++ -*-===//
//
// `mimoc explain`: the layout, the modules, every rank's role, stage and
// warm-up, the bridges and the sequence shards (the keys are README.md's),
// and one rank's program as readable text.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_CODEGEN_EXPLAIN_H
#define MIMO_CODEGEN_EXPLAIN_H

#include "runtime/cost/CostModel.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/plan/Sharding.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mimo {

/// What `mimoc explain` says of one rank: each module it runs at its grid
/// coordinates, its 1F1B stage and warm-up, its program and memory.
struct RankExplanation {
  struct Role {
    size_t module = 0; // index into the topology's modules
    Coords coords;
    bool firstStage = false, lastStage = false;
  };
  int64_t rank = 0;
  std::vector<Role> roles;
  int64_t stage = 0, warmup = 0;
  int32_t program = 0;
  RankMemory memory;
  /// Bytes the rank sends in one step: its point-to-point messages
  /// (pipeline, bridges) and its share of the collectives (TP, CP, the
  /// gradient reduction, the bridges' broadcasts), as the cost model
  /// counts them (mimo's exchanges).
  double messageBytes = 0, collectiveBytes = 0;
};

/// explain's facts of a plan. The per-rank parts (ranks[], shards[]) are
/// made when asked for, one rank at a time, so that 2^20 ranks never hold
/// a JSON object each; the rest is a small JSON document.
class Explanation {
public:
  /// With `onlyRank`, ranks[] and shards[] hold just that rank.
  explicit Explanation(const Plan &plan, std::optional<int64_t> onlyRank = {});

  const Plan &plan() const { return *plan_; }
  /// The ranks explained, in order: every rank, or the one asked for.
  std::vector<int64_t> ranks() const;
  RankExplanation rank(int64_t rank) const;
  /// The language first-stage ranks explained, whose sequence positions
  /// shards[] lists.
  std::vector<int64_t> shardRanks() const;
  /// The sequence positions `rank` holds after CP zigzag and SP scatter.
  PositionRanges positions(int64_t rank) const;

  /// {world_size, layout, modules[] (with flops_per_step and
  /// flops_per_rank), model_flops_per_step, ranks, bridges[], shards,
  /// total_stages, microbatches, pipeline_bubble, warnings[]}, with
  /// ranks and shards null: their items come from rankJson and shardJson.
  const nlohmann::ordered_json &summary() const { return summary_; }
  nlohmann::ordered_json rankJson(int64_t rank) const;
  nlohmann::ordered_json shardJson(int64_t rank) const;
  /// The whole document (for one rank or a small plan).
  nlohmann::ordered_json toJson() const;
  /// The whole document as toJson().dump(2) writes it, without holding it.
  void writeJson(const std::function<void(std::string_view)> &sink) const;

private:
  const Plan *plan_;
  std::optional<int64_t> onlyRank_;
  std::vector<RankMemory> memory_;
  nlohmann::ordered_json summary_;
  /// The bytes a role sends a step, per program (its ranks send alike).
  std::unique_ptr<CostModel> costs_;
  mutable std::map<int32_t, std::pair<double, double>> traffic_;
};

/// The whole explanation as JSON: Explanation(plan, onlyRank).toJson().
nlohmann::ordered_json explainPlan(const Plan &plan,
                                   std::optional<int64_t> onlyRank = {});

/// Problems of the layout a user should hear about: a module whose ranks
/// each do several times the work of another's (non-colocated modules run
/// side by side), a 1F1B bubble above 25%.
std::vector<std::string> layoutWarnings(const Plan &plan);

/// One line: the model, its ranks and layout, each module's ranks and grid,
/// microbatches and stages (what `mimoc compile` reports).
std::string layoutSummary(const Plan &plan);

/// The same facts as aligned tables for a terminal.
std::string renderExplainText(const Explanation &explanation,
                              const std::string &modelName);

/// The layout for Graphviz: one node per role of ranks, clustered by module,
/// with pipeline and bridge edges.
std::string renderExplainDot(const Explanation &explanation,
                             const std::string &modelName);

/// Ranks [offset, offset + size) as "4-7", or "4" for one rank.
std::string spanText(int64_t offset, int64_t size);

/// Sorted distinct values as runs, "0-6, 8-14, 16": when longer than
/// `maxChars`, the first two runs, "...", the last and how many there are.
std::string rangeList(std::vector<int64_t> values, size_t maxChars);

/// One rank's instruction stream with its peers resolved.
std::string renderRankProgram(const Plan &plan, int64_t rank);

} // namespace mimo

#endif // MIMO_CODEGEN_EXPLAIN_H
