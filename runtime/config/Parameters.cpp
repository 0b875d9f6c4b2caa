//===- Parameters.cpp - Every parameter of the model, by name -------------===//

#include "runtime/config/Parameters.h"

#include "runtime/family/ModuleFamily.h"
#include "runtime/family/Moe.h"
#include "runtime/support/Random.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace mimo {

ParamBlock blockOf(const ParamSpec &spec, int64_t tp, int64_t tpRank,
                   int64_t etp) {
  if (spec.expert) {
    const ExpertTp cut = ExpertTp::of(tp, etp, tpRank);
    tp = cut.etp;
    tpRank = cut.slice;
  }
  switch (spec.layout) {
  case ParamLayout::ColumnParallel: {
    int64_t c = spec.cols / tp;
    return {0, spec.rows, tpRank * c, (tpRank + 1) * c};
  }
  case ParamLayout::RowParallel: {
    int64_t r = spec.rows / tp;
    return {tpRank * r, (tpRank + 1) * r, 0, spec.cols};
  }
  case ParamLayout::Replicated:
    break;
  }
  return {0, spec.rows, 0, spec.cols};
}

std::vector<float> initialValues(uint64_t seed, const ParamSpec &spec,
                                 const ParamBlock &block) {
  using exec::combine, exec::hashString, exec::symmetricUnit;
  const int64_t rows = block.rowEnd - block.rowBegin;
  const int64_t cols = block.colEnd - block.colBegin;
  const float scale = spec.scale > 0
                          ? spec.scale
                          : 1.0f / std::sqrt(static_cast<float>(spec.rows));
  std::vector<float> value(static_cast<size_t>(rows * cols));
  const uint64_t key =
      combine(combine(seed, hashString(spec.module)), hashString(spec.local));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float element = spec.init == ParamInit::Ones ? 1.0f : 0.0f;
      if (spec.init == ParamInit::Weight)
        element =
            scale *
            symmetricUnit(combine(
                key, static_cast<uint64_t>((block.rowBegin + i) * spec.cols +
                                           block.colBegin + j)));
      value[static_cast<size_t>(i * cols + j)] = element;
    }
  return value;
}

std::pair<int64_t, int64_t> stageLayers(int64_t layers, int64_t pp,
                                        int64_t ppRank) {
  if (pp < 1 || layers % pp != 0)
    throw std::invalid_argument(std::to_string(layers) +
                                " layers do not split into " +
                                std::to_string(pp) + " pipeline stages");
  int64_t per = layers / pp;
  return {ppRank * per, (ppRank + 1) * per};
}

std::string pipelineLayersRule(const std::string &module,
                               const std::vector<int64_t> &split,
                               int64_t numLayers, int64_t computed,
                               int64_t pp) {
  const std::string what = "pipeline_layers of " + module;
  if (static_cast<int64_t>(split.size()) != pp)
    return what + " gives " + std::to_string(split.size()) +
           " layer counts for pp " + std::to_string(pp) +
           "; give one count per pipeline stage";
  int64_t sum = 0, begin = 0;
  for (size_t s = 0; s < split.size(); ++s) {
    if (split[s] < 1)
      return what + " gives stage " + std::to_string(s) + " " +
             std::to_string(split[s]) +
             " layers; every stage holds at least one layer";
    if (split[s] > numLayers)
      return what + " gives stage " + std::to_string(s) + " " +
             std::to_string(split[s]) + " layers, more than num_layers " +
             std::to_string(numLayers) +
             "; make the counts add up to num_layers";
    sum += split[s];
  }
  if (sum != numLayers)
    return what + " adds up to " + std::to_string(sum) +
           " layers, not num_layers " + std::to_string(numLayers) +
           "; make the counts add up to num_layers";
  for (size_t s = 0; s < split.size(); ++s) {
    if (begin >= computed)
      return what + " leaves stage " + std::to_string(s) +
             " no layer to compute (only the first " +
             std::to_string(computed) + " of " + std::to_string(numLayers) +
             " are, up to output_layer); give the earlier stages fewer";
    begin += split[s];
  }
  return "";
}

std::vector<int64_t> stageLayerCounts(const ModuleConfig &module, int64_t pp) {
  const int64_t computed = module.layers();
  if (module.pipelineLayers.empty()) {
    auto [begin, end] = stageLayers(computed, pp, 0);
    return std::vector<int64_t>(static_cast<size_t>(pp), end - begin);
  }
  std::string problem =
      pipelineLayersRule("module '" + module.name + "'", module.pipelineLayers,
                         module.numLayers, computed, pp);
  if (!problem.empty())
    throw std::invalid_argument(problem);
  std::vector<int64_t> counts;
  int64_t begin = 0;
  for (int64_t n : module.pipelineLayers) {
    counts.push_back(std::min(begin + n, computed) - begin);
    begin += n;
  }
  return counts;
}

std::pair<int64_t, int64_t> stageLayers(const ModuleConfig &module, int64_t pp,
                                        int64_t ppRank) {
  std::vector<int64_t> counts = stageLayerCounts(module, pp);
  if (ppRank < 0 || ppRank >= pp)
    throw std::invalid_argument("pipeline stage " + std::to_string(ppRank) +
                                " of " + std::to_string(pp));
  int64_t begin = 0;
  for (int64_t s = 0; s < ppRank; ++s)
    begin += counts[static_cast<size_t>(s)];
  return {begin, begin + counts[static_cast<size_t>(ppRank)]};
}

std::vector<ParamSpec> stageParameters(const ModuleConfig &module,
                                       int64_t outputHidden,
                                       bool sequenceParallel, int64_t pp,
                                       int64_t ppRank) {
  // An encoder's layers after its output_layer are not computed (nor held).
  auto [begin, end] = stageLayers(module, pp, ppRank);
  StageSpan span;
  span.begin = begin, span.end = end;
  span.first = ppRank == 0, span.last = ppRank == pp - 1;
  span.outputHidden = outputHidden;
  span.sequenceParallel = sequenceParallel;
  std::vector<ParamSpec> out;
  module.family().declareParameters(module, module.name, span, out);
  if (module.lora)
    addLoraFactors(*module.lora, out);
  return out;
}

std::vector<ParamSpec> modelParameters(const ModelConfig &config) {
  std::vector<ParamSpec> all;
  const ModuleConfig &language = config.language();
  for (const ModuleConfig &module : config.modules)
    for (int64_t s = 0; s < module.parallel.pp; ++s) {
      std::vector<ParamSpec> stage = stageParameters(
          module, language.hiddenSize,
          module.parallel.sequenceParallel && module.parallel.tp > 1,
          module.parallel.pp, s);
      for (ParamSpec &spec : stage)
        if (!tiedCopy(module, spec.local, s))
          all.push_back(std::move(spec));
    }
  return all;
}

bool checkpointed(const ModuleConfig &module, const std::string &local) {
  return !module.lora || !module.frozen(local);
}

std::vector<ParamSpec> checkpointParameters(const ModelConfig &config) {
  std::vector<ParamSpec> out;
  for (ParamSpec &spec : modelParameters(config))
    for (const ModuleConfig &module : config.modules)
      if (module.name == spec.module && checkpointed(module, spec.local))
        out.push_back(std::move(spec));
  return out;
}

bool tiedCopy(const ModuleConfig &module, const std::string &local,
              int64_t ppRank) {
  return module.tieEmbeddings && ppRank > 0 && local == "embedding";
}

bool everyParameterFrozen(const ModelConfig &config,
                          const ModuleConfig &module) {
  // Under lora, freeze adds nothing: the adapters train (asked below).
  if (module.freezeAll && !module.lora)
    return true;
  if (module.freezePrefixes.empty() && !module.freezeBody && !module.lora)
    return false;
  int64_t outputHidden = config.language().hiddenSize;
  for (const ParamSpec &spec :
       stageParameters(module, outputHidden, false, 1, 0))
    if (!module.frozen(spec.local))
      return false;
  return true;
}

bool encoderBottomFrozen(const ModuleConfig &module) {
  const bool held[6] = {true,
                        module.patchBias,
                        module.classToken,
                        module.learnedPositions,
                        module.preNorm,
                        module.preNorm};
  const char *names[6] = {"patch.weight",    "patch.bias",
                          "class_token",     "position_embedding",
                          "pre_norm.weight", "pre_norm.bias"};
  for (int i = 0; i < 6; ++i)
    if (held[i] && !module.frozen(names[i]))
      return false;
  return true;
}

int64_t encoderFrozenLayers(const ModuleConfig &module) {
  if (module.kind != ModuleKind::Encoder || !encoderBottomFrozen(module))
    return 0;
  std::vector<bool> trains(static_cast<size_t>(module.layers()), false);
  for (const ParamSpec &spec : stageParameters(module, 1, false, 1, 0)) {
    const auto at = splitLayerName(spec.local); // ("3", "wq")
    if (!at || module.frozen(spec.local))
      continue;
    const int64_t layer = std::strtoll(at->first.c_str(), nullptr, 10);
    if (layer >= 0 && layer < module.layers())
      trains[static_cast<size_t>(layer)] = true;
  }
  int64_t frozen = 0;
  while (frozen < module.layers() && !trains[static_cast<size_t>(frozen)])
    ++frozen;
  return frozen;
}

bool runsForwardOnly(const ModelConfig &config, const ModuleConfig &module) {
  return module.kind == ModuleKind::Encoder &&
         everyParameterFrozen(config, module);
}

} // namespace mimo
