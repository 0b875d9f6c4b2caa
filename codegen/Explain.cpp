//===- Explain.cpp - What each rank does, from the compiled IR ------------===//

#include "codegen/Explain.h"

#include "codegen/JsonStream.h"

#include "runtime/config/Flops.h"
#include "runtime/config/Grid.h"
#include "runtime/config/Parameters.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/plan/Sharding.h"
#include "runtime/schedule/Formulas.h"

#include <algorithm>
#include <sstream>

namespace mimo {

using json = nlohmann::ordered_json;

namespace {

/// A module whose ranks each do this many times the work of another
/// module's ranks sets the step's pace while the other waits.
constexpr double kImbalanceRatio = 4.0;
/// The pipeline bubble above which explain suggests more microbatches.
constexpr double kBubbleShare = 0.25;

/// docs/model.md Mixture of experts: a sparse module's experts, its sparse
/// layers, the parameters one token meets (the router, top_k experts and
/// the shared expert of each sparse layer, every other parameter) and its
/// expert parallelism (ep and etp) and the bytes each rank sends per step in
/// its exchanges (`exchangeBytes`, a balanced router's); null for a dense
/// module.
json moeJson(const ModuleConfig &m, const ModelConfig &config,
             double exchangeBytes) {
  if (!m.hasMoe())
    return nullptr;
  const MoeConfig &e = m.moe;
  int64_t total = 0, experts = 0;
  for (const ParamSpec &spec : modelParameters(config))
    if (spec.module == m.name) {
      total += spec.size();
      if (spec.expert)
        experts += spec.size();
    }
  const int64_t active = total - experts + experts / e.experts * e.topK;
  return json{{"experts", e.experts},
              {"top_k", e.topK},
              {"sparse_layers", e.sparseLayers(m.layers())},
              {"shared_expert", e.sharedFfn > 0},
              {"params", total},
              {"active_params", active},
              {"ep", m.parallel.ep},
              {"etp", m.parallel.expertTp()},
              {"exchange_bytes_per_step", exchangeBytes}};
}

std::string percent(double share) {
  return std::to_string(static_cast<int>(share * 100 + 0.5)) + "%";
}

std::string shortNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2g", value);
  return text;
}

std::string ratioText(double ratio) {
  char text[32];
  std::snprintf(text, sizeof(text), ratio >= 10 ? "%.0f" : "%.1f", ratio);
  return text;
}

/// Each module's grid in model order.
const Grid &gridOf(const Topology &t, const std::string &name) {
  for (const ModuleTopology &m : t.modules)
    if (m.name == name)
      return m.grid;
  return t.modules.front().grid;
}

} // namespace

std::vector<std::string> layoutWarnings(const Plan &plan) {
  const Topology &t = plan.topology;
  std::vector<std::string> warnings;
  if (t.layout == Layout::NonColocated && plan.config.modules.size() > 1) {
    // Modules on separate ranks run side by side: the busiest per rank sets
    // the pace.
    std::vector<double> flops = moduleFlopsPerStep(plan.config);
    size_t busiest = 0, idlest = 0;
    std::vector<double> perRank;
    for (size_t m = 0; m < flops.size(); ++m) {
      const Grid &g = gridOf(t, plan.config.modules[m].name);
      perRank.push_back(flops[m] / static_cast<double>(g.size()));
      if (perRank[m] > perRank[busiest])
        busiest = m;
      if (perRank[m] < perRank[idlest])
        idlest = m;
    }
    double high = perRank[busiest], low = perRank[idlest];
    const std::string &heavy = plan.config.modules[busiest].name;
    const std::string &light = plan.config.modules[idlest].name;
    if (low > 0 && high >= kImbalanceRatio * low)
      warnings.push_back("imbalance: each '" + heavy + "' rank does " +
                         ratioText(high / low) + "x the work of each '" +
                         light + "' rank (" + shortNumber(high) + " vs " +
                         shortNumber(low) + " FLOPs per step); '" + light +
                         "' will wait: move ranks to '" + heavy + "'");
  }
  const int64_t chunks = t.modules[t.languageIndex()].virtualStages;
  const PipelineSchedule &schedule = *t.schedule;
  double bubble = schedule.bubble(t.totalStages, t.microbatches, chunks);
  const int64_t groups = schedule.microbatchMultiple(
      t.modules[t.languageIndex()].grid.size(Dim::PP));
  const int64_t needed =
      schedule.microbatchesForBubble(t.totalStages, kBubbleShare, chunks);
  const int64_t enough = (needed + groups - 1) / groups * groups;
  if (bubble > kBubbleShare)
    warnings.push_back(
        "pipeline bubble " + percent(bubble) + " (" +
        std::to_string(t.totalStages) + " stages, " +
        std::to_string(t.microbatches) + " microbatches" +
        schedule.idleText(t.totalStages, t.microbatches, chunks) +
        "); num_microbatches >= " + std::to_string(enough) + " brings it to " +
        percent(kBubbleShare) + " or below");
  return warnings;
}

std::string layoutSummary(const Plan &plan) {
  const Topology &t = plan.topology;
  std::string text = "'" + plan.config.name +
                     "': " + std::to_string(t.worldSize) + " ranks, " +
                     layoutName(t.layout) + ":";
  for (const ModuleConfig &config : plan.config.modules) {
    const Grid &g = gridOf(t, config.name);
    std::string grid;
    for (Dim dim : {Dim::TP, Dim::CP, Dim::PP, Dim::DP})
      if (g.size(dim) > 1)
        grid += (grid.empty() ? "" : " ") + std::string(dimName(dim)) +
                std::to_string(g.size(dim));
    text += " " + config.name + " " + spanText(g.rankOffset(), g.size()) +
            " (" + (grid.empty() ? "1 rank" : grid) + ");";
  }
  text += " " + std::to_string(t.microbatches) + " microbatches over " +
          std::to_string(t.totalStages) +
          (t.totalStages == 1 ? " pipeline stage" : " pipeline stages");
  return text;
}

Explanation::Explanation(const Plan &plan, std::optional<int64_t> onlyRank)
    : plan_(&plan), onlyRank_(onlyRank),
      memory_(memoryPlan(plan.topology, plan.config)) {
  const Topology &t = plan.topology;
  // Bytes do not depend on the device: any profile counts them.
  const DeviceProfile profile = *builtinProfile("h100");
  costs_ = std::make_unique<CostModel>(t, plan.config, profile,
                                       defaultCluster(profile));
  json &result = summary_;
  result["world_size"] = t.worldSize;
  result["layout"] = layoutName(t.layout);
  json moduleList = json::array();
  std::vector<double> moduleFlops = moduleFlopsPerStep(plan.config);
  std::vector<ParamSpec> specs = modelParameters(plan.config);
  size_t modelIndex = 0;
  for (const ModuleConfig &config : plan.config.modules) {
    double flops = moduleFlops[modelIndex++];
    // Model order, as written in model.json.
    const ModuleTopology *module = nullptr;
    for (const ModuleTopology &m : t.modules)
      if (m.name == config.name)
        module = &m;
    const Grid &g = module->grid;
    json order = json::array();
    for (Dim dim : g.order())
      order.push_back(dimName(dim));
    int64_t trainable = 0, frozen = 0;
    for (const ParamSpec &spec : specs)
      if (spec.module == config.name)
        (config.frozen(spec.local) ? frozen : trainable) += spec.size();
    moduleList.push_back(
        json{{"name", module->name},
             {"kind", module->isLanguage ? "language" : "encoder"},
             {"rank_offset", g.rankOffset()},
             {"tp", g.size(Dim::TP)},
             {"cp", g.size(Dim::CP)},
             {"cp_comm", config.parallel.cpComm},
             {"pp", g.size(Dim::PP)},
             {"dp", g.size(Dim::DP)},
             {"order", order},
             {"flops_per_step", flops},
             {"flops_per_rank", flops / static_cast<double>(g.size())},
             {"trainable_params", trainable},
             {"frozen_params", frozen},
             {"forward_only", module->forwardOnly},
             {"lr_mult", config.lrMult},
             {"stage_layers", stageLayerCounts(config, g.size(Dim::PP))},
             {"recompute", config.recompute},
             {"recompute_layers", config.recomputeLayers < 0
                                      ? json(nullptr)
                                      : json(config.recomputeLayers)},
             // docs/model.md Distributed optimizer: the ranks sharing
             // the AdamW moments (1: whole on every rank).
             {"optimizer_shards", config.distributedOptimizer
                                      ? g.size(Dim::DP) * g.size(Dim::CP)
                                      : int64_t(1)},
             // docs/model.md LoRA: the adapters' rank, scale and targets.
             {"lora", config.lora ? json{{"r", config.lora->rank},
                                         {"alpha", config.lora->alpha},
                                         {"scale", config.lora->scale()},
                                         {"targets", config.lora->targets}}
                                  : json(nullptr)},
             // docs/model.md Mixture of experts: the sparse layers, and the
             // parameters a token meets (the active ones).
             {"moe", moeJson(config, plan.config,
                             costs_->expertExchangeBytes(static_cast<size_t>(
                                 module - t.modules.data())))}});
  }
  result["modules"] = moduleList;
  result["model_flops_per_step"] = modelFlopsPerStep(plan.config);
  result["ranks"] = nullptr;
  json bridges = json::array();
  for (const BridgeTopology &bridge : t.bridges)
    bridges.push_back(bridgeJson(t, bridge));
  result["bridges"] = bridges;
  result["shards"] = nullptr;
  result["total_stages"] = t.totalStages;
  result["microbatches"] = t.microbatches;
  result["grad_reduce_dtype"] = plan.config.train.gradReduceDtype;
  const int64_t chunks = t.modules[t.languageIndex()].virtualStages;
  result["pipeline_bubble"] =
      t.schedule->bubble(t.totalStages, t.microbatches, chunks);
  result["schedule"] = std::string(t.schedule->name());
  if (t.schedule->chunked())
    result["virtual_stages"] = chunks;
  result["warnings"] = layoutWarnings(plan);
}

std::vector<int64_t> Explanation::ranks() const {
  if (onlyRank_)
    return {*onlyRank_};
  std::vector<int64_t> all(static_cast<size_t>(plan_->topology.worldSize));
  for (size_t r = 0; r < all.size(); ++r)
    all[r] = static_cast<int64_t>(r);
  return all;
}

RankExplanation Explanation::rank(int64_t rank) const {
  const Topology &t = plan_->topology;
  size_t lm = t.languageIndex();
  RankExplanation e;
  e.rank = rank;
  bool staged = false;
  for (size_t m : t.modulesOf(rank)) {
    const Grid &grid = t.modules[m].grid;
    Coords c = grid.coordsOf(rank);
    e.roles.push_back({m, c, c.pp == 0, c.pp == grid.size(Dim::PP) - 1});
    // A colocated rank runs its encoders within its language stage.
    bool counts = t.layout == Layout::Colocated ? m == lm : !staged;
    if (const StageTopology *s = t.stageOf(m, c.pp); s && counts) {
      e.stage = s->stage;
      e.warmup = s->warmup;
      staged = true;
    }
  }
  e.program = plan_->rankProgram[rank];
  e.memory = memory_[static_cast<size_t>(rank)];
  auto found = traffic_.find(e.program);
  if (found == traffic_.end()) {
    // Every rank of a role sends alike: counted once, on this one.
    double messages = 0, collectives = 0;
    for (const Instr &in : plan_->programs[e.program].instrs) {
      const InstrInfo &info = instrInfo(in.op);
      if (info.isSend) {
        std::optional<Peers> peers = resolvePeers(t, rank, in, nullptr);
        if (peers)
          for (int64_t peer : peers->ranks)
            messages += costs_->messageBytes(rank, peer, in);
      } else if (!info.isRecv) {
        collectives += costs_->work(rank, in).bytes;
      }
    }
    found = traffic_.emplace(e.program, std::pair{messages, collectives}).first;
  }
  e.messageBytes = found->second.first;
  e.collectiveBytes = found->second.second;
  return e;
}

json Explanation::rankJson(int64_t rank) const {
  const Topology &t = plan_->topology;
  RankExplanation e = this->rank(rank);
  json roles = json::array();
  for (const RankExplanation::Role &role : e.roles)
    roles.push_back(json{{"name", t.modules[role.module].name},
                         {"tp", role.coords.tp},
                         {"cp", role.coords.cp},
                         {"dp", role.coords.dp},
                         {"pp", role.coords.pp},
                         {"first_stage", role.firstStage},
                         {"last_stage", role.lastStage}});
  const RankMemory &mem = e.memory;
  return json{
      {"rank", rank},
      {"modules", roles},
      {"stage", e.stage},
      {"warmup", e.warmup},
      {"program", plan_->programs[e.program].role},
      {"memory",
       {{"params", mem.params},
        {"trainable_params", mem.trainableParams},
        {"param_bytes", mem.paramBytes},
        {"grad_bytes", mem.gradBytes},
        {"optimizer_bytes", mem.optimizerBytes},
        {"activation_bytes", mem.activationBytes},
        {"total_bytes", mem.totalBytes}}},
      {"sent_bytes_per_step",
       {{"messages", e.messageBytes}, {"collectives", e.collectiveBytes}}}};
}

std::vector<int64_t> Explanation::shardRanks() const {
  const Topology &t = plan_->topology;
  const Grid &lmGrid = t.modules[t.languageIndex()].grid;
  std::vector<int64_t> ranks;
  for (int64_t rank = lmGrid.rankOffset(); rank < lmGrid.endRank(); ++rank)
    if ((!onlyRank_ || rank == *onlyRank_) && lmGrid.coordsOf(rank).pp == 0)
      ranks.push_back(rank);
  return ranks;
}

PositionRanges Explanation::positions(int64_t rank) const {
  const Topology &t = plan_->topology;
  Coords c = t.modules[t.languageIndex()].grid.coordsOf(rank);
  PositionRanges ranges = zigzagRanges(t.seqLength, t.shard.cp, c.cp);
  if (t.shard.sequenceParallel && t.shard.tp > 1)
    ranges = sequenceParallelSlice(ranges, t.shard.tp, c.tp);
  return ranges;
}

json Explanation::shardJson(int64_t rank) const {
  json positions = json::array();
  for (const auto &[begin, end] : this->positions(rank))
    positions.push_back({begin, end});
  return json{{"rank", rank}, {"positions", positions}};
}

json Explanation::toJson() const {
  nlohmann::ordered_json whole = summary_;
  whole["ranks"] = nlohmann::ordered_json::array();
  for (int64_t rank : ranks())
    whole["ranks"].push_back(rankJson(rank));
  whole["shards"] = nlohmann::ordered_json::array();
  for (int64_t rank : shardRanks())
    whole["shards"].push_back(shardJson(rank));
  return whole;
}

void Explanation::writeJson(
    const std::function<void(std::string_view)> &sink) const {
  std::vector<int64_t> ranks = this->ranks(), shards = shardRanks();
  writeJsonStreamed(
      summary_,
      {{"ranks", ranks.size(), [&](size_t i) { return rankJson(ranks[i]); }},
       {"shards", shards.size(),
        [&](size_t i) { return shardJson(shards[i]); }}},
      sink);
}

nlohmann::ordered_json explainPlan(const Plan &plan,
                                   std::optional<int64_t> onlyRank) {
  return Explanation(plan, onlyRank).toJson();
}

std::string renderRankProgram(const Plan &plan, int64_t rank) {
  const Topology &t = plan.topology;
  const Program &program = plan.programs[plan.rankProgram[rank]];
  std::ostringstream os;
  os << "rank " << rank << ": program '" << program.role << "' ("
     << program.instrs.size() << " instructions, " << t.microbatches
     << " microbatches)\n";
  int width = static_cast<int>(std::to_string(program.instrs.size()).size());
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const Instr &in = program.instrs[i];
    const InstrInfo &info = instrInfo(in.op);
    std::string index = std::to_string(i);
    os << std::string(width - index.size() + 2, ' ') << index << "  "
       << (in.fused || (i > 0 && program.instrs[i - 1].fused) ? "| " : "  ")
       << describeInstr(t, in);
    std::optional<Peers> peers = resolvePeers(t, rank, in, nullptr);
    if (peers && !peers->ranks.empty()) {
      os << (info.isSend ? "  to rank" : "  from rank")
         << (peers->ranks.size() > 1 ? "s " : " ");
      for (size_t p = 0; p < peers->ranks.size(); ++p)
        os << (p ? "," : "") << peers->ranks[p];
      // Pieces from or to several peers are consecutive sample ranges:
      // show the whole range this instruction moves.
      ShapeRule rule = shapeRule(t, rank, peers->ranks[0], in);
      for (int64_t peer : peers->ranks) {
        ShapeRule piece = shapeRule(t, rank, peer, in);
        rule.sampleBegin = std::min(rule.sampleBegin, piece.sampleBegin);
        rule.sampleEnd = std::max(rule.sampleEnd, piece.sampleEnd);
      }
      os << ": " << rule.str();
      if (in.posted)
        os << " (posted)";
    } else if (peers && peers->root >= 0 &&
               (in.op == InstrOp::BridgeBroadcast ||
                in.op == InstrOp::BridgeBroadcastGrad)) {
      os << "  from leader " << peers->root;
    }
    os << "\n";
  }
  return os.str();
}

} // namespace mimo
