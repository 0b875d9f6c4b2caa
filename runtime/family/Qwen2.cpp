//===- Qwen2.cpp - The Qwen2 family (Qwen2, Qwen2.5) ----------------------===//
//
// docs/model-json.md `"family": "qwen2"`: a Llama-style language model
// with biases on q, k and v (added before RoPE); a module that names no
// family is one when it sets qkv_bias. Named, its defaults are Qwen2's:
// qkv_bias true, norm_eps 1e-6. Writes Qwen2ForCausalLM; Qwen2-MoE's
// sparse layers below.
//
//===----------------------------------------------------------------------===//

#include "runtime/family/LlamaStyle.h"

namespace mimo {

namespace {

class Qwen2Family : public LlamaStyleFamily {
public:
  std::string_view name() const override { return "qwen2"; }
  std::string_view label() const override { return "a Qwen2 language model"; }
  void setDefaults(ModuleArch &arch) const override {
    LlamaStyleFamily::setDefaults(arch);
    arch.normEps = 1e-6;
  }
  bool qkvBiases() const override { return true; }

protected:
  std::string hfModelType() const override { return "qwen2"; }
  std::string hfArchitecture() const override { return "Qwen2ForCausalLM"; }
};

/// `"family": "qwen2_moe"`: Qwen2 with sparse layers (arch.moe): a
/// softmax router, mlp.experts.J.{gate,up,down}_proj, and a shared expert
/// with its sigmoid gate (mlp.shared_expert, mlp.shared_expert_gate).
class Qwen2MoeFamily final : public Qwen2Family {
public:
  std::string_view name() const override { return "qwen2_moe"; }
  std::string_view label() const override {
    return "a Qwen2-MoE language model";
  }
  const MoeNames *moeNames() const override {
    static const MoeNames names{"mlp.",      "gate_proj",   "up_proj",
                                "down_proj", "num_experts", true,
                                false};
    return &names;
  }

protected:
  std::string hfModelType() const override { return "qwen2_moe"; }
  std::string hfArchitecture() const override { return "Qwen2MoeForCausalLM"; }
};

} // namespace

std::unique_ptr<ModuleFamily> makeQwen2Family() {
  return std::make_unique<Qwen2Family>();
}

std::unique_ptr<ModuleFamily> makeQwen2MoeFamily() {
  return std::make_unique<Qwen2MoeFamily>();
}

} // namespace mimo
