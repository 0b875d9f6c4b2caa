//===- ModuleFamily.h - Module families: one interface ---------*- C++ -*-===//
//
// docs/model-json.md `arch.family`. A module family (a Llama-style or
// Qwen2 language model, a CLIP, SigLIP or mimo's own ViT tower) is one
// ModuleFamily: the defaults it gives the arch keys and the structure it
// requires of them, the parameters each pipeline stage holds (names,
// shapes, TP layout, init), the forward FLOPs, and its Hugging Face form:
// the tensor names, which of a folder's tensors are its own, the checks of
// config.json against the arch and the config.json it exports. The
// parameter list (config/Parameters.h), the FLOPs (config/Flops.h), the
// model.json reader and the Hugging Face reader and writer
// (checkpoint/Hf*.h) ask the family, never test the arch's flags for one.
//
// Adding a family: a file here defining a ModuleFamily and a line in the
// registry (ModuleFamily.cpp), or registerFamily as tests do; docs and
// tests. What a family computes is its kind's (model/LanguageStage.cpp,
// model/EncoderStage.cpp): a family that computes something new adds its
// arch key and its kernels there as well.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_FAMILY_MODULEFAMILY_H
#define MIMO_RUNTIME_FAMILY_MODULEFAMILY_H

#include "runtime/family/HfConfigCheck.h"
#include "runtime/family/HfNaming.h"
#include "runtime/family/ModuleArch.h"
#include "runtime/family/ParamSpec.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mimo {

/// The part of a module a pipeline stage holds.
struct StageSpan {
  /// Its layers [begin, end), and whether it is the module's first and
  /// last stage.
  int64_t begin = 0, end = 0;
  bool first = true, last = true;
  /// An encoder's projection width (the language hidden size).
  int64_t outputHidden = 0;
  /// Whether the module runs sequence parallelism (with tp > 1).
  bool sequenceParallel = false;
};

/// An arch key whose value the family does not allow: the key ("class_token")
/// and why, with the fix.
struct ArchProblem {
  std::string key, message;
};

/// What a Hugging Face config.json is written from besides the arch.
struct HfExportContext {
  /// batch.seq_length, the language model's hidden size (a projector's
  /// width) and the dtype written ("bf16" or "fp32").
  int64_t seqLength = 0, languageHidden = 0;
  std::string dtype = "fp32";
  /// The config.json the module was initialised from (null: none); its
  /// values that the arch does not hold (token ids, the context length)
  /// are kept.
  const nlohmann::json *pretrained = nullptr;
};

class ModuleFamily {
public:
  virtual ~ModuleFamily() = default;

  /// model.json's arch.family ("llama").
  virtual std::string_view name() const = 0;
  /// How messages name it ("a Llama-style language model").
  virtual std::string_view label() const = 0;
  virtual ModuleKind kind() const = 0;

  //===--- arch keys ------------------------------------------------------===//

  /// The family's defaults of the arch keys, set before model.json's are
  /// read when the module names the family.
  virtual void setDefaults(ModuleArch &arch) const { (void)arch; }
  /// The first arch key whose value the family does not allow; nullopt
  /// when the arch has the family's structure.
  virtual std::optional<ArchProblem>
  structureProblem(const ModuleArch &arch) const {
    (void)arch;
    return std::nullopt;
  }

  //===--- parameters and FLOPs -------------------------------------------===//

  /// Appends the parameters of the stage `span` of `module` (its name),
  /// in declaration order, with global shapes.
  virtual void declareParameters(const ModuleArch &arch,
                                 const std::string &module,
                                 const StageSpan &span,
                                 std::vector<ParamSpec> &out) const = 0;
  /// The forward FLOPs of `tokens` tokens whose attention covers `pairs`
  /// query-key pairs (an encoder's output `outputHidden` wide).
  virtual double forwardFlops(const ModuleArch &arch, int64_t outputHidden,
                              double tokens, double pairs) const = 0;

  //===--- Hugging Face ---------------------------------------------------===//

  /// The tensor parameter `local` comes from in a folder of `layout`;
  /// nullopt when the folder holds none (an encoder's projector in a
  /// tower's own folder: it starts from mimo's init).
  virtual std::optional<HfSource> hfSource(const HfLayout &layout,
                                           const std::string &local) const {
    (void)layout, (void)local;
    return std::nullopt;
  }
  /// A folder's tensor `name` that is no parameter's source: another
  /// module's, or the module's and refused, or read past.
  virtual HfClaim hfClaim(const ModuleArch &arch, const HfLayout &layout,
                          const std::string &name) const {
    (void)arch, (void)layout, (void)name;
    return HfClaim::Others;
  }
  /// Every disagreement between config.json's part `k.c` and the arch
  /// (`seqLength`: batch.seq_length); false when the part is of a model
  /// the family does not read, or too broken to check the rest (nothing
  /// around it is checked then). The default: the family reads no Hugging
  /// Face folder.
  virtual bool hfCheck(ConfigCheck &k, const ModuleArch &arch,
                       int64_t seqLength) const;
  /// "" when the module can be written as a Hugging Face folder, else why
  /// not.
  virtual std::string hfExportProblem(const ModuleArch &arch) const;
  /// The config.json of the module's Hugging Face folder (hfExportProblem
  /// is "").
  virtual nlohmann::ordered_json hfConfig(const ModuleArch &arch,
                                          const HfExportContext &context) const;
};

/// The family model.json calls `name`, or nullptr.
const ModuleFamily *findFamily(std::string_view name);
/// Every family, in registration order (the built-in ones first).
std::vector<const ModuleFamily *> families();
/// The family of a module that names none: the first built-in family of
/// its kind whose structure its arch has.
const ModuleFamily &inferFamily(const ModuleArch &arch);
/// Adds a family (tests register their own); it lives as long as the
/// process and is used only where a module names it. Call before reading
/// models; a name already taken is ignored and returns false.
bool registerFamily(std::unique_ptr<ModuleFamily> family);

/// For families: the attention of one layer at prefix `p` ("layers.3.") of
/// `module`: q, k and v column-parallel (k and v by their groups under
/// GQA), o row-parallel; q/k/v biases when `qkvBias`, an o bias when
/// `outBias` (its gradient partial over TP under sequence parallelism).
void declareAttention(const ModuleArch &arch, const std::string &module,
                      const std::string &p, bool qkvBias, bool outBias,
                      bool sequenceParallel, std::vector<ParamSpec> &out);

/// For families: the MLP of sparse layer `p` of `module` (family/Moe.h):
/// the router (whole: every TP rank routes every row), each expert cut as
/// the dense SwiGLU (gate and up by columns, down by rows), the shared
/// expert the same and its gate (whole).
void declareMoeMlp(const MoeConfig &moe, int64_t hidden,
                   const std::string &module, const std::string &p,
                   std::vector<ParamSpec> &out);
/// The local names (within its layer prefix) of declareMoeMlp's
/// parameters.
std::vector<std::string> moeMlpNames(const MoeConfig &moe);

} // namespace mimo

#endif // MIMO_RUNTIME_FAMILY_MODULEFAMILY_H
