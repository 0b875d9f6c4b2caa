//===- Parameters.cpp - Every parameter of the model, by name -------------===//

#include "runtime/config/Parameters.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace mimo {

ParamBlock blockOf(const ParamSpec &spec, int64_t tp, int64_t tpRank) {
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

namespace {

/// Adds parameters named "module.name" to a list.
struct Declare {
  const std::string &module;
  std::vector<ParamSpec> &out;
  void operator()(const std::string &name, int64_t rows, int64_t cols,
                  ParamLayout layout, ParamInit init = ParamInit::Weight,
                  float scale = 0, bool partialUnderSp = false) {
    out.push_back(
        {module, name, rows, cols, layout, init, scale, partialUnderSp});
  }
};

} // namespace

std::vector<ParamSpec> stageParameters(const ModuleConfig &module,
                                       int64_t outputHidden,
                                       bool sequenceParallel, int64_t pp,
                                       int64_t ppRank) {
  std::vector<ParamSpec> out;
  Declare add{module.name, out};
  const int64_t H = module.hiddenSize, F = module.ffnHiddenSize;
  const bool first = ppRank == 0, last = ppRank == pp - 1;
  // An encoder's layers after its output_layer are not computed (nor held).
  auto [begin, end] = stageLayers(module, pp, ppRank);
  using L = ParamLayout;
  using I = ParamInit;
  const int64_t KV = module.kvHidden(); // H unless grouped-query attention
  // Biases (docs/model.md): of a column-parallel weight split with its
  // columns; of a row-parallel one (added once to the summed output)
  // replicated, its gradient partial over TP under SP (as the norms').
  const bool qkvBias = module.qkvBias || module.bias;
  auto attention = [&](const std::string &p) {
    // Q, K and V split by heads (column-parallel; K and V by their groups
    // under GQA, which TP divides), the output projection by the same
    // heads (row-parallel).
    add(p + "wq", H, H, L::ColumnParallel);
    add(p + "wk", H, KV, L::ColumnParallel);
    add(p + "wv", H, KV, L::ColumnParallel);
    add(p + "wo", H, H, L::RowParallel);
    if (qkvBias) {
      add(p + "bq", 1, H, L::ColumnParallel, I::Zeros);
      add(p + "bk", 1, KV, L::ColumnParallel, I::Zeros);
      add(p + "bv", 1, KV, L::ColumnParallel, I::Zeros);
    }
    if (module.bias)
      add(p + "bo", 1, H, L::Replicated, I::Zeros, 0, sequenceParallel);
  };
  if (module.kind == ModuleKind::Language) {
    const bool sp = sequenceParallel;
    const int64_t V = module.vocabSize;
    // Vocab-parallel: each TP rank its rows of the vocabulary. Tied, the
    // embedding is the head too, initialised as the head would be (fan-in
    // H): at scale 1 the first logits would be ~√H wide.
    if (first)
      add("embedding", V, H, L::RowParallel, I::Weight,
          module.tieEmbeddings ? 1.0f / std::sqrt(static_cast<float>(H))
                               : 1.0f);
    for (int64_t l = begin; l < end; ++l) {
      std::string p = "layers." + std::to_string(l) + ".";
      add(p + "attn_norm", 1, H, L::Replicated, I::Ones, 0, sp);
      attention(p);
      add(p + "mlp_norm", 1, H, L::Replicated, I::Ones, 0, sp);
      add(p + "gate", H, F, L::ColumnParallel);
      add(p + "up", H, F, L::ColumnParallel);
      add(p + "down", F, H, L::RowParallel);
    }
    if (last) {
      add("final_norm", 1, H, L::Replicated, I::Ones, 0, sp);
      if (!module.tieEmbeddings)              // tied: the embedding's transpose
        add("head", H, V, L::ColumnParallel); // vocab-parallel logits
      else if (!first) // the embedding's copy (docs/model.md: tied across PP)
        add("embedding", V, H, L::RowParallel, I::Weight,
            1.0f / std::sqrt(static_cast<float>(H)));
    }
    return out;
  }
  const int64_t D = module.featureDim, O = outputHidden;
  if (first) {
    add("patch.weight", D, H, L::Replicated);
    if (module.patchBias)
      add("patch.bias", 1, H, L::Replicated, I::Zeros);
    if (module.classToken)
      add("class_token", 1, H, L::Replicated, I::Weight,
          1.0f / std::sqrt(static_cast<float>(H)));
    if (module.learnedPositions)
      add("position_embedding", module.maxPositions, H, L::Replicated,
          I::Weight, 0.02f);
    if (module.preNorm) {
      add("pre_norm.weight", 1, H, L::Replicated, I::Ones);
      add("pre_norm.bias", 1, H, L::Replicated, I::Zeros);
    }
  }
  for (int64_t l = begin; l < end; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    add(p + "ln1.weight", 1, H, L::Replicated, I::Ones);
    add(p + "ln1.bias", 1, H, L::Replicated, I::Zeros);
    attention(p);
    add(p + "ln2.weight", 1, H, L::Replicated, I::Ones);
    add(p + "ln2.bias", 1, H, L::Replicated, I::Zeros);
    add(p + "fc1", H, F, L::ColumnParallel);
    add(p + "fc2", F, H, L::RowParallel);
    if (module.bias) {
      add(p + "fc1_bias", 1, F, L::ColumnParallel, I::Zeros);
      add(p + "fc2_bias", 1, H, L::Replicated, I::Zeros);
    }
  }
  if (last) {
    if (module.finalNorm) {
      add("final_norm.weight", 1, H, L::Replicated, I::Ones);
      add("final_norm.bias", 1, H, L::Replicated, I::Zeros);
    }
    // projector "linear": fc1 alone.
    add("projection.fc1.weight", H, O, L::Replicated);
    add("projection.fc1.bias", 1, O, L::Replicated, I::Zeros);
    if (!module.linearProjector) {
      add("projection.fc2.weight", O, O, L::Replicated);
      add("projection.fc2.bias", 1, O, L::Replicated, I::Zeros);
    }
  }
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

bool tiedCopy(const ModuleConfig &module, const std::string &local,
              int64_t ppRank) {
  return module.tieEmbeddings && ppRank > 0 && local == "embedding";
}

bool everyParameterFrozen(const ModelConfig &config,
                          const ModuleConfig &module) {
  if (module.freezeAll)
    return true;
  if (module.freezePrefixes.empty() && !module.freezeBody)
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

bool runsForwardOnly(const ModelConfig &config, const ModuleConfig &module) {
  return module.kind == ModuleKind::Encoder &&
         everyParameterFrozen(config, module);
}

} // namespace mimo
