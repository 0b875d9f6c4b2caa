//===- HfWeights.h - Hugging Face model folders in -------------*- C++ -*-===//
//
// docs/pretrained.md: a module's `"init": {"from": DIR, "format": "hf"}`.
// DIR is a Hugging Face model folder: config.json and model.safetensors,
// or shards named by model.safetensors.index.json. The language model
// reads the Llama, Mistral and Qwen2 families (LlamaForCausalLM's names:
// model.embed_tokens, model.layers.N.self_attn.q_proj, ..., lm_head; also
// under a LLaVA checkpoint's language_model. prefix, its config.json's
// text_config). config.json is checked against the module's `arch`,
// every tensor against the parameters (missing, unexpected, shape,
// dtype); each rank then reads only its own block of each tensor, through
// a read-only mapping of the file, converting bf16, fp16 or fp32 to the
// fp32 masters.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CHECKPOINT_HFWEIGHTS_H
#define MIMO_RUNTIME_CHECKPOINT_HFWEIGHTS_H

#include "runtime/checkpoint/Safetensors.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/json/Diagnostic.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mimo::exec {

struct Param;

/// An opened Hugging Face folder: its config and every tensor's file.
struct HfFolder {
  std::string dir, configPath;
  /// config.json, and the part that describes the language model (itself,
  /// or a LLaVA config's text_config) with its JSON pointer ("" or
  /// "/text_config").
  nlohmann::json config;
  const nlohmann::json *text = nullptr;
  std::string textPointer;
  struct File {
    std::string path;
    safetensors::Header header;
  };
  std::vector<File> files;
  /// Tensor name -> its file (an index into `files`).
  std::map<std::string, size_t> fileOf;
  /// Where the language model's names begin ("" or "language_model.").
  std::string languagePrefix;

  HfFolder() = default;
  HfFolder(const HfFolder &) = delete;
  HfFolder &operator=(const HfFolder &) = delete;
  HfFolder(HfFolder &&other) noexcept { *this = std::move(other); }
  HfFolder &operator=(HfFolder &&other) noexcept;

  const safetensors::TensorEntry *find(const std::string &name) const;
};

/// Reads config.json and the safetensors headers of `dir`; nullopt with
/// `error` ("PATH: error: ...") when a file is missing or malformed.
std::optional<HfFolder> openHfFolder(const std::string &dir,
                                     std::string &error);

/// The Hugging Face tensor a parameter of the language module comes from,
/// and whether it is stored transposed there ([out, in] against mimo's
/// [in, out]); nullopt for a parameter no such tensor holds.
struct HfSource {
  std::string name;
  bool transposed = false;
};
std::optional<HfSource> hfLanguageSource(const std::string &prefix,
                                         const std::string &local);

/// Every disagreement between config.json and `module`'s arch (and what
/// mimo does not compute), each at the model.json pointer of the key with
/// config.json's pointer in the message.
std::vector<Diagnostic> hfConfigProblems(const HfFolder &folder,
                                         const ModuleConfig &module);

/// The first problem with the folder's tensors for `module` (missing,
/// unexpected, wrong shape or dtype), naming the file and the tensor; ""
/// when there is none.
std::string hfTensorProblem(const HfFolder &folder, const ModelConfig &config,
                            const ModuleConfig &module);

/// Every rank: the blocks of `params` (the module's, any layout) from the
/// folder, converted to fp32; a value that is not finite is an error
/// naming the file, the tensor and the element.
void readHfWeights(const HfFolder &folder, const std::string &module,
                   const std::vector<Param *> &params);

/// mimoc compile: every module whose init is a Hugging Face folder,
/// opened and checked (config.json against arch, the tensors), as
/// diagnostics at the module's pointers.
std::vector<Diagnostic> initProblems(const ModelConfig &config);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_CHECKPOINT_HFWEIGHTS_H
