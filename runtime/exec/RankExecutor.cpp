//===- RankExecutor.cpp - Steps, evaluations, a step's state --------------===//

#include "runtime/exec/RankExecutor.h"

#include "runtime/config/Flops.h"
#include "runtime/config/LearningRate.h"
#include "runtime/device/Devices.h"
#include "runtime/support/Limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

namespace mimo::exec {

RankExecutor::RankExecutor(const Plan &plan, int64_t rank, comm::Comm &comm,
                           Device &dev, const DataSource &data,
                           const DataSource *evalData, Clock::time_point origin,
                           const RankOptions &overlap)
    : plan(plan), topo(plan.topology), rank(rank), comm(comm), dev(dev),
      data(data), evalData(evalData), active(&data), origin(origin),
      encoders(encodersOf(plan.config)), skipNonFinite(overlap.skipNonFinite),
      progress(overlap.progress), stopRequests(overlap.stopRequests),
      hang(parseFault(std::getenv("MIMO_TEST_HANG"), nullptr)) {
  for (int64_t r = 0; r < topo.worldSize; ++r)
    world.push_back(r);
  // One state per module, and under the interleaved schedule one per chunk
  // of the language module's layers (slotOf).
  int64_t chunks = 1;
  for (const ModuleTopology &m : topo.modules)
    chunks = std::max(chunks, m.virtualStages);
  modules.resize(topo.modules.size() * static_cast<size_t>(chunks));
  for (size_t m : topo.modulesOf(rank))
    for (int32_t c = 0; c < topo.modules[m].virtualStages; ++c)
      modules[slotOf(m, c)] = makeModule(m, c, overlap);
  program = &plan.programs[static_cast<size_t>(
      plan.rankProgram[static_cast<size_t>(rank)])];
  for (auto &m : modules)
    if (m) {
      // Zero bubble: the program makes this module's weight gradients in
      // instructions of their own (model/WeightGrads.h).
      for (const Instr &in : program->instrs)
        if (in.op == InstrOp::WeightGrad &&
            in.index == static_cast<int32_t>(m->index)) {
          m->stage->splitBackward();
          break;
        }
      setUpOverlap(*m, overlap);
      setUpShards(*m);
    }
  if (overlap.sendsAhead && overlap.channels)
    sendChannel = overlap.channels(kSendChannel, {});
  // Every rank at once (the nccl backend splits a communicator off).
  for (const Program &p : plan.programs)
    if (std::any_of(p.instrs.begin(), p.instrs.end(),
                    [](const Instr &in) { return in.posted; })) {
      comm.preparePosted([&] {
        return postedChannels(plan.topology, plan.programs, plan.rankProgram);
      });
      break;
    }
  if (evalData)
    evalProgram = forwardOnly(*program);
}

/// One training step (0-based `step`).
StepMetrics RankExecutor::runStep(int64_t step, bool trace,
                                  std::vector<TraceEvent> &events) {
  auto start = Clock::now();
  run(*program, step, trace, events);
  StepMetrics metrics;
  metrics.step = step + 1;
  metrics.loss = stepLoss;
  if (plan.config.hasMoe())
    metrics.auxLoss = stepAux;
  metrics.gradNorm = stepNorm;
  metrics.skipped = stepSkipped;
  metrics.lr = learningRate(plan.config.train, step + 1);
  metrics.flops = stepFlops;
  metrics.peakBytes = stepPeakBytes;
  metrics.peakRank = stepPeakRank;
  metrics.rankPeakBytes = stepRankPeaks;
  metrics.rankComputeSeconds = stepRankCompute;
  metrics.tokens = stepTokens;
  metrics.targets = stepTargets;
  metrics.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return metrics;
}

/// The loss of held-out batch `index` (the forward half of the program on
/// the eval data; nothing is updated).
double RankExecutor::evaluate(int64_t index, bool trace,
                              std::vector<TraceEvent> &events) {
  evaluating = true;
  active = evalData;
  try {
    run(evalProgram, index, trace, events);
  } catch (...) {
    evaluating = false;
    active = &data;
    throw;
  }
  evaluating = false;
  active = &data;
  for (auto &m : modules)
    if (m)
      m->stage->dropCaches();
  return stepLoss;
}

/// Runs one pass of `prog` over batch `step` of the active data.
void RankExecutor::run(const Program &prog, int64_t step, bool trace,
                       std::vector<TraceEvent> &events) {
  stepIndex = step;
  currentInstr = -1;
  resetStep();
  if (trace) // a marker at the start on every rank's track
    events.push_back(
        {rank,
         (evaluating ? "eval batch " : "step ") + std::to_string(step + 1),
         micros(), -1.0, ""});
  const std::vector<Instr> &instrs = prog.instrs;
  for (size_t i = 0; i < instrs.size();) {
    size_t end = i;
    while (end + 1 < instrs.size() && instrs[end].fused)
      ++end;
    currentInstr = static_cast<int64_t>(i);
    comm.setContext("step " + std::to_string(step + 1) + ", instruction " +
                    std::to_string(i) + " (" + describeInstr(topo, instrs[i]) +
                    ")");
    double t0 = micros();
    if (progress) {
      progress->step.store(step + 1, std::memory_order_relaxed);
      progress->index.store(static_cast<int64_t>(i), std::memory_order_relaxed);
      progress->sinceNs.store(Clock::now().time_since_epoch().count(),
                              std::memory_order_relaxed);
      progress->instr.store(&instrs[i], std::memory_order_release);
    }
    // Tests: MIMO_TEST_HANG=RANK:STEP makes that rank compute forever in
    // the first instruction of that step (a library stuck in a loop).
    if (hang && i == 0 && !evaluating && hang->first == rank &&
        hang->second == step + 1)
      for (;;)
        std::this_thread::sleep_for(std::chrono::seconds(1));
    exchanged.clear();
    if (end == i && !instrInfo(instrs[i].op).isSend &&
        !instrInfo(instrs[i].op).isRecv) {
      // The rank's own work (its TP and CP collectives inside), not its
      // waits for messages and the gradient reduction: metrics'
      // compute_seconds_by_rank (the busiest rank holds the others up).
      const bool waits = instrs[i].op == InstrOp::ReduceGrads ||
                         instrs[i].op == InstrOp::OptimizerStep;
      const double start = waits ? 0 : micros();
      execute(instrs[i]);
      if (!waits)
        stepComputeSeconds += (micros() - start) * 1e-6;
    } else {
      exchange(instrs, i, end);
    }
    if (progress)
      progress->instr.store(nullptr, std::memory_order_release);
    if (trace) {
      double t1 = micros();
      std::string name = describeInstr(topo, instrs[i]);
      for (size_t j = i + 1; j <= end; ++j)
        name += " + " + describeInstr(topo, instrs[j]);
      events.push_back({rank, name, t0, t1 - t0, traceArgs(instrs[i])});
    }
    if (end + 1 == instrs.size() &&
        (!inFlight.empty() || !postedInFlight.empty()))
      awaitSends(); // the pass's end: nothing stays in flight
    if (trace) {
      for (const BucketedReduction::Span &s : channelSpans) {
        auto us = [&](Clock::time_point t) {
          return std::chrono::duration<double, std::micro>(t - origin).count();
        };
        events.push_back(
            {rank, s.name, us(s.start), us(s.end) - us(s.start),
             "{\"bytes\":" + std::to_string(s.bytes) +
                 ",\"posted_ahead\":" + (s.ahead ? "true" : "false") + "}",
             kCommStream});
      }
    }
    channelSpans.clear();
    i = end + 1;
  }
}

void RankExecutor::awaitSends() {
  std::vector<PostedFlight> posted = std::move(postedInFlight);
  postedInFlight.clear();
  for (PostedFlight &f : posted)
    f.sends->wait();
  std::vector<InFlight> waiting = std::move(inFlight);
  inFlight.clear();
  std::vector<std::shared_ptr<comm::Request>> requests;
  for (const InFlight &f : waiting)
    requests.push_back(f.request);
  comm::waitAll(requests, dev); // the buffers sent outlive their copies
  for (const InFlight &f : waiting)
    channelSpans.push_back(
        {f.name, f.request->started, f.request->finished, f.bytes, true});
}

/// Every rank waits for every other.
void RankExecutor::barrier() {
  Tensor token = Tensor::zeros(dev, 1);
  comm.allReduceSum(world, token.data(), 1);
  dev.synchronize();
}

std::string RankExecutor::where() const {
  if (currentInstr == kSaving)
    return "saving the checkpoint of step " + std::to_string(stepIndex + 1);
  if (currentInstr < 0)
    return "the start of step " + std::to_string(stepIndex + 1);
  return "step " + std::to_string(stepIndex + 1) + ", instruction " +
         std::to_string(currentInstr) + " (" +
         describeInstr(topo,
                       program->instrs[static_cast<size_t>(currentInstr)]) +
         ")";
}

double RankExecutor::micros() const {
  return std::chrono::duration<double, std::micro>(Clock::now() - origin)
      .count();
}

std::unique_ptr<ModuleState>
RankExecutor::makeModule(size_t m, int32_t chunk, const RankOptions &options) {
  auto state = std::make_unique<ModuleState>();
  state->index = m;
  state->chunk = chunk;
  state->slot = slotOf(m, chunk);
  state->topo = &topo.modules[m];
  for (const ModuleConfig &mc : plan.config.modules)
    if (mc.name == state->topo->name)
      state->config = &mc;
  const Grid &grid = state->topo->grid;
  Coords c = grid.coordsOf(rank);
  state->coords = c;
  StageContext ctx;
  ctx.comm = &comm;
  ctx.dev = &dev;
  ctx.seed = static_cast<uint64_t>(plan.config.seed);
  ctx.tp = grid.size(Dim::TP);
  ctx.cp = grid.size(Dim::CP);
  // Under the interleaved schedule a chunk is the stage of its virtual
  // stage (chunk x pp + stage) of pp x virtual_stages.
  ctx.pp = grid.size(Dim::PP) * state->topo->virtualStages;
  ctx.tpRank = c.tp;
  ctx.cpRank = c.cp;
  ctx.ppRank = chunk * grid.size(Dim::PP) + c.pp;
  ctx.sequenceParallel = state->topo->isLanguage && topo.shard.sequenceParallel;
  ctx.bf16 = plan.config.precision == "bf16";
  ctx.logitChunkBytes = options.logitChunkBytes;
  ctx.headGradientBytes = options.headGradientBytes;
  state->dpcpGroup = grid.groupOf(rank, {Dim::DP, Dim::CP});
  ctx.dpcpGroup = state->dpcpGroup;
  ctx.microbatches = topo.microbatches;
  state->experts =
      expertGroups(grid, state->topo->ep, state->topo->expertTp(), rank);
  ctx.ep = state->topo->ep;
  ctx.etp = state->topo->expertTp();
  ctx.expertsApart = state->topo->expertsApart();
  ctx.epRank = state->experts.epRank;
  ctx.epGroup = state->experts.ep;
  ctx.edpGroup = state->experts.edp;
  ctx.moeTag = tagOf(kMoe, static_cast<int64_t>(m), 0, chunk);
  ctx.shardedMoments =
      state->config->distributedOptimizer && state->dpcpGroup.size() > 1;
  ctx.ringCp = state->topo->isLanguage && state->config->parallel.ringCp();
  ctx.ringTag = tagOf(kRing, static_cast<int64_t>(m), 0, chunk);
  ctx.tpGroup = grid.groupOf(rank, {Dim::TP});
  ctx.cpGroup = grid.groupOf(rank, {Dim::CP});
  ctx.tpcpGroup = grid.groupOf(rank, {Dim::TP, Dim::CP});
  for (int64_t member : ctx.tpcpGroup) {
    Coords mc = grid.coordsOf(member);
    ctx.tpcpCoords.push_back({mc.tp, mc.cp});
  }
  auto [b, e] = laneSamples(topo.microBatchSize, grid.size(Dim::DP), c.dp);
  state->laneBegin = b;
  state->laneEnd = e;
  if (state->topo->isLanguage) {
    state->language =
        std::make_unique<LanguageStage>(*state->config, topo.shard, ctx);
    state->stage = state->language.get();
  } else {
    state->encoder = std::make_unique<EncoderStage>(
        *state->config, state->topo->outputHidden, ctx);
    state->stage = state->encoder.get();
  }
  state->groups =
      paramGroups(state->stage->params(), *state->config, plan.config.train);
  // The first virtual stage's lookup and the last one's head.
  if (state->topo->tiedAcrossStages &&
      (ctx.ppRank == 0 || ctx.ppRank == ctx.pp - 1))
    for (const Param &p : state->stage->params())
      if (p.name == state->config->name + ".embedding" && !p.frozen) {
        std::vector<int64_t> line = grid.groupOf(rank, {Dim::PP});
        state->tiedGroup = {line.front(), line.back()};
        state->tiedBegin = p.flatBegin;
        state->tiedEnd = p.flatEnd;
        state->tiedCopy = ctx.ppRank > 0;
      }
  return state;
}

std::vector<ChannelFamily> channelFamiliesOf(const Plan &plan) {
  std::vector<bool> ring;
  for (const ModuleTopology &m : plan.topology.modules) {
    bool r = false;
    for (const ModuleConfig &mc : plan.config.modules)
      if (mc.name == m.name)
        r = m.isLanguage && mc.parallel.ringCp();
    ring.push_back(r);
  }
  return channelFamilies(plan.topology, ring);
}

void RankExecutor::setUpOverlap(ModuleState &m, const RankOptions &overlap) {
  // Ring CP's transfers on a channel of their own (the language module's:
  // the tag channel after every module's buckets').
  const std::vector<ChannelFamily> families =
      overlap.channels ? channelFamiliesOf(plan) : std::vector<ChannelFamily>();
  auto familiesOf = [&](std::initializer_list<ChannelUse> uses) {
    std::vector<size_t> found;
    for (ChannelUse use : uses)
      if (int64_t f = channelFamilyIndex(families, m.index, m.chunk, use);
          f >= 0)
        found.push_back(static_cast<size_t>(f));
    return found;
  };
  if (overlap.channels && overlap.ringAhead && m.stage->context().ringCp) {
    m.ringChannel =
        overlap.channels(1 + static_cast<int64_t>(modules.size() + m.slot),
                         familiesOf({ChannelUse::Ring}));
    if (m.ringChannel)
      m.stage->useRingChannel(m.ringChannel.get());
  }
  // Buckets reduce over DP x CP; the experts of expert parallelism over
  // the members holding the same ones (buckets of their own).
  if (overlap.bucketBytes <= 0 || !overlap.channels || m.dpcpGroup.size() < 2)
    return;
  int64_t microbatches = 0;
  for (const Instr &in : program->instrs)
    microbatches += in.op == InstrOp::Backward &&
                    in.index == static_cast<int64_t>(m.index) &&
                    in.chunk == m.chunk;
  std::vector<Param> &params = m.stage->params();
  std::vector<ParamSlot> slots;
  for (const Param &p : params) { // frozen: an empty slot, never reduced
    const bool expert = p.expert;
    slots.push_back({p.frozen ? 0 : p.flatBegin, p.frozen ? 0 : p.flatEnd,
                     p.partialOverTp      ? 0
                     : p.replicatedOverTp ? 1
                     : expert             ? 3
                                          : 2,
                     expert ? size_t(1) : size_t(0)});
  }
  FlatParams &flat = m.stage->flat();
  int64_t values =
      std::max<int64_t>(1, overlap.bucketBytes / int64_t(sizeof(float)));
  std::vector<GradBucket> buckets =
      planGradBuckets(slots, flat.tpPartial, values);
  if (buckets.empty())
    return; // every member of the group decides alike
  m.channel = overlap.channels(
      1 + static_cast<int64_t>(m.slot),
      familiesOf({ChannelUse::Buckets, ChannelUse::ExpertBuckets}));
  if (!m.channel)
    return; // the backend has none for this group: one all-reduce
  m.reduction = std::make_unique<BucketedReduction>(
      std::move(buckets), params.size(), microbatches, *m.channel,
      std::vector<std::vector<int64_t>>{m.dpcpGroup, m.experts.edp},
      flat.grads.data(), m.topo->name);
  BucketedReduction *reduction = m.reduction.get();
  if (plan.config.train.reducesInBf16())
    reduction->reduceInBf16();
  m.stage->onGradsDone([this, reduction](const std::vector<size_t> &done) {
    if (!evaluating)
      reduction->gradsDone(done, dev);
  });
}

void RankExecutor::setUpShards(ModuleState &m) {
  if (!m.stage->context().shardedMoments)
    return;
  FlatParams &f = m.stage->flat();
  auto placeIn = [&](const std::vector<int64_t> &group) {
    return ShardGroup{
        static_cast<int64_t>(group.size()),
        static_cast<int64_t>(std::find(group.begin(), group.end(), rank) -
                             group.begin())};
  };
  m.shardGroups = {m.dpcpGroup};
  std::vector<ShardGroup> groups = {placeIn(m.dpcpGroup)};
  // Expert parallelism: the dense parameters over DP x CP, the experts
  // (from flat.experts) over the members holding the same ones.
  m.shardGroups.push_back(m.experts.edp);
  groups.push_back(placeIn(m.experts.edp));
  std::vector<ShardRange> ranges;
  if (m.reduction) {
    ranges = m.reduction->ranges(f.tpPartial);
    m.reduction->scatterTo({groups[0].own, groups[1].own});
  } else if (f.trainable > f.experts) {
    if (f.experts > 0)
      ranges.push_back({0, f.experts, 0});
    ranges.push_back({f.experts, f.trainable, 1});
  } else if (f.trainable > 0) {
    ranges.push_back({0, f.trainable});
  }
  m.shards = std::make_unique<OptimizerShards>(
      std::move(ranges), f.trainable, std::move(groups), m.groups.trainable);
  m.shardM = Tensor::zeros(dev, m.shards->size());
  m.shardV = Tensor::zeros(dev, m.shards->size());
  if (!m.stage->context().bf16)
    return; // the fp32 weights are what the layers compute with
  // bf16: the fp32 masters of this member's pieces (and the frozen ones,
  // which never change) stay; the working weights hold the rest.
  m.shardValues = Tensor::empty(dev, std::max<int64_t>(m.shards->size(), 1));
  keepPieces(m, f.values, m.shardValues);
  if (f.total > f.trainable) {
    m.frozenValues = Tensor::empty(dev, f.total - f.trainable);
    dev.copy(m.frozenValues.data(), f.values.data() + f.trainable,
             m.frozenValues.bytes());
  }
  for (Param &p : m.stage->params())
    p.value = p.frozen
                  ? m.frozenValues.view(p.flatBegin - f.trainable, p.size())
                  : Tensor();
  dev.synchronize(); // the copies are done before the whole ones go
  f.values = Tensor();
}

namespace {

/// `buffer` (a module's flat fp32 values or bf16 working weights) made
/// whole over each range of `shards` overlapping [begin, end), each
/// member's piece gathered over the module's DP x CP group.
template <typename T>
void gatherRanges(comm::Comm &comm, const ModuleState &m, T *buffer,
                  int64_t begin, int64_t end) {
  const OptimizerShards &shards = *m.shards;
  for (size_t i = 0; i < shards.ranges().size(); ++i) {
    const ShardRange &r = shards.ranges()[i];
    if (r.end <= begin || r.begin >= end)
      continue;
    comm.allGatherV(m.shardGroups[r.group], buffer + shards.piece(i).begin,
                    pieceCounts(r, shards.members(i)), buffer + r.begin);
  }
}

} // namespace

void RankExecutor::gatherPieces(ModuleState &m, float *buffer, int64_t begin,
                                int64_t end) {
  gatherRanges(comm, m, buffer, begin, end);
}

void RankExecutor::gatherWorking(ModuleState &m) {
  FlatParams &f = m.stage->flat();
  uint16_t *working = f.working.data<uint16_t>();
  for (size_t i = 0; i < m.shards->ranges().size(); ++i) {
    const OptimizerShards::Piece &p = m.shards->piece(i);
    if (p.end > p.begin)
      dev.convert(device::DType::F32, m.shardValues.data() + p.at,
                  device::DType::BF16, working + p.begin, p.end - p.begin);
  }
  gatherRanges(comm, m, working, 0, f.trainable);
}

Tensor RankExecutor::wholeOf(ModuleState &m, const Tensor &pieces,
                             bool gather) {
  const int64_t trainable = m.stage->flat().trainable;
  Tensor whole = Tensor::zeros(dev, std::max<int64_t>(trainable, 1));
  if (!gather)
    return whole;
  for (size_t i = 0; i < m.shards->ranges().size(); ++i) {
    const OptimizerShards::Piece &p = m.shards->piece(i);
    if (p.end > p.begin)
      dev.copy(whole.data() + p.begin, pieces.data() + p.at,
               (p.end - p.begin) * int64_t(sizeof(float)));
  }
  gatherPieces(m, whole.data(), 0, trainable);
  return whole;
}

void RankExecutor::keepPieces(ModuleState &m, const Tensor &whole,
                              Tensor &pieces) {
  for (size_t i = 0; i < m.shards->ranges().size(); ++i) {
    const OptimizerShards::Piece &p = m.shards->piece(i);
    if (p.end > p.begin)
      dev.copy(pieces.data() + p.at, whole.data() + p.begin,
               (p.end - p.begin) * int64_t(sizeof(float)));
  }
}

ModuleState &RankExecutor::module(size_t m) {
  if (m >= modules.size() || !modules[m])
    throw RankFailure(
        "rank " + std::to_string(rank) + " does not hold module " +
        (m < topo.modules.size() ? "'" + topo.modules[m].name + "'"
                                 : std::to_string(m)));
  return *modules[m];
}

void RankExecutor::resetStep() {
  for (auto &m : modules)
    if (m)
      m->stage->dropWeightGrads();
  if (!evaluating)
    for (auto &m : modules)
      if (m && m->reduction)
        m->reduction->startStep(stepIndex);
  channelSpans.clear();
  batches.clear();
  lanes.clear();
  actIn.clear();
  actOut.clear();
  gradIn.clear();
  gradOut.clear();
  encOut.clear();
  encGrad.clear();
  bridgeIn.clear();
  bridgeGrad.clear();
  stepLoss = 0;
  // [sum of squares of the gradients, loss], accumulated on the device.
  if (!evaluating)
    dev.resetPeakBytes();
  // [sum of squares, loss, each rank's peak bytes, stop requests]
  // [sum of squares, loss, each rank's peak bytes, stop requests, each
  // rank's compute seconds]
  // [..., the sparse layers' aux loss]
  stepScalars = Tensor::zeros(dev, 4 + 2 * topo.worldSize, device::DType::F64);
  stepAux = 0;
  for (auto &m : modules) // an evaluation's forwards counted none
    if (m)
      m->stage->takeAuxLoss();
  stepComputeSeconds = 0;
  lossScalar = stepScalars.view(1, 1);
  stepTokens = 0;
  invN = 0;
  // Every rank derives the whole global batch (docs/data.md); N, the loss
  // normalizer, counts its loss tokens.
  int64_t n = 0;
  for (int64_t mb = 0; mb < topo.microbatches; ++mb)
    for (const Sample &s : batch(mb).samples) {
      stepTokens += s.length;
      for (int64_t p = 0; p < s.length; ++p)
        n += !lossMasked(s, encoders, p);
    }
  invN = n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
  stepTargets = n;
  stepFlops = batchFlops();
}

/// Model FLOPs of this step's global batch (config/Flops.h).
double RankExecutor::batchFlops() {
  const ModelConfig &config = plan.config;
  const ModuleConfig &language = config.language();
  double tokens = 0, pairs = 0;
  std::vector<double> rows(encoders.size(), 0), squares(encoders.size(), 0);
  for (int64_t mb = 0; mb < topo.microbatches; ++mb)
    for (const Sample &s : batch(mb).samples) {
      double length = static_cast<double>(
          topo.shard.packing ? s.length : config.batch.seqLength);
      tokens += length;
      pairs += length * (length + 1) / 2;
      for (size_t e = 0; e < encoders.size(); ++e) {
        double c = static_cast<double>(s.counts[e]);
        rows[e] += c;
        squares[e] += c * c;
      }
    }
  double forward = languageForwardFlops(language, tokens, pairs);
  size_t e = 0;
  for (const ModuleConfig &m : config.modules)
    if (m.kind == ModuleKind::Encoder) {
      forward +=
          encoderForwardFlops(m, language.hiddenSize, rows[e], squares[e]);
      ++e;
    }
  return 3.0 * forward;
}

const Microbatch &RankExecutor::batch(int64_t mb) {
  auto it = batches.find(mb);
  if (it == batches.end())
    it = batches.emplace(mb, active->get(stepIndex, mb)).first;
  return it->second;
}

const LanguageLane &RankExecutor::lane(const ModuleState &lm, int64_t mb) {
  auto it = lanes.find(mb);
  if (it == lanes.end())
    it = lanes
             .emplace(mb, languageLane(batch(mb), encoders, lm.laneBegin,
                                       lm.laneEnd, topo.shard.packing,
                                       topo.shard.padMultiple))
             .first;
  return it->second;
}

/// Whether this rank's output of encoder `m` leaves it: every rank's in
/// a colocated bridge, a source leader's otherwise (its TP/CP peers hold
/// copies and send nothing).
bool RankExecutor::handsOn(size_t m) const {
  for (const BridgeTopology &bridge : topo.bridges)
    if (bridge.src == m &&
        (bridge.mode == BridgeMode::Colocated ||
         std::count(bridge.srcLeaders.begin(), bridge.srcLeaders.end(), rank)))
      return true;
  return false;
}

/// Whether this rank returns bridge `b`'s gradient (the adjoint).
bool RankExecutor::takesBack(size_t b) const {
  const BridgeTopology &bridge = topo.bridges[b];
  return bridge.mode == BridgeMode::Colocated ||
         std::count(bridge.dstLeaders.begin(), bridge.dstLeaders.end(), rank);
}

/// Rows of encoder `m`'s tokens in samples [begin, end) of microbatch mb.
int64_t RankExecutor::rows(size_t m, int64_t mb, int64_t begin, int64_t end) {
  return modalityRows(batch(mb), m, begin, end);
}

Tensor RankExecutor::take(std::map<Key, Tensor> &from, Key key,
                          const char *what) {
  auto it = from.find(key);
  if (it == from.end())
    throw RankFailure(std::string("no ") + what + " for microbatch " +
                      std::to_string(key.second));
  Tensor out = std::move(it->second);
  from.erase(it);
  return out;
}

int64_t RankExecutor::laneRowsOf(size_t encoder, const Grid &grid, int64_t lane,
                                 int64_t mb) {
  auto [b, e] = laneSamples(topo.microBatchSize, grid.size(Dim::DP), lane);
  return rows(encoder, mb, b, e);
}

} // namespace mimo::exec
