//===- Qwen3.cpp - The Qwen3 and Qwen3-MoE families -----------------------===//
//
// docs/model-json.md `"family": "qwen3"` and `"qwen3_moe"`: Llama-style
// language models with Qwen3's per-head RMSNorms of q and k (arch.qk_norm)
// and no q/k/v biases; Qwen3-MoE's layers are sparse (arch.moe,
// family/Moe.h: softmax router, mlp.experts.J.{gate,up,down}_proj, no
// shared expert). Named, their defaults are Qwen's: qk_norm true,
// norm_eps 1e-6. Read and write Qwen3ForCausalLM / Qwen3MoeForCausalLM.
//
//===----------------------------------------------------------------------===//

#include "runtime/family/LlamaStyle.h"

namespace mimo {

namespace {

class Qwen3Family : public LlamaStyleFamily {
public:
  std::string_view name() const override { return "qwen3"; }
  std::string_view label() const override { return "a Qwen3 language model"; }
  void setDefaults(ModuleArch &arch) const override {
    LlamaStyleFamily::setDefaults(arch);
    arch.qkNorm = true;
    arch.normEps = 1e-6;
  }
  bool qkNorms() const override { return true; }

protected:
  std::string hfModelType() const override { return "qwen3"; }
  std::string hfArchitecture() const override { return "Qwen3ForCausalLM"; }
};

class Qwen3MoeFamily final : public Qwen3Family {
public:
  std::string_view name() const override { return "qwen3_moe"; }
  std::string_view label() const override {
    return "a Qwen3-MoE language model";
  }
  const MoeNames *moeNames() const override {
    static const MoeNames names{"mlp.",      "gate_proj",   "up_proj",
                                "down_proj", "num_experts", false,
                                false};
    return &names;
  }

protected:
  std::string hfModelType() const override { return "qwen3_moe"; }
  std::string hfArchitecture() const override { return "Qwen3MoeForCausalLM"; }
};

} // namespace

std::unique_ptr<ModuleFamily> makeQwen3Family() {
  return std::make_unique<Qwen3Family>();
}

std::unique_ptr<ModuleFamily> makeQwen3MoeFamily() {
  return std::make_unique<Qwen3MoeFamily>();
}

} // namespace mimo
