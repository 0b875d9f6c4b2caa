//===- mimo-opt.cpp - mlir-opt with the mimo dialect and passes -----------===//

#include "passes/Passes.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mimo::ir::MimoDialect>();
  mimo::registerMimoPasses();
  mlir::PassPipelineRegistration<>(
      "mimo-pipeline", "Run every mimo pass in order",
      [](mlir::OpPassManager &pm) { mimo::buildMimoPipeline(pm); });
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "mimo optimizer driver\n", registry));
}
