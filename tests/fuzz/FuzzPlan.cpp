//===- FuzzPlan.cpp - The plan reader -------------------------------------===//
//
// Any bytes: loadPlan returns a fully validated plan (ranks, groups, peers,
// operands, the verifier's simulation) or located diagnostics.

#include "FuzzInput.h"

#include "runtime/cost/MemoryPlan.h"
#include "runtime/plan/PlanFile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mimo;
  std::string_view text(reinterpret_cast<const char *>(data), size);
  PlanLoadResult loaded = loadPlan(text, "fuzz.plan.json");
  fuzz::require(loaded.plan.has_value() != !loaded.diagnostics.empty(),
                "a plan is either loaded or has diagnostics");
  if (loaded.plan)
    (void)memoryPlan(loaded.plan->topology, loaded.plan->config);
  return 0;
}
