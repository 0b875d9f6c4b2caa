//===- RankInstructions.cpp - What each instruction does ------------------===//

#include "runtime/exec/RankExecutor.h"

#include "runtime/config/Flops.h"
#include "runtime/config/LearningRate.h"
#include "runtime/device/Devices.h"
#include "runtime/support/Limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

namespace mimo::exec {

RankExecutor::Piece RankExecutor::piece(const BridgeTopology &bridge,
                                        int64_t mb, int64_t s, int64_t d) {
  const Grid &src = topo.modules[bridge.src].grid;
  const Grid &dst = topo.modules[bridge.dst].grid;
  auto [sb, se] = laneSamples(topo.microBatchSize, src.size(Dim::DP), s);
  auto [db, de] = laneSamples(topo.microBatchSize, dst.size(Dim::DP), d);
  int64_t b = std::max(sb, db), e = std::min(se, de);
  return {rows(bridge.src, mb, sb, b), rows(bridge.src, mb, db, b),
          rows(bridge.src, mb, b, e)};
}

/// Values of a pipeline message of module m (both stages agree).
int64_t RankExecutor::activationSize(ModuleState &m, int64_t mb) {
  if (m.language)
    return m.language->localTokens(lane(m, mb)) * m.language->hidden();
  return rows(m.index, mb, m.laneBegin, m.laneEnd) * m.encoder->hidden();
}

Peers RankExecutor::peersOf(const Instr &in) {
  std::string error;
  std::optional<Peers> peers = resolvePeers(topo, rank, in, &error);
  if (!peers)
    throw RankFailure(error);
  return *peers;
}

/// A message of all of `t`'s bytes (a view, for a piece of a tensor).
comm::P2POp RankExecutor::op(bool send, int64_t peer, int64_t tag,
                             const Tensor &t) {
  return {send, peer, tag, const_cast<void *>(t.raw()), t.bytes()};
}

/// The trace arguments of an instruction: its microbatch and, for sends
/// and receives, the peers and bytes each way.
std::string RankExecutor::traceArgs(const Instr &in) const {
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
void RankExecutor::exchange(const std::vector<Instr> &instrs, size_t first,
                            size_t last) {
  std::vector<comm::P2POp> ops;
  std::vector<std::pair<std::map<Key, Tensor> *, Key>> consumed;
  for (size_t i = first; i <= last; ++i) {
    const Instr &in = instrs[i];
    Peers peers = peersOf(in);
    Key key{slotOf(in), in.mb};
    switch (in.op) {
    case InstrOp::SendAct:
    case InstrOp::SendGrad: {
      auto &from = in.op == InstrOp::SendAct ? actOut : gradOut;
      auto it = from.find(key);
      if (it == from.end())
        throw RankFailure("nothing to send for " + describeInstr(topo, in));
      ops.push_back(op(true, peers.ranks.at(0),
                       tagOf(in.op == InstrOp::SendAct ? kAct : kGrad, in.index,
                             in.mb, senderChunk(topo, rank, in)),
                       it->second));
      consumed.push_back({&from, key});
      break;
    }
    case InstrOp::RecvAct:
    case InstrOp::RecvGrad: {
      ModuleState &m = module(key.first);
      Tensor &to = (in.op == InstrOp::RecvAct ? actIn : gradIn)[key];
      to = Tensor::empty(activationSize(m, in.mb));
      ops.push_back(op(false, peers.ranks.at(0),
                       tagOf(in.op == InstrOp::RecvAct ? kAct : kGrad, in.index,
                             in.mb, senderChunk(topo, rank, in)),
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
  exchanged = ops;
  if (instrs[first].posted) {
    // docs/plan.md "Posted messages": a send goes out and the rank goes on
    // (its tensors kept until the pass's end waits for it); a receive
    // blocks, on the posted messages' own pairing. Posted sends already
    // received let their tensors go now (a microbatch's encoder output or
    // bridge gradients each), not at the pass's end.
    for (auto it = postedInFlight.begin(); it != postedInFlight.end();)
      if (it->sends->done()) {
        it->sends->wait();
        it = postedInFlight.erase(it);
      } else {
        ++it;
      }
    if (!instrInfo(instrs[first].op).isSend)
      return comm.receivePosted(ops);
    PostedFlight f;
    for (auto &[map, key] : consumed) {
      f.buffers.push_back(std::move(map->at(key)));
      map->erase(key);
    }
    f.sends = comm.postSends(std::move(ops));
    postedInFlight.push_back(std::move(f));
    return;
  }
  if (!sendChannel) {
    comm.exchange(ops);
    for (auto &[map, key] : consumed)
      map->erase(key);
    return;
  }
  // Sends go out ahead on the send channel, which waits for the receivers
  // (the tensors they read stay alive with the request); the receives
  // block here. Waiting only for less than the batch did never deadlocks.
  std::vector<comm::P2POp> sends, receives;
  for (const comm::P2POp &o : ops)
    (o.isSend ? sends : receives).push_back(o);
  if (!sends.empty()) {
    InFlight f;
    for (size_t j = first; j <= last; ++j)
      if (instrInfo(instrs[j].op).isSend)
        f.name +=
            (f.name.empty() ? "" : " + ") + describeInstr(topo, instrs[j]);
    for (const comm::P2POp &o : sends)
      f.bytes += o.bytes;
    for (auto &[map, key] : consumed) {
      f.buffers.push_back(std::move(map->at(key)));
      map->erase(key);
    }
    f.request = sendChannel->exchange(
        std::move(sends), dev.record(),
        "step " + std::to_string(stepIndex + 1) + ", instruction " +
            std::to_string(first) + " (" + f.name + ")");
    inFlight.push_back(std::move(f));
  }
  if (!receives.empty())
    comm.exchange(receives);
}

void RankExecutor::execute(const Instr &in) {
  Key key{slotOf(in), in.mb};
  switch (in.op) {
  case InstrOp::Forward:
    return forward(module(key.first), in.mb);
  case InstrOp::Backward: {
    // Under zero bubble the stage keeps the weight gradients for the
    // microbatch's weight_grad (model/WeightGrads.h).
    struct Deferring { // until the backward returns or throws
      Stage &stage;
      ~Deferring() { stage.stopDeferring(); }
    } deferring{*module(key.first).stage};
    if (deferring.stage.splitsBackward())
      deferring.stage.deferWeightGrads(in.mb);
    return backward(module(key.first), in.mb);
  }
  case InstrOp::WeightGrad:
    return module(key.first).stage->weightBackward(in.mb);
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
    int64_t n = laneRowsOf(bridge.src, grid, grid.coordsOf(rank).dp, in.mb) * H;
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
  case InstrOp::ReduceGrads: // every chunk of the module
    for (int32_t c = 0; c < topo.modules[in.index].virtualStages; ++c)
      reduceGrads(module(slotOf(static_cast<size_t>(in.index), c)));
    return;
  case InstrOp::OptimizerStep:
    return optimizerStep();
  default:
    throw RankFailure("unexpected instruction " + describeInstr(topo, in));
  }
}

void RankExecutor::forward(ModuleState &m, int64_t mb) {
  Key key{m.slot, mb};
  if (m.encoder) {
    EncoderLane lane = encoderLane(batch(mb), m.index, m.config->featureDim,
                                   m.laneBegin, m.laneEnd);
    Tensor input = m.encoder->isFirst() ? Tensor::fromHost(lane.features)
                                        : take(actIn, key, "activation");
    Tensor out = m.encoder->forward(mb, input, lane.segment, lane.rows);
    if (m.topo->forwardOnly) // no backward will read what it saved
      m.encoder->dropCaches();
    if (!m.encoder->isLast())
      actOut[key] = std::move(out);
    else if (handsOn(m.index))
      encOut[key] = std::move(out);
    return;
  }
  Tensor input = take(actIn, key, "input");
  Tensor out = m.language->forward(mb, lane(m, mb), std::move(input), invN,
                                   &lossScalar, evaluating);
  if (!m.language->isLast())
    actOut[key] = std::move(out);
}

void RankExecutor::backward(ModuleState &m, int64_t mb) {
  Key key{m.slot, mb};
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
  Tensor dx = m.language->backward(mb, m.language->isLast() ? nullptr : &grad);
  if (m.language->isFirst() && !m.language->needsUnshard())
    inputBackward(m, mb, dx);
  else
    gradOut[key] = std::move(dx);
}

void RankExecutor::shard(ModuleState &lm, int64_t mb) {
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

void RankExecutor::inputBackward(ModuleState &lm, int64_t mb,
                                 const Tensor &grad) {
  std::vector<Tensor> grads =
      lm.language->inputBackward(mb, lane(lm, mb), grad, lm.index);
  for (size_t b = 0; b < topo.bridges.size(); ++b)
    if (topo.bridges[b].dst == lm.index)
      if (takesBack(b) && !topo.modules[topo.bridges[b].src].forwardOnly)
        bridgeGrad[{b, mb}] = std::move(grads[topo.bridges[b].src]);
}

/// docs/plan.md: all-gather over the gather group (fan-in forward, fan-out
/// backward), narrow to this rank's lane (the other way), or identity.
void RankExecutor::colocated(const BridgeTopology &bridge, Key key,
                             bool forward) {
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
    // Gather the lanes that make up this rank's wider lane (the plan's
    // gather group).
    std::vector<int64_t> group = gatherGroup(from, fromLanes / toLanes, rank);
    std::vector<int64_t> counts;
    for (int64_t member : group)
      counts.push_back(laneRowsOf(bridge.src, from, from.laneOf(member), mb) *
                       H);
    out = Tensor::empty(laneRowsOf(bridge.src, to, toLane, mb) * H);
    comm.allGatherV(group, in.data(), counts, out.data());
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

/// The TP sum of TP-partial gradients (a prefix of the flat buffer),
/// then the DP x CP sum of all of them: one collective, or the buckets
/// the backward has posted, the rest and the prefix. Under
/// train.grad_reduce_dtype "bf16" (docs/model.md) each member's gradients
/// are rounded to bf16 before the sum and the sums after it, on every rank
/// (a group of one too: the reference trains alike).
void RankExecutor::reduceGrads(ModuleState &m) {
  // Zero bubble: every weight gradient the backwards kept must have been
  // made (a program that drops a weight_grad would lose it silently).
  if (size_t waiting = m.stage->waitingWeightGrads())
    throw RankFailure(m.topo->name + ": the weight gradients of " +
                      std::to_string(waiting) +
                      " microbatches were never made (no weight_grad "
                      "instruction for them before reduce_grads)");
  FlatParams &flat = m.stage->flat();
  const StageContext &ctx = m.stage->context();
  if (ctx.tp > 1 && flat.tpPartial > 0)
    comm.allReduceSum(ctx.tpGroup, flat.grads.data(), flat.tpPartial);
  const bool bf16 = plan.config.train.reducesInBf16();
  // The buckets round their own ranges as they are posted.
  if (bf16 && !m.reduction)
    dev.roundTo(device::DType::BF16, flat.grads.data(), flat.trainable);
  auto allReduce = [&](const std::vector<int64_t> &group, float *data,
                       int64_t count) {
    if (bf16)
      comm.allReduceSumBf16(group, data, count);
    else
      comm.allReduceSum(group, data, count);
  };
  if (m.reduction) {
    std::vector<BucketedReduction::Span> spans =
        m.reduction->finish(dev, flat.tpPartial);
    channelSpans.insert(channelSpans.end(), spans.begin(), spans.end());
  } else if (m.shards) {
    // The distributed optimizer: each member sums its own pieces.
    for (size_t i = 0; i < m.shards->ranges().size(); ++i) {
      const ShardRange &r = m.shards->ranges()[i];
      comm.reduceScatterV(m.shardGroups[r.group], flat.grads.data() + r.begin,
                          pieceCounts(r, m.shards->members(i)),
                          flat.grads.data() + m.shards->piece(i).begin);
    }
  } else {
    // Experts apart: the experts (from flat.experts) over the members
    // holding the same ones (TP ranks too when etp < tp: each summed its
    // share of the rows).
    if (m.dpcpGroup.size() > 1)
      allReduce(m.dpcpGroup, flat.grads.data(), flat.experts);
    if (flat.trainable > flat.experts && m.experts.edp.size() > 1)
      allReduce(m.experts.edp, flat.grads.data() + flat.experts,
                flat.trainable - flat.experts);
  }
  // The sums in bf16 (the nccl backend's are already).
  if (bf16)
    dev.roundTo(device::DType::BF16, flat.grads.data(), flat.trainable);
}

/// Global gradient norm and loss (one all-reduce of two doubles on the
/// device, one download), clipping folded into AdamW, one AdamW launch
/// per module. Each rank's peak device memory rides along (slot 2 + rank;
/// the others' slots are zero, so the sum gathers them).
void RankExecutor::optimizerStep() {
  double *sums = stepScalars.data<double>(); // [sum of squares, loss, peaks]
  if (evaluating) { // the loss alone: no gradients, no update
    comm.allReduceSum(world, sums, 2);
    double host[2];
    dev.download(host, sums, sizeof(host));
    stepLoss = host[1];
    return;
  }
  // Under the distributed optimizer a member holds the sums of its own
  // pieces only: a tied embedding's are gathered whole first.
  for (auto &m : modules)
    if (m && m->shards && !m->tiedGroup.empty())
      gatherPieces(*m, m->stage->flat().grads.data(), m->tiedBegin, m->tiedEnd);
  // A tied embedding's first and last stage sum its two gradients (the
  // lookup's and the head's), each pair on its own, every rank before the
  // world's all-reduce below: both copies then take the same update.
  for (auto &m : modules)
    if (m && !m->tiedGroup.empty())
      comm.allReduceSum(m->tiedGroup,
                        m->stage->flat().grads.data() + m->tiedBegin,
                        m->tiedEnd - m->tiedBegin);
  for (auto &m : modules) {
    // Each replica once: one member of the DP x CP group (each member its
    // own pieces under the distributed optimizer; the experts of expert
    // parallelism on the first member of each group holding them),
    // replicated parameters on TP rank 0 only, a tied embedding on its
    // first stage only.
    if (!m)
      continue;
    FlatParams &flat = m->stage->flat();
    const bool dense = m->shards || (m->coords.dp == 0 && m->coords.cp == 0);
    if (!dense && !(m->experts.edpRank == 0 && flat.trainable > flat.experts))
      continue;
    const int64_t from = m->coords.tp == 0 ? 0 : flat.replicated;
    // Frozen parameters (after `trainable`) take no share of the norm.
    auto addSquares = [&](int64_t begin, int64_t end) {
      begin = std::max(begin, from);
      if (m->tiedCopy && begin < m->tiedEnd && m->tiedBegin < end) {
        if (begin < m->tiedBegin)
          dev.sumSquaresInto(flat.grads.data() + begin, m->tiedBegin - begin,
                             sums);
        begin = m->tiedEnd;
      }
      if (begin < end)
        dev.sumSquaresInto(flat.grads.data() + begin, end - begin, sums);
    };
    if (m->shards) {
      for (size_t i = 0; i < m->shards->ranges().size(); ++i)
        addSquares(m->shards->piece(i).begin, m->shards->piece(i).end);
    } else {
      if (dense)
        addSquares(0, flat.experts);
      if (m->experts.edpRank == 0)
        addSquares(flat.experts, flat.trainable);
    }
  }
  double peak = static_cast<double>(dev.peakBytes());
  dev.upload(sums + 2 + rank, &peak, sizeof(peak));
  dev.upload(sums + 3 + topo.worldSize + rank, &stepComputeSeconds,
             sizeof(stepComputeSeconds));
  // The sparse layers' aux loss: each stage's once (its DP x CP x TP
  // members computed the same).
  double aux = 0;
  for (auto &m : modules)
    if (m) {
      const double stage = m->stage->takeAuxLoss();
      if (m->coords.dp == 0 && m->coords.cp == 0 && m->coords.tp == 0)
        aux += stage;
    }
  if (aux != 0)
    dev.upload(sums + 3 + 2 * topo.worldSize, &aux, sizeof(aux));
  // A stop signal on any rank: every rank learns it from this sum, so all
  // end after the same step.
  if (stopRequests && stopRequests->load(std::memory_order_relaxed) > 0) {
    const double one = 1;
    dev.upload(sums + 2 + topo.worldSize, &one, sizeof(one));
  }
  int64_t count = stepScalars.size();
  comm.allReduceSum(world, sums, count);
  std::vector<double> host(static_cast<size_t>(count));
  dev.download(host.data(), sums, count * int64_t(sizeof(double)));
  stepNorm = std::sqrt(host[0]);
  stepLoss = host[1];
  stepAux = host[static_cast<size_t>(3 + 2 * topo.worldSize)];
  stepStop = host[static_cast<size_t>(2 + topo.worldSize)] > 0;
  stepPeakBytes = -1;
  stepPeakRank = -1;
  stepRankPeaks.assign(static_cast<size_t>(topo.worldSize), -1);
  stepRankCompute.assign(host.begin() + 3 + topo.worldSize,
                         host.begin() + 3 + 2 * topo.worldSize);
  for (int64_t r = 0; r < topo.worldSize; ++r)
    stepRankPeaks[static_cast<size_t>(r)] =
        static_cast<int64_t>(host[static_cast<size_t>(2 + r)]);
  for (int64_t r = 0; r < topo.worldSize; ++r)
    if (host[static_cast<size_t>(2 + r)] > double(stepPeakBytes)) {
      stepPeakBytes = static_cast<int64_t>(host[static_cast<size_t>(2 + r)]);
      stepPeakRank = r;
    }
  stepSkipped = false;
  if (!std::isfinite(stepNorm) || !std::isfinite(stepLoss) ||
      !std::isfinite(stepAux)) {
    // Every rank has the same sums (one all-reduce), so all decide alike,
    // before any update: the weights stay those of the step before.
    if (skipNonFinite) {
      for (auto &m : modules)
        if (m)
          dev.fillZero(m->stage->flat().grads.raw(),
                       m->stage->flat().grads.bytes());
      stepSkipped = true;
      return;
    }
    stopOnNonFinite();
  }
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
    auto update = [&](float *values, int64_t begin, int64_t end, float *mom1,
                      float *mom2, bool decay) {
      device::AdamWStep group = adam;
      group.lr = adam.lr * m->config->lrMult;
      group.weightDecay = decay ? train.weightDecay : 0.0;
      dev.adamw(values, flat.grads.data() + begin, mom1, mom2, end - begin,
                group);
    };
    if (m->shards) {
      // Each member updates its pieces, then every member gathers them:
      // the fp32 weights, or under bf16 the working weights rounded from
      // the member's masters (half the bytes).
      for (const OptimizerShards::Run &run : m->shards->runs())
        update(m->shardedMasters() ? m->shardValues.data() + run.at
                                   : flat.values.data() + run.begin,
               run.begin, run.end, m->shardM.data() + run.at,
               m->shardV.data() + run.at, run.decay);
      if (m->shardedMasters())
        gatherWorking(*m);
      else
        gatherPieces(*m, flat.values.data(), 0, flat.trainable);
    } else {
      for (const OptimizerRun &run : m->groups.trainable)
        update(flat.values.data() + run.begin, run.begin, run.end,
               flat.m.data() + run.begin, flat.v.data() + run.begin, run.decay);
    }
    dev.fillZero(flat.grads.raw(), flat.grads.bytes());
    if (!m->shardedMasters())
      m->stage->refreshWorking();
  }
}

/// The first gradient of this rank (in model order) holding a value that
/// is not finite, as "'name' (rank R, element [i, j] = nan)"; "" if none.
std::string RankExecutor::firstNonFiniteGradient() {
  for (auto &m : modules) {
    if (!m)
      continue;
    for (Param &p : m->stage->params()) {
      if (p.frozen)
        continue; // its gradient is scratch nobody reads
      std::vector<float> host = p.grad.toHost();
      for (size_t i = 0; i < host.size(); ++i)
        if (!std::isfinite(host[i])) {
          const int64_t cols = p.colEnd - p.colBegin;
          const int64_t row = p.rowBegin + static_cast<int64_t>(i) / cols;
          const int64_t col = p.colBegin + static_cast<int64_t>(i) % cols;
          return "'" + p.name + "' (rank " + std::to_string(rank) +
                 ", element [" + std::to_string(row) + ", " +
                 std::to_string(col) + "] = " + std::to_string(host[i]) + ")";
        }
    }
  }
  return "";
}

/// Stops every rank with one text: the step, the loss and the norm, and
/// the lowest rank's first non-finite gradient (gathered over the host
/// messages), reported by rank 0.
void RankExecutor::stopOnNonFinite() {
  // The lowest rank's find (it names its rank itself).
  std::string first = comm::agreeOnRankZero(
      comm, firstNonFiniteGradient(), [](const std::vector<std::string> &all) {
        for (const std::string &text : all)
          if (!text.empty())
            return text;
        return std::string();
      });
  char numbers[96];
  std::snprintf(numbers, sizeof numbers,
                "the loss is %g and the gradient "
                "norm %g",
                stepLoss, stepNorm);
  throw NonFiniteStep(
      "step " + std::to_string(stepIndex + 1) + ": " + numbers +
          (first.empty() ? std::string("; every gradient is finite, the loss "
                                       "is not")
                         : "; the first non-finite gradient is " + first) +
          ". The run stops before this step's update (the weights are " +
          (stepIndex == 0 ? std::string("the initial ones")
                          : "those after step " + std::to_string(stepIndex)) +
          "); look for inputs out of range (features, a learning rate too "
          "high), or pass --on-nonfinite skip to skip such steps",
      rank == 0);
}

} // namespace mimo::exec
