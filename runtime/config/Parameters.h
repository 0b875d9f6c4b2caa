//===- Parameters.h - Every parameter of the model, by name -----*- C++ -*-===//
//
// The one list of the model's parameters: for each pipeline stage of each
// module, in declaration order, its logical name ("language.layers.3.gate":
// the same in every layout, and what seeds its initial values), its global
// shape, how tensor parallelism cuts it, and how it is initialised. The
// model builds its stages from it (model/Model.cpp), checkpoints name and
// shape their tensors by it, and the memory plan counts it.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CONFIG_PARAMETERS_H
#define MIMO_RUNTIME_CONFIG_PARAMETERS_H

#include "runtime/config/ModelConfig.h"
#include "runtime/family/ParamSpec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mimo {

/// TP rank `tpRank`'s block [rowBegin, rowEnd) x [colBegin, colEnd) of a
/// parameter; an expert's is its cut over `etp` of the tp ranks
/// (family/Moe.h ExpertTp: cut tpRank % etp; etp 0: tp).
struct ParamBlock {
  int64_t rowBegin = 0, rowEnd = 0, colBegin = 0, colEnd = 0;
  int64_t size() const { return (rowEnd - rowBegin) * (colEnd - colBegin); }
};
ParamBlock blockOf(const ParamSpec &spec, int64_t tp, int64_t tpRank,
                   int64_t etp);

/// The initial values of `block` of `spec` (docs/model.md "Parameters and
/// initialisation"), row-major: a pure function of (seed, module, name,
/// global index), so every layout, and an export of a LoRA base made from
/// the seed, has the same bits.
std::vector<float> initialValues(uint64_t seed, const ParamSpec &spec,
                                 const ParamBlock &block);

/// The layers [begin, end) of pipeline stage `ppRank` of `pp` when
/// `layers` split evenly.
std::pair<int64_t, int64_t> stageLayers(int64_t layers, int64_t pp,
                                        int64_t ppRank);

/// "" when `split` (model.json `pipeline_layers`, summing to `numLayers`)
/// gives each of `pp` stages at least one of the `computed` first layers
/// (an encoder computes none past its output_layer), else why not and the
/// fix. `module`: "encoder 'images'" or "language module 'language'".
std::string pipelineLayersRule(const std::string &module,
                               const std::vector<int64_t> &split,
                               int64_t numLayers, int64_t computed, int64_t pp);

/// The layers each of `pp` pipeline stages of `module` computes, first to
/// last: its `pipeline_layers` cut at the layers computed, or layers() / pp
/// each. Throws std::invalid_argument when they do not fit.
std::vector<int64_t> stageLayerCounts(const ModuleConfig &module, int64_t pp);

/// The layers [begin, end) of pipeline stage `ppRank` of `module` split
/// over `pp` stages (stageLayerCounts).
std::pair<int64_t, int64_t> stageLayers(const ModuleConfig &module, int64_t pp,
                                        int64_t ppRank);

/// The parameters of pipeline stage `ppRank` of `pp` of `module` (global
/// shapes), in declaration order. `outputHidden`: an encoder's projection
/// width (the language hidden size); `sequenceParallel`: whether the
/// language module runs SP (with tp > 1).
std::vector<ParamSpec> stageParameters(const ModuleConfig &module,
                                       int64_t outputHidden,
                                       bool sequenceParallel, int64_t pp,
                                       int64_t ppRank);

/// Every parameter of the model: each module's stages in order.
std::vector<ParamSpec> modelParameters(const ModelConfig &config);

/// Whether checkpoints hold parameter `local` of `module`
/// (docs/checkpoints.md): every one but a LoRA module's frozen base, which
/// a run takes from the module's `init` (or makes from the seed) again.
bool checkpointed(const ModuleConfig &module, const std::string &local);

/// The parameters checkpoints hold: modelParameters, checkpointed.
std::vector<ParamSpec> checkpointParameters(const ModelConfig &config);

/// Whether every parameter of `module` is frozen (docs/model-json.md
/// `freeze`).
bool everyParameterFrozen(const ModelConfig &config,
                          const ModuleConfig &module);

/// Whether parameter `local` of pipeline stage `ppRank` is the copy of a
/// tied embedding the last stage holds for its head (docs/model.md): the
/// model has it once, on the first stage (checkpoints, the gradient norm).
bool tiedCopy(const ModuleConfig &module, const std::string &local,
              int64_t ppRank);

/// Whether `module` runs forward only: an encoder (nothing is upstream of
/// it) whose every parameter is frozen. Its backward, its pipeline's and
/// bridges' gradient messages and its gradient reduction are left out of
/// the programs.
bool runsForwardOnly(const ModelConfig &config, const ModuleConfig &module);

/// Whether everything an encoder's first stage holds below its layers is
/// frozen (the patch embedding, and the class token, position embeddings
/// and pre_norm it has): then its backward stops at its lowest layer with
/// something trainable at or under it.
bool encoderBottomFrozen(const ModuleConfig &module);
/// The encoder's lowest layers that run no backward: with its bottom
/// frozen (encoderBottomFrozen), layers 0, 1, ... while every parameter a
/// layer has is frozen (its biases, every expert of a sparse layer,
/// whichever rank holds it; a layer with LoRA adapters trains them); 0
/// otherwise. The runtime, the FLOPs and the cost model all stop here.
int64_t encoderFrozenLayers(const ModuleConfig &module);

} // namespace mimo

#endif // MIMO_RUNTIME_CONFIG_PARAMETERS_H
