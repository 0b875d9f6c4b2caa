//===- HfWeights.cpp - Hugging Face model folders in ----------------------===//

#include "runtime/checkpoint/HfWeights.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/PeftAdapter.h"

#include "runtime/config/Parameters.h"
#include "runtime/family/VisionTower.h"
#include "runtime/json/JsonReader.h"
#include "runtime/model/Model.h"
#include "runtime/support/InputFile.h"
#include "runtime/support/MappedFile.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mimo::exec {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char *kIndexFile = "model.safetensors.index.json";
constexpr const char *kSingleFile = "model.safetensors";

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

/// IEEE half to float (exact).
float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else { // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

/// Elements [first, first + n) of a tensor's data as fp32 into out[k *
/// stride].
void widen(const unsigned char *data, const std::string &dtype, int64_t first,
           int64_t n, float *out, int64_t stride) {
  if (dtype == "F32") {
    const unsigned char *p = data + first * 4;
    for (int64_t k = 0; k < n; ++k)
      std::memcpy(out + k * stride, p + k * 4, 4);
    return;
  }
  const unsigned char *p = data + first * 2;
  const bool bf16 = dtype == "BF16";
  for (int64_t k = 0; k < n; ++k) {
    uint16_t h;
    std::memcpy(&h, p + k * 2, 2);
    if (bf16) {
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(out + k * stride, &bits, 4);
    } else {
      out[k * stride] = halfToFloat(h); // F16
    }
  }
}

bool readableDtype(const std::string &dtype) {
  return dtype == "F32" || dtype == "BF16" || dtype == "F16";
}

} // namespace

const safetensors::TensorEntry *HfFolder::find(const std::string &name) const {
  auto it = fileOf.find(name);
  return it == fileOf.end() ? nullptr : files[it->second].header.find(name);
}

std::optional<HfFolder> openHfFolder(const std::string &dir,
                                     std::string &error) {
  HfFolder folder;
  folder.dir = dir;
  folder.configPath = (fs::path(dir) / "config.json").string();
  std::optional<std::string> text = readInputFile(
      folder.configPath, kMaxSmallJsonBytes, "the Hugging Face config", error);
  if (!text)
    return std::nullopt;
  Diagnostic syntax;
  std::optional<json> config = parseJsonText(*text, syntax);
  if (!config || !config->is_object()) {
    error = folder.configPath + ": error: " +
            (config ? std::string("expected a JSON object") : syntax.message);
    return std::nullopt;
  }
  folder.config = std::move(*config);
  const json &c = folder.config;
  const bool llava = c.contains("text_config") && c["text_config"].is_object();
  folder.textPointer = llava ? "/text_config" : "";
  folder.text = llava ? c["text_config"] : c;
  if (c.contains("vision_config") && c["vision_config"].is_object()) {
    folder.visionPointer = "/vision_config";
    folder.vision = c["vision_config"];
  } else if (c.contains("model_type") && c["model_type"].is_string() &&
             towerReading(c["model_type"].get<std::string>())) {
    folder.vision = c;
  }

  // The shards: the index's weight_map, else the single file.
  std::vector<std::string> names;
  std::error_code ec;
  const fs::path index = fs::path(dir) / kIndexFile;
  if (fs::exists(index, ec)) {
    std::optional<std::string> indexText = readInputFile(
        index.string(), kMaxSmallJsonBytes, "the safetensors index", error);
    if (!indexText)
      return std::nullopt;
    std::optional<json> doc = parseJsonText(*indexText, syntax);
    if (!doc || !doc->is_object() || !doc->contains("weight_map") ||
        !(*doc)["weight_map"].is_object()) {
      error = index.string() + ": error: " +
              (doc ? std::string("expected an object with a weight_map")
                   : syntax.message);
      return std::nullopt;
    }
    std::map<std::string, size_t> fileIndex;
    for (auto &[tensor, file] : (*doc)["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().empty() ||
          file.get<std::string>().find('/') != std::string::npos) {
        error = index.string() + ": error: /weight_map/" + tensor +
                ": expected the name of a file in " + dir + ", found " +
                briefJson(file);
        return std::nullopt;
      }
      auto [it, added] =
          fileIndex.emplace(file.get<std::string>(), fileIndex.size());
      if (added)
        names.push_back(it->first);
      folder.fileOf[tensor] = it->second;
    }
  } else {
    names.push_back(kSingleFile);
  }
  for (const std::string &name : names) {
    HfFolder::File file;
    file.path = (fs::path(dir) / name).string();
    std::optional<safetensors::Header> header =
        safetensors::readHeader(file.path, error);
    if (!header)
      return std::nullopt;
    file.header = std::move(*header);
    folder.files.push_back(std::move(file));
  }
  // Every tensor of every file; an index that names another file for a
  // tensor, or a tensor no file holds, is an error.
  std::map<std::string, size_t> held;
  for (size_t f = 0; f < folder.files.size(); ++f)
    for (const safetensors::TensorEntry &t : folder.files[f].header.tensors) {
      auto it = folder.fileOf.find(t.name);
      if (it != folder.fileOf.end() && it->second != f)
        continue; // the index says another file holds it
      held.emplace(t.name, f);
    }
  for (auto &[tensor, f] : folder.fileOf)
    if (!held.count(tensor)) {
      error = index.string() + ": error: tensor '" + tensor + "' is not in " +
              folder.files[f].path + ", where the index says it is";
      return std::nullopt;
    }
  folder.fileOf = std::move(held);
  // The layout, by the tensors the folder holds.
  const HfLayout before = HfLayout::llavaBefore452(),
                 since = HfLayout::llavaSince452();
  auto holds = [&](const std::string &prefix, const char *first,
                   const char *second) {
    return folder.find(prefix + first) || folder.find(prefix + second);
  };
  HfLayout &layout = folder.layout;
  for (const HfLayout *llava : {&before, &since})
    if (holds(llava->languageBody, "embed_tokens.weight", "norm.weight")) {
      layout.languageBody = llava->languageBody;
      layout.languageHead = llava->languageHead;
    }
  for (const HfLayout *llava : {&before, &since}) {
    if (holds(llava->vision, "embeddings.patch_embedding.weight",
              "embeddings.position_embedding.weight"))
      layout.vision = llava->vision;
    if (holds(llava->projector, "linear_1.weight", "linear_2.weight"))
      layout.projector = llava->projector;
  }
  const std::string fused = ".experts.gate_up_proj";
  for (const auto &[tensor, f] : folder.fileOf)
    if (tensor.size() > fused.size() &&
        tensor.compare(tensor.size() - fused.size(), fused.size(), fused) == 0)
      layout.fusedExperts = true;
  return folder;
}

std::optional<HfSource> HfFolder::sourceOf(const ModuleConfig &module,
                                           const std::string &local) const {
  return module.family().hfSource(layout, local);
}

std::string hfTensorProblem(const HfFolder &folder, const ModelConfig &config,
                            const ModuleConfig &module) {
  const bool language = module.kind == ModuleKind::Language;
  std::set<std::string> used;
  for (const ParamSpec &spec :
       stageParameters(module, config.language().hiddenSize, false, 1, 0)) {
    if (isLoraFactor(spec.local))
      continue; // adapters: not the base's (an init's adapter folder)
    std::optional<HfSource> source = folder.sourceOf(module, spec.local);
    if (!source) {
      if (!language && spec.local.rfind("projection.", 0) == 0)
        continue; // no projector in the folder: mimo's init
      return folder.dir + ": error: mimo's parameter '" + spec.name() +
             "' has no Hugging Face name (docs/pretrained.md)";
    }
    const safetensors::TensorEntry *t = folder.find(source->name);
    if (!t)
      return folder.dir + ": error: tensor '" + source->name +
             "' is missing (mimo's '" + spec.name() +
             "'): the folder is of another architecture, or incomplete "
             "(check arch)";
    used.insert(source->name);
    std::vector<int64_t> want =
        spec.rows == 1       ? std::vector<int64_t>{spec.cols}
        : source->transposed ? std::vector<int64_t>{spec.cols, spec.rows}
                             : std::vector<int64_t>{spec.rows, spec.cols};
    const std::string &file = folder.files[folder.fileOf.at(t->name)].path;
    // The patch convolution's [hidden, C, p, p] is [hidden, C·p·p].
    std::vector<int64_t> shape = t->shape;
    if (spec.local == "patch.weight" && shape.size() == 4 &&
        shape[1] * shape[2] * shape[3] == spec.rows) {
      shape = {shape[0], spec.rows};
      want = {spec.cols, spec.rows};
    }
    // A stacked tensor: a slab per expert (their count is config.json's
    // to check), each of `parts` blocks.
    if (source->slab >= 0)
      want = {shape.size() == 3 ? std::max(shape[0], source->slab + 1)
                                : source->slab + 1,
              source->parts * want[0], want[1]};
    if (shape != want)
      return file + ": error: tensor '" + t->name + "' has shape " +
             shapeText(t->shape) + ", but mimo's '" + spec.name() + "' needs " +
             shapeText(want) +
             ": the folder is of another architecture (check arch)";
    if (!readableDtype(t->dtype))
      return file + ": error: tensor '" + t->name + "' is " + t->dtype +
             "; mimo reads BF16, F16 and F32 weights";
  }
  // What the folder holds of the module beyond its parameters (a LLaVA
  // folder's other modules are theirs).
  for (const auto &[name, f] : folder.fileOf) {
    if (used.count(name))
      continue;
    if (module.family().hfClaim(module, folder.layout, name) != HfClaim::Ours)
      continue;
    return folder.files[f].path + ": error: tensor '" + name +
           "' is not a parameter of this model (module '" + module.name +
           "'): the folder is of another architecture (check arch: " +
           (language ? "num_layers, qkv_bias, tie_embeddings"
                     : "num_layers, final_norm, patch_bias, projector") +
           ")";
  }
  return "";
}

void readHfWeights(const HfFolder &folder, const ModuleConfig &module,
                   const std::vector<Param *> &params) {
  std::vector<std::pair<Param *, HfSource>> sources;
  const std::string moduleDot = module.name + ".";
  for (Param *p : params) {
    const std::string local = p->name.substr(moduleDot.size());
    if (isLoraFactor(local))
      continue; // adapters: initialised, or from the init's adapter folder
    std::optional<HfSource> source = folder.sourceOf(module, local);
    if (!source && module.kind == ModuleKind::Encoder &&
        local.rfind("projection.", 0) == 0)
      continue; // no projector in the folder: mimo's init stays
    if (!source)
      throw std::runtime_error(folder.dir + ": error: no tensor for '" +
                               p->name + "'");
    sources.push_back({p, *source});
  }
  readHfTensors(folder, sources);
}

void readHfTensors(const HfFolder &folder,
                   const std::vector<std::pair<Param *, HfSource>> &sources) {
  std::map<size_t, std::unique_ptr<MappedFile>> maps;
  for (const auto &[p, hfSource] : sources) {
    const HfSource *source = &hfSource;
    const safetensors::TensorEntry *t = folder.find(source->name);
    if (!t)
      throw std::runtime_error(folder.dir + ": error: no tensor for '" +
                               p->name + "'");
    const size_t f = folder.fileOf.at(t->name);
    auto &map = maps[f];
    if (!map) {
      map = std::make_unique<MappedFile>();
      std::string error;
      if (!map->open(folder.files[f].path, "the weights", error))
        throw std::runtime_error(error);
    }
    const safetensors::Header &header = folder.files[f].header;
    const int64_t begin = header.dataOffset + t->begin;
    if (begin < 0 || header.dataOffset + t->end > map->size)
      throw std::runtime_error(folder.files[f].path + ": error: tensor '" +
                               t->name + "' lies past the end of the file");
    const unsigned char *data = map->bytes() + begin;
    const int64_t rows = p->rowEnd - p->rowBegin,
                  cols = p->colEnd - p->colBegin;
    // A parameter of a stacked tensor starts at its block (hfTensorProblem
    // checked the shape; the bytes are checked here too).
    const int64_t block = p->globalRows * p->globalCols;
    const int64_t offset =
        source->slab < 0
            ? 0
            : (source->slab * source->parts + source->part) * block;
    int64_t elements = 1;
    for (int64_t d : t->shape)
      elements *= d;
    const int64_t elementBytes =
        (t->end - t->begin) / std::max<int64_t>(1, elements);
    if (source->slab >= 0 &&
        (offset + block) * elementBytes > t->end - t->begin)
      throw std::runtime_error(folder.files[f].path + ": error: tensor '" +
                               t->name + "' holds no block for '" + p->name +
                               "' (check arch: moe.num_experts)");
    std::vector<float> host(static_cast<size_t>(rows * cols));
    // Runs of contiguous elements, widened a run at a time: mimo's [in, out]
    // block column c is row colBegin + c of a transposed tensor's [out, in]
    // (its elements rowBegin.. contiguous); row r of a plain one is
    // contiguous from colBegin.
    const int64_t runs = source->transposed ? cols : rows;
    const int64_t length = source->transposed ? rows : cols;
    for (int64_t i = 0; i < runs; ++i) {
      const int64_t first =
          offset + (source->transposed
                        ? (p->colBegin + i) * p->globalRows + p->rowBegin
                        : (p->rowBegin + i) * p->globalCols + p->colBegin);
      float *out = host.data() + (source->transposed ? i : i * cols);
      const int64_t stride = source->transposed ? cols : 1;
      widen(data, t->dtype, first, length, out, stride);
      for (int64_t k = 0; k < length; ++k)
        if (!std::isfinite(out[k * stride]))
          throw std::runtime_error(
              folder.files[f].path + ": error: tensor '" + t->name +
              "' holds " + std::to_string(out[k * stride]) + " at element " +
              std::to_string(first + k) + "; the weights are damaged");
    }
    map->checkIntact(); // a shard truncated under us: an error, not zeros
    if (!host.empty())
      p->value.device().upload(p->value.raw(), host.data(), p->value.bytes());
  }
}

std::vector<Diagnostic> initProblems(const ModelConfig &config) {
  std::vector<Diagnostic> problems;
  for (const ModuleConfig &module : config.modules) {
    if (!module.init)
      continue;
    std::string error;
    if (module.init->format != "hf") {
      // A mimo checkpoint: found, complete and of this architecture, as
      // mimo-run will check it (round 3: mimoc compile accepted a missing
      // one).
      if (!openModuleWeights(module.init->from, config, module, error))
        problems.push_back(
            Diagnostic::error(module.pointer + "/init/from", error));
      continue;
    }
    std::optional<HfFolder> folder = openHfFolder(module.init->from, error);
    if (!folder) {
      problems.push_back(
          Diagnostic::error(module.pointer + "/init/from", error));
      continue;
    }
    std::vector<Diagnostic> configProblems =
        hfConfigProblems(*folder, module, config.batch.seqLength);
    if (!configProblems.empty()) {
      problems.insert(problems.end(), configProblems.begin(),
                      configProblems.end());
      continue;
    }
    error = hfTensorProblem(*folder, config, module);
    if (!error.empty()) {
      problems.push_back(
          Diagnostic::error(module.pointer + "/init/from", error));
      continue;
    }
    if (!module.init->adapterFrom.empty() &&
        !openPeftAdapter(module.init->adapterFrom, *folder, config, module,
                         error))
      problems.push_back(
          Diagnostic::error(module.pointer + "/init/adapter/from", error));
  }
  return problems;
}

} // namespace mimo::exec
