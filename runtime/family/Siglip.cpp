//===- Siglip.cpp - The SigLIP vision tower family ------------------------===//
//
// docs/model-json.md `"family": "siglip"`: SigLIP's vision tower: biases,
// learned positions, a patch bias, no class token and no pre-norm; its
// post_layernorm is arch.final_norm (default false: the hidden states
// before it, as LLaVA-style models take them). Named, its defaults are
// SigLIP's: gelu_tanh, norm_eps 1e-6. Writes SiglipVisionModel.
//
//===----------------------------------------------------------------------===//

#include "runtime/family/VisionTower.h"

namespace mimo {

std::unique_ptr<ModuleFamily> makeSiglipFamily() {
  TowerStructure siglip;
  siglip.name = "siglip";
  siglip.label = "a SigLIP vision tower";
  siglip.hfModelType = "siglip_vision_model";
  siglip.hfArchitecture = "SiglipVisionModel";
  siglip.hfModelTypes = {"siglip_vision_model", "siglip"};
  siglip.classToken = false;
  siglip.preNorm = false;
  siglip.patchBias = true;
  siglip.activation = "gelu_tanh";
  siglip.normEps = 1e-6;
  return std::make_unique<HfTowerFamily>(std::move(siglip));
}

} // namespace mimo
