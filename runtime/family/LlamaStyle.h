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
  /// "" but for a router Hugging Face does not compute (sigmoid scores)
  /// or a shared expert without the gate Qwen2-MoE has.
  std::string hfExportProblem(const ModuleArch &arch) const override;
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
  /// Qwen3's per-head q and k norms (arch.qk_norm).
  virtual bool qkNorms() const { return false; }
  /// How a family with sparse layers (arch.moe, family/Moe.h) names their
  /// parts in a Hugging Face folder; null for a dense family.
  struct MoeNames {
    /// The sparse MLP's prefix within a layer ("mlp.", Mixtral's
    /// "block_sparse_moe."), an expert's linear layers ("gate_proj", "w1")
    /// and the key of the expert count ("num_experts", "num_local_experts").
    std::string block, gate, up, down, expertsKey;
    /// Qwen2-MoE's shared expert and its gate; Mixtral's experts are as
    /// wide as intermediate_size (else moe_intermediate_size) and its
    /// top-k weights always normalised.
    bool shared = false, mixtral = false;
  };
  virtual const MoeNames *moeNames() const { return nullptr; }

protected:
  /// config.json's model_type and architectures entry ("llama",
  /// "LlamaForCausalLM").
  virtual std::string hfModelType() const = 0;
  virtual std::string hfArchitecture() const = 0;
};

} // namespace mimo

#endif // MIMO_RUNTIME_FAMILY_LLAMASTYLE_H
