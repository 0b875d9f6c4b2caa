//===- HfConfigCheck.cpp - config.json against a module's arch ------------===//
//
// docs/pretrained.md: every disagreement between a Hugging Face folder's
// config.json and the module's `arch`, at the arch key's pointer with
// config.json's pointer in the message and the fix; and what the folder's
// model computes that mimo does not.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/HfWeights.h"

#include "runtime/json/JsonReader.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace mimo::exec {

using nlohmann::json;

namespace {

std::string numberText(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

/// One part of config.json (the language model's, the vision tower's or
/// the whole LLaVA config) against a module's arch.
struct ConfigCheck {
  const json &c;
  std::string pointer, path, arch;
  std::vector<Diagnostic> &problems;

  std::string where(const std::string &key) const {
    return pointer + "/" + key + " of " + path;
  }
  void problem(const std::string &key, const std::string &message) {
    problems.push_back(Diagnostic::error(arch + key, message));
  }
  bool has(const char *key) const { return c.contains(key); }
  std::optional<int64_t> integer(const char *key) const {
    if (c.contains(key) && c[key].is_number_integer())
      return c[key].get<int64_t>();
    return std::nullopt;
  }
  std::string text(const char *key, const std::string &fallback) const {
    return c.contains(key) && c[key].is_string() ? c[key].get<std::string>()
                                                 : fallback;
  }
  bool boolean(const char *key, bool fallback) const {
    return c.contains(key) && c[key].is_boolean() ? c[key].get<bool>()
                                                  : fallback;
  }
  /// Whether config.json gives `hfKey` as a value of the wrong JSON type
  /// (a string "500000" where a number belongs): a problem naming it, so
  /// that a default never stands in for what the file meant. null is
  /// absent.
  bool wrongType(const char *key, const char *hfKey, bool ok,
                 const char *expected) {
    if (!c.contains(hfKey) || c[hfKey].is_null() || ok)
      return false;
    problem(key, where(hfKey) + " is " + briefJson(c[hfKey], 40) + ", not " +
                     expected + ": write it as one in config.json");
    return true;
  }
  /// An integer size of config.json against arch.
  void size(const char *key, const char *hfKey, int64_t mine,
            std::optional<int64_t> fallback = std::nullopt) {
    if (wrongType(key, hfKey, c.contains(hfKey) && c[hfKey].is_number_integer(),
                  "an integer"))
      return;
    std::optional<int64_t> theirs = integer(hfKey);
    if (!theirs)
      theirs = fallback;
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
  }
  void number(const char *key, const char *hfKey, double mine,
              double fallback) {
    if (wrongType(key, hfKey, c.contains(hfKey) && c[hfKey].is_number(),
                  "a number"))
      return;
    double theirs = fallback;
    if (c.contains(hfKey) && c[hfKey].is_number())
      theirs = c[hfKey].get<double>();
    if (std::abs(theirs - mine) > 1e-9 * std::max(std::abs(theirs), 1e-30))
      problem(key, numberText(mine) + " here, but " + where(hfKey) + " is " +
                       numberText(theirs) + ": set arch." + key + " to " +
                       numberText(theirs));
  }
  void flag(const char *key, const std::string &hfKey, bool mine, bool theirs) {
    // (A flag the family implies, "model_type", is no boolean key.)
    if (hfKey.find('/') == std::string::npos && hfKey != "model_type" &&
        wrongType(key, hfKey.c_str(),
                  c.contains(hfKey) && c[hfKey].is_boolean(), "true or false"))
      return;
    if (mine != theirs)
      problem(key, std::string(mine ? "true" : "false") + " here, but " +
                       where(hfKey) + " makes it " +
                       (theirs ? "true" : "false") + ": set arch." + key +
                       " to " + (theirs ? "true" : "false"));
  }
  /// The transformer's sizes, named alike in every family's config.
  void sizes(const ModuleConfig &module) {
    size("hidden_size", "hidden_size", module.hiddenSize);
    size("num_layers", "num_hidden_layers", module.numLayers);
    size("num_heads", "num_attention_heads", module.numHeads);
    size("ffn_hidden_size", "intermediate_size", module.ffnHiddenSize);
  }
  /// The folder's `what` is of a family mimo does not read.
  void otherFamily(const ModuleConfig &module, const std::string &what,
                   const std::string &type, const std::string &reads) {
    problems.push_back(
        Diagnostic::error(module.pointer + "/init/from",
                          "the folder's " + what + " is " +
                              (type.empty() ? std::string("of no model_type")
                                            : "a '" + type + "'") +
                              " (" + where("model_type") + "); " + reads));
  }
  /// A choice of arch (`mine`) against config.json's, translated to
  /// mimo's name (`theirs`, "" when mimo does not compute it).
  void choice(const char *key, const char *hfKey, const std::string &mine,
              const std::string &theirs, const std::string &raw,
              const char *computed) {
    if (theirs.empty())
      problem(key, where(hfKey) + " is '" + raw +
                       "', which mimo does not compute (it computes " +
                       computed + ")");
    else if (theirs != mine)
      problem(key, "\"" + mine + "\" here, but " + where(hfKey) + " is '" +
                       raw + "': set arch." + key + " to \"" + theirs + "\"");
  }
};

void ropeScalingProblems(ConfigCheck &k, const ModuleConfig &module) {
  const json &c = k.c;
  if (k.wrongType("rope_scaling", "rope_scaling",
                  c.contains("rope_scaling") && c["rope_scaling"].is_object(),
                  "an object (or null)"))
    return;
  const json *scaling =
      c.contains("rope_scaling") && c["rope_scaling"].is_object()
          ? &c["rope_scaling"]
          : nullptr;
  if (!scaling) {
    if (module.ropeScaling)
      k.problem("rope_scaling", "set here, but " + k.where("rope_scaling") +
                                    " is absent (no rescaling): remove it");
    return;
  }
  auto text = [&](const char *key) {
    auto it = scaling->find(key);
    return it != scaling->end() && it->is_string() ? it->get<std::string>()
                                                   : std::string();
  };
  std::string kind = text("rope_type");
  if (kind.empty())
    kind = text("type");
  if (kind != "llama3" && kind != "default") {
    k.problem("rope_scaling",
              k.where("rope_scaling") + " is of type '" + kind +
                  "', which mimo does not compute (it computes \"llama3\")");
  } else if (kind == "llama3") {
    if (!module.ropeScaling) {
      k.problem("rope_scaling", "absent here, but " + k.where("rope_scaling") +
                                    " rescales RoPE (llama3): copy it into "
                                    "arch.rope_scaling with type \"llama3\"");
      return;
    }
    const RopeScaling &r = *module.ropeScaling;
    auto same = [&](const char *key, double mine) {
      auto it = scaling->find(key);
      double theirs = it != scaling->end() && it->is_number()
                          ? it->get<double>()
                          : std::nan("");
      if (!(std::abs(theirs - mine) <= 1e-9 * std::abs(theirs)))
        k.problem(std::string("rope_scaling/") + key,
                  numberText(mine) + " here, but " +
                      k.where(std::string("rope_scaling/") + key) + " is " +
                      numberText(theirs));
    };
    same("factor", r.factor);
    same("low_freq_factor", r.lowFreqFactor);
    same("high_freq_factor", r.highFreqFactor);
    same("original_max_position_embeddings", r.originalMaxPositions);
  } else if (module.ropeScaling) {
    k.problem("rope_scaling", "set here, but " + k.where("rope_scaling") +
                                  " does not rescale RoPE: remove it");
  }
}

void languageProblems(const HfFolder &folder, const ModuleConfig &module,
                      int64_t seqLength, std::vector<Diagnostic> &problems) {
  ConfigCheck k{folder.text, folder.textPointer, folder.configPath,
                module.pointer + "/arch/", problems};
  const std::string type = k.text("model_type", "");
  if (type != "llama" && type != "mistral" && type != "qwen2") {
    k.otherFamily(module, "model", type,
                  "mimo's language model reads the Llama, Mistral and Qwen2 "
                  "families");
    return;
  }
  k.size("vocab_size", "vocab_size", module.vocabSize);
  k.sizes(module);
  k.size("num_query_groups", "num_key_value_heads", module.kvHeads(),
         k.integer("num_attention_heads"));
  if (std::optional<int64_t> headDim = k.integer("head_dim");
      headDim && module.numHeads > 0 &&
      *headDim != module.hiddenSize / module.numHeads)
    k.problem("num_heads", k.where("head_dim") + " is " +
                               std::to_string(*headDim) +
                               ", not hidden_size / num_attention_heads: "
                               "mimo's heads are hidden_size / num_heads wide");
  k.number("rope_theta", "rope_theta", module.ropeTheta, 10000.0);
  k.number("norm_eps", "rms_norm_eps", module.normEps, 1e-6);
  k.flag("tie_embeddings", "tie_word_embeddings", module.tieEmbeddings,
         k.boolean("tie_word_embeddings", false));
  // Qwen2 always has q, k, v biases; Llama's attention_bias also puts one
  // on o, which mimo has not.
  if (type == "qwen2")
    k.flag("qkv_bias", "model_type", module.qkvBias, true);
  else if (k.boolean("attention_bias", false))
    k.problem("qkv_bias", k.where("attention_bias") +
                              " is true: biases on q, k, v and o, and mimo's "
                              "language model has none on o");
  else
    k.flag("qkv_bias", "attention_bias", module.qkvBias, false);
  if (k.boolean("mlp_bias", false))
    k.problem("ffn_hidden_size",
              k.where("mlp_bias") + " is true: mimo's SwiGLU has no biases");
  if (k.has("hidden_act") && k.c["hidden_act"] != "silu")
    k.problem("ffn_hidden_size", k.where("hidden_act") + " is " +
                                     briefJson(k.c["hidden_act"]) +
                                     ": mimo's language MLP is SwiGLU (silu)");
  ropeScalingProblems(k, module);
  // Mistral's (and Qwen2's, when use_sliding_window) sliding window: mimo
  // attends to the whole sample, the same while samples fit the window.
  if (std::optional<int64_t> window = k.integer("sliding_window");
      window && *window > 0 && k.boolean("use_sliding_window", true) &&
      seqLength > *window)
    problems.push_back(Diagnostic::error(
        "/batch/seq_length",
        std::to_string(seqLength) + " here, but " + k.where("sliding_window") +
            " is " + std::to_string(*window) +
            ": the model attends to its last " + std::to_string(*window) +
            " positions, and mimo's attention to the whole sample; keep "
            "seq_length at most " +
            std::to_string(*window)));
}

/// A CLIP or SigLIP vision tower (and LLaVA's keys around it) against an
/// encoder's arch.
void visionProblems(const HfFolder &folder, const ModuleConfig &module,
                    std::vector<Diagnostic> &problems) {
  if (folder.vision.is_null()) {
    problems.push_back(Diagnostic::error(
        module.pointer + "/init/from",
        folder.configPath +
            " describes no vision tower (no vision_config, and no "
            "clip_vision_model or siglip_vision_model model_type): an "
            "encoder reads a CLIP, SigLIP or LLaVA folder"));
    return;
  }
  ConfigCheck k{folder.vision, folder.visionPointer, folder.configPath,
                module.pointer + "/arch/", problems};
  const std::string top = folder.config.contains("model_type") &&
                                  folder.config["model_type"].is_string()
                              ? folder.config["model_type"].get<std::string>()
                              : "";
  std::string type = k.text("model_type", top);
  const bool clip = type == "clip_vision_model" || type == "clip";
  const bool siglip = type == "siglip_vision_model" || type == "siglip";
  if (!clip && !siglip) {
    k.otherFamily(module, "vision tower", type,
                  "mimo's encoder reads the CLIP and SigLIP vision towers");
    return;
  }
  k.sizes(module);
  k.number("norm_eps", "layer_norm_eps", module.normEps, clip ? 1e-5 : 1e-6);
  const std::string act =
      k.text("hidden_act", clip ? "quick_gelu" : "gelu_pytorch_tanh");
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
    return;
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
  const int64_t rows = grid + (clip ? 1 : 0);
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
                  (clip ? " and the class token's row" : "") +
                  ": set arch.max_positions to " + std::to_string(rows));
  const char *family = clip ? "a CLIP" : "a SigLIP";
  k.flag("bias", "model_type (" + std::string(family) + " tower)", module.bias,
         true);
  k.flag("class_token", "model_type (" + std::string(family) + " tower)",
         module.classToken, clip);
  k.flag("pre_norm", "model_type (" + std::string(family) + " tower)",
         module.preNorm, clip);
  k.flag("patch_bias", "model_type (" + std::string(family) + " tower)",
         module.patchBias, siglip);
  if (clip && module.finalNorm)
    k.problem("final_norm", "CLIP's post_layernorm normalises only the pooled "
                            "class token, not the patch rows an encoder "
                            "passes on: set arch.final_norm to false");
  // LLaVA's keys, where the folder has them (a LLaVA folder, or mimo's
  // export of an encoder).
  ConfigCheck l{folder.config, "", folder.configPath, module.pointer + "/arch/",
                problems};
  const bool llava = top == "llava";
  if (llava && module.finalNorm)
    l.problem("final_norm", "LLaVA takes the tower's hidden states before its "
                            "post_layernorm: set arch.final_norm to false");
  if (l.has("vision_feature_layer") || llava) {
    if (l.has("vision_feature_layer") &&
        !l.c["vision_feature_layer"].is_number_integer())
      l.problem("output_layer",
                l.where("vision_feature_layer") + " is " +
                    briefJson(l.c["vision_feature_layer"]) +
                    ": mimo's encoder passes on one layer's output");
    else
      l.size("output_layer", "vision_feature_layer", module.outputLayer, -2);
  }
  if (l.has("vision_feature_select_strategy") || llava) {
    const std::string strategy =
        l.text("vision_feature_select_strategy", "default");
    // "default" drops the first row (CLIP's class token), "full" none.
    if (strategy != "default" && strategy != "full")
      l.problem("class_token", l.where("vision_feature_select_strategy") +
                                   " is '" + strategy +
                                   "', which mimo does not compute");
    else if ((strategy == "default") != module.classToken)
      l.problem("class_token",
                l.where("vision_feature_select_strategy") + " is '" + strategy +
                    "': LLaVA " +
                    (strategy == "default" ? "drops the first row"
                                           : "keeps every row") +
                    ", and this encoder " +
                    (module.classToken ? "has a class token it drops"
                                       : "has no class token") +
                    "; the tower and the strategy disagree");
  }
  if (!folder.layout.projector.empty()) {
    const std::string pact = l.text("projector_hidden_act", "gelu");
    l.choice("projector_activation", "projector_hidden_act",
             module.projectorActivation,
             pact == "quick_gelu" ? "" : mimoActivationName(pact), pact,
             "gelu and gelu_pytorch_tanh");
    if (!l.boolean("multimodal_projector_bias", true))
      l.problem("projector", l.where("multimodal_projector_bias") +
                                 " is false: mimo's projector has biases");
  }
}

} // namespace

std::vector<Diagnostic> hfConfigProblems(const HfFolder &folder,
                                         const ModuleConfig &module,
                                         int64_t seqLength) {
  std::vector<Diagnostic> problems;
  if (module.kind == ModuleKind::Language)
    languageProblems(folder, module, seqLength, problems);
  else
    visionProblems(folder, module, problems);
  return problems;
}

} // namespace mimo::exec
