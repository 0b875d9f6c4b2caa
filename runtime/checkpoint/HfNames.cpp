//===- HfNames.cpp - mimo's parameters under Hugging Face names -----------===//

#include "runtime/checkpoint/HfNames.h"

#include <cmath>
#include <cstdlib>
#include <map>

namespace mimo::exec {

namespace {

/// "layers.L.NAME" -> (L, NAME); nullopt for another name.
std::optional<std::pair<std::string, std::string>>
splitLayer(const std::string &local) {
  if (local.rfind("layers.", 0) != 0)
    return std::nullopt;
  size_t dot = local.find('.', 7);
  if (dot == std::string::npos || dot == 7)
    return std::nullopt;
  return std::make_pair(local.substr(7, dot - 7), local.substr(dot + 1));
}

int64_t squareRoot(int64_t n) {
  if (n <= 0)
    return -1;
  auto r = static_cast<int64_t>(std::llround(std::sqrt(double(n))));
  return r * r == n ? r : -1;
}

} // namespace

std::optional<HfSource> hfLanguageSource(const HfLayout &layout,
                                         const std::string &local) {
  const std::string &m = layout.languageBody;
  if (local == "embedding")
    return HfSource{m + "embed_tokens.weight", false};
  if (local == "final_norm")
    return HfSource{m + "norm.weight", false};
  if (local == "head")
    return HfSource{layout.languageHead + "lm_head.weight", true};
  auto layer = splitLayer(local);
  if (!layer)
    return std::nullopt;
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
  auto it = map.find(layer->second);
  if (it == map.end())
    return std::nullopt;
  return HfSource{m + "layers." + layer->first + "." + it->second.first,
                  it->second.second};
}

std::optional<HfSource> hfVisionSource(const HfLayout &layout,
                                       const std::string &local) {
  const std::string &visionPrefix = layout.vision,
                    &projectorPrefix = layout.projector;
  static const std::map<std::string, std::pair<const char *, bool>> top = {
      {"patch.weight", {"embeddings.patch_embedding.weight", true}},
      {"patch.bias", {"embeddings.patch_embedding.bias", false}},
      {"class_token", {"embeddings.class_embedding", false}},
      {"position_embedding", {"embeddings.position_embedding.weight", false}},
      // CLIP's own spelling.
      {"pre_norm.weight", {"pre_layrnorm.weight", false}},
      {"pre_norm.bias", {"pre_layrnorm.bias", false}},
      {"final_norm.weight", {"post_layernorm.weight", false}},
      {"final_norm.bias", {"post_layernorm.bias", false}},
  };
  static const std::map<std::string, std::pair<const char *, bool>> projector =
      {
          {"projection.fc1.weight", {"linear_1.weight", true}},
          {"projection.fc1.bias", {"linear_1.bias", false}},
          {"projection.fc2.weight", {"linear_2.weight", true}},
          {"projection.fc2.bias", {"linear_2.bias", false}},
      };
  static const std::map<std::string, std::pair<const char *, bool>> layer = {
      {"ln1.weight", {"layer_norm1.weight", false}},
      {"ln1.bias", {"layer_norm1.bias", false}},
      {"ln2.weight", {"layer_norm2.weight", false}},
      {"ln2.bias", {"layer_norm2.bias", false}},
      {"wq", {"self_attn.q_proj.weight", true}},
      {"wk", {"self_attn.k_proj.weight", true}},
      {"wv", {"self_attn.v_proj.weight", true}},
      {"wo", {"self_attn.out_proj.weight", true}},
      {"bq", {"self_attn.q_proj.bias", false}},
      {"bk", {"self_attn.k_proj.bias", false}},
      {"bv", {"self_attn.v_proj.bias", false}},
      {"bo", {"self_attn.out_proj.bias", false}},
      {"fc1", {"mlp.fc1.weight", true}},
      {"fc1_bias", {"mlp.fc1.bias", false}},
      {"fc2", {"mlp.fc2.weight", true}},
      {"fc2_bias", {"mlp.fc2.bias", false}},
  };
  if (auto it = top.find(local); it != top.end())
    return HfSource{visionPrefix + it->second.first, it->second.second};
  if (auto it = projector.find(local); it != projector.end()) {
    if (projectorPrefix.empty())
      return std::nullopt;
    return HfSource{projectorPrefix + it->second.first, it->second.second};
  }
  auto parts = splitLayer(local);
  if (!parts)
    return std::nullopt;
  auto it = layer.find(parts->second);
  if (it == layer.end())
    return std::nullopt;
  return HfSource{visionPrefix + "encoder.layers." + parts->first + "." +
                      it->second.first,
                  it->second.second};
}

bool hfVisionUnused(const std::string &local, const ModuleConfig &module) {
  if (local == "embeddings.position_ids" || local.rfind("head.", 0) == 0)
    return true;
  if (local.rfind("post_layernorm.", 0) == 0)
    return !module.finalNorm;
  const std::string layers = "encoder.layers.";
  if (local.rfind(layers, 0) != 0)
    return false;
  const std::string rest = local.substr(layers.size());
  char *end = nullptr;
  const long long l = std::strtoll(rest.c_str(), &end, 10);
  if (end == rest.c_str() || *end != '.')
    return false;
  return l >= module.layers() && l < module.numLayers;
}

std::optional<VisionFamily> visionFamilyOf(const ModuleConfig &m,
                                           std::string &why) {
  if (!m.bias || !m.learnedPositions) {
    why = "CLIP and SigLIP towers have biases and learned position "
          "embeddings (arch.bias, arch.position_embeddings)";
    return std::nullopt;
  }
  std::optional<VisionFamily> family;
  if (m.classToken && m.preNorm && !m.patchBias && !m.finalNorm)
    family = VisionFamily::Clip;
  else if (!m.classToken && !m.preNorm && m.patchBias)
    family = VisionFamily::Siglip;
  if (!family) {
    why = "neither CLIP's structure (class_token, pre_norm, no patch_bias, "
          "no final_norm) nor SigLIP's (no class_token, no pre_norm, a "
          "patch_bias)";
    return std::nullopt;
  }
  const int64_t grid = m.maxPositions - (m.classToken ? 1 : 0);
  if (squareRoot(grid) < 0) {
    why = "its " + std::to_string(grid) +
          " patch positions are not a square grid (image_size / patch_size "
          "squared)";
    return std::nullopt;
  }
  return family;
}

PatchGeometry patchGeometryOf(int64_t featureDim) {
  if (featureDim % 3 == 0 && squareRoot(featureDim / 3) > 0)
    return {3, squareRoot(featureDim / 3)};
  if (squareRoot(featureDim) > 0)
    return {1, squareRoot(featureDim)};
  return {featureDim, 1};
}

std::string hfActivationName(const std::string &mimo) {
  if (mimo == "gelu_tanh")
    return "gelu_pytorch_tanh";
  return mimo; // "gelu", "quick_gelu"
}

std::string mimoActivationName(const std::string &hf) {
  if (hf == "gelu_pytorch_tanh" || hf == "gelu_new")
    return "gelu_tanh";
  if (hf == "gelu" || hf == "quick_gelu")
    return hf;
  return "";
}

} // namespace mimo::exec
