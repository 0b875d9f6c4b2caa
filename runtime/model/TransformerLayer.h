//===- TransformerLayer.h - One transformer layer ---------------*- C++ -*-===//
//
// Internal to the model stages: the pre-norm layer both modules stack
// (language: RMSNorm, RoPE, causal attention, SwiGLU; encoder: LayerNorm,
// bidirectional attention within a sample, GeLU), forward and backward,
// with its TP, SP and CP collectives.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_MODEL_TRANSFORMERLAYER_H
#define MIMO_RUNTIME_MODEL_TRANSFORMERLAYER_H

#include "runtime/model/Model.h"
#include "runtime/model/ModelOps.h"
#include "runtime/model/MoeMlp.h"
#include "runtime/model/RingAttention.h"

#include <algorithm>
#include <array>
#include <functional>
#include <memory>

namespace mimo::exec {

using namespace ops;

/// Token metadata of one layer call; the index arrays on the device.
struct LayerMeta {
  int64_t localRows = 0, cpRows = 0, keyRows = 0;
  Tensor qpos; // of the queries (RoPE)
  /// RoPE's cosines and sines of the queries' positions, [cpRows, headDim
  /// / 2, 2] doubles (Device::ropeTable), built once for every layer.
  Tensor ropeTable;
  /// The queries against every key (all_gather), or against each CP
  /// rank's keys in turn (ring: blocks[r], RingAttention.h).
  AttentionPlan attention;
  std::vector<AttentionPlan> blocks;
  /// Sparse layers (MoeMlp.h): which of the rank's cpRows rows are a
  /// sample's tokens (padding takes no share of the routing losses), and
  /// where the microbatch's aux loss adds up (the stage's).
  std::vector<uint8_t> real;
  double *auxLoss = nullptr;
  const int64_t *qposData() const { return qpos.data<int64_t>(); }
};

/// The LoRA factors of a layer's linear layers (docs/model.md "LoRA",
/// config/Lora.h), indices into the stage's list; kNone where a linear has
/// none. Sites: the language model's q, k, v, o, gate, up, down; an
/// encoder's q, k, v, o, fc1 (at Gate) and fc2 (at Down).
struct LayerAdapters {
  static constexpr size_t kNone = static_cast<size_t>(-1);
  enum Site { Q, K, V, O, Gate, Up, Down, kSites };
  std::array<size_t, kSites> a{kNone, kNone, kNone, kNone, kNone, kNone, kNone};
  std::array<size_t, kSites> b{kNone, kNone, kNone, kNone, kNone, kNone, kNone};
  /// s: alpha / r (or alpha / sqrt(r), rslora).
  float scale = 0;
  bool has(Site site) const { return a[site] != kNone; }

  /// The factors of layer `prefix` ("layers.3.") of `module`, found by
  /// name through `indexOf`; a sparse layer's MLP takes none (its experts
  /// are not adapted).
  static LayerAdapters
  of(const ModuleConfig &module, const std::string &prefix, bool language,
     bool sparse, const std::function<size_t(const std::string &)> &indexOf) {
    LayerAdapters out;
    if (!module.lora)
      return out;
    out.scale = static_cast<float>(module.lora->scale());
    const char *language_[kSites] = {"wq",   "wk", "wv",  "wo",
                                     "gate", "up", "down"};
    const char *encoder[kSites] = {"wq", "wk", "wv", "wo", "fc1", "", "fc2"};
    for (int site = 0; site < kSites; ++site) {
      const std::string param = language ? language_[site] : encoder[site];
      const bool mlp = site == Gate || site == Up || site == Down;
      if (param.empty() || (sparse && mlp) ||
          !loraTargetOf(*module.lora, prefix + param))
        continue;
      out.a[site] = indexOf(loraAName(prefix + param));
      out.b[site] = indexOf(loraBName(prefix + param));
    }
    return out;
  }
};

/// What a layer's forward saves for its backward. Under bf16 the GEMM
/// inputs (hf, a, h2f, s), the attention's q, k, v (keys, values) and the
/// MLP's g, u are bf16 bits from the moment they are made; x and x1 are
/// fp32 until the forward ends (keep).
struct LayerCache {
  Tensor x, mean1, rstd1, hf, q, k, v, keys, values, a, lse, x1, mean2, rstd2,
      h2f, g, u, s;
  /// Each adapted linear's s·x·A (its B GEMM's input, bf16 bits under
  /// bf16).
  std::array<Tensor, LayerAdapters::kSites> lora;
  /// qk_norm: q and k before their norms (fp32) and the norms' 1/rms.
  Tensor qPre, kPre, rstdQ, rstdK;
  /// A sparse layer's MLP.
  std::unique_ptr<MoeCache> moe;
};

/// The indices of a layer's biases in the stage's list (docs/model.md:
/// `qkv_bias` q, k, v; an encoder's `bias` all six); kNone where absent.
struct LayerBiases {
  static constexpr size_t kNone = static_cast<size_t>(-1);
  size_t q = kNone, k = kNone, v = kNone, o = kNone, fc1 = kNone, fc2 = kNone;
};

class TransformerLayer {
public:
  /// language: RMSNorm, RoPE, causal, SwiGLU; encoder: LayerNorm, no RoPE,
  /// bidirectional within a sample, GeLU MLP.
  TransformerLayer(Stage &owner, std::vector<Param> &params, bool language,
                   size_t norm1, size_t norm1b, size_t wq, size_t wk, size_t wv,
                   size_t wo, size_t norm2, size_t norm2b, size_t w1, size_t w3,
                   size_t w2, const ModuleConfig &module,
                   const StageContext &ctx, LayerBiases biases = {},
                   bool recomputeAll = false, LayerAdapters adapters = {})
      : owner(owner), params(params), language(language),
        recomputeAll(recomputeAll),
        recomputeActivation(module.recompute == "selective"), norm1(norm1),
        norm1b(norm1b), wq(wq), wk(wk), wv(wv), wo(wo), norm2(norm2),
        norm2b(norm2b), w1(w1), w3(w3), w2(w2), b(biases),
        lora(std::move(adapters)), H(module.hiddenSize),
        eps(static_cast<float>(module.normEps)), ctx(ctx) {
    headsLocal = module.numHeads / ctx.tp;
    headDim = module.headDim();
    Hl = headsLocal * headDim;
    kvHeadsLocal = module.kvHeads() / ctx.tp;
    KVl = kvHeadsLocal * headDim;
    Fl = module.ffnHiddenSize / ctx.tp;
    gelu = geluOf(module.activation);
  }

  /// The language model's qk_norm (docs/model.md): per-head RMSNorms of q
  /// and k, parameters `qNorm` and `kNorm`.
  void useQkNorm(size_t qNorm, size_t kNorm) {
    qkNorm = {qNorm, kNorm};
    hasQkNorm = true;
  }
  /// A sparse layer (MoeMlp.h): its MLP is `moe`'s experts.
  void useMoe(const MoeConfig &moe, MoeParams indices) {
    moeParams = indices.all();
    sparse = std::make_unique<MoeMlp>(params, moe, std::move(indices), H, ctx);
  }

  /// The layer's output; `c` keeps what the backward reads (docs/model.md
  /// Recomputation): everything, the input alone (recompute "full"), or
  /// everything but the MLP activation's output ("selective").
  Tensor forward(LayerCache &c, Tensor x, const LayerMeta &m) {
    Tensor out = compute(c, std::move(x), m, false);
    keep(c);
    if (recomputeAll) {
      Tensor input = std::move(c.x);
      c = LayerCache();
      c.x = std::move(input);
    } else if (recomputeActivation) {
      c.s = Tensor();
      if (c.moe)
        MoeMlp::dropActivations(*c.moe);
    }
    return out;
  }

  Tensor backward(LayerCache &c, const Tensor &dout, const LayerMeta &m) {
    if (recomputeAll) {
      // The forward again, from the input it kept (bf16: packed, exactly:
      // the input is rounded already): the same kernels on the same values,
      // so the same bits, its collectives too.
      Tensor x = ctx.bf16 ? unpackBf16(*ctx.dev, c.x) : std::move(c.x);
      c = LayerCache();
      compute(c, std::move(x), m, true);
      keep(c);
    } else if (recomputeActivation && !sparse) {
      c.s = activation(c, m.cpRows); // a sparse layer's MoeMlp makes its own
    }
    return backwardFrom(c, dout, m);
  }

private:
  /// The MLP's activation of the kept gate (and up) projection: the w2
  /// GEMM's input (bf16 bits under bf16).
  Tensor activation(const LayerCache &c, int64_t Tc) const {
    Device &dev = *ctx.dev;
    Tensor s = Tensor::empty(Tc * Fl, ctx.bf16 ? device::DType::BF16
                                               : device::DType::F32);
    if (language)
      dev.swigluForward(c.g.dtype(), c.g.raw(), c.u.raw(), s.dtype(), s.raw(),
                        Tc * Fl);
    else
      dev.geluForward(c.g.dtype(), c.g.raw(), s.dtype(), s.raw(), Tc * Fl,
                      gelu);
    return s;
  }

  /// The forward; `recomputing`: again in the backward (the routing losses
  /// were counted the first time).
  Tensor compute(LayerCache &c, Tensor x, const LayerMeta &m,
                 bool recomputing) {
    int64_t Tl = m.localRows, Tc = m.cpRows;
    bool sp = ctx.sequenceParallel && ctx.tp > 1;
    c.x = std::move(x);
    c.hf = normedInput(c.x, norm1, norm1b, c.mean1, c.rstd1, Tl, sp);
    // Under bf16 q, k and v are bf16 bits as attention reads them (and the
    // backward keeps them), and so is its output, the wo GEMM's input.
    // With grouped-query attention k and v hold the rank's KV groups (and
    // so does what CP gathers); attention reads them grouped.
    c.q = queryOrKey(c, wq, b.q, m, headsLocal, LayerAdapters::Q);
    c.k = queryOrKey(c, wk, b.k, m, kvHeadsLocal, LayerAdapters::K);
    c.v = projected(c, c.hf, wv, b.v, Tc, H, KVl, LayerAdapters::V);
    if (ctx.ringCp)
      ringAttentionForward(ring(), m.blocks, c.q, c.k, c.v, Tc, c.a, c.lse);
    else
      gatheredAttention(c, m);
    c.x1 = residual(
        c.x, rowParallelLinear(c, c.a, wo, b.o, Tc, Hl, sp, LayerAdapters::O));

    c.h2f = normedInput(c.x1, norm2, norm2b, c.mean2, c.rstd2, Tl, sp);
    if (sparse) {
      c.moe = std::make_unique<MoeCache>();
      Tensor y = sparse->forward(*c.moe, c.h2f, Tc, m.real,
                                 recomputing ? nullptr : m.auxLoss);
      return residual(c.x1, rowParallelOut(std::move(y), sp));
    }
    // Under bf16 the gate and up projections come out of their GEMMs as
    // bf16 bits (stored, as kept), and the activation writes the w2 GEMM's
    // input as bf16 bits.
    c.g = projected(c, c.h2f, w1, b.fc1, Tc, H, Fl, LayerAdapters::Gate);
    if (language)
      c.u = projected(c, c.h2f, w3, LayerBiases::kNone, Tc, H, Fl,
                      LayerAdapters::Up);
    c.s = activation(c, Tc);
    return residual(c.x1, rowParallelLinear(c, c.s, w2, b.fc2, Tc, Fl, sp,
                                            LayerAdapters::Down));
  }

  /// The backward from a full cache.
  /// Under bf16 every gradient a GEMM reads is bf16 bits, made once
  /// (packed, or written so by the kernel that makes it): the two GEMMs that
  /// read it read the same bits, neither converting. (The GEMMs would round
  /// them so anyway: nothing changes but the bytes.)
  Tensor backwardFrom(LayerCache &c, const Tensor &dout, const LayerMeta &m) {
    const int64_t Tl = m.localRows, Tc = m.cpRows;
    const bool sp = ctx.sequenceParallel && ctx.tp > 1;
    Tensor dh2f;
    if (sparse) {
      Tensor gathered;
      dh2f = zeros(Tc * H);
      sparse->backward(*c.moe, c.h2f, fullRows(dout, gathered, sp), dh2f.data(),
                       Tc);
    } else {
      dh2f = denseMlpBackward(c, dout, sp, Tc);
    }
    Tensor dh2 = columnParallelIn(std::move(dh2f), sp);
    Tensor dx1 = dout.clone();
    normBackward(c.x1, norm2, norm2b, c.mean2, c.rstd2, dh2, dx1, Tl);
    return attentionBackward(c, std::move(dx1), m);
  }

  /// The dense MLP's backward from the layer output's gradient: dh2f, the
  /// gradient of its normed input (all TP ranks' rows under SP, partial
  /// over TP).
  Tensor denseMlpBackward(LayerCache &c, const Tensor &dout, bool sp,
                          int64_t Tc) {
    Device &dev = *ctx.dev;
    const int64_t Tl = dout.size() / H;
    const device::DType gradType =
        ctx.bf16 ? device::DType::BF16 : device::DType::F32;
    // A bias added to a row-parallel output takes the residual stream's
    // gradient of the rank's rows.
    biasGrad(dout, b.fc2, Tl, H);
    Tensor gatheredOut, dmBits;
    const Tensor &dmT = gemmTensor(fullRows(dout, gatheredOut, sp), dmBits);
    const Bf16Operand dm = operand(dmT);
    Tensor ds = empty(Tc * Fl);
    matmulBackward(dev, ctx.bf16, operand(c.s), P(w2), dm, ds.data(), nullptr,
                   Tc, Fl, H);
    weightGradient(c.s, dmT, w2, Tc, Fl, H);
    adaptedBackward(c, LayerAdapters::Down, c.s, dmT, ds.data(), Tc, Fl, H);
    Tensor dg = Tensor::empty(Tc * Fl, gradType), dh2f = empty(Tc * H);
    if (language) {
      Tensor du = Tensor::empty(Tc * Fl, gradType);
      dev.swigluBackward(gradType, c.g.raw(), c.u.raw(), ds.data(), dg.raw(),
                         du.raw(), Tc * Fl);
      matmulBackward(dev, ctx.bf16, operand(c.h2f), P(w3), operand(du),
                     dh2f.data(), nullptr, Tc, H, Fl);
      weightGradient(c.h2f, du, w3, Tc, H, Fl);
      adaptedBackward(c, LayerAdapters::Up, c.h2f, du, dh2f.data(), Tc, H, Fl);
    } else {
      dev.geluBackward(gradType, c.g.raw(), ds.data(), dg.raw(), Tc * Fl, gelu);
    }
    biasGrad(dg, b.fc1, Tc, Fl);
    matmulBackward(dev, ctx.bf16, operand(c.h2f), P(w1), operand(dg),
                   dh2f.data(), nullptr, Tc, H, Fl, language ? 1.0f : 0.0f);
    weightGradient(c.h2f, dg, w1, Tc, H, Fl);
    adaptedBackward(c, LayerAdapters::Gate, c.h2f, dg, dh2f.data(), Tc, H, Fl);
    return dh2f;
  }

  /// The attention half's backward from dx1 (the gradient of its residual
  /// output): the layer input's gradient.
  Tensor attentionBackward(LayerCache &c, Tensor dx1, const LayerMeta &m) {
    Device &dev = *ctx.dev;
    const int64_t Tl = m.localRows, Tc = m.cpRows;
    const bool sp = ctx.sequenceParallel && ctx.tp > 1;
    Tensor gatheredDx1, dofBits;
    // Attention.
    biasGrad(dx1, b.o, Tl, H);
    const Tensor &dofT = gemmTensor(fullRows(dx1, gatheredDx1, sp), dofBits);
    const Bf16Operand dof = operand(dofT);
    // The attention's dO: bf16 bits under bf16 (attention reads it rounded;
    // with an adapter on o its fp32 sum is rounded once).
    Tensor da;
    if (!lora.has(LayerAdapters::O)) {
      da = storedProduct(dev, ctx.bf16, dof, P(wo), Tc, H, Hl,
                         /*transW=*/true);
    } else {
      da = empty(Tc * Hl);
      gemm(dev, ctx.bf16, false, true, Tc, Hl, H, 1.0f, dof, P(wo), 0.0f,
           da.data());
      adaptedBackward(c, LayerAdapters::O, c.a, dofT, da.data(), Tc, Hl, H);
      if (ctx.bf16)
        da = packBf16(dev, da);
    }
    weightGradient(c.a, dofT, wo, Tc, Hl, H);
    // dq of the rank's queries, dk and dv of its keys (summed over every
    // CP rank's queries), grouped (GQA) and fp32.
    Tensor dq, dK, dV;
    if (ctx.ringCp)
      ringAttentionBackward(ring(), m.blocks, c.q, c.k, c.v, c.a, c.lse, da, Tc,
                            dq, dK, dV);
    else
      gatheredAttentionBackward(c, m, da, dq, dK, dV);
    // The saved q and k are rotated: their gradients are rotated back (the
    // weight gradients need the inputs, which hf holds, so nothing else to
    // undo).
    Tensor dk;
    if (hasQkNorm) {
      dq = normedBackward(std::move(dq), c.qPre, c.rstdQ, qkNorm.first, m,
                          headsLocal);
      dk = normedBackward(std::move(dK), c.kPre, c.rstdK, qkNorm.second, m,
                          kvHeadsLocal);
    } else {
      dq = rotatedStored(std::move(dq), m, language, true, headsLocal);
      dk = rotatedStored(std::move(dK), m, language, true, kvHeadsLocal);
    }
    Tensor dv = rotatedStored(std::move(dV), m, false, false, kvHeadsLocal);
    biasGrad(dq, b.q, Tc, Hl);
    biasGrad(dk, b.k, Tc, KVl);
    biasGrad(dv, b.v, Tc, KVl);
    Tensor dhf = empty(Tc * H);
    matmulBackward(dev, ctx.bf16, operand(c.hf), P(wq), operand(dq), dhf.data(),
                   nullptr, Tc, H, Hl);
    weightGradient(c.hf, dq, wq, Tc, H, Hl);
    adaptedBackward(c, LayerAdapters::Q, c.hf, dq, dhf.data(), Tc, H, Hl);
    matmulBackward(dev, ctx.bf16, operand(c.hf), P(wk), operand(dk), dhf.data(),
                   nullptr, Tc, H, KVl, 1.0f);
    weightGradient(c.hf, dk, wk, Tc, H, KVl);
    adaptedBackward(c, LayerAdapters::K, c.hf, dk, dhf.data(), Tc, H, KVl);
    matmulBackward(dev, ctx.bf16, operand(c.hf), P(wv), operand(dv), dhf.data(),
                   nullptr, Tc, H, KVl, 1.0f);
    weightGradient(c.hf, dv, wv, Tc, H, KVl);
    adaptedBackward(c, LayerAdapters::V, c.hf, dv, dhf.data(), Tc, H, KVl);
    Tensor dh = columnParallelIn(std::move(dhf), sp);
    Tensor dx = std::move(dx1);
    normBackward(c.x, norm1, norm1b, c.mean1, c.rstd1, dh, dx, Tl);
    c = LayerCache();
    return dx;
  }

public:
  /// The indices of this layer's parameters in the stage's list.
  std::vector<size_t> paramIndices() const {
    std::vector<size_t> out;
    std::vector<size_t> all = {norm1, norm1b, wq,  wk,    wv,   wo,
                               norm2, norm2b, w1,  w3,    w2,   b.q,
                               b.k,   b.v,    b.o, b.fc1, b.fc2};
    all.insert(all.end(), lora.a.begin(), lora.a.end());
    all.insert(all.end(), lora.b.begin(), lora.b.end());
    all.insert(all.end(), moeParams.begin(), moeParams.end());
    if (hasQkNorm)
      all.insert(all.end(), {qkNorm.first, qkNorm.second});
    for (size_t p : all)
      if (p != LayerBiases::kNone &&
          std::find(out.begin(), out.end(), p) == out.end())
        out.push_back(p);
    return out;
  }

private:
  /// A GEMM input (the normed hidden states, the attention's output, the
  /// MLP's activation): bf16 bits from here on under bf16 (gemmInput).
  Tensor input(Tensor t) const {
    return gemmInput(*ctx.dev, ctx.bf16, std::move(t));
  }
  /// bf16: the layer inputs x and x1 (stored, i.e. rounded, already:
  /// packing loses nothing) packed to bfloat16 after the forward, as the
  /// backward's norms read them. Everything else the forward saves is bf16
  /// bits from the moment it is made (the GEMM inputs, q, k, v, the
  /// attention's output, the MLP's g and u) but the norm statistics and
  /// the log-sum-exp, which stay fp32.
  void keep(LayerCache &c) const {
    if (!ctx.bf16)
      return;
    c.x = packBf16(*ctx.dev, c.x);
    c.x1 = packBf16(*ctx.dev, c.x1);
  }

  /// `t` as the GEMMs read it (operand()): under bf16 its bits, packed once
  /// into `bits` unless t is bits already; else t itself.
  const Tensor &gemmTensor(const Tensor &t, Tensor &bits) const {
    if (!ctx.bf16 || t.dtype() == device::DType::BF16)
      return t;
    bits = packBf16(*ctx.dev, t);
    return bits;
  }

  /// dW[K,N] += X[M,K]^T dY[M,N] for weight `w` (frozen: nothing), at once
  /// or deferred under zero bubble (ModelOps.h).
  void weightGradient(const Tensor &x, const Tensor &dy, size_t w, int64_t M,
                      int64_t K, int64_t N) {
    ops::weightGradient(*ctx.dev, ctx.bf16, ctx.weightGrads, x, dy, WG(w), M, K,
                        N);
  }

  /// LoRA (docs/model.md): y [rows, N] (fp32) += s·(x·A)·B for an adapted
  /// linear `site` whose input is x [rows, K]; c.lora[site] keeps s·x·A
  /// for the backward. Under TP (config/Lora.h) a column-parallel base's
  /// x·A is whole on every rank and B holds the rank's columns; a
  /// row-parallel base's A holds the rank's rows, so s·x·A·B is a partial
  /// sum the base's own reduction sums.
  void adapted(LayerCache &c, LayerAdapters::Site site, const Tensor &x,
               float *y, int64_t rows, int64_t K, int64_t N) {
    if (!lora.has(site))
      return;
    Device &dev = *ctx.dev;
    const int64_t r = rankOf(site);
    Tensor v = empty(rows * r);
    gemm(dev, ctx.bf16, false, false, rows, r, K, lora.scale, operand(x),
         P(lora.a[site]), 0.0f, v.data());
    v = input(std::move(v));
    gemm(dev, ctx.bf16, false, false, rows, N, r, 1.0f, operand(v),
         P(lora.b[site]), 1.0f, y);
    c.lora[site] = std::move(v);
  }
  /// Its backward from dY [rows, N] (`dy` as the GEMMs read it): dB +=
  /// (s·x·A)^T·dY, du = s·dY·B^T, dA += x^T·du, dx += du·A^T (dx fp32,
  /// accumulated into). The base is frozen: its dW GEMM never runs.
  void adaptedBackward(LayerCache &c, LayerAdapters::Site site, const Tensor &x,
                       const Tensor &dy, float *dx, int64_t rows, int64_t K,
                       int64_t N) {
    if (!lora.has(site))
      return;
    Device &dev = *ctx.dev;
    const int64_t r = rankOf(site);
    weightGradient(c.lora[site], dy, lora.b[site], rows, r, N);
    Tensor du = empty(rows * r);
    gemm(dev, ctx.bf16, false, true, rows, r, N, lora.scale, operand(dy),
         P(lora.b[site]), 0.0f, du.data());
    du = input(std::move(du));
    weightGradient(x, du, lora.a[site], rows, K, r);
    gemm(dev, ctx.bf16, false, true, rows, K, r, 1.0f, operand(du),
         P(lora.a[site]), 1.0f, dx);
  }
  int64_t rankOf(LayerAdapters::Site site) const {
    const Param &a = params[lora.a[site]];
    return a.colEnd - a.colBegin;
  }

  /// y ([Tc, heads x d], fp32) rotated by RoPE when `rotate` (inverse:
  /// back), as its next reader takes it: under bf16 as bits (rotated in
  /// fp32 and rounded as written, one pass), else fp32.
  Tensor rotatedStored(Tensor y, const LayerMeta &m, bool rotate, bool inverse,
                       int64_t heads) const {
    Device &dev = *ctx.dev;
    if (!ctx.bf16) {
      if (rotate)
        dev.rope(y.data(), device::DType::F32, y.data(),
                 m.ropeTable.data<double>(), m.cpRows, heads, headDim, inverse);
      return y;
    }
    if (!rotate)
      return packBf16(dev, y);
    Tensor bits = Tensor::empty(y.size(), device::DType::BF16);
    dev.rope(y.data(), device::DType::BF16, bits.raw(),
             m.ropeTable.data<double>(), m.cpRows, heads, headDim, inverse);
    return bits;
  }

  /// Attention over every CP rank's keys and values, all-gathered (cp_comm
  /// "all_gather"; the rank's own without CP): c.a and c.lse.
  void gatheredAttention(LayerCache &c, const LayerMeta &m) {
    Device &dev = *ctx.dev;
    const int64_t Tc = m.cpRows;
    if (ctx.cp > 1) {
      c.keys = gatherRows(*ctx.comm, ctx.cpGroup, c.k);
      c.values = gatherRows(*ctx.comm, ctx.cpGroup, c.v);
    }
    c.a = Tensor::empty(Tc * Hl, c.q.dtype());
    c.lse = empty(headsLocal * Tc);
    if (Tc > 0)
      dev.attentionForward(attentionArgs(c, m), c.a.raw(), c.lse.data());
  }
  /// Its backward from da: dq, and dk, dv of the rank's own keys (the CP
  /// ranks' gradients of the gathered rows reduce-scattered), grouped.
  void gatheredAttentionBackward(LayerCache &c, const LayerMeta &m,
                                 const Tensor &da, Tensor &dq, Tensor &dk,
                                 Tensor &dv) {
    Device &dev = *ctx.dev;
    const int64_t Tc = m.cpRows, Tk = m.keyRows;
    // Without queries no key gets a gradient.
    dq = empty(Tc * Hl);
    Tensor dK = Tc > 0 ? empty(Tk * KVl) : zeros(Tk * KVl);
    Tensor dV = Tc > 0 ? empty(Tk * KVl) : zeros(Tk * KVl);
    if (Tc > 0)
      dev.attentionBackward(attentionArgs(c, m), c.a.raw(), c.lse.data(),
                            da.raw(), dq.data(), dK.data(), dV.data());
    dk = ctx.cp > 1 ? scatterRows(*ctx.comm, ctx.cpGroup, dK) : std::move(dK);
    dv = ctx.cp > 1 ? scatterRows(*ctx.comm, ctx.cpGroup, dV) : std::move(dV);
  }
  /// The attention call of the layer's queries over the keys and values
  /// (gathered under CP), grouped as the model has them.
  device::AttentionArgs attentionArgs(const LayerCache &c,
                                      const LayerMeta &m) const {
    device::AttentionArgs a;
    a.dtype = c.q.dtype();
    a.q = c.q.raw();
    a.k = (ctx.cp > 1 ? c.keys : c.k).raw();
    a.v = (ctx.cp > 1 ? c.values : c.v).raw();
    a.plan = m.attention.view();
    a.heads = headsLocal;
    a.kvHeads = kvHeadsLocal;
    a.headDim = headDim;
    return a;
  }
  /// This rank's place in the CP ring (ctx.ringCp).
  Ring ring() const {
    Ring r;
    r.dev = ctx.dev;
    r.comm = ctx.comm;
    r.channel = ctx.ringChannel;
    r.group = ctx.cpGroup;
    r.own = ctx.cpRank;
    r.tag = ctx.ringTag;
    r.bf16 = ctx.bf16;
    r.heads = headsLocal;
    r.kvHeads = kvHeadsLocal;
    r.headDim = headDim;
    return r;
  }

  /// in · W of a row-parallel linear (wo, w2; K inputs a row), summed over
  /// TP (all-reduced, or reduce-scattered under SP). Under bf16 with one TP
  /// rank its GEMM writes bf16 bits: the residual adds it rounded anyway
  /// (with TP the fp32 partial sums are reduced first).
  /// A bias (`bias`, else kNone) is added once to the summed output (the
  /// rank's rows under SP), in fp32.
  Tensor rowParallelLinear(LayerCache &c, const Tensor &in, size_t w,
                           size_t bias, int64_t rows, int64_t K, bool sp,
                           LayerAdapters::Site site) {
    if (ctx.bf16 && ctx.tp == 1 && bias == LayerBiases::kNone &&
        !lora.has(site))
      return storedProduct(*ctx.dev, true, operand(in), P(w), rows, K, H);
    Tensor y = empty(rows * H);
    matmul(*ctx.dev, ctx.bf16, operand(in), P(w), y.data(), rows, K, H);
    adapted(c, site, in, y.data(), rows, K, H);
    y = rowParallelOut(std::move(y), sp);
    if (bias != LayerBiases::kNone)
      ctx.dev->addBias(y.data(), V(bias).data(), y.size() / H, H);
    return y;
  }

  /// in · W (+ bias) of a column-parallel linear, stored as its readers
  /// take it (bf16 bits under bf16): with a bias the fp32 sums plus the
  /// bias, rounded once.
  Tensor projected(LayerCache &c, const Tensor &in, size_t w, size_t bias,
                   int64_t rows, int64_t K, int64_t N,
                   LayerAdapters::Site site) {
    Device &dev = *ctx.dev;
    if (bias == LayerBiases::kNone && !lora.has(site))
      return storedProduct(dev, ctx.bf16, operand(in), P(w), rows, K, N);
    Tensor y = empty(rows * N);
    matmul(dev, ctx.bf16, operand(in), P(w), y.data(), rows, K, N);
    adapted(c, site, in, y.data(), rows, K, N);
    if (bias != LayerBiases::kNone)
      dev.addBias(y.data(), V(bias).data(), rows, N);
    if (ctx.bf16)
      return packBf16(dev, y);
    return y;
  }

  /// The gradient of `bias` (if any): the column sums of its output's
  /// gradient `g` [rows, cols] as the weight's GEMMs read it (bf16 bits
  /// under bf16, unpacked; the residual stream's fp32 for o and fc2).
  void biasGrad(const Tensor &g, size_t bias, int64_t rows, int64_t cols) {
    if (bias == LayerBiases::kNone)
      return;
    if (g.dtype() == device::DType::BF16) {
      Tensor values = unpackBf16(*ctx.dev, g);
      ctx.dev->biasBackward(values.data(), G(bias), rows, cols);
    } else {
      ctx.dev->biasBackward(g.data(), G(bias), rows, cols);
    }
  }

  /// hf · W for the queries or keys (`heads` of them), rotated (RoPE) in
  /// the language model, stored as attention reads it: bf16 bits under
  /// bf16.
  Tensor queryOrKey(LayerCache &c, size_t w, size_t bias, const LayerMeta &m,
                    int64_t heads, LayerAdapters::Site site) {
    const int64_t Tc = m.cpRows, cols = heads * headDim;
    if (!language)
      return projected(c, c.hf, w, bias, Tc, H, cols, site);
    Tensor y = empty(Tc * cols);
    matmul(*ctx.dev, ctx.bf16, operand(c.hf), P(w), y.data(), Tc, H, cols);
    adapted(c, site, c.hf, y.data(), Tc, H, cols);
    if (bias != LayerBiases::kNone) // before RoPE, as Qwen2's
      ctx.dev->addBias(y.data(), V(bias).data(), Tc, cols);
    if (hasQkNorm) { // Qwen3: each head's RMSNorm, before RoPE
      const bool query = site == LayerAdapters::Q;
      Tensor &pre = query ? c.qPre : c.kPre;
      Tensor &rstd = query ? c.rstdQ : c.rstdK;
      pre = std::move(y);
      rstd = empty(Tc * heads);
      y = empty(Tc * cols);
      ctx.dev->rmsnormForward(
          pre.data(), V(query ? qkNorm.first : qkNorm.second).data(),
          device::DType::F32, y.data(), rstd.data(), Tc * heads, headDim, eps);
    }
    return rotatedStored(std::move(y), m, true, false, heads);
  }
  /// qk_norm's backward of a query or key gradient `dy` (fp32, rotated):
  /// rotated back, through the norm (its weight's gradient accumulated),
  /// stored as the GEMMs read it.
  Tensor normedBackward(Tensor dy, const Tensor &pre, const Tensor &rstd,
                        size_t w, const LayerMeta &m, int64_t heads) {
    Device &dev = *ctx.dev;
    dev.rope(dy.data(), device::DType::F32, dy.data(),
             m.ropeTable.data<double>(), m.cpRows, heads, headDim, true);
    Tensor dx = empty(dy.size());
    dev.rmsnormBackward(device::DType::F32, pre.raw(), V(w).data(), rstd.data(),
                        dy.data(), dx.data(), G(w), m.cpRows * heads, headDim);
    if (ctx.bf16)
      return packBf16(dev, dx);
    return dx;
  }
  Bf16Operand P(size_t i) const { return params[i].weight(); }
  /// A vector parameter (norm weight, bias) in fp32 (Stage::vectorOf).
  Tensor V(size_t i) const { return owner.vectorOf(params[i]); }
  float *G(size_t i) { return params[i].grad.data(); }
  /// Where a weight GEMM accumulates its gradient: null for a frozen
  /// weight (the GEMM is skipped; norms write theirs into scratch).
  float *WG(size_t i) {
    return params[i].frozen ? nullptr : params[i].grad.data();
  }

  /// The norm of x as the input of the GEMMs after it, all TP ranks' rows
  /// under SP: under bf16 the norm writes its bits itself (one pass), unless
  /// SP gathers its fp32 rows first.
  Tensor normedInput(const Tensor &x, size_t w, size_t b, Tensor &mean,
                     Tensor &rstd, int64_t rows, bool sp) {
    if (!sp)
      return norm(x, w, b, mean, rstd, rows, ctx.bf16);
    Tensor y = norm(x, w, b, mean, rstd, rows, false);
    return input(gatherRows(*ctx.comm, ctx.tpGroup, y));
  }

  /// y = norm(x), fp32 or (`bits`) bf16 bits.
  Tensor norm(const Tensor &x, size_t w, size_t b, Tensor &mean, Tensor &rstd,
              int64_t rows, bool bits) {
    Tensor y = Tensor::empty(rows * H,
                             bits ? device::DType::BF16 : device::DType::F32);
    rstd = empty(rows);
    Tensor weight = V(w);
    Device &dev = *ctx.dev;
    if (language) {
      dev.rmsnormForward(x.data(), weight.data(), y.dtype(), y.raw(),
                         rstd.data(), rows, H, eps);
      return y;
    }
    mean = empty(rows);
    Tensor bias = V(b);
    dev.layernormForward(x.data(), weight.data(), bias.data(), y.dtype(),
                         y.raw(), mean.data(), rstd.data(), rows, H, eps);
    return y;
  }

  /// dx += norm backward of dy (x fp32, or bf16 bits as kept under bf16).
  void normBackward(const Tensor &x, size_t w, size_t b, const Tensor &mean,
                    const Tensor &rstd, const Tensor &dy, Tensor &dx,
                    int64_t rows) {
    Tensor weight = V(w);
    // Kept packed (bf16), the kernel adds into dx in one pass; fp32 writes
    // the gradient, added after.
    const bool adds = x.dtype() == device::DType::BF16;
    Tensor d = adds ? Tensor() : empty(rows * H);
    float *into = adds ? dx.data() : d.data();
    if (language)
      ctx.dev->rmsnormBackward(x.dtype(), x.raw(), weight.data(), rstd.data(),
                               dy.data(), into, G(w), rows, H);
    else
      ctx.dev->layernormBackward(x.dtype(), x.raw(), weight.data(), mean.data(),
                                 rstd.data(), dy.data(), into, G(w), G(b), rows,
                                 H);
    if (!adds)
      ctx.dev->axpy(d.size(), 1.0f, d.data(), dx.data());
  }

  /// x + branch, stored: under bf16 the branch and the sum rounded as
  /// stored, in one pass (Device::residual); the branch fp32 or bits.
  Tensor residual(const Tensor &x, const Tensor &branch) const {
    Tensor out = empty(x.size());
    ctx.dev->residual(ctx.bf16 ? device::DType::BF16 : device::DType::F32,
                      x.data(), branch.dtype(), branch.raw(), out.data(),
                      x.size());
    return out;
  }

  /// The rows a column-parallel linear reads: all TP ranks' under SP
  /// (gathered into `storage`), else `local` itself (no copy).
  const Tensor &fullRows(const Tensor &local, Tensor &storage, bool sp) const {
    if (!sp)
      return local;
    storage = gatherRows(*ctx.comm, ctx.tpGroup, local);
    return storage;
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

  const Stage &owner;
  std::vector<Param> &params;
  bool language;
  /// recompute "full" for this layer; "selective" for the module.
  bool recomputeAll, recomputeActivation;
  size_t norm1, norm1b, wq, wk, wv, wo, norm2, norm2b, w1, w3, w2;
  LayerBiases b;
  LayerAdapters lora;
  /// qk_norm's q and k norm weights; a sparse layer's MLP and parameters.
  bool hasQkNorm = false;
  std::pair<size_t, size_t> qkNorm{LayerBiases::kNone, LayerBiases::kNone};
  std::unique_ptr<MoeMlp> sparse;
  std::vector<size_t> moeParams;
  int64_t H, headsLocal = 1, headDim = 1, Hl = 1, Fl = 1;
  /// Grouped-query attention: the rank's key/value heads, their width and
  /// the query heads per group (1 without GQA).
  int64_t kvHeadsLocal = 1, KVl = 1;
  float eps;
  device::Gelu gelu = device::Gelu::Tanh; // an encoder MLP's activation
  const StageContext &ctx;
};

} // namespace mimo::exec

#endif // MIMO_RUNTIME_MODEL_TRANSFORMERLAYER_H
