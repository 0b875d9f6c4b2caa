//===- VisionTower.h - ViT image towers: mimo's, CLIP, SigLIP --*- C++ -*-===//
//
// docs/model.md, "Encoder": a patch embedding, optional class token,
// learned positions and pre-norm, LayerNorm/GELU layers, an optional final
// norm and the projector to the language width. VisionTowerFamily is
// mimo's own ViT (`"family": "vit"`, any of those choices; the family of an
// encoder that names none and has neither CLIP's structure nor SigLIP's)
// and holds what CLIP and SigLIP share with it: the parameters, the FLOPs,
// the CLIPVisionModel/SiglipVisionModel names (with LLaVA's projector),
// and the checks of a CLIP or SigLIP tower's config.json. Only CLIP and
// SigLIP are written as Hugging Face folders.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_FAMILY_VISIONTOWER_H
#define MIMO_RUNTIME_FAMILY_VISIONTOWER_H

#include "runtime/family/ModuleFamily.h"

namespace mimo {

class VisionTowerFamily : public ModuleFamily {
public:
  std::string_view name() const override { return "vit"; }
  std::string_view label() const override { return "mimo's ViT encoder"; }
  ModuleKind kind() const override { return ModuleKind::Encoder; }
  void declareParameters(const ModuleArch &arch, const std::string &module,
                         const StageSpan &span,
                         std::vector<ParamSpec> &out) const override;
  double forwardFlops(const ModuleArch &arch, int64_t outputHidden,
                      double tokens, double pairs) const override;
  std::optional<HfSource> hfSource(const HfLayout &layout,
                                   const std::string &local) const override;
  HfClaim hfClaim(const ModuleArch &arch, const HfLayout &layout,
                  const std::string &name) const override;
  bool hfCheck(ConfigCheck &k, const ModuleArch &arch,
               int64_t seqLength) const override;
  /// mimo's ViT: why it is neither CLIP's structure nor SigLIP's.
  std::string hfExportProblem(const ModuleArch &arch) const override;
  nlohmann::ordered_json
  hfConfig(const ModuleArch &arch,
           const HfExportContext &context) const override;

protected:
  /// CLIP's and SigLIP's: config.json's model_type and architectures
  /// entry; and "" when the tower's positions are a square grid (which
  /// config.json's image_size / patch_size must make).
  virtual std::string hfModelType() const { return ""; }
  virtual std::string hfArchitecture() const { return ""; }
  std::string gridProblem(const ModuleArch &arch) const;
  /// The problem of arch key `key` against the family's structure: the
  /// tower `what` ("has a class token").
  ArchProblem needs(const char *key, const char *what) const;
};

} // namespace mimo

#endif // MIMO_RUNTIME_FAMILY_VISIONTOWER_H
