//===- ModelConfigModules.cpp - model.json's modules ----------------------===//

#include "runtime/config/ModelConfigParse.h"

#include "runtime/config/Parameters.h"
#include "runtime/family/ModuleFamily.h"
#include "runtime/json/JsonReader.h"
#include "runtime/support/Limits.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <sstream>

namespace mimo::detail {

using json = nlohmann::json;
using Validator = JsonValidator;

bool isIdentifier(const std::string &name) {
  if (name.empty() ||
      !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
    return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
      return false;
  return true;
}

namespace {

void parseParallel(Validator &v, const json &moduleJson, ModuleConfig &module) {
  std::string pointer = module.pointer + "/parallel";
  auto it = moduleJson.find("parallel");
  if (it == moduleJson.end())
    return;
  const json &parallel = *it;
  if (!v.object(parallel, pointer, modelJsonKeys("/modules/N/parallel"),
                "the parallel grid of module '" + module.name + "'"))
    return;
  ParallelConfig &config = module.parallel;
  if (auto value = v.integer(parallel, pointer, "tp", false, 1,
                             "tensor-parallel size", kMaxRanks))
    config.tp = *value;
  if (auto value = v.integer(parallel, pointer, "cp", false, 1,
                             "context-parallel size", kMaxRanks))
    config.cp = *value;
  if (auto value = v.integer(parallel, pointer, "pp", false, 1,
                             "pipeline-parallel size", kMaxRanks))
    config.pp = *value;
  if (auto value = v.integer(parallel, pointer, "dp", false, 1,
                             "data-parallel size", kMaxRanks))
    config.dp = *value;
  if (auto value = v.integer(parallel, pointer, "rank_offset", false, 0,
                             "first global rank of the module", kMaxRanks))
    config.rankOffset = *value;
  // The grid's size and end, in 64 bits without overflow: each factor is at
  // most kMaxRanks, so the product of two fits and is checked before the
  // next factor.
  int64_t ranks = 1;
  for (int64_t size : {config.tp, config.cp, config.pp, config.dp})
    ranks = ranks > kMaxRanks ? ranks : ranks * size;
  if (ranks > kMaxRanks || config.rankOffset + ranks > kMaxRanks) {
    v.error(pointer,
            "expected a grid within mimo's " + std::to_string(kMaxRanks) +
                " ranks, found tp*cp*pp*dp " +
                (ranks > kMaxRanks ? "above " + std::to_string(kMaxRanks)
                                   : std::to_string(ranks)) +
                " from rank_offset " + std::to_string(config.rankOffset) +
                "; use smaller parallel sizes");
    config = ParallelConfig{};
  }
  if (auto value = v.boolean(parallel, pointer, "sequence_parallel",
                             "sequence parallelism over the TP group")) {
    if (*value && module.kind == ModuleKind::Encoder)
      v.error(pointer + "/sequence_parallel",
              "sequence_parallel applies to the language module only, found "
              "true on encoder '" +
                  module.name + "'; remove it");
    else
      config.sequenceParallel = *value;
  }
  if (auto comm =
          v.choice(parallel, pointer, "cp_comm", false, {"ring", "all_gather"},
                   "how context parallelism moves keys and values"))
    config.cpComm = *comm;
  if (auto value =
          v.integer(parallel, pointer, "virtual_stages", false, 1,
                    "chunks of layers per pipeline rank", kMaxVirtualStages))
    config.virtualStages = *value;
  auto order = parallel.find("order");
  if (order != parallel.end()) {
    std::vector<std::string> names;
    bool allStrings = order->is_array();
    if (allStrings)
      for (const json &name : *order) {
        allStrings = allStrings && name.is_string();
        if (name.is_string())
          names.push_back(name.get<std::string>());
      }
    std::string why;
    std::optional<DimOrder> parsed;
    if (allStrings)
      parsed = parseOrder(names, &why);
    else
      why = "found " + describeJson(*order);
    if (parsed)
      config.order = *parsed;
    else
      v.error(pointer + "/order",
              "expected a permutation of [\"tp\", \"cp\", \"dp\", \"pp\"] "
              "(dimensions from fastest- to slowest-varying rank), " +
                  why + "; list each of the four names exactly once");
  }
}

/// 4, 0.5, 1e-06: a number as a user wrote it.
std::string shortNumber(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

/// docs/model-json.md `arch.family`: the module family named, whose
/// defaults the arch keys then start from (family/ModuleFamily.h).
void parseFamily(JsonValidator &v, const json &arch, const std::string &at,
                 ModuleConfig &module) {
  std::vector<std::string> names;
  for (const ModuleFamily *family : families())
    if (family->kind() == module.kind)
      names.push_back(std::string(family->name()));
  const std::string kind =
      module.kind == ModuleKind::Encoder ? "an encoder" : "the language model";
  // A family of the other kind is named as such; any other name gets
  // the choices (with the nearest).
  if (arch.contains("family") && arch["family"].is_string())
    if (const ModuleFamily *other =
            findFamily(arch["family"].get<std::string>());
        other && other->kind() != module.kind) {
      v.error(at + "/family", "\"" + std::string(other->name()) + "\" is " +
                                  std::string(other->label()) +
                                  ", and module '" + module.name + "' is " +
                                  kind + ": name one of " +
                                  JsonValidator::quoted(names));
      return;
    }
  auto name = v.choice(arch, at, "family", false, names,
                       "the module family (" + kind + "'s)");
  if (!name)
    return;
  const ModuleFamily *family = findFamily(*name);
  module.namedFamily = family;
  family->setDefaults(module);
}

/// docs/model-json.md: the architecture keys of Llama/Mistral/Qwen-style
/// language models (`num_query_groups`, `rope_theta`, `rope_scaling`) and
/// both modules' `norm_eps`; absent, each keeps today's model.
void parseArchExtras(JsonValidator &v, const json &arch, const std::string &at,
                     ModuleConfig &module) {
  if (auto eps = v.number(arch, at, "norm_eps", 0, true, 1, true,
                          "the epsilon of the module's norms"))
    module.normEps = *eps;
  // An optional true/false key into `out`.
  auto flag = [&](const char *key, const char *meaning, bool &out) {
    if (auto b = v.boolean(arch, at, key, meaning))
      out = *b;
  };
  if (module.kind != ModuleKind::Language) {
    parseMoe(v, arch, at, module);
    flag("bias", "biases on q, k, v, o, fc1 and fc2", module.bias);
    if (auto kind =
            v.choice(arch, at, "position_embeddings", false,
                     {"none", "learned"}, "the encoder's position embeddings"))
      module.learnedPositions = *kind == "learned";
    if (auto rows =
            v.integer(arch, at, "max_positions", false, 1,
                      "rows of the position-embedding table", kMaxWidth)) {
      module.maxPositions = *rows;
      if (!module.learnedPositions)
        v.error(at + "/max_positions",
                "max_positions sizes learned position embeddings; add "
                "\"position_embeddings\": \"learned\" or remove it");
    } else if (module.learnedPositions) {
      v.error(at + "/max_positions",
              "missing max_positions: the rows of the learned "
              "position-embedding table (CLIP ViT-L/14 at 336 px: 577, the "
              "class token's included)");
    }
    flag("pre_norm", "a LayerNorm before the layers (CLIP)", module.preNorm);
    flag("final_norm", "a LayerNorm after the layers (SigLIP)",
         module.finalNorm);
    flag("class_token", "a learned row before each sample's rows (CLIP)",
         module.classToken);
    flag("patch_bias", "a bias on the patch embedding", module.patchBias);
    if (arch.contains("output_layer")) {
      const json &layer = arch["output_layer"];
      if (!layer.is_number_integer() || layer.get<int64_t>() >= 0 ||
          (module.numLayers > 0 && layer.get<int64_t>() < -module.numLayers))
        v.error(at + "/output_layer",
                "expected an integer from -1 (the last layer) down to -" +
                    (module.numLayers > 0 ? std::to_string(module.numLayers)
                                          : std::string("num_layers")) +
                    ", found " + briefJson(layer) +
                    "; LLaVA takes -2, the penultimate layer");
      else
        module.outputLayer = layer.get<int64_t>();
    }
    // The layers past output_layer do not exist: a sparse one among them
    // would make the module sparse with no sparse layer that runs.
    if (module.hasMoe() && !module.moe.layers.empty() && module.numLayers > 0 &&
        module.moe.layers.back() >= module.layers())
      v.error(at + "/moe/layers", "layer " +
                                      std::to_string(module.moe.layers.back()) +
                                      " is past output_layer " +
                                      std::to_string(module.outputLayer) +
                                      ", which computes layers 0 to " +
                                      std::to_string(module.layers() - 1) +
                                      "; list only those (or remove moe)");
    if (auto projector =
            v.choice(arch, at, "projector", false, {"mlp2x_gelu", "linear"},
                     "the projection to the language width"))
      module.linearProjector = *projector == "linear";
    if (auto kind = v.choice(arch, at, "activation", false,
                             {"gelu_tanh", "gelu", "quick_gelu"},
                             "the MLP's activation"))
      module.activation = *kind;
    if (auto kind =
            v.choice(arch, at, "projector_activation", false,
                     {"gelu_tanh", "gelu"}, "the projector's activation"))
      module.projectorActivation = *kind;
    return;
  }
  flag("qkv_bias", "biases on q, k and v", module.qkvBias);
  flag("qk_norm", "per-head RMSNorms of q and k (Qwen3)", module.qkNorm);
  parseMoe(v, arch, at, module);
  flag("tie_embeddings", "whether the head is the embedding's transpose",
       module.tieEmbeddings);
  if (auto groups = v.integer(arch, at, "num_query_groups", false, 1,
                              "the key and value heads (GQA)", kMaxWidth)) {
    module.numQueryGroups = *groups;
    if (module.numHeads > 0 && module.numHeads % *groups != 0)
      v.error(at + "/num_query_groups",
              "expected num_query_groups to divide num_heads " +
                  std::to_string(module.numHeads) + ", found " +
                  std::to_string(*groups) +
                  "; use a group count that divides the head count (1: "
                  "multi-query attention)");
  }
  if (auto width = v.integer(arch, at, "head_dim", false, 2,
                             "each attention head's width", kMaxWidth))
    module.headDimKey = *width;
  if (auto theta = v.number(arch, at, "rope_theta", 1, false, 1e12, false,
                            "the base of the rotary embeddings"))
    module.ropeTheta = *theta;
  const std::string scalingAt = at + "/rope_scaling";
  if (const json *scaling = v.member(arch, at, "rope_scaling", false,
                                     "how RoPE's frequencies are rescaled")) {
    if (!v.object(*scaling, scalingAt,
                  modelJsonKeys("/modules/N/arch/rope_scaling"),
                  "RoPE's rescaling"))
      return;
    RopeScaling r;
    if (auto type = v.string(*scaling, scalingAt, "type", true,
                             "the kind of rescaling");
        type && *type != "llama3")
      v.error(scalingAt + "/type",
              "expected \"llama3\" (Llama 3.1's rescaling), found \"" +
                  type->substr(0, 40) +
                  "\"; other kinds (linear, dynamic, yarn) are not supported: "
                  "remove rope_scaling or use \"llama3\"");
    auto positive = [&](const char *key, const char *meaning, double &out) {
      if (!scaling->contains(key)) {
        v.error(scalingAt + "/" + key,
                std::string("missing ") + key + " (" + meaning +
                    "); copy it from the model's config.json");
        return;
      }
      if (auto x =
              v.number(*scaling, scalingAt, key, 0, true, 1e12, false, meaning))
        out = *x;
    };
    positive("factor", "how much longer the context is than trained", r.factor);
    positive("low_freq_factor", "where the low frequencies begin",
             r.lowFreqFactor);
    positive("high_freq_factor", "where the high frequencies end",
             r.highFreqFactor);
    positive("original_max_position_embeddings",
             "the context length the model was trained at",
             r.originalMaxPositions);
    if (r.highFreqFactor <= r.lowFreqFactor)
      v.error(scalingAt + "/high_freq_factor",
              "expected high_freq_factor above low_freq_factor " +
                  shortNumber(r.lowFreqFactor) + ", found " +
                  shortNumber(r.highFreqFactor) + "; Llama 3.1 uses 1 and 4");
    module.ropeScaling = r;
  }
}

/// docs/model-json.md `lora`.
void parseLora(Validator &v, const json &moduleJson, ModuleConfig &module) {
  const json *lora = v.member(moduleJson, module.pointer, "lora", false,
                              "the module's low-rank adapters");
  const std::string at = module.pointer + "/lora";
  if (!lora ||
      !v.object(*lora, at, modelJsonKeys("/modules/N/lora"), "a lora object"))
    return;
  LoraConfig config;
  const bool language = module.kind == ModuleKind::Language;
  if (auto r = v.integer(*lora, at, "r", true, 1, "the adapters' rank", 65536))
    config.rank = *r;
  if (auto alpha = v.number(*lora, at, "alpha", 0, true, INFINITY, true,
                            "the adapters' scale numerator (s = alpha / r)"))
    config.alpha = *alpha;
  else if (!lora->contains("alpha"))
    config.alpha = static_cast<double>(config.rank); // s = 1 (sqrt(r): rslora)
  if (auto rs = v.boolean(*lora, at, "rslora",
                          "whether s = alpha / sqrt(r) (rank-stabilised)"))
    config.rslora = *rs;
  const std::vector<std::string> names = loraTargetNames(language);
  const std::string kindName = language ? "a language model" : "an encoder";
  if (const json *targets = v.member(*lora, at, "targets", true,
                                     "the linear layers that get adapters")) {
    if (targets->is_string() && targets->get<std::string>() == "all-linear") {
      config.targets = names;
    } else if (!targets->is_array() || targets->empty()) {
      v.error(at + "/targets",
              "expected \"all-linear\" or a non-empty array of linear-layer "
              "names, found " +
                  describeJson(*targets) + "; " + kindName + "'s are " +
                  JsonValidator::quoted(names));
    } else {
      for (size_t i = 0; i < targets->size(); ++i) {
        const json &t = (*targets)[i];
        const std::string where = at + "/targets/" + std::to_string(i);
        std::optional<std::string> name;
        if (t.is_string())
          name = canonicalLoraTarget(t.get<std::string>());
        if (!name ||
            std::find(names.begin(), names.end(), *name) == names.end()) {
          std::string hint =
              t.is_string() ? closestMatch(t.get<std::string>(), names) : "";
          v.error(where,
                  "expected a linear layer of " + kindName +
                      " (docs/model.md), found " + describeJson(t) +
                      (hint.empty() ? "" : "; did you mean \"" + hint + "\"?") +
                      "; " + kindName + "'s are " +
                      JsonValidator::quoted(names) +
                      " (or PEFT's names: q_proj, o_proj, ...)");
          continue;
        }
        if (config.hasTarget(*name))
          v.error(where, "\"" + *name +
                             "\" is targeted twice; list each linear layer "
                             "once");
        else
          config.targets.push_back(*name);
      }
    }
  }
  if (const json *save = v.member(*lora, at, "modules_to_save", false,
                                  "parameters trained fully beside the "
                                  "adapters")) {
    if (!save->is_array())
      v.error(at + "/modules_to_save",
              "expected an array of parameter-name prefixes, found " +
                  describeJson(*save) + "; write for example [\"head\"]");
    else
      for (size_t i = 0; i < save->size(); ++i) {
        const json &prefix = (*save)[i];
        if (prefix.is_string() && !prefix.get<std::string>().empty())
          config.modulesToSave.push_back(prefix.get<std::string>());
        else
          v.error(at + "/modules_to_save/" + std::to_string(i),
                  "expected a parameter-name prefix (a string such as "
                  "\"head\"), found " +
                      describeJson(prefix) +
                      "; write the parameter names of docs/model.md");
      }
  }
  module.lora = std::move(config);
}

void parseModule(Validator &v, const json &moduleJson, size_t index,
                 ModelConfig &config, bool &ok) {
  ModuleConfig module;
  module.pointer = "/modules/" + std::to_string(index);
  const std::string &pointer = module.pointer;
  // Validate kind first: the allowed keys depend on it.
  if (!moduleJson.is_object()) {
    v.error(pointer, "expected a module (a JSON object with name, kind, arch "
                     "and parallel), found " +
                         describeJson(moduleJson) + "; write it as { ... }");
    ok = false;
    return;
  }
  std::optional<std::string> kind =
      v.choice(moduleJson, pointer, "kind", true, {"encoder", "language"},
               "what the module is");
  module.kind =
      kind && *kind == "language" ? ModuleKind::Language : ModuleKind::Encoder;
  const std::vector<std::string> &keys = modelJsonKeys(
      module.kind == ModuleKind::Encoder ? "/modules/N (encoder)"
                                         : "/modules/N (language)");
  v.object(moduleJson, pointer, keys,
           kind ? "a module of kind \"" + *kind + "\"" : "a module");
  if (module.kind == ModuleKind::Language)
    for (Diagnostic &diag : v.diagnostics)
      if (diag.pointer == pointer + "/special_token_id")
        diag.message += "; only encoders have a special_token_id (the "
                        "language module embeds text tokens)";

  if (auto name = v.string(moduleJson, pointer, "name", true,
                           "the module's name; encoder names are modality "
                           "names")) {
    if (!isIdentifier(*name))
      v.error(pointer + "/name",
              "expected a name of letters, digits, '_' or '-' starting with a "
              "letter or '_', found \"" +
                  name->substr(0, 60) + "\"; rename the module");
    module.name = *name;
  }
  if (module.kind == ModuleKind::Encoder)
    if (auto id = v.integer(moduleJson, pointer, "special_token_id", true, 0,
                            "the token id that marks this modality's "
                            "positions in input_ids",
                            kMaxVocab - 1))
      module.specialTokenId = *id;

  std::string archPointer = pointer + "/arch";
  if (const json *arch = v.member(moduleJson, pointer, "arch", true,
                                  "the module's architecture")) {
    const std::vector<std::string> &archKeys = modelJsonKeys(
        module.kind == ModuleKind::Encoder ? "/modules/N/arch (encoder)"
                                           : "/modules/N/arch (language)");
    if (v.object(*arch, archPointer, archKeys,
                 "the architecture of module '" + module.name + "'")) {
      parseFamily(v, *arch, archPointer, module);
      auto field = [&](const char *key, const char *meaning, int64_t maximum) {
        return v.integer(*arch, archPointer, key, true, 1, meaning, maximum)
            .value_or(0);
      };
      if (module.kind == ModuleKind::Encoder)
        module.featureDim =
            field("feature_dim", "size of each input feature row", kMaxWidth);
      else
        module.vocabSize =
            field("vocab_size", "number of text token ids", kMaxVocab);
      module.hiddenSize =
          field("hidden_size", "width of the hidden states", kMaxWidth);
      module.numLayers =
          field("num_layers", "number of transformer layers", kMaxLayers);
      module.numHeads =
          field("num_heads", "number of attention heads", kMaxWidth);
      module.ffnHiddenSize = field(
          "ffn_hidden_size", "width of the feed-forward layer", kMaxFfnWidth);
      parseArchExtras(v, *arch, archPointer, module);
      // The heads' width: head_dim, else hidden_size / num_heads.
      if (module.hiddenSize > 0 && module.numHeads > 0) {
        if (module.headDimKey == 0 && module.hiddenSize % module.numHeads != 0)
          v.error(archPointer + "/num_heads",
                  "expected num_heads to divide hidden_size " +
                      std::to_string(module.hiddenSize) + ", found " +
                      std::to_string(module.numHeads) +
                      "; use a head count that divides the hidden size, or "
                      "give the heads' width as head_dim");
        else if (module.kind == ModuleKind::Language &&
                 module.headDim() % 2 != 0)
          v.error(
              archPointer +
                  (module.headDimKey > 0 ? "/head_dim" : "/num_heads"),
              "expected an even head size for rotary embeddings, found " +
                  (module.headDimKey > 0
                       ? "head_dim " + std::to_string(module.headDimKey)
                       : "hidden_size " + std::to_string(module.hiddenSize) +
                             " / num_heads " + std::to_string(module.numHeads) +
                             " = " + std::to_string(module.headDim())) +
                  "; choose an even head size");
      }
      if (module.namedFamily)
        if (std::optional<ArchProblem> problem =
                module.namedFamily->structureProblem(module))
          v.error(archPointer + "/" +
                      (arch->contains(problem->key) ? problem->key : "family"),
                  problem->message);
    }
  }
  parseParallel(v, moduleJson, module);
  if (module.classToken && module.parallel.pp > 1)
    v.error(pointer + "/parallel/pp",
            "encoder '" + module.name +
                "' has a class token, whose row this version keeps on one "
                "pipeline stage; use pp 1 for it (encoders rarely need more)");
  // GQA splits the KV groups over TP (the compiler checks num_heads).
  if (module.numQueryGroups > 0 && module.parallel.tp > 0 &&
      module.numHeads % module.numQueryGroups == 0 &&
      module.numQueryGroups % module.parallel.tp != 0)
    v.error(pointer + "/parallel/tp",
            "num_query_groups " + std::to_string(module.numQueryGroups) +
                " of module '" + module.name + "' is not divisible by tp " +
                std::to_string(module.parallel.tp) +
                "; use a tp that divides " +
                std::to_string(module.numQueryGroups) +
                " or change arch.num_query_groups");
  if (const json *freeze =
          v.member(moduleJson, pointer, "freeze", false, "what stays fixed")) {
    const std::string at = pointer + "/freeze";
    if (freeze->is_boolean()) {
      module.freezeAll = freeze->get<bool>();
    } else if (freeze->is_string() && module.kind == ModuleKind::Encoder &&
               freeze->get<std::string>() == "encoder_body") {
      module.freezeBody = true;
    } else if (freeze->is_string()) {
      v.error(at, module.kind == ModuleKind::Language &&
                          freeze->get<std::string>() == "encoder_body"
                      ? "\"encoder_body\" freezes an encoder's tower, and "
                        "module '" +
                            module.name +
                            "' is the language model; write true or an "
                            "array of parameter-name prefixes"
                      : "expected true, false, \"encoder_body\" or an array "
                        "of parameter-name prefixes, found " +
                            describeJson(*freeze) +
                            "; write for example \"encoder_body\" or "
                            "[\"patch\", \"layers\"]");
    } else if (freeze->is_array()) {
      for (size_t i = 0; i < freeze->size(); ++i) {
        const json &prefix = (*freeze)[i];
        if (prefix.is_string() && !prefix.get<std::string>().empty())
          module.freezePrefixes.push_back(prefix.get<std::string>());
        else
          v.error(at + "/" + std::to_string(i),
                  "expected a parameter-name prefix (a string such as "
                  "\"layers\"), found " +
                      describeJson(prefix) +
                      "; write the parameter names of docs/model.md");
      }
    } else {
      v.error(at, "expected true, false, \"encoder_body\" or an array of "
                  "parameter-name prefixes, found " +
                      describeJson(*freeze) +
                      "; write for example true or [\"patch\", \"layers\"]");
    }
  }
  parseLora(v, moduleJson, module);
  if (auto mult = v.number(moduleJson, pointer, "lr_mult", 0, true, INFINITY,
                           false, "the module's learning-rate multiplier"))
    module.lrMult = *mult;
  if (auto recompute = v.choice(moduleJson, pointer, "recompute", false,
                                {"none", "selective", "full"},
                                "what the backward recomputes"))
    module.recompute = *recompute;
  if (auto layers =
          v.integer(moduleJson, pointer, "recompute_layers", false, 0,
                    "the layers of each stage that recompute", kMaxLayers)) {
    module.recomputeLayers = *layers;
    if (module.recompute != "full")
      v.error(pointer + "/recompute_layers",
              "recompute_layers applies with recompute \"full\" only; set "
              "\"recompute\": \"full\" or remove recompute_layers");
  }
  if (auto sharded = v.boolean(moduleJson, pointer, "distributed_optimizer",
                               "whether the optimizer state is sharded over "
                               "the module's DP x CP group"))
    module.distributedOptimizer = *sharded;
  parseExpertGrid(v, moduleJson, module);
  if (const json *split = v.member(moduleJson, pointer, "pipeline_layers",
                                   false, "the layers of each stage")) {
    const std::string at = pointer + "/pipeline_layers";
    bool counts = split->is_array() && !split->empty() &&
                  split->size() <= static_cast<size_t>(kMaxRanks);
    for (size_t i = 0; counts && i < split->size(); ++i)
      counts = (*split)[i].is_number_integer();
    if (!counts) {
      v.error(at, "expected an array of layer counts, one per pipeline "
                  "stage, found " +
                      describeJson(*split) +
                      "; write for example [7, 9] for pp 2 and 16 layers");
    } else {
      for (const json &n : *split)
        module.pipelineLayers.push_back(n.get<int64_t>());
      // Checked only once the arch and the grid are (their own errors
      // name them).
      if (module.numLayers > 0 && module.layers() > 0 &&
          module.parallel.pp > 0) {
        std::string problem = pipelineLayersRule(
            (module.kind == ModuleKind::Language ? "language module '"
                                                 : "encoder '") +
                module.name + "'",
            module.pipelineLayers, module.numLayers, module.layers(),
            module.parallel.pp);
        if (!problem.empty())
          v.error(at, problem);
      }
    }
  }
  if (const json *init = v.member(moduleJson, pointer, "init", false,
                                  "where the module's weights start")) {
    const std::string at = pointer + "/init";
    if (v.object(*init, at, modelJsonKeys("/modules/N/init"),
                 "the module's starting weights")) {
      InitConfig config;
      if (auto from = v.string(*init, at, "from", true,
                               "the checkpoint folder the weights come from"))
        config.from = *from;
      if (auto format = v.choice(*init, at, "format", true, {"mimo", "hf"},
                                 "what `from` holds"))
        config.format = *format;
      if (const json *adapter = v.member(*init, at, "adapter", false,
                                         "a PEFT adapter over the base")) {
        const std::string where = at + "/adapter";
        if (v.object(*adapter, where, modelJsonKeys("/modules/N/init/adapter"),
                     "the adapter folder")) {
          if (auto from = v.string(*adapter, where, "from", true,
                                   "the PEFT adapter folder"))
            config.adapterFrom = *from;
          v.choice(*adapter, where, "format", true, {"peft"},
                   "what the adapter folder holds");
          if (!module.lora)
            v.error(where, "an adapter folder is read into the module's LoRA "
                           "adapters, and module '" +
                               module.name +
                               "' has no lora object; add \"lora\" with the "
                               "adapter's r, alpha and targets");
          else if (config.format != "hf")
            v.error(where, "a PEFT adapter applies to a Hugging Face base: "
                           "give init a \"format\": \"hf\" folder");
        }
      }
      module.init = config;
    }
  }
  config.modules.push_back(std::move(module));
}

/// Each of `prefixes` (at `at` + its index) names some parameter of
/// `module` (not an adapter factor).
void checkPrefixes(Validator &v, const ModuleConfig &module,
                   int64_t outputHidden,
                   const std::vector<std::string> &prefixes,
                   const std::string &at) {
  if (prefixes.empty())
    return;
  ModuleConfig plain = module;
  plain.lora.reset(); // the base's names
  std::vector<ParamSpec> specs =
      stageParameters(plain, outputHidden, false, 1, 0);
  for (size_t i = 0; i < prefixes.size(); ++i) {
    const std::string &prefix = prefixes[i];
    bool named = false;
    for (const ParamSpec &spec : specs)
      named = named || namePrefixMatches(spec.local, prefix);
    if (named)
      continue;
    std::string names;
    std::vector<std::string> seen;
    for (const ParamSpec &spec : specs) {
      std::string head = spec.local.substr(0, spec.local.find('.'));
      if (std::find(seen.begin(), seen.end(), head) == seen.end()) {
        seen.push_back(head);
        names += (names.empty() ? "" : ", ") + ("\"" + head + "\"");
      }
    }
    v.error(at + std::to_string(i),
            "expected a prefix of a parameter name of module '" + module.name +
                "', found \"" + prefix +
                "\", which names none; its names "
                "begin with " +
                names + " (docs/model.md)");
  }
}

} // namespace

void parseModules(Validator &v, const json &root, ModelConfig &config) {
  const json *modules =
      v.member(root, "", "modules", true,
               "the encoders and the language model, an array");
  if (!modules)
    return;
  if (!modules->is_array() || modules->empty()) {
    v.error("/modules", "expected a non-empty array of modules, found " +
                            (modules->is_array() ? std::string("an empty array")
                                                 : describeJson(*modules)) +
                            "; list the encoders and one language module");
    return;
  }
  if (modules->size() > static_cast<size_t>(kMaxModules)) {
    v.error("/modules", "expected at most " + std::to_string(kMaxModules) +
                            " modules, found " +
                            std::to_string(modules->size()) +
                            "; merge modalities into fewer encoders");
    return;
  }
  bool ok = true;
  for (size_t i = 0; i < modules->size(); ++i)
    parseModule(v, (*modules)[i], i, config, ok);
  if (!ok)
    return;

  std::map<std::string, size_t> names;
  std::map<int64_t, size_t> tokenIds;
  std::optional<size_t> language;
  for (size_t i = 0; i < config.modules.size(); ++i) {
    const ModuleConfig &module = config.modules[i];
    if (!module.name.empty()) {
      auto [it, inserted] = names.emplace(module.name, i);
      if (!inserted)
        v.error(module.pointer + "/name",
                "expected unique module names, found '" + module.name +
                    "' again (first at /modules/" + std::to_string(it->second) +
                    "); rename one of them");
    }
    if (module.kind == ModuleKind::Language) {
      if (language)
        v.error(module.pointer + "/kind",
                "expected exactly one module of kind \"language\", found a "
                "second one ('" +
                    module.name + "'; the first is '" +
                    config.modules[*language].name + "' at /modules/" +
                    std::to_string(*language) +
                    "); make one of them an encoder or remove it");
      else
        language = i;
    } else if (module.specialTokenId >= 0) {
      auto [it, inserted] = tokenIds.emplace(module.specialTokenId, i);
      if (!inserted)
        v.error(module.pointer + "/special_token_id",
                "expected a special_token_id unique to encoder '" +
                    module.name + "', found " +
                    std::to_string(module.specialTokenId) +
                    ", which encoder '" + config.modules[it->second].name +
                    "' also uses; give each modality its own token id");
    }
  }
  if (!language) {
    v.error("/modules", "expected exactly one module of kind \"language\", "
                        "found none; add a language module");
    return;
  }
  const ModuleConfig &lm = config.modules[*language];
  // Every freeze and modules_to_save prefix names some parameter of its
  // module.
  for (const ModuleConfig &module : config.modules) {
    if (module.hiddenSize <= 0 || module.numLayers <= 0 || lm.hiddenSize <= 0)
      continue;
    checkPrefixes(v, module, lm.hiddenSize, module.freezePrefixes,
                  module.pointer + "/freeze/");
    if (module.lora) {
      checkPrefixes(v, module, lm.hiddenSize, module.lora->modulesToSave,
                    module.pointer + "/lora/modules_to_save/");
      // A weight is adapted or trained whole, not both.
      ModuleConfig plain = module;
      plain.lora.reset();
      const std::vector<ParamSpec> specs =
          stageParameters(plain, lm.hiddenSize, false, 1, 0);
      for (size_t i = 0; i < module.lora->modulesToSave.size(); ++i)
        for (const ParamSpec &spec : specs)
          if (namePrefixMatches(spec.local, module.lora->modulesToSave[i]) &&
              loraTargetOf(*module.lora, spec.local)) {
            v.error(module.pointer + "/lora/modules_to_save/" +
                        std::to_string(i),
                    "\"" + module.lora->modulesToSave[i] + "\" covers " +
                        spec.local +
                        ", which lora.targets adapts: a weight is adapted "
                        "or trained whole, not both; name what trains "
                        "whole more narrowly (\"head\", \"embedding\")");
            break;
          }
    }
  }
  // Something must train.
  if (lm.hiddenSize > 0 && v.diagnostics.empty()) {
    bool all = true;
    for (const ModuleConfig &module : config.modules)
      all = all && module.hiddenSize > 0 && module.numLayers > 0 &&
            everyParameterFrozen(config, module);
    if (all)
      v.error("/modules",
              "every parameter of every module is frozen (freeze): nothing "
              "would train; unfreeze a module, or a part of one");
  }
  for (const ModuleConfig &module : config.modules)
    if (module.kind == ModuleKind::Encoder && lm.vocabSize > 0 &&
        module.specialTokenId >= lm.vocabSize)
      v.error(module.pointer + "/special_token_id",
              "expected a token id below the language vocab_size " +
                  std::to_string(lm.vocabSize) + ", found " +
                  std::to_string(module.specialTokenId) +
                  "; pick an id in [0, " + std::to_string(lm.vocabSize) +
                  ") (it is reserved from synthetic text)");
}

} // namespace mimo::detail
