//===- Explain.cpp - What each rank does, from the compiled IR ------------===//

#include "codegen/Explain.h"

#include "runtime/core/Flops.h"
#include "runtime/core/Grid.h"
#include "runtime/core/MemoryPlan.h"
#include "runtime/core/Sharding.h"

#include <algorithm>
#include <sstream>

namespace mimo {

using json = nlohmann::ordered_json;

nlohmann::ordered_json explainPlan(const Plan &plan,
                                   std::optional<int64_t> onlyRank) {
  const Topology &t = plan.topology;
  json result;
  result["world_size"] = t.worldSize;
  result["layout"] = layoutName(t.layout);
  json moduleList = json::array();
  for (const ModuleConfig &config : plan.config.modules) {
    // Model order, as written in model.json.
    const ModuleTopology *module = nullptr;
    for (const ModuleTopology &m : t.modules)
      if (m.name == config.name)
        module = &m;
    const Grid &g = module->grid;
    json order = json::array();
    for (Dim dim : g.order())
      order.push_back(dimName(dim));
    moduleList.push_back(
        json{{"name", module->name},
             {"kind", module->isLanguage ? "language" : "encoder"},
             {"rank_offset", g.rankOffset()},
             {"tp", g.size(Dim::TP)},
             {"cp", g.size(Dim::CP)},
             {"pp", g.size(Dim::PP)},
             {"dp", g.size(Dim::DP)},
             {"order", order}});
  }
  result["modules"] = moduleList;
  size_t lm = t.languageIndex();
  result["model_flops_per_step"] = modelFlopsPerStep(plan.config);
  std::vector<RankMemory> memory = memoryPlan(t, plan.config);
  json ranks = json::array();
  for (int64_t rank = 0; rank < t.worldSize; ++rank) {
    if (onlyRank && rank != *onlyRank)
      continue;
    json roles = json::array();
    int64_t stage = 0, warmup = 0;
    bool staged = false;
    for (size_t m : t.modulesOf(rank)) {
      const Grid &grid = t.modules[m].grid;
      Coords c = grid.coordsOf(rank);
      roles.push_back(json{{"name", t.modules[m].name},
                           {"tp", c.tp},
                           {"cp", c.cp},
                           {"dp", c.dp},
                           {"pp", c.pp},
                           {"first_stage", c.pp == 0},
                           {"last_stage", c.pp == grid.size(Dim::PP) - 1}});
      // A colocated rank's stage is its language stage (SPEC §4.8).
      bool counts = t.layout == Layout::Colocated ? m == lm : !staged;
      if (const StageTopology *s = t.stageOf(m, c.pp); s && counts) {
        stage = s->stage;
        warmup = s->warmup;
        staged = true;
      }
    }
    const RankMemory &mem = memory[static_cast<size_t>(rank)];
    ranks.push_back(
        json{{"rank", rank},
             {"modules", roles},
             {"stage", stage},
             {"warmup", warmup},
             {"program", plan.programs[plan.rankProgram[rank]].role},
             {"memory",
              {{"params", mem.params},
               {"param_bytes", mem.paramBytes},
               {"grad_bytes", mem.gradBytes},
               {"optimizer_bytes", mem.optimizerBytes},
               {"activation_bytes", mem.activationBytes},
               {"total_bytes", mem.totalBytes}}}});
  }
  result["ranks"] = ranks;
  json bridges = json::array();
  for (const BridgeTopology &bridge : t.bridges)
    bridges.push_back(bridgeJson(t, bridge));
  result["bridges"] = bridges;
  // Sequence positions each language first-stage rank holds after CP
  // zigzag and SP scatter (SBHD).
  json shards = json::array();
  const Grid &lmGrid = t.modules[lm].grid;
  for (int64_t rank = lmGrid.rankOffset(); rank < lmGrid.endRank(); ++rank) {
    if (onlyRank && rank != *onlyRank)
      continue;
    Coords c = lmGrid.coordsOf(rank);
    if (c.pp != 0)
      continue;
    PositionRanges ranges = zigzagRanges(t.seqLength, t.shard.cp, c.cp);
    if (t.shard.sequenceParallel && t.shard.tp > 1)
      ranges = sequenceParallelSlice(ranges, t.shard.tp, c.tp);
    json positions = json::array();
    for (const auto &[begin, end] : ranges)
      positions.push_back({begin, end});
    shards.push_back(json{{"rank", rank}, {"positions", positions}});
  }
  result["shards"] = shards;
  result["total_stages"] = t.totalStages;
  result["microbatches"] = t.microbatches;
  return result;
}

namespace {

/// Left-aligned columns separated by two spaces.
std::string table(const std::vector<std::vector<std::string>> &rows) {
  std::vector<size_t> widths;
  for (const auto &row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (widths.size() <= i)
        widths.push_back(0);
      widths[i] = std::max(widths[i], row[i].size());
    }
  std::ostringstream os;
  for (const auto &row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size())
        line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    os << line << "\n";
  }
  return os.str();
}

} // namespace

std::string renderExplainText(const nlohmann::ordered_json &explanation,
                              const std::string &modelName) {
  std::ostringstream os;
  char flops[64];
  std::snprintf(flops, sizeof(flops), "%.3g",
                explanation["model_flops_per_step"].get<double>());
  os << "model " << modelName << ": "
     << explanation["world_size"].get<int64_t>() << " ranks, "
     << explanation["layout"].get<std::string>() << ", " << flops
     << " model FLOPs per step\n\n";
  std::vector<std::vector<std::string>> modules = {
      {"module", "kind", "ranks", "tp", "cp", "pp", "dp", "order"}};
  for (const auto &module : explanation["modules"]) {
    int64_t offset = module["rank_offset"].get<int64_t>();
    int64_t size = module["tp"].get<int64_t>() * module["cp"].get<int64_t>() *
                   module["pp"].get<int64_t>() * module["dp"].get<int64_t>();
    std::string order;
    for (const auto &dim : module["order"])
      order += (order.empty() ? "" : "-") + dim.get<std::string>();
    modules.push_back(
        {module["name"].get<std::string>(), module["kind"].get<std::string>(),
         std::to_string(offset) + "-" + std::to_string(offset + size - 1),
         std::to_string(module["tp"].get<int64_t>()),
         std::to_string(module["cp"].get<int64_t>()),
         std::to_string(module["pp"].get<int64_t>()),
         std::to_string(module["dp"].get<int64_t>()), order});
  }
  os << table(modules) << "\n";
  std::vector<std::vector<std::string>> ranks = {
      {"rank", "module", "tp", "cp", "dp", "pp", "pipeline", "1f1b stage",
       "warm-up", "memory", "program"}};
  for (const auto &rank : explanation["ranks"])
    for (const auto &role : rank["modules"]) {
      const auto &mem = rank["memory"];
      std::string memory = role == rank["modules"].front()
                               ? formatBytes(static_cast<double>(
                                     mem["total_bytes"].get<int64_t>()))
                               : "";
      std::string stage = role["first_stage"].get<bool>() ? "first" : "";
      if (role["last_stage"].get<bool>())
        stage += stage.empty() ? "last" : "+last";
      if (stage.empty())
        stage = "middle";
      ranks.push_back(
          {std::to_string(rank["rank"].get<int64_t>()),
           role["name"].get<std::string>(),
           std::to_string(role["tp"].get<int64_t>()),
           std::to_string(role["cp"].get<int64_t>()),
           std::to_string(role["dp"].get<int64_t>()),
           std::to_string(role["pp"].get<int64_t>()), stage,
           std::to_string(rank["stage"].get<int64_t>()),
           std::to_string(rank["warmup"].get<int64_t>()) + " of " +
               std::to_string(explanation["microbatches"].get<int64_t>()),
           memory, rank["program"].get<std::string>()});
    }
  os << table(ranks);
  auto list = [](const json &values) {
    std::string text;
    for (const auto &value : values)
      text += (text.empty() ? "" : " ") + value.dump();
    return text;
  };
  if (!explanation["bridges"].empty()) {
    os << "\n";
    std::vector<std::vector<std::string>> bridges = {
        {"bridge", "mode", "ratio", "src leaders", "dst leaders", "routes"}};
    for (const auto &b : explanation["bridges"]) {
      std::string routes;
      for (const auto &r : b["routes"])
        routes += (routes.empty() ? "" : " ") +
                  std::to_string(r["from"].get<int64_t>()) + "->" +
                  std::to_string(r["to"].get<int64_t>());
      std::string mode = b["mode"].get<std::string>();
      if (b.contains("direction"))
        mode += " (" + b["direction"].get<std::string>() + ")";
      bridges.push_back(
          {b["src"].get<std::string>() + " -> " + b["dst"].get<std::string>(),
           mode, std::to_string(b["ratio"].get<int64_t>()),
           list(b["src_leaders"]), list(b["dst_leaders"]),
           routes.empty() ? list(b["gather_groups"]) : routes});
    }
    os << table(bridges);
  }
  os << "\n";
  std::vector<std::vector<std::string>> shards = {
      {"rank", "sequence positions (language first stage)"}};
  for (const auto &shard : explanation["shards"]) {
    std::string positions;
    for (const auto &range : shard["positions"])
      positions += (positions.empty() ? "" : " ") + std::string("[") +
                   std::to_string(range[0].get<int64_t>()) + ", " +
                   std::to_string(range[1].get<int64_t>()) + ")";
    shards.push_back({std::to_string(shard["rank"].get<int64_t>()), positions});
  }
  os << table(shards);
  return os.str();
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
