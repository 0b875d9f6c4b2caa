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

/// docs/plan.md checks of the language module's sequence sharding (shared by
/// mimo-assign-grids, which reports every error of a model at once, and
/// mimo-shard-sequence): seq_length divisible by 2·cp[·tp] (or tp with SP)
/// unless packing, and no dense mask with cp > 1.
mlir::LogicalResult checkSequenceSharding(ir::GridOp grid,
                                          ir::MicrobatchOp batch,
                                          llvm::StringRef module);

/// Adds the whole mimo pipeline (every pass that exists, in order) to `pm`.
void buildMimoPipeline(mlir::OpPassManager &pm);

} // namespace mimo

#endif // MIMO_PASSES_PASSES_H
