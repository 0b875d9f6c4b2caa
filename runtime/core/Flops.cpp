//===- Flops.cpp - Model FLOPs of a training step -------------------------===//

#include "runtime/core/Flops.h"

namespace mimo {

double languageForwardFlops(const ModuleConfig &m, double tokens,
                            double pairs) {
  double H = static_cast<double>(m.hiddenSize);
  double F = static_cast<double>(m.ffnHiddenSize);
  double V = static_cast<double>(m.vocabSize);
  double L = static_cast<double>(m.numLayers);
  double perToken = L * 2.0 * (4.0 * H * H + 3.0 * H * F) + 2.0 * H * V;
  return tokens * perToken + L * pairs * 4.0 * H;
}

double encoderForwardFlops(const ModuleConfig &m, int64_t outputHidden,
                           double tokens, double squares) {
  double H = static_cast<double>(m.hiddenSize);
  double F = static_cast<double>(m.ffnHiddenSize);
  double D = static_cast<double>(m.featureDim);
  double O = static_cast<double>(outputHidden);
  double L = static_cast<double>(m.numLayers);
  double perToken = 2.0 * D * H + L * 2.0 * (4.0 * H * H + 2.0 * H * F) +
                    2.0 * (H * O + O * O);
  return tokens * perToken + L * squares * 4.0 * H;
}

TokenMoments expectedModalityTokens(const ModelConfig &config, size_t encoder) {
  TokenMoments m;
  m.mean = static_cast<double>(config.batch.seqLength) / 8;
  m.square = m.mean * m.mean;
  if (config.data.source == "synthetic" &&
      encoder < config.data.tokensPerSample.size()) {
    const TokenRange &r = config.data.tokensPerSample[encoder].second;
    double a = static_cast<double>(r.min), b = static_cast<double>(r.max);
    double n = b - a + 1, keep = 1.0 - config.data.textOnlyFraction;
    m.mean = keep * (a + b) / 2;
    m.square = keep *
               ((b * (b + 1) * (2 * b + 1) - (a - 1) * a * (2 * a - 1)) / 6) /
               n;
  }
  return m;
}

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
      flops.push_back(3.0 * encoderForwardFlops(m, language.hiddenSize,
                                                samples * c.mean,
                                                samples * c.square));
    } else {
      flops.push_back(3.0 * languageForwardFlops(m, samples * S,
                                                 samples * S * (S + 1) / 2));
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
