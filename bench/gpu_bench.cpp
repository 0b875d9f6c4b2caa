//===- gpu_bench.cpp - First GPU benchmarks (docs/gpu.md) -----------------===//
//
// Prints markdown tables (scripts/gpu-check.sh writes them into
// bench/results/gpu-<device>.md), every figure measured in this run:
//   1. GEMM: mimo's GEMM path (Device::gemm: cuBLASLt, fp32, TF32 off) on
//      the examples' language shapes and a ~1B model's, forward and both
//      backward products, against the same run's ceilings: a large cuBLASLt
//      fp32 GEMM and a large bf16 GEMM (fp32 accumulation).
//   2. Bridges: fan-in and fan-out between 4 lanes and 1 (5 ranks as
//      threads, each its own stream on the GPU, the local communicator)
//      against one device-to-device copy of the same bytes.
//   3. Attention: mimo's fused kernels (device/FlashBodies.h, bf16 on the
//      tensor cores: FlashMmaBodies.h) and cuDNN's fused attention
//      (--attention cudnn) at sequence 2k, 4k and 8k, 16 heads of 64 and
//      of 128, causal, forward and backward TFLOP/s timed by CUDA events
//      (FlashAttention's count: 4 d FLOPs per attended pair and head
//      forward, 2.5 times that backward), and the peak bytes a call
//      allocates beside its inputs and outputs (linear in the sequence).
//      `--only attention [--json FILE]`: this part alone, every row also
//      as JSON (scripts/gpu-check.sh's attention phase).
//   4. Row kernels: RMSNorm forward (fp32 and bf16 out) and backward,
//      SwiGLU with bf16 out, the cross-entropy's row max and sums, at the
//      1B model's shapes (device/RowBodies.h), in GB/s against the same
//      run's device-to-device copy.
//   5. Training: tokens/s of every example on the CUDA device against the
//      CPU device (local backend), steps after the first.
// Exits 77 without a usable GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Comm.h"
#include "runtime/device/AttentionTiles.h"
#include "runtime/device/Devices.h"
#include "runtime/device/Tensor.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanFile.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace mimo;
using device::Device;
using device::Tensor;
using Clock = std::chrono::steady_clock;

namespace {

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void cudaCheck(cudaError_t error, const char *what) {
  if (error != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " +
                             cudaGetErrorString(error));
}
void cublasCheck(cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " +
                             cublasLtGetStatusString(status));
}

/// Median seconds of `run` (which ends with a device synchronisation),
/// after warm-up.
double medianSeconds(const std::function<void()> &run, int repeats) {
  run();
  run();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    auto start = Clock::now();
    run();
    times.push_back(secondsSince(start));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

//===----------------------------------------------------------------------===//
// 1. GEMM
//===----------------------------------------------------------------------===//

/// TFLOP/s of one large square cuBLASLt GEMM of `type` inputs (fp32
/// accumulation; for fp32, TF32 off): the machine's ceiling.
double ceilingTflops(cudaDataType_t type, int64_t n) {
  size_t bytes = static_cast<size_t>(n * n) * (type == CUDA_R_32F ? 4 : 2);
  void *a = nullptr, *b = nullptr, *c = nullptr, *workspace = nullptr;
  size_t wsBytes = size_t(64) << 20;
  cudaCheck(cudaMalloc(&a, bytes), "cudaMalloc");
  cudaCheck(cudaMalloc(&b, bytes), "cudaMalloc");
  cudaCheck(cudaMalloc(&c, bytes), "cudaMalloc");
  cudaCheck(cudaMalloc(&workspace, wsBytes), "cudaMalloc");
  // Random inputs (never zeros: they can run faster than real data).
  std::vector<uint16_t> host16;
  std::vector<float> host32;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  if (type == CUDA_R_32F) {
    host32.resize(static_cast<size_t>(n * n));
    for (float &x : host32)
      x = dist(rng);
    cudaCheck(cudaMemcpy(a, host32.data(), bytes, cudaMemcpyHostToDevice),
              "up");
    cudaCheck(cudaMemcpy(b, host32.data(), bytes, cudaMemcpyHostToDevice),
              "up");
  } else {
    host16.resize(static_cast<size_t>(n * n));
    for (uint16_t &x : host16) {
      float f = dist(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      x = static_cast<uint16_t>(bits >> 16);
    }
    cudaCheck(cudaMemcpy(a, host16.data(), bytes, cudaMemcpyHostToDevice),
              "up");
    cudaCheck(cudaMemcpy(b, host16.data(), bytes, cudaMemcpyHostToDevice),
              "up");
  }
  cublasLtHandle_t handle;
  cublasCheck(cublasLtCreate(&handle), "cublasLtCreate");
  cublasLtMatmulDesc_t op;
  cublasCheck(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
              "desc");
  cublasLtMatrixLayout_t layout;
  cublasCheck(cublasLtMatrixLayoutCreate(&layout, type, n, n, n), "layout");
  cublasLtMatmulPreference_t pref;
  cublasCheck(cublasLtMatmulPreferenceCreate(&pref), "pref");
  cublasCheck(cublasLtMatmulPreferenceSetAttribute(
                  pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes,
                  sizeof(wsBytes)),
              "pref");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasCheck(cublasLtMatmulAlgoGetHeuristic(handle, op, layout, layout, layout,
                                             layout, pref, 1, &result, &found),
              "heuristic");
  if (found == 0)
    throw std::runtime_error("no cuBLASLt algorithm for the ceiling GEMM");
  float alpha = 1, beta = 0;
  double seconds = medianSeconds(
      [&] {
        cublasCheck(cublasLtMatmul(handle, op, &alpha, a, layout, b, layout,
                                   &beta, c, layout, c, layout, &result.algo,
                                   workspace, wsBytes, nullptr),
                    "cublasLtMatmul");
        cudaCheck(cudaDeviceSynchronize(), "sync");
      },
      10);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cudaFree(workspace);
  return 2.0 * static_cast<double>(n) * n * n / seconds / 1e12;
}

struct GemmShape {
  std::string what;
  int64_t M, N, K; // forward: [M,K] x [K,N]
};

/// The language module's linear layers of one model, as one rank of its
/// layout computes them (tokens of a data-parallel lane, TP shards).
std::vector<GemmShape> languageShapes(const std::string &name,
                                      const ModelConfig &config) {
  std::vector<GemmShape> shapes;
  for (const ModuleConfig &m : config.modules) {
    if (m.kind != ModuleKind::Language)
      continue;
    int64_t tp = m.parallel.tp, cp = m.parallel.cp, dp = m.parallel.dp;
    int64_t T =
        config.batch.seqLength / cp * (config.batch.microBatchSize / dp);
    int64_t H = m.hiddenSize, F = m.ffnHiddenSize, V = m.vocabSize;
    shapes.push_back({name + " qkv/out", T, H / tp, H});
    shapes.push_back({name + " gate/up", T, F / tp, H});
    shapes.push_back({name + " down", T, H, F / tp});
    shapes.push_back({name + " head", T, V / tp, H});
  }
  return shapes;
}

void benchGemm(const std::vector<GemmShape> &shapes) {
  double fp32 = ceilingTflops(CUDA_R_32F, 8192);
  double bf16 = ceilingTflops(CUDA_R_16BF, 8192);
  std::printf("\n## GEMM: mimo's path (cuBLASLt fp32, TF32 off) vs this "
              "GPU's ceilings\n\n");
  std::printf("Ceilings, 8192^3 cuBLASLt in this run: fp32 %.1f TFLOP/s, "
              "bf16 (fp32 accumulation) %.1f TFLOP/s.\n\n",
              fp32, bf16);
  std::printf("| shape | M x N x K | forward TFLOP/s | dX (NT) | dW (TN) | "
              "forward / fp32 ceiling | forward / bf16 ceiling | bf16 path "
              "forward (gemmBf16, conversion included) | bf16 path / bf16 "
              "ceiling |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::unique_ptr<Device> dev = device::makeDevice(device::DeviceKind::Cuda, 0);
  for (const GemmShape &s : shapes) {
    int64_t big = std::max({s.M * s.K, s.K * s.N, s.M * s.N});
    Tensor a = Tensor::empty(*dev, big), b = Tensor::empty(*dev, big),
           c = Tensor::empty(*dev, big);
    std::vector<float> host(static_cast<size_t>(big));
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-1, 1);
    for (float &x : host)
      x = dist(rng);
    dev->upload(a.raw(), host.data(), a.bytes());
    dev->upload(b.raw(), host.data(), b.bytes());
    double flops = 2.0 * static_cast<double>(s.M) * s.N * s.K;
    int repeats = flops > 1e11 ? 10 : 50;
    auto time = [&](bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                    bool bf16Path = false) {
      return flops / 1e12 /
             medianSeconds(
                 [&] {
                   if (bf16Path)
                     dev->gemm(mimo::device::DType::BF16, ta, tb, M, N, K, 1.0f,
                               a.data(), b.data(), 0.0f,
                               mimo::device::DType::F32, c.data());
                   else
                     dev->gemm(mimo::device::DType::F32, ta, tb, M, N, K, 1.0f,
                               a.data(), b.data(), 0.0f,
                               mimo::device::DType::F32, c.data());
                   dev->synchronize();
                 },
                 repeats);
    };
    double forward = time(false, false, s.M, s.N, s.K);
    double dx = time(false, true, s.M, s.K, s.N); // dY[M,N] W[K,N]^T
    double dw = time(true, false, s.K, s.N, s.M); // X[M,K]^T dY[M,N]
    double forwardBf16 = time(false, false, s.M, s.N, s.K, true);
    std::printf("| %s | %lld x %lld x %lld | %.2f | %.2f | %.2f | %.0f%% | "
                "%.0f%% | %.2f | %.0f%% |\n",
                s.what.c_str(), static_cast<long long>(s.M),
                static_cast<long long>(s.N), static_cast<long long>(s.K),
                forward, dx, dw, 100 * forward / fp32, 100 * forward / bf16,
                forwardBf16, 100 * forwardBf16 / bf16);
    std::fflush(stdout);
  }
}

//===----------------------------------------------------------------------===//
// 3. Attention
//===----------------------------------------------------------------------===//

/// Median seconds of `run` timed by CUDA events on `dev`'s stream (the
/// device's own clock: no host synchronisation inside the timing), after
/// two warm-up calls.
double deviceSeconds(Device &dev, const std::function<void()> &run,
                     int repeats) {
  auto *stream = static_cast<cudaStream_t>(dev.nativeStream());
  run();
  run();
  std::vector<double> times;
  cudaEvent_t start, end;
  cudaCheck(cudaEventCreate(&start), "cudaEventCreate");
  cudaCheck(cudaEventCreate(&end), "cudaEventCreate");
  for (int i = 0; i < repeats; ++i) {
    cudaCheck(cudaEventRecord(start, stream), "cudaEventRecord");
    run();
    cudaCheck(cudaEventRecord(end, stream), "cudaEventRecord");
    cudaCheck(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime");
    times.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// One attention row of the table (and of --json).
struct AttentionRow {
  std::string backend, dtype, error;
  int64_t seq = 0, heads = 0, headDim = 0;
  double fwdMs = 0, fwdTflops = 0, bwdMs = 0, bwdTflops = 0;
  int64_t extraBytes = 0;
};

/// Causal attention of one sequence of S tokens, `heads` heads of d, on
/// `dev` (whose --attention choice picks the backend).
AttentionRow timeAttention(Device &dev, const std::string &backend, bool bf16,
                           int64_t S, int64_t heads, int64_t d) {
  AttentionRow row;
  row.backend = backend;
  row.dtype = bf16 ? "bf16" : "fp32";
  row.seq = S;
  row.heads = heads;
  row.headDim = d;
  const int64_t width = heads * d;
  std::vector<int64_t> pos(static_cast<size_t>(S)),
      seg(static_cast<size_t>(S), 0);
  for (int64_t t = 0; t < S; ++t)
    pos[static_cast<size_t>(t)] = t;
  device::tiles::Plan plan = device::tiles::plan(
      pos.data(), seg.data(), pos.data(), seg.data(), S, S, true);
  Tensor packed = Tensor::empty(dev, static_cast<int64_t>(plan.packed.size()),
                                device::DType::I64);
  dev.upload(packed.raw(), plan.packed.data(), packed.bytes());
  std::vector<float> host(static_cast<size_t>(S * width));
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float &x : host)
    x = dist(rng);
  const device::DType type = bf16 ? device::DType::BF16 : device::DType::F32;
  // q, k, v and dO as the layer keeps them (bf16 bits under bf16).
  auto filled = [&] {
    Tensor values = Tensor::empty(dev, S * width);
    dev.upload(values.raw(), host.data(), values.bytes());
    if (!bf16)
      return values;
    Tensor bits = Tensor::empty(dev, S * width, device::DType::BF16);
    dev.convert(mimo::device::DType::F32, values.data(),
                mimo::device::DType::BF16, bits.data<uint16_t>(), S * width);
    return bits;
  };
  Tensor q = filled(), k = filled(), v = filled(), dout = filled();
  Tensor o = Tensor::empty(dev, S * width, type),
         lse = Tensor::empty(dev, S * heads);
  Tensor dq = Tensor::empty(dev, S * width), dk = Tensor::empty(dev, S * width),
         dv = Tensor::empty(dev, S * width);
  device::AttentionArgs args;
  args.dtype = type;
  args.q = q.raw();
  args.k = k.raw();
  args.v = v.raw();
  args.plan = plan.view(packed.data<int64_t>());
  args.heads = args.kvHeads = heads;
  args.headDim = d;
  dev.synchronize();
  const double pairs = static_cast<double>(plan.pairs());
  const double forwardFlops = 4.0 * d * heads * pairs;
  const double backwardFlops = 2.5 * forwardFlops;
  dev.resetPeakBytes();
  const int64_t before = dev.peakBytes();
  const double fwd = deviceSeconds(
      dev, [&] { dev.attentionForward(args, o.raw(), lse.data()); }, 10);
  const double bwd = deviceSeconds(
      dev,
      [&] {
        dev.attentionBackward(args, o.raw(), lse.data(), dout.raw(), dq.data(),
                              dk.data(), dv.data());
      },
      10);
  row.extraBytes = dev.peakBytes() - before;
  row.fwdMs = 1e3 * fwd;
  row.bwdMs = 1e3 * bwd;
  row.fwdTflops = forwardFlops / fwd / 1e12;
  row.bwdTflops = backwardFlops / bwd / 1e12;
  return row;
}

/// Attention: mimo's kernels (bf16 on the tensor cores, and fp32) and
/// cuDNN's fused attention (bf16), causal, one sequence of 2048, 4096 and
/// 8192 tokens, 16 heads of 64 and of 128; TFLOP/s timed by CUDA events.
/// `json`: every row as {"rows": [...]} (scripts/gpu-check.sh attention).
void benchAttention(const std::string &json) {
  std::printf("\n## Attention: fused forward and backward (causal, one "
              "sequence, 16 heads; CUDA events)\n\n");
  std::printf("| backend | dtype | sequence | head dim | forward ms | forward "
              "TFLOP/s | backward ms | backward TFLOP/s | bytes beyond "
              "inputs and outputs |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::vector<AttentionRow> rows;
  struct Backend {
    std::string name;
    device::AttentionChoice choice;
    bool bf16;
  };
  std::vector<Backend> backends = {
      {"mimo", device::AttentionChoice::Mimo, true},
      {"cudnn", device::AttentionChoice::Cudnn, true},
      {"mimo", device::AttentionChoice::Mimo, false}};
  for (const Backend &b : backends) {
    std::unique_ptr<Device> dev;
    std::string problem;
    if (b.choice == device::AttentionChoice::Cudnn)
      problem = device::cudnnStatus().problem;
    if (problem.empty())
      dev = device::makeDevice(device::DeviceKind::Cuda, 0, 1, b.choice);
    for (int64_t d : {64, 128})
      for (int64_t S : {2048, 4096, 8192}) {
        AttentionRow row;
        if (!problem.empty()) {
          row.backend = b.name;
          row.dtype = b.bf16 ? "bf16" : "fp32";
          row.seq = S;
          row.heads = 16;
          row.headDim = d;
          row.error = problem;
        } else {
          try {
            row = timeAttention(*dev, b.name, b.bf16, S, 16, d);
          } catch (const std::exception &e) {
            row.backend = b.name;
            row.dtype = b.bf16 ? "bf16" : "fp32";
            row.seq = S;
            row.heads = 16;
            row.headDim = d;
            row.error = e.what();
          }
        }
        if (row.error.empty())
          std::printf("| %s | %s | %lld | %lld | %.2f | %.1f | %.2f | %.1f | "
                      "%lld |\n",
                      row.backend.c_str(), row.dtype.c_str(),
                      static_cast<long long>(S), static_cast<long long>(d),
                      row.fwdMs, row.fwdTflops, row.bwdMs, row.bwdTflops,
                      static_cast<long long>(row.extraBytes));
        else
          std::printf("| %s | %s | %lld | %lld | error: %s |||||\n",
                      row.backend.c_str(), row.dtype.c_str(),
                      static_cast<long long>(S), static_cast<long long>(d),
                      row.error.c_str());
        std::fflush(stdout);
        rows.push_back(row);
      }
  }
  if (json.empty())
    return;
  std::ofstream out(json);
  out << "{\"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const AttentionRow &r = rows[i];
    auto number = [&](double x) {
      return r.error.empty() && std::isfinite(x) ? std::to_string(x)
                                                 : std::string("null");
    };
    std::string error;
    for (char c : r.error)
      error += c == '"' || c == '\\'                ? std::string("\\") + c
               : static_cast<unsigned char>(c) < 32 ? std::string(" ")
                                                    : std::string(1, c);
    out << (i ? ",\n" : "\n") << "{\"backend\": \"" << r.backend
        << "\", \"dtype\": \"" << r.dtype << "\", \"seq\": " << r.seq
        << ", \"heads\": " << r.heads << ", \"head_dim\": " << r.headDim
        << ", \"causal\": true, \"fwd_ms\": " << number(r.fwdMs)
        << ", \"fwd_tflops\": " << number(r.fwdTflops)
        << ", \"bwd_ms\": " << number(r.bwdMs)
        << ", \"bwd_tflops\": " << number(r.bwdTflops) << ", \"error\": "
        << (r.error.empty() ? std::string("null") : "\"" + error + "\"") << "}";
  }
  out << "\n]}\n";
}

//===----------------------------------------------------------------------===//
// Row kernels
//===----------------------------------------------------------------------===//

void benchRows() {
  std::printf("\n## Row kernels at the 1B model's shapes (bytes each kernel "
              "must move, against a device-to-device copy)\n\n");
  std::printf("| kernel | shape | ms | GB/s | of copy |\n");
  std::printf("|---|---|---|---|---|\n");
  std::unique_ptr<Device> dev = device::makeDevice(device::DeviceKind::Cuda, 0);
  const int64_t rows = 8192, hidden = 2048, ffn = 5632, vocabRows = 4096,
                vocab = 32000;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto filled = [&](int64_t n) {
    std::vector<float> host(static_cast<size_t>(n));
    for (float &x : host)
      x = dist(rng);
    Tensor t = Tensor::empty(*dev, n);
    dev->upload(t.raw(), host.data(), t.bytes());
    return t;
  };
  auto timed = [&](const std::function<void()> &run) {
    return medianSeconds(
        [&] {
          run();
          dev->synchronize();
        },
        10);
  };
  // The ceiling: reading and writing 256 MiB once.
  const int64_t copyBytes = int64_t(256) << 20;
  Tensor from = Tensor::empty(*dev, copyBytes / 4),
         to = Tensor::empty(*dev, copyBytes / 4);
  const double copyRate = 2.0 * copyBytes / timed([&] {
                            dev->copy(to.raw(), from.raw(), copyBytes);
                          });
  auto row = [&](const char *kernel, const std::string &shape, double bytes,
                 const std::function<void()> &run) {
    const double s = timed(run), rate = bytes / s;
    std::printf("| %s | %s | %.3f | %.0f | %.0f%% |\n", kernel, shape.c_str(),
                1e3 * s, rate / 1e9, 100.0 * rate / copyRate);
    std::fflush(stdout);
  };
  std::printf("| device-to-device copy | 256 MiB | | %.0f | 100%% |\n",
              copyRate / 1e9);
  const int64_t n = rows * hidden;
  const std::string shape =
      std::to_string(rows) + " x " + std::to_string(hidden);
  Tensor x = filled(n), w = filled(hidden), dy = filled(n);
  Tensor y = Tensor::empty(*dev, n), rstd = Tensor::empty(*dev, rows),
         dx = Tensor::empty(*dev, n), dw = Tensor::zeros(*dev, hidden);
  Tensor bits = Tensor::empty(*dev, n, device::DType::BF16);
  row("rmsnorm forward", shape, 8.0 * n, [&] {
    dev->rmsnormForward(x.data(), w.data(), mimo::device::dtypeOf(y.data()),
                        y.data(), rstd.data(), rows, hidden, 1e-5f);
  });
  row("rmsnorm forward, bf16 out", shape, 6.0 * n, [&] {
    dev->rmsnormForward(
        x.data(), w.data(), mimo::device::dtypeOf(bits.data<uint16_t>()),
        bits.data<uint16_t>(), rstd.data(), rows, hidden, 1e-5f);
  });
  // dw's partials read x and dy; dx's rows read them again and write dx.
  row("rmsnorm backward (dx and dw)", shape, 20.0 * n, [&] {
    dev->rmsnormBackward(mimo::device::dtypeOf(x.data()), x.data(), w.data(),
                         rstd.data(), dy.data(), dx.data(), dw.data(), rows,
                         hidden);
  });
  const int64_t m = rows * ffn;
  Tensor g = filled(m), u = filled(m);
  Tensor s16 = Tensor::empty(*dev, m, device::DType::BF16);
  row("swiglu forward, bf16 out",
      std::to_string(rows) + " x " + std::to_string(ffn), 10.0 * m, [&] {
        dev->swigluForward(mimo::device::dtypeOf(g.data()), g.data(), u.data(),
                           mimo::device::dtypeOf(s16.data<uint16_t>()),
                           s16.data<uint16_t>(), m);
      });
  const int64_t l = vocabRows * vocab;
  Tensor logits = filled(l), mx = Tensor::empty(*dev, vocabRows),
         sum = Tensor::empty(*dev, vocabRows),
         target = Tensor::empty(*dev, vocabRows);
  std::vector<int64_t> hostTargets(static_cast<size_t>(vocabRows));
  for (int64_t i = 0; i < vocabRows; ++i)
    hostTargets[static_cast<size_t>(i)] = (i * 7919) % vocab;
  Tensor targets = Tensor::empty(*dev, vocabRows, device::DType::I64);
  dev->upload(targets.raw(), hostTargets.data(), targets.bytes());
  const std::string vshape =
      std::to_string(vocabRows) + " x " + std::to_string(vocab);
  row("cross-entropy row max", vshape, 4.0 * l, [&] {
    dev->crossEntropyRowMax(mimo::device::dtypeOf(logits.data()), logits.data(),
                            vocabRows, vocab, mx.data());
  });
  row("cross-entropy sums", vshape, 4.0 * l, [&] {
    dev->crossEntropySums(mimo::device::dtypeOf(logits.data()), logits.data(),
                          targets.data<int64_t>(), vocabRows, vocab, 0,
                          mx.data(), sum.data(), target.data());
  });
}

//===----------------------------------------------------------------------===//
// 2. Bridges
//===----------------------------------------------------------------------===//

/// Seconds of one bridge transfer of `bytes` among 5 ranks on GPUs (rank 0
/// the single wide lane, ranks 1-4 the lanes), median over repeats.
double bridgeSeconds(bool fanIn, int64_t bytes, int repeats) {
  constexpr int64_t kLanes = 4;
  auto world = comm::makeLocalWorld(kLanes + 1);
  std::vector<double> times;
  std::vector<std::string> errors(kLanes + 1);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r <= kLanes; ++r)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Device> dev =
            device::makeDevice(device::DeviceKind::Cuda, r);
        auto c = comm::makeLocalComm(world, r);
        c->setDevice(dev.get());
        int64_t piece = bytes / kLanes;
        Tensor buffer = Tensor::zeros(*dev, r == 0 ? bytes / 4 : piece / 4);
        std::vector<int64_t> all = {0, 1, 2, 3, 4};
        Tensor token = Tensor::zeros(*dev, 1);
        for (int i = 0; i < repeats + 2; ++i) {
          c->allReduceSum(all, token.data(), 1); // a barrier
          dev->synchronize();
          auto start = Clock::now();
          std::vector<comm::P2POp> ops;
          if (r == 0)
            for (int64_t l = 0; l < kLanes; ++l)
              ops.push_back({!fanIn, l + 1, 7,
                             static_cast<char *>(buffer.raw()) + l * piece,
                             piece});
          else
            ops.push_back({fanIn, 0, 7, buffer.raw(), piece});
          c->exchange(ops);
          dev->synchronize();
          c->allReduceSum(all, token.data(), 1); // everyone has finished
          dev->synchronize();
          if (r == 0 && i >= 2)
            times.push_back(secondsSince(start));
        }
        c->setDevice(nullptr);
      } catch (const std::exception &e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (const std::string &e : errors)
    if (!e.empty())
      throw std::runtime_error(e);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void benchBridges() {
  std::printf("\n## Bridges: fan-in / fan-out between 4 lanes and 1, ranks "
              "as threads on the GPU, vs one device-to-device copy\n\n");
  std::printf("Times include the two barriers around each transfer "
              "(small, constant).\n\n");
  std::printf("| MiB | D2D copy GB/s | fan-in GB/s | fan-out GB/s | fan-in / "
              "copy | fan-out / copy |\n|---|---|---|---|---|---|\n");
  std::unique_ptr<Device> dev = device::makeDevice(device::DeviceKind::Cuda, 0);
  for (int64_t mib : {16, 64, 256}) {
    int64_t bytes = mib << 20;
    Tensor src = Tensor::zeros(*dev, bytes / 4),
           dst = Tensor::zeros(*dev, bytes / 4);
    double copy = medianSeconds(
        [&] {
          dev->copy(dst.raw(), src.raw(), bytes);
          dev->synchronize();
        },
        20);
    double in = bridgeSeconds(true, bytes, 10);
    double out = bridgeSeconds(false, bytes, 10);
    auto gbps = [&](double s) { return static_cast<double>(bytes) / s / 1e9; };
    std::printf("| %lld | %.0f | %.0f | %.0f | %.0f%% | %.0f%% |\n",
                static_cast<long long>(mib), gbps(copy), gbps(in), gbps(out),
                100 * copy / in, 100 * copy / out);
    std::fflush(stdout);
  }
}

//===----------------------------------------------------------------------===//
// 4. Training
//===----------------------------------------------------------------------===//

/// Mean tokens/s over steps 2.. of a local run.
double tokensPerSecond(const Plan &plan, device::DeviceKind kind, int64_t steps,
                       std::string *error) {
  exec::RunOptions options;
  options.steps = steps;
  options.device = kind;
  exec::RunResult r = exec::runLocal(plan, options);
  if (r.exitCode != 0) {
    *error = r.error;
    return 0;
  }
  double tokens = 0, seconds = 0;
  for (size_t s = 1; s < r.steps.size(); ++s) {
    tokens += static_cast<double>(r.steps[s].tokens);
    seconds += r.steps[s].seconds;
  }
  return seconds > 0 ? tokens / seconds : 0;
}

void benchTraining(const std::string &examplesDir,
                   const std::vector<std::string> &examples) {
  std::printf("\n## Training: tokens/s of each example, local backend, "
              "cuda vs cpu\n\n");
  std::printf("Every rank a thread; on cuda all ranks share this GPU. cuda: "
              "steps 2-6 of 6; cpu: steps 2-3 of 3 (CPU GEMMs through %s).\n\n",
#ifdef MIMO_HAVE_BLAS
              "OpenBLAS"
#else
              "the built-in loop: no BLAS on this machine"
#endif
  );
  std::printf("| example | ranks | cuda tokens/s | cpu tokens/s | cuda / cpu "
              "|\n|---|---|---|---|---|\n");
  for (const std::string &name : examples) {
    std::ifstream in(examplesDir + "/" + name + ".json");
    std::stringstream text;
    text << in.rdbuf();
    ParseResult parsed = parseModelConfig(text.str(), name + ".json");
    std::string error;
    std::optional<Plan> plan =
        parsed.config ? buildPlan(*parsed.config, &error) : std::nullopt;
    if (!plan) {
      std::printf("| %s | | error: %s | | |\n", name.c_str(), error.c_str());
      continue;
    }
    double gpu = tokensPerSecond(*plan, device::DeviceKind::Cuda, 6, &error);
    double cpu = tokensPerSecond(*plan, device::DeviceKind::Cpu, 3, &error);
    std::printf("| %s | %lld | %.0f | %.0f | %.2f |%s\n", name.c_str(),
                static_cast<long long>(plan->topology.worldSize), gpu, cpu,
                cpu > 0 ? gpu / cpu : 0.0,
                error.empty() ? "" : (" error: " + error).c_str());
    std::fflush(stdout);
  }
}

} // namespace

int main(int argc, char **argv) {
  const device::CudaStatus &status = device::cudaStatus();
  if (status.devices <= 0) {
    std::printf("gpu_bench: skipped: no usable GPU: %s\n",
                status.problem.c_str());
    return 77;
  }
  std::string examplesDir = MIMO_EXAMPLES_DIR;
  bool quick = false;
  std::string only, json;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--quick")
      quick = true;
    else if (arg.rfind("--examples=", 0) == 0)
      examplesDir = arg.substr(11);
    else if (arg == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (arg == "--json" && i + 1 < argc)
      json = argv[++i];
  }
  if (only == "attention") {
    try {
      benchAttention(json);
    } catch (const std::exception &e) {
      std::printf("\ngpu_bench: error: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  std::vector<std::string> examples = {
      "vlm-fan-in", "vlm-fan-out", "vlm-colocated", "vlm-colocated-pp2",
      "avlm",       "lm-cp2-sp",   "packed-thd"};
  try {
    std::vector<GemmShape> shapes;
    for (const std::string &name :
         {std::string("vlm-fan-in"), std::string("lm-cp2-sp")}) {
      std::ifstream in(examplesDir + "/" + name + ".json");
      std::stringstream text;
      text << in.rdbuf();
      ParseResult parsed = parseModelConfig(text.str(), name + ".json");
      if (parsed.config)
        for (const GemmShape &s : languageShapes(name, *parsed.config))
          shapes.push_back(s);
    }
    // A ~1B-parameter language model (hidden 2048, 22 layers, SwiGLU 5632,
    // vocab 32000), sequence 2048, micro-batch 4, one rank.
    for (GemmShape s : {GemmShape{"1B qkv/out", 8192, 2048, 2048},
                        GemmShape{"1B gate/up", 8192, 5632, 2048},
                        GemmShape{"1B down", 8192, 2048, 5632},
                        GemmShape{"1B head", 8192, 32000, 2048}})
      shapes.push_back(s);
    benchGemm(shapes);
    benchAttention(json);
    benchRows();
    benchBridges();
    if (!quick)
      benchTraining(examplesDir, examples);
  } catch (const std::exception &e) {
    std::printf("\ngpu_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
