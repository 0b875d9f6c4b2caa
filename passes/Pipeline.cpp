//===- Pipeline.cpp - The mimo pass pipeline ------------------------------===//

#include "passes/Passes.h"

namespace mimo {

void buildMimoPipeline(mlir::OpPassManager &pm) {
  pm.addPass(createAssignGrids());
  pm.addPass(createSliceBatch());
  pm.addPass(createPropagateSplitSizes());
  pm.addPass(createInsertBridges());
  pm.addPass(createShardSequence());
  pm.addPass(createSchedule1F1B());
  pm.addPass(createScheduleZeroBubble());
  pm.addPass(createScheduleInterleaved());
  pm.addPass(createLowerToRanks());
  pm.addPass(createVerifyPlan());
}

} // namespace mimo
