//===- Model.cpp - A stage's parameters in flat buffers -------------------===//

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

Stage::Stage(StageContext context) : ctx(std::move(context)) {}
Stage::~Stage() = default;

Tensor Stage::layersBackward(std::vector<LayerCache> &caches, Tensor dx,
                             const LayerMeta &meta) {
  for (size_t i = layers.size(); i-- > 0;) {
    dx = layers[i]->backward(caches[i], dx, meta);
    gradsDone(layers[i]->paramIndices());
  }
  return dx;
}

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

void Stage::buildParameters(const std::vector<ParamSpec> &specs,
                            const ModuleConfig &module) {
  // Expert parallelism: this rank's block of each sparse layer's experts.
  const int64_t perRank =
      ctx.ep > 1 ? module.moe.experts / ctx.ep : module.moe.experts;
  for (const ParamSpec &spec : specs) {
    const int64_t expert = spec.expert ? moeExpertOf(spec.local) : -1;
    if (expert >= 0 && expert / perRank != ctx.epRank)
      continue; // another ep rank's
    ParamBlock block = blockOf(spec, ctx.tp, ctx.tpRank, ctx.etp);
    Param p;
    p.name = spec.name();
    p.rowBegin = block.rowBegin;
    p.rowEnd = block.rowEnd;
    p.colBegin = block.colBegin;
    p.colEnd = block.colEnd;
    p.globalRows = spec.rows;
    p.globalCols = spec.cols;
    p.replicatedOverTp = spec.layout == ParamLayout::Replicated;
    p.partialOverTp = spec.partialOverTp && p.replicatedOverTp;
    p.frozen = module.frozen(spec.local);
    p.expert = expert >= 0 && ctx.expertsApart;
    parameters.push_back(std::move(p));
    initialValues.push_back(mimo::initialValues(ctx.seed, spec, block));
  }
  finalizeParameters();
}

size_t Stage::indexOf(const std::string &local) const {
  for (size_t i = 0; i < parameters.size(); ++i) {
    const std::string &name = parameters[i].name;
    if (name.size() > local.size() &&
        name.compare(name.size() - local.size(), local.size(), local) == 0 &&
        name[name.size() - local.size() - 1] == '.')
      return i;
  }
  throw std::logic_error("the stage has no parameter '" + local + "'");
}

void Stage::finalizeParameters() {
  // Flat layout: TP-partial replicated, other replicated, sharded,
  // experts (apart), frozen; each parameter at a multiple of 64 values
  // (256 bytes, what GEMM libraries align to), the padding zero in every
  // buffer (AdamW keeps it zero).
  auto group = [](const Param &p) {
    return p.frozen             ? 4
           : p.partialOverTp    ? 0
           : p.expert           ? 3
           : p.replicatedOverTp ? 1
                                : 2;
  };
  auto aligned = [](int64_t n) { return (n + 63) / 64 * 64; };
  std::vector<int64_t> offset(parameters.size());
  FlatParams &f = flatParams;
  int64_t at = 0, scratch = 0;
  for (int g = 0; g < 5; ++g) {
    for (size_t i = 0; i < parameters.size(); ++i)
      if (group(parameters[i]) == g) {
        offset[i] = at;
        at += aligned(parameters[i].size());
        if (g == 4)
          scratch = std::max(scratch, aligned(parameters[i].size()));
      }
    if (g == 0)
      f.tpPartial = at;
    if (g == 1)
      f.replicated = at;
    if (g == 2)
      f.experts = at;
    if (g == 3)
      f.trainable = at;
  }
  f.total = at;
  std::vector<float> values(static_cast<size_t>(at), 0.0f);
  for (size_t i = 0; i < parameters.size(); ++i)
    std::copy(initialValues[i].begin(), initialValues[i].end(),
              values.begin() + offset[i]);
  f.values = Tensor::fromHost(values);
  // Frozen parameters' gradients land in one scratch after the trainable
  // ones (the weight GEMMs still write them; nothing reads them).
  f.grads = zeros(f.trainable + scratch);
  if (!ctx.shardedMoments) {
    f.m = zeros(f.trainable);
    f.v = zeros(f.trainable);
  }
  if (ctx.bf16)
    f.working = Tensor::empty(at, device::DType::BF16);
  for (size_t i = 0; i < parameters.size(); ++i) {
    Param &p = parameters[i];
    p.value = f.values.view(offset[i], p.size());
    p.work = (ctx.bf16 ? f.working : f.values).view(offset[i], p.size());
    if (p.frozen) {
      p.grad = f.grads.view(f.trainable, p.size());
    } else {
      p.grad = f.grads.view(offset[i], p.size());
      if (!ctx.shardedMoments) {
        p.m = f.m.view(offset[i], p.size());
        p.v = f.v.view(offset[i], p.size());
      }
    }
    p.flatBegin = offset[i];
    p.flatEnd = offset[i] + aligned(p.size());
  }
  initialValues.clear();
  refreshWorking();
}

void Stage::refreshWorking() {
  if (!ctx.bf16)
    return;
  ctx.dev->convert(device::DType::F32, flatParams.values.data(),
                   device::DType::BF16, flatParams.working.raw(),
                   flatParams.total);
}

Tensor Stage::vectorOf(const Param &p) const {
  if (p.work.dtype() != device::DType::BF16)
    return p.work.view(0, p.work.size());
  return ops::unpackBf16(*ctx.dev, p.work);
}

} // namespace mimo::exec
