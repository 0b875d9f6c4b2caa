//===- BuildTopology.h - The one topology builder ---------------*- C++ -*-===//
//
// docs/plan.md "One topology": the compiled topology (modules, grids,
// layout, bridges, stages, sharding) is one function of a few facts of the
// model: each module's name, grid and sizes, and the batch. model.json
// gives them (topologySource), and so does mimo IR (passes/TopologyFromIR.h);
// both paths then call buildTopology, so what mimoc compiles, what tune and
// the plan loader rebuild and what the runtime runs cannot drift apart.
// MLIR-free.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_PLAN_BUILDTOPOLOGY_H
#define MIMO_RUNTIME_PLAN_BUILDTOPOLOGY_H

#include "runtime/config/ModelConfig.h"
#include "runtime/plan/Plan.h"

#include <optional>
#include <string>
#include <vector>

namespace mimo {

/// What a topology is a function of.
struct TopologySource {
  struct Module {
    std::string name;
    bool isLanguage = false;
    Grid grid{Coords{1, 1, 1, 1}};
    int64_t hidden = 0;
    /// Encoders only.
    int64_t specialTokenId = -1;
    /// parallel.virtual_stages (the interleaved schedule's chunks).
    int64_t virtualStages = 1;
    /// parallel.ep (expert parallelism; plan/Plan.h expertGroups), and
    /// whether the module has sparse layers (arch.moe).
    int64_t ep = 1;
    bool sparse = false;
    /// parallel.etp (0: the grid's tp).
    int64_t etp = 0;
    /// config/Parameters.h runsForwardOnly.
    bool forwardOnly = false;
    /// The language model's arch.tie_embeddings.
    bool tieEmbeddings = false;
    /// The language model's parallel.sequence_parallel.
    bool sequenceParallel = false;
  };
  /// The encoders in model order, then the language module.
  std::vector<Module> modules;
  int64_t microbatches = 1, microBatchSize = 1, seqLength = 1;
  /// batch.schedule; never null.
  const PipelineSchedule *schedule = &defaultSchedule();
  bool packing = false;
};

/// The facts of `config` a topology is a function of.
TopologySource topologySource(const ModelConfig &config);

/// How much of the topology to build: what the passes before the bridges
/// need, then the bridges, then the stages (the whole topology).
enum class TopologyParts : unsigned {
  Grids = 0,   // modules, layout, batch sizes, schedule, sharding
  Bridges = 1, // + bridges
  Stages = 2,  // + stages and total_stages
};

/// The one topology builder. Fails, filling `error`, when the module spans
/// do not tile the world or a bridge's lanes do not divide (the compiler
/// reports both with locations first).
std::optional<Topology> buildTopology(const TopologySource &source,
                                      TopologyParts parts, std::string *error);

/// Where two topologies first differ ("modules/1/virtual_stages: expected
/// 2, found 1"), or std::nullopt when they are equal in every field.
std::optional<std::string> topologyDifference(const Topology &expected,
                                              const Topology &found);

} // namespace mimo

#endif // MIMO_RUNTIME_PLAN_BUILDTOPOLOGY_H
