//===- ModelConfigWriter.cpp - The canonical model.json -------------------===//

#include "runtime/config/ModelConfig.h"
#include "runtime/family/ModuleFamily.h"

#include <nlohmann/json.hpp>

namespace mimo {

using json = nlohmann::json;

json toJson(const ModelConfig &config) {
  json modules = json::array();
  for (const ModuleConfig &module : config.modules) {
    json entry;
    entry["name"] = module.name;
    bool encoder = module.kind == ModuleKind::Encoder;
    entry["kind"] = encoder ? "encoder" : "language";
    if (encoder)
      entry["special_token_id"] = module.specialTokenId;
    json arch;
    if (module.namedFamily)
      arch["family"] = std::string(module.namedFamily->name());
    if (encoder)
      arch["feature_dim"] = module.featureDim;
    else
      arch["vocab_size"] = module.vocabSize;
    arch["hidden_size"] = module.hiddenSize;
    arch["num_layers"] = module.numLayers;
    arch["num_heads"] = module.numHeads;
    arch["ffn_hidden_size"] = module.ffnHiddenSize;
    // Written only when they differ from the defaults (the kind's, or the
    // named family's): a model without them keeps its digest.
    ModuleArch d;
    d.kind = module.kind;
    if (module.namedFamily)
      module.namedFamily->setDefaults(d);
    if (module.numQueryGroups != d.numQueryGroups)
      arch["num_query_groups"] = module.numQueryGroups;
    if (module.headDimKey > 0)
      arch["head_dim"] = module.headDimKey;
    if (module.ropeTheta != d.ropeTheta)
      arch["rope_theta"] = module.ropeTheta;
    if (const std::optional<RopeScaling> &r = module.ropeScaling)
      arch["rope_scaling"] = {
          {"type", "llama3"},
          {"factor", r->factor},
          {"low_freq_factor", r->lowFreqFactor},
          {"high_freq_factor", r->highFreqFactor},
          {"original_max_position_embeddings", r->originalMaxPositions}};
    if (module.normEps != d.normEps)
      arch["norm_eps"] = module.normEps;
    auto flag = [&](const char *key, bool mine, bool theirs) {
      if (mine != theirs)
        arch[key] = mine;
    };
    flag("qkv_bias", module.qkvBias, d.qkvBias);
    flag("tie_embeddings", module.tieEmbeddings, d.tieEmbeddings);
    flag("qk_norm", module.qkNorm, d.qkNorm);
    if (module.hasMoe()) {
      const MoeConfig &e = module.moe;
      json moe = {{"num_experts", e.experts},
                  {"top_k", e.topK},
                  {"expert_ffn_hidden_size", e.expertFfn}};
      if (e.sharedFfn > 0) {
        moe["shared_expert_ffn_hidden_size"] = e.sharedFfn;
        moe["shared_expert_gate"] = e.sharedGate;
      }
      if (e.allLayers)
        moe["layers"] = "all";
      else
        moe["layers"] = e.layers;
      moe["router"] = {{"score", e.router.sigmoid ? "sigmoid" : "softmax"},
                       {"norm_topk", e.router.normTopk},
                       {"aux_loss_coef", e.router.auxLossCoef},
                       {"z_loss_coef", e.router.zLossCoef}};
      arch["moe"] = moe;
    }
    flag("bias", module.bias, d.bias);
    if (module.learnedPositions != d.learnedPositions)
      arch["position_embeddings"] =
          module.learnedPositions ? "learned" : "none";
    if (module.learnedPositions)
      arch["max_positions"] = module.maxPositions;
    flag("pre_norm", module.preNorm, d.preNorm);
    flag("final_norm", module.finalNorm, d.finalNorm);
    flag("class_token", module.classToken, d.classToken);
    flag("patch_bias", module.patchBias, d.patchBias);
    if (module.outputLayer != d.outputLayer)
      arch["output_layer"] = module.outputLayer;
    if (module.linearProjector != d.linearProjector)
      arch["projector"] = module.linearProjector ? "linear" : "mlp2x_gelu";
    if (module.activation != d.activation)
      arch["activation"] = module.activation;
    if (module.projectorActivation != d.projectorActivation)
      arch["projector_activation"] = module.projectorActivation;
    entry["arch"] = arch;
    const ParallelConfig &p = module.parallel;
    json parallel = {{"tp", p.tp},
                     {"cp", p.cp},
                     {"pp", p.pp},
                     {"dp", p.dp},
                     {"rank_offset", p.rankOffset}};
    if (!encoder)
      parallel["sequence_parallel"] = p.sequenceParallel;
    if (p.cpComm != "ring")
      parallel["cp_comm"] = p.cpComm;
    if (p.virtualStages != 1)
      parallel["virtual_stages"] = p.virtualStages;
    if (p.ep != 1)
      parallel["ep"] = p.ep;
    if (p.etp > 0)
      parallel["etp"] = p.etp;
    json order = json::array();
    for (Dim dim : p.order)
      order.push_back(dimName(dim));
    parallel["order"] = order;
    entry["parallel"] = parallel;
    // Written only when set: a model without them keeps its digest.
    if (module.freezeAll)
      entry["freeze"] = true;
    else if (module.freezeBody)
      entry["freeze"] = "encoder_body";
    else if (!module.freezePrefixes.empty())
      entry["freeze"] = module.freezePrefixes;
    if (module.lora) {
      const LoraConfig &l = *module.lora;
      json lora = {{"r", l.rank}, {"alpha", l.alpha}, {"targets", l.targets}};
      if (l.rslora)
        lora["rslora"] = true;
      if (!l.modulesToSave.empty())
        lora["modules_to_save"] = l.modulesToSave;
      entry["lora"] = lora;
    }
    if (module.lrMult != 1.0)
      entry["lr_mult"] = module.lrMult;
    if (module.recompute != "none")
      entry["recompute"] = module.recompute;
    if (module.recomputeLayers >= 0)
      entry["recompute_layers"] = module.recomputeLayers;
    if (module.distributedOptimizer)
      entry["distributed_optimizer"] = true;
    if (!module.pipelineLayers.empty())
      entry["pipeline_layers"] = module.pipelineLayers;
    if (module.init) {
      entry["init"] = {{"from", module.init->from},
                       {"format", module.init->format}};
      if (!module.init->adapterFrom.empty())
        entry["init"]["adapter"] = {{"from", module.init->adapterFrom},
                                    {"format", "peft"}};
    }
    modules.push_back(entry);
  }
  json data = {{"source", config.data.source}};
  if (config.data.source != "synthetic") {
    if (config.data.blend.empty()) {
      data["path"] = config.data.path;
    } else {
      data["blend"] = json::array();
      for (const DataConfig::BlendEntry &e : config.data.blend)
        data["blend"].push_back({{"path", e.path}, {"weight", e.weight}});
    }
    data["shuffle"] = config.data.shuffle;
    if (config.data.source == "indexed")
      data["samples"] = config.data.samples;
    if (!config.data.evalPath.empty())
      data["eval_path"] = config.data.evalPath;
  } else {
    json tokens = json::object();
    for (const auto &[name, range] : config.data.tokensPerSample)
      tokens[name] = {range.min, range.max};
    data["tokens_per_sample"] = tokens;
    data["text_only_fraction"] = config.data.textOnlyFraction;
  }
  json root = {{"version", config.version},
               {"name", config.name},
               {"seed", config.seed},
               {"precision", config.precision},
               {"batch",
                {{"micro_batch_size", config.batch.microBatchSize},
                 {"num_microbatches", config.batch.numMicrobatches},
                 {"seq_length", config.batch.seqLength},
                 {"packing", config.batch.packing},
                 {"attention_mask", config.batch.attentionMask}}},
               {"modules", modules},
               {"data", data},
               {"train",
                {{"steps", config.train.steps},
                 {"optimizer", config.train.optimizer},
                 {"lr", config.train.lr},
                 {"betas", {config.train.beta1, config.train.beta2}},
                 {"eps", config.train.eps},
                 {"weight_decay", config.train.weightDecay},
                 {"clip_grad", config.train.clipGrad},
                 {"lr_schedule",
                  {{"warmup_steps", config.train.lrSchedule.warmupSteps},
                   {"decay", config.train.lrSchedule.decay},
                   {"decay_steps", config.train.lrSchedule.decaySteps},
                   {"min_lr", config.train.lrSchedule.minLr}}},
                 {"eval_every", config.train.evalEvery},
                 {"eval_steps", config.train.evalSteps}}}};
  // Written where the model names it or it is not the default.
  if (config.batch.scheduleNamed || config.batch.schedule != &defaultSchedule())
    root["batch"]["schedule"] = std::string(config.batch.schedule->name());
  if (config.train.decayAll)
    root["train"]["decay_all"] = true;
  if (config.train.reducesInBf16())
    root["train"]["grad_reduce_dtype"] = config.train.gradReduceDtype;
  if (config.worldSize)
    root["world_size"] = *config.worldSize;
  return root;
}

} // namespace mimo
