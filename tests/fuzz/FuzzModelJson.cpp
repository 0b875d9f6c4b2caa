//===- FuzzModelJson.cpp - model.json reader, and what it feeds -----------===//
//
// Any bytes: parseModelConfig returns a config or located diagnostics. A
// config that is accepted must plan: its topology, memory estimate and plan
// file build, and the plan file loads back (small worlds only, to keep each
// execution fast).

#include "FuzzInput.h"

#include "runtime/config/ModelConfig.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/plan/PlanFile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mimo;
  std::string_view text(reinterpret_cast<const char *>(data), size);
  ParseResult parsed = parseModelConfig(text, "fuzz.json");
  fuzz::require(parsed.config.has_value() != !parsed.diagnostics.empty(),
                "a model is either accepted or has diagnostics");
  for (const Diagnostic &d : parsed.diagnostics)
    fuzz::require(!d.message.empty() && d.message.size() < 4096,
                  "every diagnostic has a bounded message");
  if (!parsed.config)
    return 0;
  const ModelConfig &config = *parsed.config;
  int64_t world = 0;
  for (const ModuleConfig &m : config.modules)
    world = std::max(world,
                     m.parallel.rankOffset + m.parallel.tp * m.parallel.cp *
                                                 m.parallel.pp * m.parallel.dp);
  if (world > 64 || config.batch.numMicrobatches > 32)
    return 0;
  std::string why;
  std::optional<Plan> plan = buildPlan(config, &why);
  if (!plan)
    return 0;
  (void)memoryPlan(plan->topology, config);
  PlanLoadResult loaded = loadPlan(planToJson(*plan).dump(), "fuzz.plan.json");
  fuzz::require(loaded.plan.has_value(), "a plan mimo writes loads back");
  return 0;
}
