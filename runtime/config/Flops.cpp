//===- Flops.cpp - Model FLOPs of a training step -------------------------===//

#include "runtime/config/Flops.h"

#include "runtime/config/Parameters.h"
#include "runtime/family/ModuleFamily.h"

#include <algorithm>
#include <string>
#include <vector>

namespace mimo {

double languageForwardFlops(const ModuleConfig &m, double tokens,
                            double pairs) {
  return m.family().forwardFlops(m, 0, tokens, pairs);
}

double encoderForwardFlops(const ModuleConfig &m, int64_t outputHidden,
                           double tokens, double squares) {
  return m.family().forwardFlops(m, outputHidden, tokens, squares);
}

TokenMoments uniformMoments(int64_t min, int64_t max) {
  double a = static_cast<double>(min), b = static_cast<double>(max);
  double n = b - a + 1;
  TokenMoments m;
  m.mean = (a + b) / 2;
  m.square = ((b * (b + 1) * (2 * b + 1) - (a - 1) * a * (2 * a - 1)) / 6) / n;
  return m;
}

TokenMoments expectedSampleLength(const ModelConfig &config) {
  int64_t S = config.batch.seqLength;
  if (config.batch.packing && config.data.source == "synthetic")
    return uniformMoments(std::max<int64_t>(S / 4, 2), S);
  double s = static_cast<double>(S);
  return {s, s * s};
}

TokenMoments expectedModalityTokens(const ModelConfig &config, size_t encoder) {
  TokenMoments m;
  m.mean = static_cast<double>(config.batch.seqLength) / 8;
  m.square = m.mean * m.mean;
  if (config.data.source == "synthetic" &&
      encoder < config.data.tokensPerSample.size()) {
    const TokenRange &r = config.data.tokensPerSample[encoder].second;
    TokenMoments uniform = uniformMoments(r.min, r.max);
    double keep = 1.0 - config.data.textOnlyFraction;
    m.mean = keep * uniform.mean;
    m.square = keep * uniform.square;
  }
  return m;
}

namespace {

/// A frozen module's step (docs/model-json.md `freeze`): each weight's
/// forward GEMM, its input gradient where the backward runs through it,
/// and its weight gradient only when it trains; attention three times
/// where the backward runs. A first encoder stage's bottom layers that are
/// frozen, with the patch embedding, run no backward (as the runtime).
double frozenWork(const ModuleConfig &m, int64_t outputHidden, double tokens,
                  double squares) {
  const bool language = m.kind == ModuleKind::Language;
  const double H = static_cast<double>(m.hiddenSize);
  const double F = static_cast<double>(m.ffnHiddenSize);
  auto trains = [&](const std::string &local) { return !m.frozen(local); };
  // A weight whose forward is `forward` FLOPs, with or without a backward.
  auto weight = [&](double forward, const std::string &local, bool backward) {
    return forward * (1.0 + (backward ? 1.0 + (trains(local) ? 1.0 : 0.0) : 0));
  };
  // A LoRA adapter on a [K, N] weight (docs/model.md): x·A and (x·A)·B
  // forward; dB, du, dA and dx where the backward runs.
  auto adapter = [&](const std::string &local, double K, double N,
                     bool backward) {
    if (!m.lora || !loraTargetOf(*m.lora, local))
      return 0.0;
    const double r = static_cast<double>(m.lora->rank);
    return 2.0 * tokens * r * (K + N) * (backward ? 3.0 : 1.0);
  };
  double work = 0;
  // A first encoder stage's frozen bottom layers run no backward.
  const int64_t truncated =
      language ? 0
               : std::min(encoderFrozenLayers(m),
                          stageLayers(m, m.parallel.pp, 0).second);
  for (int64_t l = 0; l < m.layers(); ++l) {
    const std::string at = "layers." + std::to_string(l) + ".";
    const bool backward = l >= truncated;
    const double KV = static_cast<double>(m.kvHidden());
    const double A = static_cast<double>(m.attentionWidth());
    for (const char *w : {"wq", "wk", "wv", "wo"}) {
      const double N = w[1] == 'k' || w[1] == 'v' ? KV : A;
      const bool out = w[1] == 'o'; // [A, H]
      work += weight(2.0 * H * N * tokens, at + w, backward) +
              adapter(at + w, out ? A : H, out ? H : N, backward);
    }
    if (m.moe.sparse(l)) {
      // A sparse layer's MLP (family/Moe.h): its active multiply-adds, a
      // weight gradient when any of it trains; no adapters.
      bool trained = false;
      for (const std::string &n : moeMlpNames(m.moe))
        trained = trained || trains(at + n);
      work += 2.0 * m.moe.activeMacs(m.hiddenSize) * tokens *
              (1.0 + (backward ? 1.0 + (trained ? 1.0 : 0.0) : 0));
    } else {
      for (const char *w : language
                               ? std::vector<const char *>{"gate", "up", "down"}
                               : std::vector<const char *>{"fc1", "fc2"}) {
        const bool down = w[0] == 'd' || w[2] == '2';
        work += weight(2.0 * H * F * tokens, at + w, backward) +
                adapter(at + w, down ? F : H, down ? H : F, backward);
      }
    }
    work += squares * 4.0 * A * (backward ? 3.0 : 1.0);
  }
  if (language) {
    const double V = static_cast<double>(m.vocabSize);
    work += weight(2.0 * H * V * tokens, m.tieEmbeddings ? "embedding" : "head",
                   true);
  } else {
    const double D = static_cast<double>(m.featureDim);
    const double O = static_cast<double>(outputHidden);
    // The patch embedding's input needs no gradient: its dW alone.
    work += 2.0 * D * H * tokens * (trains("patch.weight") ? 2.0 : 1.0);
    work += weight(2.0 * H * O * tokens, "projection.fc1.weight", true);
    if (!m.linearProjector)
      work += weight(2.0 * O * O * tokens, "projection.fc2.weight", true);
  }
  return work;
}

} // namespace

std::vector<double> moduleFlopsPerStep(const ModelConfig &config) {
  double samples = static_cast<double>(config.batch.microBatchSize *
                                       config.batch.numMicrobatches);
  double S = static_cast<double>(config.batch.seqLength);
  const ModuleConfig &language = config.language();
  std::vector<double> flops;
  size_t e = 0;
  for (const ModuleConfig &m : config.modules) {
    if (m.kind == ModuleKind::Encoder) {
      TokenMoments c = expectedModalityTokens(config, e++);
      if (runsForwardOnly(config, m)) { // no backward at all
        flops.push_back(encoderForwardFlops(
            m, language.hiddenSize, samples * c.mean, samples * c.square));
        continue;
      }
      flops.push_back(m.freezesAny()
                          ? frozenWork(m, language.hiddenSize, samples * c.mean,
                                       samples * c.square)
                          : 3.0 * encoderForwardFlops(m, language.hiddenSize,
                                                      samples * c.mean,
                                                      samples * c.square));
    } else {
      double pairs = samples * S * (S + 1) / 2;
      flops.push_back(m.freezesAny()
                          ? frozenWork(m, 0, samples * S, pairs)
                          : 3.0 * languageForwardFlops(m, samples * S, pairs));
    }
  }
  return flops;
}

double modelFlopsPerStep(const ModelConfig &config) {
  double total = 0;
  for (double flops : moduleFlopsPerStep(config))
    total += flops;
  return total;
}

} // namespace mimo
