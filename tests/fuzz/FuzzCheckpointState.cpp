//===- FuzzCheckpointState.cpp - A checkpoint's state.json ----------------===//

#include "FuzzInput.h"

#include "runtime/checkpoint/Checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mimo;
  using namespace mimo::exec;
  std::string error;
  nlohmann::json state;
  std::optional<int64_t> step = parseCheckpointState(
      std::string_view(reinterpret_cast<const char *>(data), size),
      "state.json", state, error);
  fuzz::require(step.has_value() == error.empty(), "either a step or an error");
  fuzz::require(!step || *step >= 1, "a step is positive");
  return 0;
}
