//===- FlashMmaTest.cpp - The tensor-core attention, run on the host -----===//
//
// WarpMma.h's fragment layouts against the PTX ISA's m16n8k16 tables (lane
// by lane), its loads and product against a plain matrix product, and the
// bf16 attention programs of FlashMmaBodies.h, run on the host warp by
// warp as the GPU's barriers order them, against the CPU device's emulation
// of the same rounding (Device::attentionForwardBf16) and against the
// float64 reference, on every mask the model makes. The fp32 programs of
// FlashBodies.h under bf16 (the CUDA device's head dimensions the tensor
// cores do not take) are checked against the emulation too.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/AttentionTiles.h"
#include "runtime/device/FlashBodies.h"
#include "runtime/device/FlashMmaBodies.h"
#include "runtime/device/WarpMma.h"
#include "runtime/device/cpu/Attention.h"
#include "runtime/device/cpu/Kernels.h"
#include "tests/unit/AttentionCases.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace b = mimo::device::bodies;
namespace k = mimo::kernels;
namespace t = mimo::device::tiles;
namespace mma = mimo::device::mma;
namespace flash = mimo::device::flash;
namespace fm = mimo::device::flashmma;
using mma::HostLanes;
using namespace mimo::testing;

namespace {

float bf16(float x) { return b::roundToBf16(x); }
float low(uint32_t r) { return b::widen(static_cast<uint16_t>(r)); }
float high(uint32_t r) { return b::widen(static_cast<uint16_t>(r >> 16)); }

TEST(WarpMma, FragmentLayoutsAreThePtxTables) {
  // PTX ISA, mma.m16n8k16 (.bf16): groupID = lane >> 2, threadID_in_group
  // = lane % 4. Lane 0 and lane 29 (group 7, thread 1).
  EXPECT_EQ(mma::cRow(0, 0), 0);
  EXPECT_EQ(mma::cCol(0, 1), 1);
  EXPECT_EQ(mma::cRow(29, 2), 15);
  EXPECT_EQ(mma::cCol(29, 3), 3);
  // a0,a1: (g, 2t..2t+1); a2,a3: (g+8, ...); a4,a5: (g, 2t+8...);
  // a6,a7: (g+8, 2t+8...).
  EXPECT_EQ(mma::aRow(29, 0), 7);
  EXPECT_EQ(mma::aCol(29, 0, 1), 3);
  EXPECT_EQ(mma::aRow(29, 1), 15);
  EXPECT_EQ(mma::aCol(29, 1, 0), 2);
  EXPECT_EQ(mma::aRow(29, 2), 7);
  EXPECT_EQ(mma::aCol(29, 2, 0), 10);
  EXPECT_EQ(mma::aRow(29, 3), 15);
  EXPECT_EQ(mma::aCol(29, 3, 1), 11);
  // b0,b1: (2t..2t+1, g); b2,b3: (2t+8..2t+9, g).
  EXPECT_EQ(mma::bRow(29, 0, 0), 2);
  EXPECT_EQ(mma::bRow(29, 1, 1), 11);
  EXPECT_EQ(mma::bCol(29), 7);
  // Every element of each operand belongs to exactly one (lane, slot).
  std::vector<int> a(256, 0), bb(128, 0), c(128, 0);
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h)
        ++a[mma::aRow(lane, r) * 16 + mma::aCol(lane, r, h)];
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h)
        ++bb[mma::bRow(lane, r, h) * 8 + mma::bCol(lane)];
    for (int i = 0; i < 4; ++i)
      ++c[mma::cRow(lane, i) * 8 + mma::cCol(lane, i)];
  }
  for (int x : a)
    EXPECT_EQ(x, 1);
  for (int x : bb)
    EXPECT_EQ(x, 1);
  for (int x : c)
    EXPECT_EQ(x, 1);
}

/// The ldmatrix loads against the mma layout tables, every element of
/// every lane: A from a 16x16 tile, two B operands from the transposes of
/// two 8x16 tiles (keys as rows) and from a 16x16 tile (values as rows);
/// then a product against a plain matrix product.
TEST(WarpMma, LoadsAndProductAgreeWithAMatrixProduct) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-2, 2);
  // A [16][16], B [16][16] (two n-tiles of 8) in bf16, C [16][8] in fp32;
  // tiles padded as the programs pad them.
  const int pitch = 24;
  std::vector<uint16_t> At(16 * pitch), Bt(16 * pitch), Bk(16 * pitch);
  float A[16][16], B[16][16], C[16][8];
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      A[r][c] = bf16(dist(rng));
      At[r * pitch + c] = b::bf16Bits(A[r][c]);
      B[r][c] = bf16(dist(rng));
    }
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n) {
      Bt[n * pitch + k] = b::bf16Bits(B[k][n]); // B's transpose, row by row
      Bk[k * pitch + n] = b::bf16Bits(B[k][n]);
    }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c)
      C[r][c] = dist(rng);
  mma::FragA<HostLanes> fa;
  mma::FragB<HostLanes> rows[2], columns[2];
  mma::loadA(fa, At.data(), pitch);
  mma::loadB2<mma::BRows::N>(rows[0], rows[1], Bt.data(), pitch);
  mma::loadB2<mma::BRows::K>(columns[0], columns[1], Bk.data(), pitch);
  auto half = [](uint32_t reg, int h) { return h ? high(reg) : low(reg); };
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h)
        EXPECT_EQ(half(fa.x[lane][r], h),
                  A[mma::aRow(lane, r)][mma::aCol(lane, r, h)])
            << "A lane " << lane << " register " << r;
    for (int tile = 0; tile < 2; ++tile)
      for (int r = 0; r < 2; ++r)
        for (int h = 0; h < 2; ++h) {
          const float want =
              B[mma::bRow(lane, r, h)][8 * tile + mma::bCol(lane)];
          EXPECT_EQ(half(rows[tile].x[lane][r], h), want)
              << "B from rows, tile " << tile << " lane " << lane;
          EXPECT_EQ(half(columns[tile].x[lane][r], h), want)
              << "B from columns, tile " << tile << " lane " << lane;
        }
  }
  mma::Acc<HostLanes> acc;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i)
      acc.x[lane][i] = C[mma::cRow(lane, i)][mma::cCol(lane, i)];
  mma::mma(acc, fa, rows[1]);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int row = mma::cRow(lane, i), col = mma::cCol(lane, i);
      double want = C[row][col];
      for (int kk = 0; kk < 16; ++kk)
        want += static_cast<double>(A[row][kk]) * B[kk][8 + col];
      EXPECT_NEAR(acc.x[lane][i], want, 1e-5) << lane << " " << i;
    }
}

TEST(WarpMma, AccumulatorsBecomeTheNextProductsOperandRounded) {
  // [left | right] (16 x 16 as two 16 x 8 accumulator tiles) as an A
  // operand: the same (row, column) in the same lane, rounded to bf16.
  auto value = [](int row, int col) { return 1.0f + row * 0.1234567f + col; };
  mma::Acc<HostLanes> left, right;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      left.x[lane][i] = value(mma::cRow(lane, i), mma::cCol(lane, i));
      right.x[lane][i] = value(mma::cRow(lane, i), 8 + mma::cCol(lane, i));
    }
  mma::FragA<HostLanes> fa;
  mma::accToA(fa, left, right);
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(low(fa.x[lane][r]),
                bf16(value(mma::aRow(lane, r), mma::aCol(lane, r, 0))));
      EXPECT_EQ(high(fa.x[lane][r]),
                bf16(value(mma::aRow(lane, r), mma::aCol(lane, r, 1))));
    }
}

TEST(WarpMma, QuadReductionsCombineTheFourLanesOfARow) {
  float most[32], sum[32];
  for (int l = 0; l < 32; ++l)
    most[l] = sum[l] = static_cast<float>((l * 7) % 11);
  mma::quadMax(most);
  mma::quadSum(sum);
  for (int l = 0; l < 32; ++l) {
    float m = -1, s = 0;
    for (int j = l & ~3; j < (l & ~3) + 4; ++j) {
      const float x = static_cast<float>((j * 7) % 11);
      m = std::max(m, x);
      s += x;
    }
    EXPECT_EQ(most[l], m) << l;
    EXPECT_EQ(sum[l], s) << l;
  }
  int64_t ends[32];
  for (int l = 0; l < 32; ++l)
    ends[l] = l == 17 ? 900 : l;
  EXPECT_EQ(mma::warpMax(ends), 900);
}

/// Outputs of one attention, forward and backward (poisoned with NaN); o
/// as floats, and as the bf16 bits the backward reads.
struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
  std::vector<uint16_t> oBits;
};

struct Inputs {
  // bf16 values (the layer's q, k, v and dO are bf16 buffers), as floats
  // and as bits.
  std::vector<float> q, k, v, dout;
  std::vector<uint16_t> qBits, kBits, vBits, doutBits;
  t::Plan plan;
  int64_t Tq = 0, Tk = 0, heads = 0, d = 0;
};

std::vector<uint16_t> bitsOf(const std::vector<float> &x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = b::bf16Bits(x[i]);
  return out;
}
std::vector<float> valuesOf(const std::vector<uint16_t> &bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i)
    out[i] = b::widen(bits[i]);
  return out;
}

Inputs inputs(const Mask &m, int64_t heads, int64_t d) {
  Inputs in;
  std::mt19937 rng(static_cast<unsigned>(m.qpos.size() * 13 + heads + d));
  in.Tq = static_cast<int64_t>(m.qpos.size());
  in.Tk = static_cast<int64_t>(m.kpos.size());
  in.heads = heads;
  in.d = d;
  auto rounded = [&](size_t n) {
    std::vector<float> x = random(rng, n);
    for (float &e : x)
      e = bf16(e);
    return x;
  };
  in.q = rounded(static_cast<size_t>(in.Tq * heads * d));
  in.k = rounded(static_cast<size_t>(in.Tk * heads * d));
  in.v = rounded(static_cast<size_t>(in.Tk * heads * d));
  in.dout = rounded(static_cast<size_t>(in.Tq * heads * d));
  in.qBits = bitsOf(in.q);
  in.kBits = bitsOf(in.k);
  in.vBits = bitsOf(in.v);
  in.doutBits = bitsOf(in.dout);
  in.plan = t::plan(m.qpos.data(), m.qseg.data(), m.kpos.data(), m.kseg.data(),
                    in.Tq, in.Tk, m.causal);
  return in;
}

Outputs poisoned(const Inputs &in) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const size_t nq = in.q.size(), nk = in.k.size();
  return {std::vector<float>(nq, nan),
          std::vector<float>(static_cast<size_t>(in.heads * in.Tq), nan),
          std::vector<float>(nq, nan),
          std::vector<float>(nk, nan),
          std::vector<float>(nk, nan),
          std::vector<uint16_t>(nq, 0x7fc0)};
}

/// The CPU device's bf16 emulation (the backward on its own o and lse).
Outputs emulated(const Inputs &in) {
  Outputs out = poisoned(in);
  const t::PlanView view = in.plan.hostView();
  k::tiledAttentionForward(in.qBits.data(), in.kBits.data(), in.vBits.data(),
                           out.oBits.data(), out.lse.data(), view, in.heads,
                           in.d);
  out.o = valuesOf(out.oBits);
  k::tiledAttentionBackward(in.qBits.data(), in.kBits.data(), in.vBits.data(),
                            out.oBits.data(), out.lse.data(),
                            in.doutBits.data(), out.dq.data(), out.dk.data(),
                            out.dv.data(), view, in.heads, in.d);
  return out;
}

/// A program pair run on the host; the backward reads the emulation's o
/// and lse, so that its error is its own.
using Programs = Outputs (*)(const Inputs &, const Outputs &);

/// The tensor-core programs, on the bf16 bits (Device::attentionForwardBf16).
Outputs mmaPrograms(const Inputs &in, const Outputs &reference) {
  Outputs out = poisoned(in);
  const flash::Shape s =
      flash::shapeOf(in.plan.hostView(), in.heads, in.d, true);
  fm::forwardOnHost(in.qBits.data(), in.kBits.data(), in.vBits.data(),
                    out.oBits.data(), out.lse.data(), s);
  out.o = valuesOf(out.oBits);
  fm::backwardOnHost(in.qBits.data(), in.kBits.data(), in.vBits.data(),
                     reference.oBits.data(), reference.lse.data(),
                     in.doutBits.data(), out.dq.data(), out.dk.data(),
                     out.dv.data(), s);
  return out;
}

/// The fp32 programs under bf16, on the values (as the CUDA device runs
/// them, o rounded after).
Outputs fp32Programs(const Inputs &in, const Outputs &reference) {
  Outputs out = poisoned(in);
  const flash::Shape s =
      flash::shapeOf(in.plan.hostView(), in.heads, in.d, true);
  flash::forwardOnHost(in.q.data(), in.k.data(), in.v.data(), out.o.data(),
                       out.lse.data(), s);
  out.oBits = bitsOf(out.o);
  out.o = valuesOf(out.oBits);
  flash::backwardOnHost(in.q.data(), in.k.data(), in.v.data(),
                        reference.o.data(), reference.lse.data(),
                        in.dout.data(), out.dq.data(), out.dk.data(),
                        out.dv.data(), s);
  return out;
}

/// `got` against the emulation and both against the float64 reference.
/// Measured: 1e-7 to 2e-3 against the emulation (a probability whose fp32
/// values differ in the last bit may round to neighbouring bf16s, which
/// shows on rows of few keys), 1e-3 to 3e-3 against float64 (the rounding
/// of P and dS itself); a fragment in the wrong place is off by O(1).
void check(const std::string &what, const Mask &m, int64_t heads, int64_t d,
           Programs programs, double near = 5e-3) {
  SCOPED_TRACE(what + ", d " + std::to_string(d));
  const Inputs in = inputs(m, heads, d);
  const Outputs emu = emulated(in);
  const Outputs got = programs(in, emu);
  EXPECT_LE(relativeError(got.o, toDouble(emu.o)), near) << "o";
  EXPECT_LE(relativeError(got.lse, toDouble(emu.lse)), 1e-5) << "lse";
  EXPECT_LE(relativeError(got.dq, toDouble(emu.dq)), near) << "dq";
  EXPECT_LE(relativeError(got.dk, toDouble(emu.dk)), near) << "dk";
  EXPECT_LE(relativeError(got.dv, toDouble(emu.dv)), near) << "dv";
  // The float64 reference on the same (bf16) inputs.
  std::vector<double> q = toDouble(in.q), kk = toDouble(in.k),
                      v = toDouble(in.v), dout = toDouble(in.dout);
  std::vector<double> o(q.size()), lse(emu.lse.size()), dq(q.size()),
      dk(kk.size()), dv(v.size());
  k::attentionForward<double>(q.data(), kk.data(), v.data(), o.data(),
                              lse.data(), m.qpos.data(), m.qseg.data(),
                              m.kpos.data(), m.kseg.data(), in.Tq, in.Tk, heads,
                              d, m.causal);
  k::attentionBackward<double>(
      q.data(), kk.data(), v.data(), o.data(), lse.data(), dout.data(),
      dq.data(), dk.data(), dv.data(), m.qpos.data(), m.qseg.data(),
      m.kpos.data(), m.kseg.data(), in.Tq, in.Tk, heads, d, m.causal);
  for (const Outputs *x : {&emu, &got}) {
    const char *who = x == &emu ? "emulation" : "programs";
    EXPECT_LE(relativeError(x->o, o), 2e-2) << who << " o vs float64";
    EXPECT_LE(relativeError(x->lse, lse), 1e-5) << who << " lse vs float64";
    EXPECT_LE(relativeError(x->dq, dq), 2e-2) << who << " dq vs float64";
    EXPECT_LE(relativeError(x->dk, dk), 2e-2) << who << " dk vs float64";
    EXPECT_LE(relativeError(x->dv, dv), 2e-2) << who << " dv vs float64";
  }
}

void checkMma(const std::string &what, const Mask &m, int64_t heads,
              int64_t d) {
  check("tensor cores, " + what, m, heads, d, mmaPrograms);
}

TEST(FlashMma, CausalLanesAtEveryHeadDimension) {
  for (int64_t d : {32, 64, 96, 128})
    checkMma("[S=150, B=1]", lane(150, 1), 2, d);
  checkMma("[S=70, B=3] interleaved samples", lane(70, 3), 3, 64);
  checkMma("one short sample", lane(5, 1), 1, 32);
}

TEST(FlashMma, ZigzagPackedDenseEncoderAndLonelyRows) {
  checkMma("cp zigzag rank 1", zigzagRank1(), 2, 32);
  checkMma("packed thd", packedThd(), 2, 64);
  checkMma("dense padding", densePadding(), 2, 32);
  checkMma("bidirectional encoder samples", encoderSamples(90), 2, 96);
  checkMma("a query without keys, a key without queries", lonelyRows(), 1, 32);
}

/// The CPU device's bf16 attention against the rounding written out in
/// double on one causal sample: P (unnormalised) rounded where it
/// multiplies V, P rounded where it multiplies dO, dS rounded before the
/// scale, o rounded as it is written. Without the emulation the CPU's fp32
/// attention misses it by the bf16 rounding itself.
TEST(FlashMma, TheCpuEmulatesTheTensorCoreRounding) {
  const Mask m = lane(6, 1);
  const int64_t T = 6, d = 8;
  const Inputs in = inputs(m, 1, d);
  const t::PlanView view = in.plan.hostView();
  const Outputs emu = emulated(in);
  Outputs plain = poisoned(in);
  k::tiledAttentionForward(in.q.data(), in.k.data(), in.v.data(),
                           plain.o.data(), plain.lse.data(), view, 1, d);
  k::tiledAttentionBackward(in.q.data(), in.k.data(), in.v.data(), emu.o.data(),
                            emu.lse.data(), in.dout.data(), plain.dq.data(),
                            plain.dk.data(), plain.dv.data(), view, 1, d);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto at = [&](const std::vector<float> &x, int64_t row, int64_t c) {
    return static_cast<double>(x[static_cast<size_t>(row * d + c)]);
  };
  auto r = [](double x) { return static_cast<double>(bf16(float(x))); };
  std::vector<double> o(T * d, 0), dq(T * d, 0), dk(T * d, 0), dv(T * d, 0);
  for (int64_t i = 0; i < T; ++i) {
    std::vector<double> s(static_cast<size_t>(i + 1));
    double most = -1e300, sum = 0, D = 0;
    for (int64_t j = 0; j <= i; ++j) {
      for (int64_t c = 0; c < d; ++c)
        s[j] += scale * at(in.q, i, c) * at(in.k, j, c);
      most = std::max(most, s[j]);
    }
    for (int64_t j = 0; j <= i; ++j)
      sum += std::exp(s[j] - most);
    for (int64_t j = 0; j <= i; ++j)
      for (int64_t c = 0; c < d; ++c)
        o[i * d + c] += r(std::exp(s[j] - most)) * at(in.v, j, c) / sum;
    for (int64_t c = 0; c < d; ++c)
      D += r(at(in.dout, i, c)) * at(emu.o, i, c);
    const double lse = at(emu.lse, 0, i);
    for (int64_t j = 0; j <= i; ++j) {
      const double p = std::exp(s[j] - lse);
      double dp = 0;
      for (int64_t c = 0; c < d; ++c)
        dp += r(at(in.dout, i, c)) * at(in.v, j, c);
      const double ds = r(p * (dp - D));
      for (int64_t c = 0; c < d; ++c) {
        dq[i * d + c] += scale * ds * at(in.k, j, c);
        dk[j * d + c] += scale * ds * at(in.q, i, c);
        dv[j * d + c] += r(p) * r(at(in.dout, i, c));
      }
    }
  }
  // o is written rounded.
  std::vector<double> oWritten = o;
  for (double &x : oWritten)
    x = r(x);
  EXPECT_LE(relativeError(emu.o, oWritten), 1e-5);
  EXPECT_LE(relativeError(emu.dq, dq), 1e-5);
  EXPECT_LE(relativeError(emu.dk, dk), 1e-5);
  EXPECT_LE(relativeError(emu.dv, dv), 1e-5);
  EXPECT_GT(relativeError(plain.o, o), 1e-4);
  EXPECT_GT(relativeError(plain.dq, dq), 1e-4);
  EXPECT_GT(relativeError(plain.dv, dv), 1e-4);
}

TEST(FlashMma, TheFp32ProgramsRoundTheSameWayAtOtherHeadDimensions) {
  check("fp32 programs under bf16, [S=100, B=2]", lane(100, 2), 2, 8,
        fp32Programs);
  check("fp32 programs under bf16, head dim 48", lane(90, 1), 1, 48,
        fp32Programs);
}

TEST(FlashMma, ANaNPassesOnAndARowWithoutKeysStaysZero) {
  const Mask m = lonelyRows();
  const int64_t heads = 2, d = 32, Tq = 3;
  Inputs in = inputs(m, heads, d);
  for (int64_t c = 0; c < d; ++c)
    in.qBits[static_cast<size_t>(1 * heads * d + c)] =
        b::bf16Bits(std::numeric_limits<float>::quiet_NaN());
  Outputs out = poisoned(in);
  fm::forwardOnHost(in.qBits.data(), in.kBits.data(), in.vBits.data(),
                    out.oBits.data(), out.lse.data(),
                    flash::shapeOf(in.plan.hostView(), heads, d, true));
  out.o = valuesOf(out.oBits);
  auto at = [&](int64_t token, int64_t head, int64_t c) {
    return out.o[static_cast<size_t>(token * heads * d + head * d + c)];
  };
  for (int64_t c = 0; c < d; ++c) {
    EXPECT_TRUE(std::isfinite(at(0, 0, c)) && std::isfinite(at(0, 1, c)));
    EXPECT_TRUE(std::isnan(at(1, 0, c))) << "NaN passes on";
    EXPECT_TRUE(std::isfinite(at(1, 1, c))) << "other heads not";
    EXPECT_EQ(at(2, 0, c), 0.0f);
    EXPECT_EQ(at(2, 1, c), 0.0f);
  }
  EXPECT_TRUE(std::isnan(out.lse[0 * Tq + 1]));
  EXPECT_TRUE(std::isfinite(out.lse[1 * Tq + 1]));
  EXPECT_EQ(out.lse[0 * Tq + 2], -std::numeric_limits<float>::infinity());
}

TEST(FlashMma, SharedMemoryFitsEveryGpuItRunsOn) {
  // sm_80's opt-in limit is 163 KiB; the hungriest program at d 128 is the
  // dq program's 2 x 64 query rows and 2 x 64 key rows of 136 bf16.
  EXPECT_EQ(fm::sharedBytes(128), 4 * 64 * 136 * 2);
  EXPECT_LE(fm::sharedBytes(128), 163 * 1024);
  EXPECT_TRUE(fm::supportsHeadDim(64));
  EXPECT_FALSE(fm::supportsHeadDim(80));
  EXPECT_FALSE(fm::supportsHeadDim(256));
}

} // namespace
