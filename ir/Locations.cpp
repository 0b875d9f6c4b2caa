//===- Locations.cpp - IR locations that point into model.json ------------===//

#include "ir/Locations.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"

namespace mimo::ir {

static bool isPointer(llvm::StringRef name) {
  return name.empty() || name.starts_with("/");
}

mlir::Location pointerLoc(mlir::MLIRContext *context, llvm::StringRef file,
                          llvm::StringRef pointer, unsigned line,
                          unsigned column) {
  auto position = mlir::FileLineColLoc::get(context, file, line, column);
  return mlir::NameLoc::get(mlir::StringAttr::get(context, pointer), position);
}

mlir::Location fieldLoc(mlir::Location base, llvm::StringRef relative) {
  auto name = llvm::dyn_cast<mlir::NameLoc>(base);
  if (!name || !isPointer(name.getName().getValue()))
    return base;
  std::string pointer = (name.getName().getValue() + "/" + relative).str();
  return mlir::NameLoc::get(mlir::StringAttr::get(base.getContext(), pointer),
                            name.getChildLoc());
}

std::optional<PointerLocation> getPointerLocation(mlir::Location loc) {
  if (auto name = llvm::dyn_cast<mlir::NameLoc>(loc)) {
    auto position = llvm::dyn_cast<mlir::FileLineColLoc>(name.getChildLoc());
    if (!position || !isPointer(name.getName().getValue()))
      return std::nullopt;
    return PointerLocation{position.getFilename().str(),
                           name.getName().getValue().str(), position.getLine(),
                           position.getColumn()};
  }
  if (auto fused = llvm::dyn_cast<mlir::FusedLoc>(loc)) {
    for (mlir::Location inner : fused.getLocations())
      if (auto found = getPointerLocation(inner))
        return found;
  }
  if (auto callSite = llvm::dyn_cast<mlir::CallSiteLoc>(loc))
    return getPointerLocation(callSite.getCallee());
  return std::nullopt;
}

} // namespace mimo::ir
