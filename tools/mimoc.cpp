//===- mimoc.cpp - The mimo compiler driver -------------------------------===//
//
//   mimoc compile MODEL.json [-o PLAN.json] [--emit=plan|mlir]
//                 [--mlir-print-ir-after-all]
//                 [--mlir-print-ir-after=PASS] [--dump-ir-dir=DIR]
//   mimoc explain MODEL.json|PLAN.json [--format=text|json|dot] [--rank R]
//
// Exit codes: 0 success, 1 invalid input (diagnostics on stderr, nothing
// written).
//
//===----------------------------------------------------------------------===//

#include "codegen/Explain.h"
#include "codegen/SimulateReport.h"
#include "codegen/Tune.h"
#include "runtime/data/Data.h"
#include "runtime/json/JsonReader.h"
#include "runtime/support/BuildInfo.h"
#include "runtime/support/InputFile.h"
#include "runtime/support/OutputFile.h"
#include "tools/driver/Driver.h"

#include "mlir/IR/MLIRContext.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace {

cl::SubCommand compileCommand(
    "compile", "Validate model.json, lower it to the mimo dialect, run every "
               "pass and write the result");
cl::SubCommand
    explainCommand("explain",
                   "Show the rank layout, the modules and every rank's role");

cl::OptionCategory compileCategory("compile options");
cl::opt<std::string> compileInput(cl::Positional, cl::Required,
                                  cl::desc("<MODEL.json>"),
                                  cl::sub(compileCommand));
cl::opt<std::string> outputFile("o",
                                cl::desc("Write the result to FILE "
                                         "(default: standard output)"),
                                cl::value_desc("FILE"), cl::init("-"),
                                cl::sub(compileCommand),
                                cl::cat(compileCategory));
enum class EmitKind { Plan, MLIR };
cl::opt<EmitKind> emitKind(
    "emit", cl::desc("What to write"), cl::init(EmitKind::Plan),
    cl::values(clEnumValN(EmitKind::Plan, "plan",
                          "the verified plan file (default)"),
               clEnumValN(EmitKind::MLIR, "mlir",
                          "the IR after the pipeline, with locations")),
    cl::sub(compileCommand), cl::cat(compileCategory));
cl::opt<bool> printIrAfterAll("mlir-print-ir-after-all",
                              cl::desc("Print the IR to stderr after every "
                                       "pass"),
                              cl::sub(compileCommand),
                              cl::cat(compileCategory));
cl::list<std::string>
    printIrAfter("mlir-print-ir-after",
                 cl::desc("Print the IR to stderr after the named pass "
                          "(repeatable, or comma-separated)"),
                 cl::value_desc("PASS"), cl::CommaSeparated,
                 cl::sub(compileCommand), cl::cat(compileCategory));
cl::opt<bool> quiet("quiet",
                    cl::desc("Print nothing on success (by default the "
                             "layout and its warnings go to stderr)"),
                    cl::sub(compileCommand), cl::cat(compileCategory));
cl::alias quietShort("q", cl::desc("Same as --quiet"), cl::aliasopt(quiet),
                     cl::cat(compileCategory));
cl::opt<std::string> dumpIrDir("dump-ir-dir",
                               cl::desc("Write the IR after import and after "
                                        "each pass into DIR/NN-<pass>.mlir"),
                               cl::value_desc("DIR"), cl::sub(compileCommand),
                               cl::cat(compileCategory));

cl::OptionCategory explainCategory("explain options");
cl::opt<std::string> explainInput(cl::Positional, cl::Required,
                                  cl::desc("<MODEL.json|PLAN.json>"),
                                  cl::sub(explainCommand));
enum class ExplainFormat { Text, Json, Dot };
cl::opt<ExplainFormat> explainFormat(
    "format", cl::desc("How to print the explanation"),
    cl::init(ExplainFormat::Text),
    cl::values(
        clEnumValN(ExplainFormat::Text, "text",
                   "tables; ranks with one role as one row (default)"),
        clEnumValN(ExplainFormat::Json, "json",
                   "one JSON object with every rank's detail"),
        clEnumValN(ExplainFormat::Dot, "dot",
                   "a Graphviz drawing: roles grouped by module, pipeline "
                   "and bridge edges (dot -Tsvg)")),
    cl::sub(explainCommand), cl::cat(explainCategory));
cl::opt<bool> explainJson("json", cl::desc("Same as --format=json"),
                          cl::sub(explainCommand), cl::cat(explainCategory));
cl::opt<int64_t> explainRank("rank",
                             cl::desc("Show only rank R, with its program"),
                             cl::value_desc("R"), cl::init(-1),
                             cl::sub(explainCommand), cl::cat(explainCategory));

cl::SubCommand simulateCommand(
    "simulate", "Predict a training step: every rank's stream replayed with "
                "a device profile's and a cluster's costs");
cl::SubCommand
    tuneCommand("tune",
                "Search every module's grid, the rank split and the microbatch "
                "count for the fastest predicted step");

cl::OptionCategory simulateCategory("simulate and tune options");
cl::opt<std::string> simulateInput(cl::Positional, cl::Required,
                                   cl::desc("<PLAN.json|MODEL.json>"),
                                   cl::sub(simulateCommand));
cl::opt<std::string> tuneInput(cl::Positional, cl::Required,
                               cl::desc("<MODEL.json>"), cl::sub(tuneCommand));
cl::opt<std::string>
    profileOption("profile",
                  cl::desc("The device: a profile from mimo-run --calibrate "
                           "-o FILE, or an estimate: cpu, h100, h200 "
                           "(default cpu)"),
                  cl::value_desc("FILE|NAME"), cl::init("cpu"),
                  cl::sub(simulateCommand), cl::sub(tuneCommand),
                  cl::cat(simulateCategory));
cl::opt<std::string>
    clusterOption("cluster",
                  cl::desc("GPUs per node, nodes and link speeds "
                           "(docs/tune.md); default: the profile's one host "
                           "(CPU) or nodes of 8 GPUs"),
                  cl::value_desc("FILE"), cl::sub(simulateCommand),
                  cl::sub(tuneCommand), cl::cat(simulateCategory));
cl::opt<std::string> traceOption("trace",
                                 cl::desc("Write a Chrome/Perfetto trace of "
                                          "the predicted step to FILE"),
                                 cl::value_desc("FILE"),
                                 cl::sub(simulateCommand),
                                 cl::cat(simulateCategory));
enum class ReportFormat { Text, Json };
cl::opt<ReportFormat> reportFormat(
    "format", cl::desc("How to print the result"), cl::init(ReportFormat::Text),
    cl::values(clEnumValN(ReportFormat::Text, "text", "a report (default)"),
               clEnumValN(ReportFormat::Json, "json", "one JSON object")),
    cl::sub(simulateCommand), cl::sub(tuneCommand), cl::cat(simulateCategory));
cl::opt<int64_t> tuneWorld("world", cl::desc("The ranks to lay out"),
                           cl::value_desc("N"), cl::Required,
                           cl::sub(tuneCommand), cl::cat(simulateCategory));
cl::opt<double>
    tuneMemory("memory",
               cl::desc("GiB one rank may use (default: the profile's device "
                        "memory over the ranks sharing a device)"),
               cl::value_desc("GiB"), cl::init(0), cl::sub(tuneCommand),
               cl::cat(simulateCategory));
cl::opt<unsigned> tuneTop("top",
                          cl::desc("Layouts to list (default 10; 0: all)"),
                          cl::value_desc("K"), cl::init(10),
                          cl::sub(tuneCommand), cl::cat(simulateCategory));
cl::opt<unsigned>
    tuneSimulate("simulate",
                 cl::desc("Simulate the K analytically best layouts (default "
                          "48; 0: every valid layout)"),
                 cl::value_desc("K"), cl::init(48), cl::sub(tuneCommand),
                 cl::cat(simulateCategory));
cl::opt<std::string> tuneOutput("o",
                                cl::desc("Write the best layout's model.json "
                                         "to FILE"),
                                cl::value_desc("FILE"), cl::sub(tuneCommand),
                                cl::cat(simulateCategory));

/// Compiles `path`, printing diagnostics; fails with nothing on error.
mimo::CompileResult compile(mlir::MLIRContext &context, StringRef path,
                            const mimo::CompileOptions &options) {
  mimo::CompileResult result = mimo::compileModelFile(context, path, options);
  if (!result.succeeded())
    mimo::printDiagnostics(errs(), path, result.diagnostics);
  return result;
}

int runCompile() {
  mimo::CompileOptions options;
  options.printIrAfterAll = printIrAfterAll;
  options.dumpIrDir = dumpIrDir;
  std::vector<std::string> known = mimo::pipelinePassNames();
  for (const std::string &pass : printIrAfter) {
    if (std::find(known.begin(), known.end(), pass) == known.end()) {
      std::string list;
      for (const std::string &name : known)
        list += (list.empty() ? "" : ", ") + name;
      errs() << "mimoc: error: --mlir-print-ir-after: unknown pass '" << pass
             << "'; the passes are: " << list << "\n";
      return 1;
    }
    options.printIrAfter.push_back(pass);
  }
  // The output is checked before compiling (never the model itself, a
  // folder that exists and can be written).
  std::string problem;
  if (outputFile != "-" &&
      !mimo::checkOutput(outputFile, {compileInput}, problem)) {
    errs() << "mimoc: " << problem << "\n";
    return 1;
  }
  mlir::MLIRContext context;
  mimo::CompileResult result = compile(context, compileInput, options);
  if (!result.succeeded())
    return 1;
  std::string text;
  raw_string_ostream os(text);
  if (emitKind == EmitKind::MLIR) {
    result.module->print(os, mlir::OpPrintingFlags().enableDebugInfo());
  } else {
    if (!result.plan) {
      errs() << compileInput << ": error: the compiled IR holds no plan\n";
      return 1;
    }
    os << mimo::planToJson(*result.plan).dump() << "\n";
  }
  // What was compiled, so a layout is never accepted silently.
  auto report = [&] {
    if (quiet || !result.plan)
      return;
    errs() << "mimoc: " << mimo::layoutSummary(*result.plan) << "\n";
    for (const std::string &warning : mimo::layoutWarnings(*result.plan))
      errs() << "mimoc: warning: " << warning << "\n";
  };
  if (outputFile == "-") {
    outs() << text;
    report();
    return 0;
  }
  // A file is written to a temporary file and renamed, so a failure (a
  // full disk) leaves no half-written plan; a device or pipe is written in
  // place (runtime/support/OutputFile.h).
  outs().flush();
  if (!mimo::writeOutput(outputFile, text, problem, {compileInput})) {
    errs() << "mimoc: " << problem << "\n";
    return 1;
  }
  report();
  return 0;
}

/// The bytes of `path` (a model or a plan: a regular file, never read
/// past the plan's limit), or null after saying why they cannot be read.
std::unique_ptr<MemoryBuffer> readInput(StringRef path) {
  std::string problem;
  std::optional<std::string> text = mimo::readInputFile(
      path.str(), mimo::kMaxPlanFileBytes, "the input", problem);
  if (!text) {
    errs() << problem << "\n";
    return nullptr;
  }
  return MemoryBuffer::getMemBufferCopy(*text, path);
}

/// Reads a plan file, or compiles a model.json, into a plan.
std::optional<mimo::Plan> readPlan(mlir::MLIRContext &context, StringRef path) {
  std::unique_ptr<MemoryBuffer> buffer = readInput(path);
  if (!buffer)
    return std::nullopt;
  StringRef text = buffer->getBuffer();
  mimo::Diagnostic syntax;
  std::optional<nlohmann::json> parsed =
      mimo::parseJsonText(std::string_view(text.data(), text.size()), syntax);
  if (!parsed) {
    mimo::printDiagnostics(errs(), path, {syntax});
    return std::nullopt;
  }
  const nlohmann::json &document = *parsed;
  if (mimo::isPlanDocument(document)) {
    mimo::PlanLoadResult loaded = mimo::loadPlanDocument(document, path.str());
    if (!loaded.plan) {
      mimo::printDiagnostics(errs(), path, loaded.diagnostics);
      return std::nullopt;
    }
    return std::move(loaded.plan);
  }
  mimo::CompileResult result = compile(context, path, {});
  if (!result.succeeded())
    return std::nullopt;
  return std::move(result.plan);
}

/// readPlan, then the memory its JSON document held handed back to the
/// system: at 2^20 ranks the document is most of the peak, and what comes
/// next (a simulation's record per instruction) is one large allocation
/// that would not reuse it.
std::optional<mimo::Plan> planOf(mlir::MLIRContext &context, StringRef path) {
  std::optional<mimo::Plan> plan = readPlan(context, path);
  mimo::releaseFreedMemory();
  return plan;
}

int runExplain() {
  mlir::MLIRContext context;
  std::optional<mimo::Plan> plan = planOf(context, explainInput);
  if (!plan)
    return 1;
  int64_t worldSize = plan->topology.worldSize;
  std::optional<int64_t> rank;
  if (explainRank.getNumOccurrences()) {
    if (explainRank < 0 || explainRank >= worldSize) {
      errs() << "mimoc: error: --rank " << explainRank
             << " is outside the model's ranks [0, " << worldSize
             << "); pick a rank below " << worldSize << "\n";
      return 1;
    }
    rank = explainRank;
  }
  mimo::Explanation explanation(*plan, rank);
  if (explainJson || explainFormat == ExplainFormat::Json) {
    if (!rank) {
      // Streamed: a JSON object per rank would not fit at 2^20 ranks.
      explanation.writeJson([](std::string_view text) {
        outs() << StringRef(text.data(), text.size());
      });
      outs() << "\n";
      return 0;
    }
    nlohmann::ordered_json whole = explanation.toJson();
    const mimo::Program &program = plan->programs[plan->rankProgram[*rank]];
    nlohmann::ordered_json instructions = nlohmann::ordered_json::array();
    for (const mimo::Instr &in : program.instrs)
      instructions.push_back(mimo::instrJson(plan->topology, in));
    whole["instructions"] = instructions;
    outs() << whole.dump(2) << "\n";
    return 0;
  }
  if (explainFormat == ExplainFormat::Dot) {
    outs() << mimo::renderExplainDot(explanation, plan->config.name);
    return 0;
  }
  outs() << mimo::renderExplainText(explanation, plan->config.name);
  if (rank)
    outs() << "\n" << mimo::renderRankProgram(*plan, *rank);
  return 0;
}

/// Reads --profile and --cluster.
bool loadCostInputs(mimo::DeviceProfile &profile,
                    mimo::ClusterConfig &cluster) {
  std::string error;
  std::optional<mimo::DeviceProfile> p =
      mimo::loadProfile(profileOption, &error);
  if (!p) {
    errs() << error << "\n";
    return false;
  }
  std::optional<mimo::ClusterConfig> c =
      mimo::loadCluster(clusterOption, *p, &error);
  if (!c) {
    errs() << error << "\n";
    return false;
  }
  profile = *p;
  cluster = *c;
  return true;
}

/// Writes `text` to `path` through a temporary file.
/// Writes an output (runtime/support/OutputFile.h) that must not be one of
/// `inputs`; false after saying why.
bool writeText(const std::string &path, const std::string &text,
               const std::vector<std::string> &inputs) {
  outs().flush();
  std::string problem;
  if (!mimo::writeOutput(path, text, problem, inputs)) {
    errs() << "mimoc: " << problem << "\n";
    return false;
  }
  return true;
}

/// The same check before any work.
bool outputWritable(const std::string &path,
                    const std::vector<std::string> &inputs) {
  std::string problem;
  if (path.empty() || mimo::checkOutput(path, inputs, problem))
    return true;
  errs() << "mimoc: " << problem << "\n";
  return false;
}

int runSimulate() {
  const std::vector<std::string> inputs = {simulateInput, profileOption,
                                           clusterOption};
  if (!outputWritable(traceOption, inputs))
    return 1;
  mlir::MLIRContext context;
  std::optional<mimo::Plan> plan = planOf(context, simulateInput);
  if (!plan)
    return 1;
  mimo::DeviceProfile profile;
  mimo::ClusterConfig cluster;
  if (!loadCostInputs(profile, cluster))
    return 1;
  mimo::CostModel costs(plan->topology, plan->config, profile, cluster);
  mimo::Simulation sim = mimo::simulateStep(plan->topology, plan->programs,
                                            plan->rankProgram, costs);
  nlohmann::ordered_json report = mimo::simulationJson(*plan, sim, costs);
  if (!traceOption.empty() && sim.problem.empty() &&
      !writeText(traceOption,
                 mimo::simulationTrace(sim, plan->topology, plan->programs,
                                       plan->rankProgram)
                     .dump(),
                 inputs)) {
    return 1;
  }
  if (reportFormat == ReportFormat::Json)
    outs() << report.dump(2) << "\n";
  else
    outs() << mimo::renderSimulationText(report);
  if (!sim.problem.empty()) {
    errs() << simulateInput << ": error: " << sim.problem << "\n";
    return 1;
  }
  return 0;
}

/// The model of a model.json for tune: checked like mimoc compile checks
/// it, but its layout may be anything (tune replaces it). Data paths become
/// absolute so that the written model works from any directory.
std::optional<mimo::ModelConfig> modelOf(StringRef path) {
  std::unique_ptr<MemoryBuffer> buffer = readInput(path);
  if (!buffer)
    return std::nullopt;
  StringRef text = buffer->getBuffer();
  mimo::ParseResult parsed = mimo::parseModelConfig(
      std::string_view(text.data(), text.size()), path.str());
  if (!parsed.config) {
    mimo::printDiagnostics(errs(), path, parsed.diagnostics);
    return std::nullopt;
  }
  mimo::resolveInitPaths(*parsed.config, sys::path::parent_path(path).str());
  std::vector<mimo::Diagnostic> data = mimo::exec::resolveDataPaths(
      *parsed.config, sys::path::parent_path(path).str());
  if (!data.empty()) {
    mimo::printDiagnostics(errs(), path, data);
    return std::nullopt;
  }
  std::vector<std::string *> files = {&parsed.config->data.path,
                                      &parsed.config->data.evalPath};
  for (auto &entry : parsed.config->data.blend)
    files.push_back(&entry.path);
  for (std::string *file : files) {
    SmallString<256> absolute(*file);
    if (!file->empty() && !sys::fs::make_absolute(absolute))
      *file = absolute.str().str();
  }
  return std::move(parsed.config);
}

int runTune() {
  if (!outputWritable(tuneOutput, {tuneInput, profileOption, clusterOption}))
    return 1;
  // The model's architecture, batch and data are what the search keeps.
  std::optional<mimo::ModelConfig> model = modelOf(tuneInput);
  if (!model)
    return 1;
  if (tuneWorld < 1 || tuneWorld > (1 << 20)) {
    errs() << "mimoc: error: --world " << tuneWorld
           << " is out of range; give the ranks to lay out, 1 to 1048576\n";
    return 1;
  }
  if (tuneMemory < 0) {
    errs() << "mimoc: error: --memory must be > 0 GiB\n";
    return 1;
  }
  mimo::TuneOptions options;
  if (!loadCostInputs(options.profile, options.cluster))
    return 1;
  options.worldSize = tuneWorld;
  options.memoryBytes = tuneMemory * double(1ull << 30);
  options.simulate = tuneSimulate;
  mimo::TuneResult result = mimo::tuneLayouts(*model, options);
  if (reportFormat == ReportFormat::Json)
    outs() << mimo::tuneJson(result, options, tuneTop).dump(2) << "\n";
  else
    outs() << mimo::renderTuneText(result, options, tuneTop);
  if (result.ranked.empty()) {
    errs() << tuneInput << ": error: " << result.problem << "\n";
    return 1;
  }
  if (!tuneOutput.empty()) {
    if (!writeText(tuneOutput,
                   mimo::toJson(result.ranked.front().config).dump(2) + "\n",
                   {tuneInput, profileOption, clusterOption}))
      return 1;
    if (reportFormat == ReportFormat::Text)
      outs() << "\nwrote the best layout to " << tuneOutput << "\n";
  }
  return 0;
}

} // namespace

const char *kOverview =
    "mimoc: the mimo compiler. It reads a model.json (modality encoders\n"
    "feeding a language model, each with its own tensor, context, pipeline\n"
    "and data parallel grid and its own ranks, colocated or not), inserts\n"
    "the bridges between the grids, shards the sequence, schedules a\n"
    "multi-module 1F1B, proves that every send meets its receive, and\n"
    "writes the plan every rank of mimo-run executes.\n"
    "\n"
    "COMMANDS\n"
    "  mimoc compile MODEL.json -o PLAN.json [--emit=plan|mlir] [-q]\n"
    "      check the model, run the passes, write the verified plan (or the\n"
    "      IR); the layout and its warnings are printed on stderr\n"
    "  mimoc explain MODEL.json|PLAN.json [--format=text|json|dot] [--rank R]\n"
    "      the layout, every role's ranks, stages, warm-ups and memory, the\n"
    "      bridges and sequence shards; --rank R: one rank and its program\n"
    "  mimoc simulate MODEL.json|PLAN.json [--profile FILE|cpu|h100|h200]\n"
    "                 [--cluster FILE] [--trace FILE] [--format=text|json]\n"
    "      predict a step: time, idle share, MFU, busy ranks, critical path\n"
    "  mimoc tune MODEL.json --world N [--memory GiB] [--profile P]\n"
    "             [--cluster C] [--top K] [-o BEST.json]\n"
    "      search every module's grid, the rank split and the microbatch\n"
    "      count; list the fastest predicted layouts, write the best\n"
    "\n"
    "  Exit codes: 0 success; 1 invalid input (FILE: JSON-POINTER: error:\n"
    "  ... on stderr, nothing written).\n"
    "\n"
    "EXAMPLE\n"
    "  mimoc compile examples/vlm-fan-in.json -o vlm.plan.json\n"
    "  mimoc explain vlm.plan.json\n"
    "  mimoc explain vlm.plan.json --format=dot | dot -Tsvg > vlm.svg\n"
    "  mimo-run vlm.plan.json\n"
    "\n"
    "  mimo-run --calibrate -o my.profile.json\n"
    "  mimoc tune examples/vlm-fan-in.json --world 8 --profile "
    "my.profile.json\n"
    "\n"
    "  The model.json format: docs/model-json.md; the plan: docs/plan.md;\n"
    "  the cost model and search: docs/tune.md.\n";

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(
      {&compileCategory, &explainCategory, &simulateCategory});
  cl::SetVersionPrinter(
      [](raw_ostream &os) { os << mimo::versionText("mimoc"); });
  cl::ParseCommandLineOptions(argc, argv, kOverview);
  if (compileCommand)
    return runCompile();
  if (explainCommand)
    return runExplain();
  if (simulateCommand)
    return runSimulate();
  if (tuneCommand)
    return runTune();
  errs() << "mimoc: error: expected a command: compile, explain, simulate or "
            "tune; see mimoc --help\n";
  return 1;
}
