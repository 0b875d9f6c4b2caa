//===- HfWeights.h - Hugging Face model folders in -------------*- C++ -*-===//
//
// docs/pretrained.md: a module's `"init": {"from": DIR, "format": "hf"}`.
// DIR is a Hugging Face model folder: config.json and model.safetensors,
// or shards named by model.safetensors.index.json. The language model
// reads the Llama, Mistral and Qwen2 families, an encoder a CLIP or SigLIP
// vision tower and LLaVA's projector where the folder has one (a LLaVA
// folder serves both; each module family, family/ModuleFamily.h, has its
// names and checks). config.json is
// checked against the module's `arch`, every tensor against the
// parameters (missing, unexpected, shape, dtype); each rank then reads
// only its own block of each tensor, through a read-only mapping of the
// file, converting bf16, fp16 or fp32 to the fp32 masters.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CHECKPOINT_HFWEIGHTS_H
#define MIMO_RUNTIME_CHECKPOINT_HFWEIGHTS_H

#include "runtime/checkpoint/Safetensors.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/family/ModuleFamily.h"
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
  nlohmann::json config;
  /// The part of config.json that describes the language model (itself,
  /// or a LLaVA config's text_config) and the vision tower's (a LLaVA,
  /// CLIP or SigLIP config's vision_config, or itself for a CLIP or SigLIP
  /// vision model; null when there is none), with their JSON pointers.
  nlohmann::json text, vision;
  std::string textPointer, visionPointer;
  struct File {
    std::string path;
    safetensors::Header header;
  };
  std::vector<File> files;
  /// Tensor name -> its file (an index into `files`).
  std::map<std::string, size_t> fileOf;
  /// Where the language model's, the vision tower's and LLaVA's
  /// projector's names begin: a model's own folder, or a LLaVA folder of
  /// either layout (before or since transformers 4.52), told apart by the
  /// tensors it holds.
  HfLayout layout;

  const safetensors::TensorEntry *find(const std::string &name) const;
  /// The tensor `module`'s parameter `local` comes from; nullopt when the
  /// folder has no such part (an encoder's projector then starts from
  /// mimo's init).
  std::optional<HfSource> sourceOf(const ModuleConfig &module,
                                   const std::string &local) const;
};

/// Reads config.json and the safetensors headers of `dir`; nullopt with
/// `error` ("PATH: error: ...") when a file is missing or malformed.
std::optional<HfFolder> openHfFolder(const std::string &dir,
                                     std::string &error);

/// Every disagreement between config.json and `module`'s arch (and what
/// mimo does not compute), each at the model.json pointer of the key with
/// config.json's pointer in the message.
std::vector<Diagnostic> hfConfigProblems(const HfFolder &folder,
                                         const ModuleConfig &module,
                                         int64_t seqLength = 0);

/// The first problem with the folder's tensors for `module` (missing,
/// unexpected, wrong shape or dtype), naming the file and the tensor; ""
/// when there is none.
std::string hfTensorProblem(const HfFolder &folder, const ModelConfig &config,
                            const ModuleConfig &module);

/// Every rank: the blocks of `params` (the module's, any layout) from the
/// folder, converted to fp32; a value that is not finite is an error
/// naming the file, the tensor and the element.
void readHfWeights(const HfFolder &folder, const ModuleConfig &module,
                   const std::vector<Param *> &params);

/// Every rank: the blocks of each parameter from the folder's tensor its
/// source names (transposed: [out, in] for mimo's [in, out]), converted to
/// fp32, as readHfWeights does.
void readHfTensors(const HfFolder &folder,
                   const std::vector<std::pair<Param *, HfSource>> &sources);

/// mimoc compile: every module's init opened and checked as mimo-run will
/// (a Hugging Face folder: config.json against arch, the tensors; a mimo
/// checkpoint: found, complete, this architecture's tensors), as
/// diagnostics at the module's pointers.
std::vector<Diagnostic> initProblems(const ModelConfig &config);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_CHECKPOINT_HFWEIGHTS_H
