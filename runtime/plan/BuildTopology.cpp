//===- BuildTopology.cpp - The one topology builder -----------------------===//

#include "runtime/plan/BuildTopology.h"

#include "runtime/config/Parameters.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/plan/Topology.h"

namespace mimo {

using nlohmann::json;
using nlohmann::ordered_json;

TopologySource topologySource(const ModelConfig &config) {
  TopologySource source;
  const size_t lm = config.languageIndex();
  // Encoders in model order, then the language module (the order of the
  // IR, and of the bridges).
  std::vector<size_t> order;
  for (size_t i = 0; i < config.modules.size(); ++i)
    if (i != lm)
      order.push_back(i);
  if (lm < config.modules.size())
    order.push_back(lm);
  for (size_t index : order) {
    const ModuleConfig &module = config.modules[index];
    TopologySource::Module m;
    m.name = module.name;
    m.isLanguage = module.kind == ModuleKind::Language;
    m.grid = module.parallel.grid();
    m.hidden = module.hiddenSize;
    m.specialTokenId = module.specialTokenId;
    m.virtualStages = module.parallel.virtualStages;
    m.ep = module.parallel.ep;
    m.sparse = module.hasMoe();
    m.etp = module.parallel.etp;
    m.forwardOnly = runsForwardOnly(config, module);
    m.tieEmbeddings = m.isLanguage && module.tieEmbeddings;
    m.sequenceParallel = module.parallel.sequenceParallel;
    source.modules.push_back(std::move(m));
  }
  source.microbatches = config.batch.numMicrobatches;
  source.microBatchSize = config.batch.microBatchSize;
  source.seqLength = config.batch.seqLength;
  source.schedule = config.batch.schedule;
  source.packing = config.batch.packing;
  return source;
}

std::optional<Topology> buildTopology(const TopologySource &source,
                                      TopologyParts parts, std::string *error) {
  auto fail = [&](std::string why) -> std::optional<Topology> {
    if (error)
      *error = std::move(why);
    return std::nullopt;
  };
  if (source.modules.empty() || !source.modules.back().isLanguage)
    return fail("the model has no language module");
  const TopologySource::Module &language = source.modules.back();
  Topology topology;
  std::vector<RankSpan> spans;
  for (const TopologySource::Module &module : source.modules) {
    // What the parser checks of a model.json, again for a topology read
    // from hand-written IR: experts to split and cut, in groups that tile.
    const Grid &g = module.grid;
    if (module.ep != 1 && (!module.sparse || module.ep < 1 ||
                           g.size(Dim::DP) * g.size(Dim::CP) % module.ep != 0))
      return fail("module '" + module.name + "': ep " +
                  std::to_string(module.ep) +
                  " needs sparse layers and must divide dp x cp " +
                  std::to_string(g.size(Dim::DP) * g.size(Dim::CP)));
    if (module.etp != 0 &&
        (!module.sparse || module.etp < 1 || g.size(Dim::TP) % module.etp != 0))
      return fail("module '" + module.name + "': etp " +
                  std::to_string(module.etp) +
                  " needs sparse layers and must divide tp " +
                  std::to_string(g.size(Dim::TP)));
    ModuleTopology m;
    m.name = module.name;
    m.isLanguage = module.isLanguage;
    m.grid = module.grid;
    m.hidden = module.hidden;
    m.outputHidden = language.hidden;
    m.specialTokenId = module.specialTokenId;
    m.virtualStages = module.virtualStages;
    m.ep = module.ep;
    m.sparse = module.sparse;
    m.etp = module.etp == module.grid.size(Dim::TP) ? 0 : module.etp;
    m.forwardOnly = module.forwardOnly;
    m.tiedAcrossStages = module.isLanguage && module.tieEmbeddings &&
                         module.grid.size(Dim::PP) > 1;
    spans.push_back({m.grid.rankOffset(), m.grid.endRank()});
    topology.modules.push_back(std::move(m));
  }
  LayoutResult layout = classifyLayout(spans);
  if (layout.problem)
    return fail("the module spans do not tile the world");
  topology.worldSize = layout.worldSize;
  topology.layout = layout.layout;
  topology.microbatches = source.microbatches;
  topology.microBatchSize = source.microBatchSize;
  topology.seqLength = source.seqLength;
  topology.schedule = source.schedule;
  topology.shard =
      makeShard(language.grid.size(Dim::CP), language.grid.size(Dim::TP),
                language.sequenceParallel, source.packing);
  if (parts < TopologyParts::Bridges)
    return topology;
  const size_t lm = topology.modules.size() - 1;
  for (size_t i = 0; i < lm; ++i) {
    std::optional<BridgeTopology> bridge = makeBridge(topology, i, lm, error);
    if (!bridge)
      return std::nullopt;
    topology.bridges.push_back(std::move(*bridge));
  }
  if (parts < TopologyParts::Stages)
    return topology;
  assignStages(topology);
  return topology;
}

namespace {

/// Every field of `t`: the plan file's sections and what they leave out.
ordered_json topologyJson(const Topology &t) {
  ordered_json doc;
  doc["world_size"] = t.worldSize;
  doc["layout"] = layoutName(t.layout);
  doc["micro_batch_size"] = t.microBatchSize;
  doc["seq_length"] = t.seqLength;
  ordered_json modules = ordered_json::array();
  for (const ModuleTopology &m : t.modules) {
    const Grid &g = m.grid;
    modules.push_back({{"name", m.name},
                       {"is_language", m.isLanguage},
                       {"tp", g.size(Dim::TP)},
                       {"cp", g.size(Dim::CP)},
                       {"pp", g.size(Dim::PP)},
                       {"dp", g.size(Dim::DP)},
                       {"rank_offset", g.rankOffset()},
                       {"order", formatOrder(g.order())},
                       {"hidden", m.hidden},
                       {"output_hidden", m.outputHidden},
                       {"special_token_id", m.specialTokenId},
                       {"virtual_stages", m.virtualStages},
                       {"forward_only", m.forwardOnly},
                       {"tied_across_stages", m.tiedAcrossStages}});
    if (m.sparse)
      modules.back()["sparse"] = true;
    if (m.ep > 1)
      modules.back()["ep"] = m.ep;
    if (m.etp > 0)
      modules.back()["etp"] = m.etp;
  }
  doc["modules"] = std::move(modules);
  ordered_json bridges = ordered_json::array();
  for (const BridgeTopology &b : t.bridges) {
    ordered_json entry = bridgeJson(t, b);
    entry["direction"] = b.direction;
    entry["gather_groups"] = b.gatherGroups;
    bridges.push_back(std::move(entry));
  }
  doc["bridges"] = std::move(bridges);
  doc["schedule_name"] = std::string(t.schedule->name());
  doc["schedule"] = scheduleJson(t);
  doc["shards"] = shardsJson(t);
  return doc;
}

} // namespace

std::optional<std::string> topologyDifference(const Topology &expected,
                                              const Topology &found) {
  if (auto d = jsonDifference(json(topologyJson(expected)),
                              json(topologyJson(found)), ""))
    return d->first + ": " + d->second;
  return std::nullopt;
}

} // namespace mimo
