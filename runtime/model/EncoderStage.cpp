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

//===----------------------------------------------------------------------===//
// Encoder
//===----------------------------------------------------------------------===//

struct EncoderStage::Cache {
  int64_t rows = 0;
  LayerMeta meta;
  Tensor input;
  std::vector<LayerCache> layers;
  Tensor last, y1, z; // projection
};

EncoderStage::EncoderStage(const ModuleConfig &module, int64_t outputHidden,
                           StageContext context)
    : Stage(std::move(context)), featureDim(module.featureDim),
      hiddenSize(module.hiddenSize), outHidden(outputHidden) {
  buildParameters(
      stageParameters(module, outputHidden, false, ctx.pp, ctx.ppRank), module);
  if (isFirst()) {
    patchW = indexOf("patch.weight");
    patchB = indexOf("patch.bias");
  }
  auto [begin, end] = stageLayers(module.numLayers, ctx.pp, ctx.ppRank);
  for (int64_t l = begin; l < end; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    size_t fc1 = indexOf(p + "fc1");
    LayerBiases biases;
    if (module.bias)
      biases = {indexOf(p + "bq"),       indexOf(p + "bk"),
                indexOf(p + "bv"),       indexOf(p + "bo"),
                indexOf(p + "fc1_bias"), indexOf(p + "fc2_bias")};
    layers.push_back(std::make_unique<TransformerLayer>(
        *this, parameters, false, indexOf(p + "ln1.weight"),
        indexOf(p + "ln1.bias"), indexOf(p + "wq"), indexOf(p + "wk"),
        indexOf(p + "wv"), indexOf(p + "wo"), indexOf(p + "ln2.weight"),
        indexOf(p + "ln2.bias"), fc1, fc1, indexOf(p + "fc2"), module, ctx,
        biases));
  }
  if (isFirst()) {
    bool frozen = parameters[patchW].frozen && parameters[patchB].frozen;
    for (size_t l = 0; l < layers.size() && frozen; ++l) {
      for (size_t i : layers[l]->paramIndices())
        frozen = frozen && parameters[i].frozen;
      if (frozen)
        frozenBelow = static_cast<int64_t>(l) + 1;
    }
  }
  if (isLast()) {
    proj1W = indexOf("projection.fc1.weight");
    proj1B = indexOf("projection.fc1.bias");
    proj2W = indexOf("projection.fc2.weight");
    proj2B = indexOf("projection.fc2.bias");
  }
}

EncoderStage::~EncoderStage() = default;

void EncoderStage::dropCaches() { caches.clear(); }

Tensor EncoderStage::forward(int64_t mb, const Tensor &input,
                             const std::vector<int64_t> &segment,
                             int64_t rows) {
  Device &dev = *ctx.dev;
  auto cache = std::make_unique<Cache>();
  Cache &c = *cache;
  c.rows = rows;
  c.meta.localRows = c.meta.cpRows = c.meta.keyRows = rows;
  // Bidirectional within a sample: every position 0, segments = samples.
  std::vector<int64_t> positions(static_cast<size_t>(rows), 0);
  c.meta.attention =
      attentionPlan(positions, segment, positions, segment, false);
  int64_t H = hiddenSize;
  Tensor x;
  if (isFirst()) {
    c.input = input.view(0, input.size());
    x = empty(rows * H);
    matmul(dev, ctx.bf16, input.data(), parameters[patchW].weight(), x.data(),
           rows, featureDim, H);
    dev.addBias(x.data(), vectorOf(parameters[patchB]).data(), rows, H);
    store(x);
  } else {
    x = input.view(0, input.size());
  }
  c.layers.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i)
    x = layers[i]->forward(c.layers[i], std::move(x), c.meta);
  if (isLast()) {
    int64_t O = outHidden;
    c.last = std::move(x);
    c.y1 = empty(rows * O);
    matmul(dev, ctx.bf16, c.last.data(), parameters[proj1W].weight(),
           c.y1.data(), rows, H, O);
    dev.addBias(c.y1.data(), vectorOf(parameters[proj1B]).data(), rows, O);
    store(c.y1);
    c.z = empty(rows * O);
    dev.geluForward(c.y1.data(), c.z.data(), rows * O);
    store(c.z);
    x = empty(rows * O);
    matmul(dev, ctx.bf16, c.z.data(), parameters[proj2W].weight(), x.data(),
           rows, O, O);
    dev.addBias(x.data(), vectorOf(parameters[proj2B]).data(), rows, O);
    store(x);
  }
  caches[mb] = std::move(cache);
  return x;
}

Tensor EncoderStage::backward(int64_t mb, const Tensor &gradOutput) {
  Device &dev = *ctx.dev;
  auto it = caches.find(mb);
  if (it == caches.end())
    throw std::logic_error("encoder backward of microbatch " +
                           std::to_string(mb) + " before its forward");
  Cache &c = *it->second;
  int64_t rows = c.rows, H = hiddenSize;
  Tensor dx = gradOutput.view(0, gradOutput.size());
  if (isLast()) {
    int64_t O = outHidden;
    auto &P = parameters;
    dev.biasBackward(dx.data(), P[proj2B].grad.data(), rows, O);
    Tensor dz = empty(rows * O);
    matmulBackward(dev, ctx.bf16, c.z.data(), P[proj2W].weight(), dx.data(),
                   dz.data(), weightGrad(P[proj2W]), rows, O, O);
    Tensor dy1 = empty(rows * O);
    dev.geluBackward(c.y1.data(), dz.data(), dy1.data(), rows * O);
    dev.biasBackward(dy1.data(), P[proj1B].grad.data(), rows, O);
    dx = empty(rows * H);
    matmulBackward(dev, ctx.bf16, c.last.data(), P[proj1W].weight(), dy1.data(),
                   dx.data(), weightGrad(P[proj1W]), rows, H, O);
    gradsDone({proj1W, proj1B, proj2W, proj2B});
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
    skipped.push_back(patchW);
    skipped.push_back(patchB);
    gradsDone(skipped);
    caches.erase(it);
    return Tensor();
  }
  dx = layersBackward(c.layers, std::move(dx), c.meta);
  if (isFirst()) {
    dev.biasBackward(dx.data(), parameters[patchB].grad.data(), rows, H);
    if (rows > 0 && !parameters[patchW].frozen)
      gemm(dev, ctx.bf16, true, false, featureDim, H, rows, 1.0f,
           c.input.data(), dx.data(), 1.0f, parameters[patchW].grad.data());
    gradsDone({patchW, patchB});
    dx = Tensor();
  }
  caches.erase(it);
  return dx;
}

} // namespace mimo::exec
