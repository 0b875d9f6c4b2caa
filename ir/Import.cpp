//===- Import.cpp - model.json -> mimo IR ---------------------------------===//

#include "ir/Import.h"

#include "ir/Locations.h"
#include "ir/MimoOps.h"
#include "runtime/config/Parameters.h"

#include "mlir/IR/Builders.h"

namespace mimo::ir {

mlir::OwningOpRef<mlir::ModuleOp> importModel(mlir::MLIRContext *context,
                                              const ModelConfig &config,
                                              llvm::StringRef file,
                                              const JsonLocator &locator) {
  context->getOrLoadDialect<MimoDialect>();
  auto loc = [&](const std::string &pointer) {
    SourcePosition position = locator.find(pointer);
    return pointerLoc(context, file, pointer,
                      static_cast<unsigned>(position.line),
                      static_cast<unsigned>(position.column));
  };
  mlir::OpBuilder builder(context);
  auto i64 = [&](int64_t value) { return builder.getI64IntegerAttr(value); };
  auto f64 = [&](double value) { return builder.getF64FloatAttr(value); };

  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc(""));
  builder.setInsertionPointToEnd(module->getBody());
  auto model = builder.create<ModelOp>(
      loc(""), builder.getStringAttr(config.name), i64(config.version),
      i64(config.seed), builder.getStringAttr(config.precision),
      config.worldSize ? i64(*config.worldSize) : mlir::IntegerAttr(),
      LayoutKindAttr(), mlir::IntegerAttr());
  builder.setInsertionPointToEnd(&model.getBody().emplaceBlock());

  std::vector<mlir::Value> grids;
  for (const ModuleConfig &module : config.modules) {
    const ParallelConfig &p = module.parallel;
    auto parallel = ParallelAttr::get(context, p.tp, p.cp, p.pp, p.dp,
                                      p.rankOffset, formatOrder(p.order),
                                      builder.getBoolAttr(p.sequenceParallel));
    mlir::DenseI64ArrayAttr split;
    if (!module.pipelineLayers.empty()) {
      // The layers each stage computes; model.json's counts where they do
      // not fit (mimo-assign-grids says why).
      std::vector<int64_t> counts = module.pipelineLayers;
      try {
        counts = stageLayerCounts(module, p.pp);
      } catch (const std::invalid_argument &) {
      }
      split = builder.getDenseI64ArrayAttr(counts);
    }
    grids.push_back(builder.create<GridOp>(loc(module.pointer + "/parallel"),
                                           GridType::get(context), parallel,
                                           nullptr, split));
  }

  const DataConfig &data = config.data;
  mlir::DictionaryAttr tokensPerSample;
  mlir::FloatAttr textOnlyFraction;
  if (data.source == "synthetic") {
    llvm::SmallVector<mlir::NamedAttribute> ranges;
    for (const auto &[name, range] : data.tokensPerSample)
      ranges.push_back(builder.getNamedAttr(
          name, builder.getDenseI64ArrayAttr({range.min, range.max})));
    tokensPerSample = builder.getDictionaryAttr(ranges);
    textOnlyFraction = f64(data.textOnlyFraction);
  }
  auto source = builder.create<DataSourceOp>(
      loc("/data"), SourceType::get(context),
      builder.getStringAttr(data.source),
      data.source != "synthetic" ? builder.getStringAttr(data.path)
                                 : mlir::StringAttr(),
      tokensPerSample, textOnlyFraction);

  const BatchConfig &b = config.batch;
  auto batch = builder.create<MicrobatchOp>(
      loc("/batch"), BatchType::get(context), source, i64(b.microBatchSize),
      i64(b.numMicrobatches), i64(b.seqLength), builder.getBoolAttr(b.packing),
      AttentionMaskKindAttr::get(context,
                                 symbolizeAttentionMaskKind(b.attentionMask)
                                     .value_or(AttentionMaskKind::Causal)),
      b.schedule != &defaultSchedule()
          ? builder.getStringAttr(std::string(b.schedule->name()))
          : mlir::StringAttr(),
      config.language().parallel.virtualStages > 1
          ? builder.getI64IntegerAttr(config.language().parallel.virtualStages)
          : mlir::IntegerAttr());

  const ModuleConfig &language = config.language();
  // parallel.etp, written only when it differs from tp.
  auto expertTp = [&](const ModuleConfig &module) {
    return module.hasMoe() && module.parallel.etp > 0
               ? builder.getI64IntegerAttr(module.parallel.etp)
               : mlir::IntegerAttr();
  };
  auto tokensType = TokensType::get(context, language.hiddenSize);
  llvm::SmallVector<mlir::Value> modalityInputs;
  llvm::SmallVector<mlir::Attribute> modalityNames;
  for (size_t i = 0; i < config.modules.size(); ++i) {
    const ModuleConfig &module = config.modules[i];
    if (module.kind != ModuleKind::Encoder)
      continue;
    auto arch = EncoderArchAttr::get(context, module.featureDim,
                                     module.hiddenSize, module.layers(),
                                     module.numHeads, module.ffnHiddenSize);
    auto encoder = builder.create<EncoderOp>(
        loc(module.pointer), tokensType, builder.getStringAttr(module.name),
        batch, grids[i], i64(module.specialTokenId), arch,
        runsForwardOnly(config, module) ? builder.getUnitAttr() : nullptr,
        module.hasMoe() ? builder.getI64IntegerAttr(module.parallel.ep)
                        : mlir::IntegerAttr(),
        expertTp(module));
    modalityInputs.push_back(encoder.getOutput());
    modalityNames.push_back(builder.getStringAttr(module.name));
  }

  auto languageArch = LanguageArchAttr::get(
      context, language.vocabSize, language.hiddenSize, language.numLayers,
      language.numHeads, language.ffnHiddenSize);
  auto languageOp = builder.create<LanguageOp>(
      loc(language.pointer), LossType::get(context),
      builder.getStringAttr(language.name), batch, modalityInputs,
      /*embeddings=*/mlir::Value(), /*targets=*/mlir::Value(),
      grids[config.languageIndex()], builder.getArrayAttr(modalityNames),
      languageArch,
      language.tieEmbeddings ? builder.getUnitAttr() : mlir::UnitAttr(),
      language.hasMoe() ? builder.getI64IntegerAttr(language.parallel.ep)
                        : mlir::IntegerAttr(),
      expertTp(language));

  const TrainConfig &t = config.train;
  builder.create<TrainOp>(loc("/train"), languageOp.getLoss(), i64(t.steps),
                          builder.getStringAttr(t.optimizer), f64(t.lr),
                          builder.getDenseF64ArrayAttr({t.beta1, t.beta2}),
                          f64(t.eps), f64(t.weightDecay), f64(t.clipGrad));
  return module;
}

} // namespace mimo::ir
