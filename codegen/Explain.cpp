//===- Explain.cpp - What each rank does, from the compiled IR ------------===//

#include "codegen/Explain.h"

#include "runtime/core/Grid.h"

#include <sstream>

namespace mimo {

namespace {

struct ModuleEntry {
  std::string name;
  bool isEncoder;
  mimo::Grid grid;
};

std::vector<ModuleEntry> collectModules(ir::ModelOp model) {
  std::vector<ModuleEntry> modules;
  for (mlir::Operation &op : model.getBody().front()) {
    if (auto encoder = llvm::dyn_cast<ir::EncoderOp>(op))
      modules.push_back({encoder.getSymName().str(), true,
                         encoder.getGridOp().getGridArithmetic()});
    else if (auto language = llvm::dyn_cast<ir::LanguageOp>(op))
      modules.push_back({language.getSymName().str(), false,
                         language.getGridOp().getGridArithmetic()});
  }
  return modules;
}

} // namespace

nlohmann::ordered_json explainModel(ir::ModelOp model,
                                    std::optional<int64_t> onlyRank) {
  using json = nlohmann::ordered_json;
  std::vector<ModuleEntry> modules = collectModules(model);
  int64_t worldSize = static_cast<int64_t>(model.getWorldSize().value_or(0));
  json result;
  result["world_size"] = worldSize;
  result["layout"] = model.getLayout().value_or("").str();
  json moduleList = json::array();
  for (const ModuleEntry &module : modules) {
    const Grid &g = module.grid;
    json order = json::array();
    for (Dim dim : g.order())
      order.push_back(dimName(dim));
    moduleList.push_back(
        json{{"name", module.name},
             {"kind", module.isEncoder ? "encoder" : "language"},
             {"rank_offset", g.rankOffset()},
             {"tp", g.size(Dim::TP)},
             {"cp", g.size(Dim::CP)},
             {"pp", g.size(Dim::PP)},
             {"dp", g.size(Dim::DP)},
             {"order", order}});
  }
  result["modules"] = moduleList;
  json ranks = json::array();
  for (int64_t rank = 0; rank < worldSize; ++rank) {
    if (onlyRank && rank != *onlyRank)
      continue;
    json roles = json::array();
    for (const ModuleEntry &module : modules) {
      if (!module.grid.contains(rank))
        continue;
      Coords c = module.grid.coordsOf(rank);
      roles.push_back(
          json{{"name", module.name},
               {"tp", c.tp},
               {"cp", c.cp},
               {"dp", c.dp},
               {"pp", c.pp},
               {"first_stage", c.pp == 0},
               {"last_stage", c.pp == module.grid.size(Dim::PP) - 1}});
    }
    ranks.push_back(json{{"rank", rank}, {"modules", roles}});
  }
  result["ranks"] = ranks;
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
                              llvm::StringRef modelName) {
  std::ostringstream os;
  os << "model " << modelName.str() << ": "
     << explanation["world_size"].get<int64_t>() << " ranks, "
     << explanation["layout"].get<std::string>() << "\n\n";
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
      {"rank", "module", "tp", "cp", "dp", "pp", "stage"}};
  for (const auto &rank : explanation["ranks"])
    for (const auto &role : rank["modules"]) {
      std::string stage = role["first_stage"].get<bool>() ? "first" : "";
      if (role["last_stage"].get<bool>())
        stage += stage.empty() ? "last" : "+last";
      if (stage.empty())
        stage = "middle";
      ranks.push_back({std::to_string(rank["rank"].get<int64_t>()),
                       role["name"].get<std::string>(),
                       std::to_string(role["tp"].get<int64_t>()),
                       std::to_string(role["cp"].get<int64_t>()),
                       std::to_string(role["dp"].get<int64_t>()),
                       std::to_string(role["pp"].get<int64_t>()), stage});
    }
  os << table(ranks);
  return os.str();
}

} // namespace mimo
