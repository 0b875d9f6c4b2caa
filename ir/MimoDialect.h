//===- MimoDialect.h - The mimo dialect, types and attributes --*- C++ -*-===//

#ifndef MIMO_IR_MIMODIALECT_H
#define MIMO_IR_MIMODIALECT_H

#include "runtime/config/Grid.h"
#include "runtime/plan/Topology.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "ir/MimoDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "ir/MimoTypes.h.inc"

#include "ir/MimoEnums.h.inc"

namespace mimo::ir {
/// The IR's enumerations and the runtime's (runtime/config and runtime/plan),
/// one to one.
BridgeModeKind toIR(BridgeMode mode);
BridgeMode fromIR(BridgeModeKind mode);
LayoutKind toIR(Layout layout);
Layout fromIR(LayoutKind layout);
} // namespace mimo::ir

#define GET_ATTRDEF_CLASSES
#include "ir/MimoAttrs.h.inc"

#endif // MIMO_IR_MIMODIALECT_H
