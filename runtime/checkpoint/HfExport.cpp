//===- HfExport.cpp - Hugging Face model folders out ----------------------===//

#include "runtime/checkpoint/HfExport.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/FileIo.h"
#include "runtime/checkpoint/HfWeights.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/checkpoint/TrainedValues.h"
#include "runtime/config/Parameters.h"
#include "runtime/device/KernelBodies.h"
#include "runtime/json/JsonReader.h"
#include "runtime/support/InputFile.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <unistd.h>

namespace mimo::exec {

namespace fs = std::filesystem;

nlohmann::ordered_json hfConfigOf(const ModelConfig &config,
                                  const ModuleConfig &m,
                                  const std::string &dtype,
                                  const nlohmann::json &pretrained) {
  HfExportContext context;
  context.seqLength = config.batch.seqLength;
  context.languageHidden = config.language().hiddenSize;
  context.dtype = dtype;
  context.pretrained = &pretrained;
  return m.family().hfConfig(m, context);
}

std::string llavaProblem(const ModuleConfig &encoder) {
  if (std::string why = encoder.family().hfExportProblem(encoder); !why.empty())
    return "it is not a CLIP or SigLIP tower: " + why;
  if (encoder.finalNorm)
    return "its final_norm normalises the rows it passes on, and LLaVA "
           "takes the tower's hidden states before post_layernorm";
  return "";
}

nlohmann::ordered_json hfLlavaConfigOf(const ModelConfig &config,
                                       const ModuleConfig &encoder,
                                       const std::string &dtype,
                                       const nlohmann::json &pretrained) {
  const ModuleConfig &language = config.language();
  nlohmann::ordered_json vision = hfConfigOf(config, encoder, dtype);
  for (const char *key :
       {"architectures", "vision_feature_layer",
        "vision_feature_select_strategy", "projector_hidden_act",
        "projector_hidden_size", "transformers_version"})
    vision.erase(key);
  nlohmann::ordered_json text = hfConfigOf(config, language, dtype, pretrained);
  text.erase("architectures");
  text.erase("transformers_version");
  const int64_t grid = encoder.maxPositions - (encoder.classToken ? 1 : 0);
  nlohmann::ordered_json c;
  c["architectures"] = {"LlavaForConditionalGeneration"};
  c["model_type"] = "llava";
  c["image_token_index"] = encoder.specialTokenId;
  c["image_seq_length"] = grid;
  c["projector_hidden_act"] = hfActivationName(encoder.projectorActivation);
  c["multimodal_projector_bias"] = true;
  c["vision_feature_layer"] = encoder.outputLayer;
  c["vision_feature_select_strategy"] = encoder.classToken ? "default" : "full";
  if (text.contains("pad_token_id"))
    c["pad_token_id"] = text["pad_token_id"];
  c["tie_word_embeddings"] = language.tieEmbeddings;
  c["text_config"] = std::move(text);
  c["vision_config"] = std::move(vision);
  stampHfConfig(c, dtype);
  return c;
}

namespace {

struct OutTensor {
  std::string name;           // Hugging Face
  std::string source;         // mimo, in the checkpoint
  int64_t rows = 0, cols = 0; // mimo's global shape
  bool transposed = false;
  std::vector<int64_t> shape; // Hugging Face's
  int64_t bytes = 0;
};

/// One folder to write: where, its tensors and config, and the files
/// copied in beside them (from their folders, under their names).
struct OutFolder {
  fs::path final, partial;
  std::string label;
  std::vector<OutTensor> tensors;
  nlohmann::ordered_json config;
  std::vector<fs::path> copies;
  /// PEFT's adapter folder (--export-peft): adapter_model.safetensors
  /// (never sharded) and adapter_config.json.
  bool peft = false;
  /// Its modules, under `layout`'s names.
  std::vector<const ModuleConfig *> modules;
  HfLayout layout;
};

/// `spec`'s tensor under Hugging Face name `name` (`transposed`: [out, in]
/// from mimo's [in, out]), at `esize` bytes an element.
OutTensor outTensor(const ModuleConfig &module, const ParamSpec &spec,
                    const std::string &name, bool transposed, int64_t esize) {
  OutTensor t;
  t.name = name;
  t.source = spec.name();
  t.rows = spec.rows, t.cols = spec.cols;
  t.transposed = transposed;
  // A one-row parameter is a vector (norms, biases), but a LoRA factor
  // of rank 1 stays a matrix ([out, 1], [1, in]).
  t.shape = spec.rows == 1 && !isLoraFactor(spec.local)
                ? std::vector<int64_t>{spec.cols}
            : t.transposed ? std::vector<int64_t>{spec.cols, spec.rows}
                           : std::vector<int64_t>{spec.rows, spec.cols};
  if (spec.local == "patch.weight") { // the convolution's [H, C, p, p]
    const PatchGeometry patch = patchGeometryOf(module.featureDim);
    t.shape = {spec.cols, patch.channels, patch.patch, patch.patch};
  }
  t.bytes = spec.rows * spec.cols * esize;
  return t;
}

/// Appends `module`'s tensors under `layout`'s names; "" or the error.
std::string addTensors(const ModelConfig &config, const ModuleConfig &module,
                       const HfLayout &layout, int64_t esize,
                       std::vector<OutTensor> &tensors) {
  for (const ParamSpec &spec :
       stageParameters(module, config.language().hiddenSize, false, 1, 0)) {
    if (isLoraFactor(spec.local))
      continue; // merged into its weight
    std::optional<HfSource> source =
        module.family().hfSource(layout, spec.local);
    if (!source)
      return "mimo-run: error: parameter '" + spec.name() +
             "' has no Hugging Face name";
    tensors.push_back(
        outTensor(module, spec, source->name, source->transposed, esize));
  }
  return "";
}

/// A Hugging Face tensor name without its last part ("...q_proj.weight" ->
/// "...q_proj"): the torch module PEFT names.
std::string moduleStem(const std::string &name) {
  return name.substr(0, name.rfind('.'));
}

/// `stems` as one regular expression PEFT's re.fullmatch takes, each
/// layer's index as \d+.
std::string stemsPattern(const std::vector<std::string> &stems) {
  std::vector<std::string> patterns;
  for (const std::string &stem : stems) {
    std::string p;
    for (size_t i = 0; i < stem.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(stem[i])) && i > 0 &&
          stem[i - 1] == '.') {
        size_t j = i;
        while (j < stem.size() &&
               std::isdigit(static_cast<unsigned char>(stem[j])))
          ++j;
        if (j == stem.size() || stem[j] == '.') {
          p += "\\d+";
          i = j - 1;
          continue;
        }
      }
      if (stem[i] == '.')
        p += "\\";
      p += stem[i];
    }
    if (std::find(patterns.begin(), patterns.end(), p) == patterns.end())
      patterns.push_back(p);
  }
  std::string all;
  for (const std::string &p : patterns)
    all += (all.empty() ? "" : "|") + p;
  return patterns.size() == 1 ? all : "(?:" + all + ")";
}

/// What a PEFT folder of `f`'s modules holds (docs/pretrained.md): every
/// LoRA factor as PEFT names it (lora_A.weight [r, in], lora_B.weight [out,
/// r]), and as modules_to_save every other torch module with a trained
/// parameter (the LoRA modules' modules_to_save, a projector trained beside
/// them, a module without lora that trains), all of its tensors; and
/// adapter_config.json. "" or the error.
std::string toPeft(const ModelConfig &config, OutFolder &f, int64_t esize,
                   const std::string &origin) {
  f.peft = true;
  f.tensors.clear();
  const std::string prefix = "base_model.model.";
  const ModuleConfig *primary = nullptr;
  for (const ModuleConfig *m : f.modules)
    if (m->lora && (!primary || m->kind == ModuleKind::Language))
      primary = m;
  if (!primary)
    return "mimo-run: error: --export-peft writes LoRA adapters, and no "
           "module of " +
           f.label +
           " has a lora object (docs/model-json.md); export its weights with "
           "--export-hf (nothing was written)";
  nlohmann::ordered_json ranks = nlohmann::ordered_json::object(),
                         alphas = nlohmann::ordered_json::object();
  std::vector<std::string> targets, saved;
  for (const ModuleConfig *m : f.modules) {
    std::vector<ParamSpec> specs =
        stageParameters(*m, config.language().hiddenSize, false, 1, 0);
    std::vector<std::string> moduleTargets;
    auto hfName = [&](const std::string &local) -> std::optional<HfSource> {
      return m->family().hfSource(f.layout, local);
    };
    for (const ParamSpec &spec : specs) {
      std::string base;
      bool isB = false;
      if (isLoraFactor(spec.local, &base, &isB)) {
        std::optional<HfSource> source = hfName(base);
        if (!source)
          return "mimo-run: error: parameter '" + m->name + "." + base +
                 "' has no Hugging Face name";
        const std::string stem = moduleStem(source->name);
        moduleTargets.push_back(stem);
        f.tensors.push_back(outTensor(
            *m, spec,
            prefix + stem + (isB ? ".lora_B.weight" : ".lora_A.weight"), true,
            esize));
      } else if (!m->frozen(spec.local)) {
        if (std::optional<HfSource> source = hfName(spec.local)) {
          const std::string stem = moduleStem(source->name);
          if (std::find(saved.begin(), saved.end(), stem) == saved.end())
            saved.push_back(stem);
        }
      }
    }
    // modules_to_save: every tensor of each torch module saved.
    for (const ParamSpec &spec : specs)
      if (!isLoraFactor(spec.local))
        if (std::optional<HfSource> source = hfName(spec.local))
          if (std::find(saved.begin(), saved.end(), moduleStem(source->name)) !=
              saved.end())
            f.tensors.push_back(outTensor(*m, spec, prefix + source->name,
                                          source->transposed, esize));
    if (!m->lora)
      continue;
    if (m->lora->rslora != primary->lora->rslora)
      return "mimo-run: error: --export-peft writes one adapter_config.json, "
             "whose use_rslora is one for every module, and module '" +
             m->name + "' has rslora " + (m->lora->rslora ? "true" : "false") +
             ", module '" + primary->name + "' " +
             (primary->lora->rslora ? "true" : "false") +
             "; give both the same (nothing was written)";
    if (m != primary) {
      const std::string pattern = stemsPattern(moduleTargets);
      ranks[pattern] = m->lora->rank;
      alphas[pattern] = m->lora->alpha;
    }
    targets.insert(targets.end(), moduleTargets.begin(), moduleTargets.end());
  }
  nlohmann::ordered_json c;
  c["peft_type"] = "LORA";
  c["task_type"] =
      f.modules.size() == 1 && f.modules[0]->kind == ModuleKind::Language
          ? nlohmann::ordered_json("CAUSAL_LM")
          : nlohmann::ordered_json(nullptr);
  c["base_model_name_or_path"] = origin.empty()
                                     ? nlohmann::ordered_json(nullptr)
                                     : nlohmann::ordered_json(origin);
  c["r"] = primary->lora->rank;
  c["lora_alpha"] = primary->lora->alpha;
  c["use_rslora"] = primary->lora->rslora;
  c["target_modules"] = stemsPattern(targets);
  c["rank_pattern"] = ranks;
  c["alpha_pattern"] = alphas;
  c["modules_to_save"] = saved.empty() ? nlohmann::ordered_json(nullptr)
                                       : nlohmann::ordered_json(saved);
  c["lora_dropout"] = 0.0;
  c["bias"] = "none";
  c["fan_in_fan_out"] = false;
  c["init_lora_weights"] = true;
  c["inference_mode"] = true;
  c["use_dora"] = false;
  c["layers_to_transform"] = nullptr;
  c["layers_pattern"] = nullptr;
  c["revision"] = nullptr;
  f.config = c;
  return "";
}

/// The Hugging Face folder `module`'s weights came from: what the
/// checkpoint records (hfOriginsOf when it was saved), else what the
/// plan's config says; "" for none.
std::string originOf(const Checkpoint &ckpt, const ModelConfig &config,
                     const ModuleConfig &module) {
  const nlohmann::json &state = ckpt.state;
  if (state.is_object() && state.contains("hf_origin") &&
      state["hf_origin"].is_object() &&
      state["hf_origin"].contains(module.name) &&
      state["hf_origin"][module.name].is_string())
    return state["hf_origin"][module.name].get<std::string>();
  const nlohmann::json origins = hfOriginsOf(config);
  return origins.contains(module.name) ? origins[module.name].get<std::string>()
                                       : "";
}

/// The language part of `dir`'s config.json (a LLaVA config's
/// text_config); null, with a note, when it cannot be read.
nlohmann::json pretrainedText(const std::string &dir,
                              std::vector<std::string> &notes) {
  std::string error;
  const std::string path = (fs::path(dir) / "config.json").string();
  std::optional<std::string> text =
      readInputFile(path, kMaxSmallJsonBytes, "the Hugging Face config", error);
  Diagnostic syntax;
  std::optional<nlohmann::json> c =
      text ? parseJsonText(*text, syntax) : std::nullopt;
  if (!c || !c->is_object()) {
    notes.push_back("note: " + (text ? path + ": " + syntax.message : error) +
                    ": bos/eos ids and max_position_embeddings are not the "
                    "pretrained ones");
    return nullptr;
  }
  if (c->contains("text_config") && (*c)["text_config"].is_object())
    return (*c)["text_config"];
  return *c;
}

/// What transformers' tokenizers and generate() read beside a model.
constexpr const char *kTokenizerFiles[] = {"tokenizer.json",
                                           "tokenizer.model",
                                           "tokenizer_config.json",
                                           "special_tokens_map.json",
                                           "added_tokens.json",
                                           "vocab.json",
                                           "merges.txt",
                                           "chat_template.jinja",
                                           "chat_template.json",
                                           "generation_config.json"};
/// What LLaVA's processor reads (an image processor's, the processor's).
constexpr const char *kProcessorFiles[] = {"preprocessor_config.json",
                                           "processor_config.json"};

/// Adds the regular files of `names` found in `dir` (a symbolic link, as
/// in the Hugging Face cache, is followed) not already in `copies`.
template <size_t N>
void addCopies(const std::string &dir, const char *const (&names)[N],
               std::vector<fs::path> &copies) {
  std::error_code ec;
  for (const char *name : names) {
    const fs::path file = fs::path(dir) / name;
    bool taken = false;
    for (const fs::path &c : copies)
      taken = taken || c.filename() == name;
    if (!taken && fs::is_regular_file(file, ec))
      copies.push_back(file);
  }
}

std::string copiedNames(const std::vector<fs::path> &copies) {
  std::string names;
  for (const fs::path &c : copies)
    names += (names.empty() ? "" : ", ") + c.filename().string();
  return names;
}

/// Writes `f`'s safetensors (sharded at `shardBytes`), index, config and
/// copies into f.partial; returns how many safetensors files; throws
/// std::runtime_error naming the file.
size_t writeFolder(const OutFolder &f, TrainedValues &values,
                   const std::string &dtype, int64_t shardBytes) {
  const std::vector<OutTensor> &tensors = f.tensors;
  // Shards of at most shardBytes (a larger tensor alone in its own).
  std::vector<std::vector<size_t>> shards(1);
  int64_t filled = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!shards.back().empty() && filled + tensors[i].bytes > shardBytes) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(i);
    filled += tensors[i].bytes;
  }
  nlohmann::ordered_json weightMap = nlohmann::ordered_json::object();
  int64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    if (f.peft)
      std::snprintf(name, sizeof name, "adapter_model.safetensors");
    else if (shards.size() == 1)
      std::snprintf(name, sizeof name, "model.safetensors");
    else
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors",
                    s + 1, shards.size());
    safetensors::Header header;
    header.metadata = {{"format", "pt"}};
    for (size_t i : shards[s])
      header.tensors.push_back({tensors[i].name,
                                dtype == "bf16" ? "BF16" : "F32",
                                tensors[i].shape, 0, 0});
    const fs::path file = f.partial / name;
    std::ofstream os(file, std::ios::binary);
    os << safetensors::encodeHeader(header);
    for (size_t i : shards[s]) {
      const OutTensor &t = tensors[i];
      // A LoRA target merged with its adapters (PEFT's folders hold the
      // adapters themselves).
      std::vector<float> v =
          f.peft ? values.kept(t.source) : values.whole(t.source);
      std::vector<float> hf(v.size());
      for (int64_t r = 0; r < t.rows; ++r)
        for (int64_t c = 0; c < t.cols; ++c)
          hf[static_cast<size_t>(t.transposed ? c * t.rows + r
                                              : r * t.cols + c)] =
              v[static_cast<size_t>(r * t.cols + c)];
      if (dtype == "bf16") {
        std::vector<uint16_t> bits(hf.size());
        for (size_t k = 0; k < hf.size(); ++k)
          bits[k] = device::bodies::bf16Bits(hf[k]);
        os.write(reinterpret_cast<const char *>(bits.data()),
                 static_cast<std::streamsize>(bits.size() * 2));
      } else {
        os.write(reinterpret_cast<const char *>(hf.data()),
                 static_cast<std::streamsize>(hf.size() * 4));
      }
      weightMap[t.name] = name;
      total += t.bytes;
    }
    os.close();
    if (!os)
      throw std::runtime_error(file.string() + ": error: cannot write it");
  }
  auto writeJson = [&](const char *name, const nlohmann::ordered_json &doc) {
    std::ofstream os(f.partial / name);
    os << doc.dump(2) << "\n";
    os.close();
    if (!os)
      throw std::runtime_error((f.partial / name).string() +
                               ": error: cannot write it");
  };
  if (shards.size() > 1) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = weightMap;
    writeJson("model.safetensors.index.json", index);
  }
  writeJson(f.peft ? "adapter_config.json" : "config.json", f.config);
  for (const fs::path &from : f.copies) {
    std::error_code ec;
    fs::copy_file(from, f.partial / from.filename(), ec);
    if (ec)
      throw std::runtime_error(from.string() + ": error: cannot copy it into " +
                               f.partial.string() + ": " + ec.message());
  }
  return shards.size();
}

/// Whether `path` is absent or an empty folder (an export may go there).
bool freeForExport(const fs::path &path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec)))
    return true;
  return fs::is_directory(fs::symlink_status(path, ec)) &&
         fs::is_empty(path, ec) && !ec;
}

} // namespace

std::string exportHf(const ModelConfig &config, const std::string &checkpoint,
                     const std::string &out, const HfExportOptions &options,
                     std::vector<std::string> &written) {
  std::string error;
  std::optional<Checkpoint> ckpt =
      openCheckpoint(checkpoint, config, error, /*otherRun=*/true);
  if (!ckpt)
    return error;
  // Merged onto (or named as) the base the adapters were trained on.
  if (std::string problem = loraBaseProblem(*ckpt, config); !problem.empty())
    return problem + " (nothing was written)";
  TrainedValues values(config, *ckpt);
  const std::string &dtype = options.dtype;
  const int64_t esize = dtype == "bf16" ? 2 : 4;
  fs::path target = fs::path(out).lexically_normal();
  if (!target.has_filename())
    target = target.parent_path();
  if (target.empty())
    target = ".";

  // The folders, decided before anything is written.
  const ModuleConfig &language = config.language();
  std::vector<std::string> notes;
  const std::string languageOrigin = originOf(*ckpt, config, language);
  const nlohmann::json pretrained = languageOrigin.empty()
                                        ? nlohmann::json(nullptr)
                                        : pretrainedText(languageOrigin, notes);
  std::vector<OutFolder> folders;
  auto languageCopies = [&](OutFolder &f) {
    if (languageOrigin.empty())
      notes.push_back("note: module '" + language.name +
                      "' did not start from a Hugging Face folder: no "
                      "tokenizer or generation_config.json copied (add the "
                      "tokenizer's files to " +
                      f.final.string() + " yourself)");
    else
      addCopies(languageOrigin, kTokenizerFiles, f.copies);
  };
  if (options.perModule) {
    for (const ModuleConfig &module : config.modules) {
      const bool isLanguage = module.kind == ModuleKind::Language;
      if (std::string why = module.family().hfExportProblem(module);
          !why.empty()) {
        notes.push_back("note: module '" + module.name +
                        "' (an encoder) is not exported: " + why +
                        " (its weights stay in " + ckpt->dir + ")");
        continue;
      }
      OutFolder f;
      f.final = target / module.name;
      f.label = "module '" + module.name + "'";
      HfLayout layout;
      if (!isLanguage)
        layout.projector = "multi_modal_projector.";
      f.modules = {&module};
      f.layout = layout;
      if (std::string e = addTensors(config, module, layout, esize, f.tensors);
          !e.empty())
        return e;
      if (isLanguage) {
        f.config = hfConfigOf(config, module, dtype, pretrained);
        languageCopies(f);
      } else {
        f.config = hfConfigOf(config, module, dtype);
        if (std::string origin = originOf(*ckpt, config, module);
            !origin.empty())
          addCopies(origin, kProcessorFiles, f.copies);
      }
      folders.push_back(std::move(f));
    }
  } else {
    std::vector<const ModuleConfig *> encoders;
    for (const ModuleConfig &module : config.modules)
      if (module.kind != ModuleKind::Language)
        encoders.push_back(&module);
    OutFolder f;
    f.final = target;
    if (encoders.size() > 1) {
      std::string names;
      for (const ModuleConfig *e : encoders)
        names += (names.empty() ? "'" : ", '") + e->name + "'";
      return "mimo-run: error: --export-hf writes one Hugging Face folder, "
             "and a LLaVA folder holds one image encoder; this model has " +
             std::to_string(encoders.size()) + " encoders (" + names +
             "): write a folder per module with --export-hf-per-module "
             "(nothing was written)";
    }
    if (encoders.empty()) {
      f.label = "module '" + language.name + "'";
      f.modules = {&language};
      if (std::string e =
              addTensors(config, language, HfLayout{}, esize, f.tensors);
          !e.empty())
        return e;
      f.config = hfConfigOf(config, language, dtype, pretrained);
      languageCopies(f);
    } else {
      const ModuleConfig &encoder = *encoders[0];
      if (std::string problem = llavaProblem(encoder); !problem.empty())
        return "mimo-run: error: --export-hf writes one LLaVA folder, and "
               "module '" +
               encoder.name + "' cannot be its tower: " + problem +
               "; write a folder per module with --export-hf-per-module "
               "(nothing was written)";
      f.label =
          "LLaVA (modules '" + encoder.name + "', '" + language.name + "')";
      const HfLayout layout = HfLayout::llavaBefore452();
      f.modules = {&encoder, &language};
      f.layout = layout;
      for (const ModuleConfig *module : {&encoder, &language})
        if (std::string e =
                addTensors(config, *module, layout, esize, f.tensors);
            !e.empty())
          return e;
      f.config = hfLlavaConfigOf(config, encoder, dtype, pretrained);
      languageCopies(f);
      if (!languageOrigin.empty())
        addCopies(languageOrigin, kProcessorFiles, f.copies);
      if (std::string origin = originOf(*ckpt, config, encoder);
          !origin.empty())
        addCopies(origin, kProcessorFiles, f.copies);
    }
    folders.push_back(std::move(f));
  }

  if (options.peft) {
    std::vector<OutFolder> adapters;
    for (OutFolder &f : folders) {
      bool lora = false;
      for (const ModuleConfig *m : f.modules)
        lora = lora || m->lora;
      if (!lora && options.perModule) {
        notes.push_back("note: " + f.label +
                        " has no lora object: no adapter folder for it");
        continue;
      }
      if (std::string e = toPeft(config, f, esize, languageOrigin); !e.empty())
        return e;
      adapters.push_back(std::move(f));
    }
    folders = std::move(adapters);
  }

  // All or nothing: every target checked before anything is written, each
  // folder staged beside its place, all moved into place at the end.
  std::error_code ec;
  for (OutFolder &f : folders) {
    if (!freeForExport(f.final))
      return f.final.string() +
             ": error: it exists; remove it or give another --export-hf "
             "folder (nothing is overwritten, nothing was written)";
    f.partial = f.final.parent_path() /
                ("." + f.final.filename().string() + ".partial");
  }
  std::vector<const OutFolder *> staged;
  auto discard = [&] {
    for (const OutFolder *f : staged)
      fs::remove_all(f->partial, ec);
  };
  std::vector<std::string> done;
  for (const OutFolder &f : folders) {
    const fs::path parent = f.final.parent_path();
    if (!parent.empty())
      fs::create_directories(parent, ec);
    fs::remove_all(f.partial, ec);
    fs::create_directories(f.partial, ec);
    if (ec) {
      discard();
      return f.partial.string() + ": error: cannot create it: " + ec.message();
    }
    staged.push_back(&f);
    size_t files = 0;
    try {
      files = writeFolder(f, values, dtype,
                          f.peft ? INT64_MAX : options.shardBytes);
    } catch (const std::exception &e) {
      discard();
      return e.what();
    }
    std::string line = f.label + ": " + f.final.string() + " (" +
                       std::to_string(f.tensors.size()) + " tensors, " + dtype +
                       ", " + std::to_string(files) +
                       (files == 1 ? " file" : " shards");
    if (!f.copies.empty())
      line += "; copied " + copiedNames(f.copies);
    done.push_back(line + ")");
  }
  // Every folder written: now into place (an empty folder there gives way).
  for (size_t i = 0; i < staged.size(); ++i) {
    fs::remove(staged[i]->final, ec); // only ever an empty folder
    fs::rename(staged[i]->partial, staged[i]->final, ec);
    if (ec) {
      for (size_t j = 0; j < i; ++j)
        fs::remove_all(staged[j]->final, ec);
      discard();
      return staged[i]->final.string() +
             ": error: cannot move the export there; nothing was exported";
    }
  }
  written.insert(written.end(), done.begin(), done.end());
  written.insert(written.end(), notes.begin(), notes.end());
  return "";
}

} // namespace mimo::exec
