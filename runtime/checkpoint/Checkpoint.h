//===- Checkpoint.h - Checkpoints that reshard ------------------*- C++ -*-===//
//
// docs/checkpoints.md. A checkpoint is a directory DIR/step-N holding
//   model.safetensors      every parameter as one global, unsharded fp32
//                          tensor named by its logical name
//                          ("language.layers.3.gate"), shape [cols] for a
//                          one-row parameter, else [rows, cols]
//   optimizer.safetensors  AdamW's moments: NAME.exp_avg, NAME.exp_avg_sq
//   state.json             format and version, step, consumed samples, seed,
//                          the learning rate's schedule and next value, an
//                          architecture digest, the layout written from
// in the order of config/Parameters.h, the same in every layout. Ranks write
// the blocks they own (TP shards; replicas once) straight into their place
// in the files, in parallel; rank 0 creates the files under step-N.tmp,
// and after every rank has written and synced, renames it to step-N and
// then replaces DIR/latest. A run killed while saving leaves the previous
// checkpoint intact.
//
// Loading checks everything (state.json, both headers, every name, dtype and
// shape against this model) before any rank starts; then each rank reads
// the blocks it holds, whatever layout wrote them.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CHECKPOINT_CHECKPOINT_H
#define MIMO_RUNTIME_CHECKPOINT_CHECKPOINT_H

#include "runtime/checkpoint/Safetensors.h"
#include "runtime/config/ModelConfig.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mimo::exec {

class Stage;
struct Param;

inline constexpr int64_t kCheckpointVersion = 1;

/// The files of a checkpoint of `config` (headers with every tensor's
/// offsets), as every rank computes them alike.
struct CheckpointFiles {
  safetensors::Header model, optimizer;
  std::string modelHeader, optimizerHeader; // the encoded bytes
};
CheckpointFiles checkpointFiles(const ModelConfig &config);

/// The architecture's digest: the hash of every parameter's name and shape.
std::string architectureDigest(const ModelConfig &config);

/// A checkpoint found and checked against a model (docs/checkpoints.md).
struct Checkpoint {
  std::string dir; // DIR/step-N
  int64_t step = 0;
  safetensors::Header model, optimizer;
  nlohmann::json state;
};

/// Validates the text of a checkpoint's state.json (docs/checkpoints.md,
/// docs/limits.md): fills `state` and returns the step it was written after, or
/// std::nullopt with `error` naming the file and the problem.
std::optional<int64_t> parseCheckpointState(std::string_view text,
                                            const std::string &statePath,
                                            nlohmann::json &state,
                                            std::string &error);

/// Finds the checkpoint at `path` (DIR, resolved through DIR/latest, or a
/// step-N directory itself) and checks it against `config`: its tensors,
/// architecture digest and modules always, its model name and seed unless
/// `otherRun` (starting from another run's weights on purpose); on a
/// problem returns nullopt with `error` naming the file and, where one is
/// at fault, the tensor or the state's key.
std::optional<Checkpoint> openCheckpoint(const std::string &path,
                                         const ModelConfig &config,
                                         std::string &error,
                                         bool otherRun = false);

/// A LoRA checkpoint's adapters apply to the base state.json's lora_base
/// names (docs/checkpoints.md): "" when each LoRA module of `config` has
/// that base (its init, or the seed), else the error at /lora_base/MODULE.
/// openCheckpoint asks unless `otherRun`; an export always (it merges
/// onto the base).
std::string loraBaseProblem(const Checkpoint &checkpoint,
                            const ModelConfig &config);

/// The step directory a checkpoint path names: DIR/step-N itself, or the
/// one DIR/latest names; nullopt with `error` when neither is there.
std::optional<std::string> checkpointStepDir(const std::string &path,
                                             std::string &error);

struct HfFolder;
struct PeftAdapter;

/// A module's starting weights (docs/model-json.md `init`): format mimo,
/// the step directory and its model file's header; format hf, the opened
/// Hugging Face folder (checkpoint/HfWeights.h).
struct ModuleWeights {
  std::string dir, module;
  safetensors::Header model;
  /// A Hugging Face folder, and the module it initialises (its kind and
  /// arch decide the names).
  std::shared_ptr<const HfFolder> hf;
  std::shared_ptr<const ModuleConfig> hfModule;
  /// The init's PEFT adapter folder over the Hugging Face base, or null.
  std::shared_ptr<const PeftAdapter> adapter;
};

/// Opens the checkpoint at `path` for `module`'s weights: every parameter
/// of the module there, F32, at this model's shapes (other modules'
/// tensors, the optimizer state, the model name and seed are not looked
/// at); nullopt with `error` naming the file and the tensor.
std::optional<ModuleWeights> openModuleWeights(const std::string &path,
                                               const ModelConfig &config,
                                               const ModuleConfig &module,
                                               std::string &error);

/// Every rank: the blocks of `params` (one module's, any layout) from
/// `weights`; moments untouched.
void readModuleWeights(const ModuleWeights &weights,
                       const std::vector<Param *> &params);

/// Whether `dir` can hold checkpoints (created when missing); the reason
/// when not.
std::optional<std::string> checkpointDirProblem(const std::string &dir);

/// docs/checkpoints.md: one run saves into a folder at a time. Holds an
/// exclusive flock on DIR/.mimo-lock (released when the process ends,
/// however it ends: no stale lock) with the holder's pid, host and start
/// written in it; a second run asking for the same folder gets nullptr and
/// `problem` naming the holder.
class SaveFolderLock {
public:
  static std::unique_ptr<SaveFolderLock> acquire(const std::string &dir,
                                                 std::string &problem);
  ~SaveFolderLock();
  SaveFolderLock(const SaveFolderLock &) = delete;
  SaveFolderLock &operator=(const SaveFolderLock &) = delete;

private:
  SaveFolderLock() = default;
  int fd = -1;
};

/// The parameters one rank holds, with whether it writes them (one owner
/// per block: data- and context-parallel rank 0, and for replicated
/// parameters tensor-parallel rank 0).
struct HeldParams {
  std::vector<Param *> params;
  std::vector<bool> owned;
};

/// Rank 0, before the others write: step-N.tmp with both files created at
/// their full size and their headers written.
void beginCheckpoint(const std::string &dir, int64_t step,
                     const CheckpointFiles &files);
/// Every rank: its owned blocks (weights and moments) into step-N.tmp,
/// synced to disk.
void writeCheckpointShards(const std::string &dir, int64_t step,
                           const CheckpointFiles &files,
                           const HeldParams &held);
/// Every module's Hugging Face folder of origin, {module: DIR}: its init
/// folder (format hf), or the one the init checkpoint's state.json records
/// (format mimo); a module with neither is left out. state.json keeps it
/// ("hf_origin"): --export-hf takes the pretrained config values and the
/// tokenizer from there, however many stages later.
nlohmann::json hfOriginsOf(const ModelConfig &config);

/// Rank 0, after every rank has written: state.json, then step-N.tmp ->
/// step-N, then DIR/latest; each synced.
void finishCheckpoint(const std::string &dir, int64_t step,
                      const ModelConfig &config, const nlohmann::json &layout);

/// Every rank: the blocks of the parameters it holds (and their moments)
/// from `checkpoint`.
void readCheckpointShards(const Checkpoint &checkpoint, const HeldParams &held);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_CHECKPOINT_CHECKPOINT_H
