//===- Model.cpp - Encoder and language-model pipeline stages -------------===//

#include "runtime/exec/Model.h"

#include "runtime/core/Sharding.h"
#include "runtime/exec/Random.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace mimo::exec {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace {

/// Y[M,N] = X[M,K] · W[K,N] (+ beta Y; Y is not read when beta is 0).
void matmul(Device &dev, const float *x, const float *w, float *y, int64_t M,
            int64_t K, int64_t N, float beta = 0.0f) {
  dev.gemm(false, false, M, N, K, 1.0f, x, w, beta, y);
}

/// dX[M,K] (+)= dY[M,N] · W[K,N]^T and dW[K,N] += X^T · dY.
void matmulBackward(Device &dev, const float *x, const float *w,
                    const float *dy, float *dx, float *dw, int64_t M, int64_t K,
                    int64_t N, float dxBeta = 0.0f) {
  if (dx)
    dev.gemm(false, true, M, K, N, 1.0f, dy, w, dxBeta, dx);
  dev.gemm(true, false, K, N, M, 1.0f, x, dy, 1.0f, dw);
}

/// Buffers that are written whole before they are read, and buffers that
/// are accumulated into.
Tensor empty(int64_t n) { return Tensor::empty(n); }
Tensor zeros(int64_t n, device::DType type = device::DType::F32) {
  return Tensor::zeros(n, type);
}

/// Host index arrays (positions, segments, ids, row maps) on the device.
Tensor indices(const std::vector<int64_t> &host) {
  return Tensor::fromHost(host);
}

/// Equal-piece collectives over a group (identity for one member).
Tensor gatherRows(comm::Comm &comm, const std::vector<int64_t> &group,
                  const Tensor &local) {
  if (group.size() <= 1)
    return local.clone();
  std::vector<int64_t> counts(group.size(), local.size());
  Tensor out = empty(local.size() * static_cast<int64_t>(group.size()));
  comm.allGatherV(group, local.data(), counts, out.data());
  return out;
}

Tensor scatterRows(comm::Comm &comm, const std::vector<int64_t> &group,
                   const Tensor &full) {
  if (group.size() <= 1)
    return full.clone();
  int64_t piece = full.size() / static_cast<int64_t>(group.size());
  std::vector<int64_t> counts(group.size(), piece);
  Tensor out = empty(piece);
  comm.reduceScatterV(group, full.data(), counts, out.data());
  return out;
}

void reduceAll(comm::Comm &comm, const std::vector<int64_t> &group, Tensor &x) {
  if (group.size() > 1)
    comm.allReduceSum(group, x.data(), static_cast<int64_t>(x.size()));
}

} // namespace

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

void Stage::buildParameters(const std::vector<ParamSpec> &specs) {
  for (const ParamSpec &spec : specs) {
    ParamBlock block = blockOf(spec, ctx.tp, ctx.tpRank);
    Param p;
    p.name = spec.name();
    p.rowBegin = block.rowBegin;
    p.rowEnd = block.rowEnd;
    p.colBegin = block.colBegin;
    p.colEnd = block.colEnd;
    p.globalRows = spec.rows;
    p.globalCols = spec.cols;
    p.replicatedOverTp = spec.layout == ParamLayout::Replicated;
    p.partialUnderSp = spec.partialUnderSp && p.replicatedOverTp;
    int64_t rows = block.rowEnd - block.rowBegin;
    int64_t cols = block.colEnd - block.colBegin;
    float scale = spec.scale > 0
                      ? spec.scale
                      : 1.0f / std::sqrt(static_cast<float>(spec.rows));
    std::vector<float> value(static_cast<size_t>(rows * cols));
    uint64_t key = combine(combine(ctx.seed, hashString(spec.module)),
                           hashString(spec.local));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        float element = spec.init == ParamInit::Ones ? 1.0f : 0.0f;
        if (spec.init == ParamInit::Weight)
          element =
              scale *
              symmetricUnit(combine(
                  key, static_cast<uint64_t>((block.rowBegin + i) * spec.cols +
                                             block.colBegin + j)));
        value[static_cast<size_t>(i * cols + j)] = element;
      }
    parameters.push_back(std::move(p));
    initialValues.push_back(std::move(value));
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
  // Flat layout: SP-partial replicated, other replicated, sharded; each
  // parameter at a multiple of 64 values (256 bytes, what GEMM libraries
  // align to), the padding zero in every buffer (AdamW keeps it zero).
  auto group = [](const Param &p) {
    return p.partialUnderSp ? 0 : p.replicatedOverTp ? 1 : 2;
  };
  auto aligned = [](int64_t n) { return (n + 63) / 64 * 64; };
  std::vector<int64_t> offset(parameters.size());
  FlatParams &f = flatParams;
  int64_t at = 0;
  for (int g = 0; g < 3; ++g) {
    for (size_t i = 0; i < parameters.size(); ++i)
      if (group(parameters[i]) == g) {
        offset[i] = at;
        at += aligned(parameters[i].size());
      }
    if (g == 0)
      f.spPartial = at;
    if (g == 1)
      f.replicated = at;
  }
  f.total = at;
  std::vector<float> values(static_cast<size_t>(at), 0.0f);
  for (size_t i = 0; i < parameters.size(); ++i)
    std::copy(initialValues[i].begin(), initialValues[i].end(),
              values.begin() + offset[i]);
  f.values = Tensor::fromHost(values);
  f.grads = zeros(at);
  f.m = zeros(at);
  f.v = zeros(at);
  for (size_t i = 0; i < parameters.size(); ++i) {
    Param &p = parameters[i];
    p.value = f.values.view(offset[i], p.size());
    p.grad = f.grads.view(offset[i], p.size());
    p.m = f.m.view(offset[i], p.size());
    p.v = f.v.view(offset[i], p.size());
  }
  initialValues.clear();
}

//===----------------------------------------------------------------------===//
// Transformer layer (both modules)
//===----------------------------------------------------------------------===//

/// Token metadata of one layer call; the index arrays on the device.
struct LayerMeta {
  int64_t localRows = 0, cpRows = 0, keyRows = 0;
  Tensor qpos, qseg, kpos, kseg;
  const int64_t *qposData() const { return qpos.data<int64_t>(); }
};

struct LayerCache {
  Tensor x, mean1, rstd1, hf, q, k, v, keys, values, a, lse, x1, mean2, rstd2,
      h2f, g, u, s;
};

class TransformerLayer {
public:
  /// language: RMSNorm, RoPE, causal, SwiGLU; encoder: LayerNorm, no RoPE,
  /// bidirectional within a sample, GeLU MLP.
  TransformerLayer(Stage &owner, std::vector<Param> &params, bool language,
                   size_t norm1, size_t norm1b, size_t wq, size_t wk, size_t wv,
                   size_t wo, size_t norm2, size_t norm2b, size_t w1, size_t w3,
                   size_t w2, int64_t hidden, int64_t heads, int64_t ffn,
                   const StageContext &ctx)
      : params(params), language(language), norm1(norm1), norm1b(norm1b),
        wq(wq), wk(wk), wv(wv), wo(wo), norm2(norm2), norm2b(norm2b), w1(w1),
        w3(w3), w2(w2), H(hidden), ctx(ctx) {
    (void)owner;
    headsLocal = heads / ctx.tp;
    headDim = hidden / heads;
    Hl = headsLocal * headDim;
    Fl = ffn / ctx.tp;
  }

  Tensor forward(LayerCache &c, Tensor x, const LayerMeta &m) {
    Device &dev = *ctx.dev;
    comm::Comm &comm = *ctx.comm;
    int64_t Tl = m.localRows, Tc = m.cpRows, Tk = m.keyRows;
    bool sp = ctx.sequenceParallel && ctx.tp > 1;
    c.x = std::move(x);
    Tensor h = norm(c.x, norm1, norm1b, c.mean1, c.rstd1, Tl);
    c.hf = sp ? gatherRows(comm, ctx.tpGroup, h) : std::move(h);
    c.q = empty(Tc * Hl);
    c.k = empty(Tc * Hl);
    c.v = empty(Tc * Hl);
    matmul(dev, c.hf.data(), P(wq), c.q.data(), Tc, H, Hl);
    matmul(dev, c.hf.data(), P(wk), c.k.data(), Tc, H, Hl);
    matmul(dev, c.hf.data(), P(wv), c.v.data(), Tc, H, Hl);
    if (language) {
      dev.rope(c.q.data(), m.qposData(), Tc, headsLocal, headDim, false);
      dev.rope(c.k.data(), m.qposData(), Tc, headsLocal, headDim, false);
    }
    if (ctx.cp > 1) {
      c.keys = gatherRows(comm, ctx.cpGroup, c.k);
      c.values = gatherRows(comm, ctx.cpGroup, c.v);
    }
    const Tensor &K = ctx.cp > 1 ? c.keys : c.k;
    const Tensor &V = ctx.cp > 1 ? c.values : c.v;
    c.a = empty(Tc * Hl);
    c.lse = empty(headsLocal * Tc);
    if (Tc > 0)
      dev.attentionForward(c.q.data(), K.data(), V.data(), c.a.data(),
                           c.lse.data(), m.qpos.data<int64_t>(),
                           m.qseg.data<int64_t>(), m.kpos.data<int64_t>(),
                           m.kseg.data<int64_t>(), Tc, Tk, headsLocal, headDim,
                           language);
    Tensor o = empty(Tc * H);
    matmul(dev, c.a.data(), P(wo), o.data(), Tc, Hl, H);
    o = rowParallelOut(std::move(o), sp);
    c.x1 = c.x.clone();
    dev.axpy(o.size(), 1.0f, o.data(), c.x1.data());

    Tensor h2 = norm(c.x1, norm2, norm2b, c.mean2, c.rstd2, Tl);
    c.h2f = sp ? gatherRows(comm, ctx.tpGroup, h2) : std::move(h2);
    c.g = empty(Tc * Fl);
    matmul(dev, c.h2f.data(), P(w1), c.g.data(), Tc, H, Fl);
    c.s = empty(Tc * Fl);
    if (language) {
      c.u = empty(Tc * Fl);
      matmul(dev, c.h2f.data(), P(w3), c.u.data(), Tc, H, Fl);
      dev.swigluForward(c.g.data(), c.u.data(), c.s.data(), Tc * Fl);
    } else {
      dev.geluForward(c.g.data(), c.s.data(), Tc * Fl);
    }
    Tensor mlp = empty(Tc * H);
    matmul(dev, c.s.data(), P(w2), mlp.data(), Tc, Fl, H);
    mlp = rowParallelOut(std::move(mlp), sp);
    Tensor out = c.x1.clone();
    dev.axpy(out.size(), 1.0f, mlp.data(), out.data());
    return out;
  }

  Tensor backward(LayerCache &c, const Tensor &dout, const LayerMeta &m) {
    Device &dev = *ctx.dev;
    comm::Comm &comm = *ctx.comm;
    int64_t Tl = m.localRows, Tc = m.cpRows, Tk = m.keyRows;
    bool sp = ctx.sequenceParallel && ctx.tp > 1;
    // MLP.
    Tensor dmf = sp ? gatherRows(comm, ctx.tpGroup, dout) : dout.clone();
    Tensor ds = empty(Tc * Fl);
    matmulBackward(dev, c.s.data(), P(w2), dmf.data(), ds.data(), G(w2), Tc, Fl,
                   H);
    Tensor dg = empty(Tc * Fl), dh2f = empty(Tc * H);
    if (language) {
      Tensor du = empty(Tc * Fl);
      dev.swigluBackward(c.g.data(), c.u.data(), ds.data(), dg.data(),
                         du.data(), Tc * Fl);
      matmulBackward(dev, c.h2f.data(), P(w3), du.data(), dh2f.data(), G(w3),
                     Tc, H, Fl);
    } else {
      dev.geluBackward(c.g.data(), ds.data(), dg.data(), Tc * Fl);
    }
    matmulBackward(dev, c.h2f.data(), P(w1), dg.data(), dh2f.data(), G(w1), Tc,
                   H, Fl, language ? 1.0f : 0.0f);
    Tensor dh2 = columnParallelIn(std::move(dh2f), sp);
    Tensor dx1 = dout.clone();
    normBackward(c.x1, norm2, norm2b, c.mean2, c.rstd2, dh2, dx1, Tl);
    // Attention.
    Tensor dof = sp ? gatherRows(comm, ctx.tpGroup, dx1) : dx1.clone();
    Tensor da = empty(Tc * Hl);
    matmulBackward(dev, c.a.data(), P(wo), dof.data(), da.data(), G(wo), Tc, Hl,
                   H);
    const Tensor &K = ctx.cp > 1 ? c.keys : c.k;
    const Tensor &V = ctx.cp > 1 ? c.values : c.v;
    // Without queries no key gets a gradient.
    Tensor dq = empty(Tc * Hl);
    Tensor dK = Tc > 0 ? empty(Tk * Hl) : zeros(Tk * Hl);
    Tensor dV = Tc > 0 ? empty(Tk * Hl) : zeros(Tk * Hl);
    if (Tc > 0)
      dev.attentionBackward(
          c.q.data(), K.data(), V.data(), c.a.data(), c.lse.data(), da.data(),
          dq.data(), dK.data(), dV.data(), m.qpos.data<int64_t>(),
          m.qseg.data<int64_t>(), m.kpos.data<int64_t>(),
          m.kseg.data<int64_t>(), Tc, Tk, headsLocal, headDim, language);
    Tensor dk = ctx.cp > 1 ? scatterRows(comm, ctx.cpGroup, dK) : std::move(dK);
    Tensor dv = ctx.cp > 1 ? scatterRows(comm, ctx.cpGroup, dV) : std::move(dV);
    if (language) {
      dev.rope(dq.data(), m.qposData(), Tc, headsLocal, headDim, true);
      dev.rope(dk.data(), m.qposData(), Tc, headsLocal, headDim, true);
      // The saved q and k are rotated; the weight gradients need the
      // inputs, which hf holds, so nothing else to undo.
    }
    Tensor dhf = empty(Tc * H);
    matmulBackward(dev, c.hf.data(), P(wq), dq.data(), dhf.data(), G(wq), Tc, H,
                   Hl);
    matmulBackward(dev, c.hf.data(), P(wk), dk.data(), dhf.data(), G(wk), Tc, H,
                   Hl, 1.0f);
    matmulBackward(dev, c.hf.data(), P(wv), dv.data(), dhf.data(), G(wv), Tc, H,
                   Hl, 1.0f);
    Tensor dh = columnParallelIn(std::move(dhf), sp);
    Tensor dx = std::move(dx1);
    normBackward(c.x, norm1, norm1b, c.mean1, c.rstd1, dh, dx, Tl);
    c = LayerCache();
    return dx;
  }

private:
  float *P(size_t i) { return params[i].value.data(); }
  float *G(size_t i) { return params[i].grad.data(); }

  Tensor norm(const Tensor &x, size_t w, size_t b, Tensor &mean, Tensor &rstd,
              int64_t rows) {
    Tensor y = empty(rows * H);
    rstd = empty(rows);
    if (language) {
      ctx.dev->rmsnormForward(x.data(), P(w), y.data(), rstd.data(), rows, H);
    } else {
      mean = empty(rows);
      ctx.dev->layernormForward(x.data(), P(w), P(b), y.data(), mean.data(),
                                rstd.data(), rows, H);
    }
    return y;
  }

  /// dx += norm backward of dy.
  void normBackward(const Tensor &x, size_t w, size_t b, const Tensor &mean,
                    const Tensor &rstd, const Tensor &dy, Tensor &dx,
                    int64_t rows) {
    Tensor d = empty(rows * H);
    if (language)
      ctx.dev->rmsnormBackward(x.data(), P(w), rstd.data(), dy.data(), d.data(),
                               G(w), rows, H);
    else
      ctx.dev->layernormBackward(x.data(), P(w), mean.data(), rstd.data(),
                                 dy.data(), d.data(), G(w), G(b), rows, H);
    ctx.dev->axpy(d.size(), 1.0f, d.data(), dx.data());
  }

  /// The output of a row-parallel linear: partial sums over TP, reduced
  /// (all-reduce) or reduce-scattered over the sequence (SP).
  Tensor rowParallelOut(Tensor partial, bool sp) {
    if (sp)
      return scatterRows(*ctx.comm, ctx.tpGroup, partial);
    reduceAll(*ctx.comm, ctx.tpGroup, partial);
    return partial;
  }
  /// The input gradient of a column-parallel linear (the adjoint of its
  /// identity / all-gather input).
  Tensor columnParallelIn(Tensor partial, bool sp) {
    return rowParallelOut(std::move(partial), sp);
  }

  std::vector<Param> &params;
  bool language;
  size_t norm1, norm1b, wq, wk, wv, wo, norm2, norm2b, w1, w3, w2;
  int64_t H, headsLocal = 1, headDim = 1, Hl = 1, Fl = 1;
  const StageContext &ctx;
};

Stage::Stage(StageContext context) : ctx(std::move(context)) {}
Stage::~Stage() = default;

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
      stageParameters(module, outputHidden, false, ctx.pp, ctx.ppRank));
  if (isFirst()) {
    patchW = indexOf("patch.weight");
    patchB = indexOf("patch.bias");
  }
  auto [begin, end] = stageLayers(module.numLayers, ctx.pp, ctx.ppRank);
  for (int64_t l = begin; l < end; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    size_t fc1 = indexOf(p + "fc1");
    layers.push_back(std::make_unique<TransformerLayer>(
        *this, parameters, false, indexOf(p + "ln1.weight"),
        indexOf(p + "ln1.bias"), indexOf(p + "wq"), indexOf(p + "wk"),
        indexOf(p + "wv"), indexOf(p + "wo"), indexOf(p + "ln2.weight"),
        indexOf(p + "ln2.bias"), fc1, fc1, indexOf(p + "fc2"), hiddenSize,
        module.numHeads, module.ffnHiddenSize, ctx));
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
  c.meta.qpos = zeros(rows, device::DType::I64);
  c.meta.kpos = c.meta.qpos.view(0, rows);
  c.meta.qseg = indices(segment);
  c.meta.kseg = c.meta.qseg.view(0, rows);
  int64_t H = hiddenSize;
  Tensor x;
  if (isFirst()) {
    c.input = input.view(0, input.size());
    x = empty(rows * H);
    matmul(dev, input.data(), parameters[patchW].value.data(), x.data(), rows,
           featureDim, H);
    dev.addBias(x.data(), parameters[patchB].value.data(), rows, H);
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
    matmul(dev, c.last.data(), parameters[proj1W].value.data(), c.y1.data(),
           rows, H, O);
    dev.addBias(c.y1.data(), parameters[proj1B].value.data(), rows, O);
    c.z = empty(rows * O);
    dev.geluForward(c.y1.data(), c.z.data(), rows * O);
    x = empty(rows * O);
    matmul(dev, c.z.data(), parameters[proj2W].value.data(), x.data(), rows, O,
           O);
    dev.addBias(x.data(), parameters[proj2B].value.data(), rows, O);
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
    matmulBackward(dev, c.z.data(), P[proj2W].value.data(), dx.data(),
                   dz.data(), P[proj2W].grad.data(), rows, O, O);
    Tensor dy1 = empty(rows * O);
    dev.geluBackward(c.y1.data(), dz.data(), dy1.data(), rows * O);
    dev.biasBackward(dy1.data(), P[proj1B].grad.data(), rows, O);
    dx = empty(rows * H);
    matmulBackward(dev, c.last.data(), P[proj1W].value.data(), dy1.data(),
                   dx.data(), P[proj1W].grad.data(), rows, H, O);
  }
  for (size_t i = layers.size(); i-- > 0;)
    dx = layers[i]->backward(c.layers[i], dx, c.meta);
  if (isFirst()) {
    dev.biasBackward(dx.data(), parameters[patchB].grad.data(), rows, H);
    if (rows > 0)
      dev.gemm(true, false, featureDim, H, rows, 1.0f, c.input.data(),
               dx.data(), 1.0f, parameters[patchW].grad.data());
    dx = Tensor();
  }
  caches.erase(it);
  return dx;
}

//===----------------------------------------------------------------------===//
// Language model
//===----------------------------------------------------------------------===//

struct LanguageStage::Cache {
  LayerMeta meta;
  LaneTokens tokens;
  std::vector<LayerCache> layers;
  // Last stage.
  Tensor xf, rstdF, hNf, logits, gmax, gsum, scale, targets;
};

LanguageStage::LanguageStage(const ModuleConfig &module,
                             const ShardTopology &shard, StageContext context)
    : Stage(std::move(context)), hiddenSize(module.hiddenSize),
      vocab(module.vocabSize), shardTopology(shard) {
  vocabLocal = vocab / ctx.tp;
  buildParameters(stageParameters(module, hiddenSize,
                                  ctx.sequenceParallel && ctx.tp > 1, ctx.pp,
                                  ctx.ppRank));
  if (isFirst())
    embedding = indexOf("embedding");
  auto [begin, end] = stageLayers(module.numLayers, ctx.pp, ctx.ppRank);
  for (int64_t l = begin; l < end; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    size_t n1 = indexOf(p + "attn_norm"), n2 = indexOf(p + "mlp_norm");
    layers.push_back(std::make_unique<TransformerLayer>(
        *this, parameters, true, n1, n1, indexOf(p + "wq"), indexOf(p + "wk"),
        indexOf(p + "wv"), indexOf(p + "wo"), n2, n2, indexOf(p + "gate"),
        indexOf(p + "up"), indexOf(p + "down"), hiddenSize, module.numHeads,
        module.ffnHiddenSize, ctx));
  }
  if (isLast()) {
    finalNorm = indexOf("final_norm");
    head = indexOf("head");
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
  ctx.dev->embeddingForward(deviceIds.data<int64_t>(), Tc,
                            parameters[embedding].value.data(), vb,
                            vb + vocabLocal, H, E.data());
  reduceAll(*ctx.comm, ctx.tpGroup, E);
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
                              Tensor input, double invN, Tensor *lossSum) {
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
  }
  for (int64_t t : c.tokens.keys) {
    kpos.push_back(lane.positions[static_cast<size_t>(t)]);
    kseg.push_back(lane.segments[static_cast<size_t>(t)]);
  }
  m.qpos = indices(qpos);
  m.qseg = indices(qseg);
  m.kpos = indices(kpos);
  m.kseg = indices(kseg);
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
  Tensor hN = empty(Tl * H);
  c.rstdF = empty(Tl);
  dev.rmsnormForward(c.xf.data(), parameters[finalNorm].value.data(), hN.data(),
                     c.rstdF.data(), Tl, H);
  c.hNf = sp ? gatherRows(comm, ctx.tpGroup, hN) : std::move(hN);
  c.logits = empty(Tc * Vl);
  matmul(dev, c.hNf.data(), parameters[head].value.data(), c.logits.data(), Tc,
         H, Vl);
  std::vector<int64_t> targets(static_cast<size_t>(Tc));
  std::vector<float> scale(static_cast<size_t>(Tc));
  for (int64_t i = 0; i < Tc; ++i) {
    size_t t = static_cast<size_t>(c.tokens.cp[static_cast<size_t>(i)]);
    targets[static_cast<size_t>(i)] = lane.labels[t];
    scale[static_cast<size_t>(i)] = static_cast<float>(lane.mask[t] * invN);
  }
  c.targets = indices(targets);
  c.scale = Tensor::fromHost(scale);
  c.gmax = empty(Tc);
  dev.crossEntropyRowMax(c.logits.data(), Tc, Vl, c.gmax.data());
  if (ctx.tpGroup.size() > 1)
    comm.allReduceMax(ctx.tpGroup, c.gmax.data(), Tc);
  Tensor sums = empty(2 * Tc);
  dev.crossEntropySums(c.logits.data(), c.targets.data<int64_t>(), Tc, Vl,
                       ctx.tpRank * Vl, c.gmax.data(), sums.data(),
                       sums.data() + Tc);
  reduceAll(comm, ctx.tpGroup, sums);
  c.gsum = sums.view(0, Tc);
  if (ctx.tpRank == 0 && lossSum) {
    // Σ over unmasked tokens of the per-token loss, times 1/N, on the
    // device: the scale is mask / N, nonzero exactly where the mask is.
    Tensor loss = empty(Tc);
    dev.crossEntropyLoss(c.gmax.data(), c.gsum.data(), sums.data() + Tc, Tc,
                         loss.data());
    dev.maskedSumInto(loss.data(), c.scale.data(), Tc, invN,
                      lossSum->data<double>());
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
  int64_t H = hiddenSize, Tl = m.localRows, Tc = m.cpRows, Vl = vocabLocal;
  Tensor dx;
  if (isLast()) {
    bool sp = ctx.sequenceParallel && ctx.tp > 1;
    Tensor dlogits = empty(Tc * Vl);
    dev.crossEntropyBackward(c.logits.data(), c.targets.data<int64_t>(), Tc, Vl,
                             ctx.tpRank * Vl, c.gmax.data(), c.gsum.data(),
                             c.scale.data(), dlogits.data());
    Tensor dhNf = empty(Tc * H);
    matmulBackward(dev, c.hNf.data(), parameters[head].value.data(),
                   dlogits.data(), dhNf.data(), parameters[head].grad.data(),
                   Tc, H, Vl);
    Tensor dhN;
    if (sp) {
      dhN = scatterRows(comm, ctx.tpGroup, dhNf);
    } else {
      reduceAll(comm, ctx.tpGroup, dhNf);
      dhN = std::move(dhNf);
    }
    dx = empty(Tl * H);
    dev.rmsnormBackward(c.xf.data(), parameters[finalNorm].value.data(),
                        c.rstdF.data(), dhN.data(), dx.data(),
                        parameters[finalNorm].grad.data(), Tl, H);
  } else {
    if (!gradOutput)
      throw std::logic_error("language backward without an output gradient");
    dx = gradOutput->view(0, gradOutput->size());
  }
  for (size_t i = layers.size(); i-- > 0;)
    dx = layers[i]->backward(c.layers[i], dx, m);
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
  Tensor deviceIds = indices(ids);
  ctx.dev->embeddingBackward(deviceIds.data<int64_t>(), T, full.data(), vb,
                             vb + vocabLocal, H,
                             parameters[embedding].grad.data());
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
