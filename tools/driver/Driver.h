//===- Driver.h - model.json -> verified mimo IR ---------------*- C++ -*-===//
//
// What `mimoc` does, as a library the tools and the tests share: read and
// validate model.json, import it, run the pass pipeline, and return the IR
// or every diagnostic, each located by JSON pointer.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_TOOLS_DRIVER_DRIVER_H
#define MIMO_TOOLS_DRIVER_DRIVER_H

#include "runtime/config/ModelConfig.h"
#include "runtime/json/Diagnostic.h"
#include "runtime/plan/PlanFile.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OwningOpRef.h"

#include <optional>
#include <string>
#include <vector>

namespace mimo {

/// Registers the dialects mimo's IR uses.
void registerMimoDialects(mlir::DialectRegistry &registry);

struct CompileOptions {
  /// Print the IR (with locations) to stderr after every pass.
  bool printIrAfterAll = false;
  /// Print the IR after the passes with these flags (e.g. mimo-assign-grids).
  std::vector<std::string> printIrAfter;
  /// Write the IR after import and after each pass as DIR/NN-<pass>.mlir.
  std::string dumpIrDir;
};

struct CompileResult {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::optional<ModelConfig> config;
  /// The verified plan (docs/plan.md) of the compiled model.
  std::optional<Plan> plan;
  /// Errors (and their notes); empty on success.
  std::vector<Diagnostic> diagnostics;

  bool succeeded() const { return module && diagnostics.empty(); }
};

/// Compiles model.json `text`; `file` names it in locations and messages.
CompileResult compileModel(mlir::MLIRContext &context, llvm::StringRef file,
                           llvm::StringRef text,
                           const CompileOptions &options = {});

/// Reads `path` and compiles it; an unreadable file is a diagnostic.
CompileResult compileModelFile(mlir::MLIRContext &context, llvm::StringRef path,
                               const CompileOptions &options = {});

/// The flags of the passes in pipeline order.
std::vector<std::string> pipelinePassNames();

/// Prints diagnostics as "FILE: POINTER: error: MESSAGE" lines.
void printDiagnostics(llvm::raw_ostream &os, llvm::StringRef file,
                      const std::vector<Diagnostic> &diagnostics);

} // namespace mimo

#endif // MIMO_TOOLS_DRIVER_DRIVER_H
