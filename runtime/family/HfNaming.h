//===- HfNaming.h - Hugging Face folders: names and layouts ----*- C++ -*-===//
//
// What the module families (family/ModuleFamily.h) name Hugging Face
// tensors and config values with: a tensor's name and orientation, the
// prefixes a folder's layout puts before each part (a model's own folder,
// or a LLaVA folder's, before or since transformers 4.52), and the small
// translations several families share.
// Linear weights are [out, in] there and [in, out] in mimo (transposed);
// the patch embedding is a convolution's [hidden, C, p, p], which is the
// [hidden, C·p·p] of the patch rows' (channel, row, col) order.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_FAMILY_HFNAMING_H
#define MIMO_RUNTIME_FAMILY_HFNAMING_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace mimo {

/// The Hugging Face tensor a mimo parameter comes from, and whether it is
/// stored transposed there ([out, in] against mimo's [in, out]).
struct HfSource {
  std::string name;
  bool transposed = false;
  /// A stacked tensor holding many parameters (transformers 5's fused
  /// experts): the parameter is part `part` of `parts` equal parts of slab
  /// `slab` along the first dimension, each part a [out, in] (transposed)
  /// block of the parameter's own size; -1: the tensor is the parameter.
  int64_t slab = -1, part = 0, parts = 1;
};

/// Where a folder's names begin: a language model's body (embed_tokens,
/// layers, norm) and head (lm_head), a vision tower's, LLaVA's projector's
/// ("" when the folder has none).
struct HfLayout {
  std::string languageBody = "model.", languageHead = "";
  std::string vision = "vision_model.", projector = "";
  /// A sparse MLP as transformers 5 holds it: `mlp.gate` the router (also
  /// Mixtral's), `mlp.experts.gate_up_proj` [experts, 2F, H] (each expert's
  /// gate rows, then its up rows) and `mlp.experts.down_proj` [experts, H,
  /// F], rather than a tensor per expert and linear layer.
  bool fusedExperts = false;
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

/// How a family sees a tensor of a folder that is not one of its
/// parameters' sources.
enum class HfClaim {
  Others, ///< another module's (a LLaVA folder's other part), or no one's
  Ours,   ///< the module's, and mimo has no parameter for it: an error
  Unused, ///< the module's, and read past (a cached buffer, a later layer)
};

/// mimo's "layers.L.NAME" as (L, NAME); nullopt for another name.
std::optional<std::pair<std::string, std::string>>
splitLayerName(const std::string &local);

/// The integer square root of n, or -1 when n is not a positive square.
int64_t exactSquareRoot(int64_t n);

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

/// Ends a config.json mimo writes: its torch_dtype ("bfloat16" for
/// "bf16", else "float32") and the transformers_version it is written for.
void stampHfConfig(nlohmann::ordered_json &config, const std::string &dtype);

} // namespace mimo

#endif // MIMO_RUNTIME_FAMILY_HFNAMING_H
