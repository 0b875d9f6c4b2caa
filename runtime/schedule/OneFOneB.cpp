//===- OneFOneB.cpp - Multi-module 1F1B, the default schedule -------------===//
//
// docs/plan.md: every stage runs W = min(P - stage - 1, M) warm-up
// forwards, M - W steady forward-backward pairs and W cool-down backwards;
// the base class's answers are 1F1B's.
//
//===----------------------------------------------------------------------===//

#include "runtime/schedule/PipelineSchedule.h"

namespace mimo {
namespace {

class OneFOneB final : public PipelineSchedule {
public:
  std::string_view name() const override { return "1f1b"; }
  std::string_view label() const override { return "1F1B"; }
};

} // namespace

std::unique_ptr<PipelineSchedule> makeOneFOneBSchedule() {
  return std::make_unique<OneFOneB>();
}

} // namespace mimo
