//===- ZeroBubble.cpp - ZB-H1: backwards split, weight gradients deferred -===//
//
// docs/plan.md "Zero bubble": 1F1B's warm-ups, each pipelined stage's
// backward cut into its input gradients and its weight gradients, which
// wait behind them by zeroBubbleLag (Formulas.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/schedule/Formulas.h"
#include "runtime/schedule/PipelineSchedule.h"

namespace mimo {
namespace {

class ZeroBubble final : public PipelineSchedule {
public:
  std::string_view name() const override { return "zero_bubble"; }
  std::string_view label() const override { return "zero bubble"; }
  bool splitsBackward() const override { return true; }

  // A colocated layout's encoders run whole, before and after the
  // language pipeline, and with language pp 1 nothing is pipelined; the
  // first stage holds nothing back.
  int64_t weightLag(const StageSlot &slot) const override {
    const int64_t lag = zeroBubbleLag(slot.stage, slot.microbatches);
    return slot.pipelined && lag > 0 ? lag : -1;
  }

  double bubble(int64_t totalStages, int64_t microbatches,
                int64_t chunks) const override {
    (void)chunks;
    return zeroBubbleShare(totalStages, microbatches);
  }

  int64_t microbatchesForBubble(int64_t totalStages, double share,
                                int64_t chunks) const override {
    (void)chunks;
    return zeroBubbleMicrobatchesForBubble(totalStages, share);
  }

  std::string idleText(int64_t totalStages, int64_t microbatches,
                       int64_t chunks) const override {
    (void)chunks;
    const int64_t units = zeroBubbleUnits(totalStages, microbatches);
    return ", zero bubble: each rank idles " +
           std::to_string(units - 3 * microbatches) + " of " +
           std::to_string(units) + " thirds of a slot";
  }

  std::optional<int64_t> tuneChunks(const TuneSlot &) const override {
    return 1;
  }
};

} // namespace

std::unique_ptr<PipelineSchedule> makeZeroBubbleSchedule() {
  return std::make_unique<ZeroBubble>();
}

} // namespace mimo
