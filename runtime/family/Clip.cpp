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

namespace {

class ClipFamily final : public VisionTowerFamily {
public:
  std::string_view name() const override { return "clip"; }
  std::string_view label() const override { return "a CLIP vision tower"; }
  void setDefaults(ModuleArch &arch) const override {
    arch.bias = true;
    arch.learnedPositions = true;
    arch.classToken = true;
    arch.preNorm = true;
    arch.patchBias = false;
    arch.finalNorm = false;
    arch.activation = "quick_gelu";
    arch.normEps = 1e-5;
  }
  std::optional<ArchProblem>
  structureProblem(const ModuleArch &a) const override {
    if (!a.bias)
      return needs("bias", "has biases");
    if (!a.learnedPositions)
      return needs("position_embeddings", "learns its position embeddings");
    if (!a.classToken)
      return needs("class_token", "has a class token");
    if (!a.preNorm)
      return needs("pre_norm", "has a pre-norm");
    if (a.patchBias)
      return needs("patch_bias", "has no patch bias");
    if (a.finalNorm)
      return needs("final_norm",
                   "passes on its rows before post_layernorm (which "
                   "normalises only the pooled class token)");
    return std::nullopt;
  }
  std::string hfExportProblem(const ModuleArch &arch) const override {
    return gridProblem(arch);
  }

protected:
  std::string hfModelType() const override { return "clip_vision_model"; }
  std::string hfArchitecture() const override { return "CLIPVisionModel"; }
};

} // namespace

std::unique_ptr<ModuleFamily> makeClipFamily() {
  return std::make_unique<ClipFamily>();
}

} // namespace mimo
