//===- FuzzHfFolder.cpp - A Hugging Face folder's config and index --------===//
//
// Any bytes as a Hugging Face folder (docs/pretrained.md): up to the first
// NUL its config.json, after it (if any) its model.safetensors.index.json,
// beside a fixed shard (which holds transformers 5's stacked experts too).
// openHfFolder returns a folder or an error naming the file; the checks
// against a small language module, a sparse one and a CLIP-like encoder
// return diagnostics, never crash.

#include "FuzzInput.h"

#include "runtime/checkpoint/HfWeights.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/config/ModelConfig.h"

#include <filesystem>
#include <fstream>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mimo;
  namespace fs = std::filesystem;
  std::string_view bytes(reinterpret_cast<const char *>(data), size);
  const size_t nul = bytes.find('\0');
  fuzz::TempFile marker("", "-hf");
  const fs::path dir = marker.path + ".d";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json", std::ios::binary) << bytes.substr(0, nul);
  if (nul != std::string_view::npos)
    std::ofstream(dir / "model.safetensors.index.json", std::ios::binary)
        << bytes.substr(nul + 1);
  // A shard of one tensor, named by an index as "a.safetensors" and found
  // as model.safetensors without one.
  safetensors::Header header;
  header.tensors.push_back({"model.norm.weight", "F32", {4}, 0, 16});
  header.tensors.push_back(
      {"model.layers.0.mlp.experts.gate_up_proj", "F32", {2, 4, 4}, 16, 144});
  std::string shard =
      safetensors::encodeHeader(header) + std::string(144, '\0');
  std::ofstream(dir / "a.safetensors", std::ios::binary) << shard;
  std::ofstream(dir / "model.safetensors", std::ios::binary) << shard;

  std::string error;
  std::optional<exec::HfFolder> folder =
      exec::openHfFolder(dir.string(), error);
  fuzz::require(folder.has_value() == error.empty(),
                "either a folder or an error");
  if (folder) {
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
    ModuleConfig encoder;
    encoder.name = "images";
    encoder.kind = ModuleKind::Encoder;
    encoder.pointer = "/modules/1";
    encoder.featureDim = 12;
    encoder.hiddenSize = 4;
    encoder.numLayers = 2;
    encoder.numHeads = 2;
    encoder.ffnHiddenSize = 8;
    encoder.bias = true;
    encoder.learnedPositions = true;
    encoder.maxPositions = 5;
    encoder.classToken = encoder.preNorm = true;
    encoder.patchBias = false;
    encoder.outputLayer = -2;
    ModuleConfig sparse = language;
    sparse.name = "sparse";
    sparse.moe.experts = 2;
    sparse.moe.topK = 1;
    sparse.moe.expertFfn = 2;
    config.modules.push_back(encoder);
    config.modules.push_back(language);
    config.modules.push_back(sparse);
    for (const ModuleConfig &module : config.modules) {
      (void)exec::hfConfigProblems(*folder, module);
      (void)exec::hfTensorProblem(*folder, config, module);
    }
  }
  fs::remove_all(dir);
  return 0;
}
