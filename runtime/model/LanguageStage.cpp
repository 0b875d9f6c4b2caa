//===- LanguageStage.cpp - A language model's pipeline stage --------------===//

#include "runtime/model/Model.h"

#include "runtime/model/ModelOps.h"
#include "runtime/model/TransformerLayer.h"
#include "runtime/plan/Sharding.h"
#include "runtime/support/Random.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace mimo::exec {

using namespace ops;

//===----------------------------------------------------------------------===//
// Language model
//===----------------------------------------------------------------------===//

struct LanguageStage::Cache {
  LayerMeta meta;
  LaneTokens tokens;
  std::vector<LayerCache> layers;
  // Last stage.
  Tensor xf, rstdF, dhNf;
};

LanguageStage::LanguageStage(const ModuleConfig &module,
                             const ShardTopology &shard, StageContext context)
    : Stage(std::move(context)), hiddenSize(module.hiddenSize),
      vocab(module.vocabSize), normEps(static_cast<float>(module.normEps)),
      shardTopology(shard) {
  vocabLocal = vocab / ctx.tp;
  rope = ropeSpec(module);
  headDim = module.headDim();
  buildParameters(stageParameters(module, hiddenSize,
                                  ctx.sequenceParallel && ctx.tp > 1, ctx.pp,
                                  ctx.ppRank),
                  module);
  if (isFirst())
    embedding = indexOf("embedding");
  auto [begin, end] = stageLayers(module, ctx.pp, ctx.ppRank);
  for (int64_t l = begin; l < end; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    size_t n1 = indexOf(p + "attn_norm"), n2 = indexOf(p + "mlp_norm");
    LayerBiases biases;
    if (module.qkvBias) {
      biases.q = indexOf(p + "bq");
      biases.k = indexOf(p + "bk");
      biases.v = indexOf(p + "bv");
    }
    const bool sparse = module.moe.sparse(l);
    constexpr size_t none = LayerBiases::kNone;
    auto find = [&](const std::string &n) { return indexOf(n); };
    layers.push_back(std::make_unique<TransformerLayer>(
        *this, parameters, true, n1, n1, indexOf(p + "wq"), indexOf(p + "wk"),
        indexOf(p + "wv"), indexOf(p + "wo"), n2, n2,
        sparse ? none : indexOf(p + "gate"), sparse ? none : indexOf(p + "up"),
        sparse ? none : indexOf(p + "down"), module, ctx, biases,
        module.recomputes(l - begin, end - begin),
        LayerAdapters::of(module, p, true, sparse, find)));
    if (module.qkNorm)
      layers.back()->useQkNorm(indexOf(p + "q_norm"), indexOf(p + "k_norm"));
    if (sparse)
      layers.back()->useMoe(
          module.moe, MoeParams::of(module.moe, p, find, ctx.ep, ctx.epRank));
  }
  if (isLast()) {
    finalNorm = indexOf("final_norm");
    // tie_embeddings: the head is the embedding's transpose, and its
    // gradient adds into the embedding's (on one stage), or into the last
    // stage's copy, which the executor sums with the first stage's.
    tied = module.tieEmbeddings;
    head = tied ? indexOf("embedding") : indexOf("head");
  }
}

LanguageStage::~LanguageStage() = default;

void LanguageStage::dropCaches() { caches.clear(); }

bool LanguageStage::needsUnshard() const {
  return mimo::needsUnshard(ctx.cp, ctx.tp, ctx.sequenceParallel);
}

LaneTokens LanguageStage::tokensOf(const LanguageLane &lane, int64_t cpRank,
                                   int64_t tpRank) const {
  PositionRanges ranges;
  if (ctx.cp == 1)
    ranges = {{0, lane.seq}};
  else if (shardTopology.packing)
    ranges = thdZigzagRanges(lane.cuSeqlens, ctx.cp, cpRank);
  else
    ranges = zigzagRanges(lane.seq, ctx.cp, cpRank);
  auto toTokens = [&](const PositionRanges &r) {
    std::vector<int64_t> tokens;
    for (int64_t p : expandRanges(r))
      for (int64_t b = 0; b < lane.batch; ++b)
        tokens.push_back(p * lane.batch + b);
    return tokens;
  };
  LaneTokens out;
  out.cp = toTokens(ranges);
  if (ctx.sequenceParallel && ctx.tp > 1)
    out.local = toTokens(sequenceParallelSlice(ranges, ctx.tp, tpRank));
  else
    out.local = out.cp;
  return out;
}

int64_t LanguageStage::localTokens(const LanguageLane &lane) const {
  return static_cast<int64_t>(
      tokensOf(lane, ctx.cpRank, ctx.tpRank).local.size());
}

Tensor LanguageStage::shard(int64_t mb, const LanguageLane &lane,
                            const std::vector<const Tensor *> &modality) {
  (void)mb;
  int64_t H = hiddenSize;
  LaneTokens tokens = tokensOf(lane, ctx.cpRank, ctx.tpRank);
  int64_t Tc = static_cast<int64_t>(tokens.cp.size());
  std::vector<int64_t> ids(tokens.cp.size());
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = lane.ids[static_cast<size_t>(tokens.cp[i])];
  Tensor E = empty(Tc * H);
  int64_t vb = ctx.tpRank * vocabLocal;
  Tensor deviceIds = indices(ids);
  const Bf16Operand table = parameters[embedding].weight();
  ctx.dev->embeddingForward(
      deviceIds.data<int64_t>(), Tc,
      table.bits ? device::DType::BF16 : device::DType::F32,
      table.bits ? static_cast<const void *>(table.bits) : table.f32, vb,
      vb + vocabLocal, H, E.data());
  reduceAll(*ctx.comm, ctx.tpGroup, E);
  store(E);
  for (size_t e = 0; e < lane.modalityRow.size(); ++e) {
    int64_t rows = lane.modalityRows[e];
    if (rows == 0)
      continue;
    if (e >= modality.size() || !modality[e] ||
        static_cast<int64_t>(modality[e]->size()) != rows * H)
      throw std::runtime_error("the language input expects " +
                               std::to_string(rows) + " rows of modality " +
                               std::to_string(e) + ", the bridge delivered " +
                               (e < modality.size() && modality[e]
                                    ? std::to_string(modality[e]->size() / H)
                                    : std::string("none")));
    std::vector<int64_t> to, from;
    for (int64_t i = 0; i < Tc; ++i) {
      int64_t row = lane.modalityRow[e][static_cast<size_t>(tokens.cp[i])];
      if (row >= 0) {
        to.push_back(i);
        from.push_back(row);
      }
    }
    copyRows(E, to, *modality[e], from, H);
  }
  if (!(ctx.sequenceParallel && ctx.tp > 1))
    return E;
  int64_t Tl = Tc / ctx.tp;
  return E.view(ctx.tpRank * Tl * H, Tl * H);
}

void Stage::copyRows(Tensor &dst, const std::vector<int64_t> &dstRows,
                     const Tensor &src, const std::vector<int64_t> &srcRows,
                     int64_t cols) {
  if (dstRows.empty())
    return;
  Tensor to = indices(dstRows), from = indices(srcRows);
  ctx.dev->copyRows(dst.data(), to.data<int64_t>(), src.data(),
                    from.data<int64_t>(), static_cast<int64_t>(dstRows.size()),
                    cols);
}

Tensor LanguageStage::forward(int64_t mb, const LanguageLane &lane,
                              Tensor input, double invN, Tensor *lossSum,
                              bool evaluating) {
  Device &dev = *ctx.dev;
  comm::Comm &comm = *ctx.comm;
  auto cache = std::make_unique<Cache>();
  Cache &c = *cache;
  c.tokens = tokensOf(lane, ctx.cpRank, ctx.tpRank);
  LayerMeta &m = c.meta;
  m.localRows = static_cast<int64_t>(c.tokens.local.size());
  m.cpRows = static_cast<int64_t>(c.tokens.cp.size());
  for (int64_t r = 0; r < ctx.cp; ++r) {
    std::vector<int64_t> keys =
        r == ctx.cpRank ? c.tokens.cp : tokensOf(lane, r, 0).cp;
    c.tokens.keys.insert(c.tokens.keys.end(), keys.begin(), keys.end());
  }
  m.keyRows = static_cast<int64_t>(c.tokens.keys.size());
  std::vector<int64_t> qpos, qseg, kpos, kseg;
  for (int64_t t : c.tokens.cp) {
    qpos.push_back(lane.positions[static_cast<size_t>(t)]);
    qseg.push_back(lane.segments[static_cast<size_t>(t)]);
    m.real.push_back(lane.segments[static_cast<size_t>(t)] >= 0);
  }
  m.auxLoss = &auxLoss;
  for (int64_t t : c.tokens.keys) {
    kpos.push_back(lane.positions[static_cast<size_t>(t)]);
    kseg.push_back(lane.segments[static_cast<size_t>(t)]);
  }
  m.qpos = indices(qpos);
  // The rotation table every layer's RoPE reads (built once here).
  m.ropeTable = Tensor::empty(
      std::max<int64_t>(m.cpRows * (headDim / 2), 1) * 2, device::DType::F64);
  if (m.cpRows > 0 && headDim / 2 > 0)
    dev.ropeTable(m.qposData(), m.cpRows, headDim, rope,
                  m.ropeTable.data<double>());
  if (ctx.ringCp) {
    // Ring CP: the queries against each CP rank's keys (its shard of the
    // concatenation), the blocks that travel (model/RingAttention.h).
    const size_t rows = c.tokens.cp.size();
    for (int64_t r = 0; r < ctx.cp; ++r) {
      const auto from = static_cast<std::ptrdiff_t>(rows * size_t(r));
      const auto to = from + static_cast<std::ptrdiff_t>(rows);
      m.blocks.push_back(attentionPlan(
          qpos, qseg,
          std::vector<int64_t>(kpos.begin() + from, kpos.begin() + to),
          std::vector<int64_t>(kseg.begin() + from, kseg.begin() + to), true));
    }
  } else {
    m.attention = attentionPlan(qpos, qseg, kpos, kseg, true);
  }
  int64_t H = hiddenSize;
  if (static_cast<int64_t>(input.size()) != m.localRows * H)
    throw std::runtime_error(
        "language stage input has " + std::to_string(input.size()) +
        " values, expected " + std::to_string(m.localRows * H));
  Tensor x = std::move(input);
  c.layers.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i)
    x = layers[i]->forward(c.layers[i], std::move(x), m);
  if (!isLast()) {
    caches[mb] = std::move(cache);
    return x;
  }
  bool sp = ctx.sequenceParallel && ctx.tp > 1;
  int64_t Tl = m.localRows, Tc = m.cpRows, Vl = vocabLocal;
  c.xf = std::move(x);
  // The final norm as the head's GEMMs read it: under bf16 its bits,
  // written by the norm itself (one pass) unless SP gathers fp32 rows first.
  const bool normBits = ctx.bf16 && !sp;
  Tensor hN = Tensor::empty(Tl * H, normBits ? device::DType::BF16
                                             : device::DType::F32);
  c.rstdF = empty(Tl);
  const Tensor finalWeight = vectorOf(parameters[finalNorm]);
  dev.rmsnormForward(c.xf.data(), finalWeight.data(), hN.dtype(), hN.raw(),
                     c.rstdF.data(), Tl, H, normEps);
  Tensor hNf =
      gemmInput(dev, ctx.bf16 && sp,
                sp ? gatherRows(comm, ctx.tpGroup, hN) : std::move(hN));
  std::vector<int64_t> targets(static_cast<size_t>(Tc));
  std::vector<float> scale(static_cast<size_t>(Tc));
  for (int64_t i = 0; i < Tc; ++i) {
    size_t t = static_cast<size_t>(c.tokens.cp[static_cast<size_t>(i)]);
    targets[static_cast<size_t>(i)] = lane.labels[t];
    scale[static_cast<size_t>(i)] = static_cast<float>(lane.mask[t] * invN);
  }
  Tensor target = indices(targets), weight = Tensor::fromHost(scale);
  // The head, the loss and their gradient, chunk by chunk of rows: the
  // loss ends the graph, so its gradient needs nothing from later, and no
  // step keeps fp32 logits for every token (cost/MemoryPlan.h). The
  // backward finds the head's output gradient ready.
  // Under bf16 the logits come out of the GEMM as bf16 (stored rounded, as
  // every activation) and their gradient is written as bf16 (the GEMMs
  // read it rounded); the softmax, loss and statistics stay fp32.
  // Under bf16 the head's gradients (its input's and its weight's) run
  // once per group of chunks, a micro-batch's rows unless their bf16 logit
  // gradients would pass kHeadGradientBytes (cost/MemoryPlan.h): GEMMs of
  // K = the group's rows, not a chunk's.
  Param &W = parameters[head];
  const int64_t chunk = logitChunkRows(Tc, Vl, ctx.logitChunkBytes);
  const int64_t group =
      ctx.bf16 ? headGradientRows(Tc, Vl, chunk, ctx.headGradientBytes) : chunk;
  const device::DType logitType =
      ctx.bf16 ? device::DType::BF16 : device::DType::F32;
  Tensor logits = Tensor::empty(chunk * Vl, logitType),
         dlogits = Tensor::empty((evaluating ? chunk : group) * Vl, logitType);
  Tensor gmax = empty(chunk), sums = empty(2 * chunk), loss = empty(chunk);
  c.dhNf = evaluating ? Tensor() : empty(Tc * H);
  // The gradients of the rows [g0, end) of one group.
  auto headGradients = [&](int64_t g0, int64_t end) {
    const int64_t rows = end - g0;
    const Tensor dz = dlogits.view(0, rows * Vl);
    const Tensor h = hNf.view(g0 * H, rows * H);
    if (tied) { // dh = dz · E; dE += dzᵀ · h
      gemm(dev, ctx.bf16, false, false, rows, H, Vl, 1.0f, operand(dz),
           W.weight(), 0.0f, c.dhNf.data() + g0 * H);
      if (float *dE = weightGrad(W))
        gemm(dev, ctx.bf16, true, false, Vl, H, rows, 1.0f, operand(dz),
             operand(h), 1.0f, dE);
    } else {
      matmulBackward(dev, ctx.bf16, operand(h), W.weight(), operand(dz),
                     c.dhNf.data() + g0 * H, weightGrad(W), rows, H, Vl);
    }
  };
  for (int64_t r0 = 0; r0 < Tc; r0 += chunk) {
    const int64_t rows = std::min(chunk, Tc - r0);
    const int64_t *ids = target.data<int64_t>() + r0;
    const float *rowScale = weight.data() + r0;
    const int64_t g0 = r0 / group * group; // the chunk's group
    Tensor z = logits.view(0, rows * Vl),
           dz = dlogits.view((evaluating ? 0 : r0 - g0) * Vl, rows * Vl);
    const Tensor h = hNf.view(r0 * H, rows * H);
    // Tied: W is the embedding's [Vl, H] rows, read transposed.
    // Under bf16 the logits are bits, written so by the GEMM.
    dev.gemm(z.dtype(), false, tied, rows, Vl, H, 1.0f, operand(h), W.weight(),
             0.0f, z.dtype(), z.raw());
    dev.crossEntropyRowMax(z.dtype(), z.raw(), rows, Vl, gmax.data());
    if (ctx.tpGroup.size() > 1)
      comm.allReduceMax(ctx.tpGroup, gmax.data(), rows);
    Tensor s = sums.view(0, 2 * rows);
    dev.crossEntropySums(z.dtype(), z.raw(), ids, rows, Vl, ctx.tpRank * Vl,
                         gmax.data(), s.data(), s.data() + rows);
    reduceAll(comm, ctx.tpGroup, s);
    if (ctx.tpRank == 0 && lossSum) {
      // Σ over unmasked tokens of the per-token loss, times 1/N, on the
      // device: the scale is mask / N, nonzero exactly where the mask is.
      dev.crossEntropyLoss(gmax.data(), s.data(), s.data() + rows, rows,
                           loss.data());
      dev.maskedSumInto(loss.data(), rowScale, rows, invN,
                        lossSum->data<double>());
    }
    if (evaluating)
      continue;
    dev.crossEntropyBackward(z.dtype(), z.raw(), ids, rows, Vl, ctx.tpRank * Vl,
                             gmax.data(), s.data(), rowScale, dz.raw());
    if (r0 + rows == std::min(g0 + group, Tc))
      headGradients(g0, r0 + rows);
  }
  caches[mb] = std::move(cache);
  return {};
}

Tensor LanguageStage::backward(int64_t mb, const Tensor *gradOutput) {
  Device &dev = *ctx.dev;
  comm::Comm &comm = *ctx.comm;
  auto it = caches.find(mb);
  if (it == caches.end())
    throw std::logic_error("language backward of microbatch " +
                           std::to_string(mb) + " before its forward");
  Cache &c = *it->second;
  const LayerMeta &m = c.meta;
  int64_t H = hiddenSize, Tl = m.localRows;
  Tensor dx;
  if (isLast()) {
    bool sp = ctx.sequenceParallel && ctx.tp > 1;
    Tensor dhNf = std::move(c.dhNf); // the forward's (chunked head and loss)
    Tensor dhN;
    if (sp) {
      dhN = scatterRows(comm, ctx.tpGroup, dhNf);
    } else {
      reduceAll(comm, ctx.tpGroup, dhNf);
      dhN = std::move(dhNf);
    }
    dx = empty(Tl * H);
    dev.rmsnormBackward(device::DType::F32, c.xf.data(),
                        vectorOf(parameters[finalNorm]).data(), c.rstdF.data(),
                        dhN.data(), dx.data(),
                        parameters[finalNorm].grad.data(), Tl, H);
    // Tied on one stage, the embedding's gradient is done in inputBackward.
    if (tied && isFirst())
      gradsDone({finalNorm});
    else
      gradsDone({head, finalNorm});
  } else {
    if (!gradOutput)
      throw std::logic_error("language backward without an output gradient");
    dx = gradOutput->view(0, gradOutput->size());
  }
  dx = layersBackward(c.layers, std::move(dx), m);
  caches.erase(it);
  return dx;
}

std::vector<Tensor> LanguageStage::inputBackward(int64_t mb,
                                                 const LanguageLane &lane,
                                                 const Tensor &gradInput,
                                                 size_t encoders) {
  (void)mb;
  int64_t H = hiddenSize, T = lane.tokens();
  LaneTokens own = tokensOf(lane, ctx.cpRank, ctx.tpRank);
  Tensor full;
  if (needsUnshard()) {
    // Gather every TP x CP member's shard and put its rows in place: the
    // members' shards tile the lane, so every row is written.
    int64_t n = gradInput.size();
    std::vector<int64_t> counts(ctx.tpcpGroup.size(), n);
    Tensor gathered = empty(n * static_cast<int64_t>(ctx.tpcpGroup.size()));
    ctx.comm->allGatherV(ctx.tpcpGroup, gradInput.data(), counts,
                         gathered.data());
    full = zeros(T * H);
    std::vector<int64_t> to, from;
    for (size_t r = 0; r < ctx.tpcpGroup.size(); ++r) {
      auto [tpRank, cpRank] = ctx.tpcpCoords[r];
      std::vector<int64_t> tokens = tokensOf(lane, cpRank, tpRank).local;
      for (size_t i = 0; i < tokens.size(); ++i) {
        to.push_back(tokens[i]);
        from.push_back(static_cast<int64_t>(r) * (n / H) +
                       static_cast<int64_t>(i));
      }
    }
    copyRows(full, to, gathered, from, H);
  } else {
    // The whole lane, in token order.
    full = gradInput.view(0, gradInput.size());
  }
  // Text embedding: this rank's CP positions, its vocab shard.
  std::vector<int64_t> ids(static_cast<size_t>(T), -1);
  for (int64_t t : own.cp) {
    bool modalityToken = false;
    for (size_t e = 0; e < lane.modalityRow.size(); ++e)
      modalityToken |= lane.modalityRow[e][static_cast<size_t>(t)] >= 0;
    if (!modalityToken)
      ids[static_cast<size_t>(t)] = lane.ids[static_cast<size_t>(t)];
  }
  int64_t vb = ctx.tpRank * vocabLocal;
  const device::TokenGroups groups =
      device::TokenGroups::of(ids.data(), T, vb, vb + vocabLocal);
  Tensor deviceGroups = indices(groups.packed);
  if (!parameters[embedding].frozen)
    ctx.dev->embeddingBackward(groups.view(deviceGroups.data<int64_t>()),
                               full.data(), H,
                               parameters[embedding].grad.data());
  gradsDone({embedding});
  std::vector<Tensor> grads(encoders);
  for (size_t e = 0; e < encoders && e < lane.modalityRow.size(); ++e) {
    grads[e] = zeros(lane.modalityRows[e] * H);
    std::vector<int64_t> to, from;
    for (int64_t t = 0; t < T; ++t) {
      int64_t row = lane.modalityRow[e][static_cast<size_t>(t)];
      if (row >= 0) {
        to.push_back(row);
        from.push_back(t);
      }
    }
    copyRows(grads[e], to, full, from, H);
  }
  return grads;
}

} // namespace mimo::exec
