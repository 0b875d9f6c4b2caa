//===- TestModels.h - Example models for the unit tests --------*- C++ -*-===//

#ifndef MIMO_TESTS_UNIT_TESTMODELS_H
#define MIMO_TESTS_UNIT_TESTMODELS_H

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
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

} // namespace mimo::test

#endif // MIMO_TESTS_UNIT_TESTMODELS_H
