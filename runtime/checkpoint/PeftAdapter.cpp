//===- PeftAdapter.cpp - PEFT LoRA folders in -----------------------------===//

#include "runtime/checkpoint/PeftAdapter.h"

#include "runtime/config/Lora.h"
#include "runtime/config/Parameters.h"
#include "runtime/json/JsonReader.h"
#include "runtime/model/Model.h"
#include "runtime/support/InputFile.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

namespace mimo::exec {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kPeftPrefix = "base_model.model.";

std::string stemOf(const std::string &name) {
  return name.substr(0, name.rfind('.'));
}

/// PEFT's value of `key` for module `stem`: the first `pattern` key that
/// matches it as PEFT matches them (the pattern after the last dot of a
/// prefix, to the end), else the config's own `key`; nullopt when neither
/// is a number; the key in `bad` for a pattern std::regex cannot read, or
/// one longer than PEFT's module names ever are (kMaxPattern: std::regex
/// compiles and matches recursively).
std::optional<double> patterned(const json &c, const char *key,
                                const char *pattern, const std::string &stem,
                                std::string &bad) {
  if (c.contains(pattern) && c[pattern].is_object())
    for (auto &[k, v] : c[pattern].items()) {
      constexpr size_t kMaxPattern = 512;
      if (k.size() > kMaxPattern) {
        bad = k.substr(0, 60) + "...";
        return std::nullopt;
      }
      try {
        if (std::regex_match(stem, std::regex("(.*\\.)?(" + k + ")")) &&
            v.is_number())
          return v.get<double>();
      } catch (const std::exception &) { // regex_error, bad_alloc
        bad = k;
        return std::nullopt;
      }
    }
  if (c.contains(key) && c[key].is_number())
    return c[key].get<double>();
  return std::nullopt;
}

std::optional<PeftAdapter> openChecked(const std::string &dir,
                                       const HfFolder &base,
                                       const ModelConfig &config,
                                       const ModuleConfig &module,
                                       std::string &error) {
  PeftAdapter adapter;
  adapter.dir = dir;
  adapter.configPath = (fs::path(dir) / "adapter_config.json").string();
  std::optional<std::string> text = readInputFile(
      adapter.configPath, kMaxSmallJsonBytes, "the PEFT adapter config", error);
  if (!text)
    return std::nullopt;
  Diagnostic syntax;
  std::optional<json> parsed = parseJsonText(*text, syntax);
  if (!parsed || !parsed->is_object()) {
    error = adapter.configPath + ": error: " +
            (parsed ? std::string("expected a JSON object") : syntax.message);
    return std::nullopt;
  }
  const json &c = *parsed;
  const LoraConfig &lora = *module.lora;
  auto fail = [&](const std::string &pointer, const std::string &message) {
    error = adapter.configPath + ": error: " + pointer + ": " + message;
    return std::nullopt;
  };
  if (!c.contains("peft_type") || c["peft_type"] != "LORA")
    return fail("/peft_type",
                "expected \"LORA\", found " +
                    (c.contains("peft_type") ? c["peft_type"].dump()
                                             : std::string("nothing")) +
                    ": mimo reads LoRA adapters only");
  // A flag PEFT writes as a boolean; absent: false.
  std::string notFlag;
  auto flag = [&](const char *key) {
    if (!c.contains(key) || c[key].is_null())
      return false;
    if (!c[key].is_boolean()) {
      notFlag = key;
      return false;
    }
    return c[key].get<bool>();
  };
  const bool rslora = flag("use_rslora");
  const bool dora = flag("use_dora"), fanInFanOut = flag("fan_in_fan_out");
  if (!notFlag.empty())
    return fail("/" + notFlag,
                "expected true or false, found " + c[notFlag].dump());
  if (rslora != lora.rslora)
    return fail("/use_rslora",
                std::string("the adapter was trained with use_rslora ") +
                    (rslora ? "true" : "false") + ", module '" + module.name +
                    "' has lora.rslora " + (lora.rslora ? "true" : "false") +
                    "; set lora.rslora to match (its scale differs)");
  if (c.contains("bias") && c["bias"] != "none")
    return fail("/bias", "expected \"none\", found " + c["bias"].dump() +
                             ": mimo's adapters train no biases");
  if (dora)
    return fail("/use_dora", "DoRA adapters are not LoRA's sum: mimo reads "
                             "use_dora false only");
  if (fanInFanOut)
    return fail("/fan_in_fan_out",
                "expected false (Conv1D weights, GPT-2's): Llama, Qwen2, CLIP "
                "and SigLIP use Linear layers");
  // The weights.
  adapter.files.dir = dir;
  HfFolder::File file;
  file.path = (fs::path(dir) / "adapter_model.safetensors").string();
  std::optional<safetensors::Header> header =
      safetensors::readHeader(file.path, error);
  if (!header)
    return std::nullopt;
  file.header = std::move(*header);
  for (const safetensors::TensorEntry &t : file.header.tensors)
    adapter.files.fileOf[t.name] = 0;
  adapter.files.files.push_back(std::move(file));
  const std::string &path = adapter.files.files[0].path;
  // The names PEFT gave the modules are those of the model it wrapped: the
  // base folder's own, or a LLaVA folder's (either layout) when the base
  // came as a folder per module (--export-hf-per-module) and the adapter
  // from the LLaVA model, or the other way round.
  const std::vector<ParamSpec> specs =
      stageParameters(module, config.language().hiddenSize, false, 1, 0);
  HfLayout perModule;
  perModule.projector = "multi_modal_projector.";
  HfLayout layout = base.layout;
  for (const HfLayout &candidate : {base.layout, HfLayout::llavaBefore452(),
                                    HfLayout::llavaSince452(), perModule}) {
    bool holds = false;
    for (const ParamSpec &spec : specs) {
      std::string baseLocal;
      if (!isLoraFactor(spec.local, &baseLocal))
        continue;
      if (std::optional<HfSource> s =
              module.family().hfSource(candidate, baseLocal))
        holds = holds || adapter.files.find(kPeftPrefix + stemOf(s->name) +
                                            ".lora_A.weight");
    }
    if (holds) {
      layout = candidate;
      break;
    }
  }
  auto sourceOf = [&](const std::string &local) {
    return module.family().hfSource(layout, local);
  };
  std::set<std::string> used;
  auto shapeText = [](const std::vector<int64_t> &shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i)
      s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  };
  for (const ParamSpec &spec : specs) {
    std::string baseLocal;
    bool isB = false;
    if (!isLoraFactor(spec.local, &baseLocal, &isB)) {
      // modules_to_save: the fine-tuned copy, when the folder has one.
      std::optional<HfSource> source = sourceOf(spec.local);
      if (!source)
        continue;
      const std::string name = kPeftPrefix + source->name;
      if (const safetensors::TensorEntry *t = adapter.files.find(name)) {
        const int64_t elements = spec.rows * spec.cols;
        int64_t have = 1;
        for (int64_t d : t->shape)
          have *= d;
        if (have != elements ||
            (t->dtype != "F32" && t->dtype != "BF16" && t->dtype != "F16")) {
          error = path + ": error: tensor '" + name + "' is " + t->dtype + " " +
                  shapeText(t->shape) + ", mimo's '" + spec.name() + "' has " +
                  std::to_string(elements) + " elements (F32, BF16 or F16)";
          return std::nullopt;
        }
        adapter.sources.push_back({spec.local, {name, source->transposed}});
        used.insert(name);
      }
      continue;
    }
    std::optional<HfSource> source = sourceOf(baseLocal);
    if (!source) {
      error = adapter.dir + ": error: mimo's '" + module.name + "." +
              baseLocal + "' has no Hugging Face name";
      return std::nullopt;
    }
    const std::string stem = stemOf(source->name);
    const std::string name =
        kPeftPrefix + stem + (isB ? ".lora_B.weight" : ".lora_A.weight");
    const safetensors::TensorEntry *t = adapter.files.find(name);
    if (!t) {
      error = path + ": error: tensor '" + name + "' is missing (mimo's '" +
              spec.name() +
              "'): the adapter does not adapt a linear layer model.json's "
              "lora.targets names; make targets the adapter's "
              "target_modules";
      return std::nullopt;
    }
    // A [K, r] is lora_A.weight [r, K]; B [r, N] is lora_B.weight [N, r].
    const std::vector<int64_t> want = {spec.cols, spec.rows};
    if (t->shape != want ||
        (t->dtype != "F32" && t->dtype != "BF16" && t->dtype != "F16")) {
      const int64_t rank = t->shape.size() == 2 ? t->shape[isB ? 1 : 0] : -1;
      error = path + ": error: tensor '" + name + "' is " + t->dtype + " " +
              shapeText(t->shape) + ", mimo's '" + spec.name() + "' needs " +
              shapeText(want) + " (F32, BF16 or F16)" +
              (rank > 0 && rank != lora.rank
                   ? ": the adapter has rank " + std::to_string(rank) +
                         ", model.json's lora.r is " +
                         std::to_string(lora.rank) + "; set r to match"
                   : std::string());
      return std::nullopt;
    }
    if (!isB) { // the scale, once per adapted module
      std::string bad;
      std::optional<double> alpha =
          patterned(c, "lora_alpha", "alpha_pattern", stem, bad);
      if (!bad.empty())
        return fail("/alpha_pattern",
                    "'" + bad + "' is not a regular expression mimo reads");
      if (!alpha || std::abs(*alpha - lora.alpha) > 1e-9 * lora.alpha)
        return fail("/lora_alpha",
                    "the adapter's alpha for '" + stem + "' is " +
                        (alpha ? json(*alpha).dump() : std::string("missing")) +
                        ", module '" + module.name + "' has lora.alpha " +
                        json(lora.alpha).dump() +
                        "; set alpha to match (s = alpha / r)");
    }
    adapter.sources.push_back({spec.local, {name, true}});
    used.insert(name);
  }
  // An adapter of this module's part that model.json does not target.
  const std::string own =
      kPeftPrefix + (module.kind == ModuleKind::Language ? layout.languageBody
                                                         : layout.vision);
  for (const safetensors::TensorEntry &t :
       adapter.files.files[0].header.tensors)
    if (!used.count(t.name) && t.name.compare(0, own.size(), own) == 0 &&
        (t.name.find(".lora_A.") != std::string::npos ||
         t.name.find(".lora_B.") != std::string::npos)) {
      error = path + ": error: tensor '" + t.name +
              "' adapts a linear layer of module '" + module.name +
              "' that model.json's lora.targets leaves out; add it to "
              "targets (or use an adapter of those targets)";
      return std::nullopt;
    }
  return adapter;
}

} // namespace

std::optional<PeftAdapter> openPeftAdapter(const std::string &dir,
                                           const HfFolder &base,
                                           const ModelConfig &config,
                                           const ModuleConfig &module,
                                           std::string &error) {
  // Whatever the folder holds, an error naming it, never an exception out
  // of a tool (mimoc's init checks call this).
  try {
    return openChecked(dir, base, config, module, error);
  } catch (const std::exception &e) {
    error = dir + ": error: " + e.what();
    return std::nullopt;
  }
}

void readPeftAdapter(const PeftAdapter &adapter, const ModuleConfig &module,
                     const std::vector<Param *> &params) {
  std::map<std::string, Param *> byLocal;
  const std::string moduleDot = module.name + ".";
  for (Param *p : params)
    byLocal[p->name.substr(moduleDot.size())] = p;
  std::vector<std::pair<Param *, HfSource>> sources;
  for (const auto &[local, source] : adapter.sources)
    if (auto it = byLocal.find(local); it != byLocal.end())
      sources.push_back({it->second, source});
  readHfTensors(adapter.files, sources);
}

} // namespace mimo::exec
