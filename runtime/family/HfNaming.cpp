//===- HfNaming.cpp - Hugging Face folders: names and layouts -------------===//

#include "runtime/family/HfNaming.h"

#include <cmath>

namespace mimo {

std::optional<std::pair<std::string, std::string>>
splitLayerName(const std::string &local) {
  if (local.rfind("layers.", 0) != 0)
    return std::nullopt;
  size_t dot = local.find('.', 7);
  if (dot == std::string::npos || dot == 7)
    return std::nullopt;
  return std::make_pair(local.substr(7, dot - 7), local.substr(dot + 1));
}

int64_t exactSquareRoot(int64_t n) {
  if (n <= 0)
    return -1;
  auto r = static_cast<int64_t>(std::llround(std::sqrt(double(n))));
  return r * r == n ? r : -1;
}

PatchGeometry patchGeometryOf(int64_t featureDim) {
  if (featureDim % 3 == 0 && exactSquareRoot(featureDim / 3) > 0)
    return {3, exactSquareRoot(featureDim / 3)};
  if (exactSquareRoot(featureDim) > 0)
    return {1, exactSquareRoot(featureDim)};
  return {featureDim, 1};
}

std::string hfActivationName(const std::string &mimo) {
  if (mimo == "gelu_tanh")
    return "gelu_pytorch_tanh";
  return mimo; // "gelu", "quick_gelu"
}

std::string mimoActivationName(const std::string &hf) {
  if (hf == "gelu_pytorch_tanh" || hf == "gelu_new")
    return "gelu_tanh";
  if (hf == "gelu" || hf == "quick_gelu")
    return hf;
  return "";
}

void stampHfConfig(nlohmann::ordered_json &config, const std::string &dtype) {
  config["torch_dtype"] = dtype == "bf16" ? "bfloat16" : "float32";
  config["transformers_version"] = "4.45.0";
}

} // namespace mimo
