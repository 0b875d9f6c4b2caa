//===- Interleaved.cpp - Interleaved 1F1B: the layers in chunks -----------===//
//
// docs/plan.md "Interleaved 1F1B": the language pipeline's ranks hold
// parallel.virtual_stages chunks of layers each and run them in Megatron's
// order, in lockstep (InterleavedOrder.h); the encoders run every forward
// first.
//
//===----------------------------------------------------------------------===//

#include "runtime/schedule/InterleavedOrder.h"
#include "runtime/schedule/PipelineSchedule.h"

namespace mimo {
namespace {

class Interleaved final : public PipelineSchedule {
public:
  std::string_view name() const override { return "interleaved"; }
  std::string_view label() const override { return "interleaved"; }
  bool chunked() const override { return true; }
  int64_t microbatchMultiple(int64_t languagePp) const override {
    return languagePp;
  }

  // Before an interleaved language pipeline the encoders run every forward
  // first (its first stage returns their gradients at the end).
  int64_t warmup(const StageSlot &slot) const override {
    return slot.isLanguage ? PipelineSchedule::warmup(slot) : slot.microbatches;
  }

  std::string idleText(int64_t totalStages, int64_t microbatches,
                       int64_t chunks) const override {
    return ", " + std::to_string(chunks) + " virtual stages: each rank idles " +
           std::to_string(totalStages - 1) + " of " +
           std::to_string(chunks * microbatches + totalStages - 1) +
           " chunk slots";
  }

  int64_t inFlight(int64_t pp, int64_t chunks, int64_t microbatches,
                   int64_t stage, int64_t chunk,
                   int64_t warmup) const override {
    if (chunks < 2)
      return PipelineSchedule::inFlight(pp, chunks, microbatches, stage, chunk,
                                        warmup);
    return interleavedHeld(pp, chunks, microbatches,
                           stage)[static_cast<size_t>(chunk)];
  }

  // Two virtual stages where the language pipeline's layers and
  // microbatches allow.
  std::optional<int64_t> tuneChunks(const TuneSlot &slot) const override {
    if (slot.pp > 1 && !slot.unevenStages &&
        slot.numLayers % (2 * slot.pp) == 0 && slot.microbatches % slot.pp == 0)
      return 2;
    return std::nullopt;
  }
};

} // namespace

std::unique_ptr<PipelineSchedule> makeInterleavedSchedule() {
  return std::make_unique<Interleaved>();
}

} // namespace mimo
