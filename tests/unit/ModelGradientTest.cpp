//===- ModelGradientTest.cpp - Whole stages against finite differences ----===//
//
// The kernels are checked one by one in KernelsTest; this checks how the
// model composes them: the gradient of the loss of a whole single-rank
// language model (embedding with modality rows, RoPE attention, SwiGLU,
// final norm, head, cross-entropy) and of a whole encoder (patch
// embedding, per-sample attention, GeLU MLP, projection) against central
// finite differences of the fp32 forward.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Model.h"
#include "runtime/exec/Random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

using namespace mimo;
using namespace mimo::exec;

namespace {

struct SingleRank {
  std::shared_ptr<comm::LocalWorld> world = comm::makeLocalWorld(1);
  std::unique_ptr<comm::Comm> comm = comm::makeLocalComm(world, 0);
  std::unique_ptr<Device> dev = makeCpuDevice();
  StageContext context() {
    StageContext ctx;
    ctx.comm = comm.get();
    ctx.dev = dev.get();
    ctx.seed = 11;
    ctx.tpGroup = ctx.cpGroup = ctx.tpcpGroup = {0};
    ctx.tpcpCoords = {{0, 0}};
    return ctx;
  }
};

ModuleConfig languageConfig() {
  ModuleConfig m;
  m.name = "language";
  m.kind = ModuleKind::Language;
  m.vocabSize = 64;
  m.hiddenSize = 16;
  m.numLayers = 2;
  m.numHeads = 2;
  m.ffnHiddenSize = 32;
  return m;
}

ModuleConfig encoderConfig() {
  ModuleConfig m;
  m.name = "images";
  m.kind = ModuleKind::Encoder;
  m.specialTokenId = 60;
  m.featureDim = 6;
  m.hiddenSize = 8;
  m.numLayers = 2;
  m.numHeads = 2;
  m.ffnHiddenSize = 16;
  return m;
}

/// Two samples of 8 tokens; sample 0 has 3 modality tokens (id 60).
Microbatch smallBatch() {
  Microbatch mb;
  Stream rng(5);
  for (int b = 0; b < 2; ++b) {
    Sample s;
    s.length = 8;
    for (int i = 0; i < 8; ++i)
      s.ids.push_back(rng.below(59));
    s.counts = {b == 0 ? 3 : 0};
    if (b == 0)
      s.ids[2] = s.ids[3] = s.ids[4] = 60;
    s.features.resize(1);
    mb.samples.push_back(s);
  }
  return mb;
}

double relativeError(double analytic, double numeric) {
  return std::abs(analytic - numeric) /
         std::max({std::abs(analytic), std::abs(numeric), 1e-3});
}

TEST(ModelGradient, LanguageModelMatchesFiniteDifferences) {
  SingleRank r;
  LanguageStage lm(languageConfig(), makeShard(1, 1, false, false),
                   r.context());
  std::vector<EncoderInfo> encoders = {{"images", 60, 6}};
  Microbatch batch = smallBatch();
  LanguageLane lane = languageLane(batch, encoders, 0, 2, false, 1);
  Buf modality(3 * 16);
  Stream rng(9);
  for (float &v : modality)
    v = static_cast<float>(rng.uniform() - 0.5);
  double invN = 0.25;
  auto loss = [&]() {
    Buf input = lm.shard(0, lane, {&modality});
    double sum = 0;
    lm.forward(0, lane, input, invN, &sum);
    return sum;
  };
  loss();
  Buf dx = lm.backward(0, nullptr);
  std::vector<Buf> modalityGrad = lm.inputBackward(0, lane, dx, 1);
  // Analytic gradients of every parameter, then central differences.
  std::vector<Buf> grads;
  for (Param &p : lm.params())
    grads.push_back(p.grad);
  int checked = 0;
  for (size_t i = 0; i < lm.params().size(); ++i) {
    Param &p = lm.params()[i];
    for (size_t k = 0; k < p.value.size(); k += p.value.size() / 3 + 1) {
      float saved = p.value[k];
      float h = 1e-2f * std::max(1.0f, std::abs(saved));
      p.value[k] = saved + h;
      double up = loss();
      p.value[k] = saved - h;
      double down = loss();
      p.value[k] = saved;
      double numeric = (up - down) / (2.0 * h);
      EXPECT_LT(relativeError(grads[i][k], numeric), 2e-2)
          << p.name << "[" << k << "]: analytic " << grads[i][k] << " numeric "
          << numeric;
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
  // The modality rows' gradient (what the bridge sends back).
  for (size_t k = 0; k < modality.size(); k += 7) {
    float saved = modality[k];
    modality[k] = saved + 1e-2f;
    double up = loss();
    modality[k] = saved - 1e-2f;
    double down = loss();
    modality[k] = saved;
    double numeric = (up - down) / 2e-2;
    EXPECT_LT(relativeError(modalityGrad[0][k], numeric), 2e-2)
        << "modality[" << k << "]";
  }
}

TEST(ModelGradient, EncoderMatchesFiniteDifferences) {
  SingleRank r;
  EncoderStage encoder(encoderConfig(), 16, r.context());
  int64_t rows = 5;
  std::vector<int64_t> segment = {0, 0, 0, 1, 1};
  Buf features(static_cast<size_t>(rows * 6)), weights(rows * 16);
  Stream rng(3);
  for (float &v : features)
    v = static_cast<float>(2 * rng.uniform() - 1);
  for (float &v : weights)
    v = static_cast<float>(rng.uniform() - 0.5);
  auto objective = [&]() {
    Buf out = encoder.forward(0, features, segment, rows);
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i)
      sum += static_cast<double>(out[i]) * weights[i];
    return sum;
  };
  objective();
  encoder.backward(0, weights);
  std::vector<Buf> grads;
  for (Param &p : encoder.params())
    grads.push_back(p.grad);
  int checked = 0;
  for (size_t i = 0; i < encoder.params().size(); ++i) {
    Param &p = encoder.params()[i];
    for (size_t k = 0; k < p.value.size(); k += p.value.size() / 3 + 1) {
      float saved = p.value[k];
      float h = 1e-2f * std::max(1.0f, std::abs(saved));
      p.value[k] = saved + h;
      double up = objective();
      p.value[k] = saved - h;
      double down = objective();
      p.value[k] = saved;
      double numeric = (up - down) / (2.0 * h);
      EXPECT_LT(relativeError(grads[i][k], numeric), 2e-2)
          << p.name << "[" << k << "]: analytic " << grads[i][k] << " numeric "
          << numeric;
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

} // namespace
