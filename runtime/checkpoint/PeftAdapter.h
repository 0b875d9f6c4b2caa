//===- PeftAdapter.h - PEFT LoRA folders in ---------------------*- C++ -*-===//
//
// docs/pretrained.md: `"init": {"from": BASE, "format": "hf", "adapter":
// {"from": DIR, "format": "peft"}}` reads a PEFT LoRA folder over its
// Hugging Face base: adapter_config.json checked against the module's
// `lora` (rank, alpha with alpha_pattern, rslora; no bias or DoRA
// training), adapter_model.safetensors's lora_A/lora_B tensors under the
// names PEFT gives the modules ("base_model.model." + the module +
// ".lora_A.weight", [r, in]; lora_B [out, r]; the module named as in the
// base folder, or in a LLaVA folder of either layout, or as mimo's per-module
// export names it, whichever the adapter holds) into the module's
// factors, and its modules_to_save tensors ("base_model.model." + the
// tensor's name) over the base's values. The export side is
// checkpoint/HfExport.h's --export-peft.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CHECKPOINT_PEFTADAPTER_H
#define MIMO_RUNTIME_CHECKPOINT_PEFTADAPTER_H

#include "runtime/checkpoint/HfWeights.h"
#include "runtime/config/ModelConfig.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mimo::exec {

struct Param;

struct PeftAdapter {
  std::string dir, configPath;
  /// adapter_model.safetensors, read as a Hugging Face folder's files.
  HfFolder files;
  /// Each parameter (its local name) the folder supplies, from its tensor.
  std::vector<std::pair<std::string, HfSource>> sources;
};

/// Opens and checks the adapter folder `dir` for `module`, whose base is
/// `base`; nullopt with `error` ("PATH: error: ...") naming the file, the
/// key or the tensor.
std::optional<PeftAdapter> openPeftAdapter(const std::string &dir,
                                           const HfFolder &base,
                                           const ModelConfig &config,
                                           const ModuleConfig &module,
                                           std::string &error);

/// Every rank: the blocks of `params` (the module's) the adapter supplies.
void readPeftAdapter(const PeftAdapter &adapter, const ModuleConfig &module,
                     const std::vector<Param *> &params);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_CHECKPOINT_PEFTADAPTER_H
