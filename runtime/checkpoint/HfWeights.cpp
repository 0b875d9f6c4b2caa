//===- HfWeights.cpp - Hugging Face model folders in ----------------------===//

#include "runtime/checkpoint/HfWeights.h"

#include "runtime/config/Parameters.h"
#include "runtime/json/JsonReader.h"
#include "runtime/model/Model.h"
#include "runtime/support/InputFile.h"

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

std::string numberText(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

/// A read-only mapping of a whole file (the page cache's pages: a rank
/// touches only the ones of its blocks).
class Mapping {
public:
  explicit Mapping(const std::string &path) : path(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      throw std::runtime_error(
          path + ": error: cannot open it: " + std::strerror(errno));
    struct stat st{};
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
      ::close(fd);
      throw std::runtime_error(path + ": error: cannot read its size");
    }
    bytes = static_cast<size_t>(st.st_size);
    void *p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED)
      throw std::runtime_error(
          path + ": error: cannot map it: " + std::strerror(errno));
    data = static_cast<const unsigned char *>(p);
  }
  ~Mapping() { ::munmap(const_cast<unsigned char *>(data), bytes); }
  Mapping(const Mapping &) = delete;
  Mapping &operator=(const Mapping &) = delete;
  const unsigned char *data = nullptr;
  size_t bytes = 0;
  std::string path;
};

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

/// The Hugging Face names of the language module's HF tensors that mimo
/// has no parameter for but that a folder may hold: RoPE's cached
/// frequencies (older checkpoints), and a tied model's head.
bool ignoredTensor(const std::string &name, const std::string &prefix,
                   bool tied) {
  const std::string inv = "rotary_emb.inv_freq";
  if (name.size() >= inv.size() &&
      name.compare(name.size() - inv.size(), inv.size(), inv) == 0)
    return true;
  return tied && name == prefix + "lm_head.weight";
}

} // namespace

HfFolder &HfFolder::operator=(HfFolder &&other) noexcept {
  dir = std::move(other.dir);
  configPath = std::move(other.configPath);
  // `text` points into `config`: re-point it after the move.
  std::string pointer = other.textPointer;
  config = std::move(other.config);
  textPointer = pointer;
  text = pointer.empty() ? &config : &config["text_config"];
  files = std::move(other.files);
  fileOf = std::move(other.fileOf);
  languagePrefix = std::move(other.languagePrefix);
  return *this;
}

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
  const bool llava = folder.config.contains("text_config") &&
                     folder.config["text_config"].is_object();
  folder.textPointer = llava ? "/text_config" : "";
  folder.text = llava ? &folder.config["text_config"] : &folder.config;

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
  folder.languagePrefix =
      folder.find("language_model.model.embed_tokens.weight") ||
              folder.find("language_model.model.norm.weight")
          ? "language_model."
          : "";
  return folder;
}

std::optional<HfSource> hfLanguageSource(const std::string &prefix,
                                         const std::string &local) {
  const std::string m = prefix + "model.";
  if (local == "embedding")
    return HfSource{m + "embed_tokens.weight", false};
  if (local == "final_norm")
    return HfSource{m + "norm.weight", false};
  if (local == "head")
    return HfSource{prefix + "lm_head.weight", true};
  // layers.L.NAME
  if (local.rfind("layers.", 0) != 0)
    return std::nullopt;
  size_t dot = local.find('.', 7);
  if (dot == std::string::npos)
    return std::nullopt;
  const std::string layer = m + local.substr(0, dot) + ".";
  const std::string name = local.substr(dot + 1);
  static const std::map<std::string, std::pair<const char *, bool>> map = {
      {"attn_norm", {"input_layernorm.weight", false}},
      {"mlp_norm", {"post_attention_layernorm.weight", false}},
      {"wq", {"self_attn.q_proj.weight", true}},
      {"wk", {"self_attn.k_proj.weight", true}},
      {"wv", {"self_attn.v_proj.weight", true}},
      {"wo", {"self_attn.o_proj.weight", true}},
      {"bq", {"self_attn.q_proj.bias", false}},
      {"bk", {"self_attn.k_proj.bias", false}},
      {"bv", {"self_attn.v_proj.bias", false}},
      {"gate", {"mlp.gate_proj.weight", true}},
      {"up", {"mlp.up_proj.weight", true}},
      {"down", {"mlp.down_proj.weight", true}},
  };
  auto it = map.find(name);
  if (it == map.end())
    return std::nullopt;
  return HfSource{layer + it->second.first, it->second.second};
}

std::vector<Diagnostic> hfConfigProblems(const HfFolder &folder,
                                         const ModuleConfig &module) {
  std::vector<Diagnostic> problems;
  const json &c = *folder.text;
  const std::string arch = module.pointer + "/arch/";
  auto where = [&](const std::string &key) {
    return folder.textPointer + "/" + key + " of " + folder.configPath;
  };
  auto problem = [&](const std::string &key, const std::string &message) {
    problems.push_back(Diagnostic::error(arch + key, message));
  };
  if (module.kind != ModuleKind::Language) {
    problems.push_back(Diagnostic::error(
        module.pointer + "/init/format",
        "Hugging Face folders initialise the language module in this "
        "version (Llama, Mistral, Qwen2); start encoder '" +
            module.name +
            "' from a mimo checkpoint (\"mimo\") or leave init "
            "out"));
    return problems;
  }
  const std::string type =
      c.contains("model_type") && c["model_type"].is_string()
          ? c["model_type"].get<std::string>()
          : "";
  if (type != "llama" && type != "mistral" && type != "qwen2") {
    problems.push_back(Diagnostic::error(
        module.pointer + "/init/from",
        "the folder's model is " +
            (type.empty() ? std::string("of no model_type")
                          : "a '" + type + "'") +
            " (" + where("model_type") +
            "); mimo's language model reads the Llama, Mistral and Qwen2 "
            "families"));
    return problems;
  }
  // An integer size of config.json against arch.
  auto size = [&](const char *key, const char *hfKey, int64_t mine,
                  std::optional<int64_t> fallback = std::nullopt) {
    std::optional<int64_t> theirs = fallback;
    if (c.contains(hfKey) && c[hfKey].is_number_integer())
      theirs = c[hfKey].get<int64_t>();
    if (!theirs) {
      problem(key, std::string("config.json gives no integer ") + hfKey + " (" +
                       where(hfKey) + ")");
      return;
    }
    if (*theirs != mine)
      problem(key, std::to_string(mine) + " here, but " + where(hfKey) +
                       " is " + std::to_string(*theirs) + ": set arch." + key +
                       " to " + std::to_string(*theirs) +
                       " (the pretrained model's)");
  };
  auto number = [&](const char *key, const char *hfKey, double mine,
                    double fallback) {
    double theirs = fallback;
    if (c.contains(hfKey) && c[hfKey].is_number())
      theirs = c[hfKey].get<double>();
    if (std::abs(theirs - mine) > 1e-9 * std::max(std::abs(theirs), 1e-30))
      problem(key, numberText(mine) + " here, but " + where(hfKey) + " is " +
                       numberText(theirs) + ": set arch." + key + " to " +
                       numberText(theirs));
  };
  auto flag = [&](const char *key, const std::string &hfKey, bool mine,
                  bool theirs) {
    if (mine != theirs)
      problem(key, std::string(mine ? "true" : "false") + " here, but " +
                       where(hfKey) + " makes it " +
                       (theirs ? "true" : "false") + ": set arch." + key +
                       " to " + (theirs ? "true" : "false"));
  };
  size("vocab_size", "vocab_size", module.vocabSize);
  size("hidden_size", "hidden_size", module.hiddenSize);
  size("num_layers", "num_hidden_layers", module.numLayers);
  size("num_heads", "num_attention_heads", module.numHeads);
  size("ffn_hidden_size", "intermediate_size", module.ffnHiddenSize);
  std::optional<int64_t> heads;
  if (c.contains("num_attention_heads") &&
      c["num_attention_heads"].is_number_integer())
    heads = c["num_attention_heads"].get<int64_t>();
  size("num_query_groups", "num_key_value_heads", module.kvHeads(), heads);
  if (c.contains("head_dim") && c["head_dim"].is_number_integer() &&
      module.numHeads > 0 &&
      c["head_dim"].get<int64_t>() != module.hiddenSize / module.numHeads)
    problem("num_heads", where("head_dim") + " is " +
                             std::to_string(c["head_dim"].get<int64_t>()) +
                             ", not hidden_size / num_attention_heads: mimo's "
                             "heads are hidden_size / num_heads wide");
  number("rope_theta", "rope_theta", module.ropeTheta, 10000.0);
  number("norm_eps", "rms_norm_eps", module.normEps, 1e-6);
  const bool tied = c.contains("tie_word_embeddings") &&
                    c["tie_word_embeddings"].is_boolean() &&
                    c["tie_word_embeddings"].get<bool>();
  flag("tie_embeddings", "tie_word_embeddings", module.tieEmbeddings, tied);
  // Qwen2 always has q, k, v biases; Llama's attention_bias also puts one
  // on o, which mimo has not.
  const bool llamaBias = c.contains("attention_bias") &&
                         c["attention_bias"].is_boolean() &&
                         c["attention_bias"].get<bool>();
  if (type == "qwen2")
    flag("qkv_bias", "model_type", module.qkvBias, true);
  else if (llamaBias)
    problem("qkv_bias", where("attention_bias") +
                            " is true: biases on q, k, v and o, and mimo's "
                            "language model has none on o");
  else
    flag("qkv_bias", "attention_bias", module.qkvBias, false);
  if (c.contains("mlp_bias") && c["mlp_bias"].is_boolean() &&
      c["mlp_bias"].get<bool>())
    problem("ffn_hidden_size",
            where("mlp_bias") + " is true: mimo's SwiGLU has no biases");
  if (c.contains("hidden_act") && c["hidden_act"] != "silu")
    problem("ffn_hidden_size", where("hidden_act") + " is " +
                                   briefJson(c["hidden_act"]) +
                                   ": mimo's language MLP is SwiGLU (silu)");
  // RoPE's rescaling.
  const json *scaling =
      c.contains("rope_scaling") && c["rope_scaling"].is_object()
          ? &c["rope_scaling"]
          : nullptr;
  if (scaling) {
    auto text = [&](const char *key) {
      auto it = scaling->find(key);
      return it != scaling->end() && it->is_string() ? it->get<std::string>()
                                                     : std::string();
    };
    std::string kind = text("rope_type");
    if (kind.empty())
      kind = text("type");
    if (kind != "llama3" && kind != "default") {
      problem("rope_scaling",
              where("rope_scaling") + " is of type '" + kind +
                  "', which mimo does not compute (it computes \"llama3\")");
    } else if (kind == "llama3") {
      if (!module.ropeScaling) {
        problem("rope_scaling", "absent here, but " + where("rope_scaling") +
                                    " rescales RoPE (llama3): copy it into "
                                    "arch.rope_scaling with type \"llama3\"");
      } else {
        const RopeScaling &r = *module.ropeScaling;
        auto same = [&](const char *key, double mine) {
          auto it = scaling->find(key);
          double theirs = it != scaling->end() && it->is_number()
                              ? it->get<double>()
                              : std::nan("");
          if (!(std::abs(theirs - mine) <= 1e-9 * std::abs(theirs)))
            problem(std::string("rope_scaling/") + key,
                    numberText(mine) + " here, but " +
                        where(std::string("rope_scaling/") + key) + " is " +
                        numberText(theirs));
        };
        same("factor", r.factor);
        same("low_freq_factor", r.lowFreqFactor);
        same("high_freq_factor", r.highFreqFactor);
        same("original_max_position_embeddings", r.originalMaxPositions);
      }
    } else if (module.ropeScaling) {
      problem("rope_scaling", "set here, but " + where("rope_scaling") +
                                  " does not rescale RoPE: remove it");
    }
  } else if (module.ropeScaling) {
    problem("rope_scaling", "set here, but " + where("rope_scaling") +
                                " is absent (no rescaling): remove it");
  }
  return problems;
}

std::string hfTensorProblem(const HfFolder &folder, const ModelConfig &config,
                            const ModuleConfig &module) {
  const std::string &prefix = folder.languagePrefix;
  std::set<std::string> used;
  for (const ParamSpec &spec :
       stageParameters(module, config.language().hiddenSize, false, 1, 0)) {
    std::optional<HfSource> source = hfLanguageSource(prefix, spec.local);
    if (!source)
      return folder.dir + ": error: mimo's parameter '" + spec.name() +
             "' has no Hugging Face name (docs/pretrained.md)";
    const safetensors::TensorEntry *t = folder.find(source->name);
    if (!t)
      return folder.dir + ": error: tensor '" + source->name +
             "' is missing (mimo's '" + spec.name() +
             "'): the folder is of another architecture, or incomplete";
    used.insert(source->name);
    std::vector<int64_t> want =
        spec.rows == 1       ? std::vector<int64_t>{spec.cols}
        : source->transposed ? std::vector<int64_t>{spec.cols, spec.rows}
                             : std::vector<int64_t>{spec.rows, spec.cols};
    const std::string &file = folder.files[folder.fileOf.at(t->name)].path;
    if (t->shape != want)
      return file + ": error: tensor '" + t->name + "' has shape " +
             shapeText(t->shape) + ", but mimo's '" + spec.name() + "' needs " +
             shapeText(want) +
             ": the folder is of another architecture (check arch)";
    if (!readableDtype(t->dtype))
      return file + ": error: tensor '" + t->name + "' is " + t->dtype +
             "; mimo reads BF16, F16 and F32 weights";
  }
  // What the folder holds of the language model beyond its parameters.
  for (const auto &[name, f] : folder.fileOf) {
    const bool language = name.rfind(prefix + "model.", 0) == 0 ||
                          name.rfind(prefix + "lm_head.", 0) == 0;
    if (!language || used.count(name) ||
        ignoredTensor(name, prefix, module.tieEmbeddings))
      continue;
    return folder.files[f].path + ": error: tensor '" + name +
           "' is not a parameter of this model (module '" + module.name +
           "'): the folder is of another architecture (check arch: "
           "num_layers, qkv_bias, tie_embeddings)";
  }
  return "";
}

void readHfWeights(const HfFolder &folder, const std::string &module,
                   const std::vector<Param *> &params) {
  std::map<size_t, std::unique_ptr<Mapping>> maps;
  const std::string moduleDot = module + ".";
  for (Param *p : params) {
    const std::string local = p->name.substr(moduleDot.size());
    std::optional<HfSource> source =
        hfLanguageSource(folder.languagePrefix, local);
    const safetensors::TensorEntry *t =
        source ? folder.find(source->name) : nullptr;
    if (!t)
      throw std::runtime_error(folder.dir + ": error: no tensor for '" +
                               p->name + "'");
    const size_t f = folder.fileOf.at(t->name);
    auto &map = maps[f];
    if (!map)
      map = std::make_unique<Mapping>(folder.files[f].path);
    const safetensors::Header &header = folder.files[f].header;
    const int64_t begin = header.dataOffset + t->begin;
    if (begin < 0 ||
        static_cast<size_t>(header.dataOffset + t->end) > map->bytes)
      throw std::runtime_error(map->path + ": error: tensor '" + t->name +
                               "' lies past the end of the file");
    const unsigned char *data = map->data + begin;
    const int64_t rows = p->rowEnd - p->rowBegin,
                  cols = p->colEnd - p->colBegin;
    std::vector<float> host(static_cast<size_t>(rows * cols));
    // Runs of contiguous elements, widened a run at a time: mimo's [in, out]
    // block column c is row colBegin + c of a transposed tensor's [out, in]
    // (its elements rowBegin.. contiguous); row r of a plain one is
    // contiguous from colBegin.
    const int64_t runs = source->transposed ? cols : rows;
    const int64_t length = source->transposed ? rows : cols;
    for (int64_t i = 0; i < runs; ++i) {
      const int64_t first =
          source->transposed ? (p->colBegin + i) * p->globalRows + p->rowBegin
                             : (p->rowBegin + i) * p->globalCols + p->colBegin;
      float *out = host.data() + (source->transposed ? i : i * cols);
      const int64_t stride = source->transposed ? cols : 1;
      widen(data, t->dtype, first, length, out, stride);
      for (int64_t k = 0; k < length; ++k)
        if (!std::isfinite(out[k * stride]))
          throw std::runtime_error(
              map->path + ": error: tensor '" + t->name + "' holds " +
              std::to_string(out[k * stride]) + " at element " +
              std::to_string(first + k) + "; the weights are damaged");
    }
    if (!host.empty())
      p->value.device().upload(p->value.raw(), host.data(), p->value.bytes());
  }
}

std::vector<Diagnostic> initProblems(const ModelConfig &config) {
  std::vector<Diagnostic> problems;
  for (const ModuleConfig &module : config.modules) {
    if (!module.init || module.init->format != "hf")
      continue;
    std::string error;
    std::optional<HfFolder> folder = openHfFolder(module.init->from, error);
    if (!folder) {
      problems.push_back(
          Diagnostic::error(module.pointer + "/init/from", error));
      continue;
    }
    std::vector<Diagnostic> configProblems = hfConfigProblems(*folder, module);
    if (!configProblems.empty()) {
      problems.insert(problems.end(), configProblems.begin(),
                      configProblems.end());
      continue;
    }
    error = hfTensorProblem(*folder, config, module);
    if (!error.empty())
      problems.push_back(
          Diagnostic::error(module.pointer + "/init/from", error));
  }
  return problems;
}

} // namespace mimo::exec
