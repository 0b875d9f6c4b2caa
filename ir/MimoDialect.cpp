//===- MimoDialect.cpp - The mimo dialect, types and attributes -----------===//

#include "ir/MimoDialect.h"
#include "ir/MimoOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mimo::ir;

#include "ir/MimoDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "ir/MimoTypes.cpp.inc"

#include "ir/MimoEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/MimoAttrs.cpp.inc"

BridgeModeKind mimo::ir::toIR(mimo::BridgeMode mode) {
  switch (mode) {
  case mimo::BridgeMode::FanIn:
    return BridgeModeKind::FanIn;
  case mimo::BridgeMode::FanOut:
    return BridgeModeKind::FanOut;
  case mimo::BridgeMode::OneToOne:
    return BridgeModeKind::OneToOne;
  case mimo::BridgeMode::Colocated:
    break;
  }
  return BridgeModeKind::Colocated;
}

mimo::BridgeMode mimo::ir::fromIR(BridgeModeKind mode) {
  switch (mode) {
  case BridgeModeKind::FanIn:
    return mimo::BridgeMode::FanIn;
  case BridgeModeKind::FanOut:
    return mimo::BridgeMode::FanOut;
  case BridgeModeKind::OneToOne:
    return mimo::BridgeMode::OneToOne;
  case BridgeModeKind::Colocated:
    break;
  }
  return mimo::BridgeMode::Colocated;
}

LayoutKind mimo::ir::toIR(mimo::Layout layout) {
  return layout == mimo::Layout::Colocated ? LayoutKind::Colocated
                                           : LayoutKind::NonColocated;
}

mimo::Layout mimo::ir::fromIR(LayoutKind layout) {
  return layout == LayoutKind::Colocated ? mimo::Layout::Colocated
                                         : mimo::Layout::NonColocated;
}

void MimoDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ir/MimoOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "ir/MimoTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "ir/MimoAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

LogicalResult TokensType::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t hiddenSize) {
  if (hiddenSize < 1)
    return emitError() << "token hidden size must be at least 1, found "
                       << hiddenSize;
  return success();
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

/// Checks that every named size is at least 1.
static LogicalResult
verifyPositive(function_ref<InFlightDiagnostic()> emitError,
               std::initializer_list<std::pair<const char *, int64_t>> sizes) {
  for (auto [name, value] : sizes)
    if (value < 1)
      return emitError() << name << " must be at least 1, found " << value;
  return success();
}

LogicalResult ParallelAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   int64_t tp, int64_t cp, int64_t pp,
                                   int64_t dp, int64_t rankOffset,
                                   StringRef order, BoolAttr sequenceParallel) {
  if (failed(verifyPositive(emitError,
                            {{"tp", tp}, {"cp", cp}, {"pp", pp}, {"dp", dp}})))
    return failure();
  if (rankOffset < 0)
    return emitError() << "rank_offset must be non-negative, found "
                       << rankOffset;
  std::string why;
  if (!mimo::parseOrder(std::string_view(order.data(), order.size()), &why))
    return emitError() << "order must name tp, cp, dp and pp once each, "
                          "joined by '-', found \""
                       << order << "\": " << why;
  if (!sequenceParallel)
    return emitError() << "sequence_parallel must be true or false";
  return success();
}

mimo::Grid ParallelAttr::getGrid() const {
  std::string_view order(getOrder().data(), getOrder().size());
  return mimo::Grid({getTp(), getCp(), getDp(), getPp()},
                    mimo::parseOrder(order).value_or(mimo::kDefaultOrder),
                    getRankOffset());
}

/// Shared by both architectures: positive sizes, heads dividing the width.
static LogicalResult
verifyTransformer(function_ref<InFlightDiagnostic()> emitError,
                  int64_t hiddenSize, int64_t numLayers, int64_t numHeads,
                  int64_t ffnHiddenSize) {
  if (failed(verifyPositive(emitError, {{"hidden_size", hiddenSize},
                                        {"num_layers", numLayers},
                                        {"num_heads", numHeads},
                                        {"ffn_hidden_size", ffnHiddenSize}})))
    return failure();
  if (hiddenSize % numHeads != 0)
    return emitError() << "hidden_size " << hiddenSize
                       << " is not divisible by num_heads " << numHeads;
  return success();
}

LogicalResult
EncoderArchAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        int64_t featureDim, int64_t hiddenSize,
                        int64_t numLayers, int64_t numHeads,
                        int64_t ffnHiddenSize) {
  if (failed(verifyPositive(emitError, {{"feature_dim", featureDim}})))
    return failure();
  return verifyTransformer(emitError, hiddenSize, numLayers, numHeads,
                           ffnHiddenSize);
}

LogicalResult
LanguageArchAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         int64_t vocabSize, int64_t hiddenSize,
                         int64_t numLayers, int64_t numHeads,
                         int64_t ffnHiddenSize) {
  if (failed(verifyPositive(emitError, {{"vocab_size", vocabSize}})) ||
      failed(verifyTransformer(emitError, hiddenSize, numLayers, numHeads,
                               ffnHiddenSize)))
    return failure();
  if ((hiddenSize / numHeads) % 2 != 0)
    return emitError() << "head size " << hiddenSize / numHeads
                       << " must be even for rotary embeddings";
  return success();
}
