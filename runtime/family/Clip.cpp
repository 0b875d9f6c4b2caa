//===- Clip.cpp - The CLIP vision tower family ----------------------------===//
//
// docs/model-json.md `"family": "clip"`: OpenAI CLIP's vision tower (LLaVA's
// usual one): biases, learned positions (the class token's row included),
// a class token dropped from the output, a pre-norm, no patch bias and no
// final norm on the rows passed on. Named, its defaults are CLIP's:
// quick_gelu, norm_eps 1e-5. Writes CLIPVisionModel.
//
//===----------------------------------------------------------------------===//

#include "runtime/family/VisionTower.h"

namespace mimo {

std::unique_ptr<ModuleFamily> makeClipFamily() {
  TowerStructure clip;
  clip.name = "clip";
  clip.label = "a CLIP vision tower";
  clip.hfModelType = "clip_vision_model";
  clip.hfArchitecture = "CLIPVisionModel";
  clip.hfModelTypes = {"clip_vision_model", "clip"};
  clip.classToken = true;
  clip.preNorm = true;
  clip.patchBias = false;
  clip.finalNormWhy = "CLIP's post_layernorm normalises only the pooled "
                      "class token, not the patch rows an encoder passes on";
  clip.activation = "quick_gelu";
  clip.normEps = 1e-5;
  return std::make_unique<HfTowerFamily>(std::move(clip));
}

} // namespace mimo
