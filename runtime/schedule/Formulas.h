//===- Formulas.h - Multi-module pipeline stage counts ---------*- C++ -*-===//
//
// docs/plan.md for mimo's encoder -> language graph.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SCHEDULE_FORMULAS_H
#define MIMO_RUNTIME_SCHEDULE_FORMULAS_H

#include <algorithm>
#include <cstdint>
#include <vector>

namespace mimo {

/// Longest path through encoders -> language weighted by PP size; colocated
/// models pipeline only the language module (docs/data.md).
inline int64_t totalStages(const std::vector<int64_t> &encoderPp,
                           int64_t languagePp, bool colocated) {
  int64_t deepestEncoder = 0;
  for (int64_t pp : encoderPp)
    deepestEncoder = std::max(deepestEncoder, pp);
  return colocated ? languagePp : deepestEncoder + languagePp;
}

/// The global stage of a language rank at pipeline coordinate `pp`; an
/// encoder rank's stage is its own `pp`.
inline int64_t languageStage(const std::vector<int64_t> &encoderPp, int64_t pp,
                             bool colocated) {
  return totalStages(encoderPp, 0, colocated) + pp;
}

/// Warm-up forwards of a rank at `stage`: min(total - stage - 1, M); the
/// rank then runs M - W steady 1F1B pairs and W cool-down backwards.
inline int64_t warmupMicrobatches(int64_t totalStages, int64_t stage,
                                  int64_t microbatches) {
  return std::min(totalStages - stage - 1, microbatches);
}

/// Zero bubble (ZB-H1): the weight gradients a rank at `stage` holds back
/// behind its input gradients, min(stage, M). Stage s runs 1F1B's
/// warm-up, order and fused exchanges with each backward cut in two, input
/// gradients (B) first, and runs the weight gradients (W) once more than
/// `lag` of them wait, after the exchange that follows the backward and
/// before the next forward; the rest fill the cool-down. A stage holds at
/// most P microbatches (activations and deferred weight gradients) as
/// 1F1B's first stage does.
inline int64_t zeroBubbleLag(int64_t stage, int64_t microbatches) {
  return std::min(stage, microbatches);
}

/// Units of a zero-bubble step with F = B = W = 1 and sends that block
/// until matched (docs/plan.md Zero bubble): 3M + P - 1 for M = P, the
/// idle doubling to 2(P - 1) with more microbatches (the cool-down's
/// stages wait for each other's W), and 2(M + P) - 1 with fewer (the first
/// stage's input gradients and W all follow its first input gradient);
/// 1F1B takes 3(M + P - 1).
inline int64_t zeroBubbleUnits(int64_t totalStages, int64_t microbatches) {
  const int64_t P = totalStages, M = microbatches;
  if (P <= 1)
    return 3 * M;
  if (M < P)
    return 2 * (M + P) - 1;
  return 3 * M + (M > P ? 2 : 1) * (P - 1);
}

/// The idle share of a zero-bubble step with F = B = W
/// (zeroBubbleUnits).
inline double zeroBubbleShare(int64_t totalStages, int64_t microbatches) {
  const auto units =
      static_cast<double>(zeroBubbleUnits(totalStages, microbatches));
  return (units - 3.0 * static_cast<double>(microbatches)) / units;
}

/// The idle share of a 1F1B step with equal stage times: (P - 1) / (M + P
/// - 1) for P stages and M microbatches.
inline double pipelineBubble(int64_t totalStages, int64_t microbatches) {
  double idle = static_cast<double>(totalStages - 1);
  return idle / (static_cast<double>(microbatches) + idle);
}

/// The fewest microbatches that keep 1F1B's bubble at or below `share`
/// (0 < share < 1): M >= (P - 1) (1 - share) / share, a v-th of it with v
/// chunks a stage.
inline int64_t microbatchesForBubble(int64_t totalStages, double share,
                                     int64_t chunks = 1) {
  const double needed = static_cast<double>(totalStages - 1) * (1 - share) /
                        share / static_cast<double>(chunks);
  const auto m = static_cast<int64_t>(needed);
  return std::max<int64_t>(1, m < needed ? m + 1 : m);
}

/// Under zero bubble: the fewest M from which on zeroBubbleShare <= share
/// (it falls with M except from M = P to P + 1, where the idle doubles).
inline int64_t zeroBubbleMicrobatchesForBubble(int64_t totalStages,
                                               double share) {
  int64_t m = zeroBubbleShare(totalStages, totalStages + 1) <= share
                  ? 1
                  : totalStages + 1;
  while (zeroBubbleShare(totalStages, m) > share)
    ++m;
  return m;
}

} // namespace mimo

#endif // MIMO_RUNTIME_SCHEDULE_FORMULAS_H
