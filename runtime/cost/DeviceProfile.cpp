//===- DeviceProfile.cpp - Devices and clusters for the cost model --------===//

#include "runtime/cost/DeviceProfile.h"

#include "runtime/json/JsonValidator.h"

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

namespace {

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

/// {"forward": [...], "backward": [...]} at `key` (absent: nothing read
/// unless required).
void readAttention(JsonValidator &v, const nlohmann::json &doc,
                   const std::string &key, bool required,
                   std::vector<RatePoint> &forward,
                   std::vector<RatePoint> &backward) {
  if (!required && !doc.contains(key))
    return;
  if (const nlohmann::json *a =
          v.member(doc, "", key, required,
                   "{\"forward\": [...], \"backward\": [...]}")) {
    if (v.object(*a, "/" + key, {"forward", "backward"},
                 "the attention rates")) {
      forward = readPoints(v, *a, "/" + key, "forward");
      backward = readPoints(v, *a, "/" + key, "backward");
    }
  }
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
                                         "attention_backend",
                                         "cores",
                                         "memory_bytes",
                                         "peak_tflops",
                                         "peak_tflops_bf16",
                                         "gemm_tflops",
                                         "gemm_bf16_tflops",
                                         "attention_tflops",
                                         "attention_bf16_tflops",
                                         "memory_gbs",
                                         "kernel_overhead_us",
                                         "compute_scale",
                                         "layer_overhead_us",
                                         "collective_gbs",
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
    if (doc.contains("attention_backend"))
      if (auto s =
              v.choice(doc, "", "attention_backend", false, {"mimo", "cudnn"},
                       "the attention backend its rates are of"))
        p.attentionBackend = *s;
    if (auto c = v.integer(doc, "", "cores", true, 1,
                           "the cores ranks of one device share", 1 << 20))
      p.cores = *c;
    if (auto m = v.number(doc, "", "memory_bytes", 0, true, 1e18, false,
                          "the memory of one device in bytes"))
      p.memoryBytes = *m;
    if (auto t = v.number(doc, "", "peak_tflops", 0, true, 1e9, false,
                          "the peak TFLOP/s (for MFU)"))
      p.peakTflops = *t;
    if (doc.contains("peak_tflops_bf16"))
      if (auto t = v.number(doc, "", "peak_tflops_bf16", 0, false, 1e9, false,
                            "the bf16 peak TFLOP/s (for MFU)"))
        p.peakTflopsBf16 = *t;
    p.gemm = readPoints(v, doc, "", "gemm_tflops");
    if (doc.contains("gemm_bf16_tflops"))
      p.gemmBf16 = readPoints(v, doc, "", "gemm_bf16_tflops");
    readAttention(v, doc, "attention_tflops", true, p.attentionForward,
                  p.attentionBackward);
    readAttention(v, doc, "attention_bf16_tflops", false,
                  p.attentionBf16Forward, p.attentionBf16Backward);
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
    if (doc.contains("collective_gbs"))
      if (auto c = v.number(doc, "", "collective_gbs", 0, false, 1e9, false,
                            "the all-reduce bytes per second in GB/s"))
        p.collectiveGBs = *c;
    p.link = readLink(v, doc, "", "link", true, p.link);
  }
  if (!v.diagnostics.empty()) {
    errors = v.diagnostics;
    return std::nullopt;
  }
  return p;
}

nlohmann::ordered_json profileToJson(const DeviceProfile &p) {
  nlohmann::ordered_json doc = {
      {"format", "mimo-profile"},
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
      {"collective_gbs", p.collectiveGBs},
      {"link", linkJson(p.link)}};
  if (p.peakTflopsBf16 > 0)
    doc["peak_tflops_bf16"] = p.peakTflopsBf16;
  if (!p.gemmBf16.empty())
    doc["gemm_bf16_tflops"] = pointsJson(p.gemmBf16);
  if (!p.attentionBf16Forward.empty())
    doc["attention_bf16_tflops"] = {
        {"forward", pointsJson(p.attentionBf16Forward)},
        {"backward", pointsJson(p.attentionBf16Backward)}};
  if (!p.attentionBackend.empty())
    doc["attention_backend"] = p.attentionBackend;
  return doc;
}

DeviceProfile forPrecision(const DeviceProfile &profile,
                           const std::string &precision) {
  DeviceProfile p = profile;
  if (precision == "bf16") {
    if (!p.gemmBf16.empty())
      p.gemm = p.gemmBf16;
    if (p.peakTflopsBf16 > 0)
      p.peakTflops = p.peakTflopsBf16;
    if (!p.attentionBf16Forward.empty()) {
      p.attentionForward = p.attentionBf16Forward;
      p.attentionBackward = p.attentionBf16Backward;
    }
  }
  return p;
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
    // bf16 operands on tensor cores (dense peak 989 TFLOP/s), the operands'
    // conversion included.
    p.peakTflopsBf16 = 989.4;
    p.gemmBf16 = {{64, 0.5}, {256, 20}, {1024, 250}, {4096, 600}};
    p.attentionForward = {{64, 1}, {512, 8}, {4096, 20}};
    p.attentionBackward = {{64, 0.6}, {512, 5}, {4096, 12}};
    // bf16 on tensor cores (FlashMmaBodies.h: mma.sync from shared memory,
    // no asynchronous copies): a guess at a third of FlashAttention-2's.
    p.attentionBf16Forward = {{64, 5}, {512, 60}, {4096, 130}};
    p.attentionBf16Backward = {{64, 3}, {512, 35}, {4096, 80}};
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

} // namespace mimo
