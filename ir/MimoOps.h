//===- MimoOps.h - The model-graph ops of the mimo dialect -----*- C++ -*-===//

#ifndef MIMO_IR_MIMOOPS_H
#define MIMO_IR_MIMOOPS_H

#include "ir/MimoDialect.h"
#include "runtime/plan/Plan.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mimo::ir {
class EncoderOp;
class LanguageOp;
class MicrobatchOp;
class ProgramOp;
class ExchangeOp;
} // namespace mimo::ir

#include "ir/MimoInterfaces.h.inc"

#define GET_OP_CLASSES
#include "ir/MimoOps.h.inc"

#endif // MIMO_IR_MIMOOPS_H
