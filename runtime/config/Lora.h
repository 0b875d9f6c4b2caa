//===- Lora.h - Low-rank adapters: targets, names, scale --------*- C++ -*-===//
//
// docs/model-json.md `lora` and docs/model.md "LoRA": the one place that
// says which linear layers an adapter can target, what its two factors are
// called and how they are cut under TP, and the scale s that multiplies
// B·A. The parser, the stages' parameters, the model, checkpoints and the
// PEFT reader and writer all ask here.
//
// In mimo's [in, out] weight layout a targeted W [K, N] computes
// y = x·W + s·(x·A)·B with A [K, r] and B [r, N] (PEFT's lora_A.weight is
// A^T, [r, in]; lora_B.weight is B^T, [out, r]).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CONFIG_LORA_H
#define MIMO_RUNTIME_CONFIG_LORA_H

#include "runtime/family/ParamSpec.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mimo {

/// A module's `lora` object.
struct LoraConfig {
  int64_t rank = 0;
  double alpha = 0;
  /// Canonical target names (loraTargetNames), in the order written.
  std::vector<std::string> targets;
  bool rslora = false;
  /// `modules_to_save`: parameter-name prefixes trained fully beside the
  /// adapters (in whole dot-separated parts, as `freeze`'s).
  std::vector<std::string> modulesToSave;
  /// s: alpha / r, or alpha / sqrt(r) with rslora (PEFT's scaling).
  double scale() const;
  bool hasTarget(const std::string &target) const;
};

/// One linear layer a LoRA target names: its canonical name (model.json),
/// the parameter it adapts within a layer ("wq"), the other names accepted
/// for it (PEFT's Llama and CLIP module names), and which modules have it.
struct LoraTarget {
  std::string name, param;
  std::vector<std::string> aliases;
  bool language, encoder;
};
const std::vector<LoraTarget> &loraTargets();

/// The canonical target `written` names ("q_proj" -> "q"), or nullopt.
std::optional<std::string> canonicalLoraTarget(const std::string &written);

/// The canonical targets a module of this kind has, in loraTargets order
/// (what "all-linear" stands for).
std::vector<std::string> loraTargetNames(bool language);

/// The adapter factors of base parameter `base` ("layers.3.wq" ->
/// "layers.3.wq.lora_A", "...lora_B").
std::string loraAName(const std::string &base);
std::string loraBName(const std::string &base);
/// Whether `local` is an adapter factor; `base` gets its base's name.
bool isLoraFactor(const std::string &local, std::string *base = nullptr,
                  bool *isB = nullptr);

/// The canonical target of base parameter `local` ("layers.3.wq" -> "q")
/// when `lora` targets it, else nullopt.
std::optional<std::string> loraTargetOf(const LoraConfig &lora,
                                        const std::string &local);

/// `specs` with each targeted base followed by its A [K, r] and B [r, N]:
/// under TP the factor on the base's cut side is cut with it (a
/// column-parallel base: B by columns; row-parallel: A by rows) and the
/// other is whole on every TP rank, its gradient a partial sum over TP.
/// A is initialised as PEFT does (Kaiming-uniform: U(-1/sqrt(K),
/// 1/sqrt(K))), B to zeros.
void addLoraFactors(const LoraConfig &lora, std::vector<ParamSpec> &specs);

} // namespace mimo

#endif // MIMO_RUNTIME_CONFIG_LORA_H
