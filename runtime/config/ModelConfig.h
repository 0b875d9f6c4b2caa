//===- ModelConfig.h - model.json version 1 --------------------*- C++ -*-===//
//
// The validated, defaults-filled form of model.json (docs/model-json.md).
// Parsing checks the document itself: syntax, keys (with "did you mean"),
// types, ranges and the relations between fields that do not depend on the rank
// layout. Grid and layout checks belong to mimo-assign-grids, which reports
// them at IR locations that point back into model.json.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CONFIG_MODELCONFIG_H
#define MIMO_RUNTIME_CONFIG_MODELCONFIG_H

#include "runtime/config/Grid.h"
#include "runtime/config/Lora.h"
#include "runtime/family/ModuleArch.h"
#include "runtime/json/Diagnostic.h"
#include "runtime/schedule/PipelineSchedule.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mimo {

inline constexpr int64_t kModelVersion = 1;

struct ParallelConfig {
  int64_t tp = 1, cp = 1, pp = 1, dp = 1;
  int64_t rankOffset = 0;
  bool sequenceParallel = false;
  /// docs/model-json.md `cp_comm`: how the CP group's keys and values
  /// meet its queries: passed around the group one block at a time
  /// ("ring", the default) or all-gathered ("all_gather").
  std::string cpComm = "ring";
  bool ringCp() const { return cp > 1 && cpComm == "ring"; }
  /// docs/model-json.md `virtual_stages`: chunks of layers per pipeline
  /// rank under the interleaved schedule (Megatron's virtual pipeline).
  int64_t virtualStages = 1;
  /// docs/model-json.md `ep`: a sparse module's experts split over ep
  /// members of each DP x CP group (plan/Plan.h expertGroups).
  int64_t ep = 1;
  /// docs/model-json.md `etp`: the TP ranks each expert is cut over (a
  /// divisor of tp; 0: tp, as the dense MLP), expertTp() resolving it.
  int64_t etp = 0;
  DimOrder order = kDefaultOrder;

  int64_t expertTp() const { return etp > 0 ? etp : tp; }

  Grid grid() const { return Grid({tp, cp, dp, pp}, order, rankOffset); }
};

/// docs/model-json.md `init`: the module's starting weights.
struct InitConfig {
  /// A mimo checkpoint folder (DIR or DIR/step-N), absolute once compiled
  /// (resolveInitPaths).
  std::string from;
  std::string format = "mimo";
  /// `adapter`: a PEFT LoRA folder read over the base (absolute once
  /// compiled); empty when none.
  std::string adapterFrom;
};

/// A module of model.json: its architecture (family/ModuleArch.h) and how
/// it is laid out, frozen, recomputed and started.
struct ModuleConfig : ModuleArch {
  std::string name;
  /// Encoders only; -1 for the language module.
  int64_t specialTokenId = -1;
  ParallelConfig parallel;
  /// docs/model-json.md `freeze`: every parameter (freezeAll), or those
  /// whose local names begin with one of `freezePrefixes` in whole
  /// dot-separated parts ("layers" freezes "layers.0.wq", "layers.1" not
  /// "layers.10.wq"), or (freezeBody, `"encoder_body"`) every parameter of
  /// an encoder but its projector's.
  bool freezeAll = false, freezeBody = false;
  std::vector<std::string> freezePrefixes;
  /// docs/model-json.md `lora`: adapters on the targeted linear layers;
  /// every other parameter frozen but its `modules_to_save`.
  std::optional<LoraConfig> lora;
  /// Scales the learning rate of the module's parameters.
  double lrMult = 1.0;
  /// docs/model-json.md `recompute` ("none", "selective" or "full") and
  /// `recompute_layers` (full: how many layers of each stage, from its
  /// first; -1: all). full: a layer keeps only its input from the forward
  /// and runs its forward again in the backward; selective: every layer
  /// drops its MLP activation's output and makes it again from the gate
  /// (and up) projection in the backward.
  std::string recompute = "none";
  int64_t recomputeLayers = -1;
  /// Whether the `index`-th of a stage's `count` layers recomputes.
  bool recomputes(int64_t index, int64_t count) const {
    return recompute == "full" && index < count &&
           (recomputeLayers < 0 || index < recomputeLayers);
  }
  /// How many of a stage's `count` layers recompute.
  int64_t recomputed(int64_t count) const {
    if (recompute != "full")
      return 0;
    return recomputeLayers < 0 ? count : std::min(recomputeLayers, count);
  }
  /// docs/model-json.md `distributed_optimizer` (Megatron's
  /// use_distributed_optimizer, ZeRO-1): the AdamW moments are sharded over
  /// the module's DP x CP group, its gradients reduce-scattered and the
  /// updated weights all-gathered (exec/OptimizerShards.h).
  bool distributedOptimizer = false;
  /// docs/model-json.md `pipeline_layers`: the layers of each pipeline
  /// stage, first to last, summing to numLayers (empty: num_layers / pp
  /// each). stageLayerCounts (Parameters.h) is what stages compute.
  std::vector<int64_t> pipelineLayers;
  /// Where the module's weights start (else they are initialised).
  std::optional<InitConfig> init;
  /// JSON pointer of this module ("/modules/1").
  std::string pointer;

  /// Whether parameter `local` (its name within the module) is frozen:
  /// never an adapter factor nor, under `lora`, a `modules_to_save`
  /// parameter; under `lora` every other one.
  bool frozen(const std::string &local) const;
  bool freezesAny() const {
    return freezeAll || freezeBody || !freezePrefixes.empty() ||
           lora.has_value();
  }
};

/// Whether local parameter name `local` begins with `prefix` in whole
/// dot-separated parts.
bool namePrefixMatches(const std::string &local, const std::string &prefix);

struct BatchConfig {
  int64_t microBatchSize = 0, numMicrobatches = 0, seqLength = 0;
  bool packing = false;
  std::string attentionMask = "causal";
  /// The pipeline schedule (batch.schedule, docs/plan.md "Schedules"),
  /// parsed once: never null.
  const PipelineSchedule *schedule = &defaultSchedule();
  /// Whether model.json names the schedule (tune then keeps it, "1f1b"
  /// too; the writer writes it back).
  bool scheduleNamed = false;
};

struct TokenRange {
  int64_t min = 0, max = 0;
};

struct DataConfig {
  /// "synthetic", "jsonl" or "indexed" (Megatron's .bin/.idx, text only).
  std::string source = "synthetic";
  /// jsonl: the data file; indexed: the PREFIX of PREFIX.bin/.idx; as
  /// written in model.json (resolved against its directory by mimoc).
  std::string path;
  /// Files only: the held-out data of the same kind (optional).
  std::string evalPath;
  /// Synthetic only: modality-token count range per encoder, in module order
  /// (every encoder present, defaults filled).
  std::vector<std::pair<std::string, TokenRange>> tokensPerSample;
  double textOnlyFraction = 0.0;
  /// Files only (docs/data.md "Order"): a seeded permutation of each
  /// dataset's samples per epoch; several datasets of the source's kind
  /// drawn from with weights (Megatron's blend) in place of `path`.
  bool shuffle = false;
  /// Indexed only: "windows" (the token stream cut into seq_length
  /// windows; text only) or "sequences" (one sample per sequence, with
  /// binary features and masks; the default with encoders).
  std::string samples = "windows";
  struct BlendEntry {
    std::string path;
    double weight = 1.0;
  };
  std::vector<BlendEntry> blend;
};

/// docs/runtime.md, Megatron's shape, counted from step 1.
struct LrSchedule {
  int64_t warmupSteps = 0;
  std::string decay = "constant"; // "constant", "cosine" or "linear"
  int64_t decaySteps = 0;
  double minLr = 0.0;
};

struct TrainConfig {
  int64_t steps = 10;
  std::string optimizer = "adamw";
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.0;
  /// Weight decay on every parameter; by default (Megatron's rule) biases
  /// and norm weights, the parameters of one row, are not decayed.
  bool decayAll = false;
  /// 0 disables clipping.
  double clipGrad = 1.0;
  LrSchedule lrSchedule;
  /// Held-out loss every evalEvery steps (0: never) over evalSteps batches.
  int64_t evalEvery = 0, evalSteps = 1;
  /// "fp32" or "bf16": the data-parallel gradient reduction's type
  /// (docs/model.md "Gradient reduction in bf16").
  std::string gradReduceDtype = "fp32";
  bool reducesInBf16() const { return gradReduceDtype == "bf16"; }
};

struct ModelConfig {
  int64_t version = kModelVersion;
  std::string name;
  int64_t seed = 1234;
  std::string precision = "fp32";
  std::optional<int64_t> worldSize;
  BatchConfig batch;
  std::vector<ModuleConfig> modules;
  DataConfig data;
  TrainConfig train;

  /// Index of the (single) language module.
  size_t languageIndex() const;
  const ModuleConfig &language() const { return modules[languageIndex()]; }
  /// Whether any module has sparse layers (`aux_loss` in the metrics).
  bool hasMoe() const {
    for (const ModuleConfig &m : modules)
      if (m.hasMoe())
        return true;
    return false;
  }
};

struct ParseResult {
  std::optional<ModelConfig> config;
  /// Every error found; empty when `config` is set.
  std::vector<Diagnostic> diagnostics;
};

/// One kind of model.json object and the keys it takes. The parser checks
/// each object against its list; docs/model-json.md documents every key
/// (a unit test holds the two together).
struct ModelJsonObject {
  std::string pointer; // "/batch", "/modules/N/arch (encoder)", ...
  std::vector<std::string> keys;
};
const std::vector<ModelJsonObject> &modelJsonObjects();

/// The keys of the object at `pointer` (one of modelJsonObjects()).
const std::vector<std::string> &modelJsonKeys(std::string_view pointer);

/// Parses and validates model.json text. `fileName` supplies the default
/// model name (its stem).
ParseResult parseModelConfig(std::string_view text, std::string_view fileName);

/// Validates an already parsed document (as embedded in a plan file).
ParseResult validateModelConfig(const nlohmann::json &document,
                                std::string_view fileName);

/// The canonical model.json of `config`, every default written out; parsing
/// it gives `config` back.
/// Every module's `init.from`, relative to `modelDir` when not absolute
/// (the folder may not exist yet: stage 2 compiles before stage 1 runs).
void resolveInitPaths(ModelConfig &config, const std::string &modelDir);

nlohmann::json toJson(const ModelConfig &config);

} // namespace mimo

#endif // MIMO_RUNTIME_CONFIG_MODELCONFIG_H
