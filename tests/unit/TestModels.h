//===- TestModels.h - Example models for the unit tests --------*- C++ -*-===//

#ifndef MIMO_TESTS_UNIT_TESTMODELS_H
#define MIMO_TESTS_UNIT_TESTMODELS_H

#include "runtime/config/ModelConfig.h"
#include "runtime/plan/PlanFile.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mimo::test {

/// The text of examples/NAME.
inline std::string readExample(const std::string &name) {
  std::ifstream in(std::string(MIMO_EXAMPLES_DIR) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// examples/vlm-fan-in.json: encoder DP4 (ranks 0-3) -> language TP2·PP2
/// (ranks 4-7), SP on; micro_batch_size 8, seq_length 128.
inline nlohmann::json baseModel() {
  return nlohmann::json::parse(readExample("vlm-fan-in.json"));
}

/// The config of a parse that must succeed. Helpers never dereference
/// after a non-fatal check: a failure throws, which GoogleTest reports as
/// the test failing (with the first diagnostic) instead of crashing.
inline ModelConfig requireConfig(const ParseResult &parsed) {
  if (!parsed.config)
    throw std::runtime_error("the model does not parse: " +
                             (parsed.diagnostics.empty()
                                  ? std::string()
                                  : parsed.diagnostics[0].pointer + ": " +
                                        parsed.diagnostics[0].message));
  return *parsed.config;
}

/// The plan of a config that must plan (throws otherwise, as above).
inline Plan requirePlan(const ModelConfig &config) {
  std::string error;
  std::optional<Plan> plan = buildPlan(config, &error);
  if (!plan)
    throw std::runtime_error("the model does not plan: " + error);
  return *plan;
}

} // namespace mimo::test

#endif // MIMO_TESTS_UNIT_TESTMODELS_H
