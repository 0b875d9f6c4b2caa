//===- FuzzPeftAdapter.cpp - A PEFT adapter folder's config ---------------===//
//
// Any bytes as a PEFT LoRA folder (docs/pretrained.md): up to the first NUL
// its adapter_config.json, after it (if any) its adapter_model.safetensors,
// over a fixed one-layer Llama base folder. openPeftAdapter returns an
// adapter or an error naming the file, never crashes; an adapter it
// returns is read into the module's parameters.

#include "FuzzInput.h"

#include "runtime/checkpoint/HfWeights.h"
#include "runtime/checkpoint/PeftAdapter.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/config/Parameters.h"
#include "runtime/device/Device.h"
#include "runtime/model/Model.h"

#include <filesystem>
#include <fstream>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mimo;
  namespace fs = std::filesystem;
  std::string_view bytes(reinterpret_cast<const char *>(data), size);
  const size_t nul = bytes.find('\0');
  fuzz::TempFile marker("", "-peft");
  const fs::path dir = marker.path + ".d";
  const fs::path base = dir / "base", adapter = dir / "adapter";
  fs::create_directories(base);
  fs::create_directories(adapter);
  // The base: a Llama of hidden 4, one layer, vocabulary 8.
  std::ofstream(base / "config.json")
      << R"({"model_type": "llama", "hidden_size": 4, "intermediate_size": 8,
             "num_hidden_layers": 1, "num_attention_heads": 2,
             "vocab_size": 8})";
  safetensors::Header header;
  header.tensors.push_back({"model.norm.weight", "F32", {4}, 0, 0});
  std::ofstream(base / "model.safetensors", std::ios::binary)
      << safetensors::encodeHeader(header) + std::string(16, '\0');
  std::ofstream(adapter / "adapter_config.json", std::ios::binary)
      << bytes.substr(0, nul);
  if (nul != std::string_view::npos)
    std::ofstream(adapter / "adapter_model.safetensors", std::ios::binary)
        << bytes.substr(nul + 1);

  std::string error;
  std::optional<exec::HfFolder> folder =
      exec::openHfFolder(base.string(), error);
  fuzz::require(folder.has_value(), "the fixed base opens");
  ModelConfig config;
  ModuleConfig language;
  language.name = "language";
  language.kind = ModuleKind::Language;
  language.pointer = "/modules/0";
  language.vocabSize = 8;
  language.hiddenSize = 4;
  language.numLayers = 1;
  language.numHeads = 2;
  language.ffnHiddenSize = 8;
  LoraConfig lora;
  lora.rank = 2;
  lora.alpha = 4;
  lora.targets = {"q", "down"};
  lora.modulesToSave = {"head"};
  language.lora = lora;
  config.modules.push_back(language);
  std::optional<exec::PeftAdapter> read =
      exec::openPeftAdapter(adapter.string(), *folder, config, language, error);
  fuzz::require(read.has_value() == error.empty(),
                "either an adapter or an error");
  if (read) {
    std::unique_ptr<device::Device> cpu = device::makeCpuDevice();
    std::vector<exec::Param> params;
    for (const ParamSpec &spec : stageParameters(language, 4, false, 1, 0)) {
      exec::Param p;
      p.name = spec.name();
      p.rowEnd = p.globalRows = spec.rows;
      p.colEnd = p.globalCols = spec.cols;
      p.value = device::Tensor::empty(*cpu, spec.size());
      params.push_back(std::move(p));
    }
    std::vector<exec::Param *> pointers;
    for (exec::Param &p : params)
      pointers.push_back(&p);
    try {
      exec::readPeftAdapter(*read, language, pointers);
    } catch (const std::runtime_error &) {
      // a value that is not finite: an error naming the tensor
    }
  }
  fs::remove_all(dir);
  return 0;
}
