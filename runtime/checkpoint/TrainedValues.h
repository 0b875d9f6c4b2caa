//===- TrainedValues.h - A checkpoint's parameters, whole and merged -*- C++
//-*-===//
//
// What an export writes of each parameter: its whole fp32 value as the
// checkpoint has it trained. A LoRA module's checkpoint holds its adapters
// and modules_to_save only (docs/checkpoints.md "LoRA"): its frozen base
// comes from the module's init (a mimo checkpoint or a Hugging Face
// folder) or from the seed, and a targeted weight is merged with its
// adapters (docs/model.md "LoRA"):
//
//   W'[i, j] = fp32( W[i, j] + s · Σ_k A[i, k] · B[k, j] )
//
// summed in double and rounded once.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CHECKPOINT_TRAINEDVALUES_H
#define MIMO_RUNTIME_CHECKPOINT_TRAINEDVALUES_H

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/config/ModelConfig.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mimo::exec {

class TrainedValues {
public:
  /// `checkpoint` opened for `config` (openCheckpoint).
  TrainedValues(const ModelConfig &config, const Checkpoint &checkpoint);
  ~TrainedValues();
  /// Parameter `name` ("module.local") whole, [rows, cols] row-major, a
  /// LoRA target merged with its adapters; throws std::runtime_error
  /// naming the file and the tensor when it cannot be read or is not
  /// finite.
  std::vector<float> whole(const std::string &name);
  /// As it is kept: a LoRA target unmerged (its base), an adapter as is.
  std::vector<float> kept(const std::string &name);

private:
  const ModuleConfig &moduleOf(const std::string &name) const;
  const ModelConfig &config;
  const Checkpoint &checkpoint;
  std::string modelPath;
  /// Each LoRA module's base, opened once (its init).
  std::map<std::string, std::shared_ptr<const ModuleWeights>> bases;
};

} // namespace mimo::exec

#endif // MIMO_RUNTIME_CHECKPOINT_TRAINEDVALUES_H
