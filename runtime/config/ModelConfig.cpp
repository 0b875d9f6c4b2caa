//===- ModelConfig.cpp - model.json version 1 -----------------------------===//

#include "runtime/config/ModelConfig.h"

#include "runtime/config/ModelConfigParse.h"
#include "runtime/json/JsonLocator.h"
#include "runtime/json/JsonReader.h"
#include "runtime/json/JsonValidator.h"
#include "runtime/support/Limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

namespace mimo {

const std::vector<ModelJsonObject> &modelJsonObjects() {
  static const std::vector<ModelJsonObject> objects = {
      {"",
       {"version", "name", "seed", "precision", "world_size", "batch",
        "modules", "data", "train"}},
      {"/batch",
       {"micro_batch_size", "num_microbatches", "seq_length", "packing",
        "attention_mask", "schedule"}},
      {"/modules/N (encoder)",
       {"name", "kind", "arch", "parallel", "special_token_id", "freeze",
        "lr_mult", "init", "pipeline_layers", "recompute", "recompute_layers",
        "distributed_optimizer", "lora"}},
      {"/modules/N (language)",
       {"name", "kind", "arch", "parallel", "freeze", "lr_mult", "init",
        "pipeline_layers", "recompute", "recompute_layers",
        "distributed_optimizer", "lora"}},
      {"/modules/N/lora",
       {"r", "alpha", "targets", "rslora", "modules_to_save"}},
      {"/modules/N/arch (encoder)",
       {"family", "feature_dim", "hidden_size", "num_layers", "num_heads",
        "ffn_hidden_size", "norm_eps", "bias", "position_embeddings",
        "max_positions", "pre_norm", "final_norm", "class_token",
        "output_layer", "patch_bias", "projector", "activation",
        "projector_activation", "moe"}},
      {"/modules/N/arch (language)",
       {"family", "vocab_size", "hidden_size", "num_layers", "num_heads",
        "ffn_hidden_size", "num_query_groups", "head_dim", "rope_theta",
        "rope_scaling", "norm_eps", "qkv_bias", "tie_embeddings", "qk_norm",
        "moe"}},
      {"/modules/N/arch/moe",
       {"num_experts", "top_k", "expert_ffn_hidden_size",
        "shared_expert_ffn_hidden_size", "shared_expert_gate", "layers",
        "router"}},
      {"/modules/N/arch/moe/router",
       {"score", "norm_topk", "aux_loss_coef", "z_loss_coef"}},
      {"/modules/N/arch/rope_scaling",
       {"type", "factor", "low_freq_factor", "high_freq_factor",
        "original_max_position_embeddings"}},
      {"/modules/N/init", {"from", "format", "adapter"}},
      {"/modules/N/init/adapter", {"from", "format"}},
      {"/modules/N/parallel",
       {"tp", "cp", "pp", "dp", "rank_offset", "sequence_parallel", "cp_comm",
        "virtual_stages", "order", "ep", "etp"}},
      {"/data",
       {"source", "path", "eval_path", "blend", "shuffle", "samples",
        "tokens_per_sample", "text_only_fraction"}},
      {"/data/blend/N", {"path", "weight"}},
      {"/train",
       {"steps", "optimizer", "lr", "betas", "eps", "weight_decay", "decay_all",
        "clip_grad", "lr_schedule", "eval_every", "eval_steps",
        "grad_reduce_dtype"}},
      {"/train/lr_schedule",
       {"warmup_steps", "decay", "decay_steps", "min_lr"}},
  };
  return objects;
}

bool namePrefixMatches(const std::string &local, const std::string &prefix) {
  return local.size() >= prefix.size() &&
         local.compare(0, prefix.size(), prefix) == 0 &&
         (local.size() == prefix.size() || local[prefix.size()] == '.' ||
          prefix.back() == '.');
}

void resolveInitPaths(ModelConfig &config, const std::string &modelDir) {
  namespace fs = std::filesystem;
  auto resolve = [&](std::string &path) {
    if (path.empty() || fs::path(path).is_absolute())
      return;
    std::error_code ec;
    fs::path joined = fs::path(modelDir.empty() ? "." : modelDir) / path;
    fs::path absolute = fs::absolute(joined, ec);
    path = (ec ? joined : absolute).lexically_normal().string();
  };
  for (ModuleConfig &module : config.modules)
    if (module.init) {
      resolve(module.init->from);
      resolve(module.init->adapterFrom);
    }
}

bool ModuleConfig::frozen(const std::string &local) const {
  if (lora) {
    if (isLoraFactor(local))
      return false;
    for (const std::string &prefix : lora->modulesToSave)
      if (namePrefixMatches(local, prefix))
        return false;
    return true;
  }
  if (freezeAll || (freezeBody && !namePrefixMatches(local, "projection")))
    return true;
  for (const std::string &prefix : freezePrefixes)
    if (namePrefixMatches(local, prefix))
      return true;
  return false;
}

const std::vector<std::string> &modelJsonKeys(std::string_view pointer) {
  for (const ModelJsonObject &object : modelJsonObjects())
    if (object.pointer == pointer)
      return object.keys;
  static const std::vector<std::string> none;
  return none;
}

using json = nlohmann::json;

size_t ModelConfig::languageIndex() const {
  for (size_t i = 0; i < modules.size(); ++i)
    if (modules[i].kind == ModuleKind::Language)
      return i;
  return 0;
}

using detail::isIdentifier;
using detail::parseModules;

namespace {

/// The schedules that run the language layers in chunks, for messages:
/// "the interleaved schedule".
std::string chunkedSchedules() {
  std::vector<std::string> names;
  for (const PipelineSchedule *schedule : schedules())
    if (schedule->chunked())
      names.emplace_back(schedule->label());
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i ? (i + 1 == names.size() ? " or " : ", ") : "") + names[i];
  return "the " + text + (names.size() == 1 ? " schedule" : " schedules");
}

/// The first chunked schedule's name, quoted, for a fix.
std::string firstChunkedSchedule() {
  for (const PipelineSchedule *schedule : schedules())
    if (schedule->chunked())
      return "\"" + std::string(schedule->name()) + "\"";
  return "\"\"";
}

using Validator = JsonValidator;

std::string fileStem(std::string_view fileName) {
  std::string name(fileName);
  size_t slash = name.find_last_of('/');
  if (slash != std::string::npos)
    name = name.substr(slash + 1);
  size_t dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0)
    name = name.substr(0, dot);
  return name.empty() ? "model" : name;
}

void parseBatch(Validator &v, const json &root, ModelConfig &config) {
  const json *batch = v.member(root, "", "batch", true,
                               "micro-batch size, microbatch count and "
                               "sequence length");
  if (!batch || !v.object(*batch, "/batch", modelJsonKeys("/batch"),
                          "the batch settings"))
    return;
  BatchConfig &b = config.batch;
  b.microBatchSize =
      v.integer(*batch, "/batch", "micro_batch_size", true, 1,
                "samples per global microbatch across all data-parallel lanes",
                kMaxMicroBatchSize)
          .value_or(0);
  b.numMicrobatches =
      v.integer(*batch, "/batch", "num_microbatches", true, 1,
                "microbatches per optimizer step", kMaxMicrobatches)
          .value_or(0);
  b.seqLength = v.integer(*batch, "/batch", "seq_length", true, 2,
                          "language sequence length including modality tokens",
                          kMaxSeqLength)
                    .value_or(0);
  b.packing = v.boolean(*batch, "/batch", "packing",
                        "pack each microbatch into one THD row")
                  .value_or(false);
  if (auto mask = v.choice(*batch, "/batch", "attention_mask", false,
                           {"causal", "dense"}, "the attention mask"))
    b.attentionMask = *mask;
  std::vector<std::string> scheduleNames;
  for (const PipelineSchedule *schedule : schedules())
    scheduleNames.emplace_back(schedule->name());
  std::sort(scheduleNames.begin(), scheduleNames.end());
  if (auto schedule = v.choice(*batch, "/batch", "schedule", false,
                               scheduleNames, "the pipeline schedule")) {
    b.schedule = findSchedule(*schedule);
    b.scheduleNamed = true;
  }
  if (b.packing && b.attentionMask == "dense")
    v.error("/batch/attention_mask",
            "expected \"causal\" with packing (packed rows restrict attention "
            "to each sample), found \"dense\"; remove attention_mask or set "
            "packing to false");
}

void parseData(Validator &v, const json &root, ModelConfig &config) {
  DataConfig &data = config.data;
  auto it = root.find("data");
  std::vector<std::string> encoders;
  for (const ModuleConfig &module : config.modules)
    if (module.kind == ModuleKind::Encoder && !module.name.empty())
      encoders.push_back(module.name);
  std::map<std::string, TokenRange> ranges;
  if (it != root.end() &&
      v.object(*it, "/data", modelJsonKeys("/data"), "the data settings")) {
    const json &dataJson = *it;
    if (auto source = v.choice(dataJson, "/data", "source", false,
                               {"synthetic", "jsonl", "indexed"},
                               "where samples come from"))
      data.source = *source;
    bool files = data.source != "synthetic";
    if (files) {
      const char *meaning =
          data.source == "jsonl"
              ? "the jsonl file, relative to model.json"
              : "the PREFIX of Megatron's PREFIX.bin and PREFIX.idx, "
                "relative to model.json";
      // data.path, or data.blend's files with weights (not both).
      if (!dataJson.contains("blend") || dataJson.contains("path"))
        data.path =
            v.string(dataJson, "/data", "path", true, meaning).value_or("");
      if (dataJson.contains("blend") && dataJson.contains("path"))
        v.error("/data/blend",
                "expected path or blend, found both; keep path for one "
                "dataset, or list every file in blend");
      if (const json *blend = v.member(dataJson, "/data", "blend", false,
                                       "datasets drawn from with weights")) {
        if (!blend->is_array() || blend->empty() || blend->size() > 1024)
          v.error("/data/blend",
                  "expected an array of 1 to 1024 {\"path\": ..., "
                  "\"weight\": ...} objects, found " +
                      describeJson(*blend));
        else
          for (size_t i = 0; i < blend->size(); ++i) {
            const std::string at = "/data/blend/" + std::to_string(i);
            const json &entry = (*blend)[i];
            if (!v.object(entry, at, modelJsonKeys("/data/blend/N"),
                          "a blended dataset"))
              continue;
            DataConfig::BlendEntry e;
            e.path = v.string(entry, at, "path", true, meaning).value_or("");
            if (auto w = v.number(entry, at, "weight", 0, true, 1e12, false,
                                  "the share of samples drawn from it "
                                  "(relative to the others')"))
              e.weight = *w;
            data.blend.push_back(e);
          }
      }
      if (auto shuffle = v.boolean(dataJson, "/data", "shuffle",
                                   "a seeded permutation per epoch"))
        data.shuffle = *shuffle;
      if (dataJson.contains("eval_path"))
        data.evalPath = v.string(dataJson, "/data", "eval_path", false,
                                 "the held-out data, like path")
                            .value_or("");
    } else {
      for (const char *key : {"path", "eval_path", "blend", "shuffle"})
        if (dataJson.contains(key))
          v.error(std::string("/data/") + key,
                  std::string("expected no ") + key +
                      " for the synthetic source, found one; set \"source\": "
                      "\"jsonl\" or \"indexed\", or remove it");
    }
    for (const char *key : {"tokens_per_sample", "text_only_fraction"})
      if (files && dataJson.contains(key))
        v.error(std::string("/data/") + key,
                std::string("expected ") + key +
                    " only with the synthetic source, found it with \"" +
                    data.source +
                    "\"; remove it (file samples carry their own tokens)");
    const bool withEncoders = !encoders.empty();
    if (data.source == "indexed") {
      data.samples = withEncoders ? "sequences" : "windows";
      if (auto samples = v.choice(dataJson, "/data", "samples", false,
                                  {"windows", "sequences"},
                                  "how the token data becomes samples"))
        data.samples = *samples;
      if (withEncoders && data.samples == "windows")
        v.error("/data/samples",
                "expected \"sequences\" for a model with encoders, found "
                "\"windows\" (a window could cut a modality's token run "
                "from its feature rows); remove it");
    } else if (dataJson.contains("samples")) {
      v.error("/data/samples",
              "expected samples only with the indexed source, found it with "
              "\"" +
                  data.source +
                  "\"; remove it (a jsonl line is a sample, synthetic "
                  "samples are drawn whole)");
    }
    if (auto fraction =
            v.number(dataJson, "/data", "text_only_fraction", 0.0, false, 1.0,
                     false, "share of samples with no modality tokens"))
      data.textOnlyFraction = *fraction;
    auto tokens = dataJson.find("tokens_per_sample");
    if (tokens != dataJson.end() && !files &&
        v.object(*tokens, "/data/tokens_per_sample", encoders,
                 "tokens_per_sample (one [min, max] per encoder)")) {
      for (const auto &item : tokens->items()) {
        if (std::find(encoders.begin(), encoders.end(), item.key()) ==
            encoders.end())
          continue;
        std::string pointer = "/data/tokens_per_sample/" + item.key();
        const json &range = item.value();
        if (!range.is_array() || range.size() != 2) {
          v.error(pointer, "expected [min, max] modality tokens per sample, "
                           "found " +
                               describeJson(range) + "; write e.g. [0, 16]");
          continue;
        }
        auto low = v.integerValue(range[0], pointer + "/0", 0,
                                  "fewest tokens per sample", kMaxSeqLength);
        auto high = v.integerValue(range[1], pointer + "/1", 0,
                                   "most tokens per sample", kMaxSeqLength);
        if (low && high && *low > *high)
          v.error(pointer, "expected min <= max, found [" +
                               std::to_string(*low) + ", " +
                               std::to_string(*high) + "]; swap them");
        else if (low && high)
          ranges[item.key()] = TokenRange{*low, *high};
      }
    }
  }
  if (data.source != "synthetic")
    return;
  // Defaults: up to a quarter of the text budget per modality, some samples
  // without the modality.
  int64_t shortest = config.batch.packing ? config.batch.seqLength / 4
                                          : config.batch.seqLength;
  int64_t budget = 0;
  for (const std::string &name : encoders) {
    auto found = ranges.find(name);
    TokenRange range =
        found != ranges.end()
            ? found->second
            : TokenRange{0, std::max<int64_t>(
                                1, shortest / (4 * static_cast<int64_t>(
                                                       encoders.size())))};
    budget += range.max;
    data.tokensPerSample.emplace_back(name, range);
  }
  if (shortest > 0 && budget >= shortest && !encoders.empty())
    v.error("/data/tokens_per_sample",
            "expected at most " + std::to_string(shortest - 1) +
                " modality tokens per sample in all (the shortest sample has " +
                std::to_string(shortest) +
                " positions and needs one text token), found up to " +
                std::to_string(budget) +
                "; lower the max counts or raise /batch/seq_length");
}

void parseTrain(Validator &v, const json &root, ModelConfig &config) {
  auto it = root.find("train");
  if (it == root.end() || !v.object(*it, "/train", modelJsonKeys("/train"),
                                    "the training settings"))
    return;
  const json &train = *it;
  TrainConfig &t = config.train;
  const double inf = INFINITY;
  if (auto steps = v.integer(train, "/train", "steps", false, 1,
                             "optimizer steps", kMaxSteps))
    t.steps = *steps;
  if (auto optimizer = v.choice(train, "/train", "optimizer", false, {"adamw"},
                                "the optimizer"))
    t.optimizer = *optimizer;
  if (auto lr =
          v.number(train, "/train", "lr", 0, true, inf, false, "learning rate"))
    t.lr = *lr;
  if (auto eps = v.number(train, "/train", "eps", 0, true, inf, false,
                          "AdamW epsilon"))
    t.eps = *eps;
  if (auto decay = v.number(train, "/train", "weight_decay", 0, false, inf,
                            false, "AdamW decoupled weight decay"))
    t.weightDecay = *decay;
  if (auto all = v.boolean(train, "/train", "decay_all",
                           "weight decay on biases and norm weights too"))
    t.decayAll = *all;
  if (auto clip = v.number(train, "/train", "clip_grad", 0, false, inf, false,
                           "global gradient-norm clip, 0 disables"))
    t.clipGrad = *clip;
  if (auto dtype =
          v.choice(train, "/train", "grad_reduce_dtype", false,
                   {"fp32", "bf16"}, "the type gradients are reduced in"))
    t.gradReduceDtype = *dtype;
  if (auto every =
          v.integer(train, "/train", "eval_every", false, 0,
                    "steps between held-out evaluations, 0: never", kMaxSteps))
    t.evalEvery = *every;
  if (auto steps = v.integer(train, "/train", "eval_steps", false, 1,
                             "held-out batches per evaluation", kMaxSteps))
    t.evalSteps = *steps;
  if (t.evalEvery > 0 && config.data.source != "synthetic" &&
      config.data.evalPath.empty())
    v.error("/train/eval_every",
            "expected held-out data for evaluations, found no "
            "/data/eval_path; add \"eval_path\" to /data (a file like "
            "/data/path) or set eval_every to 0");
  auto schedule = train.find("lr_schedule");
  if (schedule != train.end() && v.object(*schedule, "/train/lr_schedule",
                                          modelJsonKeys("/train/lr_schedule"),
                                          "the learning-rate schedule")) {
    LrSchedule &s = t.lrSchedule;
    const std::string p = "/train/lr_schedule";
    if (auto w = v.integer(*schedule, p, "warmup_steps", false, 0,
                           "steps of linear warmup from 0 to lr", kMaxSteps))
      s.warmupSteps = *w;
    if (auto d = v.choice(*schedule, p, "decay", false,
                          {"constant", "cosine", "linear"},
                          "the decay after the warmup"))
      s.decay = *d;
    if (auto d = v.integer(*schedule, p, "decay_steps", false, 0,
                           "steps of decay from lr to min_lr after the warmup",
                           kMaxSteps))
      s.decaySteps = *d;
    if (auto m = v.number(*schedule, p, "min_lr", 0, false, inf, false,
                          "the learning rate at the end of the decay"))
      s.minLr = *m;
    if (s.decay != "constant" && s.decaySteps < 1)
      v.error(p + "/decay_steps",
              "expected decay_steps >= 1 for a \"" + s.decay +
                  "\" decay, found " + std::to_string(s.decaySteps) +
                  "; give the steps over which the rate falls to min_lr");
    if (s.minLr > t.lr)
      v.error(p + "/min_lr", "expected min_lr <= lr (" + std::to_string(t.lr) +
                                 "), found " + std::to_string(s.minLr) +
                                 "; lower min_lr");
  }
  auto betas = train.find("betas");
  if (betas != train.end()) {
    if (!betas->is_array() || betas->size() != 2) {
      v.error("/train/betas", "expected [beta1, beta2], found " +
                                  describeJson(*betas) +
                                  "; write e.g. [0.9, 0.999]");
    } else {
      auto b1 = v.numberValue((*betas)[0], "/train/betas/0", 0, false, 1, true,
                              "AdamW beta1");
      auto b2 = v.numberValue((*betas)[1], "/train/betas/1", 0, false, 1, true,
                              "AdamW beta2");
      if (b1 && b2) {
        t.beta1 = *b1;
        t.beta2 = *b2;
      }
    }
  }
}

/// Products of accepted sizes: every module's parameters and a microbatch's
/// largest activation stay below kMaxElements (so no count overflows 64
/// bits anywhere downstream). Computed in long double, which cannot
/// overflow at these magnitudes.
void checkProducts(Validator &v, const ModelConfig &config) {
  using real = long double;
  const real limit = static_cast<real>(kMaxElements);
  auto count = [](real n) {
    std::ostringstream text;
    text.precision(3);
    text << static_cast<double>(n);
    return text.str();
  };
  for (const ModuleConfig &m : config.modules) {
    real H = m.hiddenSize, F = m.ffnHiddenSize, L = m.numLayers;
    real input = m.kind == ModuleKind::Encoder ? m.featureDim : m.vocabSize;
    real params = L * (4 * H * H + 3 * H * F + 4 * H) + 2 * input * H;
    if (params > limit)
      v.error(m.pointer + "/arch",
              "expected a module of at most 2^50 parameters, found about " +
                  count(params) + " in '" + m.name +
                  "'; use smaller hidden_size, ffn_hidden_size, num_layers or "
                  "vocab_size");
  }
  const BatchConfig &b = config.batch;
  real tokens = static_cast<real>(b.microBatchSize) * b.seqLength;
  for (const ModuleConfig &m : config.modules) {
    std::pair<real, const char *> widest = {real(b.seqLength),
                                            "seq_length (attention scores)"};
    for (auto [size, name] :
         {std::pair<int64_t, const char *>{m.hiddenSize, "hidden_size"},
          {m.ffnHiddenSize, "ffn_hidden_size"},
          {m.vocabSize, "vocab_size"},
          {m.featureDim, "feature_dim"}})
      if (real(size) > widest.first)
        widest = {real(size), name};
    if (tokens * widest.first > limit) {
      v.error("/batch", "expected a microbatch whose largest tensor holds at "
                        "most 2^50 values, found micro_batch_size x "
                        "seq_length x " +
                            std::string(widest.second) + " of '" + m.name +
                            "' = " + count(tokens * widest.first) +
                            "; lower micro_batch_size or seq_length");
      return;
    }
  }
}

/// docs/model-json.md: the interleaved schedule and the language module's
/// virtual_stages name each other, and the chunks divide the layers and the
/// microbatches Megatron's order needs.
void checkSchedule(Validator &v, const ModelConfig &config) {
  const BatchConfig &b = config.batch;
  bool chunked = false;
  for (const ModuleConfig &m : config.modules) {
    const int64_t chunks = m.parallel.virtualStages, pp = m.parallel.pp;
    if (chunks == 1)
      continue;
    const std::string at = m.pointer + "/parallel/virtual_stages";
    const std::string found = "found " + std::to_string(chunks);
    if (m.kind != ModuleKind::Language) {
      v.error(at, "virtual_stages applies to the language module only, " +
                      found + " on encoder '" + m.name + "'; remove it");
      continue;
    }
    chunked = true;
    if (!b.schedule->chunked())
      v.error(at, "virtual_stages " + std::to_string(chunks) + " runs under " +
                      chunkedSchedules() + " only, found batch.schedule \"" +
                      std::string(b.schedule->name()) +
                      "\"; set \"schedule\": " + firstChunkedSchedule());
    else if (pp < 2)
      v.error(at, "virtual_stages needs a pipeline (parallel.pp of 2 or "
                  "more), found pp " +
                      std::to_string(pp) + "; raise pp or remove it");
    else if (!m.pipelineLayers.empty())
      v.error(at, "virtual_stages splits the layers evenly and cannot "
                  "follow pipeline_layers; remove one of them");
    else if (m.numLayers % (pp * chunks) != 0)
      v.error(at, "expected pp x virtual_stages to divide num_layers, found " +
                      std::to_string(pp) + " x " + std::to_string(chunks) +
                      " for " + std::to_string(m.numLayers) +
                      " layers; choose virtual_stages dividing " +
                      std::to_string(m.numLayers / pp));
    else if (b.numMicrobatches % b.schedule->microbatchMultiple(pp) != 0)
      v.error("/batch/num_microbatches",
              "the " + std::string(b.schedule->label()) +
                  " schedule takes the microbatches in groups of "
                  "pp, found " +
                  std::to_string(b.numMicrobatches) + " for pp " +
                  std::to_string(pp) + "; use a multiple of " +
                  std::to_string(b.schedule->microbatchMultiple(pp)));
  }
  if (b.schedule->chunked() && !chunked)
    v.error("/batch/schedule",
            "\"" + std::string(b.schedule->name()) +
                "\" needs the language module's "
                "parallel.virtual_stages of 2 or more, found none; set it (2 "
                "halves the bubble) or use \"" +
                std::string(defaultSchedule().name()) + "\"");
}

} // namespace

ParseResult validateModelConfig(const json &root, std::string_view fileName) {
  Validator v;
  // Of the objects that take the key, the one nearest to where it was found
  // (a stray "name" in /modules/0/arch is the module's, not the model's).
  v.placeOf = [](const std::string &where,
                 const std::string &key) -> std::string {
    std::string best;
    size_t bestShared = 0;
    for (const ModelJsonObject &object : modelJsonObjects()) {
      if (std::find(object.keys.begin(), object.keys.end(), key) ==
          object.keys.end())
        continue;
      // "/modules/N/arch (encoder)" -> "/modules/N/arch"
      std::string place = object.pointer.substr(0, object.pointer.find(" ("));
      size_t shared = 0;
      while (shared < place.size() && shared < where.size() &&
             place[shared] == where[shared])
        ++shared;
      if (best.empty() || shared > bestShared) {
        best = place + "/" + key;
        bestShared = shared;
      }
    }
    return best;
  };
  ModelConfig config;
  if (root.is_object() && root.contains("format") &&
      root["format"] == "mimo-plan") {
    v.error("/format", "this is a plan written by `mimoc compile`, not a "
                       "model.json; train it with `mimo-run`, inspect it "
                       "with `mimoc explain`, or compile the model.json it "
                       "came from");
    return ParseResult{std::nullopt, std::move(v.diagnostics)};
  }
  if (!v.object(root, "", modelJsonKeys(""), "a model description")) {
    return ParseResult{std::nullopt, std::move(v.diagnostics)};
  }
  if (auto version = v.integer(root, "", "version", true, 1,
                               "the model.json format version")) {
    if (*version != kModelVersion)
      v.error("/version", "expected version " + std::to_string(kModelVersion) +
                              ", found " + std::to_string(*version) +
                              "; this mimoc reads model.json version " +
                              std::to_string(kModelVersion));
    config.version = *version;
  }
  if (auto name = v.string(root, "", "name", false, "the model's name")) {
    if (!isIdentifier(*name))
      v.error("/name", "expected a name of letters, digits, '_' or '-' "
                       "starting with a letter or '_', found \"" +
                           name->substr(0, 60) + "\"; rename the model");
    config.name = *name;
  } else {
    config.name = fileStem(fileName);
  }
  if (auto seed = v.integer(root, "", "seed", false, 0,
                            "seed of parameters and synthetic data"))
    config.seed = *seed;
  if (auto precision = v.choice(root, "", "precision", false, {"fp32", "bf16"},
                                "compute precision"))
    config.precision = *precision;
  if (auto world = v.integer(root, "", "world_size", false, 1,
                             "the number of ranks, if given", kMaxRanks))
    config.worldSize = *world;
  parseBatch(v, root, config);
  parseModules(v, root, config);
  parseData(v, root, config);
  parseTrain(v, root, config);
  if (v.diagnostics.empty())
    checkProducts(v, config);
  if (v.diagnostics.empty())
    checkSchedule(v, config);
  if (!v.diagnostics.empty())
    return ParseResult{std::nullopt, std::move(v.diagnostics)};
  return ParseResult{std::move(config), {}};
}

ParseResult parseModelConfig(std::string_view text, std::string_view fileName) {
  Diagnostic syntax;
  std::optional<json> root = parseJsonText(text, syntax);
  if (!root)
    return ParseResult{std::nullopt, {syntax}};
  return validateModelConfig(*root, fileName);
}

} // namespace mimo
