//===- HfExport.cpp - Hugging Face model folders out ----------------------===//

#include "runtime/checkpoint/HfExport.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/FileIo.h"
#include "runtime/checkpoint/HfWeights.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/config/Parameters.h"
#include "runtime/device/KernelBodies.h"

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
                                  const std::string &dtype) {
  const bool qwen = m.qkvBias;
  nlohmann::ordered_json c;
  c["architectures"] = {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  c["model_type"] = qwen ? "qwen2" : "llama";
  c["vocab_size"] = m.vocabSize;
  c["hidden_size"] = m.hiddenSize;
  c["intermediate_size"] = m.ffnHiddenSize;
  c["num_hidden_layers"] = m.numLayers;
  c["num_attention_heads"] = m.numHeads;
  c["num_key_value_heads"] = m.kvHeads();
  c["head_dim"] = m.hiddenSize / m.numHeads;
  c["hidden_act"] = "silu";
  c["max_position_embeddings"] = config.batch.seqLength;
  c["rms_norm_eps"] = m.normEps;
  c["rope_theta"] = m.ropeTheta;
  if (m.ropeScaling)
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", m.ropeScaling->factor},
                         {"low_freq_factor", m.ropeScaling->lowFreqFactor},
                         {"high_freq_factor", m.ropeScaling->highFreqFactor},
                         {"original_max_position_embeddings",
                          m.ropeScaling->originalMaxPositions}};
  else
    c["rope_scaling"] = nullptr;
  c["tie_word_embeddings"] = m.tieEmbeddings;
  if (!qwen) {
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
  }
  c["attention_dropout"] = 0.0;
  c["initializer_range"] = 0.02;
  c["use_cache"] = true;
  c["torch_dtype"] = dtype == "bf16" ? "bfloat16" : "float32";
  c["transformers_version"] = "4.45.0";
  return c;
}

nlohmann::ordered_json hfVisionConfigOf(const ModelConfig &config,
                                        const ModuleConfig &m,
                                        const std::string &dtype) {
  std::string why;
  const bool clip = visionFamilyOf(m, why) == VisionFamily::Clip;
  const PatchGeometry patch = patchGeometryOf(m.featureDim);
  const int64_t grid = m.maxPositions - (m.classToken ? 1 : 0);
  const auto side =
      static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(grid))));
  nlohmann::ordered_json c;
  c["architectures"] = {clip ? "CLIPVisionModel" : "SiglipVisionModel"};
  c["model_type"] = clip ? "clip_vision_model" : "siglip_vision_model";
  c["hidden_size"] = m.hiddenSize;
  c["intermediate_size"] = m.ffnHiddenSize;
  c["num_hidden_layers"] = m.numLayers;
  c["num_attention_heads"] = m.numHeads;
  c["num_channels"] = patch.channels;
  c["patch_size"] = patch.patch;
  c["image_size"] = side * patch.patch;
  c["hidden_act"] = hfActivationName(m.activation);
  c["layer_norm_eps"] = m.normEps;
  c["attention_dropout"] = 0.0;
  // LLaVA's keys for the tower's output and the projector.
  c["vision_feature_layer"] = m.outputLayer;
  c["vision_feature_select_strategy"] = m.classToken ? "default" : "full";
  c["projector_hidden_act"] = hfActivationName(m.projectorActivation);
  c["projector_hidden_size"] = config.language().hiddenSize;
  c["torch_dtype"] = dtype == "bf16" ? "bfloat16" : "float32";
  c["transformers_version"] = "4.45.0";
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

/// Reads a checkpoint tensor (F32, global [rows, cols]) whole.
std::vector<float> readTensor(File &file, const safetensors::Header &header,
                              const safetensors::TensorEntry &entry) {
  std::vector<float> values(static_cast<size_t>((entry.end - entry.begin) / 4));
  file.readAt(values.data(), entry.end - entry.begin,
              header.dataOffset + entry.begin);
  return values;
}

} // namespace

std::string exportHf(const ModelConfig &config, const std::string &checkpoint,
                     const std::string &out, const std::string &dtype,
                     std::vector<std::string> &written, int64_t shardBytes) {
  std::string error;
  std::optional<Checkpoint> ckpt =
      openCheckpoint(checkpoint, config, error, /*otherRun=*/true);
  if (!ckpt)
    return error;
  const std::string modelPath =
      (fs::path(ckpt->dir) / "model.safetensors").string();
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec)
    return out + ": error: cannot create it: " + ec.message();
  const int64_t esize = dtype == "bf16" ? 2 : 4;
  // All or nothing: every target checked before anything is written, each
  // module staged in a hidden folder, all moved into place at the end.
  for (const ModuleConfig &module : config.modules) {
    std::string why;
    if (module.kind != ModuleKind::Language && !visionFamilyOf(module, why))
      continue;
    const fs::path final = fs::path(out) / module.name;
    if (fs::exists(final, ec))
      return final.string() +
             ": error: it exists; remove it or give another --export-hf "
             "folder (nothing is overwritten, nothing was written)";
  }
  std::vector<std::pair<fs::path, fs::path>> staged; // partial -> final
  auto discard = [&] {
    for (const auto &entry : staged)
      fs::remove_all(entry.first, ec);
  };
  std::vector<std::string> done;
  for (const ModuleConfig &module : config.modules) {
    const bool language = module.kind == ModuleKind::Language;
    std::string why;
    if (!language && !visionFamilyOf(module, why)) {
      written.push_back("module '" + module.name +
                        "' (an encoder): not exported: " + why +
                        " (its weights stay in " + ckpt->dir + ")");
      continue;
    }
    const std::string visionPrefix = "vision_model.",
                      projectorPrefix = "multi_modal_projector.";
    const fs::path final = fs::path(out) / module.name;
    // The tensors, in the checkpoint's parameter order.
    std::vector<OutTensor> tensors;
    for (const ParamSpec &spec :
         stageParameters(module, config.language().hiddenSize, false, 1, 0)) {
      std::optional<HfSource> source =
          language ? hfLanguageSource("", spec.local)
                   : hfVisionSource(visionPrefix, projectorPrefix, spec.local);
      if (!source) {
        discard();
        return "mimo-run: error: parameter '" + spec.name() +
               "' has no Hugging Face name";
      }
      OutTensor t;
      t.name = source->name;
      t.source = spec.name();
      t.rows = spec.rows, t.cols = spec.cols;
      t.transposed = source->transposed;
      t.shape = spec.rows == 1 ? std::vector<int64_t>{spec.cols}
                : t.transposed ? std::vector<int64_t>{spec.cols, spec.rows}
                               : std::vector<int64_t>{spec.rows, spec.cols};
      if (spec.local == "patch.weight") { // the convolution's [H, C, p, p]
        const PatchGeometry patch = patchGeometryOf(module.featureDim);
        t.shape = {spec.cols, patch.channels, patch.patch, patch.patch};
      }
      t.bytes = spec.rows * spec.cols * esize;
      tensors.push_back(std::move(t));
    }
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
    const fs::path partial = fs::path(out) / ("." + module.name + ".partial");
    fs::remove_all(partial, ec);
    fs::create_directories(partial, ec);
    if (ec) {
      discard();
      return partial.string() + ": error: cannot create it: " + ec.message();
    }
    staged.emplace_back(partial, final);
    nlohmann::ordered_json weightMap = nlohmann::ordered_json::object();
    int64_t total = 0;
    try {
      File model(modelPath, O_RDONLY | O_CLOEXEC);
      for (size_t s = 0; s < shards.size(); ++s) {
        char name[64];
        if (shards.size() == 1)
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
        const fs::path file = partial / name;
        std::ofstream os(file, std::ios::binary);
        os << safetensors::encodeHeader(header);
        for (size_t i : shards[s]) {
          const OutTensor &t = tensors[i];
          const safetensors::TensorEntry *entry = ckpt->model.find(t.source);
          if (!entry)
            throw std::runtime_error(modelPath + ": error: no tensor '" +
                                     t.source + "'");
          std::vector<float> v = readTensor(model, ckpt->model, *entry);
          for (size_t k = 0; k < v.size(); ++k)
            if (!std::isfinite(v[k]))
              throw std::runtime_error(
                  modelPath + ": error: tensor '" + t.source + "' holds " +
                  std::to_string(v[k]) + " at element " + std::to_string(k) +
                  ": the checkpoint is not finite (training diverged, or the "
                  "file is damaged); nothing is exported: export an earlier "
                  "step (--load DIR/step-N)");
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
    } catch (const std::exception &e) {
      discard();
      return e.what();
    }
    if (shards.size() > 1) {
      nlohmann::ordered_json index;
      index["metadata"] = {{"total_size", total}};
      index["weight_map"] = weightMap;
      std::ofstream(partial / "model.safetensors.index.json")
          << index.dump(2) << "\n";
    }
    std::ofstream cfg(partial / "config.json");
    cfg << (language ? hfConfigOf(config, module, dtype)
                     : hfVisionConfigOf(config, module, dtype))
               .dump(2)
        << "\n";
    cfg.close();
    if (!cfg) {
      discard();
      return (partial / "config.json").string() + ": error: cannot write it";
    }
    done.push_back("module '" + module.name + "': " + final.string() + " (" +
                   std::to_string(tensors.size()) + " tensors, " + dtype +
                   ", " + std::to_string(shards.size()) +
                   (shards.size() == 1 ? " file)" : " shards)"));
  }
  // Every module written: now into place.
  for (size_t i = 0; i < staged.size(); ++i) {
    fs::rename(staged[i].first, staged[i].second, ec);
    if (ec) {
      for (size_t j = 0; j < i; ++j)
        fs::remove_all(staged[j].second, ec);
      discard();
      return staged[i].second.string() +
             ": error: cannot move the export there; nothing was exported";
    }
  }
  written.insert(written.end(), done.begin(), done.end());
  return "";
}

} // namespace mimo::exec
