//===- Driver.cpp - model.json -> verified mimo IR ------------------------===//

#include "tools/driver/Driver.h"

#include "codegen/PlanFromIR.h"

#include "ir/Import.h"
#include "ir/Locations.h"
#include "ir/MimoOps.h"
#include "passes/Passes.h"
#include "runtime/checkpoint/HfWeights.h"
#include "runtime/data/Data.h"
#include "runtime/json/JsonLocator.h"
#include "runtime/support/InputFile.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassInstrumentation.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace mimo {

void registerMimoDialects(mlir::DialectRegistry &registry) {
  registry.insert<ir::MimoDialect>();
}

std::vector<std::string> pipelinePassNames() {
  mlir::MLIRContext context;
  mlir::PassManager pm(&context);
  buildMimoPipeline(pm);
  std::vector<std::string> names;
  for (mlir::Pass &pass : pm.getPasses())
    names.push_back(pass.getArgument().str());
  return names;
}

namespace {

/// Turns an MLIR diagnostic into pointer-located mimo Diagnostics.
void collect(mlir::Diagnostic &diag, bool note, std::vector<Diagnostic> &out) {
  Diagnostic converted;
  converted.note = note;
  converted.message = diag.str();
  if (auto pointer = ir::getPointerLocation(diag.getLocation())) {
    converted.pointer = pointer->pointer;
  } else {
    // Not from model.json (a bug in the importer if it happens): keep the
    // location text so the message is still actionable.
    std::string where;
    llvm::raw_string_ostream os(where);
    os << diag.getLocation();
    converted.message = where + ": " + converted.message;
  }
  out.push_back(converted);
  for (mlir::Diagnostic &attached : diag.getNotes())
    collect(attached, /*note=*/true, out);
}

/// Writes the IR after import and after every pass into a directory.
class DumpIrInstrumentation : public mlir::PassInstrumentation {
public:
  DumpIrInstrumentation(std::string directory)
      : directory(std::move(directory)) {}

  void dump(mlir::Operation *op, llvm::StringRef name) {
    llvm::SmallString<256> path(directory);
    std::string file;
    llvm::raw_string_ostream(file)
        << llvm::format("%02u-", index++) << name << ".mlir";
    llvm::sys::path::append(path, file);
    std::error_code error;
    llvm::raw_fd_ostream os(path, error);
    if (error)
      return;
    op->print(os, mlir::OpPrintingFlags().enableDebugInfo());
  }

  void runAfterPass(mlir::Pass *pass, mlir::Operation *op) override {
    dump(op, pass->getArgument());
  }

private:
  std::string directory;
  unsigned index = 0;
};

} // namespace

CompileResult compileModel(mlir::MLIRContext &context, llvm::StringRef file,
                           llvm::StringRef text,
                           const CompileOptions &options) {
  CompileResult result;
  ParseResult parsed =
      parseModelConfig(std::string_view(text.data(), text.size()),
                       std::string_view(file.data(), file.size()));
  if (!parsed.config) {
    result.diagnostics = std::move(parsed.diagnostics);
    return result;
  }
  result.config = std::move(parsed.config);
  // Data files: relative to model.json, checked now, stored resolved.
  std::string directory = llvm::sys::path::parent_path(file).str();
  resolveInitPaths(*result.config, directory);
  // Hugging Face folders: config.json against arch, and the tensors.
  std::vector<Diagnostic> initProblems = exec::initProblems(*result.config);
  if (!initProblems.empty()) {
    result.diagnostics = std::move(initProblems);
    return result;
  }
  std::vector<Diagnostic> dataProblems =
      exec::resolveDataPaths(*result.config, directory);
  if (!dataProblems.empty()) {
    result.diagnostics = std::move(dataProblems);
    return result;
  }

  mlir::DialectRegistry registry;
  registerMimoDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();

  std::vector<Diagnostic> diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() == mlir::DiagnosticSeverity::Error)
      collect(diag, /*note=*/false, diagnostics);
    return mlir::success();
  });

  JsonLocator locator(std::string_view(text.data(), text.size()));
  mlir::OwningOpRef<mlir::ModuleOp> module =
      ir::importModel(&context, *result.config, file, locator);
  if (mlir::failed(mlir::verify(*module))) {
    result.diagnostics = std::move(diagnostics);
    return result;
  }

  mlir::PassManager pm(&context);
  buildMimoPipeline(pm);
  if (options.printIrAfterAll || !options.printIrAfter.empty()) {
    std::vector<std::string> selected = options.printIrAfter;
    bool all = options.printIrAfterAll;
    // Module-scope printing needs the passes to run one at a time.
    context.disableMultithreading();
    pm.enableIRPrinting(
        /*shouldPrintBeforePass=*/[](mlir::Pass *,
                                     mlir::Operation *) { return false; },
        /*shouldPrintAfterPass=*/
        [selected, all](mlir::Pass *pass, mlir::Operation *) {
          return all || std::find(selected.begin(), selected.end(),
                                  pass->getArgument().str()) != selected.end();
        },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
        /*printAfterOnlyOnFailure=*/false, llvm::errs(),
        mlir::OpPrintingFlags().enableDebugInfo());
  }
  if (!options.dumpIrDir.empty()) {
    if (std::error_code error =
            llvm::sys::fs::create_directories(options.dumpIrDir)) {
      result.diagnostics.push_back(Diagnostic::error(
          "", "cannot create --dump-ir-dir '" + options.dumpIrDir +
                  "': " + error.message()));
      return result;
    }
    auto dumper = std::make_unique<DumpIrInstrumentation>(options.dumpIrDir);
    dumper->dump(*module, "import");
    pm.addInstrumentation(std::move(dumper));
  }
  if (mlir::failed(pm.run(*module))) {
    if (diagnostics.empty())
      diagnostics.push_back(
          Diagnostic::error("", "the mimo pipeline failed without a message"));
    result.diagnostics = std::move(diagnostics);
    return result;
  }
  auto models = llvm::to_vector(module->getOps<ir::ModelOp>());
  if (models.size() == 1) {
    mlir::FailureOr<Plan> plan = planFromIR(models.front(), *result.config);
    if (mlir::failed(plan)) {
      result.diagnostics = std::move(diagnostics);
      return result;
    }
    result.plan = std::move(*plan);
  }
  result.module = std::move(module);
  return result;
}

CompileResult compileModelFile(mlir::MLIRContext &context, llvm::StringRef path,
                               const CompileOptions &options) {
  if (path == "-") {
    auto buffer = llvm::MemoryBuffer::getSTDIN();
    if (!buffer) {
      CompileResult result;
      result.diagnostics.push_back(Diagnostic::error(
          "", "cannot read standard input: " + buffer.getError().message()));
      return result;
    }
    return compileModel(context, path, (*buffer)->getBuffer(), options);
  }
  // A regular file of at most 64 MiB (a FIFO, /dev/zero or a huge file is
  // refused before anything is read: runtime/support/InputFile.h).
  std::string problem;
  std::optional<std::string> text =
      readInputFile(path.str(), kMaxModelFileBytes, "the model", problem);
  if (!text) {
    CompileResult result;
    // The message names the file already: strip "PATH: error: ".
    const std::string prefix = path.str() + ": error: ";
    result.diagnostics.push_back(Diagnostic::error(
        "", problem.rfind(prefix, 0) == 0 ? problem.substr(prefix.size())
                                          : problem));
    return result;
  }
  return compileModel(context, path, *text, options);
}

void printDiagnostics(llvm::raw_ostream &os, llvm::StringRef file,
                      const std::vector<Diagnostic> &diagnostics) {
  for (const Diagnostic &diag : diagnostics)
    os << formatDiagnostic(std::string_view(file.data(), file.size()), diag)
       << "\n";
}

} // namespace mimo
