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

namespace {

class SiglipFamily final : public VisionTowerFamily {
public:
  std::string_view name() const override { return "siglip"; }
  std::string_view label() const override { return "a SigLIP vision tower"; }
  void setDefaults(ModuleArch &arch) const override {
    arch.bias = true;
    arch.learnedPositions = true;
    arch.classToken = false;
    arch.preNorm = false;
    arch.patchBias = true;
    arch.activation = "gelu_tanh";
    arch.normEps = 1e-6;
  }
  std::optional<ArchProblem>
  structureProblem(const ModuleArch &a) const override {
    if (!a.bias)
      return needs("bias", "has biases");
    if (!a.learnedPositions)
      return needs("position_embeddings", "learns its position embeddings");
    if (a.classToken)
      return needs("class_token", "has no class token");
    if (a.preNorm)
      return needs("pre_norm", "has no pre-norm");
    if (!a.patchBias)
      return needs("patch_bias", "has a patch bias");
    return std::nullopt;
  }
  std::string hfExportProblem(const ModuleArch &arch) const override {
    return gridProblem(arch);
  }

protected:
  std::string hfModelType() const override { return "siglip_vision_model"; }
  std::string hfArchitecture() const override { return "SiglipVisionModel"; }
};

} // namespace

std::unique_ptr<ModuleFamily> makeSiglipFamily() {
  return std::make_unique<SiglipFamily>();
}

} // namespace mimo
