//===- TrainedValues.cpp - A checkpoint's parameters, whole and merged ----===//

#include "runtime/checkpoint/TrainedValues.h"

#include "runtime/checkpoint/FileIo.h"
#include "runtime/config/Lora.h"
#include "runtime/config/Parameters.h"
#include "runtime/device/Device.h"
#include "runtime/model/Model.h"

#include <cmath>
#include <filesystem>
#include <stdexcept>

namespace mimo::exec {

namespace fs = std::filesystem;

namespace {

/// The spec of parameter `name` of `config`; throws when there is none.
ParamSpec specOf(const ModelConfig &config, const std::string &name) {
  for (ParamSpec &spec : modelParameters(config))
    if (spec.name() == name)
      return spec;
  throw std::runtime_error("mimo-run: error: '" + name +
                           "' is not a parameter of this model");
}

} // namespace

TrainedValues::TrainedValues(const ModelConfig &config,
                             const Checkpoint &checkpoint)
    : config(config), checkpoint(checkpoint),
      modelPath((fs::path(checkpoint.dir) / "model.safetensors").string()) {}

TrainedValues::~TrainedValues() = default;

const ModuleConfig &TrainedValues::moduleOf(const std::string &name) const {
  for (const ModuleConfig &m : config.modules)
    if (name.compare(0, m.name.size() + 1, m.name + ".") == 0)
      return m;
  throw std::runtime_error("mimo-run: error: '" + name +
                           "' is not a parameter of this model");
}

std::vector<float> TrainedValues::kept(const std::string &name) {
  const ModuleConfig &module = moduleOf(name);
  const ParamSpec spec = specOf(config, name);
  std::vector<float> values;
  if (const safetensors::TensorEntry *entry = checkpoint.model.find(name)) {
    values.resize(static_cast<size_t>((entry->end - entry->begin) / 4));
    File file(modelPath, O_RDONLY | O_CLOEXEC);
    file.readAt(values.data(), entry->end - entry->begin,
                checkpoint.model.dataOffset + entry->begin);
  } else if (!module.lora || checkpointed(module, spec.local)) {
    throw std::runtime_error(modelPath + ": error: no tensor '" + name + "'");
  } else if (!module.init) { // a base made from the seed
    values = initialValues(config.seed, spec, {0, spec.rows, 0, spec.cols});
  } else { // a base from the module's init
    auto &base = bases[module.name];
    if (!base) {
      std::string error;
      std::optional<ModuleWeights> w =
          openModuleWeights(module.init->from, config, module, error);
      if (!w)
        throw std::runtime_error(error + " (the base of LoRA module '" +
                                 module.name + "')");
      base = std::make_shared<const ModuleWeights>(std::move(*w));
    }
    std::unique_ptr<device::Device> cpu = device::makeCpuDevice();
    Param p;
    p.name = name;
    p.rowEnd = p.globalRows = spec.rows;
    p.colEnd = p.globalCols = spec.cols;
    p.value = device::Tensor::empty(*cpu, spec.size());
    readModuleWeights(*base, {&p});
    values = p.value.toHost();
  }
  for (size_t k = 0; k < values.size(); ++k)
    if (!std::isfinite(values[k]))
      throw std::runtime_error(
          modelPath + ": error: tensor '" + name + "' holds " +
          std::to_string(values[k]) + " at element " + std::to_string(k) +
          ": the checkpoint is not finite (training diverged, or the "
          "file is damaged); nothing is exported: export an earlier "
          "step (--load DIR/step-N)");
  return values;
}

std::vector<float> TrainedValues::whole(const std::string &name) {
  std::vector<float> w = kept(name);
  const ModuleConfig &module = moduleOf(name);
  const std::string local = name.substr(module.name.size() + 1);
  if (!module.lora || !loraTargetOf(*module.lora, local))
    return w;
  const ParamSpec spec = specOf(config, name);
  const std::vector<float> a = kept(loraAName(name));
  const std::vector<float> b = kept(loraBName(name));
  const int64_t K = spec.rows, N = spec.cols, r = module.lora->rank;
  const double s = module.lora->scale();
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < r; ++k)
        sum += static_cast<double>(a[static_cast<size_t>(i * r + k)]) *
               static_cast<double>(b[static_cast<size_t>(k * N + j)]);
      float &v = w[static_cast<size_t>(i * N + j)];
      v = static_cast<float>(static_cast<double>(v) + s * sum);
    }
  return w;
}

} // namespace mimo::exec
