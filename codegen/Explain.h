//===- Explain.h - What each rank does, from the compiled IR ---*- C++ -*-===//
//
// `mimoc explain`: the layout, the modules and every rank's role, read from
// the IR after the pipeline (the keys are SPEC §3's).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_CODEGEN_EXPLAIN_H
#define MIMO_CODEGEN_EXPLAIN_H

#include "ir/MimoOps.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace mimo {

/// {world_size, layout, modules[], ranks[]} of a model after
/// mimo-assign-grids. With `onlyRank`, ranks[] holds just that rank.
nlohmann::ordered_json explainModel(ir::ModelOp model,
                                    std::optional<int64_t> onlyRank = {});

/// The same facts as aligned tables for a terminal.
std::string renderExplainText(const nlohmann::ordered_json &explanation,
                              llvm::StringRef modelName);

} // namespace mimo

#endif // MIMO_CODEGEN_EXPLAIN_H
