//===- Lora.cpp - Low-rank adapters: targets, names, scale ----------------===//

#include "runtime/config/Lora.h"

#include <algorithm>
#include <cmath>

namespace mimo {

double LoraConfig::scale() const {
  const double r = static_cast<double>(rank);
  return rslora ? alpha / std::sqrt(r) : alpha / r;
}

bool LoraConfig::hasTarget(const std::string &target) const {
  return std::find(targets.begin(), targets.end(), target) != targets.end();
}

const std::vector<LoraTarget> &loraTargets() {
  static const std::vector<LoraTarget> targets = {
      {"q", "wq", {"wq", "q_proj"}, true, true},
      {"k", "wk", {"wk", "k_proj"}, true, true},
      {"v", "wv", {"wv", "v_proj"}, true, true},
      {"o", "wo", {"wo", "o_proj", "out_proj"}, true, true},
      {"gate", "gate", {"gate_proj"}, true, false},
      {"up", "up", {"up_proj"}, true, false},
      {"down", "down", {"down_proj"}, true, false},
      {"fc1", "fc1", {}, false, true},
      {"fc2", "fc2", {}, false, true},
  };
  return targets;
}

std::optional<std::string> canonicalLoraTarget(const std::string &written) {
  for (const LoraTarget &t : loraTargets())
    if (t.name == written || std::find(t.aliases.begin(), t.aliases.end(),
                                       written) != t.aliases.end())
      return t.name;
  return std::nullopt;
}

std::vector<std::string> loraTargetNames(bool language) {
  std::vector<std::string> out;
  for (const LoraTarget &t : loraTargets())
    if (language ? t.language : t.encoder)
      out.push_back(t.name);
  return out;
}

std::string loraAName(const std::string &base) { return base + ".lora_A"; }
std::string loraBName(const std::string &base) { return base + ".lora_B"; }

bool isLoraFactor(const std::string &local, std::string *base, bool *isB) {
  for (const char *suffix : {".lora_A", ".lora_B"}) {
    const std::string s = suffix;
    if (local.size() > s.size() &&
        local.compare(local.size() - s.size(), s.size(), s) == 0) {
      if (base)
        *base = local.substr(0, local.size() - s.size());
      if (isB)
        *isB = s == ".lora_B";
      return true;
    }
  }
  return false;
}

std::optional<std::string> loraTargetOf(const LoraConfig &lora,
                                        const std::string &local) {
  // A layer's linear: "layers.<l>.<param>".
  const std::string layers = "layers.";
  if (local.compare(0, layers.size(), layers) != 0)
    return std::nullopt;
  const size_t dot = local.find('.', layers.size());
  if (dot == std::string::npos)
    return std::nullopt;
  const std::string param = local.substr(dot + 1);
  for (const LoraTarget &t : loraTargets())
    if (t.param == param && lora.hasTarget(t.name))
      return t.name;
  return std::nullopt;
}

void addLoraFactors(const LoraConfig &lora, std::vector<ParamSpec> &specs) {
  std::vector<ParamSpec> out;
  out.reserve(specs.size());
  for (ParamSpec &spec : specs) {
    const bool adapted = loraTargetOf(lora, spec.local).has_value();
    const ParamLayout base = spec.layout;
    out.push_back(spec);
    if (!adapted)
      continue;
    const bool column = base == ParamLayout::ColumnParallel;
    ParamSpec a;
    a.module = spec.module;
    a.local = loraAName(spec.local);
    a.rows = spec.rows, a.cols = lora.rank;
    a.layout = column ? ParamLayout::Replicated : base;
    a.init = ParamInit::Weight; // 1 / sqrt(rows): PEFT's Kaiming-uniform
    a.partialOverTp = column;
    ParamSpec b;
    b.module = spec.module;
    b.local = loraBName(spec.local);
    b.rows = lora.rank, b.cols = spec.cols;
    b.layout = column ? base : ParamLayout::Replicated;
    b.init = ParamInit::Zeros;
    b.partialOverTp = !column;
    out.push_back(std::move(a));
    out.push_back(std::move(b));
  }
  specs = std::move(out);
}

} // namespace mimo
