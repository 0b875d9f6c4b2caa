//===- MimoOps.cpp - Verifiers of the model-graph ops ---------------------===//
//
// Each verifier checks the structural invariants of one op; ModelOp checks
// the relations between modules. Layout-dependent checks (grid spans, lanes,
// divisibility by tp/pp/dp) belong to mimo-assign-grids.
//
//===----------------------------------------------------------------------===//

#include "ir/MimoOps.h"

#include "ir/Locations.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>

using namespace mlir;
using namespace mimo::ir;

#define GET_OP_CLASSES
#include "ir/MimoOps.cpp.inc"

//===----------------------------------------------------------------------===//
// ModelOp
//===----------------------------------------------------------------------===//

LanguageOp ModelOp::getLanguage() {
  for (LanguageOp language : getBody().getOps<LanguageOp>())
    return language;
  return nullptr;
}

SmallVector<EncoderOp> ModelOp::getEncoders() {
  return llvm::to_vector(getBody().getOps<EncoderOp>());
}

MicrobatchOp ModelOp::getMicrobatch() {
  for (MicrobatchOp batch : getBody().getOps<MicrobatchOp>())
    return batch;
  return nullptr;
}

LogicalResult ModelOp::verify() {
  if (getVersion() != 1)
    return emitOpError() << "version must be 1, found " << getVersion();
  if (static_cast<int64_t>(getSeed()) < 0)
    return emitOpError() << "seed must be non-negative, found "
                         << static_cast<int64_t>(getSeed());
  if (getPrecision() != "fp32" && getPrecision() != "bf16")
    return emitOpError() << "precision must be \"fp32\" or \"bf16\", found \""
                         << getPrecision() << "\"";
  if (getWorldSize() && static_cast<int64_t>(*getWorldSize()) < 1)
    return emitOpError() << "world_size must be at least 1, found "
                         << static_cast<int64_t>(*getWorldSize());
  if (getLayout() && *getLayout() != "colocated" &&
      *getLayout() != "non_colocated")
    return emitOpError() << "layout must be \"colocated\" or "
                            "\"non_colocated\", found \""
                         << *getLayout() << "\"";
  return success();
}

/// Invariants across modules: one language module and one microbatch; unique
/// special token ids below the vocabulary; every modality input of the
/// language module names an encoder; tokens_per_sample names encoders.
LogicalResult ModelOp::verifyRegions() {
  auto languages = llvm::to_vector(getBody().getOps<LanguageOp>());
  if (languages.size() != 1)
    return emitOpError() << "must hold exactly one mimo.language, found "
                         << languages.size();
  LanguageOp language = languages.front();
  auto batches = llvm::to_vector(getBody().getOps<MicrobatchOp>());
  if (batches.size() != 1)
    return emitOpError() << "must hold exactly one mimo.microbatch, found "
                         << batches.size();

  llvm::DenseMap<int64_t, EncoderOp> byTokenId;
  llvm::StringSet<> encoderNames;
  for (EncoderOp encoder : getEncoders()) {
    encoderNames.insert(encoder.getSymName());
    auto [it, inserted] =
        byTokenId.try_emplace(encoder.getSpecialTokenId(), encoder);
    if (!inserted) {
      InFlightDiagnostic diag =
          mlir::emitError(fieldLoc(encoder.getLoc(), "special_token_id"))
          << "special_token_id " << encoder.getSpecialTokenId()
          << " of encoder '" << encoder.getSymName()
          << "' is already used by encoder '" << it->second.getSymName()
          << "'; give each modality its own token id";
      diag.attachNote(it->second.getLoc()) << "first used here";
      return diag;
    }
    int64_t vocab = language.getArch().getVocabSize();
    if (static_cast<int64_t>(encoder.getSpecialTokenId()) >= vocab)
      return mlir::emitError(fieldLoc(encoder.getLoc(), "special_token_id"))
             << "special_token_id " << encoder.getSpecialTokenId()
             << " of encoder '" << encoder.getSymName()
             << "' must be below the language vocab_size " << vocab;
  }
  for (Attribute name : language.getModalities()) {
    StringRef modality = llvm::cast<StringAttr>(name).getValue();
    if (!encoderNames.contains(modality))
      return language.emitOpError()
             << "modality '" << modality << "' is not an encoder of the model";
  }
  for (DataSourceOp source : getBody().getOps<DataSourceOp>())
    if (auto tokens = source.getTokensPerSample())
      for (NamedAttribute entry : *tokens)
        if (!encoderNames.contains(entry.getName().getValue()))
          return source.emitOpError()
                 << "tokens_per_sample names '" << entry.getName().getValue()
                 << "', which is not an encoder of the model";
  return success();
}

//===----------------------------------------------------------------------===//
// GridOp
//===----------------------------------------------------------------------===//

LogicalResult GridOp::verify() {
  auto span = getSpan();
  if (!span)
    return success();
  mimo::Grid grid = getGridArithmetic();
  if (span->size() != 2 || (*span)[0] != grid.rankOffset() ||
      (*span)[1] != grid.endRank())
    return emitOpError() << "span must be [rank_offset, rank_offset + "
                            "tp*cp*pp*dp) = ["
                         << grid.rankOffset() << ", " << grid.endRank() << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// DataSourceOp, MicrobatchOp
//===----------------------------------------------------------------------===//

LogicalResult DataSourceOp::verify() {
  if (getSource() != "synthetic" && getSource() != "jsonl")
    return emitOpError()
           << "source must be \"synthetic\" or \"jsonl\", found \""
           << getSource() << "\"";
  if (getSource() == "jsonl" && !getPath())
    return emitOpError() << "a jsonl source needs a path";
  if (getSource() == "synthetic" && getPath())
    return emitOpError() << "a synthetic source takes no path";
  if (auto tokens = getTokensPerSample())
    for (NamedAttribute entry : *tokens) {
      auto range = llvm::dyn_cast<DenseI64ArrayAttr>(entry.getValue());
      if (!range || range.size() != 2 || range[0] < 0 || range[0] > range[1])
        return emitOpError()
               << "tokens_per_sample '" << entry.getName().getValue()
               << "' must be array<i64: min, max> with 0 <= min <= max";
    }
  if (auto fraction = getTextOnlyFraction())
    if (!(fraction->convertToDouble() >= 0.0 &&
          fraction->convertToDouble() <= 1.0))
      return emitOpError() << "text_only_fraction must be in [0, 1]";
  return success();
}

LogicalResult MicrobatchOp::verify() {
  if (static_cast<int64_t>(getMicroBatchSize()) < 1 ||
      static_cast<int64_t>(getNumMicrobatches()) < 1)
    return emitOpError()
           << "micro_batch_size and num_microbatches must be at least 1";
  if (static_cast<int64_t>(getSeqLength()) < 2)
    return emitOpError() << "seq_length must be at least 2, found "
                         << static_cast<int64_t>(getSeqLength());
  if (getAttentionMask() != "causal" && getAttentionMask() != "dense")
    return emitOpError()
           << "attention_mask must be \"causal\" or \"dense\", found \""
           << getAttentionMask() << "\"";
  if (getPacking() && getAttentionMask() == "dense")
    return emitOpError() << "packing restricts attention to each sample and "
                            "cannot take a dense attention_mask";
  return success();
}

//===----------------------------------------------------------------------===//
// EncoderOp, LanguageOp
//===----------------------------------------------------------------------===//

GridOp EncoderOp::getGridOp() { return getGrid().getDefiningOp<GridOp>(); }
GridOp LanguageOp::getGridOp() { return getGrid().getDefiningOp<GridOp>(); }

LogicalResult EncoderOp::verify() {
  if (static_cast<int64_t>(getSpecialTokenId()) < 0)
    return emitOpError() << "special_token_id must be non-negative, found "
                         << static_cast<int64_t>(getSpecialTokenId());
  if (GridOp grid = getGridOp())
    if (grid.getParallel().isSequenceParallel())
      return emitOpError()
             << "sequence_parallel applies to the language module only";
  return success();
}

LogicalResult LanguageOp::verify() {
  if (getModalities().size() != getModalityInputs().size())
    return emitOpError() << "names " << getModalities().size()
                         << " modalities for " << getModalityInputs().size()
                         << " modality inputs";
  llvm::StringSet<> seen;
  int64_t hiddenSize = getArch().getHiddenSize();
  for (auto [name, input] : llvm::zip(getModalities(), getModalityInputs())) {
    StringRef modality = llvm::cast<StringAttr>(name).getValue();
    if (!seen.insert(modality).second)
      return emitOpError() << "modality '" << modality << "' appears twice";
    int64_t inputHidden =
        llvm::cast<TokensType>(input.getType()).getHiddenSize();
    if (inputHidden != hiddenSize)
      return emitOpError() << "modality '" << modality << "' has hidden size "
                           << inputHidden << " but the language hidden_size is "
                           << hiddenSize;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// TrainOp
//===----------------------------------------------------------------------===//

LogicalResult TrainOp::verify() {
  if (static_cast<int64_t>(getSteps()) < 1)
    return emitOpError() << "steps must be at least 1, found "
                         << static_cast<int64_t>(getSteps());
  if (getOptimizer() != "adamw")
    return emitOpError() << "optimizer must be \"adamw\", found \""
                         << getOptimizer() << "\"";
  double lr = getLr().convertToDouble(), eps = getEps().convertToDouble();
  if (!(lr > 0.0) || !(eps > 0.0))
    return emitOpError() << "lr and eps must be positive";
  ArrayRef<double> betas = getBetas();
  if (betas.size() != 2 || !(betas[0] >= 0 && betas[0] < 1) ||
      !(betas[1] >= 0 && betas[1] < 1))
    return emitOpError() << "betas must be two numbers in [0, 1)";
  if (!(getWeightDecay().convertToDouble() >= 0.0) ||
      !(getClipGrad().convertToDouble() >= 0.0))
    return emitOpError() << "weight_decay and clip_grad must be non-negative";
  return success();
}
