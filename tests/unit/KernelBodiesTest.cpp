//===- KernelBodiesTest.cpp - The CUDA kernels' bodies, run on the CPU ----===//
//
// Every per-index body of device/KernelBodies.h (what the CUDA device
// launches, one index per GPU thread) run here in a plain loop over its
// indices, against the reference kernel of device/cpu/Kernels.h on fresh
// random inputs, in float and double, with odd shapes. Outputs are
// poisoned with NaN first, so an index that writes nothing fails. This is
// the GPU kernels' math and index arithmetic checked on machines without a
// GPU; tests/gpu/CudaOpsCheck.cpp checks the launches themselves.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/KernelBodies.h"
#include "runtime/device/Device.h"
#include "runtime/device/RowBodies.h"
#include "runtime/device/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace k = mimo::kernels;
namespace b = mimo::device::bodies;
namespace rw = mimo::device::rowwise;
using mimo::device::Gelu;

namespace {

template <typename F> void runAll(const F &body) {
  for (int64_t i = 0; i < body.count(); ++i)
    body(i);
}

template <typename T> std::vector<T> poisoned(size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

template <typename T>
std::vector<T> random(std::mt19937 &rng, size_t n, double lo = -1,
                      double hi = 1) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T &x : v)
    x = static_cast<T>(dist(rng));
  return v;
}

/// max |a - b| <= tol * max(max |b|, 1e-30); NaN fails.
template <typename T>
void expectClose(const std::string &what, const std::vector<T> &a,
                 const std::vector<T> &ref, double tol) {
  ASSERT_EQ(a.size(), ref.size()) << what;
  double scale = 1e-30;
  for (T x : ref)
    scale = std::max(scale, std::abs(static_cast<double>(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    double d =
        std::abs(static_cast<double>(a[i]) - static_cast<double>(ref[i]));
    ASSERT_TRUE(d <= tol * scale ||
                (std::isinf(static_cast<double>(a[i])) && a[i] == ref[i]))
        << what << "[" << i << "]: " << a[i] << " vs " << ref[i];
  }
}

template <typename T> double tolerance() {
  return std::is_same<T, float>::value ? 1e-6 : 1e-12;
}

template <typename T> class KernelBodies : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KernelBodies, Types);

TYPED_TEST(KernelBodies, ElementwiseAndRows) {
  using T = TypeParam;
  std::mt19937 rng(1);
  const int64_t rows = 7, cols = 13, n = rows * cols;
  auto x = random<T>(rng, n), y = random<T>(rng, n),
       bias = random<T>(rng, cols);
  // add, scale, axpy
  auto out = poisoned<T>(n);
  runAll(b::Add<T>{out.data(), x.data(), y.data(), n});
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(out[i], x[i] + y[i]);
  auto z = y;
  runAll(b::Axpy<T>{T(0.5), x.data(), z.data(), n});
  auto zr = y;
  k::axpy<T>(n, T(0.5), x.data(), zr.data());
  EXPECT_EQ(z, zr);
  runAll(b::Scale<T>{z.data(), T(3), n});
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(z[i], zr[i] * T(3));
  // bias forward and backward (accumulates)
  auto withBias = x;
  runAll(b::AddBias<T>{withBias.data(), bias.data(), rows, cols});
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(withBias[i], x[i] + bias[i % cols]);
  auto db = bias, dbRef = bias;
  b::columnSumsOnHost(b::BiasTerms<T>{x.data(), cols}, rows, cols, db.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      dbRef[c] += x[r * cols + c];
  expectClose("bias backward", db, dbRef, tolerance<T>());
  // copy rows: a permutation of some rows
  std::vector<int64_t> to = {4, 0, 6}, from = {1, 5, 2};
  auto dst = y;
  runAll(b::CopyRows<T>{dst.data(), to.data(), x.data(), from.data(), 3, cols});
  for (size_t r = 0; r < to.size(); ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(dst[to[r] * cols + c], x[from[r] * cols + c]);
  ASSERT_EQ(dst[1 * cols], y[1 * cols]); // untouched row
}

/// A sparse layer's dispatch and combine (model/MoeMlp.h): rows gathered
/// (weighted), added back weighted into distinct rows, and the combine
/// weights' gradients as row dots.
TEST(KernelBodiesMoe, GatherScatterAndRowDots) {
  std::mt19937 rng(3);
  const int64_t cols = 5;
  auto x = random<float>(rng, 6 * cols), y = random<float>(rng, 6 * cols);
  std::vector<int64_t> rows = {4, 0, 5};
  std::vector<float> w = {0.5f, -2.0f, 0.25f};
  auto gathered = poisoned<float>(3 * cols);
  runAll(b::GatherRows<float>{gathered.data(), x.data(), rows.data(), w.data(),
                              3, cols});
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(gathered[r * cols + c], w[r] * x[rows[r] * cols + c]);
  std::vector<uint16_t> bits(6 * cols), gotBits(3 * cols, 0xffff);
  for (size_t i = 0; i < bits.size(); ++i)
    bits[i] = static_cast<uint16_t>(i * 37);
  runAll(b::GatherRows<uint16_t>{gotBits.data(), bits.data(), rows.data(),
                                 nullptr, 3, cols});
  for (int64_t r = 0; r < 3; ++r)
    ASSERT_EQ(gotBits[r * cols + 2], bits[rows[r] * cols + 2]);
  auto sum = y;
  runAll(b::ScatterAddRows{sum.data(), rows.data(), gathered.data(), w.data(),
                           3, cols});
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(sum[rows[r] * cols + c],
                y[rows[r] * cols + c] + w[r] * gathered[r * cols + c]);
  ASSERT_EQ(sum[1 * cols], y[1 * cols]); // a row no one adds to
  std::vector<float> dots(3);
  runAll(b::RowDots{y.data(), rows.data(), x.data(), dots.data(), 3, cols});
  for (int64_t r = 0; r < 3; ++r) {
    double want = 0;
    for (int64_t c = 0; c < cols; ++c)
      want += double(y[rows[r] * cols + c]) * double(x[r * cols + c]);
    ASSERT_FLOAT_EQ(dots[r], static_cast<float>(want));
  }
}

/// bfloat16 keeps float's exponent and the top 7 mantissa bits: rounding
/// is to the nearest representable value, ties to the even one.
TEST(KernelBodiesBf16, RoundsToNearestEven) {
  auto bits = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  };
  auto fromBits = [](uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
  };
  EXPECT_EQ(b::roundToBf16(1.0f), 1.0f);
  EXPECT_EQ(b::roundToBf16(-2.5f), -2.5f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties to the even (1).
  EXPECT_EQ(b::roundToBf16(1.0f + 0x1.0p-8f), 1.0f);
  // 1 + 3 * 2^-8: halfway between 1 + 2^-7 and 1 + 2^-6, even is 1 + 2^-6.
  EXPECT_EQ(b::roundToBf16(1.0f + 3 * 0x1.0p-8f), 1.0f + 0x1.0p-6f);
  // Just above halfway rounds up, just below rounds down.
  EXPECT_EQ(b::roundToBf16(fromBits(0x3f808001u)), fromBits(0x3f810000u));
  EXPECT_EQ(b::roundToBf16(fromBits(0x3f807fffu)), 1.0f);
  // The low 16 bits are always zero; infinities and NaNs survive; the
  // largest float rounds up to infinity, as a bf16 store would.
  EXPECT_EQ(bits(b::roundToBf16(3.14159f)) & 0xffffu, 0u);
  EXPECT_EQ(b::roundToBf16(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(b::roundToBf16(std::nanf(""))));
  EXPECT_TRUE(std::isnan(b::roundToBf16(-std::nanf(""))));
  EXPECT_EQ(b::roundToBf16(3.4028235e38f), INFINITY);
  std::vector<float> x = {1.0f + 0x1.0p-8f, 3.14159f, -0.1f};
  runAll(b::RoundBf16{x.data(), 3});
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], b::roundToBf16(3.14159f));
  EXPECT_NEAR(x[2], -0.1f, 0.1f * 0x1.0p-8f);
}

/// The bf16 operands of gemmBf16: the upper half of the rounded float.
TEST(KernelBodiesBf16, BitsOfTheRoundedValue) {
  std::vector<float> x = {
      1.0f + 0x1.0p-8f, 1.0f + 3 * 0x1.0p-8f, -2.5f, 3.14159f, 0.0f, -0.0f,
      INFINITY};
  std::vector<uint16_t> out(x.size());
  runAll(b::ToBf16Bits{x.data(), out.data(), static_cast<int64_t>(x.size())});
  for (size_t i = 0; i < x.size(); ++i) {
    float r = b::roundToBf16(x[i]);
    uint32_t bits;
    std::memcpy(&bits, &r, 4);
    EXPECT_EQ(out[i], static_cast<uint16_t>(bits >> 16)) << x[i];
  }
  EXPECT_EQ(out[0], 0x3f80u); // 1.0
  EXPECT_EQ(out[2], 0xc020u); // -2.5
}

/// Activations kept as bf16: packing then unpacking gives each value
/// rounded to bf16, bit for bit (NaN stays NaN, infinities and signed
/// zeros stay), on the bodies and through the CPU device.
TEST(KernelBodiesBf16, PackAndUnpackRoundTripTheRoundedValue) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  std::vector<float> x = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f};
  for (int i = 0; i < 200; ++i)
    x.push_back(dist(rng));
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> bits(x.size());
  std::vector<float> back(x.size()), viaDevice(x.size());
  runAll(b::ToBf16Bits{x.data(), bits.data(), n});
  runAll(b::FromBf16Bits{bits.data(), back.data(), n});
  std::unique_ptr<mimo::device::Device> cpu = mimo::device::makeCpuDevice();
  std::vector<uint16_t> deviceBits(x.size());
  cpu->convert(mimo::device::DType::F32, x.data(), mimo::device::DType::BF16,
               deviceBits.data(), n);
  cpu->convert(mimo::device::DType::BF16, deviceBits.data(),
               mimo::device::DType::F32, viaDevice.data(), n);
  for (size_t i = 0; i < x.size(); ++i) {
    float r = b::roundToBf16(x[i]);
    if (std::isnan(r)) {
      EXPECT_TRUE(std::isnan(back[i]) && std::isnan(viaDevice[i]));
      continue;
    }
    EXPECT_EQ(std::memcmp(&back[i], &r, 4), 0) << x[i];
    EXPECT_EQ(std::memcmp(&viaDevice[i], &r, 4), 0) << x[i];
  }
}

/// Precision "bf16" GEMMs: the operands rounded to bf16, fp32 sums. On
/// the CPU that is the fp32 GEMM of rounded copies (bf16 products are
/// exact in fp32); on bf16-representable operands it is the fp32 GEMM.
TEST(KernelBodiesBf16, GemmOfRoundedOperands) {
  std::unique_ptr<mimo::device::Device> cpu = mimo::device::makeCpuDevice();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t M = 5, N = 7, K = 9;
  std::vector<float> A(M * K), B(K * N), C(M * N, 0.5f);
  for (float &v : A)
    v = dist(rng);
  for (float &v : B)
    v = dist(rng);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<float> ra = A, rb = B;
      cpu->roundTo(mimo::device::DType::BF16, ra.data(), M * K);
      cpu->roundTo(mimo::device::DType::BF16, rb.data(), K * N);
      std::vector<float> got = C, want = C, plain = C;
      cpu->gemm(mimo::device::DType::BF16, ta, tb, M, N, K, 1.5f, A.data(),
                B.data(), 0.25f, mimo::device::DType::F32, got.data());
      cpu->gemm(mimo::device::DType::F32, ta, tb, M, N, K, 1.5f, ra.data(),
                rb.data(), 0.25f, mimo::device::DType::F32, want.data());
      cpu->gemm(mimo::device::DType::F32, ta, tb, M, N, K, 1.5f, A.data(),
                B.data(), 0.25f, mimo::device::DType::F32, plain.data());
      EXPECT_EQ(got, want);
      EXPECT_NE(got, plain); // the rounding shows on random operands
      std::vector<float> again = C;
      cpu->gemm(mimo::device::DType::BF16, ta, tb, M, N, K, 1.5f, ra.data(),
                rb.data(), 0.25f, mimo::device::DType::F32, again.data());
      EXPECT_EQ(again, want); // bf16 operands: nothing to round
      // Operands as bf16 bits (precision "bf16"'s working weights).
      std::vector<uint16_t> bitsB(static_cast<size_t>(K * N));
      cpu->convert(mimo::device::DType::F32, B.data(),
                   mimo::device::DType::BF16, bitsB.data(), K * N);
      std::vector<float> packed = C;
      cpu->gemm(mimo::device::DType::BF16, ta, tb, M, N, K, 1.5f, A.data(),
                bitsB.data(), 0.25f, mimo::device::DType::F32, packed.data());
      EXPECT_EQ(packed, want);
      // bf16 output: the bits of the fp32 product (beta 0), rounded.
      std::vector<float> product(static_cast<size_t>(M * N));
      cpu->gemm(mimo::device::DType::BF16, ta, tb, M, N, K, 1.5f, A.data(),
                bitsB.data(), 0.0f, mimo::device::DType::F32, product.data());
      std::vector<uint16_t> out(static_cast<size_t>(M * N), 0x7fc0),
          wantBits(static_cast<size_t>(M * N));
      cpu->convert(mimo::device::DType::F32, product.data(),
                   mimo::device::DType::BF16, wantBits.data(), M * N);
      cpu->gemm(mimo::device::DType::BF16, ta, tb, M, N, K, 1.5f, A.data(),
                bitsB.data(), 0.0f, mimo::device::DType::BF16, out.data());
      EXPECT_EQ(out, wantBits);
    }
  // No K: the rounded zero sums.
  std::vector<uint16_t> empty(6, 0x7fc0);
  cpu->gemm(mimo::device::DType::BF16, false, false, 2, 3, 0, 1.0f, A.data(),
            B.data(), 0.0f, mimo::device::DType::BF16, empty.data());
  EXPECT_EQ(empty, std::vector<uint16_t>(6, 0));
}

/// An embedding lookup in a bf16 table gives the rounded table's rows.
TEST(KernelBodiesBf16, EmbeddingOfABf16Table) {
  std::unique_ptr<mimo::device::Device> cpu = mimo::device::makeCpuDevice();
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t vocab = 6, hidden = 5;
  std::vector<float> table(vocab * hidden);
  for (float &v : table)
    v = dist(rng);
  std::vector<uint16_t> bits(table.size());
  cpu->convert(mimo::device::DType::F32, table.data(),
               mimo::device::DType::BF16, bits.data(), vocab * hidden);
  std::vector<float> rounded = table;
  cpu->roundTo(mimo::device::DType::BF16, rounded.data(), vocab * hidden);
  // A TP shard of ids [2, 8): ids outside it give zero rows.
  std::vector<int64_t> ids = {3, 0, 7, 2, 9};
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<float> got(n * hidden, NAN), want(n * hidden, NAN);
  cpu->embeddingForward(ids.data(), n, mimo::device::dtypeOf(bits.data()),
                        bits.data(), 2, 8, hidden, got.data());
  cpu->embeddingForward(ids.data(), n, mimo::device::dtypeOf(rounded.data()),
                        rounded.data(), 2, 8, hidden, want.data());
  EXPECT_EQ(got, want);
}

/// The norms and activations that feed a GEMM under bf16 write its bits
/// themselves: the bits of their fp32 output packed, on the bodies (what
/// the GPU runs) and on the CPU device.
TEST(KernelBodiesBf16, NormsAndActivationsWriteTheBitsOfTheirFp32Output) {
  std::unique_ptr<mimo::device::Device> cpu = mimo::device::makeCpuDevice();
  std::mt19937 rng(11);
  const int64_t rows = 4, cols = 23, n = rows * cols;
  auto x = random<float>(rng, n, -3, 3), u = random<float>(rng, n);
  auto w = random<float>(rng, cols, 0.5, 1.5), bias = random<float>(rng, cols);
  const float eps = 1e-5f;
  auto pack = [&](const std::vector<float> &v) {
    std::vector<uint16_t> out(v.size());
    runAll(b::ToBf16Bits{v.data(), out.data(), static_cast<int64_t>(v.size())});
    return out;
  };
  // Bodies: Out = uint16_t against Out = float, then packed.
  std::vector<float> y(n), stat(rows), stat2(rows);
  std::vector<uint16_t> bits(n);
  std::vector<float> rstdBits(rows), meanBits(rows);
  rw::runOnHost(rw::RmsnormForward<float>{x.data(), w.data(), y.data(),
                                          stat.data(), rows, cols, eps});
  rw::runOnHost(rw::RmsnormForward<float, uint16_t>{
      x.data(), w.data(), bits.data(), rstdBits.data(), rows, cols, eps});
  EXPECT_EQ(bits, pack(y)) << "rmsnorm";
  EXPECT_EQ(rstdBits, stat) << "rmsnorm's rstd stays fp32";
  rw::runOnHost(rw::LayernormForward<float>{x.data(), w.data(), bias.data(),
                                            y.data(), stat2.data(), stat.data(),
                                            rows, cols, eps});
  rw::runOnHost(rw::LayernormForward<float, uint16_t>{
      x.data(), w.data(), bias.data(), bits.data(), meanBits.data(),
      rstdBits.data(), rows, cols, eps});
  EXPECT_EQ(bits, pack(y)) << "layernorm";
  EXPECT_EQ(meanBits, stat2);
  runAll(b::GeluForward<float>{x.data(), y.data(), n});
  runAll(b::GeluForward<float, uint16_t>{x.data(), bits.data(), n});
  EXPECT_EQ(bits, pack(y)) << "gelu";
  runAll(b::SwigluForward<float>{x.data(), u.data(), y.data(), n});
  runAll(b::SwigluForward<float, uint16_t>{x.data(), u.data(), bits.data(), n});
  EXPECT_EQ(bits, pack(y)) << "swiglu";
  // bf16 inputs (gemmBf16Out's outputs): the bits of fp32 inputs holding
  // the same values.
  std::vector<uint16_t> xBits = pack(x), uBits = pack(u), fromBits(n);
  std::vector<float> xr(n), ur(n);
  runAll(b::FromBf16Bits{xBits.data(), xr.data(), n});
  runAll(b::FromBf16Bits{uBits.data(), ur.data(), n});
  runAll(b::GeluForward<float, uint16_t>{xr.data(), bits.data(), n});
  runAll(b::GeluForward<float, uint16_t, uint16_t>{xBits.data(),
                                                   fromBits.data(), n});
  EXPECT_EQ(fromBits, bits) << "gelu of bf16 inputs";
  cpu->geluForward(mimo::device::dtypeOf(xBits.data()), xBits.data(),
                   mimo::device::dtypeOf(fromBits.data()), fromBits.data(), n,
                   Gelu::Tanh);
  EXPECT_EQ(fromBits, bits) << "cpu gelu of bf16 inputs";
  runAll(
      b::SwigluForward<float, uint16_t>{xr.data(), ur.data(), bits.data(), n});
  runAll(b::SwigluForward<float, uint16_t, uint16_t>{xBits.data(), uBits.data(),
                                                     fromBits.data(), n});
  EXPECT_EQ(fromBits, bits) << "swiglu of bf16 inputs";
  cpu->swigluForward(mimo::device::dtypeOf(xBits.data()), xBits.data(),
                     uBits.data(), mimo::device::dtypeOf(fromBits.data()),
                     fromBits.data(), n);
  EXPECT_EQ(fromBits, bits) << "cpu swiglu of bf16 inputs";
  // The CPU device: its bf16 forwards against its fp32 ones, packed.
  cpu->rmsnormForward(x.data(), w.data(), mimo::device::dtypeOf(y.data()),
                      y.data(), stat.data(), rows, cols, 1e-5f);
  cpu->rmsnormForward(x.data(), w.data(), mimo::device::dtypeOf(bits.data()),
                      bits.data(), rstdBits.data(), rows, cols, 1e-5f);
  EXPECT_EQ(bits, pack(y)) << "cpu rmsnorm";
  EXPECT_EQ(rstdBits, stat);
  cpu->layernormForward(x.data(), w.data(), bias.data(),
                        mimo::device::dtypeOf(y.data()), y.data(), stat2.data(),
                        stat.data(), rows, cols, 1e-6f);
  cpu->layernormForward(x.data(), w.data(), bias.data(),
                        mimo::device::dtypeOf(bits.data()), bits.data(),
                        meanBits.data(), rstdBits.data(), rows, cols, 1e-6f);
  EXPECT_EQ(bits, pack(y)) << "cpu layernorm";
  EXPECT_EQ(meanBits, stat2);
  cpu->geluForward(mimo::device::dtypeOf(x.data()), x.data(),
                   mimo::device::dtypeOf(y.data()), y.data(), n, Gelu::Tanh);
  cpu->geluForward(mimo::device::dtypeOf(x.data()), x.data(),
                   mimo::device::dtypeOf(bits.data()), bits.data(), n,
                   Gelu::Tanh);
  EXPECT_EQ(bits, pack(y)) << "cpu gelu";
  cpu->swigluForward(mimo::device::dtypeOf(x.data()), x.data(), u.data(),
                     mimo::device::dtypeOf(y.data()), y.data(), n);
  cpu->swigluForward(mimo::device::dtypeOf(x.data()), x.data(), u.data(),
                     mimo::device::dtypeOf(bits.data()), bits.data(), n);
  EXPECT_EQ(bits, pack(y)) << "cpu swiglu";
  // The rounding shows: not every value is bf16 already.
  std::vector<float> widened(n);
  runAll(b::FromBf16Bits{bits.data(), widened.data(), n});
  EXPECT_NE(widened, y);
}

/// The CPU device's other bf16 ops against its fp32 ones: RoPE into bits
/// (both ways), the residual add, the activations' and norms' backwards on
/// bf16 inputs, the cross-entropy on bf16 logits. Each is the fp32 op on
/// the values, rounded where it stores, bit for bit (what a bf16 layer's
/// losses rely on: the same bits as rounding every stored value).
TEST(KernelBodiesBf16, TheCpuDevicesBf16OpsAreItsFp32OpsRounded) {
  std::unique_ptr<mimo::device::Device> cpu = mimo::device::makeCpuDevice();
  std::mt19937 rng(13);
  const int64_t rows = 6, cols = 40, n = rows * cols;
  auto pack = [&](const std::vector<float> &v) {
    std::vector<uint16_t> out(v.size());
    cpu->convert(mimo::device::DType::F32, v.data(), mimo::device::DType::BF16,
                 out.data(), static_cast<int64_t>(v.size()));
    return out;
  };
  auto unpack = [&](const std::vector<uint16_t> &bits) {
    std::vector<float> out(bits.size());
    cpu->convert(mimo::device::DType::BF16, bits.data(),
                 mimo::device::DType::F32, out.data(),
                 static_cast<int64_t>(bits.size()));
    return out;
  };
  auto x = random<float>(rng, n, -3, 3), y = random<float>(rng, n),
       dy = random<float>(rng, n);
  const std::vector<uint16_t> xBits = pack(x), yBits = pack(y);
  const std::vector<float> xr = unpack(xBits), yr = unpack(yBits);
  std::vector<uint16_t> bits(n), bits2(n);
  // RoPE: the rows x cols values as 2 tokens of 3 heads of dimension cols.
  std::vector<int64_t> positions = {3, 1000};
  mimo::device::RopeSpec llama3;
  llama3.theta = 500000;
  llama3.factor = 8;
  llama3.originalMax = 64;
  for (const mimo::device::RopeSpec &spec : {mimo::device::RopeSpec{}, llama3})
    for (bool inverse : {false, true}) {
      std::vector<double> table(static_cast<size_t>(2 * (cols / 2) * 2));
      cpu->ropeTable(positions.data(), 2, cols, spec, table.data());
      std::vector<float> rotated = x, reference = x;
      cpu->rope(rotated.data(), mimo::device::DType::F32, rotated.data(),
                table.data(), 2, 3, cols, inverse);
      // The table's rotation is the reference kernel's, bit for bit.
      k::rope<float>(reference.data(), positions.data(), 2, 3, cols, inverse,
                     spec);
      EXPECT_EQ(rotated, reference) << "rope by table, inverse " << inverse;
      cpu->rope(x.data(), mimo::device::DType::BF16, bits.data(), table.data(),
                2, 3, cols, inverse);
      EXPECT_EQ(bits, pack(rotated)) << "rope, inverse " << inverse;
    }
  // The residual: x + round(branch), rounded; the branch fp32 or bits.
  std::vector<float> sum(n), fromFloats(n), fromBits(n);
  cpu->add(mimo::device::DType::F32, sum.data(), xr.data(), yr.data(), n);
  cpu->roundTo(mimo::device::DType::BF16, sum.data(), n);
  cpu->residual(mimo::device::DType::BF16, xr.data(),
                mimo::device::dtypeOf(y.data()), y.data(), fromFloats.data(),
                n);
  cpu->residual(mimo::device::DType::BF16, xr.data(),
                mimo::device::dtypeOf(yBits.data()), yBits.data(),
                fromBits.data(), n);
  EXPECT_EQ(fromFloats, sum) << "residual, fp32 branch";
  EXPECT_EQ(fromBits, sum) << "residual, bf16 branch";
  // GeLU and SwiGLU backwards on bf16 inputs, into bf16 gradients.
  std::vector<float> dg(n), du(n);
  cpu->geluBackward(mimo::device::dtypeOf(xr.data()), xr.data(), dy.data(),
                    dg.data(), n, Gelu::Tanh);
  cpu->geluBackward(mimo::device::dtypeOf(xBits.data()), xBits.data(),
                    dy.data(), bits.data(), n, Gelu::Tanh);
  EXPECT_EQ(bits, pack(dg)) << "gelu backward";
  cpu->swigluBackward(mimo::device::dtypeOf(xr.data()), xr.data(), yr.data(),
                      dy.data(), dg.data(), du.data(), n);
  cpu->swigluBackward(mimo::device::dtypeOf(xBits.data()), xBits.data(),
                      yBits.data(), dy.data(), bits.data(), bits2.data(), n);
  EXPECT_EQ(bits, pack(dg)) << "swiglu backward, gate";
  EXPECT_EQ(bits2, pack(du)) << "swiglu backward, up";
  // The norms' backwards on bf16 x, added into dx.
  auto w = random<float>(rng, cols, 0.5, 1.5), base = random<float>(rng, n);
  std::vector<float> mean = random<float>(rng, rows, -0.1, 0.1),
                     rstd = random<float>(rng, rows, 0.5, 2);
  std::vector<float> d(n), want = base, got = base;
  std::vector<float> dw(cols, 0.0f), dwGot(cols, 0.0f), db(cols, 0.0f),
      dbGot(cols, 0.0f);
  cpu->rmsnormBackward(mimo::device::dtypeOf(xr.data()), xr.data(), w.data(),
                       rstd.data(), dy.data(), d.data(), dw.data(), rows, cols);
  cpu->axpy(n, 1.0f, d.data(), want.data());
  cpu->rmsnormBackward(mimo::device::dtypeOf(xBits.data()), xBits.data(),
                       w.data(), rstd.data(), dy.data(), got.data(),
                       dwGot.data(), rows, cols);
  EXPECT_EQ(got, want) << "rmsnorm backward";
  EXPECT_EQ(dwGot, dw);
  want = base, got = base;
  cpu->layernormBackward(mimo::device::dtypeOf(xr.data()), xr.data(), w.data(),
                         mean.data(), rstd.data(), dy.data(), d.data(),
                         dw.data(), db.data(), rows, cols);
  cpu->axpy(n, 1.0f, d.data(), want.data());
  cpu->layernormBackward(mimo::device::dtypeOf(xBits.data()), xBits.data(),
                         w.data(), mean.data(), rstd.data(), dy.data(),
                         got.data(), dwGot.data(), dbGot.data(), rows, cols);
  EXPECT_EQ(got, want) << "layernorm backward";
  EXPECT_EQ(dwGot, dw);
  EXPECT_EQ(dbGot, db);
  // The cross-entropy over a vocabulary shard [10, 10 + cols) of bf16
  // logits, dlogits into bits.
  std::vector<int64_t> targets = {10, 12, 3, 49, 30, 11};
  std::vector<float> scale = {0.5f, 0.0f, 1.0f, 0.25f, 2.0f, 1.0f};
  std::vector<float> mx(rows), mxGot(rows), se(rows), seGot(rows), tl(rows),
      tlGot(rows), dz(n);
  cpu->crossEntropyRowMax(mimo::device::dtypeOf(xr.data()), xr.data(), rows,
                          cols, mx.data());
  cpu->crossEntropyRowMax(mimo::device::dtypeOf(xBits.data()), xBits.data(),
                          rows, cols, mxGot.data());
  EXPECT_EQ(mxGot, mx);
  cpu->crossEntropySums(mimo::device::dtypeOf(xr.data()), xr.data(),
                        targets.data(), rows, cols, 10, mx.data(), se.data(),
                        tl.data());
  cpu->crossEntropySums(mimo::device::dtypeOf(xBits.data()), xBits.data(),
                        targets.data(), rows, cols, 10, mx.data(), seGot.data(),
                        tlGot.data());
  EXPECT_EQ(seGot, se);
  EXPECT_EQ(tlGot, tl);
  cpu->crossEntropyBackward(mimo::device::dtypeOf(xr.data()), xr.data(),
                            targets.data(), rows, cols, 10, mx.data(),
                            se.data(), scale.data(), dz.data());
  cpu->crossEntropyBackward(mimo::device::dtypeOf(xBits.data()), xBits.data(),
                            targets.data(), rows, cols, 10, mx.data(),
                            se.data(), scale.data(), bits.data());
  EXPECT_EQ(bits, pack(dz)) << "cross-entropy backward";
}

TEST(KernelBodiesMaximum, NanWinsFirstOneKept) {
  float nan1 = std::nanf("1");
  std::vector<float> a = {1, nan1, 3, -2, 5},
                     bb = {2, 4, std::nanf("2"), -3, 5};
  auto out = poisoned<float>(5);
  runAll(b::Maximum<float>{out.data(), a.data(), bb.data(), 5});
  EXPECT_EQ(out[0], 2);
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], -2);
  EXPECT_EQ(out[4], 5);
}

TYPED_TEST(KernelBodies, Activations) {
  using T = TypeParam;
  std::mt19937 rng(2);
  const int64_t n = 37;
  auto x = random<T>(rng, n, -4, 4), u = random<T>(rng, n),
       dy = random<T>(rng, n);
  auto y = poisoned<T>(n), yr = poisoned<T>(n);
  runAll(b::GeluForward<T>{x.data(), y.data(), n});
  k::geluForward<T>(x.data(), yr.data(), n);
  expectClose("gelu", y, yr, tolerance<T>());
  auto dx = poisoned<T>(n), dxr = poisoned<T>(n);
  runAll(b::GeluBackward<T>{x.data(), dy.data(), dx.data(), n});
  k::geluBackward<T>(x.data(), dy.data(), dxr.data(), n);
  expectClose("gelu backward", dx, dxr, tolerance<T>());
  runAll(b::SwigluForward<T>{x.data(), u.data(), y.data(), n});
  k::swigluForward<T>(x.data(), u.data(), yr.data(), n);
  expectClose("swiglu", y, yr, tolerance<T>());
  auto dg = poisoned<T>(n), du = poisoned<T>(n), dgr = dg, dur = du;
  runAll(b::SwigluBackward<T>{x.data(), u.data(), dy.data(), dg.data(),
                              du.data(), n});
  k::swigluBackward<T>(x.data(), u.data(), dy.data(), dgr.data(), dur.data(),
                       n);
  expectClose("swiglu dgate", dg, dgr, tolerance<T>());
  expectClose("swiglu dup", du, dur, tolerance<T>());
}

/// The norms' row programs (RowBodies.h) and column bodies.
template <typename T> void checkNorms(int64_t rows, int64_t cols) {
  SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
  std::mt19937 rng(static_cast<unsigned>(3 + cols));
  const int64_t n = rows * cols;
  const T eps = T(1e-5);
  auto x = random<T>(rng, n, -2, 2), w = random<T>(rng, cols, 0.5, 1.5);
  auto bias = random<T>(rng, cols), dy = random<T>(rng, n);
  // RMSNorm
  auto y = poisoned<T>(n), yr = poisoned<T>(n);
  auto rstd = poisoned<T>(rows), rstdr = poisoned<T>(rows);
  rw::runOnHost(rw::RmsnormForward<T>{x.data(), w.data(), y.data(), rstd.data(),
                                      rows, cols, eps});
  k::rmsnormForward<T>(x.data(), w.data(), yr.data(), rstdr.data(), rows, cols,
                       eps);
  expectClose("rmsnorm y", y, yr, tolerance<T>());
  expectClose("rmsnorm rstd", rstd, rstdr, tolerance<T>());
  auto dx = poisoned<T>(n), dxr = poisoned<T>(n);
  auto dw0 = random<T>(rng, cols);
  auto dw = dw0, dwr = dw0;
  rw::runOnHost(rw::RmsnormBackward<T>{x.data(), w.data(), rstdr.data(),
                                       dy.data(), dx.data(), rows, cols});
  b::columnSumsOnHost(
      b::RmsnormWeightTerms<T>{x.data(), rstdr.data(), dy.data(), cols}, rows,
      cols, dw.data());
  k::rmsnormBackward<T>(x.data(), w.data(), rstdr.data(), dy.data(), dxr.data(),
                        dwr.data(), rows, cols);
  expectClose("rmsnorm dx", dx, dxr, tolerance<T>());
  expectClose("rmsnorm dw", dw, dwr, tolerance<T>());
  // LayerNorm
  auto mean = poisoned<T>(rows), meanr = poisoned<T>(rows);
  rw::runOnHost(rw::LayernormForward<T>{x.data(), w.data(), bias.data(),
                                        y.data(), mean.data(), rstd.data(),
                                        rows, cols, eps});
  k::layernormForward<T>(x.data(), w.data(), bias.data(), yr.data(),
                         meanr.data(), rstdr.data(), rows, cols, eps);
  expectClose("layernorm y", y, yr, tolerance<T>());
  expectClose("layernorm mean", mean, meanr, tolerance<T>());
  expectClose("layernorm rstd", rstd, rstdr, tolerance<T>());
  auto db0 = random<T>(rng, cols);
  auto db = db0, dbr = db0;
  dw = dw0;
  dwr = dw0;
  rw::runOnHost(rw::LayernormBackward<T>{x.data(), w.data(), meanr.data(),
                                         rstdr.data(), dy.data(), dx.data(),
                                         rows, cols});
  b::columnSumsOnHost(b::LayernormParamTerms<T>{x.data(), meanr.data(),
                                                rstdr.data(), dy.data(), cols},
                      rows, cols, dw.data(), db.data());
  k::layernormBackward<T>(x.data(), w.data(), meanr.data(), rstdr.data(),
                          dy.data(), dxr.data(), dwr.data(), dbr.data(), rows,
                          cols);
  expectClose("layernorm dx", dx, dxr, tolerance<T>());
  expectClose("layernorm dw", dw, dwr, tolerance<T>());
  expectClose("layernorm db", db, dbr, tolerance<T>());
}

/// Rows narrower than a block (most threads idle) and wider (each thread
/// strides over several columns, the tree combining them); more rows than
/// a column chunk (the parameter gradients' partials, a short last chunk).
TYPED_TEST(KernelBodies, Norms) {
  checkNorms<TypeParam>(5, 19);
  checkNorms<TypeParam>(3, 1000);
  checkNorms<TypeParam>(150, 7);
}

TYPED_TEST(KernelBodies, Rope) {
  using T = TypeParam;
  std::mt19937 rng(4);
  const int64_t tokens = 5, heads = 3;
  std::vector<int64_t> positions = {0, 7, 3, 100, 2047};
  // The default frequencies, and Llama 3.1's rescaled ones (all three
  // bands at dim 6 and 7 with an original context of 8 and theta 20).
  mimo::device::RopeSpec llama3;
  llama3.theta = 20;
  llama3.factor = 8;
  llama3.originalMax = 8;
  for (const mimo::device::RopeSpec &spec : {mimo::device::RopeSpec{}, llama3})
    for (int64_t dim : {6, 7, 1}) // an odd dim's last value is not rotated
      for (bool inverse : {false, true}) {
        const int64_t n = tokens * heads * dim;
        auto x = random<T>(rng, n), xr = x;
        std::vector<double> table(
            static_cast<size_t>(std::max<int64_t>(tokens * (dim / 2), 1) * 2));
        runAll(b::RopeTable{positions.data(), table.data(), tokens, dim, spec});
        runAll(b::Rope<T>{x.data(), x.data(), table.data(), tokens, heads, dim,
                          inverse});
        k::rope<T>(xr.data(), positions.data(), tokens, heads, dim, inverse,
                   spec);
        expectClose(inverse ? "rope inverse" : "rope", x, xr, tolerance<T>());
      }
}

/// The backwards reading bf16 g, u and writing bf16 gradients: the fp32
/// bodies on the values, rounded, bit for bit.
TEST(KernelBodies, Bf16ActivationBackwardsAreTheFp32OnesRounded) {
  std::mt19937 rng(6);
  const int64_t n = 41;
  auto gate = random<float>(rng, n, -4, 4), up = random<float>(rng, n),
       dy = random<float>(rng, n);
  std::vector<uint16_t> g(n), u(n), dg(n), du(n), dx(n);
  for (int64_t i = 0; i < n; ++i) {
    g[size_t(i)] = b::bf16Bits(gate[size_t(i)]);
    u[size_t(i)] = b::bf16Bits(up[size_t(i)]);
    gate[size_t(i)] = b::widen(g[size_t(i)]);
    up[size_t(i)] = b::widen(u[size_t(i)]);
  }
  std::vector<float> dgf(n), duf(n), dxf(n);
  runAll(b::SwigluBackward<float, uint16_t, uint16_t>{
      g.data(), u.data(), dy.data(), dg.data(), du.data(), n});
  runAll(b::SwigluBackward<float>{gate.data(), up.data(), dy.data(), dgf.data(),
                                  duf.data(), n});
  runAll(b::GeluBackward<float, uint16_t, uint16_t>{g.data(), dy.data(),
                                                    dx.data(), n});
  runAll(b::GeluBackward<float>{gate.data(), dy.data(), dxf.data(), n});
  for (size_t i = 0; i < size_t(n); ++i) {
    ASSERT_EQ(dg[i], b::bf16Bits(dgf[i])) << i;
    ASSERT_EQ(du[i], b::bf16Bits(duf[i])) << i;
    ASSERT_EQ(dx[i], b::bf16Bits(dxf[i])) << i;
  }
}

/// A bf16 residual: the branch rounded as stored, the sum rounded as
/// stored; a branch of bits is the same branch rounded already.
TEST(KernelBodies, Bf16ResidualRoundsTheBranchAndTheSum) {
  const std::vector<float> x = {1.0f, -3.5f, 0.25f};
  // 1 + 2^-9 is not a bf16 (7 fraction bits): it rounds to 1 (ties to
  // even), so the branch adds nothing; 2^-7 + 2^-15 rounds to 2^-7.
  const std::vector<float> branch = {0x1p-9f, 0x1p-7f + 0x1p-15f, 1.0f / 3};
  std::vector<float> out(3), outBits(3);
  std::vector<uint16_t> bits(3);
  for (size_t i = 0; i < 3; ++i)
    bits[i] = b::bf16Bits(branch[i]);
  runAll(b::ResidualBf16<float>{x.data(), branch.data(), out.data(), 3});
  runAll(b::ResidualBf16<uint16_t>{x.data(), bits.data(), outBits.data(), 3});
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], b::roundToBf16(-3.5f + 0x1p-7f));
  EXPECT_EQ(out[2], b::roundToBf16(0.25f + b::roundToBf16(1.0f / 3)));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i], b::roundToBf16(out[i])) << "stored rounded";
    EXPECT_EQ(out[i], outBits[i]) << i;
  }
}

/// The norms' backwards reading bf16 x and adding into dx: the fp32 bodies
/// on x's values, written to scratch and added after, bit for bit.
TEST(KernelBodies, Bf16NormBackwardsAddWhatTheFp32OnesWrite) {
  std::mt19937 rng(9);
  const int64_t rows = 4, cols = 300, n = rows * cols;
  auto xf = random<float>(rng, n, -2, 2), w = random<float>(rng, cols, 0.5, 2),
       dy = random<float>(rng, n), base = random<float>(rng, n);
  std::vector<uint16_t> x(n);
  for (int64_t i = 0; i < n; ++i) {
    x[size_t(i)] = b::bf16Bits(xf[size_t(i)]);
    xf[size_t(i)] = b::widen(x[size_t(i)]);
  }
  std::vector<float> mean = {0.1f, -0.2f, 0.0f, 0.3f},
                     rstd = {1.5f, 0.7f, 1.0f, 2.0f};
  std::vector<float> d(n), dx = base, dxl = base, dl(n);
  rw::runOnHost(rw::RmsnormBackward<float>{xf.data(), w.data(), rstd.data(),
                                           dy.data(), d.data(), rows, cols});
  rw::runOnHost(rw::RmsnormBackward<float, uint16_t, true>{
      x.data(), w.data(), rstd.data(), dy.data(), dx.data(), rows, cols});
  rw::runOnHost(rw::LayernormBackward<float>{xf.data(), w.data(), mean.data(),
                                             rstd.data(), dy.data(), dl.data(),
                                             rows, cols});
  rw::runOnHost(rw::LayernormBackward<float, uint16_t, true>{
      x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dxl.data(), rows,
      cols});
  for (size_t i = 0; i < size_t(n); ++i) {
    ASSERT_EQ(dx[i], base[i] + d[i]) << i;
    ASSERT_EQ(dxl[i], base[i] + dl[i]) << i;
  }
  std::vector<float> dw(cols, 0.0f), dwb(cols, 0.0f);
  b::columnSumsOnHost(
      b::RmsnormWeightTerms<float>{xf.data(), rstd.data(), dy.data(), cols},
      rows, cols, dw.data());
  b::columnSumsOnHost(b::RmsnormWeightTerms<float, uint16_t>{x.data(),
                                                             rstd.data(),
                                                             dy.data(), cols},
                      rows, cols, dwb.data());
  EXPECT_EQ(dw, dwb);
}

/// RoPE writing bf16 bits (precision "bf16"'s q and k): the fp32 rotation
/// rounded, bit for bit, whatever the input was.
TEST(KernelBodies, RopeToBf16BitsIsTheFp32RopeRounded) {
  std::mt19937 rng(5);
  const int64_t tokens = 4, heads = 2;
  std::vector<int64_t> positions = {0, 9, 4095, 1};
  for (int64_t dim : {8, 5})
    for (bool inverse : {false, true}) {
      const int64_t n = tokens * heads * dim;
      auto x = random<float>(rng, n), rotated = x;
      std::vector<uint16_t> bits(static_cast<size_t>(n));
      std::vector<double> table(static_cast<size_t>(tokens * (dim / 2) * 2));
      runAll(b::RopeTable{positions.data(), table.data(), tokens, dim, {}});
      runAll(b::Rope<float, uint16_t>{x.data(), bits.data(), table.data(),
                                      tokens, heads, dim, inverse});
      runAll(b::Rope<float>{rotated.data(), rotated.data(), table.data(),
                            tokens, heads, dim, inverse});
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(bits[size_t(i)], b::bf16Bits(rotated[size_t(i)])) << i;
    }
}

/// Ids 10..15 of a shard [10, 16): rows 0, 1, 2 and 5 used; ids off the
/// shard (3, 16, -1) dropped; each row's tokens in order.
TEST(TokenGroups, GroupByShardRowTokensInOrder) {
  std::vector<int64_t> ids = {10, 3, 15, 12, 12, -1, 16, 11, 10};
  const auto groups = mimo::device::TokenGroups::of(
      ids.data(), static_cast<int64_t>(ids.size()), 10, 16);
  ASSERT_EQ(groups.groups, 4);
  const mimo::device::TokenGroupsView v = groups.view(groups.packed.data());
  EXPECT_EQ(std::vector<int64_t>(v.rows, v.rows + 4),
            (std::vector<int64_t>{0, 1, 2, 5}));
  EXPECT_EQ(std::vector<int64_t>(v.offsets, v.offsets + 5),
            (std::vector<int64_t>{0, 2, 3, 5, 6}));
  EXPECT_EQ(std::vector<int64_t>(v.tokens, v.tokens + 6),
            (std::vector<int64_t>{0, 8, 7, 3, 4, 2}));
  EXPECT_EQ(groups.packed.size(), size_t(4 + 5 + 6));
  // An empty shard, no ids.
  EXPECT_EQ(mimo::device::TokenGroups::of(ids.data(), 9, 20, 20).groups, 0);
  EXPECT_EQ(mimo::device::TokenGroups::of(nullptr, 0, 0, 8).packed.size(),
            size_t(1));
}

/// Every device's embedding backward against the reference kernel, from the
/// same groups: the CPU device bit for bit.
TEST(TokenGroups, CpuDeviceEmbeddingBackwardIsTheReference) {
  std::unique_ptr<mimo::device::Device> cpu = mimo::device::makeCpuDevice();
  std::mt19937 rng(8);
  const int64_t hidden = 5, vb = 4, ve = 12, n = 30;
  std::uniform_int_distribution<int64_t> pick(-1, 14);
  std::vector<int64_t> ids(n);
  for (int64_t &id : ids)
    id = pick(rng);
  auto dout = random<float>(rng, n * hidden);
  auto dtable = random<float>(rng, (ve - vb) * hidden), want = dtable;
  const auto groups = mimo::device::TokenGroups::of(ids.data(), n, vb, ve);
  cpu->embeddingBackward(groups.view(groups.packed.data()), dout.data(), hidden,
                         dtable.data());
  k::embeddingBackward<float>(ids.data(), n, dout.data(), vb, ve, hidden,
                              want.data());
  EXPECT_EQ(dtable, want);
}

TYPED_TEST(KernelBodies, EmbeddingShard) {
  using T = TypeParam;
  std::mt19937 rng(6);
  const int64_t hidden = 7, vb = 10, ve = 16, n = 9;
  std::vector<int64_t> ids = {10, 3, 15, 12, 12, -1, 16, 11, 10};
  auto table = random<T>(rng, (ve - vb) * hidden);
  auto out = poisoned<T>(n * hidden), outr = poisoned<T>(n * hidden);
  runAll(b::EmbeddingForward<T>{ids.data(), table.data(), out.data(), n, vb, ve,
                                hidden});
  k::embeddingForward<T>(ids.data(), n, table.data(), vb, ve, hidden,
                         outr.data());
  EXPECT_EQ(out, outr);
  auto dout = random<T>(rng, n * hidden);
  auto dtable = random<T>(rng, (ve - vb) * hidden), dtabler = dtable;
  const auto groups = mimo::device::TokenGroups::of(ids.data(), n, vb, ve);
  runAll(b::EmbeddingBackwardGroups<T>{groups.view(groups.packed.data()),
                                       dout.data(), dtable.data(), hidden});
  k::embeddingBackward<T>(ids.data(), n, dout.data(), vb, ve, hidden,
                          dtabler.data());
  EXPECT_EQ(dtable, dtabler); // same additions in the same order
}

/// The vocabulary-parallel cross-entropy over a shard [vb, vb + V).
template <typename T> void checkCrossEntropy(int64_t V) {
  SCOPED_TRACE("V=" + std::to_string(V));
  std::mt19937 rng(static_cast<unsigned>(7 + V));
  const int64_t n = 6, vb = 22;
  auto logits = random<T>(rng, n * V, -5, 5);
  // Some off-shard, one the shard's last.
  std::vector<int64_t> targets = {22, 30, 5, vb + V - 1, 27, vb + V + 3};
  auto mx = poisoned<T>(n), mxr = poisoned<T>(n);
  rw::runOnHost(rw::CrossEntropyRowMax<T>{logits.data(), mx.data(), n, V});
  k::crossEntropyRowMax<T>(logits.data(), n, V, mxr.data());
  EXPECT_EQ(mx, mxr);
  auto sum = poisoned<T>(n), tl = poisoned<T>(n), sumr = sum, tlr = tl;
  rw::runOnHost(rw::CrossEntropySums<T>{logits.data(), targets.data(),
                                        mxr.data(), sum.data(), tl.data(), n, V,
                                        vb});
  k::crossEntropySums<T>(logits.data(), targets.data(), n, V, vb, mxr.data(),
                         sumr.data(), tlr.data());
  expectClose("sumExp", sum, sumr, tolerance<T>());
  EXPECT_EQ(tl, tlr);
  auto loss = poisoned<T>(n), lossr = poisoned<T>(n);
  runAll(b::CrossEntropyLoss<T>{mxr.data(), sumr.data(), tlr.data(),
                                loss.data(), n});
  k::crossEntropyLoss<T>(mxr.data(), sumr.data(), tlr.data(), n, lossr.data());
  expectClose("loss", loss, lossr, tolerance<T>());
  std::vector<T> scale = {T(0.5), T(0), T(0.25), T(1), T(0), T(2)};
  auto dl = poisoned<T>(n * V), dlr = poisoned<T>(n * V);
  runAll(b::CrossEntropyBackward<T>{logits.data(), targets.data(), mxr.data(),
                                    sumr.data(), scale.data(), dl.data(), n, V,
                                    vb});
  k::crossEntropyBackward<T>(logits.data(), targets.data(), n, V, vb,
                             mxr.data(), sumr.data(), scale.data(), dlr.data());
  expectClose("dlogits", dl, dlr, tolerance<T>());
}

TYPED_TEST(KernelBodies, CrossEntropyVocabShard) {
  checkCrossEntropy<TypeParam>(11);
  checkCrossEntropy<TypeParam>(1000); // rows wider than a row block
}

/// bf16 logits (the head's GEMM output under precision "bf16"): the same
/// bits as the fp32 bodies on their values; dlogits written as bf16 bits
/// are the fp32 ones rounded.
TEST(KernelBodies, CrossEntropyOfBf16LogitsIsTheFp32OneOnTheirValues) {
  std::mt19937 rng(12);
  const int64_t n = 5, V = 700, vb = 10;
  std::vector<float> logits = random<float>(rng, n * V, -6, 6);
  std::vector<uint16_t> bits(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    bits[i] = b::bf16Bits(logits[i]);
    logits[i] = b::widen(bits[i]);
  }
  std::vector<int64_t> targets = {10, 400, 3, vb + V - 1, 11};
  std::vector<float> mx(n), mxb(n), sum(n), sumb(n), tl(n), tlb(n);
  rw::runOnHost(rw::CrossEntropyRowMax<float>{logits.data(), mx.data(), n, V});
  rw::runOnHost(
      rw::CrossEntropyRowMax<float, uint16_t>{bits.data(), mxb.data(), n, V});
  rw::runOnHost(rw::CrossEntropySums<float>{logits.data(), targets.data(),
                                            mx.data(), sum.data(), tl.data(), n,
                                            V, vb});
  rw::runOnHost(rw::CrossEntropySums<float, uint16_t>{
      bits.data(), targets.data(), mx.data(), sumb.data(), tlb.data(), n, V,
      vb});
  EXPECT_EQ(mx, mxb);
  EXPECT_EQ(sum, sumb);
  EXPECT_EQ(tl, tlb);
  std::vector<float> scale = {0.5f, 0.0f, 0.25f, 1.0f, 2.0f};
  std::vector<float> dl(n * V);
  std::vector<uint16_t> dlb(n * V);
  runAll(b::CrossEntropyBackward<float>{logits.data(), targets.data(),
                                        mx.data(), sum.data(), scale.data(),
                                        dl.data(), n, V, vb});
  runAll(b::CrossEntropyBackward<float, uint16_t, uint16_t>{
      bits.data(), targets.data(), mx.data(), sum.data(), scale.data(),
      dlb.data(), n, V, vb});
  for (size_t i = 0; i < dl.size(); ++i)
    ASSERT_EQ(dlb[i], b::bf16Bits(dl[i])) << i;
}

TYPED_TEST(KernelBodies, AdamWWithClipping) {
  using T = TypeParam;
  std::mt19937 rng(8);
  const int64_t n = 29;
  auto p = random<T>(rng, n), g = random<T>(rng, n), m = random<T>(rng, n);
  auto v = random<T>(rng, n, 0, 1);
  auto pr = p, mr = m, vr = v;
  mimo::device::AdamWStep step;
  step.lr = 1e-3;
  step.weightDecay = 0.1;
  step.step = 3;
  step.gradScale = 0.7;
  runAll(b::AdamW<T>{p.data(), g.data(), m.data(), v.data(), n, step.lr,
                     step.beta1, step.beta2, step.eps, step.weightDecay,
                     step.biasCorrection1(), step.biasCorrection2(),
                     step.gradScale});
  k::adamw<T>(pr.data(), g.data(), mr.data(), vr.data(), n, step.lr, step.beta1,
              step.beta2, step.eps, step.weightDecay, step.step,
              step.gradScale);
  EXPECT_EQ(p, pr);
  EXPECT_EQ(m, mr);
  EXPECT_EQ(v, vr);
}

/// RopeSpec (docs/model.md, model.json rope_theta and rope_scaling): the
/// default keeps 10000^(-2i/d) bit for bit; Llama 3.1's rescaling keeps the
/// high frequencies, divides the low ones by the factor and blends between
/// (values from an independent computation of Hugging Face's formula).
TEST(RopeSpec, DefaultAndLlama3Frequencies) {
  mimo::device::RopeSpec plain;
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_EQ(plain.invFreq(i, 64), std::pow(10000.0, -2.0 * i / 64.0)) << i;
  mimo::device::RopeSpec llama3;
  llama3.theta = 500000;
  llama3.factor = 8;
  llama3.lowFreqFactor = 1;
  llama3.highFreqFactor = 4;
  llama3.originalMax = 64;
  EXPECT_DOUBLE_EQ(llama3.invFreq(0, 64), 1.0);                     // high band
  EXPECT_NEAR(llama3.invFreq(4, 64), 0.0794030091792082, 1e-15);    // blended
  EXPECT_NEAR(llama3.invFreq(10, 64), 0.002070055010124306, 1e-17); // low
}

/// Grouped-query attention's repeat and its adjoint, against plain loops:
/// head h reads group h / repeat; a group's gradient sums its heads'.
TEST(KernelBodies, RepeatKvAndSumKvGroups) {
  std::mt19937 rng(5);
  const int64_t rows = 3, groups = 2, repeat = 3, dim = 4;
  auto x = random<float>(rng, rows * groups * dim);
  std::vector<float> y(rows * groups * repeat * dim, -1);
  runAll(b::RepeatKv<float>{x.data(), y.data(), rows, groups, repeat, dim});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < groups * repeat; ++h)
      for (int64_t e = 0; e < dim; ++e)
        EXPECT_EQ(y[(r * groups * repeat + h) * dim + e],
                  x[(r * groups + h / repeat) * dim + e]);
  auto dy = random<float>(rng, y.size());
  std::vector<float> sum(x.size(), -1);
  runAll(b::SumKvGroups{dy.data(), sum.data(), rows, groups, repeat, dim});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t e = 0; e < dim; ++e) {
        float expect = 0;
        for (int64_t j = 0; j < repeat; ++j)
          expect += dy[(r * groups * repeat + g * repeat + j) * dim + e];
        EXPECT_EQ(sum[(r * groups + g) * dim + e], expect);
      }
  // bf16 bits are copied as they are, and the CPU device runs the bodies.
  std::unique_ptr<mimo::device::Device> cpu = mimo::device::makeCpuDevice();
  std::vector<uint16_t> bits(x.size()), wide(y.size());
  cpu->convert(mimo::device::DType::F32, x.data(), mimo::device::DType::BF16,
               bits.data(), static_cast<int64_t>(x.size()));
  cpu->repeatKv(mimo::device::DType::BF16, bits.data(), wide.data(), rows,
                groups, repeat, dim);
  for (size_t i = 0; i < wide.size(); ++i)
    EXPECT_EQ(
        wide[i],
        bits[static_cast<size_t>(
            ((static_cast<int64_t>(i) / dim) / (groups * repeat) * groups +
             (static_cast<int64_t>(i) / dim) % (groups * repeat) / repeat) *
                dim +
            static_cast<int64_t>(i) % dim)]);
}

/// Activation.h's GELU variants (model.json activation) against the
/// formulas written out here: exact erf GELU, QuickGELU x·σ(1.702x), the
/// tanh form; their slopes against central differences; the CPU device
/// runs the same bodies.
TEST(KernelBodies, GeluVariants) {
  for (double x : {-3.0, -0.5, 0.0, 0.7, 2.5}) {
    EXPECT_NEAR(mimo::device::geluValue(x, Gelu::Exact),
                0.5 * x * (1 + std::erf(x / std::sqrt(2.0))), 1e-15);
    EXPECT_NEAR(mimo::device::geluValue(x, Gelu::Quick),
                x / (1 + std::exp(-1.702 * x)), 1e-15);
    EXPECT_NEAR(
        mimo::device::geluValue(x, Gelu::Tanh),
        0.5 * x *
            (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))),
        1e-15);
    for (Gelu kind : {Gelu::Tanh, Gelu::Exact, Gelu::Quick}) {
      const double h = 1e-6;
      const double slope = (mimo::device::geluValue(x + h, kind) -
                            mimo::device::geluValue(x - h, kind)) /
                           (2 * h);
      EXPECT_NEAR(mimo::device::geluSlope(x, kind), slope, 1e-8) << x;
    }
  }
  std::unique_ptr<mimo::device::Device> cpu = mimo::device::makeCpuDevice();
  std::vector<float> x = {-2.0f, -0.25f, 0.5f, 3.0f}, y(4), dy = {1, 2, 3, 4},
                     dx(4);
  cpu->geluForward(mimo::device::dtypeOf(x.data()), x.data(),
                   mimo::device::dtypeOf(y.data()), y.data(), 4, Gelu::Quick);
  cpu->geluBackward(mimo::device::dtypeOf(x.data()), x.data(), dy.data(),
                    dx.data(), 4, Gelu::Exact);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(
        y[i], static_cast<float>(mimo::device::geluValue(x[i], Gelu::Quick)));
    EXPECT_FLOAT_EQ(dx[i], static_cast<float>(dy[i] * mimo::device::geluSlope(
                                                          x[i], Gelu::Exact)));
  }
}

} // namespace

TEST(KernelBodiesAttention, StatsMoveBetweenALibrarysLayoutAndMimos) {
  // Two sequences of three interleaved ([S, B] lane: token s * 2 + b), two
  // heads: stats [b][h][s] = 100 b + 10 h + s.
  const int64_t B = 2, H = 2, S = 3, T = B * S;
  std::vector<float> stats(static_cast<size_t>(B * H * S)),
      lse(static_cast<size_t>(H * T), -1.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        stats[static_cast<size_t>((b * H + h) * S + s)] =
            static_cast<float>(100 * b + 10 * h + s);
  mimo::device::bodies::AttentionStatsLayout toLse{
      lse.data(), stats.data(), B, H, S, T, 1, B, true};
  for (int64_t i = 0; i < toLse.count(); ++i)
    toLse(i);
  // lse[h][token]: token 3 is sequence 1's position 1.
  EXPECT_EQ(lse[static_cast<size_t>(0 * T + 3)], 101.0f);
  EXPECT_EQ(lse[static_cast<size_t>(1 * T + 4)], 12.0f);
  for (float x : lse)
    EXPECT_GE(x, 0.0f) << "every entry written";
  std::vector<float> back(stats.size(), -1.0f);
  mimo::device::bodies::AttentionStatsLayout fromLse{
      lse.data(), back.data(), B, H, S, T, 1, B, false};
  for (int64_t i = 0; i < fromLse.count(); ++i)
    fromLse(i);
  EXPECT_EQ(back, stats);
}

TEST(KernelBodiesBf16, WidePacksGiveTheBitsOfTheNarrowOnes) {
  // Eight values an index, a partial last group, an offset start.
  std::mt19937 rng(11);
  for (int64_t n : {0, 1, 7, 8, 9, 67}) {
    auto x = random<float>(rng, n + 1, -100, 100);
    std::vector<uint16_t> narrowBits(static_cast<size_t>(n)),
        wideBits(static_cast<size_t>(n), 0xdead);
    runAll(b::ToBf16Bits{x.data() + 1, narrowBits.data(), n});
    runAll(b::ToBf16BitsWide{x.data() + 1, wideBits.data(), n});
    EXPECT_EQ(wideBits, narrowBits) << n;
    std::vector<float> narrowBack(static_cast<size_t>(n)),
        wideBack(static_cast<size_t>(n), -1.0f);
    runAll(b::FromBf16Bits{narrowBits.data(), narrowBack.data(), n});
    runAll(b::FromBf16BitsWide{wideBits.data(), wideBack.data(), n});
    EXPECT_EQ(wideBack, narrowBack) << n;
  }
}

/// Device.h: the ops take their element types; a combination no precision
/// uses is a DeviceError naming the op and the types, never another
/// kernel's reading of the bytes.
TEST(DeviceOps, ACombinationNoKernelTakesIsAnError) {
  using mimo::device::DType;
  std::unique_ptr<mimo::device::Device> cpu = mimo::device::makeCpuDevice();
  std::vector<float> x(4, 1.0f), y(4, 0.0f);
  std::vector<uint16_t> bits(4, 0);
  auto says = [](const std::function<void()> &call, const std::string &text) {
    try {
      call();
    } catch (const mimo::device::DeviceError &e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos)
          << e.what();
      return;
    }
    ADD_FAILURE() << "no DeviceError for " << text;
  };
  says([&] { cpu->convert(DType::F64, x.data(), DType::BF16, bits.data(), 2); },
       "convert: no kernel takes f64 to bf16");
  says(
      [&] {
        cpu->gemm(DType::F32, false, false, 2, 2, 1, 1.0f, x.data(), x.data(),
                  0.0f, DType::BF16, bits.data());
      },
      "gemm: no kernel takes f32 math with bf16 C");
  says(
      [&] {
        cpu->gemm(DType::BF16, false, false, 2, 2, 1, 1.0f, x.data(), x.data(),
                  1.0f, DType::BF16, bits.data());
      },
      "beta 1");
  says(
      [&] {
        cpu->geluForward(DType::BF16, bits.data(), DType::F32, y.data(), 4,
                         mimo::device::Gelu::Tanh);
      },
      "geluForward: no kernel takes bf16 to f32");
  says(
      [&] {
        cpu->residual(DType::F32, x.data(), DType::BF16, bits.data(), y.data(),
                      4);
      },
      "residual: no kernel takes bf16 branches stored as f32");
  // A same-type convert copies; F32 rounding leaves the values.
  std::vector<float> z(4, 0.0f);
  x[1] = 1.0f + 1.0f / 1024;
  cpu->convert(DType::F32, x.data(), DType::F32, z.data(), 4);
  EXPECT_EQ(z, x);
  cpu->roundTo(DType::F32, z.data(), 4);
  EXPECT_EQ(z, x);
  cpu->roundTo(DType::BF16, z.data(), 4);
  EXPECT_EQ(z[1], 1.0f);
}
