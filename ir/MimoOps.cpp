//===- MimoOps.cpp - Verifiers of the model-graph ops ---------------------===//
//
// Each verifier checks the structural invariants of one op; ModelOp checks
// the relations between modules. Layout-dependent checks (grid spans, lanes,
// divisibility by tp/pp/dp) belong to mimo-assign-grids.
//
//===----------------------------------------------------------------------===//

#include "ir/MimoOps.h"

#include "runtime/json/JsonValidator.h"
#include "runtime/schedule/PipelineSchedule.h"

#include "llvm/ADT/StringExtras.h"

#include "ir/Locations.h"
#include "runtime/plan/Plan.h"
#include "runtime/support/Limits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>

using namespace mlir;
using namespace mimo::ir;

#include "ir/MimoInterfaces.cpp.inc"

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
  if (getSource() != "synthetic" && getSource() != "jsonl" &&
      getSource() != "indexed")
    return emitOpError()
           << "source must be \"synthetic\", \"jsonl\" or \"indexed\", found \""
           << getSource() << "\"";
  if (getSource() != "synthetic" && !getPath())
    return emitOpError() << "a " << getSource() << " source needs a path";
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
  if (getPacking() && getAttentionMask() == AttentionMaskKind::Dense)
    return emitOpError() << "packing restricts attention to each sample and "
                            "cannot take a dense attention_mask";
  const PipelineSchedule *schedule = &defaultSchedule();
  if (auto name = getSchedule()) {
    schedule = findSchedule(name->str());
    if (!schedule) {
      std::vector<std::string> names;
      for (const PipelineSchedule *known : schedules())
        names.emplace_back(known->name());
      return emitOpError() << "schedule must be "
                           << JsonValidator::quoted(names) << ", found \""
                           << *name << "\"";
    }
  }
  auto chunks = getVirtualStages();
  if (schedule->chunked() != (chunks && *chunks >= 2))
    return emitOpError()
           << "virtual_stages (2 or more) goes with a schedule that runs the "
              "language layers in chunks, and such a schedule with it; found "
              "schedule \""
           << schedule->name() << "\"";
  return success();
}

//===----------------------------------------------------------------------===//
// EncoderOp, LanguageOp
//===----------------------------------------------------------------------===//

GridOp EncoderOp::getGridOp() { return getGrid().getDefiningOp<GridOp>(); }
GridOp LanguageOp::getGridOp() { return getGrid().getDefiningOp<GridOp>(); }

/// A sparse module's expert_parallel (dividing dp x cp) and
/// expert_tensor_parallel (dividing tp, with expert_parallel: on a sparse
/// module only), as the parser checks model.json's ep and etp.
template <typename ModuleOp> static LogicalResult verifyExperts(ModuleOp op) {
  GridOp grid = op.getGridOp();
  auto ep = op.getExpertParallel();
  auto etp = op.getExpertTensorParallel();
  if (etp && !ep)
    return op.emitOpError() << "expert_tensor_parallel needs sparse layers "
                               "(expert_parallel)";
  if (!grid)
    return success();
  ParallelAttr p = grid.getParallel();
  if (ep && (static_cast<int64_t>(*ep) < 1 ||
             (p.getDp() * p.getCp()) % static_cast<int64_t>(*ep) != 0))
    return op.emitOpError() << "expert_parallel " << static_cast<int64_t>(*ep)
                            << " must divide dp x cp " << p.getDp() * p.getCp();
  if (etp && (static_cast<int64_t>(*etp) < 1 ||
              p.getTp() % static_cast<int64_t>(*etp) != 0))
    return op.emitOpError()
           << "expert_tensor_parallel " << static_cast<int64_t>(*etp)
           << " must divide tp " << p.getTp();
  return success();
}

LogicalResult EncoderOp::verify() {
  if (static_cast<int64_t>(getSpecialTokenId()) < 0)
    return emitOpError() << "special_token_id must be non-negative, found "
                         << static_cast<int64_t>(getSpecialTokenId());
  if (GridOp grid = getGridOp())
    if (grid.getParallel().isSequenceParallel())
      return emitOpError()
             << "sequence_parallel applies to the language module only";
  return verifyExperts(*this);
}

LogicalResult LanguageOp::verify() {
  if (failed(verifyExperts(*this)))
    return failure();
  if (getEmbeddings() || getTargets()) {
    if (!getEmbeddings() || !getTargets())
      return emitOpError() << "takes embeddings and targets together";
    if (!getModalityInputs().empty())
      return emitOpError() << "takes either modality inputs or embeddings, "
                              "not both (mimo.embed places the modalities)";
    if (llvm::cast<HiddenType>(getEmbeddings().getType()).getHiddenSize() !=
        static_cast<int64_t>(getArch().getHiddenSize()))
      return emitOpError() << "embeddings must have the language hidden size "
                           << getArch().getHiddenSize();
    return success();
  }
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

//===----------------------------------------------------------------------===//
// Ops inserted by the passes
//===----------------------------------------------------------------------===//

LogicalResult DpSliceOp::verify() {
  int64_t lanes = static_cast<int64_t>(getLanes());
  int64_t per = static_cast<int64_t>(getSamplesPerLane());
  if (lanes < 1 || per < 1)
    return emitOpError() << "lanes and samples_per_lane must be at least 1";
  if (auto grid = getGrid().getDefiningOp<GridOp>())
    if (grid.getParallel().getDp() != lanes)
      return emitOpError() << "has " << lanes << " lanes but its grid has dp = "
                           << grid.getParallel().getDp();
  return success();
}

LogicalResult SplitSizesOp::verify() {
  int64_t samples = static_cast<int64_t>(getSamples());
  int64_t src = static_cast<int64_t>(getSrcLanes());
  int64_t dst = static_cast<int64_t>(getDstLanes());
  if (samples < 1 || src < 1 || dst < 1)
    return emitOpError() << "samples and lanes must be at least 1";
  if (samples % src != 0 || samples % dst != 0)
    return emitOpError() << "cannot cut " << samples
                         << " samples into whole lanes of " << src << " and "
                         << dst;
  if (static_cast<int64_t>(getSpecialTokenId()) < 0)
    return emitOpError() << "special_token_id must be non-negative";
  return success();
}

static LogicalResult verifyGroups(Operation *op, ArrayAttr groups,
                                  StringRef name) {
  for (Attribute group : groups)
    if (!llvm::isa<DenseI64ArrayAttr>(group))
      return op->emitOpError() << name << " must be a list of array<i64: ...>";
  return success();
}

LogicalResult BridgeOp::verify() {
  bool colocated = getMode() == BridgeModeKind::Colocated;
  if (static_cast<int64_t>(getRatio()) < 1)
    return emitOpError() << "ratio must be at least 1";
  int64_t ndim = static_cast<int64_t>(getTensorNdim());
  int64_t batchDim = static_cast<int64_t>(getBatchDim());
  if ((ndim != 2 && ndim != 3) || batchDim != (ndim == 2 ? 0 : 1))
    return emitOpError() << "tensor_ndim must be 2 (batch_dim 0) or 3 "
                            "(batch_dim 1)";
  if (getRoutes().size() % 2 != 0)
    return emitOpError() << "routes must hold from/to pairs";
  if (colocated) {
    if (!getDirection() || !getGatherGroups())
      return emitOpError() << "a colocated bridge needs direction and "
                              "gather_groups";
    if (failed(verifyGroups(*this, *getGatherGroups(), "gather_groups")))
      return failure();
  } else {
    int64_t ns = getSrcLeaders().size(), nd = getDstLeaders().size();
    if (ns == 0 || nd == 0 || (ns % nd != 0 && nd % ns != 0))
      return emitOpError() << "leader counts " << ns << " and " << nd
                           << " must divide one another";
    if (static_cast<int64_t>(getRoutes().size()) != 2 * std::max(ns, nd))
      return emitOpError() << "expected " << std::max(ns, nd)
                           << " routes, found " << getRoutes().size() / 2;
  }
  if (failed(verifyGroups(*this, getSrcBroadcastGroups(),
                          "src_broadcast_groups")) ||
      failed(
          verifyGroups(*this, getDstBroadcastGroups(), "dst_broadcast_groups")))
    return failure();
  return success();
}

LogicalResult CpShardOp::verify() {
  if (getScheme() != "zigzag")
    return emitOpError() << "scheme must be \"zigzag\", found \"" << getScheme()
                         << "\"";
  if (static_cast<int64_t>(getCp()) < 2)
    return emitOpError() << "cp must be at least 2 to shard";
  if (!llvm::isa<HiddenType, TargetsType>(getInput().getType()))
    return emitOpError() << "shards !mimo.hidden or !mimo.targets values";
  int64_t seqDim = static_cast<int64_t>(getSeqDim());
  if (seqDim != (llvm::isa<HiddenType>(getInput().getType()) ? 0 : 1))
    return emitOpError() << "seq_dim must be 0 for [S,B,H] hidden states "
                            "and 1 for [B,S] targets";
  return success();
}

LogicalResult SpScatterOp::verify() {
  if (static_cast<int64_t>(getTp()) < 2)
    return emitOpError() << "tp must be at least 2 to scatter";
  if (static_cast<int64_t>(getSeqDim()) != 0)
    return emitOpError() << "seq_dim must be 0 ([S,B,H])";
  return success();
}

LogicalResult StageOp::verify() {
  int64_t pp = static_cast<int64_t>(getPp());
  int64_t stage = static_cast<int64_t>(getStage());
  int64_t warmup = static_cast<int64_t>(getWarmup());
  int64_t steady = static_cast<int64_t>(getSteady());
  int64_t cooldown = static_cast<int64_t>(getCooldown());
  if (pp < 0 || stage < pp || warmup < 0 || steady < 0 || cooldown != warmup)
    return emitOpError() << "needs 0 <= pp <= stage, warmup >= 0, steady >= "
                            "0 and cooldown = warmup";
  if (auto lag = getWeightLag(); lag && static_cast<int64_t>(*lag) < 0)
    return emitOpError() << "needs weight_lag >= 0";
  if (auto chunks = getVirtualStages();
      chunks && (static_cast<int64_t>(*chunks) < 2 ||
                 static_cast<int64_t>(*chunks) > kMaxVirtualStages))
    return emitOpError() << "needs virtual_stages in [2, " << kMaxVirtualStages
                         << "]";
  return success();
}

/// An instruction carries exactly the attributes its kind declares.
template <typename OpT> static LogicalResult verifyInstruction(OpT op) {
  llvm::ArrayRef<llvm::StringRef> declared = OpT::getAttributeNames();
  for (NamedAttribute attribute : op->getAttrs()) {
    llvm::StringRef name = attribute.getName().getValue();
    if (!llvm::is_contained(declared, name)) {
      InFlightDiagnostic diag = op.emitOpError()
                                << "takes no attribute '" << name << "'";
      if (declared.empty())
        diag << " (it takes none)";
      else
        diag << " (it takes " << llvm::join(declared, ", ") << ")";
      return diag;
    }
  }
  return success();
}

#define MIMO_INSTRUCTION_VERIFIER(Op)                                          \
  LogicalResult Op::verify() { return verifyInstruction(*this); }
MIMO_INSTRUCTION_VERIFIER(ForwardOp)
MIMO_INSTRUCTION_VERIFIER(BackwardOp)
MIMO_INSTRUCTION_VERIFIER(WeightGradOp)
MIMO_INSTRUCTION_VERIFIER(ShardInstrOp)
MIMO_INSTRUCTION_VERIFIER(UnshardOp)
MIMO_INSTRUCTION_VERIFIER(SendActOp)
MIMO_INSTRUCTION_VERIFIER(RecvActOp)
MIMO_INSTRUCTION_VERIFIER(SendGradOp)
MIMO_INSTRUCTION_VERIFIER(RecvGradOp)
MIMO_INSTRUCTION_VERIFIER(BridgeSendOp)
MIMO_INSTRUCTION_VERIFIER(BridgeRecvOp)
MIMO_INSTRUCTION_VERIFIER(BridgeBroadcastOp)
MIMO_INSTRUCTION_VERIFIER(BridgeSendGradOp)
MIMO_INSTRUCTION_VERIFIER(BridgeRecvGradOp)
MIMO_INSTRUCTION_VERIFIER(BridgeBroadcastGradOp)
MIMO_INSTRUCTION_VERIFIER(ColocatedForwardOp)
MIMO_INSTRUCTION_VERIFIER(ColocatedBackwardOp)
MIMO_INSTRUCTION_VERIFIER(ReduceGradsOp)
MIMO_INSTRUCTION_VERIFIER(OptimizerStepOp)
#undef MIMO_INSTRUCTION_VERIFIER

LogicalResult ExchangeOp::verify() {
  for (Operation &op : getBody().front()) {
    auto instr = llvm::dyn_cast<InstructionOp>(op);
    if (!instr || !(mimo::instrInfo(instr.getInstr()).isSend ||
                    mimo::instrInfo(instr.getInstr()).isRecv))
      return op.emitOpError()
             << "cannot be posted in a mimo.exchange: only sends and "
                "receives can";
    if (op.hasAttr("posted"))
      return op.emitOpError()
             << "is posted: a posted message goes alone, outside any "
                "mimo.exchange";
  }
  return success();
}
