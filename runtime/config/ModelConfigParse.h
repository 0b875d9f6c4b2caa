//===- ModelConfigParse.h - model.json's parser, shared parts --*- C++ -*-===//
//
// Internal to the model.json parser: ModelConfig.cpp (the document, batch,
// data and training loop) and ModelConfigModules.cpp (modules, their
// architecture and parallel grids).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CONFIG_MODELCONFIGPARSE_H
#define MIMO_RUNTIME_CONFIG_MODELCONFIGPARSE_H

#include "runtime/config/ModelConfig.h"
#include "runtime/json/JsonValidator.h"

#include <nlohmann/json.hpp>

#include <string>

namespace mimo::detail {

/// Letters, digits, '_' or '-', starting with a letter or '_'.
bool isIdentifier(const std::string &name);

/// /modules: every module, then the checks across them (one language
/// module, unique names and special token ids below the vocabulary).
void parseModules(JsonValidator &v, const nlohmann::json &root,
                  ModelConfig &config);

/// docs/model-json.md `arch.moe` of a module (ModelConfigMoe.cpp)
/// into `module`; `at` is the arch's pointer.
void parseMoe(JsonValidator &v, const nlohmann::json &arch,
              const std::string &at, ModuleConfig &module);
/// `parallel.ep` and `parallel.etp`, after the module's arch and grid.
void parseExpertGrid(JsonValidator &v, const nlohmann::json &moduleJson,
                     ModuleConfig &module);

} // namespace mimo::detail

#endif // MIMO_RUNTIME_CONFIG_MODELCONFIGPARSE_H
