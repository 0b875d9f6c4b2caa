//===- LlamaStyle.h - Llama-style language models --------------*- C++ -*-===//
//
// What the Llama and Qwen2 families share (docs/model.md, "Language
// model"): the decoder's parameters (embedding, RMSNorm, attention with
// GQA and optional q/k/v biases, SwiGLU, the head or its tie), its FLOPs,
// the LlamaForCausalLM names (also Mistral's and Qwen2's), the checks of a
// Llama, Mistral or Qwen2 config.json and the config.json written. A
// family of this kind says its name, its structure and its model_type.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_FAMILY_LLAMASTYLE_H
#define MIMO_RUNTIME_FAMILY_LLAMASTYLE_H

#include "runtime/family/ModuleFamily.h"

#include <string>
#include <vector>

namespace mimo {

class LlamaStyleFamily : public ModuleFamily {
public:
  ModuleKind kind() const override { return ModuleKind::Language; }
  /// qkv_bias as qkvBiases() says, fixed.
  void setDefaults(ModuleArch &arch) const override;
  std::optional<ArchProblem>
  structureProblem(const ModuleArch &arch) const override;
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
  std::string hfExportProblem(const ModuleArch &arch) const override {
    (void)arch;
    return "";
  }
  nlohmann::ordered_json
  hfConfig(const ModuleArch &arch,
           const HfExportContext &context) const override;

  /// The model_types of the folders it reads ("llama", "mistral"; by
  /// default the one it writes), and whether their q, k and v have biases
  /// (Qwen2's): a Llama-style check finds the folder's family by them.
  virtual std::vector<std::string> hfModelTypesRead() const {
    return {hfModelType()};
  }
  virtual bool qkvBiases() const { return false; }

protected:
  /// config.json's model_type and architectures entry ("llama",
  /// "LlamaForCausalLM").
  virtual std::string hfModelType() const = 0;
  virtual std::string hfArchitecture() const = 0;
};

} // namespace mimo

#endif // MIMO_RUNTIME_FAMILY_LLAMASTYLE_H
