//===- Calibrate.cpp - Measuring a device profile -------------------------===//

#include "runtime/exec/Calibrate.h"

#include "runtime/comm/Comm.h"
#include "runtime/device/Devices.h"
#include "runtime/device/Tensor.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanFile.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <thread>
#include <vector>

namespace mimo::exec {

namespace {

using Clock = std::chrono::steady_clock;

/// Seconds per call of `body`: repeated until `budget` seconds have passed
/// (after one warm-up call), the device synchronised around the timing.
double timePerCall(device::Device &dev, const std::function<void()> &body,
                   double budget) {
  body();
  dev.synchronize();
  int64_t calls = 0;
  Clock::time_point start = Clock::now();
  double elapsed = 0;
  do {
    int64_t batch = std::max<int64_t>(1, calls);
    for (int64_t i = 0; i < batch; ++i)
      body();
    dev.synchronize();
    calls += batch;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < budget);
  return elapsed / static_cast<double>(calls);
}

/// A device buffer of `n` floats filled with small values.
struct Buffer {
  device::Device &dev;
  float *data;
  Buffer(device::Device &dev, int64_t n) : dev(dev) {
    data = static_cast<float *>(dev.allocate(std::max<int64_t>(n, 1) * 4));
    std::vector<float> host(static_cast<size_t>(std::max<int64_t>(n, 1)));
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = 0.01f * static_cast<float>(static_cast<int64_t>(i % 17) - 8);
    dev.upload(data, host.data(), static_cast<int64_t>(host.size()) * 4);
  }
  ~Buffer() { dev.release(data); }
};

/// Buffer's values rounded to bf16, as bits (precision "bf16"'s
/// activations).
device::Tensor bf16Values(device::Device &dev, int64_t n) {
  Buffer values(dev, n);
  device::Tensor bits =
      device::Tensor::empty(dev, std::max<int64_t>(n, 1), device::DType::BF16);
  dev.convert(device::DType::F32, values.data, device::DType::BF16, bits.raw(),
              n);
  return bits;
}

struct IndexBuffer {
  device::Device &dev;
  int64_t *data;
  IndexBuffer(device::Device &dev, const std::vector<int64_t> &host)
      : dev(dev) {
    data = static_cast<int64_t *>(dev.allocate(
        static_cast<int64_t>(std::max<size_t>(host.size(), 1)) * 8));
    dev.upload(data, host.data(), static_cast<int64_t>(host.size()) * 8);
  }
  ~IndexBuffer() { dev.release(data); }
};

std::vector<RatePoint> measureGemm(device::Device &dev, bool gpu, bool bf16) {
  std::vector<RatePoint> points;
  std::vector<int64_t> sizes = {16, 32, 64, 128, 256, 512, 1024};
  if (gpu) {
    sizes.push_back(2048);
    sizes.push_back(4096);
  }
  for (int64_t n : sizes) {
    Buffer a(dev, n * n), b(dev, n * n), c(dev, n * n);
    double seconds = timePerCall(
        dev,
        [&] {
          dev.gemm(bf16 ? device::DType::BF16 : device::DType::F32, false,
                   false, n, n, n, 1.0f, a.data, b.data, 0.0f,
                   device::DType::F32, c.data);
        },
        gpu ? 0.05 : 0.1);
    double flops = 2.0 * static_cast<double>(n * n * n);
    points.push_back({static_cast<double>(n), flops / seconds / 1e12});
  }
  return points;
}

/// Causal attention over samples of `span` tokens; bf16: as precision
/// "bf16" runs it (tensor cores on a GPU). On the CPU 4 heads of 32 over
/// about 1024 tokens in all; on a GPU a shape that fills it, as a model's
/// layer does (16 heads of 128 over 16384 tokens: 4 heads of 32 over 4096
/// tokens kept most multiprocessors idle and measured a fifth of the rate
/// a 1B model's layers get), and spans up to 4096.
void measureAttention(device::Device &dev, bool gpu, bool bf16,
                      std::vector<RatePoint> &forward,
                      std::vector<RatePoint> &backward) {
  const int64_t heads = gpu ? 16 : 4, d = gpu ? 128 : 32, H = heads * d;
  std::vector<int64_t> spans = {16, 64, 128, 256, 512, 1024};
  if (gpu)
    spans.insert(spans.end(), {2048, 4096});
  for (int64_t span : spans) {
    int64_t tokens = std::max<int64_t>(span, gpu ? 16384 : 1024);
    int64_t samples = tokens / span;
    tokens = samples * span;
    std::vector<int64_t> pos(static_cast<size_t>(tokens)),
        seg(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) {
      pos[static_cast<size_t>(t)] = t % span;
      seg[static_cast<size_t>(t)] = t / span;
    }
    const device::tiles::Plan plan = device::tiles::plan(
        pos.data(), seg.data(), pos.data(), seg.data(), tokens, tokens, true);
    IndexBuffer packed(dev, plan.packed);
    const device::tiles::PlanView view = plan.view(packed.data);
    // bf16: q, k, v, o and dO as bf16 buffers (the bits below).
    Buffer q(dev, tokens * H), k(dev, tokens * H), v(dev, tokens * H),
        o(dev, tokens * H), lse(dev, tokens * heads), dout(dev, tokens * H),
        dq(dev, tokens * H), dk(dev, tokens * H), dv(dev, tokens * H);
    const int64_t bits = bf16 ? tokens * H : 0;
    device::Tensor qb = bf16Values(dev, bits), kb = bf16Values(dev, bits),
                   vb = bf16Values(dev, bits), ob = bf16Values(dev, bits),
                   doutb = bf16Values(dev, bits);
    device::AttentionArgs args;
    args.dtype = bf16 ? device::DType::BF16 : device::DType::F32;
    args.q = bf16 ? qb.raw() : static_cast<const void *>(q.data);
    args.k = bf16 ? kb.raw() : static_cast<const void *>(k.data);
    args.v = bf16 ? vb.raw() : static_cast<const void *>(v.data);
    args.plan = view;
    args.heads = args.kvHeads = heads;
    args.headDim = d;
    void *out = bf16 ? ob.raw() : static_cast<void *>(o.data);
    const void *dOut =
        bf16 ? doutb.raw() : static_cast<const void *>(dout.data);
    double budget = gpu ? 0.05 : 0.1;
    double fwd = timePerCall(
        dev, [&] { dev.attentionForward(args, out, lse.data); }, budget);
    double bwd = timePerCall(
        dev,
        [&] {
          dev.attentionBackward(args, out, lse.data, dOut, dq.data, dk.data,
                                dv.data);
        },
        budget);
    // cost/CostModel.h counts 4 H FLOPs per attended (query, key) pair.
    double pairs = static_cast<double>(plan.pairs());
    double flops = 4.0 * static_cast<double>(H) * pairs;
    forward.push_back({static_cast<double>(span), flops / fwd / 1e12});
    backward.push_back({static_cast<double>(span), flops / bwd / 1e12});
  }
}

/// Round trip and bandwidth between two ranks of the local backend.
LinkCost measureLink(device::DeviceKind kind) {
  auto world = comm::makeLocalWorld(2);
  const int64_t big = int64_t(16) << 20;
  double latency = 0, transfer = 0;
  auto body = [&](int64_t rank) {
    std::unique_ptr<device::Device> dev = device::makeDevice(kind, rank, 1);
    std::unique_ptr<comm::Comm> c = comm::makeLocalComm(world, rank);
    c->setDevice(dev.get());
    void *small = dev->allocate(8);
    void *large = dev->allocate(big);
    dev->fillZero(small, 8);
    dev->fillZero(large, big);
    dev->synchronize();
    auto pingPong = [&](void *data, int64_t bytes, int rounds) {
      Clock::time_point start = Clock::now();
      for (int i = 0; i < rounds; ++i) {
        if (rank == 0) {
          c->send(1, 1, data, bytes);
          c->recv(1, 2, data, bytes);
        } else {
          c->recv(0, 1, data, bytes);
          c->send(0, 2, data, bytes);
        }
      }
      dev->synchronize();
      return std::chrono::duration<double>(Clock::now() - start).count() /
             (2.0 * rounds);
    };
    // The median of several batches: one busy moment skews a mean.
    auto median = [&](void *data, int64_t bytes, int rounds) {
      std::vector<double> times;
      for (int batch = 0; batch < 7; ++batch)
        times.push_back(pingPong(data, bytes, rounds));
      std::sort(times.begin(), times.end());
      return times[times.size() / 2];
    };
    pingPong(small, 8, 20);
    double l = median(small, 8, 100);
    pingPong(large, big, 1);
    double t = median(large, big, 2);
    if (rank == 0) {
      latency = l;
      transfer = t;
    }
    dev->release(small);
    dev->release(large);
  };
  std::thread other(body, 1);
  body(0);
  other.join();
  LinkCost link;
  link.latencyUs = latency * 1e6;
  double payload = std::max(transfer - latency, 1e-9);
  link.bandwidthGBs = static_cast<double>(big) / payload / 1e9;
  return link;
}

/// The small model whose real forward and backward times set the
/// profile's compute_scale: an encoder and a language model, one rank.
const char *kCalibrationModel = R"({
  "version": 1, "name": "calibration", "seed": 1,
  "batch": {"micro_batch_size": 4, "num_microbatches": 2, "seq_length": 128},
  "modules": [
    {"name": "images", "kind": "encoder", "special_token_id": 1000,
     "arch": {"feature_dim": 48, "hidden_size": 64, "num_layers": 2,
              "num_heads": 4, "ffn_hidden_size": 256}},
    {"name": "language", "kind": "language",
     "arch": {"vocab_size": 1024, "hidden_size": 128, "num_layers": 2,
              "num_heads": 4, "ffn_hidden_size": 512}}],
  "data": {"source": "synthetic", "tokens_per_sample": {"images": [16, 32]}},
  "train": {"steps": 3}
})";

/// The seconds of the calibration model's forwards and backwards in its
/// last step (one rank, one thread), and the cost model's prediction of
/// them under `profile`.
std::pair<double, double> layerTimes(device::DeviceKind kind,
                                     const DeviceProfile &profile,
                                     int64_t microBatchSize) {
  ParseResult parsed = parseModelConfig(kCalibrationModel, "calibration");
  std::string error;
  if (!parsed.config)
    throw device::DeviceError("the calibration model does not parse");
  parsed.config->batch.microBatchSize = microBatchSize;
  std::optional<Plan> plan = buildPlan(*parsed.config, &error);
  if (!plan)
    throw device::DeviceError("the calibration model does not build: " + error);
  RunOptions options;
  options.steps = 6;
  options.device = kind;
  options.threads = 1;
  options.collectTrace = true;
  RunResult run = runLocal(*plan, options);
  if (run.exitCode != 0)
    throw device::DeviceError("the calibration model failed: " + run.error);
  // Each step's forwards and backwards; the median of steps 3 to 6.
  std::vector<double> steps(1, 0.0);
  for (const TraceEvent &e : run.trace) {
    if (e.name.rfind("optimizer_step", 0) == 0)
      steps.push_back(0);
    else if (e.name.rfind("forward ", 0) == 0 ||
             e.name.rfind("backward ", 0) == 0)
      steps.back() += e.durationUs * 1e-6;
  }
  steps.resize(std::min<size_t>(steps.size(), 6));
  steps.erase(steps.begin(), steps.begin() + std::min<size_t>(2, steps.size()));
  std::sort(steps.begin(), steps.end());
  double measured = steps.empty() ? 0 : steps[steps.size() / 2];
  CostModel costs(plan->topology, plan->config, profile,
                  defaultCluster(profile));
  double predicted = 0;
  for (const Instr &in : plan->programs[plan->rankProgram[0]].instrs)
    if (in.op == InstrOp::Forward || in.op == InstrOp::Backward)
      predicted += costs.work(0, in).compute;
  return {measured, predicted};
}

/// Fits measured = scale x predicted + overhead x (layer passes) over the
/// calibration model at two batch sizes (docs/tune.md). On a GPU the scale
/// stays 1 and only the overhead is fitted: the kernels' rates are measured
/// at shapes that fill the device, and the calibration model's are far too
/// small for its time to scale with them (the first H100 profile fitted a
/// scale of 2.2 there, which made a 1B model's predicted step 2.3 times its
/// measured one; with 1 it is within 10%).
void fitLayerCosts(device::DeviceKind kind, DeviceProfile &p) {
  p.computeScale = 1;
  p.layerOverheadUs = 0;
  const bool gpu = kind != device::DeviceKind::Cpu;
  auto [bigMeasured, bigPredicted] = layerTimes(kind, p, 8);
  auto [smallMeasured, smallPredicted] = layerTimes(kind, p, 1);
  DeviceProfile unit = p;
  unit.layerOverheadUs = 1e6; // one second per layer pass
  double passes = layerTimes(kind, unit, 1).second - smallPredicted;
  double scale =
      gpu ? 1.0
          : (bigMeasured - smallMeasured) / (bigPredicted - smallPredicted);
  double overhead = (smallMeasured - scale * smallPredicted) / passes;
  if (!(scale > 0) || !(overhead >= 0) || !(passes > 0)) {
    scale = gpu ? 1.0 : bigPredicted > 0 ? bigMeasured / bigPredicted : 1;
    overhead = 0;
  }
  p.computeScale = scale;
  p.layerOverheadUs = overhead * 1e6;
}

/// Bytes per second one member of a two-rank all-reduce (1 MiB each) gets
/// through on the local backend: the copies, the sum and the staging of
/// mimo's collectives (CPU only).
double measureCollective(device::DeviceKind kind) {
  if (kind != device::DeviceKind::Cpu)
    return 0;
  auto world = comm::makeLocalWorld(2);
  const int64_t count = int64_t(1) << 18; // floats: 1 MiB
  double seconds = 0;
  auto body = [&](int64_t rank) {
    std::unique_ptr<device::Device> dev = device::makeDevice(kind, rank, 1);
    std::unique_ptr<comm::Comm> c = comm::makeLocalComm(world, rank);
    c->setDevice(dev.get());
    Buffer data(*dev, count);
    std::vector<int64_t> group = {0, 1};
    std::vector<double> times;
    for (int batch = 0; batch < 8; ++batch) {
      Clock::time_point start = Clock::now();
      for (int i = 0; i < 5; ++i)
        c->allReduceSum(group, data.data, count);
      dev->synchronize();
      times.push_back(
          std::chrono::duration<double>(Clock::now() - start).count() / 5);
    }
    std::sort(times.begin() + 1, times.end()); // the first warms up
    if (rank == 0)
      seconds = times[1 + (times.size() - 1) / 2];
  };
  std::thread other(body, 1);
  body(0);
  other.join();
  return seconds > 0 ? 4.0 * static_cast<double>(count) / seconds / 1e9 : 0;
}

std::string today() {
  std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d", std::gmtime(&now));
  return text;
}

} // namespace

DeviceProfile
calibrate(device::DeviceKind kind,
          const std::function<void(const std::string &)> &progress,
          device::AttentionChoice attention) {
  const bool gpu = kind == device::DeviceKind::Cuda;
  // One thread: CPU rates are per core.
  std::unique_ptr<device::Device> dev =
      device::makeDevice(kind, 0, 1, attention);
  DeviceProfile p;
  p.kind = gpu ? "cuda" : "cpu";
  p.measured = true;
  p.cores = gpu ? 1 : device::defaultThreads(1);
  p.device = gpu ? dev->name() : "cpu (" + std::to_string(p.cores) + " cores)";
  p.source = "mimo-run --calibrate, " + today();
  p.memoryBytes =
      static_cast<double>(device::availableBytes(kind, gpu ? 0 : -1));
  progress("GEMM throughput");
  p.gemm = measureGemm(*dev, gpu, false);
  progress("GEMM throughput with bf16 operands");
  p.gemmBf16 = measureGemm(*dev, gpu, true);
  progress("attention forward and backward");
  measureAttention(*dev, gpu, false, p.attentionForward, p.attentionBackward);
  p.attentionBackend = gpu && attention != device::AttentionChoice::Mimo &&
                               device::cudnnStatus().problem.empty()
                           ? "cudnn"
                           : "mimo";
  progress("attention forward and backward in bf16 (" + p.attentionBackend +
           ")");
  measureAttention(*dev, gpu, true, p.attentionBf16Forward,
                   p.attentionBf16Backward);
  progress("memory bandwidth and kernel overhead");
  {
    const int64_t n = int64_t(16) << 20; // 64 MiB per operand
    Buffer a(*dev, n), b(*dev, n), c(*dev, n);
    double seconds = timePerCall(
        *dev, [&] { dev->add(device::DType::F32, c.data, a.data, b.data, n); },
        0.2);
    p.memoryGBs = 3.0 * 4.0 * static_cast<double>(n) / seconds / 1e9;
    Buffer one(*dev, 1);
    p.kernelOverheadUs =
        1e6 * timePerCall(*dev, [&] { dev->scale(one.data, 1.0f, 1); }, 0.05);
  }
  progress("a small model's forward and backward");
  fitLayerCosts(kind, p);
  progress("messages between two ranks");
  p.link = measureLink(kind);
  p.collectiveGBs = measureCollective(kind);
  // The GPU's published peaks; a CPU has none here: the best GEMM rate of
  // all its cores.
  auto peakOf = [&](const std::vector<RatePoint> &rates, double published) {
    double best = 0;
    for (const RatePoint &r : rates)
      best = std::max(best, r.tflops);
    return gpu && published > 0 ? published
                                : best * static_cast<double>(p.cores);
  };
  p.peakTflops = peakOf(p.gemm, device::cudaStatus().peakFp32Tflops);
  p.peakTflopsBf16 = peakOf(p.gemmBf16, device::cudaStatus().peakBf16Tflops);
  return p;
}

} // namespace mimo::exec
