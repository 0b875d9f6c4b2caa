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

#include <string>
#include <vector>

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

protected:
  /// "" when the tower's positions are a square grid (which config.json's
  /// image_size / patch_size must make).
  std::string gridProblem(const ModuleArch &arch) const;
};

/// What a Hugging Face tower family (CLIP, SigLIP) fixes of an encoder's
/// arch, the defaults it gives the rest, and its config.json's names: one
/// record, read by the family's defaults and structure and by every
/// tower's config check (the folder's model_type finds its record).
struct TowerStructure {
  /// arch.family ("clip"), how messages name it ("a CLIP vision tower").
  std::string name, label;
  /// The model_type and architectures entry written, and the model_types
  /// read (a CLIPModel's vision_config names none: "clip").
  std::string hfModelType, hfArchitecture;
  std::vector<std::string> hfModelTypes;
  /// Fixed: biases and learned positions always; these as given.
  bool classToken = false, preNorm = false, patchBias = true;
  /// Why final_norm must be false ("": the user chooses).
  std::string finalNormWhy;
  /// Defaults: the MLP's activation (mimo's name) and the norms' ε, as
  /// config.json has them when it names none.
  std::string activation = "gelu_tanh";
  double normEps = 1e-5;
};

/// A tower family of Hugging Face's: mimo's ViT with one structure.
class HfTowerFamily final : public VisionTowerFamily {
public:
  explicit HfTowerFamily(TowerStructure structure)
      : tower(std::move(structure)) {}
  const TowerStructure &structure() const { return tower; }

  std::string_view name() const override { return tower.name; }
  std::string_view label() const override { return tower.label; }
  void setDefaults(ModuleArch &arch) const override;
  std::optional<ArchProblem>
  structureProblem(const ModuleArch &arch) const override;
  std::string hfExportProblem(const ModuleArch &arch) const override {
    return gridProblem(arch);
  }
  nlohmann::ordered_json
  hfConfig(const ModuleArch &arch,
           const HfExportContext &context) const override;

private:
  TowerStructure tower;
};

/// The registered tower family that reads config.json's model_type `type`
/// ("clip_vision_model"), or nullptr.
const HfTowerFamily *towerReading(const std::string &type);

} // namespace mimo

#endif // MIMO_RUNTIME_FAMILY_VISIONTOWER_H
