//===- MemoryPlan.cpp - What each rank keeps in memory --------------------===//

#include "runtime/cost/MemoryPlan.h"

#include "runtime/config/Flops.h"
#include "runtime/config/Parameters.h"
#include "runtime/family/Moe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mimo {

namespace {

constexpr double kFloat = 4, kIndex = 8;

/// The values a parameter block occupies in a flat buffer (padded to 64).
int64_t padded(int64_t n) { return (n + 63) / 64 * 64; }

/// Byte counts saturate at 2^62 (far beyond any device) instead of
/// overflowing: an absurd model is refused by the memory check, not
/// wrapped into a small one.
constexpr int64_t kSaturated = int64_t(1) << 62;
int64_t saturate(double bytes) {
  return bytes >= static_cast<double>(kSaturated) ? kSaturated
                                                  : static_cast<int64_t>(bytes);
}
int64_t saturatingAdd(int64_t a, int64_t b) {
  return std::min(kSaturated,
                  std::min(a, kSaturated) + std::min(b, kSaturated));
}

/// Bytes one microbatch leaves saved on a rank of `module`'s stage, and the
/// largest extra working set of its backward.
struct MicrobatchBytes {
  double saved = 0, working = 0;
};

/// Bytes of an activation a layer keeps for its backward: bf16 keeps
/// them packed (model/TransformerLayer.h keep) and unpacks one layer's at a
/// time, in its backward.
double keptBytes(bool bf16) { return bf16 ? 2.0 : kFloat; }

/// A layer's LoRA ranks summed over its adapted linears (docs/model.md):
/// each keeps s·x·A, [rows, r], for its backward.
double adaptedSites(const ModuleConfig &m) {
  return m.lora
             ? static_cast<double>(m.lora->rank *
                                   static_cast<int64_t>(m.lora->targets.size()))
             : 0.0;
}

/// What a sparse layer (model/MoeMlp.h) keeps beyond a dense one, over
/// `rows` rows, averaged over the module's layers (a stage's layers are
/// taken at the module's share of sparse ones; 0 for a dense module): in
/// place of the dense MLP's `denseKept` kept values a row of width ffn/tp,
/// each expert's gathered rows (top_k x rows of them), gate, up and
/// activation, and its fp32 output; the shared expert's the same over the
/// rows.
double sparseLayerBytes(const ModuleConfig &m, double rows, double tp,
                        bool selective, bool bf16, double denseKept) {
  if (!m.hasMoe())
    return 0;
  const MoeConfig &e = m.moe;
  const double H = static_cast<double>(m.hiddenSize);
  const double Fl = static_cast<double>(m.ffnHiddenSize) / tp;
  // The routed rows a TP rank runs (its share of top_k x rows when the
  // experts are cut over etp < tp TP ranks), through experts cut over etp.
  const double etp = static_cast<double>(m.parallel.expertTp());
  const double K = static_cast<double>(e.topK) * etp / tp;
  const double Fe = static_cast<double>(e.expertFfn) / etp;
  const double Fs = static_cast<double>(e.sharedFfn) / tp;
  const double act = selective ? 2 : 3;
  const double sparse =
      keptBytes(bf16) * (K * rows * H + act * (K * rows * Fe + rows * Fs)) +
      kFloat * (K * rows * H + (Fs > 0 ? rows * H : 0)) -
      keptBytes(bf16) * denseKept * rows * Fl;
  return sparse * static_cast<double>(e.sparseLayers(m.layers())) /
         static_cast<double>(m.layers());
}

MicrobatchBytes languageBytes(const ModuleConfig &m, const Topology &t,
                              bool first, bool last, int64_t layers,
                              bool bf16) {
  const int64_t recomputed = m.recomputed(layers);
  const bool selective = m.recompute == "selective";
  const double tp = static_cast<double>(m.parallel.tp);
  const double cp = static_cast<double>(m.parallel.cp);
  const double samples = static_cast<double>(t.microBatchSize) /
                         static_cast<double>(m.parallel.dp);
  const double T = static_cast<double>(t.seqLength) * samples; // lane tokens
  const double Tc = T / cp;
  const double Tl = t.shard.sequenceParallel && tp > 1 ? Tc / tp : Tc;
  const double H = static_cast<double>(m.hiddenSize);
  // q and the attention output: the heads' width (num_heads x head_dim).
  const double Hl = static_cast<double>(m.attentionWidth()) / tp,
               Fl = static_cast<double>(m.ffnHiddenSize) / tp;
  const double heads = static_cast<double>(m.numHeads) / tp;
  const double Vl = static_cast<double>(m.vocabSize) / tp;
  // K and V's width on a rank: Hl, or their groups' under GQA.
  const double KVl = static_cast<double>(m.kvHidden()) / tp;
  // CP all-gathers every rank's keys and values (kept for the backward),
  // or passes them around the ring (model/RingAttention.h: the rank's own
  // kept, two others in flight while a layer's attention runs).
  const bool ring = m.parallel.ringCp();
  const bool gathered = cp > 1 && !ring;
  // Per layer (model/TransformerLayer.h LayerCache), kept: x, x1 (local
  // rows); the gathered norms' outputs; q, k, v, the attention output; the
  // gathered keys and values under CP; gate, up and SwiGLU output. In
  // fp32: the norms' statistics and the log-sum-exp.
  // recompute "selective" drops the SwiGLU output; "full" keeps a
  // recomputed layer's input x alone, and its backward holds one layer's
  // whole cache again (docs/model.md Recomputation).
  double kept = 2 * Tl * H + 2 * Tc * H + 2 * Tc * Hl + 2 * Tc * KVl +
                (selective ? 2 : 3) * Tc * Fl;
  if (gathered)
    kept += 2 * T * KVl;
  kept += Tc * adaptedSites(m); // LoRA's s·x·A of each adapted linear
  double layer = keptBytes(bf16) * kept + kFloat * (2 * Tl + heads * Tc);
  layer += sparseLayerBytes(m, Tc, tp, selective, bf16, selective ? 2 : 3);
  if (m.qkNorm) // q and k before their norms (fp32)
    layer += kFloat * (Tc * Hl + Tc * KVl + 2 * heads * Tc);
  MicrobatchBytes b;
  // Query positions and the attention plan (device/AttentionTiles.h:
  // query and key orders, each query's end, blocks of 64).
  // Ring: one plan per CP rank's block of Tc keys.
  const double plans =
      ring ? cp * (3 * Tc + 8 * std::ceil(Tc / 64))
           : 2 * Tc + T + 4 * std::ceil(Tc / 64) + 4 * std::ceil(T / 64);
  b.saved = static_cast<double>(layers - recomputed) * layer +
            static_cast<double>(recomputed) * keptBytes(bf16) * Tl * H +
            kIndex * (Tc + plans);
  if (first)
    b.saved += kIndex * Tc; // token ids
  if (last) // the final norm's input and statistics, the head's gradient
    b.saved += kFloat * (Tl * H + Tl + Tc * H);
  // A layer's backward: its MLP and attention gradients (under bf16 the
  // gate and up gradients are bf16, and what was kept is read as kept);
  // the last stage's forward: the gathered norm output and one chunk of
  // logits and their gradient (cost/MemoryPlan.h logitChunkRows; bf16
  // under bf16, the gradient of a group of chunks: headGradientRows), with
  // their statistics.
  // The ring's backward: a block's dq, dk and dv, the sums of the block in
  // hand and of the one arriving, and two blocks of keys and values.
  b.working = kFloat * (Tc * Fl + 3 * Tc * H + 4 * Tc * Hl +
                        (gathered ? 2 * T * Hl : 0) +
                        (ring ? 3 * Tc * Hl + 4 * Tc * KVl : 0)) +
              keptBytes(bf16) *
                  ((selective ? 3 : 2) * Tc * Fl + (ring ? 4 * Tc * KVl : 0)) +
              (recomputed > 0 ? layer : 0);
  if (KVl < Hl) { // GQA: the keys and values repeated per head, and the
                  // gradients of the groups
    const double Tk = gathered ? T : Tc;
    b.working += keptBytes(bf16) * 2 * Tk * Hl + kFloat * 2 * Tk * KVl;
  }
  if (last) {
    // bf16: the logit gradients of a group of chunks (headGradientRows).
    const int64_t chunk =
        logitChunkRows(static_cast<int64_t>(Tc), static_cast<int64_t>(Vl));
    const double R = static_cast<double>(chunk);
    const double G =
        bf16 ? static_cast<double>(headGradientRows(
                   static_cast<int64_t>(Tc), static_cast<int64_t>(Vl), chunk))
             : R;
    b.working =
        std::max(b.working, kFloat * (Tc * H + 4 * R + Tc) +
                                keptBytes(bf16) * (R + G) * Vl + kIndex * Tc);
  }
  return b;
}

MicrobatchBytes encoderBytes(const ModuleConfig &m, const ModelConfig &config,
                             size_t encoder, bool first, bool last,
                             int64_t layers, int64_t outputHidden, bool bf16) {
  const double tp = static_cast<double>(m.parallel.tp);
  const double samples = static_cast<double>(config.batch.microBatchSize) /
                         static_cast<double>(m.parallel.dp);
  const double R =
      samples * expectedModalityTokens(config, encoder).mean; // lane rows
  const double H = static_cast<double>(m.hiddenSize);
  // q and the attention output: the heads' width (num_heads x head_dim).
  const double Hl = static_cast<double>(m.attentionWidth()) / tp,
               Fl = static_cast<double>(m.ffnHiddenSize) / tp;
  const double heads = static_cast<double>(m.numHeads) / tp;
  const double O = static_cast<double>(outputHidden);
  // Recomputation as languageBytes: "selective" drops the GeLU output,
  // "full" keeps the input alone.
  const int64_t recomputed = m.recomputed(layers);
  const bool selective = m.recompute == "selective";
  const double kept =
      2 * R * H + 2 * R * H + 4 * R * Hl + (selective ? 1 : 2) * R * Fl +
      R * adaptedSites(m); // LoRA's s·x·A of each adapted linear
  double layer = keptBytes(bf16) * kept + kFloat * (4 * R + heads * R) +
                 sparseLayerBytes(m, R, tp, selective, bf16, selective ? 1 : 2);
  MicrobatchBytes b;
  b.saved = static_cast<double>(layers - recomputed) * layer +
            static_cast<double>(recomputed) * keptBytes(bf16) * R * H +
            kIndex * (3 * R + 4 * std::ceil(R / 64) * 2); // attention plan
  if (first)
    b.saved += kFloat * R * static_cast<double>(m.featureDim);
  if (last)
    b.saved += kFloat * (R * H + 2 * R * O);
  b.working = kFloat * (2 * R * Fl + 3 * R * H + 4 * R * Hl + 2 * R * O) +
              (kFloat - keptBytes(bf16)) * kept +
              (selective ? keptBytes(bf16) * R * Fl : 0) +
              (recomputed > 0 ? layer : 0);
  return b;
}

} // namespace

std::vector<RankMemory> memoryPlan(const Topology &t,
                                   const ModelConfig &config) {
  std::vector<RankMemory> ranks(static_cast<size_t>(t.worldSize));
  const ModuleConfig &language = config.language();
  const bool encodersFirst = colocatedPipeline(t);
  for (size_t m = 0; m < t.modules.size(); ++m) {
    const ModuleTopology &topo = t.modules[m];
    const ModuleConfig *module = nullptr;
    size_t encoder = 0;
    for (const ModuleConfig &c : config.modules) {
      if (c.name == topo.name) {
        module = &c;
        break;
      }
      encoder += c.kind == ModuleKind::Encoder ? 1 : 0;
    }
    if (!module)
      continue;
    const Grid &grid = topo.grid;
    const int64_t pp = grid.size(Dim::PP), chunks = topo.virtualStages;
    const bool sp =
        topo.isLanguage && t.shard.sequenceParallel && grid.size(Dim::TP) > 1;
    // Everything below depends on (pp, tp) only: compute it once per pair.
    // Under the interleaved schedule each chunk is its virtual stage
    // (chunk x pp + stage) of pp x virtual_stages, on the ranks of `stage`.
    for (int64_t virtualStage = 0; virtualStage < pp * chunks; ++virtualStage) {
      const int64_t stage = virtualStage % pp, chunk = virtualStage / pp;
      std::vector<ParamSpec> specs = stageParameters(
          *module, language.hiddenSize, sp, pp * chunks, virtualStage);
      auto [begin, end] = stageLayers(*module, pp * chunks, virtualStage);
      bool first = virtualStage == 0, last = virtualStage == pp * chunks - 1;
      const bool bf16 = config.precision == "bf16";
      MicrobatchBytes mb =
          topo.isLanguage
              ? languageBytes(*module, t, first, last, end - begin, bf16)
              : encoderBytes(*module, config, encoder, first, last, end - begin,
                             language.hiddenSize, bf16);
      const StageTopology *s = t.stageOf(m, stage);
      int64_t inFlight =
          topo.forwardOnly ? 0 // nothing saved for a backward
          : !topo.isLanguage && encodersFirst
              ? t.microbatches // every microbatch forward before the pipeline
              : t.schedule->inFlight(pp, chunks, t.microbatches, stage, chunk,
                                     s ? s->warmup : 0);
      // Zero bubble: up to weight_lag more microbatches' weight gradients
      // wait with their GEMM inputs and output gradients: at most what a
      // forward that recomputes nothing saves (a recomputed layer's
      // backward rebuilds its whole cache, and the waiting GEMMs keep it),
      // min(P, M) microbatches in all (schedule/Formulas.h).
      double waiting = 0;
      if (s && s->weightLag > 0 && inFlight > 0) {
        ModuleConfig whole = *module;
        whole.recompute = "none";
        whole.recomputeLayers = -1;
        const double held =
            topo.isLanguage
                ? languageBytes(whole, t, first, last, end - begin, bf16).saved
                : encoderBytes(whole, config, encoder, first, last, end - begin,
                               language.hiddenSize, bf16)
                      .saved;
        waiting = static_cast<double>(std::min<int64_t>(
                      s->weightLag, t.microbatches - inFlight)) *
                  held;
      }
      for (int64_t tpRank = 0; tpRank < grid.size(Dim::TP); ++tpRank) {
        // Frozen parameters (`freeze`) keep no moments and share one
        // scratch gradient: the largest of them.
        int64_t params = 0, values = 0, trainable = 0, scratch = 0;
        int64_t trainableParams = 0, trainableExperts = 0;
        // Expert parallelism: a rank holds its block of each sparse
        // layer's experts (model/MoeMlp.h), ep blocks of equal size.
        const int64_t ep = module->parallel.ep,
                      etp = module->parallel.expertTp(),
                      tp = grid.size(Dim::TP);
        const bool apart = module->hasMoe() && expertsApart(ep, etp, tp);
        for (const ParamSpec &spec : specs) {
          if (ep > 1 && moeExpertOf(spec.local) >= module->moe.experts / ep)
            continue; // another ep rank's (every rank holds as many)
          int64_t n = blockOf(spec, tp, tpRank, etp).size();
          params += n;
          values += padded(n);
          if (module->frozen(spec.local))
            scratch = std::max(scratch, padded(n));
          else {
            trainable += padded(n);
            trainableParams += n;
            if (apart && spec.expert)
              trainableExperts += padded(n);
          }
        }
        // The gradient all-reduce over DP x CP stages every other member's
        // buffer plus an accumulator (comm/Comm.cpp); the distributed
        // optimizer's reduce-scatter every other member's piece of this
        // member's, and keeps the AdamW moments of its piece only
        // (exec/OptimizerShards.h); under expert parallelism the experts'
        // pieces are cut over the dp x cp / ep members holding them (and
        // the tp / etp TP ranks holding the same cut).
        double group =
            static_cast<double>(grid.size(Dim::DP) * grid.size(Dim::CP));
        const bool sharded = module->distributedOptimizer && group > 1;
        const auto edp = static_cast<double>(expertDataParallel(
            static_cast<int64_t>(group), std::max<int64_t>(ep, 1), etp, tp));
        const double moments =
            sharded
                ? std::ceil(static_cast<double>(trainable - trainableExperts) /
                            group) +
                      std::ceil(static_cast<double>(trainableExperts) / edp)
                : static_cast<double>(trainable);
        double staging = group > 1 ? kFloat * group * moments : 0;
        // A rank's chunks keep their activations together; their working
        // buffers and the reductions' staging come one at a time (the
        // first chunk counts them).
        double activations =
            chunk > 0 ? static_cast<double>(inFlight) * mb.saved
                      : std::max(static_cast<double>(inFlight) * mb.saved +
                                     waiting + mb.working,
                                 staging);
        for (int64_t rank = grid.rankOffset(); rank < grid.endRank(); ++rank) {
          Coords c = grid.coordsOf(rank);
          if (c.pp != stage || c.tp != tpRank)
            continue;
          RankMemory &r = ranks[static_cast<size_t>(rank)];
          r.params = saturatingAdd(r.params, params);
          r.trainableParams = saturatingAdd(r.trainableParams, trainableParams);
          // bf16: fp32 masters plus their working copy in bf16 (2 bytes);
          // the distributed optimizer keeps the masters of its piece (and
          // the frozen ones).
          const bool bf16 = config.precision == "bf16";
          const double bytes =
              !bf16     ? values * 4.0
              : sharded ? values * 2.0 + 4.0 * (moments + values - trainable)
                        : values * 6.0;
          r.paramBytes = saturatingAdd(r.paramBytes, saturate(bytes));
          r.gradBytes =
              saturatingAdd(r.gradBytes, saturate((trainable + scratch) * 4.0));
          r.optimizerBytes =
              saturatingAdd(r.optimizerBytes, saturate(moments * 8.0));
          r.activationBytes =
              saturatingAdd(r.activationBytes, saturate(activations));
        }
      }
    }
  }
  for (RankMemory &r : ranks)
    r.totalBytes =
        saturatingAdd(saturatingAdd(r.paramBytes, r.gradBytes),
                      saturatingAdd(r.optimizerBytes, r.activationBytes));
  return ranks;
}

std::string formatBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", bytes,
                units[unit]);
  return text;
}

} // namespace mimo
