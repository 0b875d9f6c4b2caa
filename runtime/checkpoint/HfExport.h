//===- HfExport.h - Hugging Face model folders out --------------*- C++ -*-===//
//
// docs/pretrained.md: `mimo-run PLAN --load CKPT --export-hf OUT` writes,
// without training, a checkpoint as one Hugging Face folder OUT: a language
// model alone as its family's (Llama, or Qwen2 with qkv_bias), a language
// model with one CLIP or SigLIP image encoder as a
// LlavaForConditionalGeneration folder (the names transformers writes
// before 4.52, which every version reads). `--export-hf-per-module` writes
// a folder per module instead, OUT/<module> (an encoder as a CLIP or SigLIP
// vision model with LLaVA's projector beside the tower). Tensors under the
// names and layouts transformers reads (each family's, family/, linear
// weights transposed back to [out, in], the patch weight as the
// convolution's [hidden, C, p, p]), in bf16 or fp32, in one
// model.safetensors or shards of at most `shardBytes` with
// model.safetensors.index.json. The language model's config keeps the
// pretrained folder's bos, eos, pad and max_position_embeddings, and the
// tokenizer files and generation_config.json found there are copied (the
// folder the weights came from: the module's init, or the one the init
// checkpoint records). `"init": {"format": "hf"}` reads it back bit for
// bit. A LoRA module's weights are merged with their adapters
// (checkpoint/TrainedValues.h); `peft` writes the adapters instead, as PEFT
// saves them.
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

/// The config.json of `module` as transformers reads it, its family's
/// (ModuleFamily::hfConfig; hfExportProblem must be ""); `dtype` "bf16" or
/// "fp32". `pretrained` (the text part of the config the weights came
/// from, or null) gives a language model's bos_token_id, eos_token_id,
/// pad_token_id, max_position_embeddings and rope_scaling as they were. An
/// encoder's config carries LLaVA's keys for its output layer and
/// projector.
nlohmann::ordered_json hfConfigOf(const ModelConfig &config,
                                  const ModuleConfig &module,
                                  const std::string &dtype,
                                  const nlohmann::json &pretrained = nullptr);

/// A LlavaForConditionalGeneration config.json: text_config, vision_config,
/// projector_hidden_act, vision_feature_layer and _select_strategy,
/// image_token_index (the encoder's special_token_id), image_seq_length.
nlohmann::ordered_json
hfLlavaConfigOf(const ModelConfig &config, const ModuleConfig &encoder,
                const std::string &dtype,
                const nlohmann::json &pretrained = nullptr);

/// Why `encoder` cannot be a LLaVA folder's tower, or "".
std::string llavaProblem(const ModuleConfig &encoder);

struct HfExportOptions {
  std::string dtype = "fp32"; // "bf16" or "fp32"
  bool perModule = false;     // OUT/<module>, not one folder OUT
  int64_t shardBytes = kHfShardBytes;
  /// --export-peft: PEFT adapter folders (adapter_config.json,
  /// adapter_model.safetensors) of the LoRA modules, under the names the
  /// same export's Hugging Face folder has, instead of merged weights.
  bool peft = false;
};

/// Writes the folder (or folders); returns "" or the error ("PATH: error:
/// ..."). Nothing is left half-written: each folder is written beside its
/// place and moved there when all are complete; an existing folder (but an
/// empty one) is never written over. `written` gets one line per folder
/// and per note.
std::string exportHf(const ModelConfig &config, const std::string &checkpoint,
                     const std::string &out, const HfExportOptions &options,
                     std::vector<std::string> &written);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_CHECKPOINT_HFEXPORT_H
