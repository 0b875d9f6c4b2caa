//===- LlamaStyle.cpp - Llama-style language models -----------------------===//

#include "runtime/family/LlamaStyle.h"

#include "runtime/json/JsonReader.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace mimo {

using nlohmann::json;

void LlamaStyleFamily::declareParameters(const ModuleArch &m,
                                         const std::string &module,
                                         const StageSpan &span,
                                         std::vector<ParamSpec> &out) const {
  using L = ParamLayout;
  using I = ParamInit;
  auto add = [&](const std::string &name, int64_t rows, int64_t cols, L layout,
                 I init = I::Weight, float scale = 0,
                 bool partialOverTp = false) {
    out.push_back(
        {module, name, rows, cols, layout, init, scale, partialOverTp});
  };
  const int64_t H = m.hiddenSize, F = m.ffnHiddenSize, V = m.vocabSize;
  const bool sp = span.sequenceParallel;
  // Vocab-parallel: each TP rank its rows of the vocabulary. Tied, the
  // embedding is the head too, initialised as the head would be (fan-in
  // H): at scale 1 the first logits would be ~√H wide.
  const float tiedScale = 1.0f / std::sqrt(static_cast<float>(H));
  if (span.first)
    add("embedding", V, H, L::RowParallel, I::Weight,
        m.tieEmbeddings ? tiedScale : 1.0f);
  for (int64_t l = span.begin; l < span.end; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    add(p + "attn_norm", 1, H, L::Replicated, I::Ones, 0, sp);
    declareAttention(m, module, p, m.qkvBias, false, sp, out);
    if (m.qkNorm) { // each TP rank's heads: a partial gradient
      const int64_t d = m.headDim();
      add(p + "q_norm", 1, d, L::Replicated, I::Ones, 0, true);
      add(p + "k_norm", 1, d, L::Replicated, I::Ones, 0, true);
    }
    add(p + "mlp_norm", 1, H, L::Replicated, I::Ones, 0, sp);
    if (m.moe.sparse(l)) {
      declareMoeMlp(m.moe, H, module, p, out);
      continue;
    }
    add(p + "gate", H, F, L::ColumnParallel);
    add(p + "up", H, F, L::ColumnParallel);
    add(p + "down", F, H, L::RowParallel);
  }
  if (span.last) {
    add("final_norm", 1, H, L::Replicated, I::Ones, 0, sp);
    if (!m.tieEmbeddings)                   // tied: the embedding's transpose
      add("head", H, V, L::ColumnParallel); // vocab-parallel logits
    else if (!span.first) // the embedding's copy (docs/model.md: tied across
                          // PP)
      add("embedding", V, H, L::RowParallel, I::Weight, tiedScale);
  }
}

void LlamaStyleFamily::setDefaults(ModuleArch &arch) const {
  arch.qkvBias = qkvBiases();
}

std::optional<ArchProblem>
LlamaStyleFamily::structureProblem(const ModuleArch &arch) const {
  // The family that has the structure the arch asks for, to name as the
  // fix.
  auto fits = [&](const LlamaStyleFamily &f) {
    return f.qkvBiases() == arch.qkvBias && f.qkNorms() == arch.qkNorm &&
           (f.moeNames() != nullptr) == arch.hasMoe() &&
           (!f.moeNames() || f.moeNames()->shared == (arch.moe.sharedFfn > 0));
  };
  auto named = [&]() -> std::string {
    for (const ModuleFamily *family : families())
      if (const auto *llama = dynamic_cast<const LlamaStyleFamily *>(family);
          llama && fits(*llama))
        return ", or set arch.family to \"" + std::string(llama->name()) + "\"";
    return "";
  };
  if (arch.qkNorm != qkNorms())
    return ArchProblem{"qk_norm", "the " + std::string(name()) + " family " +
                                      (qkNorms() ? "has" : "has no") +
                                      " per-head q and k norms: " +
                                      "remove arch.qk_norm" + named()};
  if (arch.hasMoe() != (moeNames() != nullptr))
    return ArchProblem{
        "moe",
        "the " + std::string(name()) + " family's layers are " +
            (moeNames() ? "sparse: add arch.moe" : "dense: remove arch.moe") +
            named()};
  if (const MoeNames *names = moeNames(); names && arch.hasMoe()) {
    if (names->shared != (arch.moe.sharedFfn > 0))
      return ArchProblem{
          "moe", "the " + std::string(name()) + " family " +
                     (names->shared ? "has" : "has no") +
                     " shared expert: " + (names->shared ? "set" : "remove") +
                     " arch.moe.shared_expert_ffn_hidden_size" + named()};
  }
  if (arch.qkvBias == qkvBiases())
    return std::nullopt;
  // The family that has what the arch asks for, to name as the fix.
  std::string other;
  for (const ModuleFamily *family : families())
    if (const auto *llama = dynamic_cast<const LlamaStyleFamily *>(family);
        llama && llama->qkvBiases() == arch.qkvBias) {
      other = std::string(llama->name());
      break;
    }
  return ArchProblem{"qkv_bias",
                     "the " + std::string(name()) + " family has " +
                         (qkvBiases() ? "" : "no ") +
                         "biases on q, k and v: remove arch.qkv_bias" +
                         (other.empty()
                              ? std::string()
                              : ", or set arch.family to \"" + other + "\"")};
}

double LlamaStyleFamily::forwardFlops(const ModuleArch &m, int64_t outputHidden,
                                      double tokens, double pairs) const {
  (void)outputHidden;
  double H = static_cast<double>(m.hiddenSize);
  double F = static_cast<double>(m.ffnHiddenSize);
  double V = static_cast<double>(m.vocabSize);
  double L = static_cast<double>(m.layers());
  double KV = static_cast<double>(m.kvHidden());      // K and V's width (GQA)
  double A = static_cast<double>(m.attentionWidth()); // q's and o's
  // A sparse layer computes its router, its top_k experts and its shared
  // expert (and gate) for each token: the active FLOPs.
  const double sparse = static_cast<double>(m.moe.sparseLayers(m.layers()));
  double perToken = L * 2.0 * (2.0 * H * A + 2.0 * H * KV) +
                    (L - sparse) * 2.0 * 3.0 * H * F +
                    sparse * 2.0 * m.moe.activeMacs(m.hiddenSize) + 2.0 * H * V;
  return tokens * perToken + L * pairs * 4.0 * A;
}

std::optional<HfSource>
LlamaStyleFamily::hfSource(const HfLayout &layout,
                           const std::string &local) const {
  const std::string &m = layout.languageBody;
  if (local == "embedding")
    return HfSource{m + "embed_tokens.weight", false};
  if (local == "final_norm")
    return HfSource{m + "norm.weight", false};
  if (local == "head")
    return HfSource{layout.languageHead + "lm_head.weight", true};
  auto layer = splitLayerName(local);
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
  const std::string at = m + "layers." + layer->first + ".";
  const std::string &part = layer->second;
  if (qkNorms() && (part == "q_norm" || part == "k_norm"))
    return HfSource{at + "self_attn." + part + ".weight", false};
  if (const MoeNames *names = moeNames()) {
    auto linear = [&](const std::string &mimo) -> const std::string & {
      return mimo == "gate" ? names->gate
             : mimo == "up" ? names->up
                            : names->down;
    };
    if (layout.fusedExperts) { // transformers 5's stacked experts
      if (part == kMoeRouter)
        return HfSource{at + "mlp.gate.weight", true};
      const int64_t expert = moeExpertOf("layers." + part);
      const std::string linear =
          expert < 0 ? "" : part.substr(part.rfind('.') + 1);
      if (linear == "gate" || linear == "up")
        return HfSource{at + "mlp.experts.gate_up_proj", true, expert,
                        linear == "up" ? 1 : 0, 2};
      if (linear == "down")
        return HfSource{at + "mlp.experts.down_proj", true, expert, 0, 1};
    }
    if (part == kMoeRouter)
      return HfSource{at + names->block + "gate.weight", true};
    if (part == kMoeSharedGate)
      return HfSource{at + names->block + "shared_expert_gate.weight", true};
    // "experts.J.gate" and "shared.gate".
    if (part.rfind("experts.", 0) == 0) {
      const size_t dot = part.find('.', 8);
      if (dot != std::string::npos)
        return HfSource{at + names->block + part.substr(0, dot + 1) +
                            linear(part.substr(dot + 1)) + ".weight",
                        true};
    }
    if (part.rfind("shared.", 0) == 0)
      return HfSource{at + names->block + "shared_expert." +
                          std::string(linear(part.substr(7))) + ".weight",
                      true};
  }
  auto it = map.find(part);
  if (it == map.end())
    return std::nullopt;
  return HfSource{m + "layers." + layer->first + "." + it->second.first,
                  it->second.second};
}

HfClaim LlamaStyleFamily::hfClaim(const ModuleArch &arch,
                                  const HfLayout &layout,
                                  const std::string &name) const {
  if (name.rfind(layout.languageBody, 0) != 0 &&
      name.rfind(layout.languageHead + "lm_head.", 0) != 0)
    return HfClaim::Others;
  // RoPE's cached frequencies (older checkpoints), and a tied model's head.
  const std::string inv = "rotary_emb.inv_freq";
  if (name.size() >= inv.size() &&
      name.compare(name.size() - inv.size(), inv.size(), inv) == 0)
    return HfClaim::Unused;
  if (arch.tieEmbeddings && name == layout.languageHead + "lm_head.weight")
    return HfClaim::Unused;
  return HfClaim::Ours;
}

namespace {

void ropeScalingProblems(ConfigCheck &k, const ModuleArch &module) {
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
                  hfNumberText(mine) + " here, but " +
                      k.where(std::string("rope_scaling/") + key) + " is " +
                      hfNumberText(theirs));
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

/// A double that holds an integer as a JSON integer (transformers reads
/// original_max_position_embeddings as an int), else as it is.
nlohmann::ordered_json integral(double x) {
  if (std::isfinite(x) && std::floor(x) == x && std::fabs(x) < 9.0e15)
    return static_cast<int64_t>(x);
  return x;
}

/// The sparse layers and Qwen3's q/k norms of a folder of family `folder`
/// against the arch.
void sparseProblems(ConfigCheck &k, const ModuleArch &module,
                    const LlamaStyleFamily &folder) {
  if (folder.qkNorms() != module.qkNorm)
    k.problem("qk_norm",
              std::string(module.qkNorm ? "true" : "false") + " here, but " +
                  k.where("model_type") + " makes it " +
                  (folder.qkNorms() ? "true" : "false") +
                  " (per-head q and k norms): set arch.family to \"" +
                  std::string(folder.name()) + "\"");
  const LlamaStyleFamily::MoeNames *names = folder.moeNames();
  if (!names || !module.hasMoe()) {
    if ((names != nullptr) != module.hasMoe())
      k.problem("moe", std::string(module.hasMoe() ? "set" : "absent") +
                           " here, but " + k.where("model_type") + " is " +
                           (names ? "a mixture of experts: add arch.moe from "
                                    "its config.json"
                                  : "dense: remove arch.moe"));
    return;
  }
  const MoeConfig &e = module.moe;
  k.size("moe/num_experts", names->expertsKey.c_str(), e.experts);
  k.size("moe/top_k", "num_experts_per_tok", e.topK);
  if (names->mixtral)
    k.size("moe/expert_ffn_hidden_size", "intermediate_size", e.expertFfn);
  else
    k.size("moe/expert_ffn_hidden_size", "moe_intermediate_size", e.expertFfn);
  if (names->shared)
    k.size("moe/shared_expert_ffn_hidden_size",
           "shared_expert_intermediate_size", e.sharedFfn);
  if (names->shared && !e.sharedGate)
    k.problem("moe/shared_expert_gate",
              "false here, but " + k.where("model_type") +
                  " gates its shared expert (shared_expert_gate): set it true");
  const bool norm = names->mixtral || k.boolean("norm_topk_prob", false);
  if (e.router.normTopk != norm)
    k.problem("moe/router/norm_topk",
              std::string(e.router.normTopk ? "true" : "false") +
                  " here, but " +
                  (names->mixtral ? k.where("model_type") +
                                        " always normalises the top-k weights"
                                  : k.where("norm_topk_prob") + " is " +
                                        (norm ? "true" : "false")));
  if (e.router.sigmoid)
    k.problem("moe/router/score", "\"sigmoid\" here, but " +
                                      k.where("model_type") +
                                      " routes by softmax: remove score");
  // Qwen's sparse layers: every decoder_sparse_step-th, less
  // mlp_only_layers.
  std::vector<int64_t> sparse;
  const int64_t step =
      names->mixtral ? 1 : k.integer("decoder_sparse_step").value_or(1);
  std::vector<int64_t> dense;
  if (!names->mixtral && k.has("mlp_only_layers") &&
      k.c["mlp_only_layers"].is_array())
    for (const json &l : k.c["mlp_only_layers"])
      if (l.is_number_integer())
        dense.push_back(l.get<int64_t>());
  for (int64_t l = 0; l < module.numLayers; ++l)
    if (step > 0 && (l + 1) % step == 0 &&
        std::find(dense.begin(), dense.end(), l) == dense.end())
      sparse.push_back(l);
  std::vector<int64_t> mine;
  for (int64_t l = 0; l < module.numLayers; ++l)
    if (e.sparse(l))
      mine.push_back(l);
  if (sparse != mine) {
    std::string list;
    for (int64_t l : sparse)
      list += (list.empty() ? "" : ", ") + std::to_string(l);
    k.problem("moe/layers",
              "the sparse layers differ: " + k.where("decoder_sparse_step") +
                  " and mlp_only_layers make them [" + list +
                  "]; write that list in arch.moe.layers (or \"all\")");
  }
}

} // namespace

bool LlamaStyleFamily::hfCheck(ConfigCheck &k, const ModuleArch &module,
                               int64_t seqLength) const {
  // The folder's family: the Llama-style one that reads its model_type.
  const std::string type = k.text("model_type", "");
  const LlamaStyleFamily *folder = nullptr;
  for (const ModuleFamily *family : families())
    if (const auto *llama = dynamic_cast<const LlamaStyleFamily *>(family)) {
      const std::vector<std::string> types = llama->hfModelTypesRead();
      if (std::find(types.begin(), types.end(), type) != types.end()) {
        folder = llama;
        break;
      }
    }
  if (!folder) {
    k.otherFamily("model", type,
                  "mimo's language model reads the Llama, Mistral and Qwen2 "
                  "families");
    return false;
  }
  k.size("vocab_size", "vocab_size", module.vocabSize);
  k.sizes(module);
  k.size("num_query_groups", "num_key_value_heads", module.kvHeads(),
         k.integer("num_attention_heads"));
  // head_dim: absent (or null) means hidden_size / num_attention_heads
  // in transformers, as in mimo.
  if (std::optional<int64_t> headDim = k.integer("head_dim");
      headDim && module.numHeads > 0 && *headDim != module.headDim())
    k.problem("head_dim",
              k.where("head_dim") + " is " + std::to_string(*headDim) +
                  ", arch's heads are " + std::to_string(module.headDim()) +
                  " wide: set arch.head_dim to " + std::to_string(*headDim));
  k.number("rope_theta", "rope_theta", module.ropeTheta, 10000.0);
  k.number("norm_eps", "rms_norm_eps", module.normEps, 1e-6);
  k.flag("tie_embeddings", "tie_word_embeddings", module.tieEmbeddings,
         k.boolean("tie_word_embeddings", false));
  // Qwen2 always has q, k, v biases; Llama's attention_bias also puts one
  // on o, which mimo has not.
  if (folder->qkvBiases()) {
    if (!module.qkvBias)
      k.problem("qkv_bias", "false here, but " + k.where("model_type") +
                                " makes it true (" +
                                std::string(folder->label()) +
                                " has biases on q, k and v): set "
                                "arch.qkv_bias to true, or arch.family to \"" +
                                std::string(folder->name()) + "\"");
  } else if (k.boolean("attention_bias", false))
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
  sparseProblems(k, module, *folder);
  ropeScalingProblems(k, module);
  // Mistral's (and Qwen2's, when use_sliding_window) sliding window: mimo
  // attends to the whole sample, the same while samples fit the window.
  if (std::optional<int64_t> window = k.integer("sliding_window");
      window && *window > 0 && k.boolean("use_sliding_window", true) &&
      seqLength > *window)
    k.problems.push_back(Diagnostic::error(
        "/batch/seq_length",
        std::to_string(seqLength) + " here, but " + k.where("sliding_window") +
            " is " + std::to_string(*window) +
            ": the model attends to its last " + std::to_string(*window) +
            " positions, and mimo's attention to the whole sample; keep "
            "seq_length at most " +
            std::to_string(*window)));
  return true;
}

std::string LlamaStyleFamily::hfExportProblem(const ModuleArch &arch) const {
  if (!arch.hasMoe())
    return "";
  if (arch.moe.router.sigmoid)
    return "its router scores by sigmoid, which " + std::string(label()) +
           " folders do not compute (softmax)";
  if (arch.moe.sharedFfn > 0 && !arch.moe.sharedGate)
    return "its shared expert has no gate, and " + std::string(label()) +
           " folders' has one";
  return "";
}

nlohmann::ordered_json
LlamaStyleFamily::hfConfig(const ModuleArch &m,
                           const HfExportContext &context) const {
  nlohmann::ordered_json c;
  c["architectures"] = {hfArchitecture()};
  c["model_type"] = hfModelType();
  c["vocab_size"] = m.vocabSize;
  c["hidden_size"] = m.hiddenSize;
  c["intermediate_size"] = m.ffnHiddenSize;
  c["num_hidden_layers"] = m.numLayers;
  c["num_attention_heads"] = m.numHeads;
  c["num_key_value_heads"] = m.kvHeads();
  c["head_dim"] = m.headDim();
  c["hidden_act"] = "silu";
  // What the pretrained model was made for, not this run's seq_length
  // (which is only a floor).
  c["max_position_embeddings"] = context.seqLength;
  c["rms_norm_eps"] = m.normEps;
  c["rope_theta"] = m.ropeTheta;
  if (m.ropeScaling)
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", m.ropeScaling->factor},
                         {"low_freq_factor", m.ropeScaling->lowFreqFactor},
                         {"high_freq_factor", m.ropeScaling->highFreqFactor},
                         {"original_max_position_embeddings",
                          integral(m.ropeScaling->originalMaxPositions)}};
  else
    c["rope_scaling"] = nullptr;
  c["tie_word_embeddings"] = m.tieEmbeddings;
  if (!m.qkvBias) {
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
  }
  if (const MoeNames *names = moeNames(); names && m.hasMoe()) {
    const MoeConfig &e = m.moe;
    c[names->expertsKey] = e.experts;
    c["num_experts_per_tok"] = e.topK;
    if (names->mixtral) {
      c["intermediate_size"] = e.expertFfn;
    } else {
      c["moe_intermediate_size"] = e.expertFfn;
      c["norm_topk_prob"] = e.router.normTopk;
      c["decoder_sparse_step"] = 1;
      std::vector<int64_t> dense;
      for (int64_t l = 0; l < m.numLayers; ++l)
        if (!e.sparse(l))
          dense.push_back(l);
      c["mlp_only_layers"] = dense;
    }
    if (names->shared)
      c["shared_expert_intermediate_size"] = e.sharedFfn;
    c["router_aux_loss_coef"] = e.router.auxLossCoef;
    c["output_router_logits"] = false;
  }
  c["attention_dropout"] = 0.0;
  c["initializer_range"] = 0.02;
  c["use_cache"] = true;
  // The pretrained folder's values as it wrote them (an eos list stays a
  // list, integers stay integers); init checked them against the arch.
  if (const json *pretrained = context.pretrained;
      pretrained && pretrained->is_object()) {
    for (const char *key : {"bos_token_id", "eos_token_id", "pad_token_id"})
      if (pretrained->contains(key) && !(*pretrained)[key].is_null())
        c[key] = (*pretrained)[key];
    if (pretrained->contains("max_position_embeddings") &&
        (*pretrained)["max_position_embeddings"].is_number_integer() &&
        (*pretrained)["max_position_embeddings"].get<int64_t>() > 0)
      c["max_position_embeddings"] = (*pretrained)["max_position_embeddings"];
    if (m.ropeScaling && pretrained->contains("rope_scaling") &&
        (*pretrained)["rope_scaling"].is_object())
      c["rope_scaling"] = (*pretrained)["rope_scaling"];
  }
  stampHfConfig(c, context.dtype);
  return c;
}

} // namespace mimo
