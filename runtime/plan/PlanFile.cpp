//===- PlanFile.cpp - The plan file: write, load, validate ----------------===//

#include "runtime/plan/PlanFile.h"

#include "runtime/plan/BuildTopology.h"

#include "runtime/config/Parameters.h"
#include "runtime/plan/ShapeRules.h"

#include "runtime/json/JsonReader.h"
#include "runtime/plan/Topology.h"

#include <algorithm>
#include <iterator>
#include <unordered_map>

namespace mimo {

using nlohmann::json;
using nlohmann::ordered_json;

inline constexpr const char *kPlanFormat = "mimo-plan";

//===----------------------------------------------------------------------===//
// Building
//===----------------------------------------------------------------------===//

std::vector<Diagnostic> modelShapeErrors(const ModelConfig &config) {
  std::vector<Diagnostic> errors;
  auto check = [&](std::string pointer, std::string problem) {
    if (!problem.empty())
      errors.push_back(
          Diagnostic::error(std::move(pointer), std::move(problem)));
  };
  for (const ModuleConfig &m : config.modules) {
    const ParallelConfig &p = m.parallel;
    bool language = m.kind == ModuleKind::Language;
    std::string module = describeModule(m.name, language);
    std::string at = m.pointer + "/parallel/";
    if (!language)
      check(at + "cp", encoderCpRule(module, p.cp));
    check(at + "tp",
          divisibleRule(module, "num_heads", m.numHeads, "tp", p.tp));
    if (m.numQueryGroups > 0)
      check(at + "tp", divisibleRule(module, "num_query_groups",
                                     m.numQueryGroups, "tp", p.tp));
    check(at + "tp", divisibleRule(module, "ffn_hidden_size", m.ffnHiddenSize,
                                   "tp", p.tp));
    if (language)
      check(at + "tp",
            divisibleRule(module, "vocab_size", m.vocabSize, "tp", p.tp));
    if (m.pipelineLayers.empty())
      check(at + "pp",
            divisibleRule(module, "num_layers", m.layers(), "pp", p.pp));
    else
      check(m.pointer + "/pipeline_layers",
            pipelineLayersRule(module, m.pipelineLayers, m.numLayers,
                               m.layers(), p.pp));
    check(at + "dp", microBatchRule(module, config.batch.microBatchSize, p.dp));
    if (!language)
      continue;
    if (!config.batch.packing)
      check("/batch/seq_length",
            sequenceShardRule(module, config.batch.seqLength, p.cp, p.tp,
                              p.sequenceParallel));
    if (config.batch.attentionMask == "dense")
      check("/batch/attention_mask", denseMaskRule(module, p.cp));
  }
  return errors;
}

std::optional<Topology> buildTopology(const ModelConfig &config,
                                      std::string *error) {
  std::vector<Diagnostic> shapes = modelShapeErrors(config);
  if (!shapes.empty()) {
    if (error)
      *error = shapes.front().pointer + ": " + shapes.front().message;
    return std::nullopt;
  }
  return buildTopology(topologySource(config), TopologyParts::Stages, error);
}

std::optional<Plan> buildPlan(const ModelConfig &config, std::string *error) {
  std::optional<Topology> topology = buildTopology(config, error);
  if (!topology)
    return std::nullopt;
  Plan plan;
  plan.config = config;
  plan.topology = std::move(*topology);
  ProgramSet set = buildPrograms(plan.topology);
  plan.programs = std::move(set.programs);
  plan.rankProgram = std::move(set.rankProgram);
  return plan;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

ordered_json orderJson(const DimOrder &order) {
  ordered_json names = ordered_json::array();
  for (Dim dim : order)
    names.push_back(dimName(dim));
  return names;
}

ordered_json modulesJson(const Topology &t) {
  ordered_json modules = ordered_json::array();
  for (const ModuleTopology &m : t.modules) {
    const Grid &g = m.grid;
    ordered_json entry;
    entry["name"] = m.name;
    entry["kind"] = m.isLanguage ? "language" : "encoder";
    entry["tp"] = g.size(Dim::TP);
    entry["cp"] = g.size(Dim::CP);
    entry["pp"] = g.size(Dim::PP);
    entry["dp"] = g.size(Dim::DP);
    entry["rank_offset"] = g.rankOffset();
    entry["order"] = orderJson(g.order());
    entry["span"] = {g.rankOffset(), g.endRank()};
    entry["hidden_size"] = m.hidden;
    entry["output_hidden_size"] = m.outputHidden;
    if (!m.isLanguage)
      entry["special_token_id"] = m.specialTokenId;
    modules.push_back(std::move(entry));
  }
  return modules;
}

ordered_json groupsJson(const Topology &t) {
  ordered_json groups = ordered_json::array();
  for (const ModuleTopology &m : t.modules) {
    ordered_json entry;
    entry["module"] = m.name;
    entry["tp"] = m.grid.groups({Dim::TP});
    entry["cp"] = m.grid.groups({Dim::CP});
    entry["dp"] = m.grid.groups({Dim::DP});
    entry["pp"] = m.grid.groups({Dim::PP});
    // Gradient reduction: data-parallel and context-parallel ranks hold
    // different samples or positions of the same parameters.
    entry["grad"] = m.grid.groups({Dim::DP, Dim::CP});
    groups.push_back(std::move(entry));
  }
  return groups;
}

} // namespace

ordered_json bridgeJson(const Topology &t, const BridgeTopology &b) {
  ordered_json entry;
  entry["src"] = t.modules[b.src].name;
  entry["dst"] = t.modules[b.dst].name;
  entry["mode"] = bridgeModeName(b.mode);
  entry["ratio"] = b.ratio;
  entry["tensor_ndim"] = b.tensorNdim;
  entry["batch_dim"] = b.batchDim;
  entry["src_leaders"] = b.srcLeaders;
  entry["dst_leaders"] = b.dstLeaders;
  ordered_json routes = ordered_json::array();
  for (const BridgeRoute &r : b.routes)
    routes.push_back({{"from", r.from}, {"to", r.to}});
  entry["routes"] = std::move(routes);
  entry["src_broadcast_groups"] = b.srcBroadcastGroups;
  entry["dst_broadcast_groups"] = b.dstBroadcastGroups;
  if (b.mode == BridgeMode::Colocated) {
    entry["direction"] = b.direction;
    entry["gather_groups"] = b.gatherGroups;
  }
  return entry;
}

ordered_json scheduleJson(const Topology &t) {
  ordered_json schedule;
  schedule["total_stages"] = t.totalStages;
  schedule["microbatches"] = t.microbatches;
  ordered_json stages = ordered_json::array();
  if (t.schedule != &defaultSchedule())
    schedule["kind"] = std::string(t.schedule->name());
  if (t.schedule->chunked())
    schedule["virtual_stages"] = t.modules[t.languageIndex()].virtualStages;
  for (const StageTopology &s : t.stages) {
    stages.push_back({{"module", t.modules[s.module].name},
                      {"pp", s.pp},
                      {"stage", s.stage},
                      {"warmup", s.warmup},
                      {"steady", t.microbatches - s.warmup},
                      {"cooldown", s.warmup}});
    if (s.weightLag >= 0)
      stages.back()["weight_lag"] = s.weightLag;
  }
  schedule["stages"] = std::move(stages);
  return schedule;
}

ordered_json shardsJson(const Topology &t) {
  return {{"scheme", "zigzag"},
          {"cp", t.shard.cp},
          {"tp", t.shard.tp},
          {"sequence_parallel", t.shard.sequenceParallel},
          {"packing", t.shard.packing},
          {"pad_multiple", t.shard.padMultiple}};
}

ordered_json instrJson(const Topology &t, const Instr &in) {
  const InstrInfo &info = instrInfo(in.op);
  ordered_json entry;
  entry["op"] = info.name;
  if (info.operand == InstrOperand::Module)
    entry["module"] = t.modules[in.index].name;
  else if (info.operand == InstrOperand::Bridge)
    entry["bridge"] = in.index;
  if (info.hasMicrobatch)
    entry["mb"] = in.mb;
  if (in.chunk != 0)
    entry["chunk"] = in.chunk;
  if (in.fused)
    entry["fused"] = true;
  if (in.posted)
    entry["posted"] = true;
  return entry;
}

ordered_json planToJson(const Plan &plan) {
  const Topology &t = plan.topology;
  ordered_json doc;
  doc["format"] = kPlanFormat;
  doc["version"] = kPlanVersion;
  doc["world_size"] = t.worldSize;
  doc["layout"] = layoutName(t.layout);
  doc["model"] = toJson(plan.config);
  doc["modules"] = modulesJson(t);
  doc["groups"] = groupsJson(t);
  ordered_json bridges = ordered_json::array();
  for (const BridgeTopology &b : t.bridges)
    bridges.push_back(bridgeJson(t, b));
  doc["bridges"] = std::move(bridges);
  doc["schedule"] = scheduleJson(t);
  doc["shards"] = shardsJson(t);
  std::vector<std::vector<int64_t>> ranks(plan.programs.size());
  for (size_t r = 0; r < plan.rankProgram.size(); ++r)
    ranks[static_cast<size_t>(plan.rankProgram[r])].push_back(int64_t(r));
  ordered_json programs = ordered_json::array();
  for (size_t p = 0; p < plan.programs.size(); ++p) {
    ordered_json instrs = ordered_json::array();
    for (const Instr &in : plan.programs[p].instrs)
      instrs.push_back(instrJson(t, in));
    programs.push_back({{"role", plan.programs[p].role},
                        {"ranks", ranks[p]},
                        {"instructions", std::move(instrs)}});
  }
  doc["programs"] = std::move(programs);
  return doc;
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

bool isPlanDocument(const json &document) {
  return document.is_object() && document.contains("format") &&
         document["format"] == kPlanFormat;
}

std::optional<std::pair<std::string, std::string>>
jsonDifference(const json &expected, const json &found,
               const std::string &pointer) {
  if (expected.type() != found.type() &&
      !(expected.is_number() && found.is_number()))
    return std::make_pair(pointer, "expected " + briefJson(expected) +
                                       ", found " + briefJson(found));
  if (expected.is_object()) {
    for (auto it = expected.begin(); it != expected.end(); ++it) {
      std::string child = pointer + "/" + escapePointerToken(it.key());
      if (!found.contains(it.key()))
        return std::make_pair(child, "missing; expected " + briefJson(*it));
      if (auto d = jsonDifference(*it, found[it.key()], child))
        return d;
    }
    for (auto it = found.begin(); it != found.end(); ++it)
      if (!expected.contains(it.key()))
        return std::make_pair(pointer + "/" + escapePointerToken(it.key()),
                              "unknown key");
    return std::nullopt;
  }
  if (expected.is_array()) {
    if (expected.size() != found.size())
      return std::make_pair(
          pointer, "expected " + std::to_string(expected.size()) +
                       " entries, found " + std::to_string(found.size()));
    for (size_t i = 0; i < expected.size(); ++i)
      if (auto d = jsonDifference(expected[i], found[i],
                                  pointer + "/" + std::to_string(i)))
        return d;
    return std::nullopt;
  }
  if (expected != found)
    return std::make_pair(pointer, "expected " + briefJson(expected) +
                                       ", found " + briefJson(found));
  return std::nullopt;
}

namespace {

class PlanLoader {
public:
  explicit PlanLoader(std::string_view file) : file(file) {}

  PlanLoadResult load(const json &doc) {
    PlanLoadResult result;
    if (!doc.is_object()) {
      error("", "expected a plan object, found " + briefJson(doc) +
                    "; pass a plan written by `mimoc compile -o`");
      return finish();
    }
    if (!isPlanDocument(doc)) {
      error("/format", "expected \"mimo-plan\"; pass a plan written by "
                       "`mimoc compile -o` (a model.json is compiled first)");
      return finish();
    }
    if (!doc.contains("version") || !doc["version"].is_number_integer() ||
        doc["version"].get<int64_t>() != kPlanVersion) {
      error("/version", "this plan has version " +
                            (doc.contains("version") ? briefJson(doc["version"])
                                                     : std::string("(none)")) +
                            " but this mimo reads plan version " +
                            std::to_string(kPlanVersion) +
                            "; recompile the model with this mimoc");
      return finish();
    }
    if (!doc.contains("model")) {
      error("/model", "missing; recompile the model with `mimoc compile`");
      return finish();
    }
    ParseResult model = validateModelConfig(doc["model"], file);
    for (Diagnostic d : model.diagnostics) {
      if (!d.syntax)
        d.pointer = "/model" + d.pointer;
      diagnostics.push_back(std::move(d));
    }
    if (!model.config)
      return finish();
    for (Diagnostic d : modelShapeErrors(*model.config)) {
      d.pointer = "/model" + d.pointer;
      d.message += "; fix the model and recompile";
      diagnostics.push_back(std::move(d));
    }
    if (!diagnostics.empty())
      return finish();
    std::string why;
    std::optional<Plan> expected = buildPlan(*model.config, &why);
    if (!expected) {
      error("/model", why + "; fix the model and recompile");
      return finish();
    }
    // Every derived section must be what the model compiles to.
    ordered_json derived = planToJson(*expected);
    for (const char *key : {"world_size", "layout", "modules", "groups",
                            "bridges", "schedule", "shards"}) {
      std::string pointer = std::string("/") + key;
      if (!doc.contains(key)) {
        error(pointer, "missing; recompile the model with `mimoc compile`");
        continue;
      }
      if (auto d = jsonDifference(json(derived[key]), doc[key], pointer))
        error(d->first, d->second + ": the plan disagrees with its own model; "
                                    "recompile it instead of editing it");
    }
    for (auto it = doc.begin(); it != doc.end(); ++it)
      if (!derived.contains(it.key()))
        error("/" + escapePointerToken(it.key()),
              "unknown key in a version " + std::to_string(kPlanVersion) +
                  " plan; remove it");
    if (!diagnostics.empty())
      return finish();
    ProgramSet compiled{expected->programs, expected->rankProgram};
    Plan plan = std::move(*expected);
    if (!doc.contains("programs") || !doc["programs"].is_array()) {
      error("/programs", "expected an array of programs; recompile the model");
      return finish();
    }
    if (!parsePrograms(doc["programs"], plan))
      return finish();
    std::vector<PlanProblem> problems = verifyPrograms(
        plan.topology, plan.programs, plan.rankProgram, /*limit=*/8);
    if (problems.empty())
      problems = checkDataflow(plan.topology, compiled, plan.programs,
                               plan.rankProgram, /*limit=*/8);
    for (const PlanProblem &problem : problems) {
      std::string pointer = "/programs";
      if (!problem.places.empty())
        pointer += "/" + std::to_string(problem.places[0].program) +
                   "/instructions/" +
                   std::to_string(std::max(0, problem.places[0].instr));
      error(pointer, problem.message + "; recompile the model");
    }
    if (!diagnostics.empty())
      return finish();
    result.plan = std::move(plan);
    return result;
  }

private:
  std::string file;
  std::vector<Diagnostic> diagnostics;

  void error(std::string pointer, std::string message) {
    diagnostics.push_back(
        Diagnostic::error(std::move(pointer), std::move(message)));
  }
  PlanLoadResult finish() {
    PlanLoadResult result;
    result.diagnostics = std::move(diagnostics);
    return result;
  }

  bool parsePrograms(const json &programs, Plan &plan) {
    const Topology &t = plan.topology;
    std::unordered_map<std::string, int32_t> moduleIndex;
    for (size_t i = 0; i < t.modules.size(); ++i)
      moduleIndex[t.modules[i].name] = int32_t(i);
    plan.programs.clear();
    for (size_t p = 0; p < programs.size(); ++p) {
      std::string at = "/programs/" + std::to_string(p);
      const json &entry = programs[p];
      if (!entry.is_object() || !entry.contains("role") ||
          !entry["role"].is_string() || !entry.contains("instructions") ||
          !entry["instructions"].is_array() || !entry.contains("ranks") ||
          !entry["ranks"].is_array()) {
        error(at, "expected {\"role\": string, \"ranks\": [...], "
                  "\"instructions\": [...]}; recompile the model");
        continue;
      }
      Program program;
      program.role = entry["role"].get<std::string>();
      const json &instrs = entry["instructions"];
      for (size_t i = 0; i < instrs.size(); ++i) {
        std::string iat = at + "/instructions/" + std::to_string(i);
        const json &ij = instrs[i];
        std::optional<InstrOp> op;
        if (ij.is_object() && ij.contains("op") && ij["op"].is_string())
          op = parseInstrOp(ij["op"].get<std::string>());
        if (!op) {
          error(iat + "/op", "expected an instruction name such as "
                             "\"forward\" or \"send_act\", found " +
                                 (ij.is_object() && ij.contains("op")
                                      ? briefJson(ij["op"])
                                      : std::string("nothing")));
          continue;
        }
        const InstrInfo &info = instrInfo(*op);
        // Unknown keys are errors (docs/plan.md Version policy): a key this
        // mimo does not know could change what the instruction means.
        static const char *const kKeys[] = {"op",    "module", "bridge", "mb",
                                            "chunk", "fused",  "posted"};
        std::string unknown;
        for (auto it = ij.begin(); it != ij.end() && unknown.empty(); ++it)
          if (std::find(std::begin(kKeys), std::end(kKeys), it.key()) ==
              std::end(kKeys))
            unknown = it.key();
        if (!unknown.empty()) {
          error(iat + "/" + escapePointerToken(unknown),
                "unknown key in a version " + std::to_string(kPlanVersion) +
                    " plan's instruction; remove it");
          continue;
        }
        Instr in;
        in.op = *op;
        if (info.operand == InstrOperand::Module) {
          auto it = ij.contains("module") && ij["module"].is_string()
                        ? moduleIndex.find(ij["module"].get<std::string>())
                        : moduleIndex.end();
          if (it == moduleIndex.end()) {
            error(iat + "/module", "expected the name of a module of the "
                                   "model");
            continue;
          }
          in.index = it->second;
        } else if (info.operand == InstrOperand::Bridge) {
          if (!ij.contains("bridge") || !ij["bridge"].is_number_integer() ||
              ij["bridge"].get<int64_t>() < 0 ||
              ij["bridge"].get<size_t>() >= t.bridges.size()) {
            error(iat + "/bridge", "expected a bridge index in [0, " +
                                       std::to_string(t.bridges.size()) + ")");
            continue;
          }
          in.index = ij["bridge"].get<int32_t>();
        }
        if (info.hasMicrobatch) {
          if (!ij.contains("mb") || !ij["mb"].is_number_integer() ||
              ij["mb"].get<int64_t>() < 0 ||
              ij["mb"].get<int64_t>() >= t.microbatches) {
            error(iat + "/mb", "expected a microbatch index in [0, " +
                                   std::to_string(t.microbatches) + ")");
            continue;
          }
          in.mb = ij["mb"].get<int32_t>();
        }
        if (ij.contains("chunk")) {
          const int64_t chunks = info.operand == InstrOperand::Module
                                     ? t.modules[in.index].virtualStages
                                     : 1;
          if (!ij["chunk"].is_number_integer() ||
              ij["chunk"].get<int64_t>() < 0 ||
              ij["chunk"].get<int64_t>() >= chunks) {
            error(iat + "/chunk", "expected a chunk index in [0, " +
                                      std::to_string(chunks) +
                                      ") (the module's virtual_stages)");
            continue;
          }
          in.chunk = ij["chunk"].get<int32_t>();
        }
        if (ij.contains("fused")) {
          if (!ij["fused"].is_boolean()) {
            error(iat + "/fused", "expected true or false");
            continue;
          }
          in.fused = ij["fused"].get<bool>();
        }
        if (ij.contains("posted")) {
          if (!ij["posted"].is_boolean()) {
            error(iat + "/posted", "expected true or false");
            continue;
          }
          in.posted = ij["posted"].get<bool>();
          if (in.posted && !postable(in.op)) {
            error(iat + "/posted",
                  std::string("only a bridge's sends and receives can be "
                              "posted, not ") +
                      info.name + "; remove the key");
            continue;
          }
          if (in.posted && in.fused) {
            error(iat + "/posted", "a posted message is never fused; "
                                   "remove \"fused\" or \"posted\"");
            continue;
          }
        }
        program.instrs.push_back(in);
      }
      plan.programs.push_back(std::move(program));
    }
    if (!diagnostics.empty())
      return false;
    std::string why;
    auto assignment = assignPrograms(t, plan.programs, &why);
    if (!assignment) {
      error("/programs", why + "; recompile the model");
      return false;
    }
    plan.rankProgram = std::move(*assignment);
    for (size_t p = 0; p < programs.size(); ++p) {
      std::vector<int64_t> ranks;
      for (size_t r = 0; r < plan.rankProgram.size(); ++r)
        if (plan.rankProgram[r] == int32_t(p))
          ranks.push_back(int64_t(r));
      if (programs[p]["ranks"] != json(ranks))
        error("/programs/" + std::to_string(p) + "/ranks",
              "expected the ranks whose role is '" + plan.programs[p].role +
                  "' (" + briefJson(json(ranks)) + "), found " +
                  briefJson(programs[p]["ranks"]) + "; recompile the model");
    }
    return diagnostics.empty();
  }
};

} // namespace

PlanLoadResult loadPlanDocument(const json &document,
                                std::string_view fileName) {
  return PlanLoader(fileName).load(document);
}

PlanLoadResult loadPlan(std::string_view text, std::string_view fileName) {
  Diagnostic syntax;
  std::optional<json> doc = parseJsonText(text, syntax);
  if (!doc) {
    PlanLoadResult result;
    result.diagnostics.push_back(syntax);
    return result;
  }
  return loadPlanDocument(*doc, fileName);
}

} // namespace mimo
