//===- Locations.h - IR locations that point into model.json ---*- C++ -*-===//
//
// An op imported from model.json is located at
//   loc("/modules/1"("model.json":12:5))
// i.e. a NameLoc whose name is the JSON pointer of the model.json value and
// whose child is its file position. Diagnostics about one field of that value
// extend the pointer ("/modules/1/parallel/tp") so tools can report
// `FILE: POINTER: error: ...`.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_IR_LOCATIONS_H
#define MIMO_IR_LOCATIONS_H

#include "mlir/IR/Location.h"

#include <optional>
#include <string>

namespace mimo::ir {

/// A location for the model.json value at `pointer`.
mlir::Location pointerLoc(mlir::MLIRContext *context, llvm::StringRef file,
                          llvm::StringRef pointer, unsigned line,
                          unsigned column);

/// `base` narrowed to the field `relative` (e.g. "parallel/tp") when `base`
/// points into a JSON document; otherwise `base` itself.
mlir::Location fieldLoc(mlir::Location base, llvm::StringRef relative);

struct PointerLocation {
  std::string file;
  std::string pointer;
  unsigned line = 0, column = 0;
};

/// The JSON pointer and file of `loc` when it was made by pointerLoc (or
/// fieldLoc); looks through fused and call-site locations.
std::optional<PointerLocation> getPointerLocation(mlir::Location loc);

} // namespace mimo::ir

#endif // MIMO_IR_LOCATIONS_H
