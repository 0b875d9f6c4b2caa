//===- RingAttention.cpp - Context parallelism's ring ---------------------===//

#include "runtime/model/RingAttention.h"

#include <array>
#include <stdexcept>

namespace mimo::exec {

namespace {

using namespace ops;
using Request = std::shared_ptr<comm::Request>;

/// One step's transfer: `send` to the next rank of the ring, `recv` from
/// the previous (the same sizes), posted on the ring's channel or run at
/// once (then null comes back).
Request transfer(const Ring &ring, const std::vector<const Tensor *> &send,
                 const std::vector<Tensor *> &recv, const char *what) {
  const int64_t n = static_cast<int64_t>(ring.group.size());
  const int64_t next = ring.group[static_cast<size_t>((ring.own + 1) % n)];
  const int64_t prev = ring.group[static_cast<size_t>((ring.own + n - 1) % n)];
  std::vector<comm::P2POp> ops;
  for (const Tensor *t : send)
    ops.push_back(
        {true, next, ring.tag, const_cast<void *>(t->raw()), t->bytes()});
  for (Tensor *t : recv)
    ops.push_back({false, prev, ring.tag, t->raw(), t->bytes()});
  if (ring.channel)
    return ring.channel->exchange(std::move(ops), ring.dev->record(), what);
  ring.comm->exchange(ops);
  return nullptr;
}

/// A transfer in flight on the ring's channel (none when it ran at once).
/// If an exception leaves the ring while one is in flight (a kernel that
/// refuses its shape, a failed peer), the destructor waits for it before
/// the unwinding frees the buffers it reads and writes; its own failure is
/// dropped there, the exception in flight being the one reported.
class InFlight {
public:
  explicit InFlight(Device &dev) : dev(&dev) {}
  InFlight(Device &dev, Request posted)
      : dev(&dev), request(std::move(posted)) {}
  InFlight(const InFlight &) = delete;
  InFlight &operator=(const InFlight &) = delete;
  ~InFlight() {
    if (request)
      try {
        request->wait(*dev);
      } catch (...) {
      }
  }
  /// Takes the next transfer; the last must be finished.
  void post(Request posted) {
    if (request)
      throw std::logic_error("ring attention: a transfer posted over another");
    request = std::move(posted);
  }
  /// Waits for the transfer (rethrowing its failure) and orders this
  /// rank's later work after it.
  void finish() {
    if (Request done = std::move(request))
      done->wait(*dev);
  }

private:
  Device *dev;
  Request request;
};

/// The keys and values in hand, passed on to the next rank while the
/// previous rank's arrive in one of two buffers (two remote blocks at most).
class BlockInHand {
public:
  BlockInHand(const Ring &ring, const Tensor &k, const Tensor &v)
      : ring(ring), n(static_cast<int64_t>(ring.group.size())), k(&k), v(&v) {
    for (size_t b = 0; b < 2 && b + 1 < static_cast<size_t>(n); ++b) {
      bufK[b] = Tensor::empty(k.size(), k.dtype());
      bufV[b] = Tensor::empty(v.size(), v.dtype());
    }
  }
  /// Step s: the block in hand goes on and the next arrives (none after
  /// the last step).
  Request pass(int64_t s, const char *what) {
    if (s + 1 >= n)
      return nullptr;
    nextK = &bufK[static_cast<size_t>(s % 2)];
    nextV = &bufV[static_cast<size_t>(s % 2)];
    return transfer(ring, {k, v}, {nextK, nextV}, what);
  }
  /// Once the transfer is done: the block that arrived is in hand.
  void advance() {
    k = nextK;
    v = nextV;
  }
  /// The tile plan of the block in hand at step s (it came from the rank
  /// s before this one).
  device::tiles::PlanView plan(const std::vector<AttentionPlan> &blocks,
                               int64_t s) const {
    return blocks[static_cast<size_t>((ring.own - s + n) % n)].view();
  }
  /// Its keys and values, grouped.
  const Tensor &keys() const { return *k; }
  const Tensor &values() const { return *v; }

private:
  const Ring &ring;
  int64_t n;
  const Tensor *k, *v;
  Tensor *nextK = nullptr, *nextV = nullptr;
  std::array<Tensor, 2> bufK, bufV;
};

/// The attention call of q over one block (K, V grouped).
device::AttentionArgs blockArgs(const Ring &ring,
                                const device::tiles::PlanView &plan,
                                const Tensor &q, const Tensor &K,
                                const Tensor &V) {
  device::AttentionArgs a;
  a.dtype = q.dtype();
  a.q = q.raw();
  a.k = K.raw();
  a.v = V.raw();
  a.plan = plan;
  a.heads = ring.heads;
  a.kvHeads = ring.kvHeads;
  a.headDim = ring.headDim;
  return a;
}

/// The attention of q over one block, its output in fp32.
void attendBlock(const Ring &ring, const device::tiles::PlanView &plan,
                 const Tensor &q, const Tensor &K, const Tensor &V, int64_t Tq,
                 Tensor &out, Tensor &lse) {
  Device &dev = *ring.dev;
  const int64_t width = ring.heads * ring.headDim;
  const device::AttentionArgs a = blockArgs(ring, plan, q, K, V);
  if (!ring.bf16) {
    out = empty(Tq * width);
    dev.attentionForward(a, out.data(), lse.data());
    return;
  }
  Tensor bits = Tensor::empty(Tq * width, device::DType::BF16);
  dev.attentionForward(a, bits.raw(), lse.data());
  out = unpackBf16(dev, bits);
}

} // namespace

void ringAttentionForward(const Ring &ring,
                          const std::vector<AttentionPlan> &blocks,
                          const Tensor &q, const Tensor &k, const Tensor &v,
                          int64_t Tq, Tensor &o, Tensor &lse) {
  Device &dev = *ring.dev;
  const int64_t n = static_cast<int64_t>(ring.group.size());
  if (static_cast<int64_t>(blocks.size()) != n)
    throw std::logic_error("ring attention: " + std::to_string(blocks.size()) +
                           " block plans for a ring of " + std::to_string(n));
  lse = empty(ring.heads * Tq);
  if (Tq == 0) { // every rank of the ring alike: equal shards
    o = Tensor::empty(0, q.dtype());
    return;
  }
  BlockInHand hand(ring, k, v);
  Tensor acc, part, partLse = empty(ring.heads * Tq);
  for (int64_t s = 0; s < n; ++s) {
    InFlight request(dev, hand.pass(s, "ring attention: keys and values"));
    const Tensor &K = hand.keys(), &V = hand.values();
    const device::tiles::PlanView plan = hand.plan(blocks, s);
    if (s == 0) {
      attendBlock(ring, plan, q, K, V, Tq, acc, lse);
    } else {
      attendBlock(ring, plan, q, K, V, Tq, part, partLse);
      dev.attentionMerge(acc.data(), lse.data(), part.data(), partLse.data(),
                         Tq, ring.heads, ring.headDim);
    }
    request.finish();
    hand.advance();
  }
  o = ring.bf16 ? packBf16(dev, acc) : std::move(acc);
}

void ringAttentionBackward(const Ring &ring,
                           const std::vector<AttentionPlan> &blocks,
                           const Tensor &q, const Tensor &k, const Tensor &v,
                           const Tensor &o, const Tensor &lse,
                           const Tensor &dout, int64_t Tq, Tensor &dq,
                           Tensor &dk, Tensor &dv) {
  Device &dev = *ring.dev;
  const int64_t n = static_cast<int64_t>(ring.group.size());
  const int64_t width = ring.heads * ring.headDim;
  dq = zeros(Tq * width);
  if (Tq == 0) {
    dk = zeros(k.size());
    dv = zeros(v.size());
    return;
  }
  BlockInHand hand(ring, k, v);
  std::array<Tensor, 2> sumK, sumV;
  sumK[1] = empty(k.size());
  sumV[1] = empty(v.size());
  // Each block's dk and dv travel with it, summed by every rank it meets,
  // and come home after the last step: the sums in hand and those
  // arriving, in turn.
  sumK[0] = zeros(k.size());
  sumV[0] = zeros(v.size());
  Tensor *curSumK = &sumK[0], *curSumV = &sumV[0];
  InFlight sums(dev); // the sums of the block in hand, arriving
  Tensor dqPart = empty(Tq * width);
  for (int64_t s = 0; s < n; ++s) {
    InFlight keys(dev,
                  hand.pass(s, "ring attention backward: keys and values"));
    const Tensor &K = hand.keys(), &V = hand.values();
    const device::tiles::PlanView plan = hand.plan(blocks, s);
    Tensor groupedK = empty(k.size()), groupedV = empty(v.size());
    dev.attentionBackward(blockArgs(ring, plan, q, K, V), o.raw(), lse.data(),
                          dout.raw(), dqPart.data(), groupedK.data(),
                          groupedV.data());
    dev.add(device::DType::F32, dq.data(), dq.data(), dqPart.data(),
            Tq * width);
    sums.finish();
    dev.add(device::DType::F32, curSumK->data(), curSumK->data(),
            groupedK.data(), k.size());
    dev.add(device::DType::F32, curSumV->data(), curSumV->data(),
            groupedV.data(), v.size());
    Tensor *nextSumK = &sumK[static_cast<size_t>((s + 1) % 2)];
    Tensor *nextSumV = &sumV[static_cast<size_t>((s + 1) % 2)];
    sums.post(transfer(ring, {curSumK, curSumV}, {nextSumK, nextSumV},
                       "ring attention backward: key and value gradients"));
    keys.finish();
    hand.advance();
    curSumK = nextSumK;
    curSumV = nextSumV;
  }
  sums.finish();
  dk = std::move(*curSumK);
  dv = std::move(*curSumV);
}

} // namespace mimo::exec
