//===- HfExport.h - Hugging Face model folders out --------------*- C++ -*-===//
//
// docs/pretrained.md: `mimo-run PLAN --load CKPT --export-hf OUT` writes,
// without training, each module of a checkpoint as a Hugging Face folder
// OUT/<module>: the language model's config.json (Llama, or Qwen2 with
// qkv_bias), an encoder's as a CLIP or SigLIP vision model's (with LLaVA's
// projector, multi_modal_projector, beside the tower); the tensors under
// the names and layouts transformers reads (checkpoint/HfNames.h, linear
// weights transposed back to [out, in], the patch weight as the
// convolution's [hidden, C, p, p]), in bf16 or fp32, in one
// model.safetensors or shards of at most `shardBytes` with
// model.safetensors.index.json. `"init": {"format": "hf"}` reads it back
// bit for bit. An encoder of neither family is left out, said in a line.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CHECKPOINT_HFEXPORT_H
#define MIMO_RUNTIME_CHECKPOINT_HFEXPORT_H

#include "runtime/config/ModelConfig.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mimo::exec {

inline constexpr int64_t kHfShardBytes = int64_t(5) << 30; // 5 GiB

/// The config.json of `module` (the language model) as transformers reads
/// it; `dtype` "bf16" or "fp32".
nlohmann::ordered_json hfConfigOf(const ModelConfig &config,
                                  const ModuleConfig &module,
                                  const std::string &dtype);

/// The config.json of an encoder whose arch is a CLIP or SigLIP tower's
/// (checkpoint/HfNames.h visionFamilyOf), with LLaVA's keys for its
/// output layer and projector.
nlohmann::ordered_json hfVisionConfigOf(const ModelConfig &config,
                                        const ModuleConfig &module,
                                        const std::string &dtype);

/// Writes the folders; returns "" or the error ("PATH: error: ...").
/// Nothing is left half-written: each folder is written beside its place
/// and moved there when complete. `written` gets one line per folder.
std::string exportHf(const ModelConfig &config, const std::string &checkpoint,
                     const std::string &out, const std::string &dtype,
                     std::vector<std::string> &written,
                     int64_t shardBytes = kHfShardBytes);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_CHECKPOINT_HFEXPORT_H
