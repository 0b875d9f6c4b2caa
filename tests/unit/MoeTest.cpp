//===- MoeTest.cpp - Mixture of experts: routing, losses, model.json ------===//
//
// family/Moe.h's routing against its definition in docs/model.md, written
// again here in double, and its router backward against central
// differences of that definition; then arch.moe's keys in model.json.
//
//===----------------------------------------------------------------------===//

#include "runtime/config/ModelConfig.h"
#include "runtime/family/Moe.h"
#include "runtime/support/Random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

using namespace mimo;
using mimo::exec::Stream;

namespace {

MoeConfig config(int64_t experts, int64_t topK, bool sigmoid, bool norm) {
  MoeConfig moe;
  moe.experts = experts;
  moe.topK = topK;
  moe.router.sigmoid = sigmoid;
  moe.router.normTopk = norm;
  return moe;
}

std::vector<float> randomLogits(int64_t rows, int64_t experts, uint64_t seed) {
  Stream rng(seed);
  std::vector<float> z(static_cast<size_t>(rows * experts));
  for (float &v : z)
    v = static_cast<float>(4 * rng.uniform() - 2);
  return z;
}

/// docs/model.md's objective of one microbatch's routing, in double, for
/// fixed routes `choice`: Σ_t Σ_j c[t, j] · w[t, j] + a · aux + b · z, over
/// the real rows for the two losses.
double objective(const MoeConfig &moe, const std::vector<double> &z,
                 const std::vector<int32_t> &choice,
                 const std::vector<double> &c, const std::vector<uint8_t> &real,
                 double a, double b) {
  const auto E = static_cast<size_t>(moe.experts),
             K = static_cast<size_t>(moe.topK);
  const size_t rows = z.size() / E;
  double total = 0, n = 0, zsum = 0;
  std::vector<double> count(E, 0), prob(E, 0);
  for (size_t t = 0; t < rows; ++t) {
    std::vector<double> s(E), p(E);
    double top = -HUGE_VAL, sum = 0;
    for (size_t e = 0; e < E; ++e)
      top = std::max(top, z[t * E + e]);
    for (size_t e = 0; e < E; ++e)
      sum += std::exp(z[t * E + e] - top);
    const double lse = top + std::log(sum);
    double all = 0;
    for (size_t e = 0; e < E; ++e) {
      s[e] = moe.router.sigmoid ? 1 / (1 + std::exp(-z[t * E + e]))
                                : std::exp(z[t * E + e] - lse);
      all += s[e];
    }
    for (size_t e = 0; e < E; ++e)
      p[e] = moe.router.sigmoid ? s[e] / all : s[e];
    double chosen = 0;
    for (size_t j = 0; j < K; ++j)
      chosen += s[static_cast<size_t>(choice[t * K + j])];
    for (size_t j = 0; j < K; ++j) {
      const double w = s[static_cast<size_t>(choice[t * K + j])] /
                       (moe.router.normTopk ? chosen : 1.0);
      total += c[t * K + j] * w;
    }
    if (!real[t])
      continue;
    n += 1;
    zsum += lse * lse;
    for (size_t j = 0; j < K; ++j)
      count[static_cast<size_t>(choice[t * K + j])] += 1;
    for (size_t e = 0; e < E; ++e)
      prob[e] += p[e];
  }
  double aux = 0;
  for (size_t e = 0; e < E; ++e)
    aux += count[e] / (static_cast<double>(K) * n) * prob[e] / n;
  aux *= static_cast<double>(E);
  return total + a * aux + b * zsum / n;
}

TEST(Moe, RoutesToTheTopKWithTheirWeights) {
  const float z[] = {0.5f, 2.0f, -1.0f, 2.0f}; // a tie: the lower index first
  for (bool sigmoid : {false, true})
    for (bool norm : {false, true}) {
      MoeRouting r = routeTokens(config(4, 2, sigmoid, norm), z, 1, 4);
      ASSERT_EQ(r.choice, (std::vector<int32_t>{1, 3}));
      const double s = sigmoid ? 1 / (1 + std::exp(-2.0))
                               : std::exp(2.0) / (std::exp(0.5) +
                                                  2 * std::exp(2.0) +
                                                  std::exp(-1.0));
      const double w = norm ? 0.5 : s;
      EXPECT_NEAR(r.weight[0], w, 1e-7);
      EXPECT_NEAR(r.weight[1], w, 1e-7);
      double total = 0;
      for (double p : r.prob)
        total += p;
      EXPECT_NEAR(total, 1.0, 1e-12); // P is a distribution either way
    }
}

TEST(Moe, LossesOfABalancedAndAnUnbalancedRouter) {
  // Uniform probabilities and counts: aux = E · Σ (1/E)(1/E) = 1.
  MoeConfig moe = config(4, 1, false, false);
  std::vector<float> z(4 * 4, 0.0f);
  MoeRouting r = routeTokens(moe, z.data(), 4, 4);
  std::vector<uint8_t> real(4, 1);
  std::vector<double> stats = moeStatistics(r, real);
  EXPECT_EQ(r.choice, (std::vector<int32_t>{0, 0, 0, 0})); // ties: expert 0
  // Every slot chose expert 0 with P = 1/4 each: aux = 4 · 1 · 1/4 = 1.
  EXPECT_NEAR(moeLosses(moe, stats).aux, 1.0, 1e-12);
  EXPECT_NEAR(moeLosses(moe, stats).z, std::log(4.0) * std::log(4.0), 1e-12);
  // Collapsed onto expert 2 with probability ~1: aux -> E.
  for (size_t t = 0; t < 4; ++t)
    z[t * 4 + 2] = 30.0f;
  r = routeTokens(moe, z.data(), 4, 4);
  stats = moeStatistics(r, real);
  EXPECT_NEAR(moeLosses(moe, stats).aux, 4.0, 1e-9);
  // Padding rows count nowhere; statistics add across ranks.
  real = {1, 1, 0, 0};
  std::vector<double> half = moeStatistics(r, real);
  EXPECT_EQ(half.back(), 2.0);
  std::vector<double> other = moeStatistics(r, {0, 0, 1, 1});
  for (size_t i = 0; i < half.size(); ++i)
    EXPECT_DOUBLE_EQ(half[i] + other[i], stats[i]);
  // No real row: no loss.
  EXPECT_EQ(moeLosses(moe, moeStatistics(r, {0, 0, 0, 0})).aux, 0.0);
}

TEST(Moe, RouterBackwardMatchesFiniteDifferences) {
  const int64_t rows = 6, E = 5;
  for (bool sigmoid : {false, true})
    for (bool norm : {false, true})
      for (int64_t K : {int64_t(1), int64_t(2), int64_t(5)}) {
        SCOPED_TRACE(std::string(sigmoid ? "sigmoid" : "softmax") +
                     (norm ? " normalised" : "") + " top-" +
                     std::to_string(K));
        MoeConfig moe = config(E, K, sigmoid, norm);
        std::vector<float> z = randomLogits(rows, E, 7 + K);
        MoeRouting r = routeTokens(moe, z.data(), rows, E);
        std::vector<uint8_t> real = {1, 1, 0, 1, 1, 1};
        Stream rng(3);
        std::vector<float> dweight(static_cast<size_t>(rows * K));
        std::vector<double> c(dweight.size());
        for (size_t i = 0; i < c.size(); ++i)
          dweight[i] = static_cast<float>(c[i] = rng.uniform() - 0.5);
        const double a = 0.7, b = 0.3;
        std::vector<double> stats = moeStatistics(r, real);
        std::vector<float> dz =
            moeRouterBackward(moe, r, dweight, real, stats, a, b);
        std::vector<double> x(z.begin(), z.end());
        for (size_t i = 0; i < x.size(); ++i) {
          const double h = 1e-6, saved = x[i];
          x[i] = saved + h;
          double up = objective(moe, x, r.choice, c, real, a, b);
          x[i] = saved - h;
          double down = objective(moe, x, r.choice, c, real, a, b);
          x[i] = saved;
          EXPECT_NEAR(dz[i], (up - down) / (2 * h), 2e-6) << "logit " << i;
        }
      }
}

TEST(Moe, SparseLayersAndNames) {
  MoeConfig moe = config(8, 2, false, true);
  EXPECT_TRUE(moe.sparse(0));
  EXPECT_EQ(moe.sparseLayers(6), 6);
  moe.allLayers = false;
  moe.layers = {1, 3};
  EXPECT_FALSE(moe.sparse(0));
  EXPECT_TRUE(moe.sparse(3));
  EXPECT_EQ(moe.sparseLayers(4), 2);
  EXPECT_EQ(moeExpertName(7, "down"), "experts.7.down");
  EXPECT_EQ(moeSharedName("up"), "shared.up");
  EXPECT_FALSE(MoeConfig().sparse(0)); // no experts: dense
}

} // namespace
