//===- ParamSpec.h - One parameter: name, shape, TP layout, init -*- C++
//-*-===//
//
// What a module family declares of each parameter (family/ModuleFamily.h);
// config/Parameters.h lists them for every stage of every module.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_FAMILY_PARAMSPEC_H
#define MIMO_RUNTIME_FAMILY_PARAMSPEC_H

#include <cstdint>
#include <string>

namespace mimo {

/// How TP ranks hold a [rows, cols] parameter: whole (replicated), a
/// contiguous block of columns (column-parallel: QKV, gate, up, fc1, the
/// head), or of rows (row-parallel: output, down, fc2, the embedding).
enum class ParamLayout { Replicated, ColumnParallel, RowParallel };
enum class ParamInit { Weight, Ones, Zeros };

struct ParamSpec {
  /// The module's name and the parameter's name within it; its logical
  /// name is "module.local" (name()).
  std::string module, local;
  int64_t rows = 0, cols = 0;
  ParamLayout layout = ParamLayout::Replicated;
  ParamInit init = ParamInit::Weight;
  /// Weights: uniform in [-scale, scale]; 0 means 1 / sqrt(rows).
  float scale = 0;
  /// Replicated, yet each TP rank's gradient is a partial sum, summed over
  /// TP before anything reads it: the norms' weights under sequence
  /// parallelism (each rank's covers its sequence shard), a LoRA factor
  /// beside a TP-cut base (config/Lora.h).
  bool partialOverTp = false;
  /// A routed expert's weight (family/Moe.h): cut over the module's etp
  /// TP ranks, not tp (config/Parameters.h blockOf).
  bool expert = false;
  int64_t size() const { return rows * cols; }
  std::string name() const { return module + "." + local; }
};

} // namespace mimo

#endif // MIMO_RUNTIME_FAMILY_PARAMSPEC_H
