//===- MimoDialect.h - The mimo dialect, types and attributes --*- C++ -*-===//

#ifndef MIMO_IR_MIMODIALECT_H
#define MIMO_IR_MIMODIALECT_H

#include "runtime/core/Grid.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "ir/MimoDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "ir/MimoTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/MimoAttrs.h.inc"

#endif // MIMO_IR_MIMODIALECT_H
