//===- PipelineSchedule.h - Pipeline schedules: one interface --*- C++ -*-===//
//
// docs/plan.md "Schedules". A schedule (model.json's batch.schedule) is one
// PipelineSchedule: what it decides about every pipeline stage (its
// warm-up, the weight gradients it holds back, whether the language
// module's layers run in chunks), the bubble it leaves, the activations a
// stage holds under it, how explain and tune name it, and whether tune
// tries it. The programs (runtime/plan/Programs.cpp), the memory plan, the
// cost model, explain and tune ask the schedule, never its name; the name
// is parsed once, when model.json is read (findSchedule).
//
// Adding a schedule: a file here defining a PipelineSchedule and a line in
// Registry.cpp (or registerSchedule, as tests do), docs and tests.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SCHEDULE_PIPELINESCHEDULE_H
#define MIMO_RUNTIME_SCHEDULE_PIPELINESCHEDULE_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mimo {

/// A pipeline stage's place in the step: what a schedule decides its
/// warm-up and weight-gradient lag from.
struct StageSlot {
  /// P: the step's global stages (encoders then language, docs/plan.md).
  int64_t totalStages = 1;
  /// This stage's global 1F1B stage.
  int64_t stage = 0;
  /// M.
  int64_t microbatches = 1;
  bool isLanguage = false;
  /// In a pipeline: not a colocated layout's encoder, nor a colocated
  /// language module with pp 1.
  bool pipelined = true;
};

/// What `mimoc tune` knows of a language pipeline when it considers a
/// schedule.
struct TuneSlot {
  int64_t pp = 1, numLayers = 1, microbatches = 1;
  /// parallel.pipeline_layers is set.
  bool unevenStages = false;
};

class PipelineSchedule {
public:
  virtual ~PipelineSchedule() = default;

  /// model.json's batch.schedule ("1f1b").
  virtual std::string_view name() const = 0;
  /// How summaries name it ("zero bubble").
  virtual std::string_view label() const = 0;

  /// Whether the language module runs its layers in
  /// parallel.virtual_stages chunks (then required, 2 or more); other
  /// schedules refuse virtual_stages.
  virtual bool chunked() const { return false; }
  /// The microbatches must come in groups of this many (of the language
  /// module's pp).
  virtual int64_t microbatchMultiple(int64_t languagePp) const {
    (void)languagePp;
    return 1;
  }

  /// Whether pipelined backwards split into input gradients and deferred
  /// weight gradients (then weightLag says how many wait).
  virtual bool splitsBackward() const { return false; }

  /// Warm-up forwards of a stage; 1F1B's min(P - stage - 1, M).
  virtual int64_t warmup(const StageSlot &slot) const;
  /// The weight gradients a stage holds back behind its input gradients;
  /// -1: its backward stays whole.
  virtual int64_t weightLag(const StageSlot &slot) const {
    (void)slot;
    return -1;
  }

  /// The idle share of a step with equal stage times, `chunks` the
  /// language module's virtual stages.
  virtual double bubble(int64_t totalStages, int64_t microbatches,
                        int64_t chunks) const;
  /// The fewest microbatches that keep bubble() at or below `share`.
  virtual int64_t microbatchesForBubble(int64_t totalStages, double share,
                                        int64_t chunks) const;
  /// What explain's bubble warning says after "(P stages, M microbatches".
  virtual std::string idleText(int64_t totalStages, int64_t microbatches,
                               int64_t chunks) const;

  /// The most microbatches whose activations chunk `chunk` of a stage
  /// (`stage` of `pp`, `chunks` chunks) holds at once, its warm-up being
  /// `warmup`.
  virtual int64_t inFlight(int64_t pp, int64_t chunks, int64_t microbatches,
                           int64_t stage, int64_t chunk, int64_t warmup) const;

  /// The virtual stages `mimoc tune` tries this schedule with on a language
  /// pipeline (1 when not chunked); std::nullopt: tune does not try it
  /// there.
  virtual std::optional<int64_t> tuneChunks(const TuneSlot &slot) const {
    (void)slot;
    return std::nullopt;
  }
};

/// 1F1B, the schedule of a model that names none.
const PipelineSchedule &defaultSchedule();
/// The schedule model.json calls `name`, or nullptr.
const PipelineSchedule *findSchedule(std::string_view name);
/// Every schedule, in registration order (the built-in ones first).
std::vector<const PipelineSchedule *> schedules();
/// Adds a schedule (tests register their own); it lives as long as the
/// process. Call before reading models; a name already taken is ignored
/// and returns false.
bool registerSchedule(std::unique_ptr<PipelineSchedule> schedule);

} // namespace mimo

#endif // MIMO_RUNTIME_SCHEDULE_PIPELINESCHEDULE_H
