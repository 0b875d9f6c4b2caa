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

#include "runtime/model/Model.h"
#include "runtime/support/Random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <thread>

using namespace mimo;
using namespace mimo::exec;

namespace {

struct SingleRank {
  std::shared_ptr<comm::LocalWorld> world = comm::makeLocalWorld(1);
  std::unique_ptr<comm::Comm> comm = comm::makeLocalComm(world, 0);
  std::unique_ptr<Device> dev = device::makeCpuDevice();
  SingleRank() { device::setCurrentDevice(dev.get()); }
  ~SingleRank() { device::setCurrentDevice(nullptr); }
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

/// `floor`: below it an error counts as absolute (the fp32 forward's
/// noise in a difference quotient is ~1e-5).
double relativeError(double analytic, double numeric, double floor = 1e-3) {
  return std::abs(analytic - numeric) /
         std::max({std::abs(analytic), std::abs(numeric), floor});
}

/// Checks at least 64 elements (all of smaller ones) of every parameter of
/// `stage` against central differences of `objective`, given the analytic
/// gradients; then the whole gradient at once along a random direction
/// (g . d against the difference quotient along d), which sees an error in
/// any element, at a tolerance ten times tighter.
/// `trainableOnly`: frozen parameters are left out (their gradients are
/// scratch); `floor` as relativeError's for each element; `along` the
/// tolerance along the random direction.
template <typename Objective>
int checkParameters(Stage &stage, const std::vector<std::vector<float>> &grads,
                    Objective objective, bool trainableOnly = false,
                    double floor = 1e-3, double along = 2e-3) {
  int checked = 0;
  Stream rng(17);
  std::vector<std::vector<float>> direction;
  double analytic = 0;
  for (size_t i = 0; i < stage.params().size(); ++i) {
    Param &p = stage.params()[i];
    direction.emplace_back(static_cast<size_t>(p.value.size()));
    if (trainableOnly && p.frozen)
      continue; // a zero direction
    for (size_t k = 0; k < direction[i].size(); ++k) {
      direction[i][k] = static_cast<float>(rng.uniform() - 0.5);
      analytic += double(direction[i][k]) * grads[i][k];
    }
  }
  auto shift = [&](float by) {
    for (size_t i = 0; i < stage.params().size(); ++i) {
      float *values = stage.params()[i].value.data();
      for (size_t k = 0; k < direction[i].size(); ++k)
        values[k] += by * direction[i][k];
    }
  };
  const float eps = 1e-2f;
  std::vector<std::vector<float>> saved;
  for (Param &p : stage.params())
    saved.push_back(p.value.toHost());
  shift(eps);
  double up = objective();
  shift(-2 * eps);
  double down = objective();
  for (size_t i = 0; i < stage.params().size(); ++i)
    std::copy(saved[i].begin(), saved[i].end(), stage.params()[i].value.data());
  double numeric = (up - down) / (2.0 * eps);
  EXPECT_LT(relativeError(analytic, numeric), along)
      << "along a random direction: analytic " << analytic << " numeric "
      << numeric;
  for (size_t i = 0; i < stage.params().size(); ++i) {
    Param &p = stage.params()[i];
    if (trainableOnly && p.frozen)
      continue;
    size_t n = static_cast<size_t>(p.value.size());
    for (size_t k = 0; k < n; k += std::max<size_t>(1, n / 64)) {
      float &element = p.value.data()[k]; // CPU device: host memory
      float saved = element;
      float h = 1e-2f * std::max(1.0f, std::abs(saved));
      element = saved + h;
      double up = objective();
      element = saved - h;
      double down = objective();
      element = saved;
      double numeric = (up - down) / (2.0 * h);
      EXPECT_LT(relativeError(grads[i][k], numeric, floor), 2e-2)
          << p.name << "[" << k << "]: analytic " << grads[i][k] << " numeric "
          << numeric;
      ++checked;
    }
  }
  return checked;
}

std::vector<std::vector<float>> gradients(Stage &stage) {
  std::vector<std::vector<float>> grads;
  for (Param &p : stage.params())
    grads.push_back(p.grad.toHost());
  return grads;
}

TEST(Tensor, MovesLeaveEmptyTensorsAndClonesCopy) {
  SingleRank r;
  Tensor a = Tensor::fromHost({1, 2, 3});
  Tensor b = a.clone();
  b.data()[0] = 7;
  EXPECT_EQ(a.toHost(), (std::vector<float>{1, 2, 3}));
  Tensor c = std::move(a);
  EXPECT_EQ(a.size(), 0);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(c.view(1, 2).toHost(), (std::vector<float>{2, 3}));
  EXPECT_THROW(c.view(2, 2), std::out_of_range);
}

TEST(Tensor, ViewsShareTheAllocationAndOutliveTheirSource) {
  SingleRank r;
  Tensor v;
  {
    Tensor a = Tensor::fromHost({1, 2, 3, 4});
    v = a.view(1, 2);
    a.data()[1] = 9; // visible through the view: no copy was made
  }
  EXPECT_EQ(v.toHost(), (std::vector<float>{9, 3}));
  EXPECT_EQ(v.shape(), (std::vector<int64_t>{2}));
  Tensor m = v.reshaped({1, 2});
  EXPECT_EQ(m.shape(), (std::vector<int64_t>{1, 2}));
  EXPECT_THROW(v.reshaped({3}), std::invalid_argument);
}

TEST(Tensor, CarriesItsTypeAndRefusesAnother) {
  SingleRank r;
  Tensor ids = Tensor::fromHost(std::vector<int64_t>{4, -1, 7});
  EXPECT_EQ(ids.dtype(), device::DType::I64);
  EXPECT_EQ(ids.bytes(), 24);
  EXPECT_EQ(ids.toHost<int64_t>(), (std::vector<int64_t>{4, -1, 7}));
  EXPECT_THROW(ids.data(), device::DeviceError); // not fp32
  Tensor z = Tensor::zeros(3, device::DType::F64);
  EXPECT_EQ(z.toHost<double>(), (std::vector<double>{0, 0, 0}));
}

TEST(Tensor, StageParametersAreViewsOfFlatBuffersGroupedForReduction) {
  SingleRank r;
  StageContext ctx = r.context();
  ctx.sequenceParallel = true;
  ctx.tp = 2; // one TP rank of two (no collective is called here)
  LanguageStage lm(languageConfig(), makeShard(1, 2, true, false), ctx);
  FlatParams &flat = lm.flat();
  int64_t total = 0;
  for (Param &p : lm.params()) {
    total += p.size();
    EXPECT_EQ(p.value.size(), p.size()) << p.name;
    // The view points into the flat buffer, inside its group.
    int64_t at = p.grad.data() - flat.grads.data();
    ASSERT_GE(at, 0) << p.name;
    ASSERT_LE(at + p.size(), flat.total) << p.name;
    if (p.partialOverTp) {
      EXPECT_LE(at + p.size(), flat.tpPartial) << p.name;
    } else if (p.replicatedOverTp) {
      EXPECT_GE(at, flat.tpPartial) << p.name;
      EXPECT_LE(at + p.size(), flat.replicated) << p.name;
    } else {
      EXPECT_GE(at, flat.replicated) << p.name;
    }
    EXPECT_EQ(p.value.data() - flat.values.data(), at);
    EXPECT_EQ(p.m.data() - flat.m.data(), at);
  }
  // Each parameter starts at a multiple of 64 values (256 bytes).
  EXPECT_LE(total, flat.total);
  EXPECT_LT(flat.total, total + 64 * static_cast<int64_t>(lm.params().size()));
  for (Param &p : lm.params())
    EXPECT_EQ((p.grad.data() - flat.grads.data()) % 64, 0) << p.name;
  EXPECT_GT(flat.tpPartial, 0); // norms are summed over TP under SP
  EXPECT_LE(flat.tpPartial, flat.replicated); // all norms: equal here
  EXPECT_LT(flat.replicated, flat.total);
}

TEST(ModelGradient, LanguageModelMatchesFiniteDifferences) {
  SingleRank r;
  LanguageStage lm(languageConfig(), makeShard(1, 1, false, false),
                   r.context());
  std::vector<EncoderInfo> encoders = {{"images", 60, 6}};
  Microbatch batch = smallBatch();
  LanguageLane lane = languageLane(batch, encoders, 0, 2, false, 1);
  std::vector<float> values(3 * 16);
  Stream rng(9);
  for (float &v : values)
    v = static_cast<float>(rng.uniform() - 0.5);
  Tensor modality = Tensor::fromHost(values);
  double invN = 0.25;
  auto loss = [&]() {
    Tensor input = lm.shard(0, lane, {&modality});
    Tensor sum = Tensor::zeros(1, device::DType::F64);
    lm.forward(0, lane, std::move(input), invN, &sum);
    return sum.toHost<double>()[0];
  };
  loss();
  Tensor dx = lm.backward(0, nullptr);
  std::vector<float> modalityGrad =
      lm.inputBackward(0, lane, dx, 1)[0].toHost();
  // Analytic gradients of every parameter, then central differences.
  int checked = checkParameters(lm, gradients(lm), loss);
  EXPECT_GT(checked, 30);
  // The modality rows' gradient (what the bridge sends back).
  for (size_t k = 0; k < values.size(); k += 7) {
    float &element = modality.data()[k];
    float saved = element;
    element = saved + 1e-2f;
    double up = loss();
    element = saved - 1e-2f;
    double down = loss();
    element = saved;
    double numeric = (up - down) / 2e-2;
    EXPECT_LT(relativeError(modalityGrad[k], numeric), 2e-2)
        << "modality[" << k << "]";
  }
}

/// Finite differences of `lm`'s parameters on smallBatch()'s lane with
/// zero modality rows: the loss (with `aux`, plus the sparse layers' aux
/// loss), its backward run first; checkParameters' other arguments.
int checkLanguageStage(LanguageStage &lm, bool aux, bool trainableOnly,
                       double floor, double along) {
  std::vector<EncoderInfo> encoders = {{"images", 60, 6}};
  Microbatch batch = smallBatch();
  LanguageLane lane = languageLane(batch, encoders, 0, 2, false, 1);
  Tensor modality = Tensor::zeros(3 * 16);
  auto objective = [&]() {
    Tensor input = lm.shard(0, lane, {&modality});
    Tensor sum = Tensor::zeros(1, device::DType::F64);
    lm.forward(0, lane, std::move(input), 0.25, &sum);
    return sum.toHost<double>()[0] + (aux ? lm.takeAuxLoss() : 0.0);
  };
  objective();
  Tensor dx = lm.backward(0, nullptr);
  lm.inputBackward(0, lane, dx, 1);
  return checkParameters(lm, gradients(lm), objective, trainableOnly, floor,
                         along);
}

/// arch.head_dim (docs/model.md): heads wider and narrower than
/// hidden_size / num_heads (Qwen3's 0.6B and 30B-A3B: twice as wide), with
/// multi-query attention and qk_norm (Qwen3's), then q/k/v biases
/// (Qwen2's): q and the attention output num_heads x head_dim wide, wo
/// back to the hidden size. (Biases under qk_norm, which no family has,
/// curve the loss too much for these differences' step.)
TEST(ModelGradient, HeadDimOtherThanHiddenOverHeadsMatchesFiniteDifferences) {
  for (const int64_t headDim : {int64_t(16), int64_t(4)})
    for (const bool qwen3 : {true, false}) {
      SCOPED_TRACE("head_dim " + std::to_string(headDim) +
                   (qwen3 ? " qk_norm" : " qkv_bias"));
      SingleRank r;
      ModuleConfig m = languageConfig();
      ASSERT_NE(m.hiddenSize / m.numHeads, headDim);
      m.headDimKey = headDim;
      m.qkNorm = qwen3;
      m.qkvBias = !qwen3;
      m.numQueryGroups = m.numHeads / 2;
      LanguageStage lm(m, makeShard(1, 1, false, false), r.context());
      for (const Param &p : lm.params())
        if (p.name == "layers.0.wq") {
          EXPECT_EQ(p.grad.size(), m.hiddenSize * m.numHeads * headDim);
        }
      EXPECT_GT(checkLanguageStage(lm, false, false, 2e-3, 4e-3), 30);
    }
}

/// Five rows of two samples' features for encoderConfig(), and the
/// weights of a linear objective of its output (width 16).
struct EncoderInputs {
  int64_t rows = 5;
  std::vector<int64_t> segment = {0, 0, 0, 1, 1};
  std::vector<float> f = std::vector<float>(5 * 6),
                     w = std::vector<float>(5 * 16);
  Tensor features, weights;
  EncoderInputs() {
    Stream rng(3);
    for (float &v : f)
      v = static_cast<float>(2 * rng.uniform() - 1);
    for (float &v : w)
      v = static_cast<float>(rng.uniform() - 0.5);
    features = Tensor::fromHost(f);
    weights = Tensor::fromHost(w);
  }
  /// The linear objective of `encoder`'s output on these features (its
  /// gradient is `weights`).
  double objective(EncoderStage &encoder) const {
    std::vector<float> out =
        encoder.forward(0, features, segment, rows).toHost();
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i)
      sum += static_cast<double>(out[i]) * w[i];
    return sum;
  }
};

TEST(ModelGradient, EncoderMatchesFiniteDifferences) {
  SingleRank r;
  EncoderStage encoder(encoderConfig(), 16, r.context());
  EncoderInputs in;
  auto objective = [&]() { return in.objective(encoder); };
  objective();
  encoder.backward(0, in.weights);
  int checked = checkParameters(encoder, gradients(encoder), objective);
  EXPECT_GT(checked, 30);
}

/// B starts at zeros, where A's gradient is zero: random B's (and a
/// scale other than 1) make every term of docs/model.md's LoRA backward
/// count.
void randomizeLoraB(Stage &stage) {
  Stream rng(23);
  for (Param &p : stage.params())
    if (p.name.size() > 7 &&
        p.name.compare(p.name.size() - 7, 7, ".lora_B") == 0)
      for (int64_t k = 0; k < p.value.size(); ++k)
        p.value.data()[k] = static_cast<float>(0.2 * (rng.uniform() - 0.5));
}

LoraConfig allLinear(bool language, bool rslora) {
  LoraConfig lora;
  lora.rank = 3;
  lora.alpha = 5;
  lora.rslora = rslora;
  lora.targets = loraTargetNames(language);
  return lora;
}

TEST(ModelGradient, LoraAdaptersMatchFiniteDifferences) {
  { // the language model: every linear, q/k/v biases, its head saved
    SingleRank r;
    ModuleConfig m = languageConfig();
    m.qkvBias = true;
    m.lora = allLinear(true, false);
    m.lora->modulesToSave = {"head"};
    LanguageStage lm(m, makeShard(1, 1, false, false), r.context());
    randomizeLoraB(lm);
    int adapters = 0;
    for (Param &p : lm.params()) {
      adapters += isLoraFactor(p.name);
      EXPECT_EQ(p.frozen, !isLoraFactor(p.name) && p.name != "language.head")
          << p.name;
    }
    EXPECT_EQ(adapters, 2 * 7 * 2);
    // Adapter gradients are small (~1e-3): a floor above the noise.
    EXPECT_GT(checkLanguageStage(lm, false, true, 4e-3, 2e-3), 30);
  }
  { // an encoder: every linear with biases, rslora
    SingleRank r;
    ModuleConfig m = encoderConfig();
    m.bias = true;
    m.lora = allLinear(false, true);
    EncoderStage encoder(m, 16, r.context());
    randomizeLoraB(encoder);
    EncoderInputs in;
    auto objective = [&]() { return in.objective(encoder); };
    objective();
    encoder.backward(0, in.weights);
    EXPECT_GT(
        checkParameters(encoder, gradients(encoder), objective, true, 4e-3),
        30);
  }
}

/// A language model with sparse layers (docs/model.md "Mixture of
/// experts"): the objective is the LM loss plus the aux and z losses, and
/// every parameter's gradient (router, experts, shared expert and gate,
/// qk norms) matches central differences. Routing is piecewise constant:
/// with top_k = num_experts no step changes which experts a token takes,
/// so every parameter is checked; with top_k 2 a step of anything before
/// the router may flip a route, so those stay fixed (frozen) and the
/// experts, shared expert and head after it are checked (the router's
/// backward at top-k < experts: MoeTest.RouterBackward...).
TEST(ModelGradient, SparseLayersMatchFiniteDifferences) {
  for (const bool sigmoid : {false, true})
    for (const int64_t topK : {int64_t(4), int64_t(2)}) {
      SCOPED_TRACE(std::string(sigmoid ? "sigmoid" : "softmax") + " top-" +
                   std::to_string(topK));
      SingleRank r;
      ModuleConfig m = languageConfig();
      m.qkNorm = true;
      m.moe.experts = 4;
      m.moe.topK = topK;
      m.moe.expertFfn = 8;
      m.moe.sharedFfn = 16;
      m.moe.allLayers = false;
      m.moe.layers = {1};
      m.moe.router.sigmoid = sigmoid;
      m.moe.router.normTopk = sigmoid;
      m.moe.router.auxLossCoef = 0.3;
      m.moe.router.zLossCoef = 0.05;
      if (topK < m.moe.experts)
        m.freezePrefixes = {
            "embedding",         "layers.0",        "layers.1.attn_norm",
            "layers.1.wq",       "layers.1.wk",     "layers.1.wv",
            "layers.1.wo",       "layers.1.q_norm", "layers.1.k_norm",
            "layers.1.mlp_norm", "layers.1.router"};
      LanguageStage lm(m, makeShard(1, 1, false, false), r.context());
      // The routers' curvature: a looser tolerance along the direction.
      EXPECT_GT(checkLanguageStage(lm, true, topK < m.moe.experts, 4e-3, 4e-3),
                30);
    }
}

/// Every trainable parameter's gradient, by name (frozen ones' are
/// scratch nobody reads).
std::map<std::string, std::vector<float>> trainableGradients(Stage &stage) {
  std::map<std::string, std::vector<float>> grads;
  for (Param &p : stage.params())
    if (!p.frozen)
      grads[p.name] = p.grad.toHost();
  return grads;
}

TEST(ModelGradient, FrozenPartsLeaveEveryTrainableGradientBitwiseAlone) {
  // A frozen encoder body: its layers' backward and every frozen weight's
  // GEMM are skipped; the projector's gradients are those of the unfrozen
  // encoder, bit for bit.
  SingleRank r;
  ModuleConfig frozenConfig = encoderConfig();
  frozenConfig.freezePrefixes = {"patch", "layers"};
  EncoderStage whole(encoderConfig(), 16, r.context());
  EncoderStage frozen(frozenConfig, 16, r.context());
  EncoderInputs in;
  for (EncoderStage *e : {&whole, &frozen}) {
    e->forward(0, in.features, in.segment, in.rows);
    e->backward(0, in.weights);
  }
  auto a = trainableGradients(whole), b = trainableGradients(frozen);
  ASSERT_EQ(b.size(), 4u); // the projector's two weights and biases
  for (const auto &[name, grad] : b)
    EXPECT_EQ(grad, a[name]) << name;
  // The language model with its embedding, head and first layer frozen:
  // the other layers' gradients and the modality rows' are unchanged.
  ModuleConfig lmFrozen = languageConfig();
  lmFrozen.freezePrefixes = {"embedding", "head", "layers.0"};
  LanguageStage lmWhole(languageConfig(), makeShard(1, 1, false, false),
                        r.context());
  LanguageStage lmPart(lmFrozen, makeShard(1, 1, false, false), r.context());
  std::vector<EncoderInfo> encoders = {{"images", 60, 6}};
  Microbatch batch = smallBatch();
  LanguageLane lane = languageLane(batch, encoders, 0, 2, false, 1);
  std::vector<float> values(3 * 16);
  Stream rng(9);
  for (float &v : values)
    v = static_cast<float>(rng.uniform() - 0.5);
  Tensor modality = Tensor::fromHost(values);
  std::vector<std::vector<float>> modalityGrads;
  for (LanguageStage *lm : {&lmWhole, &lmPart}) {
    Tensor sum = Tensor::zeros(1, device::DType::F64);
    lm->forward(0, lane, lm->shard(0, lane, {&modality}), 0.25, &sum);
    Tensor dx = lm->backward(0, nullptr);
    modalityGrads.push_back(lm->inputBackward(0, lane, dx, 1)[0].toHost());
  }
  EXPECT_EQ(modalityGrads[0], modalityGrads[1]);
  a = trainableGradients(lmWhole);
  b = trainableGradients(lmPart);
  EXPECT_LT(b.size(), a.size());
  EXPECT_GT(b.size(), 5u);
  for (const auto &[name, grad] : b)
    EXPECT_EQ(grad, a[name]) << name;
}

/// Zero bubble (docs/plan.md): a backward between deferWeightGrads and
/// stopDeferring makes the input gradient and the norms' gradients, and
/// leaves the layers' weight GEMMs and every "done" notice to
/// weightBackward, after which the gradients and notices are the whole
/// backward's, bit for bit.
TEST(ModelGradient, ASplitBackwardLeavesTheLayersWeightGradients) {
  SingleRank r;
  LanguageStage whole(languageConfig(), makeShard(1, 1, false, false),
                      r.context());
  LanguageStage split(languageConfig(), makeShard(1, 1, false, false),
                      r.context());
  split.splitBackward();
  std::vector<std::vector<size_t>> wholeNotices, splitNotices;
  whole.onGradsDone(
      [&](const std::vector<size_t> &p) { wholeNotices.push_back(p); });
  split.onGradsDone(
      [&](const std::vector<size_t> &p) { splitNotices.push_back(p); });
  std::vector<EncoderInfo> encoders = {{"images", 60, 6}};
  Microbatch batch = smallBatch();
  LanguageLane lane = languageLane(batch, encoders, 0, 2, false, 1);
  Tensor modality = Tensor::fromHost(std::vector<float>(3 * 16, 0.25f));
  std::vector<std::vector<float>> inputGrads;
  for (LanguageStage *lm : {&whole, &split}) {
    Tensor sum = Tensor::zeros(1, device::DType::F64);
    lm->forward(0, lane, lm->shard(0, lane, {&modality}), 0.25, &sum);
    if (lm == &split)
      lm->deferWeightGrads(0);
    inputGrads.push_back(lm->backward(0, nullptr).toHost());
    lm->stopDeferring();
  }
  EXPECT_EQ(inputGrads[0], inputGrads[1]);
  EXPECT_TRUE(splitNotices.empty());
  EXPECT_EQ(split.waitingWeightGrads(), 1u);
  auto a = trainableGradients(whole), b = trainableGradients(split);
  int waiting = 0;
  for (const auto &[name, grad] : b) {
    const bool gemm = name.find(".layers.") != std::string::npos &&
                      name.find("norm") == std::string::npos;
    if (gemm) {
      ++waiting;
      EXPECT_EQ(grad, std::vector<float>(grad.size(), 0.0f)) << name;
    } else {
      EXPECT_EQ(grad, a[name]) << name;
    }
  }
  EXPECT_GT(waiting, 0);
  split.weightBackward(0);
  EXPECT_EQ(split.waitingWeightGrads(), 0u);
  EXPECT_EQ(trainableGradients(split), a);
  EXPECT_EQ(splitNotices, wholeNotices);
}

} // namespace
