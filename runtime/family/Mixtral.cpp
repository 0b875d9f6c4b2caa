//===- Mixtral.cpp - The Mixtral family -----------------------------------===//
//
// docs/model-json.md `"family": "mixtral"`: a Llama-style language model
// whose every layer is sparse (arch.moe, family/Moe.h): a softmax router
// over `num_experts` SwiGLU experts as wide as ffn_hidden_size, top-k
// weights normalised, no shared expert. Reads and writes
// MixtralForCausalLM (block_sparse_moe.gate, experts.J.w1/w3/w2).
//
//===----------------------------------------------------------------------===//

#include "runtime/family/LlamaStyle.h"

namespace mimo {

namespace {

class MixtralFamily final : public LlamaStyleFamily {
public:
  std::string_view name() const override { return "mixtral"; }
  std::string_view label() const override { return "a Mixtral language model"; }
  const MoeNames *moeNames() const override {
    static const MoeNames names{"block_sparse_moe.", "w1",  "w3", "w2",
                                "num_local_experts", false, true};
    return &names;
  }

protected:
  std::string hfModelType() const override { return "mixtral"; }
  std::string hfArchitecture() const override { return "MixtralForCausalLM"; }
};

} // namespace

std::unique_ptr<ModuleFamily> makeMixtralFamily() {
  return std::make_unique<MixtralFamily>();
}

} // namespace mimo
