//===- InstructionOpsTest.cpp - The IR's instructions are the plan's -----===//
//
// The instruction set is declared twice by necessity (ODS ops for the IR,
// the InstrOp table for the plan and the runtime); this holds them to one
// another: one typed op per kind, named as the plan names it, mapping back
// to its kind, with exactly the attributes the kind's operands need.
//
//===----------------------------------------------------------------------===//

#include "ir/MimoOps.h"
#include "runtime/plan/Plan.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mimo;

namespace {

bool declares(mlir::OperationName name, llvm::StringRef attribute) {
  for (mlir::StringAttr declared : name.getAttributeNames())
    if (declared.getValue() == attribute)
      return true;
  return false;
}

TEST(InstructionOps, OneTypedOpPerPlanInstruction) {
  mlir::MLIRContext context;
  context.loadDialect<ir::MimoDialect>();
  int instructionOps = 0;
  for (mlir::RegisteredOperationName name : context.getRegisteredOperations())
    if (name.getDialectNamespace() == "mimo" &&
        name.hasInterface<ir::InstructionOp>())
      ++instructionOps;
  EXPECT_EQ(instructionOps, kNumInstrOps);

  for (int i = 0; i < kNumInstrOps; ++i) {
    InstrOp kind = static_cast<InstrOp>(i);
    const InstrInfo &info = instrInfo(kind);
    EXPECT_EQ(parseInstrOp(info.name), kind);
    std::optional<mlir::RegisteredOperationName> name =
        mlir::RegisteredOperationName::lookup(std::string("mimo.") + info.name,
                                              &context);
    ASSERT_TRUE(name) << info.name << " has no op in the mimo dialect";
    mlir::OperationState state(mlir::UnknownLoc::get(&context), *name);
    mlir::Operation *op = mlir::Operation::create(state);
    auto instruction = llvm::dyn_cast<ir::InstructionOp>(op);
    ASSERT_TRUE(instruction) << info.name;
    EXPECT_EQ(instruction.getInstr(), kind) << info.name;
    EXPECT_EQ(declares(*name, "module"), info.operand == InstrOperand::Module)
        << info.name;
    EXPECT_EQ(declares(*name, "bridge"), info.operand == InstrOperand::Bridge)
        << info.name;
    EXPECT_EQ(declares(*name, "mb"), info.hasMicrobatch) << info.name;
    op->destroy();
  }
}

} // namespace
