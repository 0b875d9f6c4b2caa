//===- ExplainRender.cpp - explain's text tables and Graphviz drawing -----===//
//
// Both read the Explanation that --json writes, so the three formats show
// the same facts. Ranks that play the same role (same modules, pipeline
// stage, warm-up, memory and program) are one row, their ranks and grid
// coordinates written as ranges; bridges are one row each, their lanes
// summarised. The output's size depends on the number of roles, not of
// ranks: `--rank R` and `--json` keep the per-rank detail.
//
//===----------------------------------------------------------------------===//

#include "codegen/Explain.h"

#include "runtime/schedule/PipelineSchedule.h"

#include "runtime/cost/MemoryPlan.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace mimo {

using json = nlohmann::ordered_json;

namespace {

/// ", zero bubble" or ", interleaved, 2 virtual stages" after the bubble;
/// nothing for the default schedule.
std::string scheduleText(const nlohmann::json &explanation) {
  const PipelineSchedule *schedule = findSchedule(
      explanation.value("schedule", std::string(defaultSchedule().name())));
  if (!schedule || schedule == &defaultSchedule())
    return "";
  std::string text = ", " + std::string(schedule->label());
  if (schedule->chunked())
    text += ", " + std::to_string(explanation.value("virtual_stages", 1)) +
            " virtual stages";
  return text;
}

/// The widest a list of ranks or coordinates is written before its middle is
/// elided ("0-6, 8-14, ..., 1016-1022 (128 blocks)").
constexpr size_t kListChars = 44;

void sortUnique(std::vector<int64_t> &values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
}

/// `items` joined by `separator`; when longer than `maxChars` (and four or
/// more), the first two, "...", the last and "(count noun)".
std::string elided(const std::vector<std::string> &items,
                   const std::string &separator, size_t maxChars, size_t count,
                   const std::string &noun) {
  std::string all;
  for (const std::string &item : items)
    all += (all.empty() ? "" : separator) + item;
  if (all.size() <= maxChars || items.size() < 4)
    return all;
  return items[0] + separator + items[1] + separator + "..." + separator +
         items.back() + " (" + std::to_string(count) + " " + noun + ")";
}

} // namespace

std::string spanText(int64_t offset, int64_t size) {
  return size == 1
             ? std::to_string(offset)
             : std::to_string(offset) + "-" + std::to_string(offset + size - 1);
}

std::string rangeList(std::vector<int64_t> values, size_t maxChars) {
  sortUnique(values);
  std::vector<std::string> runs;
  bool singles = true;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1)
      ++j;
    runs.push_back(j == i ? std::to_string(values[i])
                          : std::to_string(values[i]) + "-" +
                                std::to_string(values[j]));
    singles = singles && j == i;
    i = j + 1;
  }
  return elided(runs, ", ", maxChars, singles ? values.size() : runs.size(),
                singles ? "values" : "blocks");
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
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    os << line << "\n";
  }
  return os.str();
}

std::string number(const json &value) {
  return std::to_string(value.get<int64_t>());
}

std::string flopsText(double flops) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", flops);
  return text;
}

/// "first", "middle", "last" or "first+last".
std::string pipelinePosition(const RankExplanation::Role &role) {
  std::string stage = role.firstStage ? "first" : "";
  if (role.lastStage)
    stage += stage.empty() ? "last" : "+last";
  return stage.empty() ? "middle" : stage;
}

/// Ranks with one role: the same modules at the same pipeline position,
/// stage, warm-up, memory and program.
struct RankGroup {
  RankExplanation first; // the group's first rank
  std::vector<int64_t> ranks;
  /// Per role of `first`: the tp, cp and dp coordinates its ranks take.
  std::vector<std::array<std::vector<int64_t>, 3>> coords;
};

std::vector<RankGroup> rankGroups(const Explanation &explanation) {
  std::vector<RankGroup> groups;
  std::map<std::vector<int64_t>, size_t> byKey;
  std::vector<int64_t> key;
  for (int64_t rank : explanation.ranks()) {
    RankExplanation e = explanation.rank(rank);
    key = {e.program, e.stage, e.warmup, e.memory.totalBytes};
    for (const RankExplanation::Role &role : e.roles) {
      key.push_back(static_cast<int64_t>(role.module));
      key.push_back(role.coords.pp);
    }
    auto [it, inserted] = byKey.try_emplace(key, groups.size());
    if (inserted) {
      groups.push_back({e, {}, {}});
      groups.back().coords.resize(e.roles.size());
    }
    RankGroup &group = groups[it->second];
    group.ranks.push_back(rank);
    for (size_t r = 0; r < e.roles.size(); ++r) {
      group.coords[r][0].push_back(e.roles[r].coords.tp);
      group.coords[r][1].push_back(e.roles[r].coords.cp);
      group.coords[r][2].push_back(e.roles[r].coords.dp);
    }
    // Coordinates repeat across a group: keep them few as they come.
    if (group.ranks.size() % 4096 == 0)
      for (auto &role : group.coords)
        for (std::vector<int64_t> &values : role)
          sortUnique(values);
  }
  for (RankGroup &group : groups)
    for (auto &role : group.coords)
      for (std::vector<int64_t> &values : role)
        sortUnique(values);
  return groups;
}

/// "7->2048, 15->2048, ..., 1023->4095 (128 routes)", or the gather groups
/// of a colocated bridge.
std::string laneSummary(const json &bridge) {
  std::vector<std::string> lanes;
  if (!bridge["routes"].empty()) {
    for (const json &route : bridge["routes"])
      lanes.push_back(number(route["from"]) + "->" + number(route["to"]));
  } else if (bridge.contains("gather_groups")) {
    for (const json &group : bridge["gather_groups"]) {
      std::vector<int64_t> ranks;
      for (const json &rank : group)
        ranks.push_back(rank.get<int64_t>());
      lanes.push_back("{" + rangeList(ranks, kListChars / 2) + "}");
    }
  }
  return elided(lanes, " ", kListChars, lanes.size(),
                bridge["routes"].empty() ? "groups" : "routes");
}

std::vector<int64_t> intList(const json &values) {
  std::vector<int64_t> list;
  for (const json &value : values)
    list.push_back(value.get<int64_t>());
  return list;
}

} // namespace

std::string renderExplainText(const Explanation &whole,
                              const std::string &modelName) {
  const json &explanation = whole.summary();
  const Topology &t = whole.plan().topology;
  std::ostringstream os;
  os << "model " << modelName << ": " << number(explanation["world_size"])
     << " ranks, " << explanation["layout"].get<std::string>() << ", "
     << flopsText(explanation["model_flops_per_step"].get<double>())
     << " model FLOPs per step, " << number(explanation["microbatches"])
     << " microbatches over " << number(explanation["total_stages"])
     << (explanation["total_stages"].get<int64_t>() == 1 ? " pipeline stage"
                                                         : " pipeline stages")
     << " (bubble "
     << static_cast<int>(explanation["pipeline_bubble"].get<double>() * 100 +
                         0.5)
     << "%" << scheduleText(explanation) << ")\n\n";

  std::vector<std::vector<std::string>> modules = {
      {"module", "kind", "ranks", "tp", "cp", "pp", "dp", "order", "params",
       "FLOPs/rank"}};
  for (const auto &module : explanation["modules"]) {
    int64_t offset = module["rank_offset"].get<int64_t>();
    int64_t size = module["tp"].get<int64_t>() * module["cp"].get<int64_t>() *
                   module["pp"].get<int64_t>() * module["dp"].get<int64_t>();
    std::string order;
    for (const auto &dim : module["order"])
      order += (order.empty() ? "" : "-") + dim.get<std::string>();
    // Uneven stages (pipeline_layers): each stage's layers, "2 (3+1)".
    std::string pp = number(module["pp"]);
    const json &layers = module["stage_layers"];
    if (std::adjacent_find(layers.begin(), layers.end(),
                           std::not_equal_to<>()) != layers.end()) {
      std::string split;
      for (const auto &n : layers)
        split += (split.empty() ? "" : "+") + number(n);
      pp += " (" + split + ")";
    }
    modules.push_back(
        {module["name"].get<std::string>(), module["kind"].get<std::string>(),
         spanText(offset, size), number(module["tp"]), number(module["cp"]), pp,
         number(module["dp"]), order,
         flopsText(
             static_cast<double>(module["trainable_params"].get<int64_t>() +
                                 module["frozen_params"].get<int64_t>())),
         flopsText(module["flops_per_rank"].get<double>())});
  }
  os << table(modules);
  // What training changes, when a module freezes or scales anything.
  std::string recipe;
  for (const auto &module : explanation["modules"]) {
    int64_t frozen = module["frozen_params"].get<int64_t>();
    int64_t trainable = module["trainable_params"].get<int64_t>();
    double mult = module["lr_mult"].get<double>();
    const std::string recompute = module["recompute"].get<std::string>();
    const int64_t shards = module["optimizer_shards"].get<int64_t>();
    const bool moe = module.contains("moe") && module["moe"].is_object();
    if (frozen == 0 && mult == 1.0 && recompute == "none" && shards == 1 &&
        !moe)
      continue;
    recipe += "  " + module["name"].get<std::string>() + ": " +
              (trainable == 0 ? std::string(module["forward_only"].get<bool>()
                                                ? "frozen, forward only"
                                                : "frozen")
                              : std::to_string(trainable) + " of " +
                                    std::to_string(trainable + frozen) +
                                    " parameters trained");
    if (mult != 1.0) {
      char text[32];
      std::snprintf(text, sizeof(text), "%g", mult);
      recipe += std::string(", learning rate x") + text;
    }
    if (module.contains("lora") && module["lora"].is_object()) {
      const auto &lora = module["lora"];
      std::string targets;
      for (const auto &t : lora["targets"])
        targets += (targets.empty() ? "" : ", ") + t.get<std::string>();
      char text[64];
      std::snprintf(text, sizeof(text), ", LoRA r=%lld (s %g) on ",
                    static_cast<long long>(lora["r"].get<int64_t>()),
                    lora["scale"].get<double>());
      recipe += text + targets;
    }
    // docs/model.md Recomputation; the memory column counts it.
    if (recompute == "selective")
      recipe += ", recomputes its MLP activations";
    else if (recompute == "full")
      recipe += ", recomputes " +
                (module["recompute_layers"].is_null()
                     ? std::string("every layer")
                     : "the first " + number(module["recompute_layers"]) +
                           " layer(s) of each stage");
    if (shards > 1)
      recipe +=
          ", optimizer state sharded over " + std::to_string(shards) + " ranks";
    if (moe) { // docs/model.md Mixture of experts
      const auto &e = module["moe"];
      recipe +=
          ", " + number(e["sparse_layers"]) + " sparse layer(s) of " +
          number(e["experts"]) + " experts, top " + number(e["top_k"]) +
          (e["shared_expert"].get<bool>() ? " and a shared expert" : "") +
          ": " +
          flopsText(static_cast<double>(e["active_params"].get<int64_t>())) +
          " parameters active per token, " +
          (e["etp"].get<int64_t>() < module["tp"].get<int64_t>()
               ? "each expert cut over etp " + number(e["etp"]) + " of tp " +
                     number(module["tp"]) +
                     " (each TP rank runs them on its share of the rows), "
               : std::string()) +
          (e["ep"].get<int64_t>() > 1
               ? "experts split over ep " + number(e["ep"]) +
                     " (their tokens exchanged: " +
                     formatBytes(e["exchange_bytes_per_step"].get<double>()) +
                     " sent per rank and step, a balanced router's)"
               : std::string("every expert on every rank"));
    }
    recipe += "\n";
  }
  if (explanation.value("grad_reduce_dtype", "fp32") == "bf16")
    recipe += "  gradients rounded to bf16 and reduced in bf16 "
              "(train.grad_reduce_dtype)\n";
  if (!recipe.empty())
    os << "training:\n" << recipe;
  os << "\n";

  std::vector<std::vector<std::string>> ranks = {
      {"ranks", "count", "module", "tp", "cp", "dp", "pp", "pipeline",
       "1f1b stage", "warm-up", "memory", "sent/step", "program"}};
  std::string microbatches = number(explanation["microbatches"]);
  for (const RankGroup &group : rankGroups(whole)) {
    const RankExplanation &rank = group.first;
    for (size_t r = 0; r < rank.roles.size(); ++r) {
      const RankExplanation::Role &role = rank.roles[r];
      bool head = r == 0;
      ranks.push_back(
          {head ? rangeList(group.ranks, kListChars) : "",
           head ? std::to_string(group.ranks.size()) : "",
           t.modules[role.module].name,
           rangeList(group.coords[r][0], kListChars / 2),
           rangeList(group.coords[r][1], kListChars / 2),
           rangeList(group.coords[r][2], kListChars / 2),
           std::to_string(role.coords.pp), pipelinePosition(role),
           head ? std::to_string(rank.stage) : "",
           head ? std::to_string(rank.warmup) + " of " + microbatches : "",
           head ? formatBytes(static_cast<double>(rank.memory.totalBytes)) : "",
           head ? formatBytes(rank.messageBytes + rank.collectiveBytes) : "",
           head ? whole.plan().programs[rank.program].role : ""});
    }
  }
  os << table(ranks);

  if (!explanation["bridges"].empty()) {
    os << "\n";
    std::vector<std::vector<std::string>> bridges = {
        {"bridge", "mode", "ratio", "src leaders", "dst leaders", "lanes"}};
    for (const auto &b : explanation["bridges"]) {
      std::string mode = b["mode"].get<std::string>();
      if (b.contains("direction"))
        mode += " (" + b["direction"].get<std::string>() + ")";
      bridges.push_back(
          {b["src"].get<std::string>() + " -> " + b["dst"].get<std::string>(),
           mode, number(b["ratio"]),
           rangeList(intList(b["src_leaders"]), kListChars),
           rangeList(intList(b["dst_leaders"]), kListChars), laneSummary(b)});
    }
    os << table(bridges);
  }

  // Ranks holding the same sequence positions, one row each.
  std::vector<std::vector<std::string>> shards = {
      {"ranks", "sequence positions (language first stage)"}};
  std::vector<std::pair<std::string, std::vector<int64_t>>> byPositions;
  for (int64_t rank : whole.shardRanks()) {
    std::string positions;
    for (const auto &[begin, end] : whole.positions(rank))
      positions += (positions.empty() ? "" : " ") + std::string("[") +
                   std::to_string(begin) + ", " + std::to_string(end) + ")";
    if (positions.size() > 150) // many packed pieces
      positions = positions.substr(0, 146) + " ...";
    auto it = std::find_if(byPositions.begin(), byPositions.end(),
                           [&](const auto &p) { return p.first == positions; });
    if (it == byPositions.end())
      it = byPositions.insert(byPositions.end(), {positions, {}});
    it->second.push_back(rank);
  }
  for (const auto &[positions, members] : byPositions)
    shards.push_back({rangeList(members, kListChars), positions});
  if (shards.size() > 1)
    os << "\n" << table(shards);

  if (!explanation["warnings"].empty()) {
    os << "\n";
    for (const auto &warning : explanation["warnings"])
      os << "warning: " << warning.get<std::string>() << "\n";
  }
  return os.str();
}

namespace {

/// A Graphviz string: quotes and backslashes escaped, line breaks as \n.
std::string dotQuote(const std::string &text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '\n') {
      quoted += "\\n";
      continue;
    }
    if (c == '"' || c == '\\')
      quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

/// Whether two sorted coordinate lists share a value.
bool overlap(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  for (int64_t value : a)
    if (std::binary_search(b.begin(), b.end(), value))
      return true;
  return false;
}

} // namespace

std::string renderExplainDot(const Explanation &whole,
                             const std::string &modelName) {
  const json &explanation = whole.summary();
  const Topology &t = whole.plan().topology;
  std::vector<RankGroup> groups = rankGroups(whole);
  constexpr size_t kNoGroup = ~size_t(0);
  std::vector<size_t> groupOfRank(static_cast<size_t>(t.worldSize), kNoGroup);
  for (size_t g = 0; g < groups.size(); ++g)
    for (int64_t rank : groups[g].ranks)
      groupOfRank[static_cast<size_t>(rank)] = g;

  // One cluster per module (colocated modules share theirs), one node per
  // role of ranks, stacked by pipeline stage.
  std::map<std::string, std::vector<size_t>> clusters;
  std::vector<std::string> clusterOrder;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::string name;
    for (const RankExplanation::Role &role : groups[g].first.roles)
      name += (name.empty() ? "" : " + ") + t.modules[role.module].name;
    if (!clusters.count(name))
      clusterOrder.push_back(name);
    clusters[name].push_back(g);
  }

  std::ostringstream os;
  os << "digraph " << dotQuote(modelName) << " {\n"
     << "  rankdir=LR;\n"
     << "  label="
     << dotQuote(modelName + ": " + number(explanation["world_size"]) +
                 " ranks, " + explanation["layout"].get<std::string>())
     << ";\n"
     << "  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  for (size_t c = 0; c < clusterOrder.size(); ++c) {
    const std::string &name = clusterOrder[c];
    std::string gridText;
    std::set<std::string> members;
    for (const RankExplanation::Role &role :
         groups[clusters[name].front()].first.roles)
      members.insert(t.modules[role.module].name);
    for (const json &module : explanation["modules"])
      if (members.count(module["name"].get<std::string>())) {
        int64_t offset = module["rank_offset"].get<int64_t>();
        int64_t size =
            module["tp"].get<int64_t>() * module["cp"].get<int64_t>() *
            module["pp"].get<int64_t>() * module["dp"].get<int64_t>();
        gridText += (gridText.empty() ? "" : "\n") +
                    module["name"].get<std::string>() + ": ranks " +
                    spanText(offset, size) + ", tp" + number(module["tp"]) +
                    " cp" + number(module["cp"]) + " pp" +
                    number(module["pp"]) + " dp" + number(module["dp"]);
      }
    os << "  subgraph cluster_" << c << " {\n"
       << "    label=" << dotQuote(gridText) << ";\n";
    for (size_t g : clusters[name]) {
      const RankGroup &group = groups[g];
      const RankExplanation &rank = group.first;
      std::string label = std::to_string(group.ranks.size()) +
                          (group.ranks.size() == 1 ? " rank: " : " ranks: ") +
                          rangeList(group.ranks, kListChars);
      for (size_t r = 0; r < rank.roles.size(); ++r)
        label += "\n" + t.modules[rank.roles[r].module].name + " pp" +
                 std::to_string(rank.roles[r].coords.pp) + " tp " +
                 rangeList(group.coords[r][0], kListChars / 2) + " cp " +
                 rangeList(group.coords[r][1], kListChars / 2) + " dp " +
                 rangeList(group.coords[r][2], kListChars / 2);
      label += "\n" + whole.plan().programs[rank.program].role + "\n" +
               formatBytes(static_cast<double>(rank.memory.totalBytes));
      os << "    g" << g << " [label=" << dotQuote(label) << "];\n";
    }
    os << "  }\n";
  }

  // Pipeline edges: a module's stage p to p + 1, between roles whose tp, cp
  // and dp ranges overlap (each dimension alone: a drawing, not a route
  // table; `--rank R` gives a rank's exact peers).
  std::set<std::pair<size_t, size_t>> pipeline;
  for (size_t a = 0; a < groups.size(); ++a)
    for (size_t b = 0; b < groups.size(); ++b) {
      const auto &ra = groups[a].first.roles;
      const auto &rb = groups[b].first.roles;
      for (size_t x = 0; x < ra.size(); ++x)
        for (size_t y = 0; y < rb.size(); ++y) {
          bool next = ra[x].module == rb[y].module &&
                      rb[y].coords.pp == ra[x].coords.pp + 1;
          bool aligned = true;
          for (size_t d = 0; d < 3; ++d)
            aligned = aligned &&
                      overlap(groups[a].coords[x][d], groups[b].coords[y][d]);
          if (next && aligned)
            pipeline.insert({a, b});
        }
    }
  for (const auto &[a, b] : pipeline)
    os << "  g" << a << " -> g" << b << " [label=\"activations\"];\n";

  // Bridge edges between the roles their lanes join.
  for (const json &bridge : explanation["bridges"]) {
    std::set<std::pair<size_t, size_t>> edges;
    auto join = [&](const json &from, const json &to) {
      size_t a = groupOfRank[static_cast<size_t>(from.get<int64_t>())];
      size_t b = groupOfRank[static_cast<size_t>(to.get<int64_t>())];
      if (a != kNoGroup && b != kNoGroup)
        edges.insert({a, b});
    };
    for (const json &route : bridge["routes"])
      join(route["from"], route["to"]);
    // A colocated bridge gathers within its groups: an edge from each
    // member's role to the first member's (a loop when they share one).
    size_t gathers = 0;
    if (bridge.contains("gather_groups"))
      for (const json &group : bridge["gather_groups"]) {
        ++gathers;
        for (const json &member : group)
          join(member, group.front());
      }
    std::string mode = bridge["mode"].get<std::string>();
    if (bridge.contains("direction"))
      mode += " (" + bridge["direction"].get<std::string>() + ")";
    std::string label =
        mode + " x" + number(bridge["ratio"]) + ", " +
        (bridge["routes"].empty()
             ? std::to_string(gathers) + " gather groups"
             : std::to_string(bridge["routes"].size()) + " lanes");
    for (const auto &[a, b] : edges)
      os << "  g" << a << " -> g" << b << " [label=" << dotQuote(label)
         << ", style=bold, color=\"#1f77b4\"];\n";
  }
  os << "}\n";
  return os.str();
}

} // namespace mimo
