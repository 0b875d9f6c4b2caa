//===- Programs.cpp - Each role's instruction stream ----------------------===//

#include "runtime/plan/Plan.h"

#include "runtime/schedule/Formulas.h"
#include "runtime/schedule/InterleavedOrder.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_map>

namespace mimo {

//===----------------------------------------------------------------------===//
// Programs
//===----------------------------------------------------------------------===//

namespace {

class ProgramBuilder {
public:
  explicit ProgramBuilder(std::vector<Instr> &out) : out(out) {}
  void add(InstrOp op, int64_t index, int64_t mb = -1) {
    out.push_back(
        {op, static_cast<int32_t>(index), static_cast<int32_t>(mb), false, 0});
  }
  /// Point-to-point operations posted together.
  void batch(const std::vector<Instr> &ops) {
    for (size_t i = 0; i < ops.size(); ++i) {
      out.push_back(ops[i]);
      out.back().fused = i + 1 < ops.size();
    }
  }

private:
  std::vector<Instr> &out;
};

Instr instr(InstrOp op, size_t index, int64_t mb) {
  return {op, static_cast<int32_t>(index), static_cast<int32_t>(mb), false, 0};
}

std::vector<Instr> concat(std::vector<Instr> a, const std::vector<Instr> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool needsUnshard(const Topology &topology) {
  const ShardTopology &shard = topology.shard;
  return mimo::needsUnshard(shard.cp, shard.tp, shard.sequenceParallel);
}

/// The size of a module's TP x CP groups: the ranks a bridge's leader
/// broadcasts to (more than one: the plan has a broadcast instruction).
int64_t tpcpSize(const Topology &topology, size_t module) {
  const Grid &grid = topology.modules[module].grid;
  return grid.size(Dim::TP) * grid.size(Dim::CP);
}

/// Whether the schedule holds some stage's weight gradients back behind
/// its input gradients (StageTopology::weightLag: zero bubble).
bool defersWeightGradients(const Topology &topology) {
  return std::any_of(
      topology.stages.begin(), topology.stages.end(),
      [](const StageTopology &stage) { return stage.weightLag >= 0; });
}

/// The interleaved stream (schedule/InterleavedOrder.h) of `rank`'s stage of
/// the language module `m`: each lockstep step's work, then its batch of
/// messages. On the first stage each chunk-0 forward follows its
/// microbatch's bridge tokens (the encoders run every forward first) and
/// its shard, and the bridges' gradients go back after the last step.
void buildInterleavedProgram(const Topology &topology, int64_t rank, size_t m,
                             bool bridges, bool finalize,
                             std::vector<Instr> &out) {
  const ModuleTopology &module = topology.modules[m];
  const Grid &grid = module.grid;
  const int64_t stage = grid.coordsOf(rank).pp;
  const bool first = stage == 0;
  std::vector<size_t> incoming;
  for (size_t b = 0; b < topology.bridges.size() && bridges; ++b)
    if (topology.bridges[b].dst == m && first &&
        isDestinationLeader(topology.bridges[b], grid, rank))
      incoming.push_back(b);
  ProgramBuilder emit(out);
  auto chunked = [&](InstrOp op, int64_t mb, int32_t chunk) {
    Instr in = instr(op, m, mb);
    in.chunk = chunk;
    return in;
  };
  const bool unshard = first && needsUnshard(topology);
  const std::vector<InterleavedStep> steps =
      interleavedSteps(grid.size(Dim::PP), module.virtualStages,
                       topology.microbatches)[static_cast<size_t>(stage)];
  for (const InterleavedStep &step : steps) {
    for (const ChunkWork &w : step.work) {
      const bool entry = first && w.chunk == 0;
      if (w.kind == ChunkWork::Forward) {
        if (entry) {
          std::vector<Instr> ops;
          for (size_t b : incoming)
            ops.push_back(instr(InstrOp::BridgeRecv, b, w.mb));
          emit.batch(ops);
          for (size_t b = 0; b < topology.bridges.size() && bridges; ++b)
            if (topology.bridges[b].dst == m &&
                tpcpSize(topology, topology.bridges[b].dst) > 1)
              emit.add(InstrOp::BridgeBroadcast, b, w.mb);
          emit.add(InstrOp::Shard, m, w.mb);
        }
        out.push_back(chunked(InstrOp::Forward, w.mb, w.chunk));
      } else {
        out.push_back(chunked(InstrOp::Backward, w.mb, w.chunk));
        if (entry && unshard)
          emit.add(InstrOp::Unshard, m, w.mb);
      }
    }
    std::vector<Instr> ops;
    for (const ChunkWork &msg : step.messages) {
      static constexpr InstrOp kOps[] = {InstrOp::Forward,  InstrOp::Backward,
                                         InstrOp::SendAct,  InstrOp::RecvAct,
                                         InstrOp::SendGrad, InstrOp::RecvGrad};
      ops.push_back(chunked(kOps[msg.kind], msg.mb, msg.chunk));
    }
    emit.batch(ops);
  }
  for (int64_t mb = 0; mb < topology.microbatches && !incoming.empty(); ++mb) {
    std::vector<Instr> ops;
    for (size_t b : incoming)
      ops.push_back(instr(InstrOp::BridgeSendGrad, b, mb));
    emit.batch(ops);
  }
  if (!finalize)
    return;
  emit.add(InstrOp::ReduceGrads, m);
  emit.add(InstrOp::OptimizerStep, -1);
}

/// Work a colocated pipeline places inside the language stage's stream
/// (zero bubble across modules): after each backward (its input
/// gradients and their unshard), and before each receive of the
/// cool-down's gradients (microbatch `mb`'s).
struct StageHooks {
  std::function<void(int64_t mb)> afterBackward, beforeCooldownReceive;
  /// The first stage: before a microbatch's shard; and once, after the
  /// first steady forward, before its exchange (where the stage waits for
  /// the pipeline's first gradient).
  std::function<void(int64_t mb)> beforeShard;
  std::function<void()> afterRampForward;
};

/// The 1F1B stream of `rank`'s stage of module `m`. `bridges`: whether the
/// stream also moves the bridges' tensors (not when a colocated pipeline
/// moves them before and after); `finalize`: end with the gradient
/// reduction and the optimizer step; `hooks`: work of other modules placed
/// in the stream (none under the interleaved schedule).
void buildPipelineProgram(const Topology &topology, int64_t rank, size_t m,
                          bool bridges, bool finalize, std::vector<Instr> &out,
                          const StageHooks *hooks = nullptr) {
  const ModuleTopology &module = topology.modules[m];
  if (module.virtualStages > 1)
    return buildInterleavedProgram(topology, rank, m, bridges, finalize, out);
  const Grid &grid = module.grid;
  Coords c = grid.coordsOf(rank);
  int64_t pp = grid.size(Dim::PP);
  bool first = c.pp == 0, last = c.pp == pp - 1;
  std::vector<size_t> incoming, outgoing;
  for (size_t b = 0; b < topology.bridges.size() && bridges; ++b) {
    if (topology.bridges[b].dst == m && first)
      incoming.push_back(b);
    if (topology.bridges[b].src == m && last)
      outgoing.push_back(b);
  }

  // The point-to-point side of a stage boundary: the pipeline message (when
  // there is a neighbouring stage) and the bridge messages of the leaders.
  auto messages = [&](bool pipeline, InstrOp pipelineOp,
                      const std::vector<size_t> &boundary, bool source,
                      InstrOp bridgeOp, int64_t mb) {
    std::vector<Instr> ops;
    if (pipeline)
      ops.push_back(instr(pipelineOp, m, mb));
    for (size_t b : boundary) {
      const BridgeTopology &bridge = topology.bridges[b];
      if (source ? isSourceLeader(bridge, grid, rank)
                 : isDestinationLeader(bridge, grid, rank))
        ops.push_back(instr(bridgeOp, b, mb));
    }
    return ops;
  };
  auto recvForward = [&](int64_t mb) {
    return messages(!first, InstrOp::RecvAct, incoming, false,
                    InstrOp::BridgeRecv, mb);
  };
  ProgramBuilder emit(out);
  auto afterRecvForward = [&](int64_t mb) {
    for (size_t b : incoming)
      if (tpcpSize(topology, topology.bridges[b].dst) > 1)
        emit.add(InstrOp::BridgeBroadcast, b, mb);
    if (first && module.isLanguage) {
      if (hooks && hooks->beforeShard)
        hooks->beforeShard(mb);
      emit.add(InstrOp::Shard, m, mb);
    }
  };
  auto sendForward = [&](int64_t mb) {
    return messages(!last, InstrOp::SendAct, outgoing, true,
                    InstrOp::BridgeSend, mb);
  };
  auto recvBackward = [&](int64_t mb) {
    return messages(!last, InstrOp::RecvGrad, outgoing, true,
                    InstrOp::BridgeRecvGrad, mb);
  };
  auto afterRecvBackward = [&](int64_t mb) {
    for (size_t b : outgoing)
      if (tpcpSize(topology, topology.bridges[b].src) > 1)
        emit.add(InstrOp::BridgeBroadcastGrad, b, mb);
  };
  bool unshard = first && module.isLanguage && needsUnshard(topology);
  auto afterBackward = [&](int64_t mb) {
    if (unshard)
      emit.add(InstrOp::Unshard, m, mb);
  };
  auto sendBackward = [&](int64_t mb) {
    return messages(!first, InstrOp::SendGrad, incoming, false,
                    InstrOp::BridgeSendGrad, mb);
  };

  // Multi-module 1F1B (docs/plan.md): W warm-up forwards, R = M - W
  // steady pairs whose sends and receives are posted together, W cool-down
  // backwards.
  int64_t mbs = topology.microbatches;
  const StageTopology *stage = topology.stageOf(m, c.pp);
  int64_t warmup = stage ? stage->warmup : 0;
  int64_t steady = mbs - warmup;
  // Zero bubble (runtime/schedule/Formulas.h zeroBubbleLag): each backward
  // makes its input gradient only, and a microbatch's weight gradients run
  // once more than `lag` of them wait (after the input gradient is sent,
  // before the next receive), the rest before the gradient reduction.
  const int64_t lag = stage ? stage->weightLag : -1;
  std::vector<int64_t> waiting; // microbatches whose weight gradients wait
  size_t nextWeights = 0;
  auto held = [&] {
    return static_cast<int64_t>(waiting.size() - nextWeights);
  };
  auto weightGrads = [&](int64_t keep) {
    while (lag >= 0 && held() > keep)
      emit.add(InstrOp::WeightGrad, m, waiting[nextWeights++]);
  };
  auto backward = [&](int64_t mb) {
    emit.add(InstrOp::Backward, m, mb);
    waiting.push_back(mb);
    afterBackward(mb);
    if (hooks && hooks->afterBackward)
      hooks->afterBackward(mb);
  };
  for (int64_t i = 0; i < warmup; ++i) {
    emit.batch(recvForward(i));
    afterRecvForward(i);
    emit.add(InstrOp::Forward, m, i);
    emit.batch(sendForward(i));
  }
  if (steady > 0) {
    emit.batch(recvForward(warmup));
    afterRecvForward(warmup);
  }
  for (int64_t i = 0; i < steady; ++i) {
    int64_t f = warmup + i;
    emit.add(InstrOp::Forward, m, f);
    if (i == 0 && hooks && hooks->afterRampForward)
      hooks->afterRampForward();
    emit.batch(concat(sendForward(f), recvBackward(i)));
    afterRecvBackward(i);
    backward(i);
    if (i + 1 == steady) {
      emit.batch(sendBackward(i));
    } else {
      emit.batch(concat(sendBackward(i), recvForward(f + 1)));
      afterRecvForward(f + 1);
    }
    // The weight gradients after the exchange, before the next forward:
    // sends block until matched, so run between the send and the receive
    // they would hold the stage before (waiting for its gradient) back.
    weightGrads(lag);
  }
  for (int64_t i = 0; i < warmup; ++i) {
    int64_t b = steady + i;
    if (hooks && hooks->beforeCooldownReceive)
      hooks->beforeCooldownReceive(b);
    emit.batch(recvBackward(b));
    afterRecvBackward(b);
    backward(b);
    emit.batch(sendBackward(b));
    weightGrads(lag);
  }
  weightGrads(0);
  if (!finalize)
    return;
  emit.add(InstrOp::ReduceGrads, m);
  emit.add(InstrOp::OptimizerStep, -1);
}

/// Whether every encoder's TP x CP group (its backward's collectives and
/// its bridges' gradient broadcasts) lies within one language stage: its
/// members then reach the same points of the language pipeline together.
bool encoderGroupsWithinStages(const Topology &topology) {
  const size_t lm = topology.languageIndex();
  const Grid &lmGrid = topology.modules[lm].grid;
  for (size_t i = 0; i < topology.modules.size(); ++i) {
    if (i == lm)
      continue;
    const Grid &grid = topology.modules[i].grid;
    for (const std::vector<int64_t> &group : grid.groups({Dim::TP, Dim::CP}))
      for (int64_t member : group)
        if (lmGrid.coordsOf(member).pp != lmGrid.coordsOf(group[0]).pp)
          return false;
  }
  return true;
}

/// Zero bubble across modules (docs/plan.md "Zero bubble across
/// modules"), colocated with language pp > 1. The encoders' forwards: each
/// microbatch's on every rank with its bridge sends posted, the first
/// stage's just before the language microbatch that takes it and the rest
/// in its wait for the pipeline's first gradient, the other stages' before
/// the pipeline (in its ramp). The backward: the language first stage posts
/// each microbatch's bridge gradients as soon as its backward has made
/// them, and every rank runs the encoders' backward of a microbatch (its
/// posted bridge gradients received, broadcast, each encoder's backward)
/// in the language pipeline's cool-down, before a gradient receive it
/// would otherwise wait at, once the first stage has made them: on stage s
/// before the receive of microbatch b's gradient, microbatches up to
/// b - 1 - s (the first stage's backward of b - 1 - s ends about s
/// backwards after stage s's of b - 1); the rest after the pipeline.
/// Where an encoder's TP x CP group spans stages (`inPipeline` false), the
/// forwards and bridges all come first (buildColocatedPipelineProgram) and
/// the backward all after the pipeline, in order.
void crossModuleZeroBubble(const Topology &topology, int64_t rank,
                           bool inPipeline, std::vector<Instr> &out) {
  ProgramBuilder emit(out);
  const size_t lm = topology.languageIndex();
  const Grid &lmGrid = topology.modules[lm].grid;
  const int64_t stage = lmGrid.coordsOf(rank).pp;
  auto posted = [](Instr in) {
    in.posted = true;
    return in;
  };
  int64_t next = 0; // the first microbatch whose encoders' backward waits
  auto encoderBackwards = [&](int64_t upTo) {
    for (; next <= upTo && next < topology.microbatches; ++next) {
      for (size_t b = 0; b < topology.bridges.size(); ++b) {
        const BridgeTopology &bridge = topology.bridges[b];
        if (isSourceLeader(bridge, topology.modules[bridge.src].grid, rank))
          out.push_back(posted(instr(InstrOp::BridgeRecvGrad, b, next)));
      }
      for (size_t b = 0; b < topology.bridges.size(); ++b)
        if (tpcpSize(topology, topology.bridges[b].src) > 1)
          emit.add(InstrOp::BridgeBroadcastGrad, b, next);
      for (size_t i = topology.modules.size(); i-- > 0;)
        if (i != lm)
          emit.add(InstrOp::Backward, i, next);
    }
  };
  // A cool-down slot leaves a stage idle for about one forward of its
  // language stage (the pipeline's period, the last stage's forward,
  // input and weight gradients, less the stage's own two); what overflows
  // it delays the stage's next gradient and so the whole pipeline. The
  // plan knows no stage times (and FLOPs overrate a small encoder's
  // speed: on the h100 profile a ViT-L-like tower's backward of an image
  // takes a fifth of a 7B-like stage's forward, their FLOPs a 37th;
  // bench/results/schedules.md): at most M / P a slot, at least one.
  const int64_t perHole =
      std::max<int64_t>(1, topology.microbatches / lmGrid.size(Dim::PP));
  StageHooks hooks;
  hooks.afterBackward = [&](int64_t mb) {
    for (size_t b = 0; b < topology.bridges.size() && stage == 0; ++b)
      if (isDestinationLeader(topology.bridges[b], lmGrid, rank))
        out.push_back(posted(instr(InstrOp::BridgeSendGrad, b, mb)));
  };
  if (inPipeline)
    hooks.beforeCooldownReceive = [&](int64_t mb) {
      encoderBackwards(std::min(mb - 1 - stage, next + perHole - 1));
    };
  // The forwards: every encoder forward and its posted bridge send, in
  // microbatch order; the first stage runs each just before the language
  // microbatch that takes it (its bridges received, posted, and broadcast)
  // and the rest in the wait for the pipeline's first gradient, the
  // others before the pipeline, in its ramp.
  int64_t forwarded = 0;
  auto encoderForwards = [&](int64_t upTo) {
    for (; forwarded <= upTo && forwarded < topology.microbatches;
         ++forwarded) {
      for (size_t i = 0; i < topology.modules.size(); ++i)
        if (i != lm)
          emit.add(InstrOp::Forward, i, forwarded);
      for (size_t b = 0; b < topology.bridges.size(); ++b) {
        const BridgeTopology &bridge = topology.bridges[b];
        if (isSourceLeader(bridge, topology.modules[bridge.src].grid, rank))
          out.push_back(posted(instr(InstrOp::BridgeSend, b, forwarded)));
      }
    }
  };
  if (inPipeline) {
    if (stage > 0)
      encoderForwards(topology.microbatches - 1);
    hooks.beforeShard = [&](int64_t mb) {
      encoderForwards(mb);
      for (size_t b = 0; b < topology.bridges.size(); ++b)
        if (isDestinationLeader(topology.bridges[b], lmGrid, rank))
          out.push_back(posted(instr(InstrOp::BridgeRecv, b, mb)));
      for (size_t b = 0; b < topology.bridges.size(); ++b)
        if (tpcpSize(topology, lm) > 1)
          emit.add(InstrOp::BridgeBroadcast, b, mb);
    };
    hooks.afterRampForward = [&] {
      encoderForwards(topology.microbatches - 1);
    };
  }
  buildPipelineProgram(topology, rank, lm, /*bridges=*/false,
                       /*finalize=*/false, out, &hooks);
  encoderBackwards(topology.microbatches - 1);
  for (size_t i = 0; i < topology.modules.size(); ++i)
    emit.add(InstrOp::ReduceGrads, i);
  emit.add(InstrOp::OptimizerStep, -1);
}

/// Colocated with language pp > 1 (docs/plan.md), three
/// phases: every encoder forward for all microbatches and the bridges to
/// the language first stage; the language 1F1B; the bridges' gradients back
/// and every encoder backward. Then the gradient reduction and the step.
/// Under zero bubble, crossModuleZeroBubble's order (`inPipeline`: every
/// encoder's TP x CP group within a language stage).
void buildColocatedPipelineProgram(const Topology &topology, int64_t rank,
                                   bool inPipeline, std::vector<Instr> &out) {
  ProgramBuilder emit(out);
  size_t lm = topology.languageIndex();
  const Grid &lmGrid = topology.modules[lm].grid;
  bool first = lmGrid.coordsOf(rank).pp == 0;
  auto bridgeBatch = [&](int64_t mb, bool grad) {
    std::vector<Instr> ops;
    for (size_t b = 0; b < topology.bridges.size(); ++b) {
      const BridgeTopology &bridge = topology.bridges[b];
      const Grid &src = topology.modules[bridge.src].grid;
      if (isSourceLeader(bridge, src, rank))
        ops.push_back(
            instr(grad ? InstrOp::BridgeRecvGrad : InstrOp::BridgeSend, b, mb));
      if (first && isDestinationLeader(bridge, lmGrid, rank))
        ops.push_back(
            instr(grad ? InstrOp::BridgeSendGrad : InstrOp::BridgeRecv, b, mb));
    }
    emit.batch(ops);
    for (size_t b = 0; b < topology.bridges.size(); ++b) {
      if (!grad && first && tpcpSize(topology, lm) > 1)
        emit.add(InstrOp::BridgeBroadcast, b, mb);
      if (grad && tpcpSize(topology, topology.bridges[b].src) > 1)
        emit.add(InstrOp::BridgeBroadcastGrad, b, mb);
    }
  };
  const bool crossModule = defersWeightGradients(topology);
  if (!(crossModule && inPipeline)) {
    for (int64_t mb = 0; mb < topology.microbatches; ++mb)
      for (size_t i = 0; i < topology.modules.size(); ++i)
        if (i != lm)
          emit.add(InstrOp::Forward, i, mb);
    for (int64_t mb = 0; mb < topology.microbatches; ++mb)
      bridgeBatch(mb, false);
  }
  if (crossModule)
    return crossModuleZeroBubble(topology, rank, inPipeline, out);
  buildPipelineProgram(topology, rank, lm, /*bridges=*/false,
                       /*finalize=*/false, out);
  for (int64_t mb = 0; mb < topology.microbatches; ++mb)
    bridgeBatch(mb, true);
  for (int64_t mb = 0; mb < topology.microbatches; ++mb)
    for (size_t i = topology.modules.size(); i-- > 0;)
      if (i != lm)
        emit.add(InstrOp::Backward, i, mb);
  for (size_t i = 0; i < topology.modules.size(); ++i)
    emit.add(InstrOp::ReduceGrads, i);
  emit.add(InstrOp::OptimizerStep, -1);
}

/// Colocated (language pp = 1): every rank runs every module; per
/// microbatch the encoders, the colocated bridges, the language module and
/// the adjoints in reverse.
void buildColocatedProgram(const Topology &topology, std::vector<Instr> &out) {
  ProgramBuilder emit(out);
  size_t lm = topology.languageIndex();
  for (int64_t mb = 0; mb < topology.microbatches; ++mb) {
    for (size_t i = 0; i < topology.modules.size(); ++i)
      if (i != lm)
        emit.add(InstrOp::Forward, i, mb);
    for (size_t b = 0; b < topology.bridges.size(); ++b)
      emit.add(InstrOp::ColocatedForward, b, mb);
    emit.add(InstrOp::Shard, lm, mb);
    emit.add(InstrOp::Forward, lm, mb);
    emit.add(InstrOp::Backward, lm, mb);
    if (needsUnshard(topology))
      emit.add(InstrOp::Unshard, lm, mb);
    for (size_t b = topology.bridges.size(); b-- > 0;)
      emit.add(InstrOp::ColocatedBackward, b, mb);
    for (size_t i = topology.modules.size(); i-- > 0;)
      if (i != lm)
        emit.add(InstrOp::Backward, i, mb);
  }
  for (size_t i = 0; i < topology.modules.size(); ++i)
    emit.add(InstrOp::ReduceGrads, i);
  emit.add(InstrOp::OptimizerStep, -1);
}

/// The instructions of `in` for which `keep` holds; a batch posted
/// together stays one batch (its kept members), an emptied one goes.
std::vector<Instr> keptInstrs(const std::vector<Instr> &in,
                              const std::function<bool(const Instr &)> &keep) {
  std::vector<Instr> out;
  for (size_t i = 0; i < in.size();) {
    size_t end = i;
    while (end + 1 < in.size() && in[end].fused)
      ++end;
    size_t first = out.size();
    for (size_t j = i; j <= end; ++j)
      if (keep(in[j])) {
        out.push_back(in[j]);
        out.back().fused = true;
      }
    if (out.size() > first)
      out.back().fused = false; // the batch ends here
    i = end + 1;
  }
  return out;
}

/// Whether `in` is backward work of a forward-only module (its backward,
/// pipeline gradients and gradient reduction) or of a bridge from one.
bool forwardOnlyGradient(const Topology &topology, const Instr &in) {
  const InstrInfo &info = instrInfo(in.op);
  if (!info.isGrad || in.index < 0)
    return false;
  size_t module = info.operand == InstrOperand::Bridge
                      ? topology.bridges[static_cast<size_t>(in.index)].src
                      : static_cast<size_t>(in.index);
  return info.operand != InstrOperand::None &&
         topology.modules[module].forwardOnly;
}

} // namespace

ProgramSet buildPrograms(const Topology &topology) {
  ProgramSet set;
  set.rankProgram.assign(static_cast<size_t>(topology.worldSize), -1);
  std::unordered_map<std::string, int32_t> byRole;
  const bool inPipeline = colocatedPipeline(topology) &&
                          defersWeightGradients(topology) &&
                          encoderGroupsWithinStages(topology);
  for (int64_t rank = 0; rank < topology.worldSize; ++rank) {
    std::string role = roleOf(topology, rank);
    auto [it, inserted] =
        byRole.try_emplace(role, static_cast<int32_t>(set.programs.size()));
    if (inserted) {
      Program program;
      program.role = role;
      if (colocatedPipeline(topology))
        buildColocatedPipelineProgram(topology, rank, inPipeline,
                                      program.instrs);
      else if (topology.layout == Layout::Colocated)
        buildColocatedProgram(topology, program.instrs);
      else if (!topology.modulesOf(rank).empty())
        buildPipelineProgram(topology, rank, topology.modulesOf(rank).front(),
                             /*bridges=*/true, /*finalize=*/true,
                             program.instrs);
      // Forward-only modules (every parameter frozen) run no backward.
      program.instrs = keptInstrs(program.instrs, [&](const Instr &in) {
        return !forwardOnlyGradient(topology, in);
      });
      set.programs.push_back(std::move(program));
    }
    set.rankProgram[static_cast<size_t>(rank)] = it->second;
  }
  return set;
}

Program forwardOnly(const Program &program) {
  Program out;
  out.role = program.role;
  out.instrs = keptInstrs(
      program.instrs, [](const Instr &in) { return !instrInfo(in.op).isGrad; });
  return out;
}

std::optional<std::vector<int32_t>>
assignPrograms(const Topology &topology, const std::vector<Program> &programs,
               std::string *error) {
  std::unordered_map<std::string, int32_t> byRole;
  for (size_t i = 0; i < programs.size(); ++i)
    if (!byRole.emplace(programs[i].role, static_cast<int32_t>(i)).second) {
      if (error)
        *error = "two programs have the role '" + programs[i].role + "'";
      return std::nullopt;
    }
  std::vector<int32_t> result(static_cast<size_t>(topology.worldSize), -1);
  for (int64_t rank = 0; rank < topology.worldSize; ++rank) {
    std::string role = roleOf(topology, rank);
    auto it = byRole.find(role);
    if (it == byRole.end()) {
      if (error)
        *error = "no program for rank " + std::to_string(rank) +
                 ", whose role is '" + role + "'";
      return std::nullopt;
    }
    result[static_cast<size_t>(rank)] = it->second;
  }
  return result;
}

} // namespace mimo
