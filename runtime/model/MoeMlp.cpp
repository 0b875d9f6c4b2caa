//===- MoeMlp.cpp - A sparse layer's MLP ----------------------------------===//

#include "runtime/model/MoeMlp.h"

#include "runtime/model/ModelOps.h"

#include <algorithm>
#include <cmath>

namespace mimo::exec {

using namespace ops;

MoeParams
MoeParams::of(const MoeConfig &moe, const std::string &prefix,
              const std::function<size_t(const std::string &)> &indexOf,
              int64_t ep, int64_t epRank) {
  MoeParams out;
  out.router = indexOf(prefix + kMoeRouter);
  const int64_t per = moe.experts / std::max<int64_t>(ep, 1);
  out.first = epRank * per;
  for (int64_t j = out.first; j < out.first + per; ++j) {
    out.gate.push_back(indexOf(prefix + moeExpertName(j, "gate")));
    out.up.push_back(indexOf(prefix + moeExpertName(j, "up")));
    out.down.push_back(indexOf(prefix + moeExpertName(j, "down")));
  }
  if (moe.sharedFfn > 0) {
    out.sharedW1 = indexOf(prefix + moeSharedName("gate"));
    out.sharedW3 = indexOf(prefix + moeSharedName("up"));
    out.sharedW2 = indexOf(prefix + moeSharedName("down"));
    if (moe.sharedGate)
      out.sharedGate = indexOf(prefix + kMoeSharedGate);
  }
  return out;
}

std::vector<size_t> MoeParams::all() const {
  std::vector<size_t> out = {router};
  for (size_t j = 0; j < gate.size(); ++j)
    out.insert(out.end(), {gate[j], up[j], down[j]});
  for (size_t i : {sharedW1, sharedW3, sharedW2, sharedGate})
    if (i != kNone)
      out.push_back(i);
  return out;
}

MoeMlp::MoeMlp(std::vector<Param> &params, const MoeConfig &moe,
               MoeParams indices, int64_t hidden, const StageContext &ctx)
    : params(params), moe(moe), p(std::move(indices)), H(hidden),
      Fe(moe.expertFfn / ctx.expertTp().etp), Fs(moe.sharedFfn / ctx.tp),
      ctx(ctx) {}

Tensor MoeMlp::swiglu(const Tensor &g, const Tensor &u, int64_t n) const {
  Tensor s =
      Tensor::empty(n, ctx.bf16 ? device::DType::BF16 : device::DType::F32);
  if (n > 0)
    ctx.dev->swigluForward(g.dtype(), g.raw(), u.raw(), s.dtype(), s.raw(), n);
  return s;
}

void MoeMlp::dropActivations(MoeCache &c) {
  for (MoeCache::Expert &e : c.experts)
    e.s = Tensor();
  for (MoeCache::Expert &e : c.local)
    e.s = Tensor();
  c.shared.s = Tensor();
}

Tensor MoeMlp::forward(MoeCache &c, const Tensor &h, int64_t rows,
                       const std::vector<uint8_t> &real, double *auxLoss) {
  Device &dev = *ctx.dev;
  const int64_t E = moe.experts, K = moe.topK;
  // Route: the logits in fp32, the top-k on the host.
  Tensor logits = empty(std::max<int64_t>(rows * E, 1));
  if (rows > 0)
    matmul(dev, ctx.bf16, operand(h), P(p.router), logits.data(), rows, H, E);
  std::vector<float> host =
      rows > 0 ? logits.toHost<float>() : std::vector<float>();
  c.routing = routeTokens(moe, host.data(), rows, E);
  c.real = real;
  // The global microbatch's statistics: every member of the DP x CP group
  // holds a part of its rows (each TP rank all of its group's).
  c.stats = moeStatistics(c.routing, c.real);
  if (ctx.dpcpGroup.size() > 1) {
    Tensor sums = Tensor::fromHost(c.stats);
    ctx.comm->allReduceSum(ctx.dpcpGroup, sums.data<double>(),
                           static_cast<int64_t>(c.stats.size()));
    c.stats = sums.toHost<double>();
  }
  if (auxLoss) {
    const MoeLosses losses = moeLosses(moe, c.stats);
    *auxLoss += (moe.router.auxLossCoef * losses.aux +
                 moe.router.zLossCoef * losses.z) /
                static_cast<double>(ctx.microbatches);
  }
  // Dispatch: each expert's rows in row order, with their weights.
  std::vector<std::vector<float>> weights(static_cast<size_t>(E));
  c.experts.clear();
  c.experts.resize(static_cast<size_t>(E));
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const auto slot = static_cast<size_t>(t * K + j);
      const auto e = static_cast<size_t>(c.routing.choice[slot]);
      c.experts[e].rows.push_back(t);
      weights[e].push_back(c.routing.weight[slot]);
    }
  // This TP rank's share of the rows (all of them unless etp < tp).
  const ExpertTp cut = ctx.expertTp();
  const int64_t lo = cut.rowBegin(rows), hi = cut.rowEnd(rows);
  Tensor y = zeros(rows * H);
  for (size_t e = 0; e < static_cast<size_t>(E); ++e) {
    MoeCache::Expert &x = c.experts[e];
    x.ownBegin =
        std::lower_bound(x.rows.begin(), x.rows.end(), lo) - x.rows.begin();
    x.ownEnd =
        std::lower_bound(x.rows.begin(), x.rows.end(), hi) - x.rows.begin();
    if (x.owned() > 0) {
      x.deviceRows = indices(std::vector<int64_t>(x.rows.begin() + x.ownBegin,
                                                  x.rows.begin() + x.ownEnd));
      x.weights = Tensor::fromHost(std::vector<float>(
          weights[e].begin() + x.ownBegin, weights[e].begin() + x.ownEnd));
    }
  }
  if (ctx.ep > 1)
    expertsAcross(c, h, y);
  for (size_t e = 0; e < static_cast<size_t>(E) && ctx.ep == 1; ++e) {
    MoeCache::Expert &x = c.experts[e];
    const int64_t n = x.owned();
    if (n == 0)
      continue;
    x.x = Tensor::empty(n * H, h.dtype());
    dev.gatherRows(h.dtype(), x.x.raw(), h.raw(), x.deviceRows.data<int64_t>(),
                   nullptr, n, H);
    x.out = expertForward(x, x.x, p.gate[e], p.up[e], p.down[e], n, Fe);
    dev.scatterAddRows(y.data(), x.deviceRows.data<int64_t>(), x.out.data(),
                       x.weights.data(), n, H);
  }
  if (Fs > 0 && rows > 0) {
    std::vector<int64_t> all(static_cast<size_t>(rows));
    for (int64_t t = 0; t < rows; ++t)
      all[static_cast<size_t>(t)] = t;
    c.identity = indices(all);
    if (p.sharedGate != MoeParams::kNone) {
      Tensor gate = empty(rows);
      matmul(dev, ctx.bf16, operand(h), P(p.sharedGate), gate.data(), rows, H,
             1);
      std::vector<float> sig = gate.toHost<float>();
      for (float &v : sig)
        v = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(v))));
      c.sharedGate = Tensor::fromHost(sig);
      c.gate = std::move(sig);
    }
    MoeCache::Expert &s = c.shared;
    s.out = expertForward(s, h, p.sharedW1, p.sharedW3, p.sharedW2, rows, Fs);
    dev.scatterAddRows(y.data(), c.identity.data<int64_t>(), s.out.data(),
                       c.sharedGate.empty() ? nullptr : c.sharedGate.data(),
                       rows, H);
  }
  return y;
}

Tensor MoeMlp::expertForward(MoeCache::Expert &e, const Tensor &x, size_t w1,
                             size_t w3, size_t w2, int64_t n, int64_t ffn) {
  Device &dev = *ctx.dev;
  e.g = storedProduct(dev, ctx.bf16, operand(x), P(w1), n, H, ffn);
  e.u = storedProduct(dev, ctx.bf16, operand(x), P(w3), n, H, ffn);
  e.s = swiglu(e.g, e.u, n * ffn);
  Tensor out = empty(n * H);
  matmul(dev, ctx.bf16, operand(e.s), P(w2), out.data(), n, ffn, H);
  return out;
}

Tensor MoeMlp::expertBackward(const Tensor &x, const Tensor &g, const Tensor &u,
                              const Tensor &s, const Tensor &dout, size_t w1,
                              size_t w3, size_t w2, int64_t n, int64_t ffn) {
  Device &dev = *ctx.dev;
  const device::DType gradType =
      ctx.bf16 ? device::DType::BF16 : device::DType::F32;
  Tensor ds = empty(n * ffn);
  matmulBackward(dev, ctx.bf16, operand(s), P(w2), operand(dout), ds.data(),
                 nullptr, n, ffn, H);
  weightGradient(dev, ctx.bf16, ctx.weightGrads, s, dout, WG(w2), n, ffn, H);
  Tensor dg = Tensor::empty(n * ffn, gradType);
  Tensor du = Tensor::empty(n * ffn, gradType);
  dev.swigluBackward(gradType, g.raw(), u.raw(), ds.data(), dg.raw(), du.raw(),
                     n * ffn);
  Tensor dx = empty(n * H);
  matmulBackward(dev, ctx.bf16, operand(x), P(w3), operand(du), dx.data(),
                 nullptr, n, H, ffn);
  weightGradient(dev, ctx.bf16, ctx.weightGrads, x, du, WG(w3), n, H, ffn);
  matmulBackward(dev, ctx.bf16, operand(x), P(w1), operand(dg), dx.data(),
                 nullptr, n, H, ffn, 1.0f);
  weightGradient(dev, ctx.bf16, ctx.weightGrads, x, dg, WG(w1), n, H, ffn);
  return dx;
}

void MoeMlp::backward(MoeCache &c, const Tensor &h, const Tensor &dy, float *dh,
                      int64_t rows) {
  Device &dev = *ctx.dev;
  const int64_t E = moe.experts, K = moe.topK;
  const bool shared = Fs > 0 && rows > 0;
  // Recompute "selective" dropped the activations.
  for (MoeCache::Expert &x : c.experts)
    if (x.owned() > 0 && x.s.empty() && ctx.ep == 1)
      x.s = swiglu(x.g, x.u, x.owned() * Fe);
  for (MoeCache::Expert &x : c.local)
    if (!x.g.empty() && x.s.empty())
      x.s = swiglu(x.g, x.u, x.g.size());
  if (shared && c.shared.s.empty())
    c.shared.s = swiglu(c.shared.g, c.shared.u, rows * Fs);
  // The combine weights' gradients dy · o (partial over TP: o is), expert
  // by expert into one buffer, then the shared gate's; summed over TP in
  // one all-reduce on the device, brought to the host once. A TP rank's
  // share of the rows (etp < tp) fills its part of each expert's, zero
  // elsewhere.
  const auto slots = static_cast<size_t>(rows * K);
  const int64_t gateRows = shared && !c.sharedGate.empty() ? rows : 0;
  const bool shares = ctx.expertTp().shares > 1;
  const int64_t dotCount = std::max<int64_t>(rows * K + gateRows, 1);
  Tensor dots = shares ? zeros(dotCount) : empty(dotCount);
  int64_t at = 0;
  for (size_t e = 0; e < static_cast<size_t>(E); ++e) {
    const MoeCache::Expert &x = c.experts[e];
    if (x.owned() > 0)
      dev.rowDots(dy.data(), x.deviceRows.data<int64_t>(), x.out.data(),
                  x.owned(), H, dots.data() + at + x.ownBegin);
    at += static_cast<int64_t>(x.rows.size());
  }
  if (gateRows > 0)
    dev.rowDots(dy.data(), c.identity.data<int64_t>(), c.shared.out.data(),
                rows, H, dots.data() + at);
  if (ctx.tpGroup.size() > 1)
    ctx.comm->allReduceSum(ctx.tpGroup, dots.data(), dots.size());
  const std::vector<float> host = dots.toHost<float>();
  // Expert-major to slot order (slot t·K + j: row t's j-th expert).
  std::vector<int64_t> first(static_cast<size_t>(E), 0);
  for (size_t e = 1; e < static_cast<size_t>(E); ++e)
    first[e] =
        first[e - 1] + static_cast<int64_t>(c.experts[e - 1].rows.size());
  std::vector<float> dweight(slots);
  for (size_t slot = 0; slot < slots; ++slot) {
    const auto e = static_cast<size_t>(c.routing.choice[slot]);
    dweight[slot] = host[static_cast<size_t>(first[e]++)];
  }
  const float *gateDots = host.data() + rows * K;
  const double perMicrobatch = 1.0 / static_cast<double>(ctx.microbatches);
  std::vector<float> dz =
      moeRouterBackward(moe, c.routing, dweight, c.real, c.stats,
                        moe.router.auxLossCoef * perMicrobatch,
                        moe.router.zLossCoef * perMicrobatch);
  // The router's weight and input gradients (the input's once over TP).
  if (rows > 0) {
    Tensor dzOp = gemmInput(dev, ctx.bf16, Tensor::fromHost(dz));
    weightGradient(dev, ctx.bf16, ctx.weightGrads, h, dzOp, WG(p.router), rows,
                   H, E);
    if (ctx.tpRank == 0)
      gemm(dev, ctx.bf16, false, true, rows, H, E, 1.0f, operand(dzOp),
           P(p.router), 1.0f, dh);
  }
  if (shared && !c.sharedGate.empty()) {
    const std::vector<float> &sig = c.gate;
    std::vector<float> dgate(static_cast<size_t>(rows));
    for (size_t t = 0; t < dgate.size(); ++t)
      dgate[t] = static_cast<float>(static_cast<double>(gateDots[t]) * sig[t] *
                                    (1.0 - sig[t]));
    Tensor dgOp = gemmInput(dev, ctx.bf16, Tensor::fromHost(dgate));
    weightGradient(dev, ctx.bf16, ctx.weightGrads, h, dgOp, WG(p.sharedGate),
                   rows, H, 1);
    if (ctx.tpRank == 0)
      gemm(dev, ctx.bf16, false, true, rows, H, 1, 1.0f, operand(dgOp),
           P(p.sharedGate), 1.0f, dh);
  }
  // The experts: each output's gradient is its weight times dy's row.
  if (ctx.ep > 1)
    expertsAcrossBackward(c, dy, dh);
  for (size_t e = 0; e < static_cast<size_t>(E) && ctx.ep == 1; ++e) {
    MoeCache::Expert &x = c.experts[e];
    const int64_t n = x.owned();
    if (n == 0)
      continue;
    Tensor dout = empty(n * H);
    dev.gatherRows(device::DType::F32, dout.data(), dy.data(),
                   x.deviceRows.data<int64_t>(), x.weights.data(), n, H);
    dout = gemmInput(dev, ctx.bf16, std::move(dout));
    Tensor dx = expertBackward(x.x, x.g, x.u, x.s, dout, p.gate[e], p.up[e],
                               p.down[e], n, Fe);
    dev.scatterAddRows(dh, x.deviceRows.data<int64_t>(), dx.data(), nullptr, n,
                       H);
  }
  if (shared) {
    Tensor dout = empty(rows * H);
    dev.gatherRows(
        device::DType::F32, dout.data(), dy.data(), c.identity.data<int64_t>(),
        c.sharedGate.empty() ? nullptr : c.sharedGate.data(), rows, H);
    dout = gemmInput(dev, ctx.bf16, std::move(dout));
    Tensor dx = expertBackward(h, c.shared.g, c.shared.u, c.shared.s, dout,
                               p.sharedW1, p.sharedW3, p.sharedW2, rows, Fs);
    dev.axpy(rows * H, 1.0f, dx.data(), dh);
  }
}

void MoeMlp::exchange(std::vector<Tensor> &send,
                      std::vector<Tensor> &recv) const {
  std::vector<comm::P2POp> ops;
  for (int64_t d = 0; d < ctx.ep; ++d) {
    Tensor &out = send[static_cast<size_t>(d)];
    Tensor &in = recv[static_cast<size_t>(d)];
    if (d == ctx.epRank) {
      if (in.bytes() > 0)
        ctx.dev->copy(in.raw(), out.raw(), in.bytes());
      continue;
    }
    const int64_t peer = ctx.epGroup[static_cast<size_t>(d)];
    if (out.bytes() > 0)
      ops.push_back({true, peer, ctx.moeTag, out.raw(), out.bytes()});
    if (in.bytes() > 0)
      ops.push_back({false, peer, ctx.moeTag, in.raw(), in.bytes()});
  }
  if (!ops.empty())
    ctx.comm->exchange(ops);
}

namespace {

/// Row r of `t` (rows `cols` values wide) as a byte address.
void *rowAt(Tensor &t, int64_t r, int64_t cols) {
  return static_cast<char *>(t.raw()) +
         r * cols * static_cast<int64_t>(device::sizeOf(t.dtype()));
}

} // namespace

int64_t MoeMlp::sentBefore(const MoeCache &c, int64_t member,
                           int64_t expert) const {
  int64_t rows = 0;
  for (int64_t j = 0; j < expert; ++j)
    rows += c.from[static_cast<size_t>(member)][static_cast<size_t>(j)];
  return rows;
}

std::vector<Tensor> MoeMlp::dispatch(MoeCache &c, const Tensor &src,
                                     bool weighted) {
  Device &dev = *ctx.dev;
  const int64_t ep = ctx.ep, per = moe.experts / ep;
  std::vector<Tensor> send(static_cast<size_t>(ep)),
      recv(static_cast<size_t>(ep));
  for (int64_t d = 0; d < ep; ++d) {
    Tensor &out = send[static_cast<size_t>(d)];
    out = Tensor::empty(sentTo(c, d) * H, src.dtype());
    int64_t at = 0;
    for (int64_t j = 0; j < per; ++j) {
      MoeCache::Expert &x = c.experts[static_cast<size_t>(d * per + j)];
      const int64_t n = x.owned();
      if (n == 0)
        continue;
      dev.gatherRows(src.dtype(), rowAt(out, at, H), src.raw(),
                     x.deviceRows.data<int64_t>(),
                     weighted ? x.weights.data() : nullptr, n, H);
      at += n;
    }
    recv[static_cast<size_t>(d)] =
        Tensor::empty(sentBefore(c, d, per) * H, src.dtype());
  }
  exchange(send, recv);
  return recv;
}

Tensor MoeMlp::fromMembers(const MoeCache &c, std::vector<Tensor> &recv,
                           int64_t expert) {
  const int64_t ep = ctx.ep;
  int64_t n = 0;
  for (int64_t d = 0; d < ep; ++d)
    n += c.from[static_cast<size_t>(d)][static_cast<size_t>(expert)];
  const device::DType type = recv[0].dtype();
  Tensor rows = Tensor::empty(n * H, type);
  int64_t at = 0;
  for (int64_t d = 0; d < ep; ++d) {
    const int64_t count =
        c.from[static_cast<size_t>(d)][static_cast<size_t>(expert)];
    if (count > 0)
      ctx.dev->copy(
          rowAt(rows, at, H),
          rowAt(recv[static_cast<size_t>(d)], sentBefore(c, d, expert), H),
          count * H * device::sizeOf(type));
    at += count;
  }
  return rows;
}

std::vector<Tensor> MoeMlp::toMembers(MoeCache &c,
                                      std::vector<Tensor> &results) {
  const int64_t ep = ctx.ep, per = moe.experts / ep;
  std::vector<Tensor> back(static_cast<size_t>(ep)),
      got(static_cast<size_t>(ep));
  for (int64_t d = 0; d < ep; ++d) {
    back[static_cast<size_t>(d)] = empty(sentBefore(c, d, per) * H);
    int64_t at = 0;
    for (int64_t j = 0; j < per; ++j) {
      int64_t skip = 0; // earlier members' rows of expert j
      for (int64_t e = 0; e < d; ++e)
        skip += c.from[static_cast<size_t>(e)][static_cast<size_t>(j)];
      const int64_t rows =
          c.from[static_cast<size_t>(d)][static_cast<size_t>(j)];
      if (rows > 0)
        ctx.dev->copy(rowAt(back[static_cast<size_t>(d)], at, H),
                      rowAt(results[static_cast<size_t>(j)], skip, H),
                      rows * H * static_cast<int64_t>(sizeof(float)));
      at += rows;
    }
    got[static_cast<size_t>(d)] = empty(sentTo(c, d) * H);
  }
  exchange(back, got);
  return got;
}

int64_t MoeMlp::sentTo(const MoeCache &c, int64_t member) const {
  const int64_t per = moe.experts / ctx.ep;
  int64_t rows = 0;
  for (int64_t j = 0; j < per; ++j)
    rows += static_cast<int64_t>(
        c.experts[static_cast<size_t>(member * per + j)].owned());
  return rows;
}

void MoeMlp::expertsAcross(MoeCache &c, const Tensor &h, Tensor &y) {
  Device &dev = *ctx.dev;
  const int64_t ep = ctx.ep, per = moe.experts / ep;
  // The counts: how many of its rows each member sends each of our experts.
  std::vector<Tensor> sendCounts(static_cast<size_t>(ep)),
      recvCounts(static_cast<size_t>(ep));
  for (int64_t d = 0; d < ep; ++d) {
    std::vector<float> n(static_cast<size_t>(per));
    for (int64_t j = 0; j < per; ++j)
      n[static_cast<size_t>(j)] = static_cast<float>(
          c.experts[static_cast<size_t>(d * per + j)].owned());
    sendCounts[static_cast<size_t>(d)] = Tensor::fromHost(n);
    recvCounts[static_cast<size_t>(d)] = empty(per);
  }
  exchange(sendCounts, recvCounts);
  c.from.clear();
  for (int64_t d = 0; d < ep; ++d) {
    c.from.emplace_back();
    for (float n : recvCounts[static_cast<size_t>(d)].toHost<float>())
      c.from.back().push_back(static_cast<int64_t>(n));
  }
  // The rows to their experts' members; each of our experts over every
  // member's rows at once; the outputs back, in the order they came.
  std::vector<Tensor> recv = dispatch(c, h, false);
  c.local.clear();
  c.local.resize(static_cast<size_t>(per));
  std::vector<Tensor> outputs(static_cast<size_t>(per));
  for (int64_t j = 0; j < per; ++j) {
    MoeCache::Expert &x = c.local[static_cast<size_t>(j)];
    x.x = fromMembers(c, recv, j);
    const int64_t n = x.x.size() / H;
    outputs[static_cast<size_t>(j)] = empty(n * H);
    if (n == 0)
      continue;
    outputs[static_cast<size_t>(j)] = expertForward(
        x, x.x, p.gate[static_cast<size_t>(j)], p.up[static_cast<size_t>(j)],
        p.down[static_cast<size_t>(j)], n, Fe);
  }
  c.returned = toMembers(c, outputs);
  // Our rows' outputs, weighted, into y.
  for (int64_t d = 0; d < ep; ++d) {
    int64_t at = 0;
    for (int64_t j = 0; j < per; ++j) {
      MoeCache::Expert &x = c.experts[static_cast<size_t>(d * per + j)];
      const int64_t n = x.owned();
      if (n == 0)
        continue;
      x.out = c.returned[static_cast<size_t>(d)].view(at * H, n * H);
      dev.scatterAddRows(y.data(), x.deviceRows.data<int64_t>(), x.out.data(),
                         x.weights.data(), n, H);
      at += n;
    }
  }
}

void MoeMlp::expertsAcrossBackward(MoeCache &c, const Tensor &dy, float *dh) {
  Device &dev = *ctx.dev;
  const int64_t ep = ctx.ep, per = moe.experts / ep;
  // Each output's gradient (its weight times dy's row) to its expert's
  // member, in the forward's order; the experts' backward over every
  // member's rows; the input gradients back.
  std::vector<Tensor> recv = dispatch(c, dy, true);
  std::vector<Tensor> dx(static_cast<size_t>(per));
  for (int64_t j = 0; j < per; ++j) {
    MoeCache::Expert &x = c.local[static_cast<size_t>(j)];
    const int64_t n = x.x.size() / H;
    if (n == 0) {
      dx[static_cast<size_t>(j)] = empty(0);
      continue;
    }
    Tensor dout = gemmInput(dev, ctx.bf16, fromMembers(c, recv, j));
    dx[static_cast<size_t>(j)] = expertBackward(
        x.x, x.g, x.u, x.s, dout, p.gate[static_cast<size_t>(j)],
        p.up[static_cast<size_t>(j)], p.down[static_cast<size_t>(j)], n, Fe);
  }
  std::vector<Tensor> got = toMembers(c, dx);
  for (int64_t d = 0; d < ep; ++d) {
    int64_t at = 0;
    for (int64_t j = 0; j < per; ++j) {
      MoeCache::Expert &x = c.experts[static_cast<size_t>(d * per + j)];
      const int64_t n = x.owned();
      if (n == 0)
        continue;
      dev.scatterAddRows(
          dh, x.deviceRows.data<int64_t>(),
          static_cast<float *>(rowAt(got[static_cast<size_t>(d)], at, H)),
          nullptr, n, H);
      at += n;
    }
  }
}

} // namespace mimo::exec
