//===- HfNames.h - mimo's parameters under Hugging Face names --*- C++ -*-===//
//
// docs/pretrained.md's name maps, one table each, read by the importer
// (checkpoint/HfWeights.h) and the exporter (checkpoint/HfExport.h):
// - the language model: LlamaForCausalLM's (and Mistral's, Qwen2's) names;
// - an encoder: CLIPVisionModel's and SiglipVisionModel's names, and
//   LLaVA's projector (multi_modal_projector.linear_1, linear_2);
// each under the prefixes of a layout (HfLayout: a model's own folder, or
// a LLaVA folder's, before or since transformers 4.52).
// Linear weights are [out, in] there and [in, out] in mimo (transposed);
// the patch embedding is a convolution's [hidden, C, p, p], which is the
// [hidden, C·p·p] of the patch rows' (channel, row, col) order.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CHECKPOINT_HFNAMES_H
#define MIMO_RUNTIME_CHECKPOINT_HFNAMES_H

#include "runtime/config/ModelConfig.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mimo::exec {

/// The Hugging Face tensor a mimo parameter comes from, and whether it is
/// stored transposed there ([out, in] against mimo's [in, out]).
struct HfSource {
  std::string name;
  bool transposed = false;
};

/// Where a folder's names begin: a language model's body (embed_tokens,
/// layers, norm) and head (lm_head), a vision tower's, LLaVA's projector's
/// ("" when the folder has none).
struct HfLayout {
  std::string languageBody = "model.", languageHead = "";
  std::string vision = "vision_model.", projector = "";
  /// A LLaVA folder as transformers before 4.52 writes it (and every
  /// version reads): language_model.model.*, language_model.lm_head,
  /// vision_tower.vision_model.*, multi_modal_projector.*. mimo's export.
  static HfLayout llavaBefore452() {
    return {"language_model.model.", "language_model.",
            "vision_tower.vision_model.", "multi_modal_projector."};
  }
  /// Since 4.52: model.language_model.*, lm_head,
  /// model.vision_tower.vision_model.*, model.multi_modal_projector.*.
  static HfLayout llavaSince452() {
    return {"model.language_model.", "", "model.vision_tower.vision_model.",
            "model.multi_modal_projector."};
  }
};

/// The language module's parameter `local` (docs/model.md's names);
/// nullopt for a name no Llama tensor holds.
std::optional<HfSource> hfLanguageSource(const HfLayout &layout,
                                         const std::string &local);

/// An encoder's parameter `local`: the tower's, the projector's (nullopt
/// for the projector when the layout has none: the projector starts from
/// mimo's init).
std::optional<HfSource> hfVisionSource(const HfLayout &layout,
                                       const std::string &local);

/// Whether a tensor of the vision tower (its name less the prefix) is one
/// the encoder does not compute: the layers after its output_layer, the
/// post-layernorm without final_norm, SigLIP's pooling head, a cached
/// position_ids buffer. Such tensors are read past, not refused.
bool hfVisionUnused(const std::string &local, const ModuleConfig &module);

/// The two vision families mimo reads and writes.
enum class VisionFamily { Clip, Siglip };

/// The family whose structure the encoder's arch has (CLIP: class token,
/// pre-norm, no patch bias, no final norm; SigLIP: none of the first two,
/// a patch bias), with biases and learned positions on a square grid;
/// nullopt with `why` otherwise.
std::optional<VisionFamily> visionFamilyOf(const ModuleConfig &module,
                                           std::string &why);

/// The channels and patch size of a feature row of `featureDim` values,
/// as an exporter names them (3 channels when featureDim is 3·p², else 1
/// when it is p², else featureDim channels of 1×1 patches).
struct PatchGeometry {
  int64_t channels = 3, patch = 1;
};
PatchGeometry patchGeometryOf(int64_t featureDim);

/// Hugging Face's names of an activation ("gelu_pytorch_tanh", "gelu",
/// "quick_gelu") for mimo's ("gelu_tanh", "gelu", "quick_gelu"), and back
/// ("" for one mimo does not compute).
std::string hfActivationName(const std::string &mimo);
std::string mimoActivationName(const std::string &hf);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_CHECKPOINT_HFNAMES_H
