//===- FastKernelsTest.cpp - The CPU device's float kernels ---------------===//
//
// device/cpu/FastKernels.h against the float64 reference kernels of
// Kernels.h on random inputs (float rounding apart, they compute the same
// function), fastExp's accuracy over its whole range, results that do not
// depend on the number of threads, and the CPU device's block cache.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/FastKernels.h"
#include "runtime/device/Activation.h"
#include "runtime/device/Device.h"
#include "runtime/device/cpu/FastMath.h"
#include "runtime/device/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace k = mimo::kernels;
namespace f = mimo::kernels::fast;

namespace {

std::vector<float> random(std::mt19937 &rng, size_t n, float lo = -1,
                          float hi = 1) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

std::vector<double> toDouble(const std::vector<float> &v) {
  return std::vector<double>(v.begin(), v.end());
}

/// max |a - ref| / max |ref|.
double relativeError(const std::vector<float> &a,
                     const std::vector<double> &ref) {
  double scale = 1e-30, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]))
      return std::numeric_limits<double>::infinity();
    scale = std::max(scale, std::abs(ref[i]));
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - ref[i]));
  }
  return worst / scale;
}

TEST(FastMath, ExpWithinTwoUlpOverItsRange) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0173f) {
    double ref = std::exp(static_cast<double>(x));
    double ulp = std::nextafter(static_cast<float>(ref),
                                std::numeric_limits<float>::infinity()) -
                 static_cast<float>(ref);
    worst = std::max(worst, std::abs(k::fastExp(x) - ref) / ulp);
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(k::fastExp(0.0f), 1.0f);
  EXPECT_GT(k::fastExp(-1000.0f), 0.0f); // clamped, never 0 or NaN
  EXPECT_TRUE(std::isnan(k::fastExp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_LT(k::fastExp(-1000.0f), 1e-37f);
}

TEST(FastKernels, CrossEntropyMatchesTheReference) {
  std::mt19937 rng(1);
  const int64_t n = 37, V = 2500, vb = 2500; // a second vocab shard
  auto logits = random(rng, n * V, -8, 8);
  std::vector<int64_t> targets;
  for (int64_t i = 0; i < n; ++i)
    targets.push_back((i * 977) % (3 * V));
  std::vector<float> mx(n);
  k::crossEntropyRowMax<float>(logits.data(), n, V, mx.data());
  std::vector<float> sum(n), target(n);
  f::crossEntropySums(logits.data(), targets.data(), n, V, vb, mx.data(),
                      sum.data(), target.data());
  auto ld = toDouble(logits), mxd = toDouble(mx);
  std::vector<double> sumd(n), targetd(n);
  k::crossEntropySums<double>(ld.data(), targets.data(), n, V, vb, mxd.data(),
                              sumd.data(), targetd.data());
  EXPECT_LE(relativeError(sum, sumd), 1e-6);
  EXPECT_LE(relativeError(target, targetd), 0.0);
  auto scale = random(rng, n, 0, 1);
  scale[3] = 0; // a masked row
  std::vector<float> dl(n * V);
  f::crossEntropyBackward(logits.data(), targets.data(), n, V, vb, mx.data(),
                          sum.data(), scale.data(), dl.data());
  auto sumd2 = toDouble(sum), scaled = toDouble(scale);
  std::vector<double> dld(n * V);
  k::crossEntropyBackward<double>(ld.data(), targets.data(), n, V, vb,
                                  mxd.data(), sumd2.data(), scaled.data(),
                                  dld.data());
  EXPECT_LE(relativeError(dl, dld), 1e-6);
}

TEST(FastKernels, ActivationsAndAdamWMatchTheReference) {
  std::mt19937 rng(2);
  const int64_t n = 10007;
  auto x = random(rng, n, -6, 6), u = random(rng, n), dy = random(rng, n);
  auto xd = toDouble(x), ud = toDouble(u), dyd = toDouble(dy);
  std::vector<float> y(n), g(n), h(n);
  std::vector<double> yd(n), gd(n), hd(n);
  f::swigluForward(x.data(), u.data(), y.data(), n);
  k::swigluForward<double>(xd.data(), ud.data(), yd.data(), n);
  EXPECT_LE(relativeError(y, yd), 1e-6);
  f::swigluBackward(x.data(), u.data(), dy.data(), g.data(), h.data(), n);
  k::swigluBackward<double>(xd.data(), ud.data(), dyd.data(), gd.data(),
                            hd.data(), n);
  EXPECT_LE(relativeError(g, gd), 1e-6);
  EXPECT_LE(relativeError(h, hd), 1e-6);
  f::geluForward(x.data(), y.data(), n);
  k::geluForward<double>(xd.data(), yd.data(), n);
  EXPECT_LE(relativeError(y, yd), 1e-6);
  f::geluBackward(x.data(), dy.data(), g.data(), n);
  k::geluBackward<double>(xd.data(), dyd.data(), gd.data(), n);
  EXPECT_LE(relativeError(g, gd), 5e-6); // tanh from exp loses a few bits
  // AdamW with clipping and weight decay.
  auto p = random(rng, n), m = random(rng, n, -0.1f, 0.1f),
       v = random(rng, n, 0, 0.01f);
  auto pd = toDouble(p), md = toDouble(m), vd = toDouble(v);
  mimo::device::AdamWStep s;
  s.lr = 1e-3;
  s.weightDecay = 0.1;
  s.step = 5;
  s.gradScale = 0.5;
  f::adamw(p.data(), dy.data(), m.data(), v.data(), n, float(s.lr),
           float(s.beta1), float(s.beta2), float(s.eps), float(s.weightDecay),
           float(s.biasCorrection1()), float(s.biasCorrection2()),
           float(s.gradScale));
  k::adamw<double>(pd.data(), dyd.data(), md.data(), vd.data(), n, s.lr,
                   s.beta1, s.beta2, s.eps, s.weightDecay, s.step, s.gradScale);
  EXPECT_LE(relativeError(p, pd), 1e-6);
  EXPECT_LE(relativeError(m, md), 1e-6);
  EXPECT_LE(relativeError(v, vd), 1e-6);
}

// Element by element, not relative to the largest: GELU's tanh form in
// float, written 0.5v(1 + tanh(u)), lost all but a few bits where tanh(u)
// nears -1 (2e-3 off at v = -4; the GPU check compares one element there).
TEST(FastKernels, GeluIsCloseAtEveryElementOfItsTail) {
  std::vector<float> x, dy;
  for (float v = -9.0f; v <= 9.0f; v += 0.0625f) {
    x.push_back(v);
    dy.push_back(1.0f);
  }
  int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size()), g(x.size());
  f::geluForward(x.data(), y.data(), n);
  f::geluBackward(x.data(), dy.data(), g.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    double yv = mimo::device::geluValue(v, mimo::device::Gelu::Tanh);
    double gv = mimo::device::geluSlope(v, mimo::device::Gelu::Tanh);
    // exp(-2u) in float is good to |2u| float roundings: its conditioning.
    double u2 = 2 * mimo::device::kGeluTanhC *
                (v + mimo::device::kGeluTanhA * v * v * v);
    double limit = (8 + std::abs(u2)) * 1.2e-7;
    EXPECT_LE(std::abs(y[i] - yv), limit * std::abs(yv)) << "x " << v;
    EXPECT_LE(std::abs(g[i] - gv), limit * std::abs(gv) + 1e-7) << "x " << v;
  }
}

TEST(FastKernels, SumsAreFixedOrderAndClose) {
  std::mt19937 rng(3);
  for (int64_t n :
       {int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(100003)}) {
    auto x = random(rng, static_cast<size_t>(n));
    double ref = 0, refSq = 0;
    for (float v : x) {
      ref += v;
      refSq += static_cast<double>(v) * v;
    }
    EXPECT_NEAR(f::sum(x.data(), n), ref, 1e-5 * (1 + std::abs(ref)));
    EXPECT_NEAR(f::sumSquares(x.data(), n), refSq, 1e-9 * (1 + refSq));
    std::vector<float> e(x.size());
    f::expShifted(x.data(), 0.5f, e.data(), n);
    for (int64_t i = 0; i < n; i += 97)
      EXPECT_NEAR(e[static_cast<size_t>(i)], std::exp(x[i] - 0.5), 1e-6);
  }
}

TEST(FastKernels, ResultsDoNotDependOnThreads) {
  std::mt19937 rng(4);
  const int64_t n = 300, V = 1000, size = 1 << 17;
  auto logits = random(rng, n * V, -5, 5), scale = random(rng, n, 0, 1);
  std::vector<int64_t> targets(n, 7);
  std::vector<float> mx(n, 5.0f), sum(n, 1e3f);
  auto x = random(rng, size), u = random(rng, size);
  auto run = [&](int threads) {
    f::setThreads(threads);
    std::vector<float> out(n * V), s(n), t(n), y(size), g(size), h(size);
    f::crossEntropyBackward(logits.data(), targets.data(), n, V, 0, mx.data(),
                            sum.data(), scale.data(), out.data());
    f::crossEntropySums(logits.data(), targets.data(), n, V, 0, mx.data(),
                        s.data(), t.data());
    f::swigluForward(x.data(), u.data(), y.data(), size);
    f::swigluBackward(x.data(), u.data(), y.data(), g.data(), h.data(), size);
    out.insert(out.end(), s.begin(), s.end());
    out.insert(out.end(), y.begin(), y.end());
    out.insert(out.end(), g.begin(), g.end());
    return out;
  };
  std::vector<float> one = run(1), two = run(2), three = run(3);
  f::setThreads(1);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * 4), 0);
  EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * 4), 0);
}

TEST(CpuDevice, FreedBlocksAreReusedBySizeClass) {
  std::unique_ptr<mimo::device::Device> dev = mimo::device::makeCpuDevice();
  void *a = dev->allocate(1 << 20);
  void *b = dev->allocate(3000);
  dev->release(a);
  void *again = dev->allocate((1 << 20) - 100);
  EXPECT_EQ(again, a); // same class: reused
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  dev->release(again);
  dev->release(b);
  void *c = dev->allocate(5 << 20); // another class: fresh
  EXPECT_NE(c, b);
  dev->release(c);
}

} // namespace
