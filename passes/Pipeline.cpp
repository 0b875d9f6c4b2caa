//===- Pipeline.cpp - The mimo pass pipeline ------------------------------===//

#include "passes/Passes.h"

namespace mimo {

void buildMimoPipeline(mlir::OpPassManager &pm) {
  pm.addPass(createAssignGrids());
}

} // namespace mimo
