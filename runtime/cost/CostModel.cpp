//===- CostModel.cpp - What an instruction costs on a device --------------===//

#include "runtime/cost/CostModel.h"
#include "runtime/cost/MemoryPlan.h"

#include "runtime/support/Limits.h"

#include "runtime/config/Flops.h"
#include "runtime/config/Parameters.h"

#include <algorithm>
#include <cmath>

namespace mimo {

namespace {
constexpr double kFloat = 4; // bytes of an fp32 value
} // namespace

//===----------------------------------------------------------------------===//
// Instruction costs
//===----------------------------------------------------------------------===//

CostModel::CostModel(const Topology &topology, const ModelConfig &config,
                     const DeviceProfile &profile, const ClusterConfig &cluster)
    : topology(topology), config(config),
      profile(forPrecision(profile, config.precision)), cluster(cluster) {
  for (const ModuleTopology &m : topology.modules) {
    const ModuleConfig *found = nullptr;
    size_t encoder = 0, e = 0;
    for (const ModuleConfig &c : config.modules) {
      if (c.name == m.name) {
        found = &c;
        encoder = e;
      }
      e += c.kind == ModuleKind::Encoder ? 1 : 0;
    }
    moduleConfigs.push_back(found);
    encoderIndex.push_back(encoder);
  }
  ranksOnDevice.assign(static_cast<size_t>(cluster.devices(topology.worldSize)),
                       0);
  for (int64_t r = 0; r < topology.worldSize; ++r)
    ++ranksOnDevice[static_cast<size_t>(deviceOf(r))];
}

int64_t CostModel::deviceOf(int64_t rank) const {
  return rank % cluster.devices(topology.worldSize);
}

int64_t CostModel::nodeOf(int64_t rank) const {
  return deviceOf(rank) / std::max<int64_t>(cluster.devicesPerNode, 1);
}

double CostModel::threadsOf(int64_t rank) const {
  return static_cast<double>(threadsPerRank(
      profile.cores, ranksOnDevice[static_cast<size_t>(deviceOf(rank))]));
}

LinkCost sharedDeviceLink(const DeviceProfile &profile, const LinkCost &link,
                          int64_t ranksOnDevice) {
  LinkCost shared = link;
  if (profile.kind == "cpu")
    shared.latencyUs *= std::max(
        1.0, static_cast<double>(ranksOnDevice) /
                 static_cast<double>(std::max<int64_t>(profile.cores, 1)));
  return shared;
}

LinkCost CostModel::linkBetween(int64_t a, int64_t b) const {
  if (deviceOf(a) == deviceOf(b))
    return sharedDeviceLink(profile, cluster.sameDevice,
                            ranksOnDevice[static_cast<size_t>(deviceOf(a))]);
  if (nodeOf(a) == nodeOf(b))
    return cluster.sameNode;
  return cluster.crossNode;
}

Work exchangeWork(const DeviceProfile &profile, const LinkCost &link,
                  int64_t members, double bytes) {
  if (members < 2)
    return {};
  double n = static_cast<double>(members);
  double latency = link.latencyUs * 1e-6 * std::ceil(std::log2(n));
  double transfer = (n - 1) * bytes / (link.bandwidthGBs * 1e9);
  if (profile.kind == "cpu") {
    // The cores copy and sum: at the calibrated all-reduce rate.
    if (profile.collectiveGBs > 0)
      transfer = (n - 1) * bytes / (profile.collectiveGBs * 1e9);
    return {transfer, latency, (n - 1) * bytes};
  }
  return {0, latency + transfer, (n - 1) * bytes};
}

Work CostModel::exchange(const GroupSpan &group, double bytes) const {
  if (group.size < 2)
    return {};
  return exchangeWork(profile, linkBetween(group.first, group.last), group.size,
                      bytes);
}

std::pair<int64_t, int64_t>
CostModel::farthestPair(const std::vector<int64_t> &members) const {
  // The slowest link any two members share: across nodes if any member is
  // on another node than the first, else across devices, else one device
  // (ranks wrap around a cluster's devices, so the lowest and highest
  // rank need not be the farthest).
  std::pair<int64_t, int64_t> pair{members.front(), members.front()};
  for (int64_t m : members) {
    if (nodeOf(m) != nodeOf(members.front()))
      return {members.front(), m};
    if (pair.second == pair.first && deviceOf(m) != deviceOf(members.front()))
      pair.second = m;
  }
  return pair;
}

Work CostModel::exchange(const std::vector<int64_t> &group,
                         double bytes) const {
  if (group.size() < 2)
    return {};
  const auto [a, b] = farthestPair(group);
  return exchangeWork(profile, linkBetween(a, b),
                      static_cast<int64_t>(group.size()), bytes);
}

double gemmSeconds(const DeviceProfile &p, double m, double n, double k) {
  if (m <= 0 || n <= 0 || k <= 0)
    return 0;
  double rate = rateAt(p.gemm, std::cbrt(m * n * k));
  return rate > 0 ? 2 * m * n * k / (rate * 1e12) : 0;
}

double attentionSeconds(const DeviceProfile &p, double flops, double span,
                        bool backward) {
  double rate =
      rateAt(backward ? p.attentionBackward : p.attentionForward, span);
  return rate > 0 && flops > 0 ? flops / (rate * 1e12) : 0;
}

double memorySeconds(const DeviceProfile &p, double bytes) {
  return bytes / (p.memoryGBs * 1e9);
}

double kernelSeconds(const DeviceProfile &p, double kernels) {
  return kernels * p.kernelOverheadUs * 1e-6;
}

double layerElementwiseBytes(double H, double Hl, double Fl, bool language,
                             bool bf16, bool backward) {
  // Each kernel counted as reading each input and writing each output once.
  if (bf16) {
    // Forward: norms 6H each, wo and w2 out 2H and their residual adds 10H
    // each, x and x1 packed 6H each; q and k out of their GEMMs in fp32 and
    // through RoPE into bf16 10Hl each (encoders: bf16 GEMM outputs, 2Hl),
    // v 2Hl; gate and up 2Fl each and SwiGLU 6Fl (GeLU: 2Fl and 4Fl).
    // Backward: the layer's and the attention's dO packed 6H each, dh2f
    // 12H, dx1's copy 8H, each norm's backward reading x as bf16 and adding
    // into dx 20H, dhf 20H; da 2Hl, dq, dk, dv 12Hl, RoPE's inverse into
    // bf16 12Hl and dv packed 6Hl (encoders: all three packed, the same);
    // ds 4Fl and SwiGLU's backward 12Fl (GeLU: 8Fl).
    if (backward)
      return 92 * H + 32 * Hl + (language ? 16 : 12) * Fl;
    return 48 * H + (language ? 22 : 6) * Hl + (language ? 10 : 6) * Fl;
  }
  // fp32: the same kernels on fp32 buffers with no packing: q, k, v out of
  // their GEMMs 4Hl each and RoPE in place 8Hl each, SwiGLU 20Fl with its
  // inputs (GeLU 12Fl); backward: each norm's backward into scratch and
  // added after 32H, RoPE's inverse 16Hl, SwiGLU's backward 24Fl with ds
  // (GeLU 16Fl).
  if (backward)
    return 104 * H + (language ? 32 : 16) * Hl + (language ? 24 : 16) * Fl;
  return 48 * H + (language ? 28 : 12) * Hl + (language ? 20 : 12) * Fl;
}

StageShape stageShape(const ModelConfig &config, const ModuleConfig &m,
                      size_t encoder, int64_t microBatchSize, int64_t stage,
                      bool sequenceParallel) {
  const ParallelConfig &par = m.parallel;
  StageShape shape;
  shape.language = m.kind == ModuleKind::Language;
  shape.tp = static_cast<double>(par.tp);
  shape.cp = static_cast<double>(par.cp);
  shape.samples =
      static_cast<double>(microBatchSize) / static_cast<double>(par.dp);
  // Under the interleaved schedule `stage` is a virtual stage (chunk x pp +
  // stage) of pp x virtual_stages.
  const int64_t stages = par.pp * par.virtualStages;
  auto [begin, end] = stageLayers(m, stages, stage);
  shape.layers = static_cast<double>(end - begin);
  shape.firstLayer = begin;
  shape.first = stage == 0;
  shape.last = stage == stages - 1;
  shape.sequenceParallel = shape.language && sequenceParallel && par.tp > 1;
  shape.bf16 = config.precision == "bf16";
  if (shape.language) {
    TokenMoments length = expectedSampleLength(config);
    shape.rows = shape.samples * length.mean / shape.cp;
    shape.pairs = shape.samples * (length.square + length.mean) / 2 / shape.cp;
    shape.span = length.square / length.mean;
  } else {
    TokenMoments t = expectedModalityTokens(config, encoder);
    shape.rows = shape.samples * t.mean;
    shape.pairs = shape.samples * t.square;
    shape.span = t.mean > 0 ? t.square / t.mean : 1;
  }
  return shape;
}

StageWork stageWork(const ModuleConfig &m, const StageShape &shape,
                    bool backward, const DeviceProfile &p,
                    double outputHidden) {
  const double tp = shape.tp, rows = shape.rows;
  const double H = static_cast<double>(m.hiddenSize);
  const double A = static_cast<double>(m.attentionWidth()); // q and o
  const double F = static_cast<double>(m.ffnHiddenSize);
  const double passes = backward ? 2 : 1; // dX and dW
  // SwiGLU has gate, up and down; the encoders' GELU MLP fc1 and fc2.
  const double mlpIn = shape.language ? 2 : 1;
  // A frozen weight's backward makes no dW (model/TransformerLayer.h); a
  // first encoder stage runs no backward below its lowest layer with
  // something trainable at or under it (model/EncoderStage.cpp).
  auto trains = [&](const std::string &local) { return !m.frozen(local); };
  const double KV = static_cast<double>(m.kvHidden()); // GQA: K and V
  const double dense[4] = {gemmSeconds(p, rows, (A + 2 * KV) / tp, H),
                           gemmSeconds(p, rows, H, A / tp),
                           gemmSeconds(p, rows, mlpIn * F / tp, H),
                           gemmSeconds(p, rows, H, F / tp)};
  // A sparse layer (family/Moe.h): the router, each token's top_k experts
  // (top_k x rows through experts of expert width, cut over etp TP ranks,
  // each of the tp / etp holding a cut taking its share of the rows) and
  // the shared expert.
  const MoeConfig &e = m.moe;
  const double K = static_cast<double>(e.topK);
  const double etp = static_cast<double>(m.parallel.expertTp());
  const double Fe = static_cast<double>(e.expertFfn) / etp;
  const double Ke = K * etp / tp; // routed rows a TP rank runs, per row
  const double Fs = static_cast<double>(e.sharedFfn);
  double sparse[4] = {dense[0], dense[1],
                      gemmSeconds(p, rows, static_cast<double>(e.experts), H) +
                          gemmSeconds(p, Ke * rows, 2 * Fe, H) +
                          (Fs > 0 ? gemmSeconds(p, rows, 2 * Fs / tp, H) : 0),
                      gemmSeconds(p, Ke * rows, H, Fe) +
                          (Fs > 0 ? gemmSeconds(p, rows, H, Fs / tp) : 0)};
  // A first encoder stage's frozen bottom layers run no backward.
  const int64_t frozenBelow =
      backward && !shape.language && shape.first ? encoderFrozenLayers(m) : 0;
  StageWork w;
  double recomputed = 0;
  for (int64_t l = shape.firstLayer;
       l < shape.firstLayer + static_cast<int64_t>(shape.layers); ++l) {
    const std::string at = "layers." + std::to_string(l) + ".";
    const bool moe = e.sparse(l);
    const double *gemms = moe ? sparse : dense;
    const std::string mlp = moe ? at + moeExpertName(0, "") : at;
    const bool swiglu = shape.language || moe; // gate, up and down
    const bool dw[4] = {trains(at + "wq") || trains(at + "wk") ||
                            trains(at + "wv"),
                        trains(at + "wo"),
                        swiglu ? trains(mlp + "gate") || trains(mlp + "up")
                               : trains(at + "fc1"),
                        trains(mlp + (swiglu ? "down" : "fc2"))};
    if (l < frozenBelow)
      continue; // no backward here at all
    // One pass of the layer, forward or backward.
    auto pass = [&](bool back) {
      double layer = 0;
      for (int g = 0; g < 4; ++g) {
        layer += gemms[g] * (back ? (dw[g] ? 2 : 1) : 1);
        if (back && dw[g])
          w.weightGrads += gemms[g];
      }
      // The elementwise kernels (norms, RoPE, residuals, activation,
      // packing).
      layer += memorySeconds(p, rows * layerElementwiseBytes(H, A / tp, F / tp,
                                                             shape.language,
                                                             shape.bf16, back));
      layer += (back ? 2 : 1) * kernelSeconds(p, 18);
      const double attention =
          attentionSeconds(p, 4 * A / tp * shape.pairs, shape.span, back);
      w.attention += attention;
      layer += attention;
      return layer + (back ? 2 : 1) * p.layerOverheadUs * 1e-6 /
                         std::max(p.computeScale, 1e-9);
    };
    w.compute += pass(backward);
    // Recomputation (docs/model.md): "full" runs the layer's forward again
    // in its backward, "selective" its MLP activation (reading g and u,
    // writing s).
    const int64_t index = l - shape.firstLayer;
    if (backward && m.recomputes(index, static_cast<int64_t>(shape.layers))) {
      w.compute += pass(false);
      ++recomputed;
    } else if (backward && m.recompute == "selective") {
      w.compute += memorySeconds(p, rows * F / tp * (shape.language ? 3 : 2) *
                                        (shape.bf16 ? 2 : kFloat)) +
                   kernelSeconds(p, 1);
    }
  }
  // Two all-reduces (or SP all-gather + reduce-scatter) per layer over TP;
  // the keys and values (their groups under GQA) gathered over CP, or
  // passed around its ring (cpExchangeWork); a recomputed layer's forward
  // makes its own again.
  w.tpExchanges = 2 * (shape.layers + recomputed);
  w.tpBytes = kFloat * rows * H / (shape.sequenceParallel ? tp : 1);
  w.cpExchanges = shape.layers + recomputed;
  w.cpBytes = kFloat * 2 * rows * KV / tp;
  if (m.parallel.ep > 1) {
    double sparseLayers = 0;
    for (int64_t l = shape.firstLayer;
         l < shape.firstLayer + static_cast<int64_t>(shape.layers); ++l)
      sparseLayers += e.sparse(l);
    // Each sparse layer's pass dispatches its top_k x rows rows and gets
    // as many back (two exchanges); under a balanced router a member sends
    // each other member 1/ep of them: fp32, but for the forward's
    // dispatch under bf16 (bf16 bits; model/MoeMlp.h), which the mean
    // of the pair's 2 and 4 bytes a value counts. Experts cut over etp <
    // tp TP ranks: a TP rank's share of the rows alone (family/Moe.h
    // ExpertTp).
    w.epExchanges =
        2 * sparseLayers * (1 + recomputed / std::max(shape.layers, 1.0));
    w.epBytes = (shape.bf16 && !backward ? 3.0 : kFloat) * K * rows * H /
                static_cast<double>(m.parallel.ep) /
                static_cast<double>(tp / m.parallel.expertTp());
  }
  if (shape.language && shape.last) {
    const double V = static_cast<double>(m.vocabSize);
    const char *head = m.tieEmbeddings ? "embedding" : "head";
    w.compute += (backward && !trains(head) ? 1 : passes) *
                     gemmSeconds(p, rows, V / tp, H) +
                 passes * memorySeconds(p, kFloat * 3 * rows * V / tp) +
                 kernelSeconds(p, 8);
    w.logitExchanges = 3;
    w.logitBytes = kFloat * rows;
  }
  if (!shape.language && shape.first)
    w.compute += (backward && !trains("patch.weight") ? 0 : passes) *
                 gemmSeconds(p, rows, H, static_cast<double>(m.featureDim));
  // The projector: fc1, and fc2 unless it is "linear" (fc1 alone).
  if (!shape.language && shape.last)
    w.compute +=
        (backward && !trains("projection.fc1.weight") ? 1 : passes) *
            gemmSeconds(p, rows, outputHidden, H) +
        (m.linearProjector
             ? 0.0
             : (backward && !trains("projection.fc2.weight") ? 1 : passes) *
                   gemmSeconds(p, rows, outputHidden, outputHidden));
  w.compute *= p.computeScale;
  w.attention *= p.computeScale;
  w.weightGrads *= p.computeScale;
  return w;
}

Work cpExchangeWork(const StageWork &w, const Work &each, bool ring,
                    bool backward, bool overlapped) {
  Work total = each * w.cpExchanges;
  if (!ring)
    return total;
  if (backward)
    total = total * 2;
  if (overlapped)
    total.comm -= std::min(total.comm, w.attention);
  return total;
}

CostModel::GroupSpan CostModel::group(int64_t rank, const Grid &grid,
                                      std::initializer_list<Dim> dims) const {
  // The group is named by its member whose coordinates along `dims` are 0.
  Coords base = grid.coordsOf(rank);
  unsigned mask = 0;
  for (Dim dim : dims) {
    base[dim] = 0;
    mask |= 1u << static_cast<unsigned>(dim);
  }
  auto key = std::make_tuple(&grid, mask, grid.rankOf(base));
  auto it = groupCache.find(key);
  if (it != groupCache.end())
    return it->second;
  std::vector<Coords> members{base};
  for (Dim dim : dims) {
    std::vector<Coords> grown;
    for (const Coords &member : members)
      for (int64_t i = 0; i < grid.size(dim); ++i) {
        Coords c = member;
        c[dim] = i;
        grown.push_back(c);
      }
    members = std::move(grown);
  }
  std::vector<int64_t> ranks;
  ranks.reserve(members.size());
  for (const Coords &c : members)
    ranks.push_back(grid.rankOf(c));
  GroupSpan span;
  std::tie(span.first, span.last) = farthestPair(ranks);
  span.size = static_cast<int64_t>(members.size());
  return groupCache.emplace(key, span).first->second;
}

const StageWork &CostModel::stageWorkOf(size_t module, int64_t stage,
                                        bool backward) const {
  auto key = std::make_tuple(module, stage, backward);
  auto it = stageCache.find(key);
  if (it != stageCache.end())
    return it->second;
  const ModuleTopology &topo = topology.modules[module];
  StageShape shape = stageShape(config, *moduleConfigs[module],
                                encoderIndex[module], topology.microBatchSize,
                                stage, topology.shard.sequenceParallel);
  return stageCache
      .emplace(key, stageWork(*moduleConfigs[module], shape, backward, profile,
                              static_cast<double>(topo.outputHidden)))
      .first->second;
}

double CostModel::localValues(size_t module, int64_t rank,
                              bool expertsOnly) const {
  const ModuleTopology &topo = topology.modules[module];
  const Grid &grid = topo.grid;
  Coords c = grid.coordsOf(rank);
  auto key = std::make_tuple(module, c.pp, c.tp, expertsOnly);
  auto it = valuesCache.find(key);
  if (it != valuesCache.end())
    return it->second;
  bool sp = topo.isLanguage && topology.shard.sequenceParallel &&
            grid.size(Dim::TP) > 1;
  double values = 0;
  // Every chunk the rank holds (one but under the interleaved schedule).
  const int64_t pp = grid.size(Dim::PP), chunks = topo.virtualStages;
  for (int64_t chunk = 0; chunk < chunks; ++chunk)
    for (const ParamSpec &spec :
         stageParameters(*moduleConfigs[module],
                         topology.modules[topology.languageIndex()].hidden, sp,
                         pp * chunks, chunk * pp + c.pp))
      if (!expertsOnly || spec.expert)
        values += static_cast<double>(
            blockOf(spec, grid.size(Dim::TP), c.tp,
                    moduleConfigs[module]->parallel.expertTp())
                .size());
  if (expertsOnly) // the rank's block of them
    values /= static_cast<double>(std::max<int64_t>(topo.ep, 1));
  return valuesCache.emplace(key, values).first->second;
}

bool CostModel::bucketsOverlap(size_t module) const {
  const ModuleTopology &m = topology.modules[module];
  return profile.kind != "cpu" &&
         cluster.devices(topology.worldSize) >= topology.worldSize &&
         m.grid.size(Dim::DP) * m.grid.size(Dim::CP) > 1;
}

double CostModel::expertExchangeBytes(size_t module, int64_t rank) const {
  const ModuleTopology &m = topology.modules[module];
  if (m.ep <= 1)
    return 0;
  const Grid &grid = m.grid;
  const std::vector<int64_t> ep =
      expertGroups(grid, m.ep, m.expertTp(), rank).ep;
  double bytes = 0;
  for (int64_t chunk = 0; chunk < m.virtualStages; ++chunk) {
    const int64_t stage = chunk * grid.size(Dim::PP) + grid.coordsOf(rank).pp;
    for (bool backward : {false, true}) {
      if (backward && m.forwardOnly)
        continue;
      const StageWork &sw = stageWorkOf(module, stage, backward);
      bytes += exchange(ep, sw.epBytes).bytes * sw.epExchanges;
    }
  }
  return bytes * static_cast<double>(topology.microbatches);
}

double CostModel::expertExchangeBytes(size_t module) const {
  const Grid &grid = topology.modules[module].grid;
  double most = 0;
  for (int64_t pp = 0; pp < grid.size(Dim::PP); ++pp) { // a rank of each stage
    Coords c;
    c.pp = pp;
    most = std::max(most, expertExchangeBytes(module, grid.rankOf(c)));
  }
  return most;
}

Work CostModel::work(int64_t rank, const Instr &in) const {
  Work w;
  const double B = static_cast<double>(topology.microBatchSize);
  const double S = static_cast<double>(topology.seqLength);
  // A stage's compute is the same on every rank of it; its collectives
  // depend on where the rank's groups lie.
  auto moduleWork = [&](size_t mi, bool backward) {
    const Grid &grid = topology.modules[mi].grid;
    // A chunk of the interleaved schedule: its virtual stage's layers.
    const StageWork &sw = stageWorkOf(
        mi, in.chunk * grid.size(Dim::PP) + grid.coordsOf(rank).pp, backward);
    const GroupSpan tpGroup = group(rank, grid, {Dim::TP});
    const GroupSpan cpGroup = group(rank, grid, {Dim::CP});
    w.compute = sw.compute;
    w += exchange(tpGroup, sw.tpBytes) * sw.tpExchanges;
    w += cpExchangeWork(sw, exchange(cpGroup, sw.cpBytes),
                        moduleConfigs[mi]->parallel.ringCp(), backward,
                        profile.kind != "cpu");
    w += exchange(tpGroup, sw.logitBytes) * sw.logitExchanges;
    if (sw.epExchanges > 0)
      w += exchange(expertGroups(grid, topology.modules[mi].ep,
                                 topology.modules[mi].expertTp(), rank)
                        .ep,
                    sw.epBytes) *
           sw.epExchanges;
  };
  // Zero bubble: the layers' weight gradients a split stage's backward
  // leaves to weight_grad (model/WeightGrads.h); 0 for a whole backward.
  auto deferred = [&](size_t mi) {
    const int64_t pp = topology.modules[mi].grid.coordsOf(rank).pp;
    const StageTopology *s = topology.stageOf(mi, pp);
    return s && s->weightLag >= 0 ? stageWorkOf(mi, pp, true).weightGrads : 0.0;
  };
  switch (in.op) {
  case InstrOp::Forward:
    moduleWork(static_cast<size_t>(in.index), false);
    return w;
  case InstrOp::Backward:
    moduleWork(static_cast<size_t>(in.index), true);
    w.compute -= deferred(static_cast<size_t>(in.index));
    return w;
  case InstrOp::WeightGrad:
    w.compute = deferred(static_cast<size_t>(in.index));
    return w;
  case InstrOp::Shard:
  case InstrOp::Unshard: {
    const ModuleTopology &topo = topology.modules[in.index];
    const Grid &grid = topo.grid;
    double samples = B / static_cast<double>(grid.size(Dim::DP));
    double lane = kFloat * samples * S * static_cast<double>(topo.hidden);
    w.compute = memorySeconds(profile, 3 * lane) + kernelSeconds(profile, 6);
    GroupSpan members = group(rank, grid, {Dim::TP, Dim::CP});
    double pieces = static_cast<double>(members.size);
    w += exchange(members, in.op == InstrOp::Shard ? lane : lane / pieces);
    return w;
  }
  case InstrOp::ReduceGrads: {
    const Grid &grid = topology.modules[in.index].grid;
    GroupSpan members = group(rank, grid, {Dim::DP, Dim::CP});
    const bool sharded =
        moduleConfigs[static_cast<size_t>(in.index)]->distributedOptimizer;
    // train.grad_reduce_dtype "bf16": the nccl backend's all-reduce moves
    // bf16 (docs/model.md); a CPU's backends and the reduce-scatter fp32.
    const double width =
        config.train.reducesInBf16() && profile.kind != "cpu" && !sharded
            ? 2.0
            : kFloat;
    double bytes = width * localValues(static_cast<size_t>(in.index), rank);
    double n = static_cast<double>(members.size);
    // The distributed optimizer reduce-scatters: each member sums and
    // receives its piece only (exec/OptimizerShards.h).
    if (sharded)
      bytes /= n;
    if (members.size > 1)
      w.compute = memorySeconds(profile, n * bytes) + kernelSeconds(profile, n);
    // A large sum over more than two members reduce-scatters and
    // all-gathers (Comm::allReduceSum): a piece each way, twice.
    const bool split =
        !moduleConfigs[static_cast<size_t>(in.index)]->distributedOptimizer &&
        members.size > 2 && bytes >= kFloat * kSplitAllReduce * n;
    if (split) {
      w.compute = memorySeconds(profile, bytes) + kernelSeconds(profile, n);
      w += exchange(members, bytes / n) * 2;
    } else {
      w += exchange(members, bytes);
    }
    // Experts cut over etp < tp TP ranks: their sum over the edp group
    // also spans the TP ranks holding the same cut (plan/Plan.h
    // expertGroups), a collective of its own.
    const ModuleTopology &topo = topology.modules[in.index];
    if (topo.expertsApart() && topo.expertTp() < grid.size(Dim::TP)) {
      const std::vector<int64_t> edp =
          expertGroups(grid, topo.ep, topo.expertTp(), rank).edp;
      double experts =
          width * localValues(static_cast<size_t>(in.index), rank, true);
      if (sharded)
        experts /= static_cast<double>(edp.size());
      w += exchange(edp, experts);
    }
    // Gradient buckets (docs/gpu.md overlap: mimo-run's default on a GPU
    // whose ranks each have one): each bucket is reduced on a channel as
    // soon as the module's last backward has finished its gradients, so
    // the reduction hides behind that backward but for its last bucket.
    if (bucketsOverlap(static_cast<size_t>(in.index))) {
      const double buckets = std::max(
          1.0,
          std::ceil(kFloat * localValues(static_cast<size_t>(in.index), rank) /
                    static_cast<double>(kGradBucketBytes)));
      const StageWork &backward =
          stageWorkOf(static_cast<size_t>(in.index), grid.coordsOf(rank).pp,
                      /*backward=*/true);
      w.comm -= std::min(w.comm * (1.0 - 1.0 / buckets), backward.compute);
    }
    return w;
  }
  case InstrOp::OptimizerStep: {
    double values = 0, tensors = 0;
    Work gathers;
    for (size_t mi : topology.modulesOf(rank)) {
      double local = localValues(mi, rank);
      if (moduleConfigs[mi]->distributedOptimizer) {
        // Each member updates its piece, then the pieces are all-gathered.
        const GroupSpan members =
            group(rank, topology.modules[mi].grid, {Dim::DP, Dim::CP});
        local /= static_cast<double>(members.size);
        gathers += exchange(members, kFloat * local);
      }
      values += local;
      tensors += 4 * static_cast<double>(moduleConfigs[mi]->layers() + 2);
    }
    // AdamW reads parameter, gradient and both moments and writes three;
    // the norm reads the gradients once more.
    w.compute = memorySeconds(profile, kFloat * 8 * values) +
                kernelSeconds(profile, 2 * tensors);
    const LinkCost &far = linkBetween(0, topology.worldSize - 1);
    w.comm = far.latencyUs * 1e-6 *
             std::ceil(std::log2(
                 std::max<double>(2, static_cast<double>(topology.worldSize))));
    w += gathers;
    return w;
  }
  case InstrOp::BridgeBroadcast:
  case InstrOp::BridgeBroadcastGrad: {
    const BridgeTopology &bridge = topology.bridges[in.index];
    bool down = in.op == InstrOp::BridgeBroadcast;
    const Grid &grid = topology.modules[down ? bridge.dst : bridge.src].grid;
    GroupSpan members = group(rank, grid, {Dim::TP, Dim::CP});
    double samples = B / static_cast<double>(grid.size(Dim::DP));
    TokenMoments t = expectedModalityTokens(config, encoderIndex[bridge.src]);
    double bytes =
        kFloat * samples * t.mean *
        static_cast<double>(topology.modules[bridge.src].outputHidden);
    w += exchange(members, bytes);
    return w;
  }
  case InstrOp::ColocatedForward:
  case InstrOp::ColocatedBackward: {
    const BridgeTopology &bridge = topology.bridges[in.index];
    const Grid &wide =
        topology.modules[bridge.direction == "fan_in" ? bridge.src : bridge.dst]
            .grid;
    double samples = B / static_cast<double>(wide.size(Dim::DP));
    TokenMoments t = expectedModalityTokens(config, encoderIndex[bridge.src]);
    double piece =
        kFloat * samples * t.mean *
        static_cast<double>(topology.modules[bridge.src].outputHidden);
    w.compute =
        memorySeconds(profile, piece * static_cast<double>(bridge.ratio)) +
        kernelSeconds(profile, 2);
    if (bridge.ratio > 1) {
      std::vector<int64_t> members = gatherGroup(wide, bridge.ratio, rank);
      bool gathers = (in.op == InstrOp::ColocatedForward)
                         ? bridge.direction == "fan_in"
                         : bridge.direction == "fan_out";
      if (gathers)
        w += exchange(members, piece);
    }
    return w;
  }
  default:
    return w;
  }
}

double CostModel::messageBytes(int64_t rank, int64_t peer,
                               const Instr &in) const {
  ShapeRule rule = shapeRule(topology, rank, peer, in);
  double samples = static_cast<double>(rule.sampleEnd - rule.sampleBegin);
  double rows = rule.sequence > 0 ? static_cast<double>(rule.sequence) : 0;
  if (rule.sequence == 0) {
    const InstrInfo &info = instrInfo(in.op);
    size_t module = info.operand == InstrOperand::Module
                        ? static_cast<size_t>(in.index)
                        : topology.bridges[in.index].src;
    rows = expectedModalityTokens(config, encoderIndex[module]).mean;
  }
  return kFloat * samples * rows * static_cast<double>(rule.hidden);
}

double CostModel::messageSeconds(int64_t rank, int64_t peer,
                                 const Instr &in) const {
  double bytes = messageBytes(rank, peer, in);
  return linkBetween(rank, peer).seconds(bytes) + memorySeconds(profile, bytes);
}

} // namespace mimo
