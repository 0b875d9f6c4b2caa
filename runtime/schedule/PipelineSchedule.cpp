//===- PipelineSchedule.cpp - 1F1B's answers and the registry -------------===//

#include "runtime/schedule/PipelineSchedule.h"

#include "runtime/schedule/Formulas.h"

#include <mutex>

namespace mimo {

int64_t PipelineSchedule::warmup(const StageSlot &slot) const {
  return warmupMicrobatches(slot.totalStages, slot.stage, slot.microbatches);
}

double PipelineSchedule::bubble(int64_t totalStages, int64_t microbatches,
                                int64_t chunks) const {
  return pipelineBubble(totalStages, chunks * microbatches);
}

int64_t PipelineSchedule::microbatchesForBubble(int64_t totalStages,
                                                double share,
                                                int64_t chunks) const {
  return mimo::microbatchesForBubble(totalStages, share, chunks);
}

std::string PipelineSchedule::idleText(int64_t totalStages,
                                       int64_t microbatches,
                                       int64_t chunks) const {
  (void)chunks;
  return ": each rank idles " + std::to_string(totalStages - 1) + " of " +
         std::to_string(microbatches + totalStages - 1) + " slots";
}

int64_t PipelineSchedule::inFlight(int64_t pp, int64_t chunks,
                                   int64_t microbatches, int64_t stage,
                                   int64_t chunk, int64_t warmup) const {
  (void)pp, (void)chunks, (void)stage, (void)chunk;
  return std::min<int64_t>(microbatches, warmup + 1);
}

//===----------------------------------------------------------------------===//
// The registry: one line per built-in schedule.
//===----------------------------------------------------------------------===//

std::unique_ptr<PipelineSchedule> makeOneFOneBSchedule();
std::unique_ptr<PipelineSchedule> makeZeroBubbleSchedule();
std::unique_ptr<PipelineSchedule> makeInterleavedSchedule();

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<PipelineSchedule>> schedules;

  Registry() {
    schedules.push_back(makeOneFOneBSchedule());
    schedules.push_back(makeZeroBubbleSchedule());
    schedules.push_back(makeInterleavedSchedule());
  }
};

Registry &registry() {
  static Registry instance;
  return instance;
}

} // namespace

const PipelineSchedule &defaultSchedule() {
  return *registry().schedules.front();
}

const PipelineSchedule *findSchedule(std::string_view name) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const std::unique_ptr<PipelineSchedule> &schedule : r.schedules)
    if (schedule->name() == name)
      return schedule.get();
  return nullptr;
}

std::vector<const PipelineSchedule *> schedules() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<const PipelineSchedule *> all;
  for (const std::unique_ptr<PipelineSchedule> &schedule : r.schedules)
    all.push_back(schedule.get());
  return all;
}

bool registerSchedule(std::unique_ptr<PipelineSchedule> schedule) {
  if (!schedule || findSchedule(schedule->name()))
    return false;
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.schedules.push_back(std::move(schedule));
  return true;
}

} // namespace mimo
