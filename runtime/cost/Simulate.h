//===- Simulate.h - A predicted step of every rank's stream ----*- C++ -*-===//
//
// `mimoc simulate` and `mimoc tune` (docs/tune.md): every rank's instruction
// stream replayed with the blocking semantics mimo-verify-plan proves
// deadlock-free (plan/Verify.cpp; fused sends and receives posted together,
// a send waiting for its receive, a collective for its whole group), now
// with the costs of cost/CostModel.h in time:
//
//  * a point-to-point message starts when both ends have posted it and takes
//    the link's latency + bytes / bandwidth;
//  * a stage's forward or backward starts when its TP x CP group has
//    arrived; its compute runs on the rank's device, whose cores are shared
//    by the ranks computing on it at the same moment (processor sharing),
//    then its collectives take their communication time.
//
// Where the data-parallel replicas are symmetric (plan/Symmetry.h) and the
// cluster's devices and nodes turn with them, one representative of each
// orbit runs and stands for the others: their timings are its own.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_COST_SIMULATE_H
#define MIMO_RUNTIME_COST_SIMULATE_H

#include "runtime/cost/CostModel.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/Symmetry.h"

#include "nlohmann/json.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace mimo {

/// One instruction as the simulation ran it (24 bytes: a step of 2^20
/// ranks runs some 10^8 instructions).
struct SimulatedInstr {
  /// Ready (its peers or group arrived: the wait ends), done.
  double ready = 0, end = 0;
  /// The instruction whose end made this one ready (the critical path's
  /// previous step), or -1.
  int64_t cause = -1;
};

struct Simulation {
  explicit Simulation(const Topology &topology) : symmetry(topology) {}
  /// Empty, or why the streams could not run to the end.
  std::string problem;
  double stepSeconds = 0;
  /// Per rank: seconds working (not waiting for peers) and when it finished.
  std::vector<double> busySeconds, finishSeconds;
  /// The replicas' symmetry the simulation ran under (order 1: none).
  ReplicaSymmetry symmetry;
  /// Every representative's instructions, rank by rank: instruction i of
  /// representative r is instrs[firstEntry[r] + i] (firstEntry has a last
  /// element, the end; other ranks' spans are empty: entry() finds them).
  std::vector<SimulatedInstr> instrs;
  std::vector<size_t> firstEntry;
  /// The entry of instruction `instr` of any rank (its representative's).
  size_t entry(int64_t rank, int32_t instr) const {
    return firstEntry[static_cast<size_t>(symmetry.representativeOf(rank))] +
           static_cast<size_t>(instr);
  }
  /// Indices into `instrs`, first to last: the chain of instructions
  /// ending at the step's last instruction, each made ready by the one
  /// before it.
  std::vector<size_t> criticalPath;

  /// The share of rank-seconds spent waiting or finished early.
  double idleShare() const;
  /// The rank and the instruction index of an entry of `instrs`.
  int64_t rankOf(size_t entry) const;
  int32_t instrOf(size_t entry) const;
  /// When the entry's rank reached it (posted it with the fused run it
  /// belongs to): the end of the rank's previous run, 0 for its first.
  /// `stream` is the rank's program.
  double postOf(size_t entry, const std::vector<Instr> &stream) const;
};

/// `symmetry` false: every rank runs (the tests compare the two).
Simulation simulateStep(const Topology &topology,
                        const std::vector<Program> &programs,
                        const std::vector<int32_t> &rankProgram,
                        const CostModel &costs, bool symmetry = true);

/// A Chrome/Perfetto trace of the predicted step: one track per rank, one
/// slice per instruction (its wait before, as "wait" slices).
nlohmann::ordered_json simulationTrace(const Simulation &simulation,
                                       const Topology &topology,
                                       const std::vector<Program> &programs,
                                       const std::vector<int32_t> &rankProgram);

} // namespace mimo

#endif // MIMO_RUNTIME_COST_SIMULATE_H
