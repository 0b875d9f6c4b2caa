//===- Schedule.h - Multi-module 1F1B stage counts -------------*- C++ -*-===//
//
// docs/plan.md / reference §8.2, §9.2 for mimo's encoder -> language graph.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_PLAN_SCHEDULE_H
#define MIMO_RUNTIME_PLAN_SCHEDULE_H

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
/// warm-up and order with each backward cut in two, input gradients (B)
/// first, and runs a microbatch's weight gradients (W) once more than
/// `lag` of them wait; the rest fill the cool-down. With F = B = W the
/// last stage's input gradients then reach the first stage P - 1 units
/// earlier, and the step takes 3M + P - 1 units against 1F1B's
/// 3(M + P - 1): the bubble falls to a third, and a stage holds at most
/// P microbatches (activations and deferred weight gradients) as 1F1B's
/// first stage does.
inline int64_t zeroBubbleLag(int64_t stage, int64_t microbatches) {
  return std::min(stage, microbatches);
}

/// The idle share of a zero-bubble step with F = B = W: (P - 1) /
/// (3M + P - 1).
inline double zeroBubbleShare(int64_t totalStages, int64_t microbatches) {
  double idle = static_cast<double>(totalStages - 1);
  return idle / (3.0 * static_cast<double>(microbatches) + idle);
}

/// The idle share of a 1F1B step with equal stage times: (P - 1) / (M + P
/// - 1) for P stages and M microbatches.
inline double pipelineBubble(int64_t totalStages, int64_t microbatches) {
  double idle = static_cast<double>(totalStages - 1);
  return idle / (static_cast<double>(microbatches) + idle);
}

/// The idle share of the step's schedule: zeroBubbleShare or
/// pipelineBubble, or under the interleaved schedule with v chunks a stage
/// (plan/Interleaved.h) (P - 1) / (vM + P - 1).
inline double scheduleBubble(int64_t totalStages, int64_t microbatches,
                             bool zeroBubble, int64_t chunks = 1) {
  return zeroBubble ? zeroBubbleShare(totalStages, microbatches)
                    : pipelineBubble(totalStages, chunks * microbatches);
}

/// The fewest microbatches that keep the bubble at or below `share` (0 < share
/// < 1): M >= (P - 1) (1 - share) / share, a third of it under zero bubble,
/// a v-th with v chunks a stage.
inline int64_t microbatchesForBubble(int64_t totalStages, double share,
                                     bool zeroBubble = false,
                                     int64_t chunks = 1) {
  double needed = static_cast<double>(totalStages - 1) * (1 - share) / share /
                  (zeroBubble ? 3.0 : static_cast<double>(chunks));
  int64_t m = static_cast<int64_t>(needed);
  return std::max<int64_t>(1, m < needed ? m + 1 : m);
}

} // namespace mimo

#endif // MIMO_RUNTIME_PLAN_SCHEDULE_H
