//===- Tune.h - Searching every module's grid ------------------*- C++ -*-===//
//
// `mimoc tune MODEL.json --world N` (docs/tune.md). The search:
//
//  1. Enumerate layouts: colocated (every module on all N ranks, encoders
//     pp 1) and non-colocated (module spans in model order tiling [0, N)),
//     each module's tp, cp, pp, dp (the divisibility rules of
//     plan/ShapeRules.h: heads, ffn and vocabulary by tp, layers by pp, the
//     sequence by the CP/SP factor, encoder cp 1, bridge lanes dividing),
//     SP on whenever TP > 1 allows it, and the microbatch count (the global
//     batch micro_batch_size x num_microbatches kept, the micro-batch by
//     every dp). Up to 64 ranks every split of the ranks is tried; above,
//     module spans move in steps of N / 64.
//  2. Rank them by an analytic 1F1B estimate from the same stage costs
//     (cost/CostModel.h): (M - 1) x the slowest stage + the pipeline's
//     fill, or the device's total work over its cores when that is larger.
//  3. For the best, build the real plan, drop those whose memory plan
//     (docs/tune.md) exceeds the limit, simulate every rank's stream
//     (cost/Simulate.h), and rank by simulated step time.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_CODEGEN_TUNE_H
#define MIMO_CODEGEN_TUNE_H

#include "runtime/config/ModelConfig.h"
#include "runtime/cost/CostModel.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mimo {

struct TuneOptions {
  int64_t worldSize = 0;
  /// Bytes one rank may use (0: the profile's device memory divided by the
  /// ranks sharing a device).
  double memoryBytes = 0;
  DeviceProfile profile;
  ClusterConfig cluster;
  /// How many of the analytically best layouts to simulate (0: all).
  size_t simulate = 48;
  /// When no layout uses all worldSize ranks: search fewer, down to three
  /// quarters of them, leaving the rest idle.
  bool allowIdle = true;
};

struct TuneCandidate {
  ModelConfig config;
  /// "non-colocated: images tp1 pp1 dp4 [0-3] | language tp2 pp2 sp [4-7];
  /// 4 microbatches of 8".
  std::string summary;
  double estimateSeconds = 0, stepSeconds = 0, idleShare = 0, mfu = 0;
  int64_t peakBytes = 0;
};

struct TuneResult {
  /// Simulated layouts, fastest first.
  std::vector<TuneCandidate> ranked;
  int64_t enumerated = 0, valid = 0, overMemory = 0, simulated = 0;
  double memoryLimit = 0;
  /// Non-empty when no layout is valid: why.
  std::string problem;
  /// The ranks the ranked layouts use, and those asked for (more when no
  /// layout used them all: TuneOptions::allowIdle).
  int64_t worldSize = 0, ranksAsked = 0;
};

TuneResult tuneLayouts(const ModelConfig &model, const TuneOptions &options);

/// The result as JSON ({world_size, profile, enumerated, valid,
/// over_memory, simulated, layouts[]: {summary, step_seconds, mfu,
/// idle_share, peak_bytes, estimate_seconds, model}}).
nlohmann::ordered_json tuneJson(const TuneResult &result,
                                const TuneOptions &options, size_t top);
std::string renderTuneText(const TuneResult &result, const TuneOptions &options,
                           size_t top);

} // namespace mimo

#endif // MIMO_CODEGEN_TUNE_H
