//===- Llama.cpp - The Llama family (Llama 2/3, Mistral) ------------------===//
//
// docs/model-json.md `"family": "llama"`: the language model of a module
// that names no family and has no q/k/v biases. Reads Llama and Mistral
// folders; writes LlamaForCausalLM.
//
//===----------------------------------------------------------------------===//

#include "runtime/family/LlamaStyle.h"

namespace mimo {

namespace {

class LlamaFamily final : public LlamaStyleFamily {
public:
  std::string_view name() const override { return "llama"; }
  std::string_view label() const override {
    return "a Llama-style language model";
  }
  std::vector<std::string> hfModelTypesRead() const override {
    return {"llama", "mistral"};
  }

protected:
  std::string hfModelType() const override { return "llama"; }
  std::string hfArchitecture() const override { return "LlamaForCausalLM"; }
};

} // namespace

std::unique_ptr<ModuleFamily> makeLlamaFamily() {
  return std::make_unique<LlamaFamily>();
}

} // namespace mimo
