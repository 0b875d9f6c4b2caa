//===- Explain.h - What each rank does, from a compiled plan ---*- C++ -*-===//
//
// `mimoc explain`: the layout, the modules, every rank's role, stage and
// warm-up, the bridges and the sequence shards (the keys are SPEC §3's),
// and one rank's program as readable text.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_CODEGEN_EXPLAIN_H
#define MIMO_CODEGEN_EXPLAIN_H

#include "runtime/core/PlanFile.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace mimo {

/// {world_size, layout, modules[] (with flops_per_step and flops_per_rank),
/// model_flops_per_step, ranks[] (with memory), bridges[], shards[],
/// total_stages, microbatches, pipeline_bubble, warnings[]}. With
/// `onlyRank`, ranks[] and shards hold just that rank.
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
std::string renderExplainText(const nlohmann::ordered_json &explanation,
                              const std::string &modelName);

/// The layout for Graphviz: one node per role of ranks, clustered by module,
/// with pipeline and bridge edges.
std::string renderExplainDot(const nlohmann::ordered_json &explanation,
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
