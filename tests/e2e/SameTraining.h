//===- SameTraining.h - Two plans that must train bit for bit alike -*- C++
//-*-===//
//
// For tests whose claim is that two plans differ in how they run, not in
// what they compute (another schedule, another data format): both train
// on the local backend and every step's loss and gradient norm are equal.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_TESTS_E2E_SAMETRAINING_H
#define MIMO_TESTS_E2E_SAMETRAINING_H

#include "runtime/exec/Executor.h"

#include <gtest/gtest.h>

namespace mimo::test {

/// Trains `a` and `b` for `steps` steps; each must succeed, and every
/// step's loss and gradient norm must be the same, bit for bit.
inline void expectSameTraining(const Plan &a, const Plan &b,
                               int64_t steps = 2) {
  exec::RunOptions options;
  options.steps = steps;
  options.timeoutSeconds = 120;
  exec::RunResult ra = exec::runLocal(a, options);
  exec::RunResult rb = exec::runLocal(b, options);
  ASSERT_EQ(ra.exitCode, 0) << ra.error;
  ASSERT_EQ(rb.exitCode, 0) << rb.error;
  ASSERT_EQ(ra.steps.size(), static_cast<size_t>(steps));
  ASSERT_EQ(rb.steps.size(), static_cast<size_t>(steps));
  for (size_t s = 0; s < ra.steps.size(); ++s) {
    EXPECT_EQ(ra.steps[s].loss, rb.steps[s].loss) << "step " << s + 1;
    EXPECT_EQ(ra.steps[s].gradNorm, rb.steps[s].gradNorm) << "step " << s + 1;
  }
}

} // namespace mimo::test

#endif // MIMO_TESTS_E2E_SAMETRAINING_H
