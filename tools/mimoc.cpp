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
#include "runtime/core/BuildInfo.h"
#include "runtime/core/JsonReader.h"
#include "tools/driver/Driver.h"

#include "mlir/IR/MLIRContext.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
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
  // Written to a temporary file and renamed, so a failure leaves no
  // half-written output.
  if (Error error = writeToOutput(outputFile, [&](raw_ostream &out) {
        out << text;
        return Error::success();
      })) {
    errs() << outputFile
           << ": error: cannot write the output: " << toString(std::move(error))
           << "\n";
    return 1;
  }
  report();
  return 0;
}

/// Reads a plan file, or compiles a model.json, into a plan.
std::optional<mimo::Plan> planOf(mlir::MLIRContext &context, StringRef path) {
  auto buffer = MemoryBuffer::getFile(path);
  if (!buffer) {
    errs() << path
           << ": error: cannot read the file: " << buffer.getError().message()
           << "\n";
    return std::nullopt;
  }
  StringRef text = (*buffer)->getBuffer();
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
  nlohmann::ordered_json explanation = mimo::explainPlan(*plan, rank);
  if (rank) {
    const mimo::Program &program = plan->programs[plan->rankProgram[*rank]];
    nlohmann::ordered_json instructions = nlohmann::ordered_json::array();
    for (const mimo::Instr &in : program.instrs)
      instructions.push_back(mimo::instrJson(plan->topology, in));
    explanation["instructions"] = instructions;
  }
  if (explainJson || explainFormat == ExplainFormat::Json) {
    outs() << explanation.dump(2) << "\n";
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
    "  The model.json format: docs/model-json.md; the plan: docs/plan.md.\n";

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions({&compileCategory, &explainCategory});
  cl::SetVersionPrinter(
      [](raw_ostream &os) { os << mimo::versionText("mimoc"); });
  cl::ParseCommandLineOptions(argc, argv, kOverview);
  if (compileCommand)
    return runCompile();
  if (explainCommand)
    return runExplain();
  errs() << "mimoc: error: expected a command, 'compile' or 'explain'; see "
            "mimoc --help\n";
  return 1;
}
