//===- Import.h - model.json -> mimo IR ------------------------*- C++ -*-===//

#ifndef MIMO_IR_IMPORT_H
#define MIMO_IR_IMPORT_H

#include "runtime/config/ModelConfig.h"
#include "runtime/json/JsonLocator.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace mimo::ir {

/// Builds the model graph of a validated `config` in a new builtin module:
/// one mimo.grid per module, the data source and microbatch, the encoders,
/// the language module and mimo.train. Every op is located at its value in
/// `file` (JSON pointer plus line:column from `locator`).
mlir::OwningOpRef<mlir::ModuleOp> importModel(mlir::MLIRContext *context,
                                              const ModelConfig &config,
                                              llvm::StringRef file,
                                              const JsonLocator &locator);

} // namespace mimo::ir

#endif // MIMO_IR_IMPORT_H
