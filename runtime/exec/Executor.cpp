//===- Executor.cpp - Runs a plan: every rank's instruction stream --------===//

#include "runtime/exec/Executor.h"

#include "runtime/core/Flops.h"
#include "runtime/core/LearningRate.h"
#include "runtime/core/Limits.h"
#include "runtime/device/Devices.h"
#include "runtime/exec/Model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace mimo::exec {

namespace {

using Clock = std::chrono::steady_clock;
using Key = std::pair<size_t, int64_t>; // (module or bridge, microbatch)

/// Message tags: kind, module/bridge, microbatch.
enum TagKind : int64_t { kAct = 1, kGrad = 2, kBridge = 3, kBridgeGrad = 4 };
int64_t tagOf(TagKind kind, int64_t index, int64_t mb) {
  static_assert(kMaxModules <= 1024 && kMaxMicrobatches <= 16384,
                "the limits must fit the tag's 10 and 14 bits");
  if (index >= kMaxModules || mb >= kMaxMicrobatches)
    throw std::runtime_error("too many modules or microbatches for the tags");
  return (static_cast<int64_t>(kind) << 24) | (index << 14) | mb;
}

/// A failure of this rank's own work (not a communication failure caused
/// by another rank).
class RankFailure : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct ModuleState {
  size_t index = 0;
  const ModuleTopology *topo = nullptr;
  const ModuleConfig *config = nullptr;
  Coords coords;
  std::unique_ptr<EncoderStage> encoder;
  std::unique_ptr<LanguageStage> language;
  Stage *stage = nullptr;
  std::vector<int64_t> dpcpGroup;
  int64_t laneBegin = 0, laneEnd = 0;
};

class RankExecutor {
public:
  RankExecutor(const Plan &plan, int64_t rank, comm::Comm &comm, Device &dev,
               const DataSource &data, const DataSource *evalData,
               Clock::time_point origin)
      : plan(plan), topo(plan.topology), rank(rank), comm(comm), dev(dev),
        data(data), evalData(evalData), active(&data), origin(origin),
        encoders(encodersOf(plan.config)) {
    for (int64_t r = 0; r < topo.worldSize; ++r)
      world.push_back(r);
    modules.resize(topo.modules.size());
    for (size_t m : topo.modulesOf(rank))
      modules[m] = makeModule(m);
    program = &plan.programs[static_cast<size_t>(
        plan.rankProgram[static_cast<size_t>(rank)])];
    if (evalData)
      evalProgram = forwardOnly(*program);
  }

  /// One training step (0-based `step`).
  StepMetrics runStep(int64_t step, bool trace,
                      std::vector<TraceEvent> &events) {
    auto start = Clock::now();
    run(*program, step, trace, events);
    StepMetrics metrics;
    metrics.step = step + 1;
    metrics.loss = stepLoss;
    metrics.gradNorm = stepNorm;
    metrics.lr = learningRate(plan.config.train, step + 1);
    metrics.flops = stepFlops;
    metrics.tokens = stepTokens;
    metrics.seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    return metrics;
  }

  /// The loss of held-out batch `index` (the forward half of the program on
  /// the eval data; nothing is updated).
  double evaluate(int64_t index, bool trace, std::vector<TraceEvent> &events) {
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
  void run(const Program &prog, int64_t step, bool trace,
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
                      std::to_string(i) + " (" +
                      describeInstr(topo, instrs[i]) + ")");
      double t0 = micros();
      exchanged.clear();
      if (end == i && !instrInfo(instrs[i].op).isSend &&
          !instrInfo(instrs[i].op).isRecv)
        execute(instrs[i]);
      else
        exchange(instrs, i, end);
      if (trace) {
        double t1 = micros();
        std::string name = describeInstr(topo, instrs[i]);
        for (size_t j = i + 1; j <= end; ++j)
          name += " + " + describeInstr(topo, instrs[j]);
        events.push_back({rank, name, t0, t1 - t0, traceArgs(instrs[i])});
      }
      i = end + 1;
    }
  }

  /// The parameters this rank holds and which of their blocks it writes to
  /// a checkpoint (one writer per block).
  HeldParams heldParams() {
    HeldParams held;
    for (auto &m : modules)
      if (m)
        for (Param &p : m->stage->params()) {
          held.params.push_back(&p);
          held.owned.push_back(m->coords.dp == 0 && m->coords.cp == 0 &&
                               (!p.replicatedOverTp || m->coords.tp == 0));
        }
    return held;
  }

  /// Restores parameters and moments from a checkpoint (any layout's).
  void load(const Checkpoint &checkpoint) {
    readCheckpointShards(checkpoint, heldParams());
    dev.synchronize();
  }

  /// SPEC §12: every rank writes its blocks into step-N.tmp; rank 0 makes
  /// the files before and the checkpoint complete after (atomic).
  void save(const std::string &dir, int64_t step, int64_t killDuringSave) {
    CheckpointFiles files = checkpointFiles(plan.config);
    currentInstr = kSaving;
    stepIndex = step - 1;
    barrier();
    if (rank == 0)
      beginCheckpoint(dir, step, files);
    barrier();
    writeCheckpointShards(dir, step, files, heldParams());
    barrier();
    if (rank == 0) {
      if (step == killDuringSave)
        std::_Exit(9); // as if killed: step-N.tmp stays incomplete
      nlohmann::json modules = toJson(plan.config)["modules"];
      nlohmann::json layout = {{"world_size", topo.worldSize},
                               {"modules", nlohmann::json::array()}};
      for (const nlohmann::json &m : modules)
        layout["modules"].push_back(
            {{"name", m["name"]}, {"parallel", m["parallel"]}});
      finishCheckpoint(dir, step, plan.config, layout);
    }
    barrier();
  }

  /// Every rank waits for every other.
  void barrier() {
    Tensor token = Tensor::zeros(dev, 1);
    comm.allReduceSum(world, token.data(), 1);
    dev.synchronize();
  }

  std::string where() const {
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

private:
  double micros() const {
    return std::chrono::duration<double, std::micro>(Clock::now() - origin)
        .count();
  }

  std::unique_ptr<ModuleState> makeModule(size_t m) {
    auto state = std::make_unique<ModuleState>();
    state->index = m;
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
    ctx.pp = grid.size(Dim::PP);
    ctx.tpRank = c.tp;
    ctx.cpRank = c.cp;
    ctx.ppRank = c.pp;
    ctx.sequenceParallel =
        state->topo->isLanguage && topo.shard.sequenceParallel;
    ctx.tpGroup = grid.groupOf(rank, {Dim::TP});
    ctx.cpGroup = grid.groupOf(rank, {Dim::CP});
    ctx.tpcpGroup = grid.groupOf(rank, {Dim::TP, Dim::CP});
    for (int64_t member : ctx.tpcpGroup) {
      Coords mc = grid.coordsOf(member);
      ctx.tpcpCoords.push_back({mc.tp, mc.cp});
    }
    state->dpcpGroup = grid.groupOf(rank, {Dim::DP, Dim::CP});
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
    return state;
  }

  ModuleState &module(size_t m) {
    if (m >= modules.size() || !modules[m])
      throw RankFailure(
          "rank " + std::to_string(rank) + " does not hold module " +
          (m < topo.modules.size() ? "'" + topo.modules[m].name + "'"
                                   : std::to_string(m)));
    return *modules[m];
  }

  void resetStep() {
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
    stepScalars = Tensor::zeros(dev, 2, device::DType::F64);
    lossScalar = stepScalars.view(1, 1);
    stepTokens = 0;
    invN = 0;
    // Every rank derives the whole global batch (SPEC §4.2); N, the loss
    // normalizer, counts its loss tokens.
    int64_t n = 0;
    for (int64_t mb = 0; mb < topo.microbatches; ++mb)
      for (const Sample &s : batch(mb).samples) {
        stepTokens += s.length;
        for (int64_t p = 0; p < s.length; ++p)
          n += !lossMasked(s, encoders, p);
      }
    invN = n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
    stepFlops = batchFlops();
  }

  /// Model FLOPs of this step's global batch (core/Flops.h).
  double batchFlops() {
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

  const Microbatch &batch(int64_t mb) {
    auto it = batches.find(mb);
    if (it == batches.end())
      it = batches.emplace(mb, active->get(stepIndex, mb)).first;
    return it->second;
  }

  const LanguageLane &lane(const ModuleState &lm, int64_t mb) {
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
  bool handsOn(size_t m) const {
    for (const BridgeTopology &bridge : topo.bridges)
      if (bridge.src == m && (bridge.mode == BridgeMode::Colocated ||
                              std::count(bridge.srcLeaders.begin(),
                                         bridge.srcLeaders.end(), rank)))
        return true;
    return false;
  }
  /// Whether this rank returns bridge `b`'s gradient (the adjoint).
  bool takesBack(size_t b) const {
    const BridgeTopology &bridge = topo.bridges[b];
    return bridge.mode == BridgeMode::Colocated ||
           std::count(bridge.dstLeaders.begin(), bridge.dstLeaders.end(), rank);
  }

  /// Rows of encoder `m`'s tokens in samples [begin, end) of microbatch mb.
  int64_t rows(size_t m, int64_t mb, int64_t begin, int64_t end) {
    return modalityRows(batch(mb), m, begin, end);
  }

  Tensor take(std::map<Key, Tensor> &from, Key key, const char *what) {
    auto it = from.find(key);
    if (it == from.end())
      throw RankFailure(std::string("no ") + what + " for microbatch " +
                        std::to_string(key.second));
    Tensor out = std::move(it->second);
    from.erase(it);
    return out;
  }

  /// The bytes of each point-to-point piece of a bridge between source
  /// lane `s` and destination lane `d`: the samples both cover.
  struct Piece {
    int64_t srcOffset, dstOffset, rows;
  };
  Piece piece(const BridgeTopology &bridge, int64_t mb, int64_t s, int64_t d) {
    const Grid &src = topo.modules[bridge.src].grid;
    const Grid &dst = topo.modules[bridge.dst].grid;
    auto [sb, se] = laneSamples(topo.microBatchSize, src.size(Dim::DP), s);
    auto [db, de] = laneSamples(topo.microBatchSize, dst.size(Dim::DP), d);
    int64_t b = std::max(sb, db), e = std::min(se, de);
    return {rows(bridge.src, mb, sb, b), rows(bridge.src, mb, db, b),
            rows(bridge.src, mb, b, e)};
  }

  int64_t laneRowsOf(size_t encoder, const Grid &grid, int64_t lane,
                     int64_t mb) {
    auto [b, e] = laneSamples(topo.microBatchSize, grid.size(Dim::DP), lane);
    return rows(encoder, mb, b, e);
  }

  /// Values of a pipeline message of module m (both stages agree).
  int64_t activationSize(ModuleState &m, int64_t mb) {
    if (m.language)
      return m.language->localTokens(lane(m, mb)) * m.language->hidden();
    return rows(m.index, mb, m.laneBegin, m.laneEnd) * m.encoder->hidden();
  }

  Peers peersOf(const Instr &in) {
    std::string error;
    std::optional<Peers> peers = resolvePeers(topo, rank, in, &error);
    if (!peers)
      throw RankFailure(error);
    return *peers;
  }

  /// A message of all of `t`'s bytes (a view, for a piece of a tensor).
  static comm::P2POp op(bool send, int64_t peer, int64_t tag, const Tensor &t) {
    return {send, peer, tag, const_cast<void *>(t.raw()), t.bytes()};
  }

  /// The trace arguments of an instruction: its microbatch and, for sends
  /// and receives, the peers and bytes each way.
  std::string traceArgs(const Instr &in) const {
    nlohmann::json args = nlohmann::json::object();
    if (in.mb >= 0)
      args["microbatch"] = in.mb;
    if (!exchanged.empty()) {
      nlohmann::json peers = nlohmann::json::array();
      int64_t sent = 0, received = 0;
      for (const comm::P2POp &op : exchanged) {
        peers.push_back(op.peer);
        (op.isSend ? sent : received) += op.bytes;
      }
      args["peers"] = peers;
      args["bytes_sent"] = sent;
      args["bytes_received"] = received;
    }
    return args.dump();
  }

  /// Posts the point-to-point instructions [first, last] together.
  void exchange(const std::vector<Instr> &instrs, size_t first, size_t last) {
    std::vector<comm::P2POp> ops;
    std::vector<std::pair<std::map<Key, Tensor> *, Key>> consumed;
    for (size_t i = first; i <= last; ++i) {
      const Instr &in = instrs[i];
      Peers peers = peersOf(in);
      Key key{static_cast<size_t>(in.index), in.mb};
      switch (in.op) {
      case InstrOp::SendAct:
      case InstrOp::SendGrad: {
        auto &from = in.op == InstrOp::SendAct ? actOut : gradOut;
        auto it = from.find(key);
        if (it == from.end())
          throw RankFailure("nothing to send for " + describeInstr(topo, in));
        ops.push_back(
            op(true, peers.ranks.at(0),
               tagOf(in.op == InstrOp::SendAct ? kAct : kGrad, in.index, in.mb),
               it->second));
        consumed.push_back({&from, key});
        break;
      }
      case InstrOp::RecvAct:
      case InstrOp::RecvGrad: {
        ModuleState &m = module(key.first);
        Tensor &to = (in.op == InstrOp::RecvAct ? actIn : gradIn)[key];
        to = Tensor::empty(activationSize(m, in.mb));
        ops.push_back(
            op(false, peers.ranks.at(0),
               tagOf(in.op == InstrOp::RecvAct ? kAct : kGrad, in.index, in.mb),
               to));
        break;
      }
      case InstrOp::BridgeSend:
      case InstrOp::BridgeSendGrad:
      case InstrOp::BridgeRecv:
      case InstrOp::BridgeRecvGrad: {
        // One piece per route: the samples both lanes hold, taken from (or
        // written into) the rows of this lane's tensor that they cover.
        const BridgeTopology &bridge = topo.bridges[key.first];
        const InstrInfo &info = instrInfo(in.op);
        bool send = info.isSend, grad = info.isGrad;
        bool onSource = send != grad; // bridge_send, bridge_recv_grad
        const Grid &src = topo.modules[bridge.src].grid;
        const Grid &dst = topo.modules[bridge.dst].grid;
        const Grid &own = onSource ? src : dst, &other = onSource ? dst : src;
        int64_t H = topo.modules[bridge.src].outputHidden;
        int64_t lane = own.coordsOf(rank).dp;
        int64_t values = laneRowsOf(bridge.src, own, lane, in.mb) * H;
        std::map<Key, Tensor> &map =
            send ? (grad ? bridgeGrad : encOut) : (grad ? encGrad : bridgeIn);
        Key bufferKey = onSource ? Key{bridge.src, in.mb} : key;
        Tensor *buffer;
        if (send) {
          auto it = map.find(bufferKey);
          if (it == map.end())
            throw RankFailure("nothing to send for " + describeInstr(topo, in));
          if (it->second.size() != values)
            throw RankFailure(topo.modules[bridge.src].name + " microbatch " +
                              std::to_string(in.mb) + ": " +
                              std::to_string(it->second.size() / H) +
                              " rows to send, but the lane's input_ids have " +
                              std::to_string(values / H) + " modality tokens");
          buffer = &it->second;
          consumed.push_back({&map, bufferKey});
        } else {
          // The pieces (the samples each peer shares with this lane) tile
          // the lane, so every row is received.
          buffer = &(map[bufferKey] = Tensor::empty(values));
        }
        for (int64_t peer : peers.ranks) {
          int64_t otherLane = other.coordsOf(peer).dp;
          Piece p = onSource ? piece(bridge, in.mb, lane, otherLane)
                             : piece(bridge, in.mb, otherLane, lane);
          int64_t offset = onSource ? p.srcOffset : p.dstOffset;
          ops.push_back(op(send, peer,
                           tagOf(grad ? kBridgeGrad : kBridge, in.index, in.mb),
                           buffer->view(offset * H, p.rows * H)));
        }
        break;
      }
      default:
        throw RankFailure("instruction " + describeInstr(topo, in) +
                          " cannot be posted with sends and receives");
      }
    }
    comm.exchange(ops);
    exchanged = ops;
    for (auto &[map, key] : consumed)
      map->erase(key);
  }

  void execute(const Instr &in) {
    Key key{static_cast<size_t>(in.index), in.mb};
    switch (in.op) {
    case InstrOp::Forward:
      return forward(module(key.first), in.mb);
    case InstrOp::Backward:
      return backward(module(key.first), in.mb);
    case InstrOp::Shard:
      return shard(module(key.first), in.mb);
    case InstrOp::Unshard: {
      ModuleState &lm = module(key.first);
      Tensor grad = take(gradOut, key, "input gradient to unshard");
      return inputBackward(lm, in.mb, grad);
    }
    case InstrOp::BridgeBroadcast:
    case InstrOp::BridgeBroadcastGrad: {
      Peers peers = peersOf(in);
      const BridgeTopology &bridge = topo.bridges[key.first];
      bool forward = in.op == InstrOp::BridgeBroadcast;
      const Grid &grid = topo.modules[forward ? bridge.dst : bridge.src].grid;
      std::vector<int64_t> group = grid.groupOf(rank, {Dim::TP, Dim::CP});
      Tensor &buffer = forward ? bridgeIn[key] : encGrad[{bridge.src, in.mb}];
      int64_t H = topo.modules[bridge.src].outputHidden;
      int64_t n =
          laneRowsOf(bridge.src, grid, grid.coordsOf(rank).dp, in.mb) * H;
      if (rank == peers.root && buffer.size() != n)
        throw RankFailure(topo.modules[bridge.src].name + " microbatch " +
                          std::to_string(in.mb) + ": the leader holds " +
                          std::to_string(buffer.size() / H) +
                          " rows to broadcast, the lane's input_ids have " +
                          std::to_string(n / H) + " modality tokens");
      if (buffer.size() != n)
        buffer = Tensor::empty(n);
      comm.broadcast(group, peers.root, buffer.raw(), buffer.bytes());
      return;
    }
    case InstrOp::ColocatedForward:
    case InstrOp::ColocatedBackward:
      return colocated(topo.bridges[key.first], key,
                       in.op == InstrOp::ColocatedForward);
    case InstrOp::ReduceGrads:
      return reduceGrads(module(key.first));
    case InstrOp::OptimizerStep:
      return optimizerStep();
    default:
      throw RankFailure("unexpected instruction " + describeInstr(topo, in));
    }
  }

  void forward(ModuleState &m, int64_t mb) {
    Key key{m.index, mb};
    if (m.encoder) {
      EncoderLane lane = encoderLane(batch(mb), m.index, m.config->featureDim,
                                     m.laneBegin, m.laneEnd);
      Tensor input = m.encoder->isFirst() ? Tensor::fromHost(lane.features)
                                          : take(actIn, key, "activation");
      Tensor out = m.encoder->forward(mb, input, lane.segment, lane.rows);
      if (!m.encoder->isLast())
        actOut[key] = std::move(out);
      else if (handsOn(m.index))
        encOut[key] = std::move(out);
      return;
    }
    Tensor input = take(actIn, key, "input");
    Tensor out = m.language->forward(mb, lane(m, mb), std::move(input), invN,
                                     &lossScalar);
    if (!m.language->isLast())
      actOut[key] = std::move(out);
  }

  void backward(ModuleState &m, int64_t mb) {
    Key key{m.index, mb};
    if (m.encoder) {
      Tensor grad =
          take(m.encoder->isLast() ? encGrad : gradIn, key, "output gradient");
      Tensor dx = m.encoder->backward(mb, grad);
      if (!m.encoder->isFirst())
        gradOut[key] = std::move(dx);
      return;
    }
    Tensor grad;
    if (!m.language->isLast())
      grad = take(gradIn, key, "output gradient");
    Tensor dx =
        m.language->backward(mb, m.language->isLast() ? nullptr : &grad);
    if (m.language->isFirst() && !m.language->needsUnshard())
      inputBackward(m, mb, dx);
    else
      gradOut[key] = std::move(dx);
  }

  void shard(ModuleState &lm, int64_t mb) {
    std::vector<const Tensor *> modality(lm.index, nullptr);
    std::vector<Key> used;
    for (size_t b = 0; b < topo.bridges.size(); ++b) {
      const BridgeTopology &bridge = topo.bridges[b];
      if (bridge.dst != lm.index)
        continue;
      auto it = bridgeIn.find({b, mb});
      if (it != bridgeIn.end())
        modality[bridge.src] = &it->second;
      used.push_back({b, mb});
    }
    actIn[{lm.index, mb}] = lm.language->shard(mb, lane(lm, mb), modality);
    for (Key k : used)
      bridgeIn.erase(k);
  }

  void inputBackward(ModuleState &lm, int64_t mb, const Tensor &grad) {
    std::vector<Tensor> grads =
        lm.language->inputBackward(mb, lane(lm, mb), grad, lm.index);
    for (size_t b = 0; b < topo.bridges.size(); ++b)
      if (topo.bridges[b].dst == lm.index)
        if (takesBack(b))
          bridgeGrad[{b, mb}] = std::move(grads[topo.bridges[b].src]);
  }

  /// SPEC §4.4: all-gather over the gather group (fan-in forward, fan-out
  /// backward), narrow to this rank's lane (the other way), or identity.
  void colocated(const BridgeTopology &bridge, Key key, bool forward) {
    int64_t mb = key.second;
    const Grid &src = topo.modules[bridge.src].grid;
    const Grid &dst = topo.modules[bridge.dst].grid;
    int64_t H = topo.modules[bridge.src].outputHidden;
    Tensor in = forward ? take(encOut, {bridge.src, mb}, "encoder output")
                        : take(bridgeGrad, key, "bridge gradient");
    Tensor &out = forward ? bridgeIn[key] : encGrad[{bridge.src, mb}];
    const Grid &from = forward ? src : dst, &to = forward ? dst : src;
    int64_t fromLane = from.coordsOf(rank).dp, toLane = to.coordsOf(rank).dp;
    int64_t fromLanes = from.size(Dim::DP), toLanes = to.size(Dim::DP);
    if (fromLanes == toLanes) {
      out = std::move(in);
    } else if (fromLanes > toLanes) {
      // Gather the lanes that make up this rank's wider lane: the plan's
      // gather group.
      const std::vector<int64_t> *group = gatherGroupOf(bridge, rank);
      if (!group)
        throw std::runtime_error("rank " + std::to_string(rank) +
                                 " is in no gather group of its colocated "
                                 "bridge");
      std::vector<int64_t> counts;
      for (int64_t member : *group)
        counts.push_back(laneRowsOf(bridge.src, from, from.laneOf(member), mb) *
                         H);
      out = Tensor::empty(laneRowsOf(bridge.src, to, toLane, mb) * H);
      comm.allGatherV(*group, in.data(), counts, out.data());
    } else {
      // Narrow to this rank's lane's samples.
      auto [fb, fe] = laneSamples(topo.microBatchSize, fromLanes, fromLane);
      auto [tb, te] = laneSamples(topo.microBatchSize, toLanes, toLane);
      (void)fe;
      int64_t offset = rows(bridge.src, mb, fb, tb) * H;
      int64_t count = rows(bridge.src, mb, tb, te) * H;
      out = in.view(offset, count);
    }
  }

  /// The TP sum of SP-partial gradients (a prefix of the flat buffer),
  /// then the DP x CP sum of all of them: one collective each.
  void reduceGrads(ModuleState &m) {
    FlatParams &flat = m.stage->flat();
    const StageContext &ctx = m.stage->context();
    if (ctx.sequenceParallel && ctx.tp > 1 && flat.spPartial > 0)
      comm.allReduceSum(ctx.tpGroup, flat.grads.data(), flat.spPartial);
    if (m.dpcpGroup.size() > 1)
      comm.allReduceSum(m.dpcpGroup, flat.grads.data(), flat.total);
  }

  /// Global gradient norm and loss (one all-reduce of two doubles on the
  /// device, one download), clipping folded into AdamW, one AdamW launch
  /// per module.
  void optimizerStep() {
    double *sums = stepScalars.data<double>(); // [sum of squares, loss]
    if (evaluating) { // the loss alone: no gradients, no update
      comm.allReduceSum(world, sums, 2);
      double host[2];
      dev.download(host, sums, sizeof(host));
      stepLoss = host[1];
      return;
    }
    for (auto &m : modules) {
      if (!m || m->coords.dp != 0 || m->coords.cp != 0)
        continue;
      // Each replica once: replicated parameters on TP rank 0 only.
      FlatParams &flat = m->stage->flat();
      int64_t from = m->coords.tp == 0 ? 0 : flat.replicated;
      dev.sumSquaresInto(flat.grads.data() + from, flat.total - from, sums);
    }
    comm.allReduceSum(world, sums, 2);
    double host[2];
    dev.download(host, sums, sizeof(host));
    stepNorm = std::sqrt(host[0]);
    stepLoss = host[1];
    const TrainConfig &train = plan.config.train;
    device::AdamWStep adam;
    adam.lr = learningRate(train, stepIndex + 1);
    adam.beta1 = train.beta1;
    adam.beta2 = train.beta2;
    adam.eps = train.eps;
    adam.weightDecay = train.weightDecay;
    adam.step = stepIndex + 1;
    if (train.clipGrad > 0 && stepNorm > train.clipGrad)
      adam.gradScale = static_cast<float>(train.clipGrad / (stepNorm + 1e-6));
    for (auto &m : modules) {
      if (!m)
        continue;
      FlatParams &flat = m->stage->flat();
      dev.adamw(flat.values.data(), flat.grads.data(), flat.m.data(),
                flat.v.data(), flat.total, adam);
      dev.fillZero(flat.grads.raw(), flat.grads.bytes());
    }
  }

  const Plan &plan;
  const Topology &topo;
  int64_t rank;
  comm::Comm &comm;
  Device &dev;
  const DataSource &data;
  /// Held-out data (null without evaluations) and the one being read.
  const DataSource *evalData, *active;
  bool evaluating = false;
  /// The program's forward half, for evaluations.
  Program evalProgram;
  Clock::time_point origin;
  std::vector<EncoderInfo> encoders;
  std::vector<int64_t> world;
  std::vector<std::unique_ptr<ModuleState>> modules;
  const Program *program = nullptr;

  /// currentInstr while writing a checkpoint.
  static constexpr int64_t kSaving = -2;
  int64_t stepIndex = 0, currentInstr = -1;
  std::map<int64_t, Microbatch> batches;
  std::map<int64_t, LanguageLane> lanes;
  std::map<Key, Tensor> actIn, actOut, gradIn, gradOut, encOut, encGrad,
      bridgeIn, bridgeGrad;
  Tensor stepScalars, lossScalar;
  /// The last exchange's messages (for the trace).
  std::vector<comm::P2POp> exchanged;
  double invN = 0, stepLoss = 0, stepNorm = 0, stepFlops = 0;
  int64_t stepTokens = 0;
};

/// The runtime's own limits (message tags), checked before any rank starts.
std::string limitsError(const Plan &plan, const std::string &planFile) {
  if (plan.topology.microbatches > kMaxMicrobatches)
    return planFile + ": /model/batch/num_microbatches: error: " +
           std::to_string(plan.topology.microbatches) +
           " microbatches exceed the runtime's limit of " +
           std::to_string(kMaxMicrobatches) +
           " per step; use fewer, larger microbatches";
  if (plan.topology.modules.size() > size_t(kMaxModules))
    return planFile + ": /model/modules: error: more than " +
           std::to_string(kMaxModules) + " modules";
  return "";
}

/// The training data and, when the model evaluates, the held-out data.
struct DataSources {
  std::unique_ptr<DataSource> train, eval;
  explicit operator bool() const { return train != nullptr; }
};

DataSources dataFor(const Plan &plan, const RunOptions &options,
                    RunResult &result) {
  DataSources sources;
  if (std::string limits = limitsError(plan, options.planFile);
      !limits.empty()) {
    result.exitCode = 1;
    result.error = limits;
    return sources;
  }
  std::vector<std::string> errors;
  sources.train =
      makeDataSource(plan.config, options.baseDir, options.planFile, errors);
  if (sources.train && plan.config.train.evalEvery > 0)
    sources.eval = makeDataSource(plan.config, options.baseDir,
                                  options.planFile, errors, DataSplit::Eval);
  if (!errors.empty()) {
    sources.train.reset();
    result.exitCode = 1;
    for (const std::string &e : errors)
      result.error += (result.error.empty() ? "" : "\n") + e;
  }
  return sources;
}

/// Makes `dev` this thread's current device and `comm`'s, until destroyed.
class DeviceBinding {
public:
  DeviceBinding(device::Device &dev, comm::Comm &comm) : comm(comm) {
    device::setCurrentDevice(&dev);
    comm.setDevice(&dev);
  }
  ~DeviceBinding() {
    comm.setDevice(nullptr);
    device::setCurrentDevice(nullptr);
  }
  DeviceBinding(const DeviceBinding &) = delete;
  DeviceBinding &operator=(const DeviceBinding &) = delete;

private:
  comm::Comm &comm;
};

/// Runs every step of `rank`; returns the failure message or "".
std::string runRank(const Plan &plan, int64_t rank, comm::Comm &comm,
                    const DataSource &data, const DataSource *evalData,
                    const RunOptions &options, Clock::time_point origin,
                    RunResult &result, std::vector<TraceEvent> &events) {
  // Destroyed in reverse: the executor's tensors before the device.
  std::unique_ptr<Device> dev;
  std::optional<DeviceBinding> binding;
  std::unique_ptr<RankExecutor> executor;
  int64_t steps = options.steps >= 0 ? options.steps : plan.config.train.steps;
  int64_t step = options.resume ? options.resume->step : 0;
  try {
    dev = device::makeDevice(options.device, rank, options.threads);
    binding.emplace(*dev, comm);
    executor = std::make_unique<RankExecutor>(plan, rank, comm, *dev, data,
                                              evalData, origin);
    const TrainConfig &train = plan.config.train;
    if (options.resume)
      executor->load(*options.resume);
    for (; step < steps; ++step) {
      if (options.fault && options.fault->first == rank &&
          options.fault->second == step + 1)
        throw RankFailure(
            "injected fault (MIMO_INJECT_FAULT=" + std::to_string(rank) + ":" +
            std::to_string(step + 1) + ")");
      StepMetrics metrics =
          executor->runStep(step, options.collectTrace, events);
      if (evalData && train.evalEvery > 0 &&
          (step + 1) % train.evalEvery == 0) {
        double sum = 0;
        for (int64_t e = 0; e < train.evalSteps; ++e)
          sum += executor->evaluate(e, options.collectTrace, events);
        metrics.evalLoss = sum / static_cast<double>(train.evalSteps);
      }
      if (!options.saveDir.empty() &&
          (step + 1 == steps ||
           (options.saveEvery > 0 && (step + 1) % options.saveEvery == 0)))
        executor->save(options.saveDir, step + 1, options.killDuringSave);
      if (rank == 0) {
        result.steps.push_back(metrics);
        if (options.onStep)
          options.onStep(metrics);
      }
    }
  } catch (const comm::CommError &e) {
    return e.what();
  } catch (const std::exception &e) {
    std::string where = executor ? executor->where() : std::string("setup");
    if (executor && std::string(e.what()).rfind("injected", 0) == 0)
      where = "the start of step " + std::to_string(step + 1);
    std::string message = "rank " + std::to_string(rank) + " failed at " +
                          where + ": " + e.what();
    comm.fail(message);
    return message;
  }
  return "";
}

} // namespace

std::optional<Plan> referencePlan(const ModelConfig &config,
                                  std::string *error) {
  ModelConfig reference = config;
  reference.worldSize.reset();
  for (ModuleConfig &module : reference.modules) {
    DimOrder order = module.parallel.order;
    module.parallel = ParallelConfig();
    module.parallel.order = order;
  }
  return buildPlan(reference, error);
}

std::optional<std::pair<int64_t, int64_t>> parseFault(const char *text,
                                                      std::string *error) {
  if (!text || !*text)
    return std::nullopt;
  std::string s(text);
  size_t colon = s.find(':');
  try {
    if (colon != std::string::npos) {
      size_t used1 = 0, used2 = 0;
      int64_t rank = std::stoll(s.substr(0, colon), &used1);
      int64_t step = std::stoll(s.substr(colon + 1), &used2);
      if (used1 == colon && used2 == s.size() - colon - 1 && rank >= 0 &&
          step >= 1)
        return std::make_pair(rank, step);
    }
  } catch (const std::exception &) {
  }
  if (error)
    *error = "MIMO_INJECT_FAULT='" + s +
             "' is not RANK:STEP (e.g. 3:2: rank 3 fails at the start of "
             "step 2; steps count from 1)";
  return std::make_pair(int64_t(-1), int64_t(-1));
}

RunResult runLocal(const Plan &plan, const RunOptions &options) {
  RunResult result;
  DataSources data = dataFor(plan, options, result);
  if (!data)
    return result;
  int64_t world = plan.topology.worldSize;
  RunOptions local = options;
  if (local.threads <= 0)
    local.threads = device::defaultThreads(world);
  device::setCpuBlasThreads(local.threads);
  auto localWorld = comm::makeLocalWorld(world);
  std::vector<std::string> failures(static_cast<size_t>(world));
  std::vector<std::vector<TraceEvent>> events(static_cast<size_t>(world));
  Clock::time_point origin = Clock::now();
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      std::unique_ptr<comm::Comm> c = comm::makeLocalComm(localWorld, rank);
      c->setTimeout(std::chrono::duration<double>(options.timeoutSeconds));
      failures[static_cast<size_t>(rank)] =
          runRank(plan, rank, *c, *data.train, data.eval.get(), local, origin,
                  result, events[static_cast<size_t>(rank)]);
    });
  for (std::thread &t : threads)
    t.join();
  std::string first = comm::localWorldFailure(*localWorld);
  if (first.empty())
    for (const std::string &f : failures)
      if (!f.empty()) {
        first = f;
        break;
      }
  if (!first.empty()) {
    result.exitCode = 2;
    result.error = first;
  }
  for (auto &e : events)
    result.trace.insert(result.trace.end(), e.begin(), e.end());
  return result;
}

RunResult runOnComm(const Plan &plan, comm::Comm &comm,
                    const RunOptions &options) {
  RunResult result;
  if (options.device != device::DeviceKind::Cpu &&
      std::string(comm.backendName()) == "mpi") {
    result.exitCode = 1;
    result.error = "the mpi backend moves host memory: use --device cpu with "
                   "it (GPU ranks under mpirun need the nccl backend)";
    return result;
  }
  DataSources data = dataFor(plan, options, result);
  if (!data)
    return result;
  comm.setTimeout(std::chrono::duration<double>(options.timeoutSeconds));
  RunOptions local = options;
  if (local.threads <= 0)
    local.threads = device::defaultThreads(comm::ranksOnThisNode());
  device::setCpuBlasThreads(local.threads);
  std::vector<TraceEvent> events;
  std::string failure =
      runRank(plan, comm.rank(), comm, *data.train, data.eval.get(), local,
              Clock::now(), result, events);
  if (!failure.empty()) {
    // The backend tears the job down; reaching here means it could not.
    comm.fail(failure);
    result.exitCode = 2;
    result.error = failure;
    return result;
  }
  if (options.collectTrace) {
    // Gather the trace on rank 0: a count, then (start, duration) pairs and
    // the names and arguments, one "name<TAB>args" line per event.
    if (comm.rank() == 0) {
      result.trace = events;
      for (int64_t r = 1; r < comm.size(); ++r) {
        int64_t sizes[2];
        comm.recv(r, 1 << 27, sizes, sizeof(sizes));
        std::vector<double> times(static_cast<size_t>(2 * sizes[0]));
        std::string names(static_cast<size_t>(sizes[1]), '\0');
        comm.recv(r, 1 << 27, times.data(),
                  static_cast<int64_t>(times.size() * sizeof(double)));
        comm.recv(r, 1 << 27, names.data(), sizes[1]);
        size_t at = 0;
        for (int64_t i = 0; i < sizes[0]; ++i) {
          size_t end = names.find('\n', at);
          std::string line = names.substr(at, end - at);
          size_t tab = line.find('\t');
          result.trace.push_back(
              {r, line.substr(0, tab), times[static_cast<size_t>(2 * i)],
               times[static_cast<size_t>(2 * i + 1)],
               tab == std::string::npos ? std::string()
                                        : line.substr(tab + 1)});
          at = end + 1;
        }
      }
    } else {
      std::vector<double> times;
      std::string names;
      for (const TraceEvent &e : events) {
        times.push_back(e.startUs);
        times.push_back(e.durationUs);
        names += e.name + "\t" + e.args + "\n";
      }
      int64_t sizes[2] = {static_cast<int64_t>(events.size()),
                          static_cast<int64_t>(names.size())};
      comm.send(0, 1 << 27, sizes, sizeof(sizes));
      comm.send(0, 1 << 27, times.data(),
                static_cast<int64_t>(times.size() * sizeof(double)));
      comm.send(0, 1 << 27, names.data(), sizes[1]);
    }
  }
  return result;
}

std::string traceJson(const std::vector<TraceEvent> &events) {
  nlohmann::json trace;
  trace["displayTimeUnit"] = "ms";
  nlohmann::json list = nlohmann::json::array();
  std::set<int64_t> ranks;
  for (const TraceEvent &e : events)
    ranks.insert(e.rank);
  for (int64_t rank : ranks)
    list.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"tid", rank},
                    {"args", {{"name", "rank " + std::to_string(rank)}}}});
  for (const TraceEvent &e : events) {
    nlohmann::json event = {
        {"name", e.name}, {"pid", 0}, {"tid", e.rank}, {"ts", e.startUs}};
    if (e.durationUs < 0) { // a step's start
      event["cat"] = "step";
      event["ph"] = "i";
      event["s"] = "t";
    } else {
      event["cat"] = "instruction";
      event["ph"] = "X";
      event["dur"] = e.durationUs;
    }
    if (!e.args.empty())
      event["args"] =
          nlohmann::json::parse(e.args, nullptr, /*allow_exceptions=*/false);
    list.push_back(std::move(event));
  }
  trace["traceEvents"] = std::move(list);
  return trace.dump();
}

} // namespace mimo::exec
