//===- EncoderStage.cpp - An encoder's pipeline stage ---------------------===//

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

namespace {

/// 0, 1, ..., n - 1: the rows of a dense block, for copyRows.
std::vector<int64_t> firstRows(int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (size_t r = 0; r < rows.size(); ++r)
    rows[r] = static_cast<int64_t>(r);
  return rows;
}

} // namespace

//===----------------------------------------------------------------------===//
// Encoder
//===----------------------------------------------------------------------===//

struct EncoderStage::Cache {
  int64_t rows = 0; // the feature rows (patches)
  int64_t wide = 0; // the rows the layers see: with a class token each
                    // sample's row before its patches
  LayerMeta meta;
  Tensor input;
  std::vector<int64_t> patchRow, classRow; // rows among `wide`
  std::vector<int64_t> position;           // of each wide row
  Tensor preIn, preMean, preRstd;          // pre_norm
  Tensor finalIn, finalMean, finalRstd;    // final_norm
  std::vector<LayerCache> layers;
  Tensor last, y1, z; // projection
};

EncoderStage::EncoderStage(const ModuleConfig &module, int64_t outputHidden,
                           StageContext context)
    : Stage(std::move(context)), featureDim(module.featureDim),
      hiddenSize(module.hiddenSize), outHidden(outputHidden),
      normEps(static_cast<float>(module.normEps)),
      maxPositions(module.maxPositions), moduleName(module.name),
      projectorGelu(geluOf(module.projectorActivation)) {
  buildParameters(
      stageParameters(module, outputHidden, false, ctx.pp, ctx.ppRank), module);
  auto optional = [&](bool held, const char *name) {
    return held ? indexOf(name) : kNone;
  };
  if (isFirst()) {
    patchW = indexOf("patch.weight");
    patchB = optional(module.patchBias, "patch.bias");
    classToken = optional(module.classToken, "class_token");
    positions = optional(module.learnedPositions, "position_embedding");
    preW = optional(module.preNorm, "pre_norm.weight");
    preB = optional(module.preNorm, "pre_norm.bias");
  }
  auto [begin, end] = stageLayers(module, ctx.pp, ctx.ppRank);
  for (int64_t l = begin; l < end; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    // A sparse layer's MLP is its experts (docs/model.md): no fc1, fc2 or
    // their biases.
    const bool sparse = module.moe.sparse(l);
    auto find = [&](const std::string &n) { return indexOf(n); };
    auto mlp = [&](const char *n) { return sparse ? kNone : indexOf(p + n); };
    size_t fc1 = mlp("fc1");
    LayerBiases biases;
    if (module.bias)
      biases = {indexOf(p + "bq"), indexOf(p + "bk"), indexOf(p + "bv"),
                indexOf(p + "bo"), mlp("fc1_bias"),   mlp("fc2_bias")};
    layers.push_back(std::make_unique<TransformerLayer>(
        *this, parameters, false, indexOf(p + "ln1.weight"),
        indexOf(p + "ln1.bias"), indexOf(p + "wq"), indexOf(p + "wk"),
        indexOf(p + "wv"), indexOf(p + "wo"), indexOf(p + "ln2.weight"),
        indexOf(p + "ln2.bias"), fc1, fc1, mlp("fc2"), module, ctx, biases,
        module.recomputes(l - begin, end - begin),
        LayerAdapters::of(module, p, false, sparse, find)));
    if (sparse)
      layers.back()->useMoe(
          module.moe, MoeParams::of(module.moe, p, find, ctx.ep, ctx.epRank));
  }
  if (isFirst()) // config/Parameters.h: every expert's, whoever holds it
    frozenBelow = std::min<int64_t>(encoderFrozenLayers(module),
                                    static_cast<int64_t>(layers.size()));
  if (isLast()) {
    finalW = optional(module.finalNorm, "final_norm.weight");
    finalB = optional(module.finalNorm, "final_norm.bias");
    proj1W = indexOf("projection.fc1.weight");
    proj1B = indexOf("projection.fc1.bias");
    proj2W = optional(!module.linearProjector, "projection.fc2.weight");
    proj2B = optional(!module.linearProjector, "projection.fc2.bias");
  }
}

EncoderStage::~EncoderStage() = default;

void EncoderStage::dropCaches() { caches.clear(); }

std::vector<size_t> EncoderStage::bottomParams() const {
  std::vector<size_t> out;
  for (size_t i : {patchW, patchB, classToken, positions, preW, preB})
    if (i != kNone)
      out.push_back(i);
  return out;
}

Tensor EncoderStage::forward(int64_t mb, const Tensor &input,
                             const std::vector<int64_t> &segment,
                             int64_t rows) {
  Device &dev = *ctx.dev;
  auto cache = std::make_unique<Cache>();
  Cache &c = *cache;
  c.rows = rows;
  // Each item (a sample's rows, or one image of them: EncoderLane) is its
  // own sequence. With a class token, each item's rows are preceded by the
  // token's row; positions count within the item from 0 (the class
  // token's).
  std::vector<int64_t> wideSegment;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t sample = segment[static_cast<size_t>(r)];
    const bool first = r == 0 || segment[static_cast<size_t>(r - 1)] != sample;
    if (first && classToken != kNone) {
      c.classRow.push_back(static_cast<int64_t>(wideSegment.size()));
      c.position.push_back(0);
      wideSegment.push_back(sample);
    }
    c.position.push_back(first ? (classToken != kNone ? 1 : 0)
                               : c.position.back() + 1);
    c.patchRow.push_back(static_cast<int64_t>(wideSegment.size()));
    wideSegment.push_back(sample);
  }
  c.wide = static_cast<int64_t>(wideSegment.size());
  const int64_t W = c.wide, H = hiddenSize;
  c.meta.localRows = c.meta.cpRows = c.meta.keyRows = W;
  // Bidirectional within an item: every position 0, segments = items.
  std::vector<int64_t> zeros(static_cast<size_t>(W), 0);
  c.meta.attention =
      attentionPlan(zeros, wideSegment, zeros, wideSegment, false);
  // Sparse layers: every row is an item's (a patch or a class token),
  // none padding.
  c.meta.real.assign(static_cast<size_t>(W), 1);
  c.meta.auxLoss = &auxLoss;
  Tensor x;
  if (isFirst()) {
    c.input = input.view(0, input.size());
    Tensor patches = empty(rows * H);
    matmul(dev, ctx.bf16, input.data(), parameters[patchW].weight(),
           patches.data(), rows, featureDim, H);
    if (patchB != kNone)
      dev.addBias(patches.data(), vectorOf(parameters[patchB]).data(), rows, H);
    store(patches);
    if (classToken != kNone) {
      x = ops::zeros(W * H);
      copyRows(x, c.patchRow, patches, firstRows(rows), H);
      Tensor token = vectorOf(parameters[classToken]);
      copyRows(x, c.classRow, token, std::vector<int64_t>(c.classRow.size(), 0),
               H);
    } else {
      x = std::move(patches);
    }
    if (positions != kNone) {
      for (int64_t p : c.position)
        if (p >= maxPositions)
          throw std::runtime_error(
              "encoder '" + moduleName + "': a sample has " +
              std::to_string(p + 1) +
              " rows in one item (its class token's included), "
              "more than max_positions " +
              std::to_string(maxPositions) +
              "; raise arch.max_positions or give fewer rows per sample "
              "(or per image: the data's \"items\")");
      Tensor ids = indices(c.position), added = empty(W * H);
      const Bf16Operand table = parameters[positions].weight();
      dev.embeddingForward(
          ids.data<int64_t>(), W,
          table.bits ? device::DType::BF16 : device::DType::F32,
          table.bits ? static_cast<const void *>(table.bits) : table.f32, 0,
          maxPositions, H, added.data());
      dev.axpy(W * H, 1.0f, added.data(), x.data());
    }
    if (classToken != kNone || positions != kNone)
      store(x);
    if (preW != kNone)
      x = layerNorm(std::move(x), preW, preB, c.preIn, c.preMean, c.preRstd, W);
  } else {
    x = input.view(0, input.size());
  }
  c.layers.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i)
    x = layers[i]->forward(c.layers[i], std::move(x), c.meta);
  if (isLast()) {
    if (finalW != kNone)
      x = layerNorm(std::move(x), finalW, finalB, c.finalIn, c.finalMean,
                    c.finalRstd, W);
    if (classToken != kNone) { // the class token's rows are dropped
      Tensor kept = empty(rows * H);
      copyRows(kept, firstRows(rows), x, c.patchRow, H);
      x = std::move(kept);
    }
    int64_t O = outHidden;
    c.last = std::move(x);
    c.y1 = empty(rows * O);
    matmul(dev, ctx.bf16, c.last.data(), parameters[proj1W].weight(),
           c.y1.data(), rows, H, O);
    dev.addBias(c.y1.data(), vectorOf(parameters[proj1B]).data(), rows, O);
    store(c.y1);
    if (proj2W == kNone) { // projector "linear"
      x = c.y1.view(0, c.y1.size());
    } else {
      c.z = empty(rows * O);
      dev.geluForward(device::DType::F32, c.y1.data(), device::DType::F32,
                      c.z.data(), rows * O, projectorGelu);
      store(c.z);
      x = empty(rows * O);
      matmul(dev, ctx.bf16, c.z.data(), parameters[proj2W].weight(), x.data(),
             rows, O, O);
      dev.addBias(x.data(), vectorOf(parameters[proj2B]).data(), rows, O);
      store(x);
    }
  }
  caches[mb] = std::move(cache);
  return x;
}

Tensor EncoderStage::layerNorm(Tensor x, size_t w, size_t b, Tensor &in,
                               Tensor &mean, Tensor &rstd, int64_t rows) {
  const int64_t H = hiddenSize;
  Tensor y = empty(rows * H);
  mean = empty(rows);
  rstd = empty(rows);
  ctx.dev->layernormForward(
      x.data(), vectorOf(parameters[w]).data(), vectorOf(parameters[b]).data(),
      device::DType::F32, y.data(), mean.data(), rstd.data(), rows, H, normEps);
  store(y);
  in = std::move(x);
  return y;
}

Tensor EncoderStage::layerNormBackward(const Tensor &dy, size_t w, size_t b,
                                       const Tensor &in, const Tensor &mean,
                                       const Tensor &rstd, int64_t rows) {
  Tensor dx = empty(rows * hiddenSize);
  ctx.dev->layernormBackward(
      device::DType::F32, in.data(), vectorOf(parameters[w]).data(),
      mean.data(), rstd.data(), dy.data(), dx.data(), parameters[w].grad.data(),
      parameters[b].grad.data(), rows, hiddenSize);
  return dx;
}

Tensor EncoderStage::backward(int64_t mb, const Tensor &gradOutput) {
  Device &dev = *ctx.dev;
  auto it = caches.find(mb);
  if (it == caches.end())
    throw std::logic_error("encoder backward of microbatch " +
                           std::to_string(mb) + " before its forward");
  Cache &c = *it->second;
  int64_t rows = c.rows, W = c.wide, H = hiddenSize;
  Tensor dx = gradOutput.view(0, gradOutput.size());
  if (isLast()) {
    int64_t O = outHidden;
    auto &P = parameters;
    Tensor dy1;
    if (proj2W == kNone) {
      dy1 = std::move(dx);
    } else {
      dev.biasBackward(dx.data(), P[proj2B].grad.data(), rows, O);
      Tensor dz = empty(rows * O);
      matmulBackward(dev, ctx.bf16, c.z.data(), P[proj2W].weight(), dx.data(),
                     dz.data(), weightGrad(P[proj2W]), rows, O, O);
      dy1 = empty(rows * O);
      dev.geluBackward(device::DType::F32, c.y1.data(), dz.data(), dy1.data(),
                       rows * O, projectorGelu);
    }
    dev.biasBackward(dy1.data(), P[proj1B].grad.data(), rows, O);
    dx = empty(rows * H);
    matmulBackward(dev, ctx.bf16, c.last.data(), P[proj1W].weight(), dy1.data(),
                   dx.data(), weightGrad(P[proj1W]), rows, H, O);
    if (classToken != kNone) { // the dropped rows get no gradient
      Tensor wide = ops::zeros(W * H);
      copyRows(wide, c.patchRow, dx, firstRows(rows), H);
      dx = std::move(wide);
    }
    std::vector<size_t> done = {proj1W, proj1B};
    if (proj2W != kNone)
      done.insert(done.end(), {proj2W, proj2B});
    if (finalW != kNone) {
      dx = layerNormBackward(dx, finalW, finalB, c.finalIn, c.finalMean,
                             c.finalRstd, W);
      done.insert(done.end(), {finalW, finalB});
    }
    gradsDone(done);
  }
  // On the first stage, the backward stops below the lowest layer that has
  // something trainable at or under it: a frozen body (LLaVA's vision
  // tower) costs no backward at all.
  if (isFirst() && frozenBelow > 0) {
    std::vector<size_t> skipped;
    for (size_t l = 0; l < static_cast<size_t>(frozenBelow); ++l) {
      std::vector<size_t> indices = layers[l]->paramIndices();
      skipped.insert(skipped.end(), indices.begin(), indices.end());
    }
    for (size_t l = layers.size(); l-- > static_cast<size_t>(frozenBelow);) {
      dx = layers[l]->backward(c.layers[l], dx, c.meta);
      gradsDone(layers[l]->paramIndices());
    }
    std::vector<size_t> bottom = bottomParams();
    skipped.insert(skipped.end(), bottom.begin(), bottom.end());
    gradsDone(skipped);
    caches.erase(it);
    return Tensor();
  }
  dx = layersBackward(c.layers, std::move(dx), c.meta);
  if (isFirst()) {
    if (preW != kNone)
      dx = layerNormBackward(dx, preW, preB, c.preIn, c.preMean, c.preRstd, W);
    if (positions != kNone) {
      const device::TokenGroups groups =
          device::TokenGroups::of(c.position.data(), W, 0, maxPositions);
      Tensor deviceGroups = indices(groups.packed);
      dev.embeddingBackward(groups.view(deviceGroups.data<int64_t>()),
                            dx.data(), H, parameters[positions].grad.data());
    }
    if (classToken != kNone) {
      const int64_t S = static_cast<int64_t>(c.classRow.size());
      Tensor tokenRows = empty(S * H), patchRows = empty(rows * H);
      copyRows(tokenRows, firstRows(S), dx, c.classRow, H);
      dev.biasBackward(tokenRows.data(), parameters[classToken].grad.data(), S,
                       H);
      copyRows(patchRows, firstRows(rows), dx, c.patchRow, H);
      dx = std::move(patchRows);
    }
    if (patchB != kNone)
      dev.biasBackward(dx.data(), parameters[patchB].grad.data(), rows, H);
    if (rows > 0 && !parameters[patchW].frozen)
      gemm(dev, ctx.bf16, true, false, featureDim, H, rows, 1.0f,
           c.input.data(), dx.data(), 1.0f, parameters[patchW].grad.data());
    gradsDone(bottomParams());
    dx = Tensor();
  }
  caches.erase(it);
  return dx;
}

} // namespace mimo::exec
