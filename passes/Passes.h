//===- Passes.h - The mimo compiler passes ---------------------*- C++ -*-===//

#ifndef MIMO_PASSES_PASSES_H
#define MIMO_PASSES_PASSES_H

#include "ir/MimoOps.h"

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace mimo {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// Adds the whole mimo pipeline (every pass that exists, in order) to `pm`.
void buildMimoPipeline(mlir::OpPassManager &pm);

} // namespace mimo

#endif // MIMO_PASSES_PASSES_H
