//===- CostModel.cpp - What an instruction costs on a device --------------===//

#include "runtime/core/CostModel.h"

#include "runtime/core/Flops.h"
#include "runtime/core/JsonValidator.h"
#include "runtime/core/Parameters.h"

#include <algorithm>
#include <cmath>

namespace mimo {

double rateAt(const std::vector<RatePoint> &points, double size) {
  if (points.empty())
    return 0;
  if (size <= points.front().size)
    return points.front().tflops;
  if (size >= points.back().size)
    return points.back().tflops;
  for (size_t i = 1; i < points.size(); ++i) {
    const RatePoint &a = points[i - 1], &b = points[i];
    if (size > b.size)
      continue;
    double t = (std::log(size) - std::log(a.size)) /
               (std::log(b.size) - std::log(a.size));
    return a.tflops + t * (b.tflops - a.tflops);
  }
  return points.back().tflops;
}

//===----------------------------------------------------------------------===//
// Profiles and clusters
//===----------------------------------------------------------------------===//

namespace {

constexpr double kFloat = 4;

nlohmann::ordered_json pointsJson(const std::vector<RatePoint> &points) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const RatePoint &p : points)
    list.push_back({p.size, p.tflops});
  return list;
}

nlohmann::ordered_json linkJson(const LinkCost &link) {
  return {{"latency_us", link.latencyUs}, {"bandwidth_gbs", link.bandwidthGBs}};
}

/// Reads [[size, tflops], ...] with ascending sizes and positive rates.
std::vector<RatePoint> readPoints(JsonValidator &v, const nlohmann::json &doc,
                                  const std::string &pointer,
                                  const std::string &key) {
  std::vector<RatePoint> points;
  const nlohmann::json *list =
      v.member(doc, pointer, key, true,
               "the [[size, TFLOP/s], ...] points, ascending sizes");
  if (!list)
    return points;
  std::string at = pointer + "/" + key;
  if (!list->is_array() || list->empty()) {
    v.error(at, "expected a non-empty array of [size, TFLOP/s] pairs, got " +
                    describeJson(*list));
    return points;
  }
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json &pair = (*list)[i];
    std::string here = at + "/" + std::to_string(i);
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number() ||
        !pair[1].is_number() || pair[0].get<double>() <= 0 ||
        pair[1].get<double>() <= 0) {
      v.error(here, "expected [size, TFLOP/s] with both > 0, got " +
                        describeJson(pair));
      continue;
    }
    RatePoint p{pair[0].get<double>(), pair[1].get<double>()};
    if (!points.empty() && p.size <= points.back().size) {
      v.error(here, "sizes must ascend; " + std::to_string(p.size) +
                        " follows " + std::to_string(points.back().size));
      continue;
    }
    points.push_back(p);
  }
  return points;
}

LinkCost readLink(JsonValidator &v, const nlohmann::json &doc,
                  const std::string &pointer, const std::string &key,
                  bool required, LinkCost fallback) {
  const nlohmann::json *link =
      v.member(doc, pointer, key, required,
               "{\"latency_us\": ..., \"bandwidth_gbs\": ...}");
  if (!link)
    return fallback;
  std::string at = pointer + "/" + key;
  if (!v.object(*link, at, {"latency_us", "bandwidth_gbs"}, "a link"))
    return fallback;
  LinkCost cost = fallback;
  if (auto l = v.number(*link, at, "latency_us", 0, false, 1e9, false,
                        "the latency in microseconds"))
    cost.latencyUs = *l;
  if (auto b = v.number(*link, at, "bandwidth_gbs", 0, true, 1e9, false,
                        "the bandwidth in GB/s"))
    cost.bandwidthGBs = *b;
  return cost;
}

bool checkFormat(JsonValidator &v, const nlohmann::json &doc,
                 const std::string &format) {
  auto f = v.choice(doc, "", "format", true, {format}, "the document kind");
  auto version = v.integer(doc, "", "version", true, 1, "the format version");
  if (version && *version != 1)
    v.error("/version",
            "this mimo reads version 1; got " + std::to_string(*version));
  return f.has_value();
}

} // namespace

std::optional<DeviceProfile> parseProfile(const nlohmann::json &doc,
                                          std::vector<Diagnostic> &errors) {
  JsonValidator v;
  const std::vector<std::string> keys = {"format",
                                         "version",
                                         "device",
                                         "kind",
                                         "measured",
                                         "source",
                                         "cores",
                                         "memory_bytes",
                                         "peak_tflops",
                                         "gemm_tflops",
                                         "attention_tflops",
                                         "memory_gbs",
                                         "kernel_overhead_us",
                                         "compute_scale",
                                         "layer_overhead_us",
                                         "link"};
  DeviceProfile p;
  if (v.object(doc, "", keys, "a device profile") &&
      checkFormat(v, doc, "mimo-profile")) {
    if (auto s = v.string(doc, "", "device", true, "the device's name"))
      p.device = *s;
    if (auto s =
            v.choice(doc, "", "kind", true, {"cpu", "cuda"}, "the device kind"))
      p.kind = *s;
    if (auto b = v.boolean(doc, "", "measured", "whether it was measured"))
      p.measured = *b;
    if (doc.contains("source"))
      if (auto s = v.string(doc, "", "source", false, "how it was made"))
        p.source = *s;
    if (auto c = v.integer(doc, "", "cores", true, 1,
                           "the cores ranks of one device share", 1 << 20))
      p.cores = *c;
    if (auto m = v.number(doc, "", "memory_bytes", 0, true, 1e18, false,
                          "the memory of one device in bytes"))
      p.memoryBytes = *m;
    if (auto t = v.number(doc, "", "peak_tflops", 0, true, 1e9, false,
                          "the peak TFLOP/s (for MFU)"))
      p.peakTflops = *t;
    p.gemm = readPoints(v, doc, "", "gemm_tflops");
    if (const nlohmann::json *a =
            v.member(doc, "", "attention_tflops", true,
                     "{\"forward\": [...], \"backward\": [...]}")) {
      if (v.object(*a, "/attention_tflops", {"forward", "backward"},
                   "the attention rates")) {
        p.attentionForward = readPoints(v, *a, "/attention_tflops", "forward");
        p.attentionBackward =
            readPoints(v, *a, "/attention_tflops", "backward");
      }
    }
    if (auto m = v.number(doc, "", "memory_gbs", 0, true, 1e9, false,
                          "the memory bandwidth in GB/s"))
      p.memoryGBs = *m;
    if (auto k = v.number(doc, "", "kernel_overhead_us", 0, false, 1e9, false,
                          "the per-kernel overhead in microseconds"))
      p.kernelOverheadUs = *k;
    if (doc.contains("compute_scale"))
      if (auto c = v.number(doc, "", "compute_scale", 0, true, 1e6, false,
                            "measured over predicted layer time"))
        p.computeScale = *c;
    if (doc.contains("layer_overhead_us"))
      if (auto o = v.number(doc, "", "layer_overhead_us", 0, false, 1e9, false,
                            "the fixed microseconds per layer and pass"))
        p.layerOverheadUs = *o;
    p.link = readLink(v, doc, "", "link", true, p.link);
  }
  if (!v.diagnostics.empty()) {
    errors = v.diagnostics;
    return std::nullopt;
  }
  return p;
}

nlohmann::ordered_json profileToJson(const DeviceProfile &p) {
  return {{"format", "mimo-profile"},
          {"version", 1},
          {"device", p.device},
          {"kind", p.kind},
          {"measured", p.measured},
          {"source", p.source},
          {"cores", p.cores},
          {"memory_bytes", p.memoryBytes},
          {"peak_tflops", p.peakTflops},
          {"gemm_tflops", pointsJson(p.gemm)},
          {"attention_tflops",
           {{"forward", pointsJson(p.attentionForward)},
            {"backward", pointsJson(p.attentionBackward)}}},
          {"memory_gbs", p.memoryGBs},
          {"kernel_overhead_us", p.kernelOverheadUs},
          {"compute_scale", p.computeScale},
          {"layer_overhead_us", p.layerOverheadUs},
          {"link", linkJson(p.link)}};
}

std::vector<std::string> builtinProfileNames() {
  return {"cpu", "h100", "h200"};
}

std::optional<DeviceProfile> builtinProfile(const std::string &name) {
  DeviceProfile p;
  p.measured = false;
  if (name == "cpu") {
    // One x86-64 core of a cloud VM running mimo's fp32 kernels; measure
    // your own with mimo-run --calibrate.
    p.device = "cpu (estimate: one core of a cloud VM)";
    p.kind = "cpu";
    p.source = "estimate (no calibration); run mimo-run --calibrate";
    p.cores = 2;
    p.memoryBytes = 16.0 * (1ull << 30);
    p.peakTflops = 0.1;
    p.gemm = {{16, 0.002}, {64, 0.02}, {256, 0.045}, {1024, 0.06}};
    p.attentionForward = {{16, 0.002}, {128, 0.006}, {1024, 0.01}};
    p.attentionBackward = {{16, 0.001}, {128, 0.004}, {1024, 0.006}};
    p.memoryGBs = 8;
    p.kernelOverheadUs = 2;
    p.link = {15, 4};
    return p;
  }
  if (name == "h100" || name == "h200") {
    // Datasheet figures (SXM) derated for mimo's fp32 kernels: no GPU run
    // has measured them yet (bench/results has no GPU profile).
    bool h200 = name == "h200";
    p.device = h200 ? "NVIDIA H200 (estimate)" : "NVIDIA H100 SXM (estimate)";
    p.kind = "cuda";
    p.source = "estimate from the datasheet (fp32 67 TFLOP/s, " +
               std::string(h200 ? "4.8" : "3.35") +
               " TB/s); not measured: run mimo-run --calibrate on the GPU";
    p.cores = 1;
    p.memoryBytes = (h200 ? 141.0 : 80.0) * 1e9;
    p.peakTflops = 67;
    p.gemm = {{64, 0.4}, {256, 10}, {1024, 40}, {4096, 50}};
    p.attentionForward = {{64, 1}, {512, 8}, {4096, 20}};
    p.attentionBackward = {{64, 0.6}, {512, 5}, {4096, 12}};
    p.memoryGBs = h200 ? 3800 : 2700;
    p.kernelOverheadUs = 5;
    p.link = {10, h200 ? 1500.0 : 1100.0};
    return p;
  }
  return std::nullopt;
}

std::optional<ClusterConfig> parseCluster(const nlohmann::json &doc,
                                          std::vector<Diagnostic> &errors) {
  JsonValidator v;
  ClusterConfig c;
  if (v.object(doc, "",
               {"format", "version", "name", "devices_per_node", "nodes",
                "links", "measured"},
               "a cluster description") &&
      checkFormat(v, doc, "mimo-cluster")) {
    if (doc.contains("name"))
      if (auto s = v.string(doc, "", "name", false, "the cluster's name"))
        c.name = *s;
    if (auto d = v.integer(doc, "", "devices_per_node", true, 1,
                           "the GPUs (or CPU hosts) per node", 1 << 20))
      c.devicesPerNode = *d;
    if (doc.contains("nodes"))
      if (auto n =
              v.integer(doc, "", "nodes", false, 0,
                        "the nodes (0: as many as the world needs)", 1 << 24))
        c.nodes = *n;
    if (doc.contains("measured"))
      if (auto b = v.boolean(doc, "", "measured", "whether it was measured"))
        c.measured = *b;
    if (const nlohmann::json *links =
            v.member(doc, "", "links", true,
                     "same_device, same_node and cross_node links")) {
      if (v.object(*links, "/links", {"same_device", "same_node", "cross_node"},
                   "the links")) {
        c.sameDevice = readLink(v, *links, "/links", "same_device", true, {});
        c.sameNode = readLink(v, *links, "/links", "same_node", true, {});
        c.crossNode = readLink(v, *links, "/links", "cross_node", true, {});
      }
    }
  }
  if (!v.diagnostics.empty()) {
    errors = v.diagnostics;
    return std::nullopt;
  }
  return c;
}

nlohmann::ordered_json clusterToJson(const ClusterConfig &c) {
  return {{"format", "mimo-cluster"},
          {"version", 1},
          {"name", c.name},
          {"devices_per_node", c.devicesPerNode},
          {"nodes", c.nodes},
          {"measured", c.measured},
          {"links",
           {{"same_device", linkJson(c.sameDevice)},
            {"same_node", linkJson(c.sameNode)},
            {"cross_node", linkJson(c.crossNode)}}}};
}

ClusterConfig defaultCluster(const DeviceProfile &profile) {
  ClusterConfig c;
  c.measured = profile.measured;
  if (profile.kind == "cpu") {
    c.name = "one host (" + profile.device + ")";
    c.devicesPerNode = 1;
    c.nodes = 1;
    c.sameDevice = c.sameNode = c.crossNode = profile.link;
    return c;
  }
  c.name = "nodes of 8 GPUs (estimate: NVLink within, 400 Gb/s between)";
  c.devicesPerNode = 8;
  c.nodes = 0;
  c.sameDevice = profile.link;
  c.sameNode = {10, 360};
  c.crossNode = {20, 45};
  c.measured = false;
  return c;
}

//===----------------------------------------------------------------------===//
// Instruction costs
//===----------------------------------------------------------------------===//

CostModel::CostModel(const Topology &topology, const ModelConfig &config,
                     const DeviceProfile &profile, const ClusterConfig &cluster)
    : topology(topology), config(config), profile(profile), cluster(cluster) {
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
  int64_t devices = cluster.nodes > 0 ? cluster.nodes * cluster.devicesPerNode
                                      : topology.worldSize;
  ranksOnDevice.assign(static_cast<size_t>(std::max<int64_t>(devices, 1)), 0);
  for (int64_t r = 0; r < topology.worldSize; ++r)
    ++ranksOnDevice[static_cast<size_t>(deviceOf(r))];
}

int64_t CostModel::deviceOf(int64_t rank) const {
  int64_t devices = cluster.nodes > 0 ? cluster.nodes * cluster.devicesPerNode
                                      : topology.worldSize;
  return devices > 0 ? rank % devices : 0;
}

int64_t CostModel::nodeOf(int64_t rank) const {
  return deviceOf(rank) / std::max<int64_t>(cluster.devicesPerNode, 1);
}

double CostModel::threadsOf(int64_t rank) const {
  // core/Devices defaultThreads: the device's cores shared by its ranks.
  int64_t sharing = ranksOnDevice[static_cast<size_t>(deviceOf(rank))];
  return std::max<double>(
      1.0, std::floor(static_cast<double>(profile.cores) /
                      static_cast<double>(std::max<int64_t>(sharing, 1))));
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
  if (profile.kind == "cpu")
    return {transfer, latency};
  return {0, latency + transfer};
}

Work CostModel::exchange(const std::vector<int64_t> &group,
                         double bytes) const {
  if (group.size() < 2)
    return {};
  // The farthest pair sets the link.
  return exchangeWork(profile, linkBetween(group.front(), group.back()),
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
  auto [begin, end] = stageLayers(m.numLayers, par.pp, stage);
  shape.layers = static_cast<double>(end - begin);
  shape.first = stage == 0;
  shape.last = stage == par.pp - 1;
  shape.sequenceParallel = shape.language && sequenceParallel && par.tp > 1;
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
  const double F = static_cast<double>(m.ffnHiddenSize);
  const double passes = backward ? 2 : 1; // dX and dW
  // SwiGLU has gate, up and down; the encoders' GELU MLP fc1 and fc2.
  const double mlpIn = shape.language ? 2 : 1;
  StageWork w;
  double layer =
      gemmSeconds(p, rows, 3 * H / tp, H) + gemmSeconds(p, rows, H, H / tp) +
      gemmSeconds(p, rows, mlpIn * F / tp, H) + gemmSeconds(p, rows, H, F / tp);
  // Elementwise passes over [rows, H] and [rows, F/tp] per layer (norms,
  // RoPE, residuals, activation), twice as many backward.
  layer *= passes;
  layer +=
      passes * memorySeconds(p, kFloat * (12 * rows * H + 4 * rows * F / tp));
  layer += passes * kernelSeconds(p, 18);
  layer += attentionSeconds(p, 4 * H / tp * shape.pairs, shape.span, backward);
  w.compute = shape.layers * (layer + passes * p.layerOverheadUs * 1e-6 /
                                          std::max(p.computeScale, 1e-9));
  // Two all-reduces (or SP all-gather + reduce-scatter) per layer over TP;
  // the keys and values gathered over CP.
  w.tpExchanges = 2 * shape.layers;
  w.tpBytes = kFloat * rows * H / (shape.sequenceParallel ? tp : 1);
  w.cpExchanges = shape.layers;
  w.cpBytes = kFloat * 2 * rows * H / tp;
  if (shape.language && shape.last) {
    const double V = static_cast<double>(m.vocabSize);
    w.compute += passes * gemmSeconds(p, rows, V / tp, H) +
                 passes * memorySeconds(p, kFloat * 3 * rows * V / tp) +
                 kernelSeconds(p, 8);
    w.logitExchanges = 3;
    w.logitBytes = kFloat * rows;
  }
  if (!shape.language && shape.first)
    w.compute +=
        passes * gemmSeconds(p, rows, H, static_cast<double>(m.featureDim));
  if (!shape.language && shape.last)
    w.compute += passes * (gemmSeconds(p, rows, outputHidden, H) +
                           gemmSeconds(p, rows, outputHidden, outputHidden));
  w.compute *= p.computeScale;
  return w;
}

std::vector<int64_t> CostModel::group(int64_t rank, const Grid &grid,
                                      std::initializer_list<Dim> dims) const {
  std::vector<int64_t> members{rank};
  for (Dim dim : dims) {
    std::vector<int64_t> grown;
    for (int64_t member : members) {
      Coords c = grid.coordsOf(member);
      for (int64_t i = 0; i < grid.size(dim); ++i) {
        c[dim] = i;
        grown.push_back(grid.rankOf(c));
      }
    }
    members = std::move(grown);
  }
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  return members;
}

Work CostModel::work(int64_t rank, const Instr &in) const {
  const InstrInfo &info = instrInfo(in.op);
  if (info.isSend || info.isRecv)
    return {};
  // Ranks of one stage (same tp) cost the same: cache by stage and op.
  int64_t stage = -1, tpRank = -1;
  if (info.operand == InstrOperand::Module) {
    Coords c = topology.modules[in.index].grid.coordsOf(rank);
    stage = c.pp;
    tpRank = c.tp;
  }
  auto key =
      std::make_tuple(static_cast<int>(in.op), in.index, stage,
                      info.operand == InstrOperand::Module
                          ? tpRank
                          : (in.op == InstrOp::OptimizerStep ? rank : -2));
  // Collective costs depend on where the group's members are; only cache
  // what is the same for every rank of the stage.
  bool cacheable =
      info.operand == InstrOperand::Module && in.op != InstrOp::ReduceGrads;
  if (cacheable) {
    auto it = cache.find(key);
    if (it != cache.end())
      return it->second;
  }
  Work w = compute(rank, in);
  if (cacheable)
    cache.emplace(key, w);
  return w;
}

Work CostModel::compute(int64_t rank, const Instr &in) const {
  Work w;
  const double B = static_cast<double>(topology.microBatchSize);
  const double S = static_cast<double>(topology.seqLength);
  auto moduleWork = [&](size_t mi, bool backward) {
    const ModuleTopology &topo = topology.modules[mi];
    const Grid &grid = topo.grid;
    int64_t stage = grid.coordsOf(rank).pp;
    StageShape shape = stageShape(config, *moduleConfigs[mi], encoderIndex[mi],
                                  topology.microBatchSize, stage,
                                  topology.shard.sequenceParallel);
    StageWork sw = stageWork(*moduleConfigs[mi], shape, backward, profile,
                             static_cast<double>(topo.outputHidden));
    const std::vector<int64_t> tpGroup = group(rank, grid, {Dim::TP});
    const std::vector<int64_t> cpGroup = group(rank, grid, {Dim::CP});
    w.compute = sw.compute;
    w += exchange(tpGroup, sw.tpBytes) * sw.tpExchanges;
    w += exchange(cpGroup, sw.cpBytes) * sw.cpExchanges;
    w += exchange(tpGroup, sw.logitBytes) * sw.logitExchanges;
  };
  auto localValues = [&](size_t mi) {
    const ModuleTopology &topo = topology.modules[mi];
    const Grid &grid = topo.grid;
    Coords c = grid.coordsOf(rank);
    bool sp = topo.isLanguage && topology.shard.sequenceParallel &&
              grid.size(Dim::TP) > 1;
    double values = 0;
    for (const ParamSpec &spec :
         stageParameters(*moduleConfigs[mi],
                         topology.modules[topology.languageIndex()].hidden, sp,
                         grid.size(Dim::PP), c.pp))
      values +=
          static_cast<double>(blockOf(spec, grid.size(Dim::TP), c.tp).size());
    return values;
  };
  switch (in.op) {
  case InstrOp::Forward:
  case InstrOp::Backward:
    moduleWork(static_cast<size_t>(in.index), in.op == InstrOp::Backward);
    return w;
  case InstrOp::Shard:
  case InstrOp::Unshard: {
    const ModuleTopology &topo = topology.modules[in.index];
    const Grid &grid = topo.grid;
    double samples = B / static_cast<double>(grid.size(Dim::DP));
    double lane = kFloat * samples * S * static_cast<double>(topo.hidden);
    w.compute = memorySeconds(profile, 3 * lane) + kernelSeconds(profile, 6);
    std::vector<int64_t> members = group(rank, grid, {Dim::TP, Dim::CP});
    double pieces = static_cast<double>(members.size());
    w += exchange(members, in.op == InstrOp::Shard ? lane : lane / pieces);
    return w;
  }
  case InstrOp::ReduceGrads: {
    const Grid &grid = topology.modules[in.index].grid;
    std::vector<int64_t> members = group(rank, grid, {Dim::DP, Dim::CP});
    double bytes = kFloat * localValues(static_cast<size_t>(in.index));
    double n = static_cast<double>(members.size());
    if (members.size() > 1)
      w.compute = memorySeconds(profile, n * bytes) + kernelSeconds(profile, n);
    w += exchange(members, bytes);
    return w;
  }
  case InstrOp::OptimizerStep: {
    double values = 0, tensors = 0;
    for (size_t mi : topology.modulesOf(rank)) {
      values += localValues(mi);
      tensors += 4 * static_cast<double>(moduleConfigs[mi]->numLayers + 2);
    }
    // AdamW reads parameter, gradient and both moments and writes three;
    // the norm reads the gradients once more.
    w.compute = memorySeconds(profile, kFloat * 8 * values) +
                kernelSeconds(profile, 2 * tensors);
    const LinkCost &far = linkBetween(0, topology.worldSize - 1);
    w.comm = far.latencyUs * 1e-6 *
             std::ceil(std::log2(
                 std::max<double>(2, static_cast<double>(topology.worldSize))));
    return w;
  }
  case InstrOp::BridgeBroadcast:
  case InstrOp::BridgeBroadcastGrad: {
    const BridgeTopology &bridge = topology.bridges[in.index];
    bool down = in.op == InstrOp::BridgeBroadcast;
    const Grid &grid = topology.modules[down ? bridge.dst : bridge.src].grid;
    std::vector<int64_t> members = group(rank, grid, {Dim::TP, Dim::CP});
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
  return linkBetween(rank, peer).seconds(messageBytes(rank, peer, in)) +
         memorySeconds(profile, messageBytes(rank, peer, in));
}

} // namespace mimo
