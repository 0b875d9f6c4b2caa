//===- SimulateReport.cpp - mimoc simulate's inputs and report ------------===//

#include "codegen/SimulateReport.h"

#include "codegen/Explain.h"
#include "runtime/config/Flops.h"
#include "runtime/json/Diagnostic.h"
#include "runtime/json/JsonReader.h"
#include "runtime/json/JsonValidator.h"
#include "runtime/support/InputFile.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace mimo {

namespace {

/// Reads and parses a JSON file, or fails with "FILE: error: ...".
std::optional<nlohmann::json> readJsonFile(const std::string &path,
                                           std::string *error) {
  std::optional<std::string> text =
      readInputFile(path, kMaxSmallJsonBytes, "the file", *error);
  if (!text)
    return std::nullopt;
  Diagnostic syntax;
  std::optional<nlohmann::json> doc = parseJsonText(*text, syntax);
  if (!doc)
    *error = formatDiagnostic(path, syntax);
  return doc;
}

std::string joinDiagnostics(const std::string &path,
                            const std::vector<Diagnostic> &diagnostics) {
  std::string text;
  for (const Diagnostic &d : diagnostics)
    text += (text.empty() ? "" : "\n") + formatDiagnostic(path, d);
  return text;
}

std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f ms", seconds * 1e3);
  return text;
}

std::string percent(double share) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f%%", share * 100);
  return text;
}

} // namespace

std::optional<DeviceProfile> loadProfile(const std::string &nameOrPath,
                                         std::string *error) {
  if (auto builtin = builtinProfile(nameOrPath))
    return builtin;
  std::error_code missing;
  if (!std::filesystem::exists(nameOrPath, missing)) {
    *error = nameOrPath +
             ": error: no such profile: give a file from "
             "mimo-run --calibrate -o FILE, or one of the "
             "built-in estimates: " +
             joinNames(builtinProfileNames());
    return std::nullopt;
  }
  std::optional<nlohmann::json> doc = readJsonFile(nameOrPath, error);
  if (!doc)
    return std::nullopt;
  std::vector<Diagnostic> diagnostics;
  std::optional<DeviceProfile> profile = parseProfile(*doc, diagnostics);
  if (!profile)
    *error = joinDiagnostics(nameOrPath, diagnostics);
  return profile;
}

std::optional<ClusterConfig> loadCluster(const std::string &path,
                                         const DeviceProfile &profile,
                                         std::string *error) {
  if (path.empty())
    return defaultCluster(profile);
  std::optional<nlohmann::json> doc = readJsonFile(path, error);
  if (!doc)
    return std::nullopt;
  std::vector<Diagnostic> diagnostics;
  std::optional<ClusterConfig> cluster = parseCluster(*doc, diagnostics);
  if (!cluster)
    *error = joinDiagnostics(path, diagnostics);
  return cluster;
}

double predictedMfu(const ModelConfig &config, int64_t worldSize,
                    double stepSeconds, const DeviceProfile &profile) {
  double denominator =
      stepSeconds * static_cast<double>(worldSize) * profile.peakTflops * 1e12;
  return denominator > 0 ? modelFlopsPerStep(config) / denominator : 0;
}

nlohmann::ordered_json simulationJson(const Plan &plan, const Simulation &sim,
                                      const CostModel &costs) {
  const Topology &t = plan.topology;
  const DeviceProfile &profile = costs.deviceProfile();
  nlohmann::ordered_json report;
  report["model"] = plan.config.name;
  report["profile"] = {{"device", profile.device},
                       {"measured", profile.measured},
                       {"source", profile.source}};
  report["cluster"] = {
      {"name", costs.clusterConfig().name},
      {"devices_per_node", costs.clusterConfig().devicesPerNode},
      {"measured", costs.clusterConfig().measured}};
  report["world_size"] = t.worldSize;
  report["microbatches"] = t.microbatches;
  // A TP group across nodes: its per-layer collectives take the
  // links between nodes (Megatron keeps TP within a node).
  const ClusterConfig &cluster = costs.clusterConfig();
  nlohmann::ordered_json warnings = nlohmann::ordered_json::array();
  const int64_t devices = cluster.devices(t.worldSize);
  auto nodeOf = [&](int64_t rank) {
    return rank % devices / std::max<int64_t>(1, cluster.devicesPerNode);
  };
  for (const ModuleTopology &m : t.modules)
    for (Dim dim : {Dim::TP}) {
      const int64_t size = m.grid.size(dim);
      if (size <= 1)
        continue;
      std::vector<int64_t> nodes;
      for (const std::vector<int64_t> &group : m.grid.groups({dim})) {
        nodes.clear();
        for (int64_t r : group)
          if (std::find(nodes.begin(), nodes.end(), nodeOf(r)) == nodes.end())
            nodes.push_back(nodeOf(r));
        if (nodes.size() > 1)
          break;
      }
      if (nodes.size() > 1)
        warnings.push_back(
            "module '" + m.name + "': its " + (dim == Dim::TP ? "tp" : "cp") +
            " groups of " + std::to_string(size) + " ranks span " +
            std::to_string(nodes.size()) + " nodes of " +
            std::to_string(cluster.devicesPerNode) +
            " devices: every layer's collectives cross the links between "
            "nodes; keep " +
            (dim == Dim::TP ? "tp" : "cp") + " within a node (<= " +
            std::to_string(cluster.devicesPerNode) + ")");
    }
  if (!warnings.empty())
    report["warnings"] = warnings;
  if (!sim.problem.empty()) {
    report["problem"] = sim.problem;
    return report;
  }
  report["step_seconds"] = sim.stepSeconds;
  report["idle_share"] = sim.idleShare();
  report["model_flops_per_step"] = modelFlopsPerStep(plan.config);
  report["mfu"] =
      predictedMfu(plan.config, t.worldSize, sim.stepSeconds, profile);
  // Roles: ranks with one program, with their mean busy fraction.
  nlohmann::ordered_json roles = nlohmann::ordered_json::array();
  for (size_t p = 0; p < plan.programs.size(); ++p) {
    std::vector<int64_t> members;
    double busy = 0, finish = 0;
    for (int64_t r = 0; r < t.worldSize; ++r)
      if (plan.rankProgram[r] == static_cast<int32_t>(p)) {
        members.push_back(r);
        busy += sim.busySeconds[r];
        finish = std::max(finish, sim.finishSeconds[r]);
      }
    if (members.empty())
      continue;
    double n = static_cast<double>(members.size());
    roles.push_back({{"role", plan.programs[p].role},
                     {"ranks", rangeList(members, 40)},
                     {"busy_fraction", busy / n / sim.stepSeconds},
                     {"finish_seconds", finish}});
  }
  report["roles"] = roles;
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (int64_t r = 0; r < t.worldSize; ++r)
    ranks.push_back({{"rank", r},
                     {"busy_seconds", sim.busySeconds[r]},
                     {"busy_fraction", sim.busySeconds[r] / sim.stepSeconds},
                     {"finish_seconds", sim.finishSeconds[r]}});
  report["ranks"] = ranks;
  // The critical path in runs of one rank, and its time by kind.
  nlohmann::ordered_json path = nlohmann::ordered_json::array();
  std::map<std::string, double> byKind;
  auto instrAt = [&](size_t entry) -> const Instr & {
    const int64_t rank = sim.rankOf(entry);
    return plan.programs[static_cast<size_t>(plan.rankProgram[rank])]
        .instrs[static_cast<size_t>(sim.instrOf(entry))];
  };
  for (size_t k = 0; k < sim.criticalPath.size();) {
    const size_t first = sim.criticalPath[k];
    const int64_t rank = sim.rankOf(first);
    size_t j = k;
    while (j + 1 < sim.criticalPath.size() &&
           sim.rankOf(sim.criticalPath[j + 1]) == rank)
      ++j;
    const size_t last = sim.criticalPath[j];
    path.push_back({{"rank", rank},
                    {"first", describeInstr(t, instrAt(first))},
                    {"last", describeInstr(t, instrAt(last))},
                    {"instructions", j - k + 1},
                    {"start_seconds", sim.instrs[first].ready},
                    {"end_seconds", sim.instrs[last].end}});
    for (size_t i = k; i <= j; ++i) {
      const SimulatedInstr &s = sim.instrs[sim.criticalPath[i]];
      byKind[instrInfo(instrAt(sim.criticalPath[i]).op).name] +=
          s.end - s.ready;
    }
    k = j + 1;
  }
  report["critical_path"] = path;
  nlohmann::ordered_json kinds = nlohmann::ordered_json::object();
  std::vector<std::pair<std::string, double>> sorted(byKind.begin(),
                                                     byKind.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto &a, const auto &b) { return a.second > b.second; });
  for (const auto &[kind, seconds] : sorted)
    kinds[kind] = seconds;
  report["critical_path_seconds_by_kind"] = kinds;
  return report;
}

std::string renderSimulationText(const nlohmann::ordered_json &r) {
  std::ostringstream os;
  const auto &profile = r["profile"];
  os << "model " << r["model"].get<std::string>() << ": "
     << r["world_size"].get<int64_t>() << " ranks, "
     << r["microbatches"].get<int64_t>() << " microbatches\n";
  os << "device: " << profile["device"].get<std::string>()
     << (profile["measured"].get<bool>() ? " (measured)" : "") << "\n";
  if (!profile["measured"].get<bool>())
    os << "  note: this profile is an estimate ("
       << profile["source"].get<std::string>() << ")\n";
  os << "cluster: " << r["cluster"]["name"].get<std::string>() << "\n";
  if (r.contains("warnings"))
    for (const auto &w : r["warnings"])
      os << "warning: " << w.get<std::string>() << "\n";
  if (r.contains("problem")) {
    os << "error: " << r["problem"].get<std::string>() << "\n";
    return os.str();
  }
  double step = r["step_seconds"].get<double>();
  os << "\npredicted step:  " << milliseconds(step) << "\n";
  os << "idle (bubble):   " << percent(r["idle_share"].get<double>())
     << " of rank time waiting or done early\n";
  os << "predicted MFU:   " << percent(r["mfu"].get<double>()) << "\n";
  os << "\nbusy by role:\n";
  size_t width = 4, ranksWidth = 1;
  for (const auto &role : r["roles"]) {
    width = std::max(width, role["role"].get<std::string>().size());
    ranksWidth = std::max(ranksWidth, role["ranks"].get<std::string>().size());
  }
  for (const auto &role : r["roles"]) {
    std::string name = role["role"].get<std::string>();
    std::string ranks = role["ranks"].get<std::string>();
    os << "  " << name << std::string(width - name.size() + 2, ' ') << "ranks "
       << ranks << std::string(ranksWidth - ranks.size(), ' ') << "  busy "
       << percent(role["busy_fraction"].get<double>()) << "  done at "
       << milliseconds(role["finish_seconds"].get<double>()) << "\n";
  }
  os << "\ncritical path (" << milliseconds(step) << "):\n";
  const auto &path = r["critical_path"];
  auto line = [&](const nlohmann::ordered_json &seg) {
    os << "  rank " << seg["rank"].get<int64_t>() << "  "
       << milliseconds(seg["start_seconds"].get<double>()) << " -> "
       << milliseconds(seg["end_seconds"].get<double>()) << "  "
       << seg["first"].get<std::string>();
    if (seg["instructions"].get<int64_t>() > 1)
      os << " ... " << seg["last"].get<std::string>() << " ("
         << seg["instructions"].get<int64_t>() << " instructions)";
    os << "\n";
  };
  for (size_t i = 0; i < path.size(); ++i) {
    if (path.size() > 14 && i == 12) {
      os << "  ... " << path.size() - 13 << " more runs ...\n";
      i = path.size() - 2;
      continue;
    }
    line(path[i]);
  }
  os << "  time by kind:";
  for (const auto &[kind, seconds] : r["critical_path_seconds_by_kind"].items())
    os << " " << kind << " " << percent(seconds.get<double>() / step);
  os << "\n";
  return os.str();
}

} // namespace mimo
