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

double modelFlopsPerStep(const ModelConfig &config) {
  double samples = static_cast<double>(config.batch.microBatchSize *
                                       config.batch.numMicrobatches);
  double S = static_cast<double>(config.batch.seqLength);
  const ModuleConfig &language = config.language();
  double forward =
      languageForwardFlops(language, samples * S, samples * S * (S + 1) / 2);
  size_t e = 0;
  for (const ModuleConfig &m : config.modules) {
    if (m.kind != ModuleKind::Encoder)
      continue;
    // E[c] and E[c^2] of a count uniform in [min, max], zero for text-only
    // samples.
    double mean = S / 8, square = mean * mean;
    if (config.data.source == "synthetic" &&
        e < config.data.tokensPerSample.size()) {
      const TokenRange &r = config.data.tokensPerSample[e].second;
      double a = static_cast<double>(r.min), b = static_cast<double>(r.max);
      double n = b - a + 1;
      double keep = 1.0 - config.data.textOnlyFraction;
      mean = keep * (a + b) / 2;
      square = keep * ((b * (b + 1) * (2 * b + 1) -
                        (a - 1) * a * (2 * a - 1)) /
                       6) /
               n;
    }
    forward += encoderForwardFlops(m, language.hiddenSize, samples * mean,
                                   samples * square);
    ++e;
  }
  return 3.0 * forward;
}

} // namespace mimo
