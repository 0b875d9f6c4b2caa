//===- VisionTower.cpp - ViT image towers: mimo's, CLIP, SigLIP -----------===//

#include "runtime/family/VisionTower.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

namespace mimo {

void VisionTowerFamily::declareParameters(const ModuleArch &m,
                                          const std::string &module,
                                          const StageSpan &span,
                                          std::vector<ParamSpec> &out) const {
  using L = ParamLayout;
  using I = ParamInit;
  auto add = [&](const std::string &name, int64_t rows, int64_t cols, L layout,
                 I init = I::Weight, float scale = 0) {
    out.push_back({module, name, rows, cols, layout, init, scale, false});
  };
  const int64_t H = m.hiddenSize, F = m.ffnHiddenSize, D = m.featureDim,
                O = span.outputHidden;
  if (span.first) {
    add("patch.weight", D, H, L::Replicated);
    if (m.patchBias)
      add("patch.bias", 1, H, L::Replicated, I::Zeros);
    if (m.classToken)
      add("class_token", 1, H, L::Replicated, I::Weight,
          1.0f / std::sqrt(static_cast<float>(H)));
    if (m.learnedPositions)
      add("position_embedding", m.maxPositions, H, L::Replicated, I::Weight,
          0.02f);
    if (m.preNorm) {
      add("pre_norm.weight", 1, H, L::Replicated, I::Ones);
      add("pre_norm.bias", 1, H, L::Replicated, I::Zeros);
    }
  }
  for (int64_t l = span.begin; l < span.end; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    add(p + "ln1.weight", 1, H, L::Replicated, I::Ones);
    add(p + "ln1.bias", 1, H, L::Replicated, I::Zeros);
    declareAttention(m, module, p, m.bias, m.bias, span.sequenceParallel, out);
    add(p + "ln2.weight", 1, H, L::Replicated, I::Ones);
    add(p + "ln2.bias", 1, H, L::Replicated, I::Zeros);
    if (m.moe.sparse(l)) { // docs/model.md: SwiGLU experts, no biases
      declareMoeMlp(m.moe, H, module, p, out);
      continue;
    }
    add(p + "fc1", H, F, L::ColumnParallel);
    add(p + "fc2", F, H, L::RowParallel);
    if (m.bias) {
      add(p + "fc1_bias", 1, F, L::ColumnParallel, I::Zeros);
      add(p + "fc2_bias", 1, H, L::Replicated, I::Zeros);
    }
  }
  if (span.last) {
    if (m.finalNorm) {
      add("final_norm.weight", 1, H, L::Replicated, I::Ones);
      add("final_norm.bias", 1, H, L::Replicated, I::Zeros);
    }
    // projector "linear": fc1 alone.
    add("projection.fc1.weight", H, O, L::Replicated);
    add("projection.fc1.bias", 1, O, L::Replicated, I::Zeros);
    if (!m.linearProjector) {
      add("projection.fc2.weight", O, O, L::Replicated);
      add("projection.fc2.bias", 1, O, L::Replicated, I::Zeros);
    }
  }
}

double VisionTowerFamily::forwardFlops(const ModuleArch &m,
                                       int64_t outputHidden, double tokens,
                                       double squares) const {
  double H = static_cast<double>(m.hiddenSize);
  double F = static_cast<double>(m.ffnHiddenSize);
  double D = static_cast<double>(m.featureDim);
  double O = static_cast<double>(outputHidden);
  double L = static_cast<double>(m.layers());
  // A sparse layer's MLP: its active multiply-adds (family/Moe.h).
  const double sparse = static_cast<double>(m.moe.sparseLayers(m.layers()));
  // The projector: fc1 [H, O], and fc2 [O, O] unless it is "linear".
  double perToken = 2.0 * D * H + L * 2.0 * 4.0 * H * H +
                    (L - sparse) * 2.0 * 2.0 * H * F +
                    sparse * 2.0 * m.moe.activeMacs(m.hiddenSize) +
                    2.0 * (H * O + (m.linearProjector ? 0.0 : O * O));
  return tokens * perToken + L * squares * 4.0 * H;
}

std::optional<HfSource>
VisionTowerFamily::hfSource(const HfLayout &layout,
                            const std::string &local) const {
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
  auto parts = splitLayerName(local);
  if (!parts)
    return std::nullopt;
  auto it = layer.find(parts->second);
  if (it == layer.end())
    return std::nullopt;
  return HfSource{visionPrefix + "encoder.layers." + parts->first + "." +
                      it->second.first,
                  it->second.second};
}

HfClaim VisionTowerFamily::hfClaim(const ModuleArch &m, const HfLayout &layout,
                                   const std::string &name) const {
  if (!layout.projector.empty() && name.rfind(layout.projector, 0) == 0)
    return HfClaim::Ours;
  if (name.rfind(layout.vision, 0) != 0)
    return HfClaim::Others;
  // What the tower holds and the encoder does not compute: the layers
  // after its output_layer, the post-layernorm without final_norm,
  // SigLIP's pooling head, a cached position_ids buffer.
  const std::string local = name.substr(layout.vision.size());
  if (local == "embeddings.position_ids" || local.rfind("head.", 0) == 0)
    return HfClaim::Unused;
  if (local.rfind("post_layernorm.", 0) == 0)
    return m.finalNorm ? HfClaim::Ours : HfClaim::Unused;
  const std::string layers = "encoder.layers.";
  if (local.rfind(layers, 0) != 0)
    return HfClaim::Ours;
  const std::string rest = local.substr(layers.size());
  char *end = nullptr;
  const long long l = std::strtoll(rest.c_str(), &end, 10);
  if (end == rest.c_str() || *end != '.')
    return HfClaim::Ours;
  return l >= m.layers() && l < m.numLayers ? HfClaim::Unused : HfClaim::Ours;
}

const HfTowerFamily *towerReading(const std::string &type) {
  for (const ModuleFamily *family : families())
    if (const auto *tower = dynamic_cast<const HfTowerFamily *>(family)) {
      const std::vector<std::string> &types = tower->structure().hfModelTypes;
      if (std::find(types.begin(), types.end(), type) != types.end())
        return tower;
    }
  return nullptr;
}

bool VisionTowerFamily::hfCheck(ConfigCheck &k, const ModuleArch &module,
                                int64_t seqLength) const {
  (void)seqLength;
  const std::string type = k.text("model_type", k.outerType);
  const HfTowerFamily *folder = towerReading(type);
  if (!folder) {
    k.otherFamily("vision tower", type,
                  "mimo's encoder reads the CLIP and SigLIP vision towers");
    return false;
  }
  const TowerStructure &s = folder->structure();
  if (module.hasMoe())
    k.problem("moe", "a " + s.label +
                         " has no sparse layers (its MLP is dense): remove "
                         "arch.moe to read this folder");
  k.sizes(module);
  k.number("norm_eps", "layer_norm_eps", module.normEps, s.normEps);
  const std::string act = k.text("hidden_act", hfActivationName(s.activation));
  k.choice("activation", "hidden_act", module.activation,
           mimoActivationName(act), act,
           "gelu, gelu_pytorch_tanh and quick_gelu");
  // The patch: feature rows of C·p·p values.
  const int64_t channels = k.integer("num_channels").value_or(3);
  const std::optional<int64_t> patch = k.integer("patch_size");
  const int64_t image = k.integer("image_size").value_or(224);
  if (!patch || *patch <= 0) {
    k.problem("feature_dim", "config.json gives no positive integer "
                             "patch_size (" +
                                 k.where("patch_size") + ")");
    return false;
  }
  if (channels * *patch * *patch != module.featureDim)
    k.problem("feature_dim",
              std::to_string(module.featureDim) + " here, but a patch of " +
                  k.where("num_channels") + " (" + std::to_string(channels) +
                  ") times " + k.where("patch_size") + " (" +
                  std::to_string(*patch) + ") squared is " +
                  std::to_string(channels * *patch * *patch) +
                  " values: set arch.feature_dim to that");
  const int64_t grid = (image / *patch) * (image / *patch);
  const int64_t rows = grid + (s.classToken ? 1 : 0);
  if (!module.learnedPositions)
    k.problem("position_embeddings",
              "the tower learns its position embeddings (" +
                  std::to_string(rows) +
                  " rows): set arch.position_embeddings to \"learned\" and "
                  "arch.max_positions to " +
                  std::to_string(rows));
  else if (module.maxPositions != rows)
    k.problem("max_positions",
              std::to_string(module.maxPositions) + " here, but " +
                  k.where("image_size") + " / " + k.where("patch_size") +
                  " make " + std::to_string(grid) + " patches" +
                  (s.classToken ? " and the class token's row" : "") +
                  ": set arch.max_positions to " + std::to_string(rows));
  const size_t before = k.problems.size();
  const std::string implied = "model_type (" + s.label + ")";
  k.flag("bias", implied, module.bias, true);
  k.flag("class_token", implied, module.classToken, s.classToken);
  k.flag("pre_norm", implied, module.preNorm, s.preNorm);
  k.flag("patch_bias", implied, module.patchBias, s.patchBias);
  if (!s.finalNormWhy.empty() && module.finalNorm)
    k.problem("final_norm", s.finalNormWhy + ": set arch.final_norm to false");
  // The tower's structure, disagreed with key by key: its family sets
  // every one of those keys.
  if (k.problems.size() > before && folder != this) {
    Diagnostic note = Diagnostic::error(
        k.arch + "family", "the folder holds " + s.label + ": \"family\": \"" +
                               s.name +
                               "\" in arch sets its structure (and remove the "
                               "keys above)");
    note.note = true;
    k.problems.push_back(std::move(note));
  }
  return true;
}

std::string VisionTowerFamily::hfExportProblem(const ModuleArch &m) const {
  if (m.hasMoe())
    return "CLIP and SigLIP towers have no sparse layers (arch.moe)";
  if (!m.bias || !m.learnedPositions)
    return "CLIP and SigLIP towers have biases and learned position "
           "embeddings (arch.bias, arch.position_embeddings)";
  return "neither CLIP's structure (class_token, pre_norm, no patch_bias, "
         "no final_norm) nor SigLIP's (no class_token, no pre_norm, a "
         "patch_bias)";
}

std::string VisionTowerFamily::gridProblem(const ModuleArch &m) const {
  const int64_t grid = m.maxPositions - (m.classToken ? 1 : 0);
  if (exactSquareRoot(grid) < 0)
    return "its " + std::to_string(grid) +
           " patch positions are not a square grid (image_size / patch_size "
           "squared)";
  return "";
}

void HfTowerFamily::setDefaults(ModuleArch &arch) const {
  arch.bias = true;
  arch.learnedPositions = true;
  arch.classToken = tower.classToken;
  arch.preNorm = tower.preNorm;
  arch.patchBias = tower.patchBias;
  arch.finalNorm = false;
  arch.activation = tower.activation;
  arch.normEps = tower.normEps;
}

std::optional<ArchProblem>
HfTowerFamily::structureProblem(const ModuleArch &a) const {
  auto needs = [&](const char *key, const std::string &what) {
    return ArchProblem{key, tower.label + " " + what + ": remove arch." + key +
                                " (the family sets it), or name another "
                                "arch.family"};
  };
  auto has = [](bool yes, const char *what) {
    return std::string(yes ? "has a " : "has no ") + what;
  };
  if (a.hasMoe())
    return needs("moe", "has no sparse layers");
  if (!a.bias)
    return needs("bias", "has biases");
  if (!a.learnedPositions)
    return needs("position_embeddings", "learns its position embeddings");
  if (a.classToken != tower.classToken)
    return needs("class_token", has(tower.classToken, "class token"));
  if (a.preNorm != tower.preNorm)
    return needs("pre_norm", has(tower.preNorm, "pre-norm"));
  if (a.patchBias != tower.patchBias)
    return needs("patch_bias", has(tower.patchBias, "patch bias"));
  if (!tower.finalNormWhy.empty() && a.finalNorm)
    return needs("final_norm",
                 "has no final norm (" + tower.finalNormWhy + ")");
  return std::nullopt;
}

nlohmann::ordered_json
HfTowerFamily::hfConfig(const ModuleArch &m,
                        const HfExportContext &context) const {
  const PatchGeometry patch = patchGeometryOf(m.featureDim);
  const int64_t grid = m.maxPositions - (m.classToken ? 1 : 0);
  const auto side =
      static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(grid))));
  nlohmann::ordered_json c;
  c["architectures"] = {tower.hfArchitecture};
  c["model_type"] = tower.hfModelType;
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
  c["projector_hidden_size"] = context.languageHidden;
  stampHfConfig(c, context.dtype);
  return c;
}

std::unique_ptr<ModuleFamily> makeVitFamily() {
  return std::make_unique<VisionTowerFamily>();
}

} // namespace mimo
