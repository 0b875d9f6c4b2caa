//===- Layouts.h - Every layout the runtime is checked on ------*- C++ -*-===//
//
// One list for every equivalence check (docs/runtime.md): the CPU tests run
// each distributed against its single-rank reference (EquivalenceTest.cpp), the
// GPU check runs each on the CUDA device against the CPU reference
// (tests/gpu/CudaTrainCheck.cpp). Each example, plus variations that
// reach what the examples do not.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_TESTS_E2E_LAYOUTS_H
#define MIMO_TESTS_E2E_LAYOUTS_H

#include "tests/unit/TestModels.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

namespace mimo::test {

struct Layout {
  std::string name; // a test name: letters and digits
  nlohmann::json model;
  int64_t worldSize;
};

inline void PrintTo(const Layout &layout, std::ostream *os) {
  *os << layout.name;
}

inline nlohmann::json example(const std::string &file) {
  return nlohmann::json::parse(readExample(file));
}

/// The plan of `model`; one that does not plan fails the test.
inline Plan planOf(const nlohmann::json &model) {
  return requirePlan(
      requireConfig(parseModelConfig(model.dump(), "model.json")));
}

/// |a - b| / |b|: how the end-to-end tests compare a run with its
/// reference.
inline double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-12);
}

/// `model` with its language model made Llama 3-like (docs/model.md):
/// grouped-query attention with `groups` key/value heads, rope_theta
/// 500000 with Llama 3.1's rope_scaling (an original context of 64: at
/// head size 32 some frequencies kept, some blended, the rest divided),
/// and every module's norm_eps 1e-6.
inline nlohmann::json llama3Like(nlohmann::json model, int64_t groups) {
  for (nlohmann::json &module : model["modules"]) {
    module["arch"]["norm_eps"] = 1e-6;
    if (module["kind"] != "language")
      continue;
    module["arch"]["num_query_groups"] = groups;
    module["arch"]["rope_theta"] = 500000.0;
    module["arch"]["rope_scaling"] = {{"type", "llama3"},
                                      {"factor", 8.0},
                                      {"low_freq_factor", 1.0},
                                      {"high_freq_factor", 4.0},
                                      {"original_max_position_embeddings", 64}};
  }
  return model;
}

/// `model` with LoRA adapters (docs/model-json.md `lora`) of rank 4 on
/// the language model's `language` targets and every encoder's `encoder`
/// targets (none when empty), s = 8 (alpha / r; alpha / sqrt(r) with
/// `rslora`), and a learning rate adapters move at in three steps.
inline nlohmann::json withLora(nlohmann::json model, nlohmann::json language,
                               nlohmann::json encoder, bool rslora = false) {
  for (nlohmann::json &module : model["modules"]) {
    const nlohmann::json &targets =
        module["kind"] == "language" ? language : encoder;
    if (targets.empty())
      continue;
    module["lora"] = {{"r", 4},
                      {"alpha", rslora ? 16.0 : 32.0},
                      {"targets", targets},
                      {"rslora", rslora}};
  }
  model["train"]["lr"] = 0.01;
  return model;
}

/// `model`'s language model (or its modules of `kind`) made a mixture of
/// experts (docs/model.md): `experts` experts of width 64 (the dense
/// layers' MLP stays), each token to its `topK`, sparse `layers` ("all" or
/// a list), a shared expert of width 128 with its gate when `shared`, and
/// aux and z losses that count.
inline nlohmann::json withMoe(nlohmann::json model, int64_t experts,
                              int64_t topK, nlohmann::json layers, bool shared,
                              const std::string &kind = "language") {
  for (nlohmann::json &module : model["modules"]) {
    if (module["kind"] != kind)
      continue;
    nlohmann::json moe = {
        {"num_experts", experts},
        {"top_k", topK},
        {"expert_ffn_hidden_size", 64},
        {"layers", layers},
        {"router", {{"aux_loss_coef", 0.05}, {"z_loss_coef", 0.01}}}};
    if (shared)
      moe["shared_expert_ffn_hidden_size"] = 128;
    module["arch"]["moe"] = moe;
  }
  return model;
}

/// `model` with Qwen2's biases on the language model's q, k and v
/// (`qkv_bias`) and biases on every linear layer of its encoders (`bias`,
/// as CLIP's and SigLIP's).
inline nlohmann::json withBiases(nlohmann::json model) {
  for (nlohmann::json &module : model["modules"])
    module["arch"][module["kind"] == "language" ? "qkv_bias" : "bias"] = true;
  return model;
}

/// `model`'s first encoder made a CLIP vision tower as LLaVA uses it
/// (docs/model.md): biases, learned position embeddings (`positions` rows,
/// the class token's included), CLIP's pre-layernorm, a class token
/// dropped from the output, the penultimate layer's output
/// (output_layer -2: the last layer not computed), no patch bias,
/// QuickGELU in the layers and LLaVA's exact GELU in the projector.
inline nlohmann::json clipLike(nlohmann::json model, int64_t positions) {
  nlohmann::json &arch = model["modules"][0]["arch"];
  arch["bias"] = true;
  arch["position_embeddings"] = "learned";
  arch["max_positions"] = positions;
  arch["pre_norm"] = true;
  arch["class_token"] = true;
  arch["output_layer"] = -2;
  arch["patch_bias"] = false;
  arch["activation"] = "quick_gelu";
  arch["projector_activation"] = "gelu";
  return model;
}

/// `model`'s first encoder made a SigLIP tower: biases, learned position
/// embeddings, the final LayerNorm, a linear projector.
inline nlohmann::json siglipLike(nlohmann::json model, int64_t positions) {
  nlohmann::json &arch = model["modules"][0]["arch"];
  arch["bias"] = true;
  arch["position_embeddings"] = "learned";
  arch["max_positions"] = positions;
  arch["final_norm"] = true;
  arch["projector"] = "linear";
  return model;
}

inline std::vector<Layout> equivalenceLayouts() {
  using nlohmann::json;
  std::vector<Layout> layouts = {
      // Encoder DP4 fans in to language TP2·PP2 with SP.
      {"FanInEncoderDp4ToLanguageTp2Pp2WithSp", example("vlm-fan-in.json"), 8},
      {"FanOutEncoderTp2Pp2ToLanguageDp4", example("vlm-fan-out.json"), 8},
      {"ContextParallelAcrossABridgeWithSp", example("lm-cp2-sp.json"), 6},
      {"AudioVisionLanguagePp2", example("avlm.json"), 8},
      {"Colocated", example("vlm-colocated.json"), 8},
      // docs/plan.md: encoders for all microbatches, then the language 1F1B
      // (TP2 with SP, PP2), then the encoder backward.
      {"ColocatedLanguagePp2", example("vlm-colocated-pp2.json"), 8},
      {"PackedThdWithCp2", example("packed-thd.json"), 6},
  };
  // CP with its keys and values all-gathered (cp_comm "all_gather"; the
  // examples pass them around the ring, the default).
  json gathered = example("lm-cp2-sp.json");
  gathered["modules"][1]["parallel"]["cp_comm"] = "all_gather";
  layouts.push_back({"ContextParallelAllGatherWithSp", gathered, 6});
  // arch.head_dim other than hidden_size / num_heads (Qwen3's): heads
  // twice as wide (64, not 32) under TP2, SP and ring CP2, and half as
  // wide with grouped-query attention.
  json wide = example("lm-cp2-sp.json");
  wide["modules"][1]["arch"]["head_dim"] = 64;
  layouts.push_back({"HeadDimWiderThanHiddenOverHeadsWithRingCp", wide, 6});
  json narrow = example("vlm-fan-in.json");
  for (json &module : narrow["modules"])
    if (module["kind"] == "language") {
      module["arch"]["head_dim"] =
          module["arch"]["hidden_size"].get<int64_t>() /
          module["arch"]["num_heads"].get<int64_t>() / 2;
      module["arch"]["num_query_groups"] = 2;
    }
  layouts.push_back({"HeadDimNarrowerWithGqaTp2Pp2", narrow, 8});
  // train.grad_reduce_dtype "bf16" (docs/model.md): the encoder's DP4
  // gradients rounded and summed in bf16; its reference rounds alike (the
  // members' parts rounded apart stay within 1e-5 here; CP splits do not:
  // GradReduceBf16 holds those to 1e-3).
  json bf16Reduce = example("vlm-fan-in.json");
  bf16Reduce["train"]["grad_reduce_dtype"] = "bf16";
  layouts.push_back({"GradReduceBf16FanInEncoderDp4", bf16Reduce, 8});
  // Two bridges join the same pairs of ranks in one exchange.
  json twoEncoders = example("avlm.json");
  twoEncoders["modules"][0]["parallel"] = {{"dp", 4}};
  twoEncoders["modules"][1]["parallel"] = {{"tp", 2}, {"dp", 2}};
  twoEncoders["modules"][2]["parallel"] = {{"pp", 2}, {"dp", 2}};
  layouts.push_back({"ColocatedTwoEncodersLanguagePp2", twoEncoders, 4});
  json pp4 = example("vlm-fan-in.json");
  pp4["batch"]["num_microbatches"] = 8;
  pp4["modules"][1]["parallel"] = {
      {"tp", 1}, {"pp", 4}, {"dp", 1}, {"rank_offset", 4}};
  layouts.push_back({"LanguagePp4With8Microbatches", pp4, 8});
  // Zero bubble (batch.schedule): the encoder's stage and the language
  // model's four hold back their weight gradients by their global stage,
  // few microbatches; and colocated, the language pipeline split.
  json zeroBubble = pp4;
  zeroBubble["batch"]["num_microbatches"] = 4;
  zeroBubble["batch"]["schedule"] = "zero_bubble";
  layouts.push_back({"ZeroBubbleLanguagePp4With4Microbatches", zeroBubble, 8});
  json zeroBubbleColocated = example("vlm-colocated-pp2.json");
  zeroBubbleColocated["batch"]["schedule"] = "zero_bubble";
  layouts.push_back({"ZeroBubbleColocatedLanguagePp2", zeroBubbleColocated, 8});
  // Zero bubble across modules (docs/plan.md): four language stages and
  // eight microbatches, the encoder's forwards in the pipeline's ramp and
  // its backward in the cool-down on every stage (its TP groups within a
  // stage), their bridges posted; the tower frozen (forwards only); and
  // with an encoder TP group across two stages, the forwards before the
  // pipeline and the backward after it.
  json crossModule = zeroBubbleColocated;
  crossModule["batch"]["num_microbatches"] = 8;
  crossModule["modules"][1]["parallel"] = {{"tp", 1}, {"pp", 4}, {"dp", 2}};
  layouts.push_back({"ZeroBubbleAcrossModulesPp4", crossModule, 8});
  json frozenTower = crossModule; // the LLaVA recipe: forwards only
  frozenTower["modules"][0]["freeze"] = true;
  layouts.push_back({"ZeroBubbleAcrossModulesFrozenTower", frozenTower, 8});
  json acrossStages = crossModule;
  acrossStages["modules"][0]["parallel"] = {{"tp", 4}, {"dp", 2}};
  layouts.push_back(
      {"ZeroBubbleAcrossModulesEncoderTpAcrossStages", acrossStages, 8});
  // Interleaved 1F1B (batch.schedule, parallel.virtual_stages): two chunks
  // of layers on each of four language stages behind an encoder that runs
  // every forward first, few microbatches; colocated, chunks of one layer
  // with TP2 and SP; and a head tied across the first and last virtual
  // stages (the embedding on chunk 0 of stage 0, its copy on chunk 1 of
  // stage 1).
  json interleaved = pp4;
  interleaved["batch"]["num_microbatches"] = 4;
  interleaved["batch"]["schedule"] = "interleaved";
  interleaved["modules"][1]["arch"]["num_layers"] = 8;
  interleaved["modules"][1]["parallel"]["virtual_stages"] = 2;
  layouts.push_back(
      {"InterleavedLanguagePp4With4Microbatches", interleaved, 8});
  json interleavedColocated = example("vlm-colocated-pp2.json");
  interleavedColocated["batch"]["schedule"] = "interleaved";
  interleavedColocated["modules"][1]["parallel"]["virtual_stages"] = 2;
  layouts.push_back(
      {"InterleavedColocatedLanguagePp2", interleavedColocated, 8});
  json interleavedTied = example("vlm-fan-in.json");
  interleavedTied["batch"]["schedule"] = "interleaved";
  interleavedTied["modules"][1]["arch"]["tie_embeddings"] = true;
  interleavedTied["modules"][1]["parallel"]["virtual_stages"] = 2;
  layouts.push_back({"InterleavedTiedTp2Pp2Sp", interleavedTied, 8});
  // Uneven stages (pipeline_layers): the language model's first stage
  // with half its layers and the other two a quarter each, beside an
  // encoder of 4 layers cut at output_layer -2 whose [2, 2] computes
  // [2, 1]; and colocated, the head's stage with one layer of four.
  json uneven = example("vlm-fan-out.json");
  uneven["modules"][0]["arch"]["num_layers"] = 4;
  uneven["modules"][0]["arch"]["output_layer"] = -2;
  uneven["modules"][0]["pipeline_layers"] = {2, 2};
  uneven["modules"][1]["parallel"] = {
      {"tp", 1}, {"pp", 3}, {"dp", 1}, {"rank_offset", 4}};
  uneven["modules"][1]["pipeline_layers"] = {2, 1, 1};
  layouts.push_back({"UnevenStagesFanOutEncoderPp2LanguagePp3", uneven, 7});
  json unevenColocated = example("vlm-colocated-pp2.json");
  unevenColocated["modules"][1]["pipeline_layers"] = {3, 1};
  layouts.push_back({"UnevenStagesColocatedLanguagePp2", unevenColocated, 8});
  // Recomputation (docs/model.md): the language model's stages recompute
  // their first layer whole, the encoder its activations.
  json recompute = example("vlm-fan-in.json");
  recompute["modules"][0]["recompute"] = "selective";
  recompute["modules"][1]["recompute"] = "full";
  recompute["modules"][1]["recompute_layers"] = 1;
  layouts.push_back(
      {"RecomputeSelectiveEncoderFullLanguageTp2Pp2", recompute, 8});
  // Variable-length samples padded to seq_length; padding is masked from
  // attention keys and the loss.
  json dense = example("vlm-fan-in.json");
  dense["batch"]["attention_mask"] = "dense";
  layouts.push_back({"DenseMaskWithPaddedSamples", dense, 8});
  // Every bridge piece is [0, H] (text-only batches).
  json zeroFanIn = example("vlm-fan-in.json");
  zeroFanIn["data"]["tokens_per_sample"]["images"] = {0, 0};
  layouts.push_back({"ZeroTokenMicrobatchesFanIn", zeroFanIn, 8});
  json zeroColocated = example("vlm-colocated.json");
  zeroColocated["data"]["tokens_per_sample"]["images"] = {0, 2};
  zeroColocated["data"]["text_only_fraction"] = 0.7;
  layouts.push_back({"ZeroTokenMicrobatchesColocated", zeroColocated, 8});
  // Colocated fan-out (encoder DP2 -> language DP4): narrow forward,
  // gather backward; the language TP2 without SP.
  json fanOut = example("vlm-colocated.json");
  fanOut["modules"][0]["parallel"] = {{"tp", 4}, {"dp", 2}};
  fanOut["modules"][1]["parallel"] = {{"tp", 2}, {"dp", 4}};
  layouts.push_back({"FanOutColocatedAndTensorParallelWithoutSp", fanOut, 8});
  // Llama 3-like language models: TP2 splitting 2 KV groups with SP and
  // CP2 gathering the groups; multi-query attention (one KV head) under
  // PP2 colocated with the encoder.
  layouts.push_back(
      {"Llama3GqaTp2SpCp2", llama3Like(example("lm-cp2-sp.json"), 2), 6});
  json mqa = llama3Like(example("vlm-colocated-pp2.json"), 1);
  mqa["modules"][1]["parallel"] = {{"tp", 1}, {"pp", 2}, {"dp", 4}};
  layouts.push_back({"MultiQueryColocatedPp2", mqa, 8});
  // Biases: q, k, v's split over TP with their columns (language TP2·PP2
  // with SP; encoder TP4, its o and fc2 biases added after the reduction).
  layouts.push_back(
      {"BiasesFanInTp2Pp2Sp", withBiases(example("vlm-fan-in.json")), 8});
  layouts.push_back({"BiasesColocatedEncoderTp4", withBiases(fanOut), 8});
  // The head tied to the vocab-parallel embedding (TP2 with SP, CP2).
  json tied = example("lm-cp2-sp.json");
  tied["modules"][1]["arch"]["tie_embeddings"] = true;
  layouts.push_back({"TiedEmbeddingsTp2SpCp2", tied, 6});
  // Tied across pipeline stages: the last stage's copy of the embedding,
  // its gradient summed with the first stage's (fan-in, and colocated).
  json tiedPp = example("vlm-fan-in.json");
  tiedPp["modules"][1]["arch"]["tie_embeddings"] = true;
  layouts.push_back({"TiedEmbeddingsTp2Pp2Sp", tiedPp, 8});
  json tiedColocated = example("vlm-colocated-pp2.json");
  tiedColocated["modules"][1]["arch"]["tie_embeddings"] = true;
  layouts.push_back({"TiedEmbeddingsColocatedPp2", tiedColocated, 8});
  // The distributed optimizer (docs/model.md): every module's AdamW
  // moments sharded over its DP x CP group; a head tied across PP2 at DP2
  // (its gradient gathered whole before the pair sums it) beside an
  // encoder at DP4. (CP with SP and THD packing: DistributedOptimizer.*
  // and mimo_run_cli.sh under mpirun.)
  auto distributed = [](json model) {
    for (json &module : model["modules"])
      module["distributed_optimizer"] = true;
    return model;
  };
  layouts.push_back(
      {"DistributedOptimizerColocatedTiedPp2", distributed(tiedColocated), 8});
  // The three of docs/model.md's memory options together: the language
  // model's stages uneven (3 + 1), its first layer of each recomputed
  // whole, the encoder's activations recomputed, every optimizer sharded.
  json together = distributed(example("vlm-colocated-pp2.json"));
  together["modules"][0]["recompute"] = "selective";
  together["modules"][1]["recompute"] = "full";
  together["modules"][1]["recompute_layers"] = 1;
  together["modules"][1]["pipeline_layers"] = {3, 1};
  layouts.push_back({"UnevenRecomputedDistributedColocatedPp2", together, 8});
  // Vision towers: CLIP's (class token, pre-norm, the penultimate layer)
  // colocated at encoder TP2; SigLIP's (final norm, linear projector)
  // over encoder TP2 x PP2 (positions on the first stage, the norm on the
  // last) and at DP4 with samples of no rows.
  layouts.push_back({"ClipTowerColocatedTp2",
                     clipLike(example("vlm-colocated.json"), 17), 8});
  layouts.push_back(
      {"SiglipTowerTp2Pp2", siglipLike(example("vlm-fan-out.json"), 32), 8});
  layouts.push_back(
      {"SiglipTowerFanInDp4", siglipLike(example("vlm-fan-in.json"), 24), 8});
  // LoRA (docs/model.md): adapters on a frozen base. Language TP2 x PP2
  // with SP (A whole beside a column-parallel base, its gradient summed
  // over TP; B whole beside a row-parallel one) and the encoder's every
  // linear at DP4; CP2 with SP, ring attention, zero bubble and the
  // distributed optimizer, rslora; an encoder TP4 with biases colocated,
  // its head trained beside (modules_to_save); PP2 colocated recomputing.
  layouts.push_back({"LoraFanInTp2Pp2Sp",
                     withLora(example("vlm-fan-in.json"),
                              {"q", "v", "o", "gate", "down"}, "all-linear"),
                     8});
  json loraCp = withLora(distributed(example("lm-cp2-sp.json")), "all-linear",
                         {"q", "k", "fc2"}, true);
  loraCp["batch"]["schedule"] = "zero_bubble";
  layouts.push_back({"LoraCp2SpRingZeroBubbleDistributed", loraCp, 6});
  json loraTp4 = withLora(withBiases(fanOut), {"k", "up", "o"}, "all-linear");
  loraTp4["modules"][1]["lora"]["modules_to_save"] = {"head"};
  layouts.push_back({"LoraColocatedEncoderTp4BiasesSaved", loraTp4, 8});
  json loraRecompute =
      withLora(example("vlm-colocated-pp2.json"), "all-linear", {"v", "fc1"});
  loraRecompute["modules"][0]["recompute"] = "selective";
  loraRecompute["modules"][1]["recompute"] = "full";
  layouts.push_back({"LoraColocatedPp2Recomputed", loraRecompute, 8});
  // Interleaved virtual stages with the head tied across them, the tied
  // embedding trained beside the adapters (modules_to_save).
  json loraInterleaved =
      withLora(example("vlm-fan-in.json"), {"q", "up", "down"}, json());
  loraInterleaved["batch"]["schedule"] = "interleaved";
  loraInterleaved["modules"][1]["arch"]["tie_embeddings"] = true;
  loraInterleaved["modules"][1]["parallel"]["virtual_stages"] = 2;
  loraInterleaved["modules"][1]["lora"]["modules_to_save"] = {"embedding"};
  layouts.push_back({"LoraInterleavedTiedTp2Pp2Sp", loraInterleaved, 8});
  // Mixtures of experts (docs/model.md): every rank holds every expert, cut
  // over TP as the dense MLP; the routing statistics of the aux loss are
  // summed over DP x CP. TP2 x PP2 with SP, a shared expert and gate and
  // one dense layer beside an encoder at DP4; CP2 with SP, ring attention,
  // zero bubble and a sigmoid router with Qwen3's q/k norms; colocated
  // with an encoder at LM TP4 x DP2, recomputed whole; CP2 x DP2 with THD
  // packing (padding in no statistic) and selective recomputation.
  layouts.push_back({"MoeFanInTp2Pp2SpShared",
                     withMoe(example("vlm-fan-in.json"), 4, 2, {1, 2, 3}, true),
                     8});
  json moeCp = withMoe(example("lm-cp2-sp.json"), 8, 2, "all", false);
  moeCp["batch"]["schedule"] = "zero_bubble";
  moeCp["modules"][1]["arch"]["qk_norm"] = true;
  moeCp["modules"][1]["arch"]["moe"]["router"]["score"] = "sigmoid";
  layouts.push_back({"MoeCp2SpRingZeroBubbleSigmoidQkNorm", moeCp, 6});
  json moeColocated = withMoe(example("vlm-colocated.json"), 4, 1, "all", true);
  moeColocated["modules"][1]["recompute"] = "full";
  layouts.push_back({"MoeColocatedTp4Dp2Recomputed", moeColocated, 8});
  json moePacked = withMoe(example("packed-thd.json"), 4, 2, {1}, false);
  moePacked["modules"][1]["recompute"] = "selective";
  moePacked["modules"][1]["arch"]["moe"]["router"]["norm_topk"] = false;
  layouts.push_back({"MoePackedCp2Dp2Selective", moePacked, 6});
  // Expert parallelism (plan/Plan.h expertGroups): the experts split over
  // ep members of DP x CP, rows exchanged with them. ep 2 and 4 over DP4
  // (edp groups of two, and none); ep 2 carved from CP2 with TP2 and SP,
  // ring attention and zero bubble; colocated at TP4 x DP2 with a shared
  // expert, recomputed whole; TP2 x PP2 x DP2 with SP, selective.
  auto withEp = [](json model, int64_t ep) {
    model["modules"][1]["parallel"]["ep"] = ep;
    return model;
  };
  layouts.push_back(
      {"MoeEp2FanOutDp4",
       withEp(withMoe(example("vlm-fan-out.json"), 4, 2, "all", false), 2), 8});
  layouts.push_back(
      {"MoeEp4FanOutDp4Shared",
       withEp(withMoe(example("vlm-fan-out.json"), 8, 2, {1, 2}, true), 4), 8});
  json epCp = withEp(withMoe(example("lm-cp2-sp.json"), 4, 2, "all", false), 2);
  epCp["batch"]["schedule"] = "zero_bubble";
  layouts.push_back({"MoeEp2Cp2SpRingZeroBubble", epCp, 6});
  json epColocated =
      withEp(withMoe(example("vlm-colocated.json"), 4, 2, "all", true), 2);
  epColocated["modules"][1]["recompute"] = "full";
  layouts.push_back({"MoeEp2ColocatedTp4Dp2Recomputed", epColocated, 8});
  json epPipeline =
      withEp(withMoe(example("vlm-colocated-pp2.json"), 4, 1, "all", false), 2);
  epPipeline["modules"][1]["recompute"] = "selective";
  layouts.push_back({"MoeEp2ColocatedTp2Pp2Dp2Selective", epPipeline, 8});
  // With the distributed optimizer (docs/model.md): the dense parameters'
  // moments cut over DP x CP, the experts' over their edp group (two
  // members at ep 2 over DP4, one at ep 4), and over CP2's members with
  // SP.
  layouts.push_back(
      {"MoeEp2DistributedFanOutDp4",
       distributed(
           withEp(withMoe(example("vlm-fan-out.json"), 4, 2, "all", true), 2)),
       8});
  layouts.push_back(
      {"MoeEp4DistributedFanOutDp4Shared",
       distributed(
           withEp(withMoe(example("vlm-fan-out.json"), 8, 2, {1, 2}, true), 4)),
       8});
  layouts.push_back(
      {"MoeEp2DistributedCp2Sp",
       distributed(
           withEp(withMoe(example("lm-cp2-sp.json"), 4, 2, "all", false), 2)),
       6});
  // Sparse encoders (docs/model.md): the tower's experts split over its
  // DP4 (ep 4, a shared expert), its lanes without images in step with
  // the others; colocated with a sparse language model, each at ep 2, both
  // aux losses in aux_loss; over the tower's TP2 x PP2, a sparse layer on
  // each stage, recomputed whole.
  json towerEp4 =
      withMoe(example("vlm-fan-in.json"), 4, 2, "all", true, "encoder");
  towerEp4["modules"][0]["parallel"]["ep"] = 4;
  layouts.push_back({"MoeEncoderEp4FanInDp4Shared", towerEp4, 8});
  json bothSparse = withMoe(
      withMoe(example("vlm-colocated.json"), 4, 2, {1}, false, "encoder"), 4, 2,
      "all", true);
  bothSparse["modules"][0]["parallel"]["ep"] = 2;
  bothSparse["modules"][1]["parallel"]["ep"] = 2;
  layouts.push_back({"MoeEncoderAndLanguageEp2Colocated", bothSparse, 8});
  json towerPipeline =
      withMoe(example("vlm-fan-out.json"), 4, 1, "all", false, "encoder");
  towerPipeline["modules"][0]["recompute"] = "full";
  layouts.push_back({"MoeEncoderTp2Pp2Recomputed", towerPipeline, 8});
  // A frozen bottom that freezes some experts: the tower's layer 0 is
  // frozen whole on the ep member holding experts 0 and 1, not on the
  // other; both run its backward (its exchanges meet) as the reference.
  json partFrozen =
      withMoe(example("vlm-fan-in.json"), 4, 2, {0}, false, "encoder");
  partFrozen["modules"][0]["parallel"]["ep"] = 2;
  partFrozen["modules"][0]["freeze"] = {"patch",
                                        "layers.0.ln1",
                                        "layers.0.wq",
                                        "layers.0.wk",
                                        "layers.0.wv",
                                        "layers.0.wo",
                                        "layers.0.ln2",
                                        "layers.0.router",
                                        "layers.0.experts.0",
                                        "layers.0.experts.1"};
  layouts.push_back({"MoeEncoderEp2PartFrozenExperts", partFrozen, 8});
  // Expert tensor parallelism (family/Moe.h ExpertTp): experts cut over
  // etp < tp TP ranks, those holding the same cut sharing the rows, their
  // gradients summed over an edp group that spans them. Whole experts
  // (etp 1) at TP4 with ep 2, recomputed whole (edp: the four TP ranks);
  // at TP2 x PP2 with SP and no DP (edp: TP alone); with ep 2 carved from
  // CP2 under SP, ring attention and zero bubble; cut over 2 of TP4 at
  // ep 2 with the distributed optimizer and an expert frozen (edp: 2 TP
  // ranks); a tower's whole experts at TP2 x PP2.
  auto withEtp = [](json model, int64_t etp, int64_t ep = 1,
                    size_t module = 1) {
    model["modules"][module]["parallel"]["etp"] = etp;
    if (ep > 1)
      model["modules"][module]["parallel"]["ep"] = ep;
    return model;
  };
  json etpColocated =
      withEtp(withMoe(example("vlm-colocated.json"), 4, 2, "all", true), 1, 2);
  etpColocated["modules"][1]["recompute"] = "full";
  layouts.push_back({"MoeEtp1Ep2ColocatedTp4Dp2Shared", etpColocated, 8});
  layouts.push_back(
      {"MoeEtp1Tp2Pp2Sp",
       withEtp(withMoe(example("vlm-fan-in.json"), 4, 2, {1, 2, 3}, true), 1),
       8});
  json etpCp =
      withEtp(withMoe(example("lm-cp2-sp.json"), 4, 2, "all", false), 1, 2);
  etpCp["batch"]["schedule"] = "zero_bubble";
  layouts.push_back({"MoeEtp1Ep2Cp2SpRingZeroBubble", etpCp, 6});
  json etpBetween = distributed(
      withEtp(withMoe(example("vlm-colocated.json"), 4, 1, "all", true), 2, 2));
  etpBetween["modules"][1]["freeze"] = {"layers.1.experts.2"};
  layouts.push_back({"MoeEtp2Ep2Tp4DistributedColocated", etpBetween, 8});
  json towerEtp = withEtp(
      withMoe(example("vlm-fan-out.json"), 4, 2, "all", false, "encoder"), 1, 1,
      0);
  towerEtp["modules"][0]["recompute"] = "selective";
  layouts.push_back({"MoeEncoderEtp1Tp2Pp2Selective", towerEtp, 8});
  // LoRA on a model whose layers are part sparse: the MLP targets adapt
  // the dense layers (the tower's 0, the language model's 0 and 2) alone.
  json loraSparse =
      withLora(withMoe(withMoe(example("vlm-fan-in.json"), 4, 2, {1, 3}, false),
                       4, 1, {1}, false, "encoder"),
               "all-linear", "all-linear");
  layouts.push_back({"LoraOnPartSparseLayers", loraSparse, 8});
  return layouts;
}

} // namespace mimo::test

#endif // MIMO_TESTS_E2E_LAYOUTS_H
