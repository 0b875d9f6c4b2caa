//===- Moe.cpp - Mixture of experts: names and routing --------------------===//

#include "runtime/family/Moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mimo {

bool MoeConfig::sparse(int64_t layer) const {
  if (experts <= 0)
    return false;
  return allLayers || std::binary_search(layers.begin(), layers.end(), layer);
}

int64_t MoeConfig::sparseLayers(int64_t numLayers) const {
  int64_t n = 0;
  for (int64_t l = 0; l < numLayers; ++l)
    n += sparse(l);
  return n;
}

double MoeConfig::activeMacs(int64_t hidden) const {
  const auto H = static_cast<double>(hidden);
  return H * static_cast<double>(experts) +
         3.0 * H * static_cast<double>(topK * expertFfn + sharedFfn) +
         (sharedFfn > 0 && sharedGate ? H : 0.0);
}

std::string moeExpertName(int64_t expert, const std::string &linear) {
  return "experts." + std::to_string(expert) + "." + linear;
}

int64_t moeExpertOf(const std::string &local) {
  const std::string key = ".experts.";
  const size_t at = local.find(key);
  if (at == std::string::npos || local.compare(0, 7, "layers.") != 0)
    return -1;
  const size_t begin = at + key.size();
  const size_t end = local.find('.', begin);
  if (end == std::string::npos || end == begin)
    return -1;
  int64_t expert = 0;
  for (size_t i = begin; i < end; ++i) {
    if (local[i] < '0' || local[i] > '9' || expert > (int64_t(1) << 40))
      return -1;
    expert = expert * 10 + (local[i] - '0');
  }
  return expert;
}

std::string moeSharedName(const std::string &linear) {
  return "shared." + linear;
}

MoeRouting routeTokens(const MoeConfig &moe, const float *logits, int64_t rows,
                       int64_t experts) {
  MoeRouting r;
  r.rows = rows;
  r.experts = experts;
  r.topK = moe.topK;
  const auto E = static_cast<size_t>(experts);
  const auto K = static_cast<size_t>(moe.topK);
  r.choice.resize(static_cast<size_t>(rows) * K);
  r.weight.resize(static_cast<size_t>(rows) * K);
  r.score.resize(static_cast<size_t>(rows) * E);
  r.prob.resize(static_cast<size_t>(rows) * E);
  r.lse.resize(static_cast<size_t>(rows));
  r.logit.assign(logits, logits + static_cast<size_t>(rows) * E);
  std::vector<int32_t> order(E);
  for (size_t t = 0; t < static_cast<size_t>(rows); ++t) {
    const float *z = logits + t * E;
    double *s = r.score.data() + t * E, *p = r.prob.data() + t * E;
    double top = -HUGE_VAL;
    for (size_t e = 0; e < E; ++e)
      top = std::max(top, static_cast<double>(z[e]));
    double sum = 0;
    for (size_t e = 0; e < E; ++e)
      sum += std::exp(static_cast<double>(z[e]) - top);
    r.lse[t] = top + std::log(sum);
    if (!moe.router.sigmoid) {
      for (size_t e = 0; e < E; ++e)
        p[e] = s[e] = std::exp(static_cast<double>(z[e]) - r.lse[t]);
    } else {
      double total = 0;
      for (size_t e = 0; e < E; ++e)
        total += s[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(z[e])));
      for (size_t e = 0; e < E; ++e)
        p[e] = total > 0 ? s[e] / total : 0.0;
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return s[a] > s[b] || (std::isnan(s[b]) && !std::isnan(s[a]));
    });
    double chosen = 0;
    for (size_t j = 0; j < K; ++j)
      chosen += s[order[j]];
    for (size_t j = 0; j < K; ++j) {
      r.choice[t * K + j] = order[j];
      double w = s[order[j]];
      if (moe.router.normTopk)
        w = chosen > 0 ? w / chosen : 0.0;
      r.weight[t * K + j] = static_cast<float>(w);
    }
  }
  return r;
}

std::vector<double> moeStatistics(const MoeRouting &routing,
                                  const std::vector<uint8_t> &real) {
  const auto E = static_cast<size_t>(routing.experts);
  const auto K = static_cast<size_t>(routing.topK);
  std::vector<double> stats(2 * E + 2, 0.0);
  for (size_t t = 0; t < static_cast<size_t>(routing.rows); ++t) {
    if (!real[t])
      continue;
    for (size_t j = 0; j < K; ++j)
      stats[static_cast<size_t>(routing.choice[t * K + j])] += 1;
    for (size_t e = 0; e < E; ++e)
      stats[E + e] += routing.prob[t * E + e];
    stats[2 * E] += routing.lse[t] * routing.lse[t];
    stats[2 * E + 1] += 1;
  }
  return stats;
}

MoeLosses moeLosses(const MoeConfig &moe, const std::vector<double> &stats) {
  MoeLosses out;
  const auto E = static_cast<size_t>(moe.experts);
  const double n = stats[2 * E + 1];
  if (n <= 0)
    return out;
  double sum = 0;
  for (size_t e = 0; e < E; ++e)
    sum +=
        (stats[e] / (static_cast<double>(moe.topK) * n)) * (stats[E + e] / n);
  out.aux = static_cast<double>(moe.experts) * sum;
  out.z = stats[2 * E] / n;
  return out;
}

std::vector<float> moeRouterBackward(const MoeConfig &moe,
                                     const MoeRouting &routing,
                                     const std::vector<float> &dweight,
                                     const std::vector<uint8_t> &real,
                                     const std::vector<double> &stats,
                                     double auxScale, double zScale) {
  const auto E = static_cast<size_t>(routing.experts);
  const auto K = static_cast<size_t>(routing.topK);
  const double n = stats[2 * E + 1];
  std::vector<float> dz(static_cast<size_t>(routing.rows) * E, 0.0f);
  std::vector<double> ds(E), dp(E);
  for (size_t t = 0; t < static_cast<size_t>(routing.rows); ++t) {
    const double *s = routing.score.data() + t * E;
    const double *p = routing.prob.data() + t * E;
    std::fill(ds.begin(), ds.end(), 0.0);
    // The combine weights w_j = s_j (/ Σ_i s_i when normalised).
    double chosen = 0, weighted = 0;
    for (size_t j = 0; j < K; ++j) {
      chosen += s[routing.choice[t * K + j]];
      weighted += static_cast<double>(dweight[t * K + j]) *
                  static_cast<double>(routing.weight[t * K + j]);
    }
    for (size_t j = 0; j < K; ++j) {
      const auto e = static_cast<size_t>(routing.choice[t * K + j]);
      const double dw = dweight[t * K + j];
      if (!moe.router.normTopk)
        ds[e] += dw;
      else if (chosen > 0)
        ds[e] += (dw - weighted) / chosen;
    }
    const bool losses = real[t] && n > 0;
    // The aux loss: d/dP_e(t) = experts · f_e / N.
    if (losses && auxScale != 0) {
      for (size_t e = 0; e < E; ++e)
        dp[e] = auxScale * static_cast<double>(moe.experts) *
                (stats[e] / (static_cast<double>(moe.topK) * n)) / n;
      if (!moe.router.sigmoid) {
        for (size_t e = 0; e < E; ++e)
          ds[e] += dp[e];
      } else { // P = s / Σ s
        double total = 0, dot = 0;
        for (size_t e = 0; e < E; ++e) {
          total += s[e];
          dot += dp[e] * p[e];
        }
        if (total > 0)
          for (size_t e = 0; e < E; ++e)
            ds[e] += (dp[e] - dot) / total;
      }
    }
    float *out = dz.data() + t * E;
    if (!moe.router.sigmoid) {
      double dot = 0;
      for (size_t e = 0; e < E; ++e)
        dot += s[e] * ds[e];
      for (size_t e = 0; e < E; ++e)
        out[e] = static_cast<float>(s[e] * (ds[e] - dot));
    } else {
      for (size_t e = 0; e < E; ++e)
        out[e] = static_cast<float>(ds[e] * s[e] * (1.0 - s[e]));
    }
    // The z loss: d(lse^2)/dz_e = 2 · lse · softmax(z)_e.
    if (losses && zScale != 0) {
      const double lse = routing.lse[t];
      for (size_t e = 0; e < E; ++e) {
        const double soft =
            !moe.router.sigmoid
                ? s[e]
                : std::exp(static_cast<double>(routing.logit[t * E + e]) - lse);
        out[e] += static_cast<float>(zScale * 2.0 * lse * soft / n);
      }
    }
  }
  return dz;
}

} // namespace mimo
