//===- TiledAttentionTest.cpp - Both attentions against the reference ----===//
//
// The tile plan of device/AttentionTiles.h, and the two attentions that
// read it, against the float64 reference kernel of Kernels.h, forward and
// backward: the CPU device's BLAS panels (device/cpu/Attention.h) and the
// CUDA device's fused block programs (device/FlashBodies.h) run on the
// host phase by phase as the GPU's barriers order them. Every mask the
// model makes: causal [S, B] lanes (interleaved samples), several query
// blocks and key chunks with a partial diagonal, CP zigzag queries against
// keys gathered out of order, packed THD, dense-mask padding, bidirectional
// encoder samples, queries without any key, keys without queries; and
// bitwise reproducibility. Outputs are poisoned with NaN first.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/AttentionTiles.h"
#include "runtime/device/Device.h"
#include "runtime/device/Devices.h"
#include "runtime/device/FlashBodies.h"
#include "runtime/device/cpu/Attention.h"
#include "runtime/device/cpu/Kernels.h"
#include "tests/unit/AttentionCases.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace k = mimo::kernels;
namespace t = mimo::device::tiles;
namespace flash = mimo::device::flash;
using namespace mimo::testing;

namespace {

/// One attention implementation: forward, then backward, over a plan.
struct Attention {
  std::function<void(const float *, const float *, const float *, float *,
                     float *, const t::PlanView &, int64_t, int64_t)>
      forward;
  std::function<void(const float *, const float *, const float *, const float *,
                     const float *, const float *, float *, float *, float *,
                     const t::PlanView &, int64_t, int64_t)>
      backward;
};

Attention cpuPanels() {
  return {[](const float *q, const float *kk, const float *v, float *o,
             float *lse, const t::PlanView &plan, int64_t heads, int64_t d) {
            k::tiledAttentionForward(q, kk, v, o, lse, plan, heads, d);
          },
          [](const float *q, const float *kk, const float *v, const float *o,
             const float *lse, const float *dout, float *dq, float *dk,
             float *dv, const t::PlanView &plan, int64_t heads, int64_t d) {
            k::tiledAttentionBackward(q, kk, v, o, lse, dout, dq, dk, dv, plan,
                                      heads, d);
          }};
}

Attention fusedBlocks() {
  return {[](const float *q, const float *kk, const float *v, float *o,
             float *lse, const t::PlanView &plan, int64_t heads, int64_t d) {
            flash::forwardOnHost(q, kk, v, o, lse,
                                 flash::shapeOf(plan, heads, d));
          },
          [](const float *q, const float *kk, const float *v, const float *o,
             const float *lse, const float *dout, float *dq, float *dk,
             float *dv, const t::PlanView &plan, int64_t heads, int64_t d) {
            flash::backwardOnHost(q, kk, v, o, lse, dout, dq, dk, dv,
                                  flash::shapeOf(plan, heads, d));
          }};
}

void check(const std::string &what, const Mask &m, int64_t heads, int64_t d,
           const Attention &impl) {
  std::mt19937 rng(static_cast<unsigned>(m.qpos.size() * 31 + heads * 7 + d));
  const int64_t Tq = static_cast<int64_t>(m.qpos.size());
  const int64_t Tk = static_cast<int64_t>(m.kpos.size());
  const size_t nq = static_cast<size_t>(Tq * heads * d);
  const size_t nk = static_cast<size_t>(Tk * heads * d);
  auto q = random(rng, nq), kk = random(rng, nk), v = random(rng, nk);
  auto dout = random(rng, nq);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const t::Plan plan = t::plan(m.qpos.data(), m.qseg.data(), m.kpos.data(),
                               m.kseg.data(), Tq, Tk, m.causal);
  const t::PlanView view = plan.hostView();
  // In float (outputs poisoned).
  std::vector<float> o(nq, nan), lse(static_cast<size_t>(heads * Tq), nan);
  impl.forward(q.data(), kk.data(), v.data(), o.data(), lse.data(), view, heads,
               d);
  std::vector<float> dq(nq, nan), dk(nk, nan), dv(nk, nan);
  impl.backward(q.data(), kk.data(), v.data(), o.data(), lse.data(),
                dout.data(), dq.data(), dk.data(), dv.data(), view, heads, d);
  // The reference, in double, on the same inputs.
  auto qd = toDouble(q), kd = toDouble(kk), vd = toDouble(v);
  auto doutd = toDouble(dout);
  std::vector<double> od(nq), lsed(static_cast<size_t>(heads * Tq));
  k::attentionForward<double>(
      qd.data(), kd.data(), vd.data(), od.data(), lsed.data(), m.qpos.data(),
      m.qseg.data(), m.kpos.data(), m.kseg.data(), Tq, Tk, heads, d, m.causal);
  std::vector<double> dqd(nq), dkd(nk), dvd(nk);
  k::attentionBackward<double>(
      qd.data(), kd.data(), vd.data(), od.data(), lsed.data(), doutd.data(),
      dqd.data(), dkd.data(), dvd.data(), m.qpos.data(), m.qseg.data(),
      m.kpos.data(), m.kseg.data(), Tq, Tk, heads, d, m.causal);
  EXPECT_LE(relativeError(o, od), 2e-6) << what << " o";
  EXPECT_LE(relativeError(lse, lsed), 2e-6) << what << " lse";
  EXPECT_LE(relativeError(dq, dqd), 1e-5) << what << " dq";
  EXPECT_LE(relativeError(dk, dkd), 1e-5) << what << " dk";
  EXPECT_LE(relativeError(dv, dvd), 1e-5) << what << " dv";
  // Run to run: the same bits.
  std::vector<float> o2(nq, nan), lse2(lse.size(), nan), dq2(nq, nan),
      dk2(nk, nan), dv2(nk, nan);
  impl.forward(q.data(), kk.data(), v.data(), o2.data(), lse2.data(), view,
               heads, d);
  impl.backward(q.data(), kk.data(), v.data(), o2.data(), lse2.data(),
                dout.data(), dq2.data(), dk2.data(), dv2.data(), view, heads,
                d);
  EXPECT_EQ(std::memcmp(o.data(), o2.data(), nq * 4), 0) << what;
  EXPECT_EQ(std::memcmp(dq.data(), dq2.data(), nq * 4), 0) << what;
  EXPECT_EQ(std::memcmp(dk.data(), dk2.data(), nk * 4), 0) << what;
  EXPECT_EQ(std::memcmp(dv.data(), dv2.data(), nk * 4), 0) << what;
}

/// Both implementations.
void check(const std::string &what, const Mask &m, int64_t heads, int64_t d) {
  check("cpu panels, " + what, m, heads, d, cpuPanels());
  check("fused blocks, " + what, m, heads, d, fusedBlocks());
}

TEST(AttentionTiles, PlanOrdersBySegmentAndPositionAndCutsCausally) {
  // CP zigzag rank 0 of 2, S 8: queries at 0,1,6,7; keys gathered as rank
  // 0's shard then rank 1's (2..5): out of order.
  std::vector<int64_t> qpos = {0, 1, 6, 7}, kpos = {0, 1, 6, 7, 2, 3, 4, 5};
  std::vector<int64_t> qseg(4, 0), kseg(8, 0);
  t::Plan p =
      t::plan(qpos.data(), qseg.data(), kpos.data(), kseg.data(), 4, 8, true);
  t::PlanView v = p.hostView();
  EXPECT_EQ(std::vector<int64_t>(v.queryOrder, v.queryOrder + 4),
            (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(std::vector<int64_t>(v.keyOrder, v.keyOrder + 8),
            (std::vector<int64_t>{0, 1, 4, 5, 6, 7, 2, 3}));
  // Position 0 sees key 0; position 6 sees positions 0..6.
  EXPECT_EQ(std::vector<int64_t>(v.queryEnd, v.queryEnd + 4),
            (std::vector<int64_t>{1, 2, 7, 8}));
  ASSERT_EQ(p.queryBlockCount, 1);
  EXPECT_EQ(std::vector<int64_t>(v.queryBlocks, v.queryBlocks + 4),
            (std::vector<int64_t>{0, 4, 0, 8}));
  ASSERT_EQ(p.keyBlockCount, 1);
  EXPECT_EQ(std::vector<int64_t>(v.keyBlocks, v.keyBlocks + 4),
            (std::vector<int64_t>{0, 8, 0, 4}));
  EXPECT_EQ(p.pairs(), 1 + 2 + 7 + 8);
  t::Plan dense =
      t::plan(qpos.data(), qseg.data(), kpos.data(), kseg.data(), 4, 8, false);
  EXPECT_EQ(dense.pairs(), 32);
}

TEST(AttentionTiles, SegmentsBecomeBlocksAndUnseenKeysGetEmptyBlocks) {
  // Interleaved samples become one segment each; a key of a segment
  // without queries goes last, in a block that meets no query.
  Mask m = lane(3, 2);
  m.kseg.push_back(7);
  m.kpos.push_back(0);
  t::Plan p = t::plan(m.qpos.data(), m.qseg.data(), m.kpos.data(),
                      m.kseg.data(), 6, 7, true);
  t::PlanView v = p.hostView();
  EXPECT_EQ(std::vector<int64_t>(v.queryOrder, v.queryOrder + 6),
            (std::vector<int64_t>{0, 2, 4, 1, 3, 5}));
  EXPECT_EQ(std::vector<int64_t>(v.keyOrder, v.keyOrder + 7),
            (std::vector<int64_t>{0, 2, 4, 1, 3, 5, 6}));
  EXPECT_EQ(std::vector<int64_t>(v.queryEnd, v.queryEnd + 6),
            (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  ASSERT_EQ(p.queryBlockCount, 2);
  EXPECT_EQ(std::vector<int64_t>(v.queryBlocks + 4, v.queryBlocks + 8),
            (std::vector<int64_t>{3, 3, 3, 6}));
  ASSERT_EQ(p.keyBlockCount, 3);
  EXPECT_EQ(std::vector<int64_t>(v.keyBlocks + 8, v.keyBlocks + 12),
            (std::vector<int64_t>{6, 1, 0, 0}));
  // A long causal sequence: the second key block (keys 64..127) meets the
  // queries from position 64 on.
  Mask one = lane(130, 1);
  t::Plan l = t::plan(one.qpos.data(), one.qseg.data(), one.kpos.data(),
                      one.kseg.data(), 130, 130, true);
  t::PlanView lv = l.hostView();
  ASSERT_EQ(l.keyBlockCount, 3);
  EXPECT_EQ(std::vector<int64_t>(lv.keyBlocks + 4, lv.keyBlocks + 8),
            (std::vector<int64_t>{64, 64, 64, 130}));
  EXPECT_EQ(std::vector<int64_t>(lv.queryBlocks + 4, lv.queryBlocks + 8),
            (std::vector<int64_t>{64, 64, 0, 128}));
}

/// The DenseMask of a Mask's plan.
t::DenseMask denseOf(const Mask &m) {
  return t::plan(m.qpos.data(), m.qseg.data(), m.kpos.data(), m.kseg.data(),
                 static_cast<int64_t>(m.qpos.size()),
                 static_cast<int64_t>(m.kpos.size()), m.causal)
      .dense;
}

TEST(AttentionTiles, DenseMasksAreFoundWhereALibraryCanTakeThem) {
  // [S, B] lanes: B sequences, token = s * B + b.
  t::DenseMask lanes = denseOf(lane(130, 3));
  EXPECT_EQ(lanes.batch, 3);
  EXPECT_EQ(lanes.seqQ, 130);
  EXPECT_EQ(lanes.seqK, 130);
  EXPECT_EQ(lanes.qStrideBatch, 1);
  EXPECT_EQ(lanes.qStrideSeq, 3);
  EXPECT_EQ(lanes.kStrideBatch, 1);
  EXPECT_EQ(lanes.kStrideSeq, 3);
  EXPECT_TRUE(lanes.causal);
  // Samples one after another (mimo-run --calibrate's), bidirectional.
  Mask samples;
  for (int64_t t = 0; t < 12; ++t) {
    samples.qpos.push_back(0);
    samples.qseg.push_back(t / 4);
  }
  samples.kpos = samples.qpos;
  samples.kseg = samples.qseg;
  samples.causal = false;
  t::DenseMask contiguous = denseOf(samples);
  EXPECT_EQ(contiguous.batch, 3);
  EXPECT_EQ(contiguous.qStrideBatch, 4);
  EXPECT_EQ(contiguous.qStrideSeq, 1);
  EXPECT_FALSE(contiguous.causal);
  // Queries over more keys, every key seen (cross attention).
  Mask cross = lane(2, 2);
  cross.kpos = lane(5, 2).kpos;
  cross.kseg = lane(5, 2).kseg;
  cross.causal = false;
  t::DenseMask wide = denseOf(cross);
  EXPECT_EQ(wide.seqQ, 2);
  EXPECT_EQ(wide.seqK, 5);
  // What only mimo's kernels take: CP zigzag halves, packed samples of
  // unequal lengths, padding, samples of unequal lengths, keys no query
  // sees, a causal lane whose keys run past its queries.
  EXPECT_FALSE(denseOf(zigzagRank1()).dense());
  EXPECT_FALSE(denseOf(packedThd()).dense());
  EXPECT_FALSE(denseOf(densePadding()).dense());
  EXPECT_FALSE(denseOf(encoderSamples(4)).dense());
  EXPECT_FALSE(denseOf(lonelyRows()).dense());
  Mask longer = lane(3, 1);
  longer.kpos = {0, 1, 2, 3};
  longer.kseg = {0, 0, 0, 0};
  EXPECT_FALSE(denseOf(longer).dense());
  // Samples in reverse token order: no positive stride.
  Mask reversed = lane(4, 2);
  for (int64_t &s : reversed.qseg)
    s = 1 - s;
  reversed.kseg = reversed.qseg;
  EXPECT_FALSE(denseOf(reversed).dense());
}

TEST(TiledAttention, CausalLanesOfSeveralBlocks) {
  check("one short sample", lane(5, 1), 2, 4);
  check("[S=130, B=3] lane", lane(130, 3), 3, 16);
  check("[S=200, B=1], head dim 64", lane(200, 1), 2, 64);
  check("head dimension 128", lane(100, 2), 2, 128);
  // The other head dimensions with programs of their own (32, 80, 96).
  check("head dimension 32", lane(90, 2), 2, 32);
  check("head dimension 80", lane(75, 1), 2, 80);
  check("head dimension 96", lane(70, 2), 1, 96);
  check("the largest head dimension", lane(70, 1), 1, 256);
}

TEST(TiledAttention, ContextParallelZigzagWithGatheredKeys) {
  check("cp zigzag rank 1", zigzagRank1(), 2, 8);
}

TEST(TiledAttention, PackedSequencesDensePaddingEncodersAndEmptyQueries) {
  check("packed thd", packedThd(), 2, 8);
  check("dense padding", densePadding(), 2, 8);
  check("bidirectional encoder samples", encoderSamples(70), 4, 8);
  check("a query without keys, a key without queries", lonelyRows(), 1, 4);
}

TEST(TiledAttention, ANaNPassesOnAndARowWithoutKeysStaysZero) {
  // Query 1's first head is NaN; query 2 has no key (segment 9).
  const Mask m = lonelyRows();
  const int64_t heads = 2, d = 4, Tq = 3;
  std::mt19937 rng(5);
  auto q = random(rng, Tq * heads * d), kk = random(rng, Tq * heads * d),
       v = random(rng, Tq * heads * d);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t c = 0; c < d; ++c)
    q[static_cast<size_t>(1 * heads * d + c)] = nan;
  const t::Plan plan = t::plan(m.qpos.data(), m.qseg.data(), m.kpos.data(),
                               m.kseg.data(), Tq, Tq, m.causal);
  for (const auto &[name, impl] : {std::pair{"cpu panels", cpuPanels()},
                                   {"fused blocks", fusedBlocks()}}) {
    std::vector<float> o(q.size(), 7.0f), lse(heads * Tq, 7.0f);
    impl.forward(q.data(), kk.data(), v.data(), o.data(), lse.data(),
                 plan.hostView(), heads, d);
    auto at = [&](int64_t token, int64_t head, int64_t c) {
      return o[static_cast<size_t>(token * heads * d + head * d + c)];
    };
    for (int64_t c = 0; c < d; ++c) {
      EXPECT_TRUE(std::isfinite(at(0, 0, c)) && std::isfinite(at(0, 1, c)))
          << name;
      EXPECT_TRUE(std::isnan(at(1, 0, c))) << name << ": NaN passes on";
      EXPECT_TRUE(std::isfinite(at(1, 1, c))) << name << ": other heads not";
      EXPECT_EQ(at(2, 0, c), 0.0f) << name;
      EXPECT_EQ(at(2, 1, c), 0.0f) << name;
    }
    EXPECT_TRUE(std::isnan(lse[0 * Tq + 1])) << name;
    EXPECT_TRUE(std::isfinite(lse[1 * Tq + 1])) << name;
    EXPECT_EQ(lse[0 * Tq + 2], -std::numeric_limits<float>::infinity()) << name;
  }
}

TEST(FusedAttention, ProgramsOfAFixedHeadDimensionGiveTheGenericBits) {
  // withHeadDim picks a program compiled for 32, 64, 80, 96 and 128 (rows
  // in registers on a GPU) and the generic one (D = 0) otherwise; both
  // take the same steps, so their bits agree.
  int picked = -1;
  for (int64_t d : {32, 64, 80, 96, 128, 48}) {
    flash::withHeadDim(d, [&](auto dim) { picked = dim.value; });
    EXPECT_EQ(picked, d == 48 ? 0 : d);
  }
  const Mask m = lane(40, 2);
  for (int64_t d : {32, 80, 96}) {
    const int64_t heads = 2;
    const int64_t T = static_cast<int64_t>(m.qpos.size());
    std::mt19937 rng(static_cast<unsigned>(d));
    const size_t n = static_cast<size_t>(T * heads * d);
    auto q = random(rng, n), kk = random(rng, n), v = random(rng, n);
    const t::Plan plan = t::plan(m.qpos.data(), m.qseg.data(), m.kpos.data(),
                                 m.kseg.data(), T, T, m.causal);
    const flash::Shape s = flash::shapeOf(plan.hostView(), heads, d);
    std::vector<float> o0(n), o1(n), lse0(heads * T), lse1(heads * T);
    flash::runOnHost(
        flash::Forward<0>{
            {s, false}, q.data(), kk.data(), v.data(), o0.data(), lse0.data()},
        heads);
    flash::forwardOnHost(q.data(), kk.data(), v.data(), o1.data(), lse1.data(),
                         s);
    EXPECT_EQ(std::memcmp(o0.data(), o1.data(), n * 4), 0) << d;
    EXPECT_EQ(std::memcmp(lse0.data(), lse1.data(), lse0.size() * 4), 0) << d;
  }
}

TEST(FusedAttention, SharedMemoryIsCheckedForAllThreeProgramsUpFront) {
  // BackwardKey's [64][d + 1] keys and values, [32][d] queries and dO,
  // [32] lse and D: 768 (d + 1) bytes, the most of the three.
  EXPECT_EQ(flash::sharedBytes(256), 768 * 257);
  flash::Forward<0> forward{};
  forward.s = flash::shapeOf(t::PlanView{}, 1, 256);
  EXPECT_LT(forward.sharedFloats() * 4, flash::sharedBytes(256));
  const int64_t a100 = 163 * 1024, h100 = 227 * 1024;
  EXPECT_EQ(flash::attentionProblem(216, a100), "");
  const std::string tooBig = flash::attentionProblem(217, a100);
  EXPECT_NE(tooBig.find("167424 bytes of shared memory"), std::string::npos)
      << tooBig;
  EXPECT_NE(tooBig.find("use more heads"), std::string::npos);
  EXPECT_EQ(flash::attentionProblem(256, h100), "");
  EXPECT_NE(flash::attentionProblem(257, 1 << 30).find("limit of 256"),
            std::string::npos);
  // What mimo-run asks before a CUDA run (this machine's first GPU, if any).
  EXPECT_EQ(mimo::device::cudaAttentionProblem(128), "");
  EXPECT_NE(mimo::device::cudaAttentionProblem(512).find("limit of 256"),
            std::string::npos);
}

} // namespace
