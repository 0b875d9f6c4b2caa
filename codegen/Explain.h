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

namespace mimo {

/// {world_size, layout, modules[], ranks[], bridges[], shards}. With
/// `onlyRank`, ranks[] and shards hold just that rank.
nlohmann::ordered_json explainPlan(const Plan &plan,
                                   std::optional<int64_t> onlyRank = {});

/// The same facts as aligned tables for a terminal.
std::string renderExplainText(const nlohmann::ordered_json &explanation,
                              const std::string &modelName);

/// One rank's instruction stream with its peers resolved.
std::string renderRankProgram(const Plan &plan, int64_t rank);

} // namespace mimo

#endif // MIMO_CODEGEN_EXPLAIN_H
