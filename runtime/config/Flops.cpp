//===- Flops.cpp - Model FLOPs of a training step -------------------------===//

#include "runtime/config/Flops.h"

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
