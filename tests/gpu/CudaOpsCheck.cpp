//===- CudaOpsCheck.cpp - Every CUDA op against its CPU op ----------------===//
//
// docs/gpu.md, issue "CUDA device" item 6: every op of the device interface on
// the CUDA device against the CPU device, on fresh random inputs (the seed
// is printed), several shapes including odd ones, outputs poisoned with NaN
// before the launch (an element no thread writes fails), normwise relative
// error <= 1e-5 in fp32; every op run twice on the GPU must agree bitwise.
// Then events between two ranks' streams, and the local communicator's
// collectives on GPU memory against the same collectives on the host.
// Attention runs on both backends (mimo's kernels, cuDNN's when it loads).
// Exits 77 without a usable GPU.
//
// usage: mimo-cuda-ops-check [--probe | --only attention]
//   --probe           one kernel and one GEMM, read back (exit 0), or why
//                     this build cannot run on the GPU (1)
//   --only attention  the attention checks alone (gpu-check's phase)
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Comm.h"
#include "runtime/device/Devices.h"
#include "runtime/device/Tensor.h"
#include "tests/gpu/GpuCheck.h"

#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace mimo;
using device::Device;
using device::DType;
using device::Gelu;
using device::Tensor;

namespace {

constexpr double kTolerance = 1e-5;
/// Outputs rounded to bf16, where the two devices' fp32 values may straddle
/// a rounding boundary: one bf16 step of a value in the top binade, 2^-7
/// of the largest |value| (relativeError divides by the largest).
constexpr double kBf16Step = 1.0 / 128;

/// Up to four sizes of one case.
struct Dims {
  int64_t a, b, c, d;
};

/// Inputs of one op call: read-only values, index arrays, values the op
/// updates in place (compared after), and write-only outputs (poisoned).
struct Io {
  std::vector<std::vector<float>> in;
  std::vector<std::vector<int64_t>> idx;
  std::vector<std::vector<float>> inout;
  std::vector<int64_t> out;
};

/// The op's buffers on one device.
struct Ptr {
  std::vector<const float *> in;
  std::vector<const int64_t *> idx;
  std::vector<float *> inout, out;
};

using Op = std::function<void(Device &, const Ptr &)>;

std::vector<std::vector<float>> runOn(Device &dev, const Io &io, const Op &op) {
  std::vector<Tensor> keep;
  Ptr p;
  auto upload = [&](const std::vector<float> &host) {
    keep.push_back(Tensor::empty(dev, static_cast<int64_t>(host.size())));
    dev.upload(keep.back().raw(), host.data(), keep.back().bytes());
    return keep.back().data();
  };
  for (const auto &v : io.in)
    p.in.push_back(upload(v));
  for (const auto &v : io.idx) {
    keep.push_back(
        Tensor::empty(dev, static_cast<int64_t>(v.size()), DType::I64));
    dev.upload(keep.back().raw(), v.data(), keep.back().bytes());
    p.idx.push_back(keep.back().data<int64_t>());
  }
  for (const auto &v : io.inout)
    p.inout.push_back(upload(v));
  for (int64_t n : io.out) {
    keep.push_back(Tensor::empty(dev, n));
    dev.fill(keep.back().data(), std::numeric_limits<float>::quiet_NaN(), n);
    p.out.push_back(keep.back().data());
  }
  op(dev, p);
  std::vector<std::vector<float>> results;
  auto download = [&](const float *data, size_t n) {
    std::vector<float> host(n);
    dev.download(host.data(), data, static_cast<int64_t>(n * sizeof(float)));
    results.push_back(std::move(host));
  };
  for (size_t i = 0; i < io.inout.size(); ++i)
    download(p.inout[i], io.inout[i].size());
  for (size_t i = 0; i < io.out.size(); ++i)
    download(p.out[i], static_cast<size_t>(io.out[i]));
  return results;
}

class OpsCheck {
public:
  OpsCheck() : report("mimo-cuda-ops-check") {
    seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    rng.seed(seed);
    cpu = device::makeCpuDevice();
    cuda = device::makeDevice(gpucheck::checkedKind(), 0);
    gpu = cuda.get();
  }

  std::vector<float> random(int64_t n, double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float &x : v)
      x = static_cast<float>(dist(rng));
    return v;
  }

  /// Runs `write` into n bf16 bits of scratch, then unpacks them to out.
  template <typename Write>
  static void viaBits(Device &d, float *out, int64_t n, Write &&write) {
    auto *bits =
        static_cast<uint16_t *>(d.allocate(std::max<int64_t>(n, 1) * 2));
    write(bits);
    d.convert(mimo::device::DType::BF16, bits, mimo::device::DType::F32, out,
              n);
    d.release(bits);
  }

  /// n values rounded to bf16 in a new tensor of the device (unset for
  /// null values), its bits at `data`.
  struct Bits {
    Tensor tensor;
    uint16_t *data;
    Bits(Device &dev, const float *values, int64_t n)
        : tensor(Tensor::empty(dev, std::max<int64_t>(n, 1), DType::BF16)),
          data(tensor.data<uint16_t>()) {
      if (values)
        dev.convert(mimo::device::DType::F32, values, mimo::device::DType::BF16,
                    data, n);
    }
  };

  /// Runs `op` on the CPU and twice on the GPU and compares every output.
  void compare(const std::string &name, const Io &io, const Op &op,
               double tolerance = kTolerance) {
    try {
      auto ref = runOn(*cpu, io, op);
      auto got = runOn(*gpu, io, op);
      auto again = runOn(*gpu, io, op);
      for (size_t k = 0; k < ref.size(); ++k)
        report.close(gpucheck::relativeError(got[k], ref[k]), tolerance,
                     name + (ref.size() > 1 ? " output " + std::to_string(k)
                                            : std::string()));
      bool same = true;
      for (size_t k = 0; k < got.size(); ++k)
        for (size_t i = 0; i < got[k].size(); ++i)
          same &= std::memcmp(&got[k][i], &again[k][i], sizeof(float)) == 0;
      report.check(same, name + " bitwise reproducible");
    } catch (const std::exception &e) {
      report.check(false, name, e.what());
    }
  }

  void gemm() {
    for (Dims s :
         {Dims{1, 1, 1, 0}, Dims{3, 5, 7, 0}, Dims{64, 48, 33, 0},
          Dims{257, 129, 65, 0}, Dims{512, 384, 512, 0}, Dims{5, 3, 0, 0}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (float beta : {0.0f, 0.5f}) {
            Io io;
            io.in = {random(s.a * s.c), random(s.c * s.b)};
            if (beta == 0.0f)
              io.out = {s.a * s.b};
            else
              io.inout = {random(s.a * s.b)};
            char name[96];
            std::snprintf(name, sizeof(name),
                          "gemm %lldx%lldx%lld ta=%d tb=%d "
                          "beta=%.1f",
                          static_cast<long long>(s.a),
                          static_cast<long long>(s.b),
                          static_cast<long long>(s.c), ta, tb, beta);
            compare(name, io, [=](Device &d, const Ptr &p) {
              float *C = beta == 0.0f ? p.out[0] : p.inout[0];
              d.gemm(mimo::device::DType::F32, ta, tb, s.a, s.b, s.c, 1.25f,
                     p.in[0], p.in[1], beta, mimo::device::DType::F32, C);
            });
          }
  }

  /// Precision "bf16": both devices round the operands to bf16 and sum
  /// the (exact) products in fp32; only the order of the sums differs
  /// (tensor cores), hence a looser bound than fp32's.
  void gemmBf16() {
    for (Dims s : {Dims{1, 1, 1, 0}, Dims{3, 5, 7, 0}, Dims{64, 48, 33, 0},
                   Dims{257, 129, 65, 0}, Dims{512, 384, 512, 0},
                   Dims{2048, 512, 2048, 0}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          Io io;
          io.in = {random(s.a * s.c), random(s.c * s.b)};
          io.inout = {random(s.a * s.b)};
          char name[96];
          std::snprintf(
              name, sizeof(name), "gemmBf16 %lldx%lldx%lld ta=%d tb=%d",
              static_cast<long long>(s.a), static_cast<long long>(s.b),
              static_cast<long long>(s.c), ta, tb);
          compare(
              name, io,
              [=](Device &d, const Ptr &p) {
                d.gemm(mimo::device::DType::BF16, ta, tb, s.a, s.b, s.c, 1.25f,
                       p.in[0], p.in[1], 0.5f, mimo::device::DType::F32,
                       p.inout[0]);
              },
              1e-4);
          // B as bf16 bits (precision "bf16"'s working weights).
          compare(
              std::string(name) + " bf16 B", io,
              [=](Device &d, const Ptr &p) {
                int64_t n = s.c * s.b;
                auto *bits = static_cast<uint16_t *>(d.allocate(n * 2));
                d.convert(mimo::device::DType::F32, p.in[1],
                          mimo::device::DType::BF16, bits, n);
                d.gemm(mimo::device::DType::BF16, ta, tb, s.a, s.b, s.c, 1.25f,
                       p.in[0], bits, 0.5f, mimo::device::DType::F32,
                       p.inout[0]);
                d.release(bits);
              },
              1e-4);
          // bf16 output (cuBLASLt's bf16 D): a bf16 step apart at most.
          compare(
              std::string(name) + " bf16 out", {io.in, {}, {}, {s.a * s.b}},
              [=](Device &d, const Ptr &p) {
                viaBits(d, p.out[0], s.a * s.b, [&](uint16_t *y) {
                  d.gemm(mimo::device::DType::BF16, ta, tb, s.a, s.b, s.c,
                         1.25f, p.in[0], p.in[1], 0.0f,
                         mimo::device::DType::BF16, y);
                });
              },
              kBf16Step);
        }
  }

  /// Operands that start anywhere (views into flat buffers): one float
  /// past an aligned address.
  void gemmMisaligned() {
    for (Dims s : {Dims{33, 17, 9, 0}, Dims{256, 128, 64, 0}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          Io io;
          io.in = {random(s.a * s.c + 1), random(s.c * s.b + 1)};
          io.inout = {random(s.a * s.b + 1)};
          char name[96];
          std::snprintf(name, sizeof(name),
                        "gemm %lldx%lldx%lld ta=%d tb=%d, operands 4 bytes "
                        "past alignment",
                        static_cast<long long>(s.a),
                        static_cast<long long>(s.b),
                        static_cast<long long>(s.c), ta, tb);
          compare(name, io, [=](Device &d, const Ptr &p) {
            d.gemm(mimo::device::DType::F32, ta, tb, s.a, s.b, s.c, 1.0f,
                   p.in[0] + 1, p.in[1] + 1, 0.5f, mimo::device::DType::F32,
                   p.inout[0] + 1);
          });
        }
  }

  void elementwise() {
    for (int64_t n : {int64_t(1), int64_t(1000), int64_t(65537)}) {
      std::string sz = " n=" + std::to_string(n);
      Io io;
      io.in = {random(n, -4, 4), random(n), random(n)};
      io.out = {n, n};
      // Every GELU variant (model.json activation): tanh, exact, quick.
      for (auto [kind, name] :
           {std::pair{Gelu::Tanh, ""}, std::pair{Gelu::Exact, " (exact)"},
            std::pair{Gelu::Quick, " (quick)"}})
        compare(std::string("gelu forward/backward") + name + sz, io,
                [=](Device &d, const Ptr &p) {
                  d.geluForward(mimo::device::dtypeOf(p.in[0]), p.in[0],
                                mimo::device::dtypeOf(p.out[0]), p.out[0], n,
                                kind);
                  d.geluBackward(mimo::device::dtypeOf(p.in[0]), p.in[0],
                                 p.in[1], p.out[1], n, kind);
                });
      compare(
          "gelu forward/backward, bf16 (quick)" + sz, {io.in, {}, {}, {n, n}},
          [=](Device &d, const Ptr &p) {
            viaBits(d, p.out[0], n, [&](uint16_t *y) {
              d.geluForward(mimo::device::dtypeOf(p.in[0]), p.in[0],
                            mimo::device::dtypeOf(y), y, n, Gelu::Quick);
            });
            Bits x(d, p.in[0], n);
            viaBits(d, p.out[1], n, [&](uint16_t *dx) {
              d.geluBackward(mimo::device::dtypeOf(x.data), x.data, p.in[1], dx,
                             n, Gelu::Exact);
            });
          },
          kBf16Step);
      compare("swiglu forward" + sz, {io.in, {}, {}, {n}},
              [=](Device &d, const Ptr &p) {
                d.swigluForward(mimo::device::dtypeOf(p.in[0]), p.in[0],
                                p.in[1], mimo::device::dtypeOf(p.out[0]),
                                p.out[0], n);
              });
      compare("swiglu backward" + sz, io, [=](Device &d, const Ptr &p) {
        d.swigluBackward(mimo::device::dtypeOf(p.in[0]), p.in[0], p.in[1],
                         p.in[2], p.out[0], p.out[1], n);
      });
      // bf16 outputs: one bf16 step apart at most where the two devices'
      // fp32 values straddle a rounding boundary.
      compare(
          "gelu and swiglu forward, bf16 out" + sz, {io.in, {}, {}, {n, n}},
          [=](Device &d, const Ptr &p) {
            viaBits(d, p.out[0], n, [&](uint16_t *y) {
              d.geluForward(mimo::device::dtypeOf(p.in[0]), p.in[0],
                            mimo::device::dtypeOf(y), y, n, Gelu::Tanh);
            });
            viaBits(d, p.out[1], n, [&](uint16_t *y) {
              d.swigluForward(mimo::device::dtypeOf(p.in[0]), p.in[0], p.in[1],
                              mimo::device::dtypeOf(y), y, n);
            });
          },
          kBf16Step);
      // bf16 inputs too (the MLP's gate and up, as their GEMMs write them).
      compare(
          "gelu and swiglu forward, bf16 in and out" + sz,
          {io.in, {}, {}, {n, n}},
          [=](Device &d, const Ptr &p) {
            auto *in = static_cast<uint16_t *>(
                d.allocate(std::max<int64_t>(2 * n, 1) * 2));
            d.convert(mimo::device::DType::F32, p.in[0],
                      mimo::device::DType::BF16, in, n);
            d.convert(mimo::device::DType::F32, p.in[1],
                      mimo::device::DType::BF16, in + n, n);
            viaBits(d, p.out[0], n, [&](uint16_t *y) {
              d.geluForward(mimo::device::dtypeOf(in), in,
                            mimo::device::dtypeOf(y), y, n, Gelu::Tanh);
            });
            viaBits(d, p.out[1], n, [&](uint16_t *y) {
              d.swigluForward(mimo::device::dtypeOf(in), in, in + n,
                              mimo::device::dtypeOf(y), y, n);
            });
            d.release(in);
          },
          kBf16Step);
      // The backwards reading bf16 g and u and writing bf16 gradients.
      compare(
          "gelu and swiglu backward, bf16 in and out" + sz,
          {io.in, {}, {}, {n, n, n}},
          [=](Device &d, const Ptr &p) {
            auto *in = static_cast<uint16_t *>(
                d.allocate(std::max<int64_t>(2 * n, 1) * 2));
            auto *du = static_cast<uint16_t *>(
                d.allocate(std::max<int64_t>(n, 1) * 2));
            d.convert(mimo::device::DType::F32, p.in[0],
                      mimo::device::DType::BF16, in, n);
            d.convert(mimo::device::DType::F32, p.in[1],
                      mimo::device::DType::BF16, in + n, n);
            viaBits(d, p.out[0], n, [&](uint16_t *dx) {
              d.geluBackward(mimo::device::dtypeOf(in), in, p.in[2], dx, n,
                             Gelu::Tanh);
            });
            viaBits(d, p.out[1], n, [&](uint16_t *dg) {
              d.swigluBackward(mimo::device::dtypeOf(in), in, in + n, p.in[2],
                               dg, du, n);
            });
            d.convert(mimo::device::DType::BF16, du, mimo::device::DType::F32,
                      p.out[2], n);
            d.release(du);
            d.release(in);
          },
          kBf16Step);
      // A residual as precision "bf16" stores it: the branch fp32 or bits.
      compare("residual bf16" + sz, {{random(n), random(n)}, {}, {}, {n, n}},
              [=](Device &d, const Ptr &p) {
                d.residual(mimo::device::DType::BF16, p.in[0],
                           mimo::device::dtypeOf(p.in[1]), p.in[1], p.out[0],
                           n);
                auto *bits = static_cast<uint16_t *>(
                    d.allocate(std::max<int64_t>(n, 1) * 2));
                d.convert(mimo::device::DType::F32, p.in[1],
                          mimo::device::DType::BF16, bits, n);
                d.residual(mimo::device::DType::BF16, p.in[0],
                           mimo::device::dtypeOf(bits), bits, p.out[1], n);
                d.release(bits);
              });
      compare("add, scale, axpy, maximum" + sz,
              {{random(n), random(n)}, {}, {random(n)}, {n, n}},
              [=](Device &d, const Ptr &p) {
                d.add(DType::F32, p.out[0], p.in[0], p.in[1], n);
                d.scale(p.inout[0], 0.75f, n);
                d.axpy(n, -1.5f, p.in[0], p.inout[0]);
                d.maximum(p.out[1], p.in[0], p.in[1], n);
              });
      compare("bf16 round, pack and unpack" + sz,
              {{random(n, -100, 100)}, {}, {}, {n, n}},
              [=](Device &d, const Ptr &p) {
                d.copy(p.out[0], p.in[0], n * 4);
                d.roundTo(mimo::device::DType::BF16, p.out[0], n);
                void *bits = d.allocate(n * 2);
                d.convert(mimo::device::DType::F32, p.in[0],
                          mimo::device::DType::BF16,
                          static_cast<uint16_t *>(bits), n);
                d.convert(mimo::device::DType::BF16,
                          static_cast<uint16_t *>(bits),
                          mimo::device::DType::F32, p.out[1], n);
                d.release(bits);
              });
      compare("fill, zero, copy" + sz, {{random(n)}, {}, {}, {n, n, n}},
              [=](Device &d, const Ptr &p) {
                d.fill(p.out[0], 3.5f, n);
                d.fillZero(p.out[1], n * 4);
                d.copy(p.out[2], p.in[0], n * 4);
              });
    }
    for (Dims s :
         {Dims{1, 1, 0, 0}, Dims{37, 29, 0, 0}, Dims{1024, 257, 0, 0}}) {
      int64_t rows = s.a, cols = s.b;
      std::string sz = " " + std::to_string(rows) + "x" + std::to_string(cols);
      compare(
          "add bias, bias backward" + sz,
          {{random(rows * cols)}, {}, {random(rows * cols), random(cols)}, {}},
          [=](Device &d, const Ptr &p) {
            d.addBias(p.inout[0], p.in[0] /* first cols */, rows, cols);
            d.biasBackward(p.in[0], p.inout[1], rows, cols);
          });
      std::vector<int64_t> to, from;
      for (int64_t r = 0; r < rows; r += 2) {
        to.push_back(rows - 1 - r);
        from.push_back(r);
      }
      int64_t count = static_cast<int64_t>(to.size());
      compare("copy rows" + sz,
              {{random(rows * cols)}, {to, from}, {random(rows * cols)}, {}},
              [=](Device &d, const Ptr &p) {
                d.copyRows(p.inout[0], p.idx[0], p.in[0], p.idx[1], count,
                           cols);
              });
    }
  }

  void reductions() {
    for (int64_t n :
         {int64_t(1), int64_t(255), int64_t(70001), int64_t(3000001)}) {
      try {
        std::vector<float> x = random(n), mask = random(n);
        for (float &m : mask)
          m = m > 0 ? 1.0f : 0.0f;
        auto run = [&](Device &d) {
          Tensor tx = Tensor::empty(d, n), tm = Tensor::empty(d, n);
          d.upload(tx.raw(), x.data(), tx.bytes());
          d.upload(tm.raw(), mask.data(), tm.bytes());
          Tensor acc = Tensor::zeros(d, 2, DType::F64);
          d.sumSquaresInto(tx.data(), n, acc.data<double>());
          d.sumSquaresInto(tx.data(), n, acc.data<double>()); // accumulates
          d.maskedSumInto(tx.data(), tm.data(), n, 0.25,
                          acc.data<double>() + 1);
          Tensor sum = Tensor::empty(d, 2, DType::F64);
          d.add(DType::F64, sum.raw(), acc.raw(), acc.raw(), 2);
          std::vector<double> host(2);
          d.download(host.data(), sum.raw(), 16);
          return host;
        };
        std::vector<double> ref = run(*cpu), got = run(*cuda),
                            again = run(*cuda);
        std::string sz = " n=" + std::to_string(n);
        report.close(gpucheck::relativeError(got, ref), 1e-12,
                     "sum of squares, masked sum, f64 add" + sz);
        report.check(got == again, "sum of squares, masked sum bitwise "
                                   "reproducible" +
                                       sz);
      } catch (const std::exception &e) {
        report.check(false, "reductions", e.what());
      }
    }
  }

  void norms() {
    for (Dims s :
         {Dims{1, 1, 0, 0}, Dims{33, 65, 0, 0}, Dims{515, 1024, 0, 0}}) {
      int64_t rows = s.a, cols = s.b;
      std::string sz = " " + std::to_string(rows) + "x" + std::to_string(cols);
      int64_t n = rows * cols;
      // model.json norm_eps: the default and Llama 3's.
      const float eps = rows % 2 ? 1e-5f : 1e-6f;
      compare("rmsnorm forward" + sz,
              {{random(n, -2, 2), random(cols, 0.5, 1.5)}, {}, {}, {n, rows}},
              [=](Device &d, const Ptr &p) {
                d.rmsnormForward(p.in[0], p.in[1],
                                 mimo::device::dtypeOf(p.out[0]), p.out[0],
                                 p.out[1], rows, cols, eps);
              });
      compare(
          "rmsnorm forward, bf16 out" + sz,
          {{random(n, -2, 2), random(cols, 0.5, 1.5)}, {}, {}, {n, rows}},
          [=](Device &d, const Ptr &p) {
            viaBits(d, p.out[0], n, [&](uint16_t *y) {
              d.rmsnormForward(p.in[0], p.in[1], mimo::device::dtypeOf(y), y,
                               p.out[1], rows, cols, eps);
            });
          },
          kBf16Step);
      compare(
          "layernorm forward, bf16 out" + sz,
          {{random(n, -2, 2), random(cols, 0.5, 1.5), random(cols)},
           {},
           {},
           {n, rows, rows}},
          [=](Device &d, const Ptr &p) {
            viaBits(d, p.out[0], n, [&](uint16_t *y) {
              d.layernormForward(p.in[0], p.in[1], p.in[2],
                                 mimo::device::dtypeOf(y), y, p.out[1],
                                 p.out[2], rows, cols, eps);
            });
          },
          kBf16Step);
      compare("rmsnorm backward" + sz,
              {{random(n, -2, 2), random(cols, 0.5, 1.5), random(rows, 0.5, 2),
                random(n)},
               {},
               {random(cols)},
               {n}},
              [=](Device &d, const Ptr &p) {
                d.rmsnormBackward(mimo::device::dtypeOf(p.in[0]), p.in[0],
                                  p.in[1], p.in[2], p.in[3], p.out[0],
                                  p.inout[0], rows, cols);
              });
      compare("layernorm forward" + sz,
              {{random(n, -2, 2), random(cols, 0.5, 1.5), random(cols)},
               {},
               {},
               {n, rows, rows}},
              [=](Device &d, const Ptr &p) {
                d.layernormForward(p.in[0], p.in[1], p.in[2],
                                   mimo::device::dtypeOf(p.out[0]), p.out[0],
                                   p.out[1], p.out[2], rows, cols, eps);
              });
      compare("layernorm backward" + sz,
              {{random(n, -2, 2), random(cols, 0.5, 1.5),
                random(rows, -0.1, 0.1), random(rows, 0.5, 2), random(n)},
               {},
               {random(cols), random(cols)},
               {n}},
              [=](Device &d, const Ptr &p) {
                d.layernormBackward(mimo::device::dtypeOf(p.in[0]), p.in[0],
                                    p.in[1], p.in[2], p.in[3], p.in[4],
                                    p.out[0], p.inout[0], p.inout[1], rows,
                                    cols);
              });
      // bf16 x (as a bf16 layer keeps it), the input gradient added into dx.
      compare("rmsnorm and layernorm backward, bf16 x, added" + sz,
              {{random(n, -2, 2), random(cols, 0.5, 1.5),
                random(rows, -0.1, 0.1), random(rows, 0.5, 2), random(n)},
               {},
               {random(n), random(cols), random(n), random(cols), random(cols)},
               {}},
              [=](Device &d, const Ptr &p) {
                Bits x(d, p.in[0], n);
                d.rmsnormBackward(mimo::device::dtypeOf(x.data), x.data,
                                  p.in[1], p.in[3], p.in[4], p.inout[0],
                                  p.inout[1], rows, cols);
                d.layernormBackward(mimo::device::dtypeOf(x.data), x.data,
                                    p.in[1], p.in[2], p.in[3], p.in[4],
                                    p.inout[2], p.inout[3], p.inout[4], rows,
                                    cols);
              });
    }
  }

  void rope() {
    // The default frequencies, and Llama 3.1's (rope_theta 500000 and its
    // llama3 rescaling, original context 64: all three bands at dim 64).
    mimo::device::RopeSpec llama3;
    llama3.theta = 500000;
    llama3.factor = 8;
    llama3.originalMax = 64;
    for (const mimo::device::RopeSpec &spec :
         {mimo::device::RopeSpec{}, llama3})
      for (Dims s : {Dims{1, 1, 2, 0}, Dims{37, 3, 10, 0}, Dims{300, 8, 64, 0},
                     Dims{5, 2, 7, 0}}) {
        int64_t tokens = s.a, heads = s.b, dim = s.c;
        std::vector<int64_t> positions;
        for (int64_t t = 0; t < tokens; ++t)
          positions.push_back((t * 7919) % 4096);
        int64_t n = tokens * heads * dim;
        const std::string sz =
            std::to_string(tokens) + "x" + std::to_string(heads) + "x" +
            std::to_string(dim) + (spec.factor > 0 ? " llama3" : "");
        // Each device builds its rotation table from the positions.
        auto withTable = [=](Device &d, const int64_t *pos, auto &&use) {
          const int64_t entries = std::max<int64_t>(tokens * (dim / 2), 1) * 2;
          auto *table = static_cast<double *>(d.allocate(entries * 8));
          d.ropeTable(pos, tokens, dim, spec, table);
          use(table);
          d.release(table);
        };
        for (bool inverse : {false, true})
          compare(std::string("rope") + (inverse ? " inverse " : " ") + sz,
                  {{}, {positions}, {random(n)}, {}},
                  [=](Device &d, const Ptr &p) {
                    withTable(d, p.idx[0], [&](const double *table) {
                      d.rope(p.inout[0], DType::F32, p.inout[0], table, tokens,
                             heads, dim, inverse);
                    });
                  });
        // bf16 out (precision "bf16"'s q and k, and their gradients): a bf16
        // step apart at most.
        for (bool inverse : {false, true})
          compare(
              std::string("rope") + (inverse ? " inverse" : "") +
                  ", bf16 out " + sz,
              {{random(n)}, {positions}, {}, {n}},
              [=](Device &d, const Ptr &p) {
                viaBits(d, p.out[0], n, [&](uint16_t *y) {
                  withTable(d, p.idx[0], [&](const double *table) {
                    d.rope(p.in[0], DType::BF16, y, table, tokens, heads, dim,
                           inverse);
                  });
                });
              },
              kBf16Step);
      }
    // Grouped-query attention: keys and values repeated per head (fp32,
    // and bf16 bits copied), and the groups' gradients summed back.
    for (Dims s : {Dims{1, 1, 2, 1}, Dims{37, 2, 4, 16}, Dims{300, 1, 8, 64}}) {
      int64_t rows = s.a, groups = s.b, repeat = s.c, dim = s.d;
      int64_t n = rows * groups * dim, wide = n * repeat;
      const std::string sz = std::to_string(rows) + "x" +
                             std::to_string(groups) + "x" +
                             std::to_string(repeat) + "x" + std::to_string(dim);
      compare("repeat kv " + sz, {{random(n)}, {}, {}, {wide}},
              [=](Device &d, const Ptr &p) {
                d.repeatKv(DType::F32, p.in[0], p.out[0], rows, groups, repeat,
                           dim);
              });
      compare("repeat kv, bf16 " + sz, {{random(n)}, {}, {}, {wide}},
              [=](Device &d, const Ptr &p) {
                Bits x(d, p.in[0], n);
                viaBits(d, p.out[0], wide, [&](uint16_t *y) {
                  d.repeatKv(DType::BF16, x.data, y, rows, groups, repeat, dim);
                });
              });
      compare("sum kv groups " + sz, {{random(wide)}, {}, {}, {n}},
              [=](Device &d, const Ptr &p) {
                d.sumKvGroups(p.in[0], p.out[0], rows, groups, repeat, dim);
              });
    }
    // Ring attention's merge of two key blocks' outputs: rows whose block
    // saw no key (lse -inf) on either side.
    for (Dims s :
         {Dims{1, 1, 1, 0}, Dims{37, 4, 64, 0}, Dims{300, 8, 128, 0}}) {
      int64_t rows = s.a, heads = s.b, dim = s.c;
      std::vector<float> lse = random(rows * heads, -3, 3),
                         lseb = random(rows * heads, -3, 3);
      for (size_t i = 0; i < lse.size(); i += 7)
        lse[i] = -INFINITY;
      for (size_t i = 3; i < lseb.size(); i += 5)
        lseb[i] = -INFINITY;
      Io io;
      io.in = {random(rows * heads * dim), lseb};
      io.inout = {random(rows * heads * dim), lse};
      compare("attention merge " + std::to_string(rows) + "x" +
                  std::to_string(heads) + "x" + std::to_string(dim),
              io, [=](Device &d, const Ptr &p) {
                d.attentionMerge(p.inout[0], p.inout[1], p.in[0], p.in[1], rows,
                                 heads, dim);
              });
    }
  }

  /// One attention case: positions and segments of queries and keys, k and
  /// v of kvHeads groups (grouped-query attention when fewer than heads).
  /// bf16: the tensor-core programs (head dims 32-128; the fp32 programs
  /// with bf16 rounding at others) or cuDNN (attentionBackendName) against
  /// the CPU's emulation of mimo's rounding, within the bf16 tolerance
  /// (docs/gpu.md: their sums run in other orders, so a probability may
  /// round to the neighbouring bf16).
  void attention(const std::string &name, std::vector<int64_t> qpos,
                 std::vector<int64_t> qseg, std::vector<int64_t> kpos,
                 std::vector<int64_t> kseg, int64_t heads, int64_t d,
                 bool causal, bool bf16 = false, int64_t kvHeads = 0) {
    if (kvHeads == 0)
      kvHeads = heads;
    const double tolerance = bf16 ? 1e-2 : kTolerance;
    int64_t Tq = static_cast<int64_t>(qpos.size());
    int64_t Tk = static_cast<int64_t>(kpos.size());
    // One plan (device/AttentionTiles.h), its packed array on each device.
    device::tiles::Plan plan = device::tiles::plan(
        qpos.data(), qseg.data(), kpos.data(), kseg.data(), Tq, Tk, causal);
    const int64_t nq = Tq * heads * d, nk = Tk * kvHeads * d;
    Io forward{{random(nq), random(nk), random(nk)},
               {plan.packed},
               {},
               {nq, heads * Tq}};
    plan.packed.clear(); // the views below only read its counts
    auto args = [=](const void *q, const void *k, const void *v,
                    const int64_t *packed) {
      device::AttentionArgs a;
      a.dtype = bf16 ? device::DType::BF16 : device::DType::F32;
      a.q = q;
      a.k = k;
      a.v = v;
      a.plan = plan.view(packed);
      a.heads = heads;
      a.kvHeads = kvHeads;
      a.headDim = d;
      return a;
    };
    std::string label = (bf16 ? "bf16 " : "") + name +
                        (kvHeads < heads ? " gqa " + std::to_string(heads) +
                                               "/" + std::to_string(kvHeads)
                                         : "");
    label +=
        " [" +
        gpu->attentionBackendName(args(nullptr, nullptr, nullptr, nullptr)) +
        "]";
    // bf16: q, k, v (and o, dO) packed to bf16 buffers on the device (the
    // values rounded), o unpacked after.
    const Op forwardOp = [=](Device &dv, const Ptr &p) {
      if (!bf16) {
        dv.attentionForward(args(p.in[0], p.in[1], p.in[2], p.idx[0]), p.out[0],
                            p.out[1]);
        return;
      }
      Bits q(dv, p.in[0], nq), k(dv, p.in[1], nk), v(dv, p.in[2], nk),
          o(dv, nullptr, nq);
      dv.attentionForward(args(q.data, k.data, v.data, p.idx[0]), o.data,
                          p.out[1]);
      dv.convert(mimo::device::DType::BF16, o.data, mimo::device::DType::F32,
                 p.out[0], nq);
    };
    compare("attention forward " + label, forward, forwardOp, tolerance);
    // The backward takes o and lse from the CPU forward.
    auto fwd = runOn(*cpu, forward, forwardOp);
    Io backward{{forward.in[0], forward.in[1], forward.in[2], fwd[0], fwd[1],
                 random(nq)},
                forward.idx,
                {},
                {nq, nk, nk}};
    compare(
        "attention backward " + label, backward,
        [=](Device &dv, const Ptr &p) {
          if (!bf16) {
            dv.attentionBackward(args(p.in[0], p.in[1], p.in[2], p.idx[0]),
                                 p.in[3], p.in[4], p.in[5], p.out[0], p.out[1],
                                 p.out[2]);
            return;
          }
          Bits q(dv, p.in[0], nq), k(dv, p.in[1], nk), v(dv, p.in[2], nk),
              o(dv, p.in[3], nq), dout(dv, p.in[5], nq);
          dv.attentionBackward(args(q.data, k.data, v.data, p.idx[0]), o.data,
                               p.in[4], dout.data, p.out[0], p.out[1],
                               p.out[2]);
        },
        tolerance);
  }

  /// fp32 attention (mimo's kernels under every --attention choice).
  void attentionsFp32() {
    // Causal over a [S, B] grid (token = position * B + sample).
    for (Dims s :
         {Dims{7, 3, 2, 5}, Dims{96, 4, 4, 32}, Dims{128, 2, 2, 128}}) {
      int64_t S = s.a, B = s.b, heads = s.c, d = s.d;
      std::vector<int64_t> pos, seg;
      for (int64_t s = 0; s < S; ++s)
        for (int64_t b = 0; b < B; ++b) {
          pos.push_back(s);
          seg.push_back(b);
        }
      std::string shape = std::to_string(S) + "x" + std::to_string(B) +
                          " heads " + std::to_string(heads) + " d " +
                          std::to_string(d);
      attention("causal " + shape, pos, seg, pos, seg, heads, d, true);
      // Dense mask: padding keys in a segment of their own.
      std::vector<int64_t> padded = seg;
      for (size_t t = 0; t < padded.size(); ++t)
        if (pos[t] >= S - 2 && seg[t] == 0)
          padded[t] = -1 - seg[t];
      attention("dense mask " + shape, pos, padded, pos, padded, heads, d,
                true);
    }
    // CP zigzag, cp 2, S 16: rank 1 holds chunks 1 and 2 as queries; the
    // keys are both ranks' shards in CP-rank order.
    std::vector<int64_t> q1 = {4, 5, 6, 7, 8, 9, 10, 11};
    std::vector<int64_t> keys = {0, 1, 2, 3, 12, 13, 14, 15,
                                 4, 5, 6, 7, 8,  9,  10, 11};
    attention("cp zigzag rank 1", q1, std::vector<int64_t>(8, 0), keys,
              std::vector<int64_t>(16, 0), 3, 8, true);
    // Packed THD: three sequences in one row, positions restarting.
    std::vector<int64_t> tpos, tseg;
    int64_t sequence = 0;
    for (int64_t length : {5, 11, 2}) {
      for (int64_t i = 0; i < length; ++i) {
        tpos.push_back(i);
        tseg.push_back(sequence);
      }
      ++sequence;
    }
    attention("thd packed", tpos, tseg, tpos, tseg, 2, 16, true);
    // Encoders: bidirectional within each sample.
    std::vector<int64_t> zeros(13, 0),
        samples = {0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 3, 4, 4};
    attention("bidirectional per sample", zeros, samples, zeros, samples, 4, 8,
              false);
    // One long sequence: many query blocks and key chunks, a partial last
    // block; and the largest head dimension (shared memory past 48 KiB).
    std::vector<int64_t> lpos, lseg(1000, 0);
    for (int64_t p = 0; p < 1000; ++p)
      lpos.push_back(p);
    attention("long causal 1000", lpos, lseg, lpos, lseg, 2, 64, true);
    std::vector<int64_t> wpos(lpos.begin(), lpos.begin() + 100), wseg(100, 0);
    attention("head dim 256", wpos, wseg, wpos, wseg, 2, 256, true);
    // A query with no allowed key (o = 0, lse = -inf, no gradient).
    attention("no allowed key", {0, 1, 2}, {0, 0, 9}, {0, 1, 2}, {0, 0, 7}, 1,
              4, true);
  }

  /// bf16 attention on the backend of `gpu`: mimo's kernels, or cuDNN
  /// where it takes the call (mimo's where not: the label names which).
  void attentionsBf16() {
    std::vector<int64_t> lpos, lseg(1000, 0);
    for (int64_t p = 0; p < 1000; ++p)
      lpos.push_back(p);
    std::vector<int64_t> wpos(lpos.begin(), lpos.begin() + 100), wseg(100, 0);
    std::vector<int64_t> tpos, tseg;
    int64_t sequence = 0;
    for (int64_t length : {5, 11, 2}) {
      for (int64_t i = 0; i < length; ++i) {
        tpos.push_back(i);
        tseg.push_back(sequence);
      }
      ++sequence;
    }
    // bf16: every head dimension the tensor-core programs take, on long
    // causal rows (many chunks, the diagonal skipped per warp), interleaved
    // samples, CP zigzag, packed THD, a bidirectional encoder and a query
    // without keys; and one head dimension they do not take (the fp32
    // programs with bf16 rounding).
    for (int64_t hd : {32, 64, 96, 128})
      attention("long causal 300 d " + std::to_string(hd),
                {lpos.begin(), lpos.begin() + 300},
                std::vector<int64_t>(300, 0),
                {lpos.begin(), lpos.begin() + 300},
                std::vector<int64_t>(300, 0), 3, hd, true, true);
    attention("long causal 1000", lpos, lseg, lpos, lseg, 2, 64, true, true);
    std::vector<int64_t> gpos, gseg;
    for (int64_t s = 0; s < 96; ++s)
      for (int64_t b = 0; b < 3; ++b) {
        gpos.push_back(s);
        gseg.push_back(b);
      }
    attention("causal 96x3", gpos, gseg, gpos, gseg, 4, 128, true, true);
    std::vector<int64_t> zq, zk;
    for (int64_t p = 40; p < 120; ++p)
      zq.push_back(p); // a CP rank's middle chunks
    for (int64_t p = 0; p < 160; ++p)
      zk.push_back((p * 37) % 160); // gathered keys, out of order
    attention("cp zigzag rank 1", zq, std::vector<int64_t>(zq.size(), 0), zk,
              std::vector<int64_t>(zk.size(), 0), 2, 64, true, true);
    attention("thd packed", tpos, tseg, tpos, tseg, 2, 32, true, true);
    std::vector<int64_t> epos(150, 0), eseg;
    for (int64_t t = 0; t < 150; ++t)
      eseg.push_back(t < 70 ? 0 : t < 71 ? 1 : 2);
    attention("bidirectional per sample", epos, eseg, epos, eseg, 2, 64, false,
              true);
    attention("no allowed key", {0, 1, 2}, {0, 0, 9}, {0, 1, 2}, {0, 0, 7}, 1,
              32, true, true);
    attention("head dim 8 (fp32 programs)", wpos, wseg, wpos, wseg, 2, 8, true,
              true);
    // Grouped-query attention (keys and values per group: cuDNN reads them
    // as they are, mimo's kernels repeat them), over [S, B] lanes.
    attention("causal 96x3", gpos, gseg, gpos, gseg, 8, 64, true, true, 2);
    attention("causal 96x3", gpos, gseg, gpos, gseg, 4, 128, true, true, 1);
    // The long sequences of a language model: one sequence of 2048, 4096
    // and 8192 tokens at head dimensions 64 and 128, two heads over one
    // group and two (the CPU computes the reference).
    // (A dry run, the CPU standing in for the GPU, keeps the shortest.)
    const bool dry = gpucheck::checkedKind() != device::DeviceKind::Cuda;
    for (int64_t S : {2048, 4096, 8192})
      for (int64_t hd : {64, 128}) {
        if (dry && S > 2048)
          continue;
        std::vector<int64_t> spos(static_cast<size_t>(S)),
            sseg(static_cast<size_t>(S), 0);
        for (int64_t p = 0; p < S; ++p)
          spos[static_cast<size_t>(p)] = p;
        attention("causal " + std::to_string(S) + " d " + std::to_string(hd),
                  spos, sseg, spos, sseg, 2, hd, true, true, hd == 64 ? 1 : 2);
      }
  }

  /// Attention on both backends: fp32 (mimo's), then bf16 on mimo's
  /// kernels and on cuDNN (when it loads here).
  void attentions() {
    attentionsFp32();
    std::unique_ptr<Device> mimoKernels = device::makeDevice(
        gpucheck::checkedKind(), 0, 1, device::AttentionChoice::Mimo);
    gpu = mimoKernels.get();
    attentionsBf16();
    const device::CudnnStatus &cudnn = device::cudnnStatus();
    if (gpucheck::checkedKind() != device::DeviceKind::Cuda) {
      std::printf("attention: dry run: cuDNN not checked\n");
    } else if (!cudnn.problem.empty()) {
      report.check(false, "cuDNN attention", cudnn.problem);
    } else {
      std::printf("attention: cuDNN %s (%s)\n", cudnn.version.c_str(),
                  cudnn.library.c_str());
      std::unique_ptr<Device> withCudnn = device::makeDevice(
          gpucheck::checkedKind(), 0, 1, device::AttentionChoice::Cudnn);
      gpu = withCudnn.get();
      attentionsBf16();
    }
    gpu = cuda.get();
  }

  void embedding() {
    for (Dims s :
         {Dims{1, 1, 0, 3}, Dims{77, 33, 100, 612}, Dims{2048, 256, 0, 1024}}) {
      int64_t n = s.a, hidden = s.b, vb = s.c, ve = s.d;
      std::vector<int64_t> ids;
      std::uniform_int_distribution<int64_t> pick(-1, ve + 20);
      for (int64_t i = 0; i < n; ++i)
        ids.push_back(pick(rng));
      int64_t rows = ve - vb;
      std::string sz =
          " n=" + std::to_string(n) + " hidden=" + std::to_string(hidden);
      compare("embedding forward" + sz,
              {{random(rows * hidden)}, {ids}, {}, {n * hidden}},
              [=](Device &d, const Ptr &p) {
                d.embeddingForward(p.idx[0], n, mimo::device::dtypeOf(p.in[0]),
                                   p.in[0], vb, ve, hidden, p.out[0]);
              });
      compare("embedding forward, bf16 table" + sz,
              {{random(rows * hidden)}, {ids}, {}, {n * hidden}},
              [=](Device &d, const Ptr &p) {
                auto *bits = static_cast<uint16_t *>(
                    d.allocate(std::max<int64_t>(rows * hidden, 1) * 2));
                d.convert(mimo::device::DType::F32, p.in[0],
                          mimo::device::DType::BF16, bits, rows * hidden);
                d.embeddingForward(p.idx[0], n, mimo::device::dtypeOf(bits),
                                   bits, vb, ve, hidden, p.out[0]);
                d.release(bits);
              });
      const device::TokenGroups groups =
          device::TokenGroups::of(ids.data(), n, vb, ve);
      compare(
          "embedding backward" + sz,
          {{random(n * hidden)}, {groups.packed}, {random(rows * hidden)}, {}},
          [=](Device &d, const Ptr &p) {
            d.embeddingBackward(groups.view(p.idx[0]), p.in[0], hidden,
                                p.inout[0]);
          });
    }
  }

  void crossEntropy() {
    for (Dims s :
         {Dims{1, 1, 0, 0}, Dims{77, 1000, 1000, 0}, Dims{1030, 8192, 0, 0}}) {
      int64_t n = s.a, V = s.b, vb = s.c;
      std::vector<int64_t> targets;
      std::uniform_int_distribution<int64_t> pick(0, 2 * V + vb);
      for (int64_t i = 0; i < n; ++i)
        targets.push_back(pick(rng));
      std::string sz = " n=" + std::to_string(n) + " V=" + std::to_string(V);
      std::vector<float> logits = random(n * V, -8, 8);
      Io io{{logits}, {targets}, {}, {n, n, n, n, n * V}};
      std::vector<float> scale = random(n, 0, 1);
      for (size_t i = 0; i < scale.size(); i += 3)
        scale[i] = 0; // masked rows
      io.in.push_back(scale);
      compare("cross-entropy" + sz, io, [=](Device &d, const Ptr &p) {
        d.crossEntropyRowMax(mimo::device::dtypeOf(p.in[0]), p.in[0], n, V,
                             p.out[0]);
        d.crossEntropySums(mimo::device::dtypeOf(p.in[0]), p.in[0], p.idx[0], n,
                           V, vb, p.out[0], p.out[1], p.out[2]);
        d.crossEntropyLoss(p.out[0], p.out[1], p.out[2], n, p.out[3]);
        d.crossEntropyBackward(mimo::device::dtypeOf(p.in[0]), p.in[0],
                               p.idx[0], n, V, vb, p.out[0], p.out[1], p.in[1],
                               p.out[4]);
      });
      // bf16 logits (the head's GEMM writes them so) and bf16 dlogits: the
      // statistics as exact as above, dlogits a bf16 step apart at most.
      compare(
          "cross-entropy, bf16 logits" + sz, io,
          [=](Device &d, const Ptr &p) {
            Bits z(d, p.in[0], n * V);
            d.crossEntropyRowMax(mimo::device::dtypeOf(z.data), z.data, n, V,
                                 p.out[0]);
            d.crossEntropySums(mimo::device::dtypeOf(z.data), z.data, p.idx[0],
                               n, V, vb, p.out[0], p.out[1], p.out[2]);
            d.crossEntropyLoss(p.out[0], p.out[1], p.out[2], n, p.out[3]);
            viaBits(d, p.out[4], n * V, [&](uint16_t *dz) {
              d.crossEntropyBackward(mimo::device::dtypeOf(z.data), z.data,
                                     p.idx[0], n, V, vb, p.out[0], p.out[1],
                                     p.in[1], dz);
            });
          },
          kBf16Step);
    }
  }

  void adamw() {
    for (int64_t n : {int64_t(1), int64_t(4097), int64_t(1000003)}) {
      device::AdamWStep step;
      step.lr = 3e-4;
      step.weightDecay = 0.1;
      step.step = 7;
      step.gradScale = 0.6;
      compare("adamw n=" + std::to_string(n),
              {{random(n)},
               {},
               {random(n), random(n, -0.1, 0.1), random(n, 0, 0.01)},
               {}},
              [=](Device &d, const Ptr &p) {
                d.adamw(p.inout[0], p.in[0], p.inout[1], p.inout[2], n, step);
              });
    }
  }

  /// Two ranks on one GPU: B's copy of A's buffer waits for A's event.
  void events() {
    try {
      std::unique_ptr<Device> a =
          device::makeDevice(gpucheck::checkedKind(), 0);
      std::unique_ptr<Device> b =
          device::makeDevice(gpucheck::checkedKind(), 0);
      int64_t n = 1 << 22;
      std::vector<float> x = random(n);
      Tensor ta = Tensor::empty(*a, n), tb = Tensor::empty(*b, n);
      a->upload(ta.raw(), x.data(), ta.bytes());
      for (int i = 0; i < 20; ++i) // keep A's stream busy for a while
        a->scale(ta.data(), 1.0f, n);
      a->scale(ta.data(), 2.0f, n);
      b->wait(a->record());
      b->copy(tb.raw(), ta.raw(), tb.bytes());
      std::vector<float> got(static_cast<size_t>(n));
      b->download(got.data(), tb.raw(), tb.bytes());
      bool ok = true;
      for (int64_t i = 0; i < n; ++i)
        ok &= got[static_cast<size_t>(i)] == 2.0f * x[static_cast<size_t>(i)];
      report.check(ok, "a copy on another stream waits for the event");
    } catch (const std::exception &e) {
      report.check(false, "events", e.what());
    }
  }

  /// The local communicator's collectives over ranks on `kind` devices;
  /// each rank's results, concatenated.
  std::vector<std::vector<float>> collectives(device::DeviceKind kind,
                                              int64_t ranks) {
    auto world = comm::makeLocalWorld(ranks);
    std::vector<std::vector<float>> results(static_cast<size_t>(ranks));
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    std::vector<int64_t> group;
    for (int64_t r = 0; r < ranks; ++r)
      group.push_back(r);
    std::vector<std::thread> threads;
    for (int64_t r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          std::unique_ptr<Device> dev = device::makeDevice(kind, r);
          auto c = comm::makeLocalComm(world, r);
          c->setDevice(dev.get());
          c->setTimeout(std::chrono::seconds(60));
          std::mt19937 local(1000 + static_cast<unsigned>(r));
          std::uniform_real_distribution<float> dist(-1, 1);
          auto make = [&](int64_t n) {
            std::vector<float> v(static_cast<size_t>(n));
            for (float &x : v)
              x = dist(local) * 1e3f; // sums whose order matters
            Tensor t = Tensor::empty(*dev, n);
            dev->upload(t.raw(), v.data(), t.bytes());
            return t;
          };
          auto take = [&](const Tensor &t) {
            std::vector<float> host(static_cast<size_t>(t.size()));
            dev->download(host.data(), t.raw(), t.bytes());
            results[static_cast<size_t>(r)].insert(
                results[static_cast<size_t>(r)].end(), host.begin(),
                host.end());
          };
          Tensor sum = make(100003);
          c->allReduceSum(group, sum.data(), sum.size());
          take(sum);
          Tensor mx = make(1001);
          c->allReduceMax(group, mx.data(), mx.size());
          take(mx);
          std::vector<int64_t> counts;
          int64_t total = 0;
          for (int64_t i = 0; i < ranks; ++i) {
            counts.push_back(1000 * (i + 1) + 3);
            total += counts.back();
          }
          Tensor mine = make(counts[static_cast<size_t>(r)]);
          Tensor gathered = Tensor::empty(*dev, total);
          c->allGatherV(group, mine.data(), counts, gathered.data());
          take(gathered);
          Tensor full = make(total);
          Tensor piece = Tensor::empty(*dev, counts[static_cast<size_t>(r)]);
          c->reduceScatterV(group, full.data(), counts, piece.data());
          take(piece);
          Tensor bcast = make(4099);
          c->broadcast(group, ranks - 1, bcast.raw(), bcast.bytes());
          take(bcast);
          // A ring of point-to-point messages posted together.
          Tensor out = make(777), in = Tensor::empty(*dev, 777);
          std::vector<comm::P2POp> ops = {
              {true, (r + 1) % ranks, 5, out.raw(), out.bytes()},
              {false, (r + ranks - 1) % ranks, 5, in.raw(), in.bytes()}};
          c->exchange(ops);
          take(in);
          dev->synchronize();
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
    return results;
  }

  void communicators() {
    for (int64_t ranks : {int64_t(2), int64_t(4), int64_t(8)}) {
      std::string name = "local communicator, " + std::to_string(ranks) +
                         " ranks on GPUs: collectives equal the host's bitwise";
      try {
        auto host = collectives(device::DeviceKind::Cpu, ranks);
        auto gpu = collectives(gpucheck::checkedKind(), ranks);
        bool same = host.size() == gpu.size();
        for (size_t r = 0; same && r < host.size(); ++r)
          same = host[r].size() == gpu[r].size() &&
                 std::memcmp(host[r].data(), gpu[r].data(),
                             host[r].size() * sizeof(float)) == 0;
        report.check(same, name);
      } catch (const std::exception &e) {
        report.check(false, name, e.what());
      }
    }
  }

  void memory() {
    // Allocations come from the pool: many in a row, then one that cannot
    // fit, which must be a clear error, not an abort.
    try {
      for (int i = 0; i < 1000; ++i) {
        Tensor t = Tensor::empty(*cuda, 1 << 16);
        cuda->fillZero(t.raw(), t.bytes());
      }
      cuda->synchronize();
      report.check(true, "1000 pool allocations");
    } catch (const std::exception &e) {
      report.check(false, "1000 pool allocations", e.what());
    }
    try {
      Tensor huge = Tensor::empty(*cuda, int64_t(1) << 42); // 16 TiB
      report.check(false, "an allocation that cannot fit is refused");
    } catch (const device::DeviceError &e) {
      report.check(std::string(e.what()).find("out of") != std::string::npos,
                   "an allocation that cannot fit is refused", e.what());
      cuda->synchronize(); // the device stays usable
    }
  }

  /// --only attention: the attention checks alone (gpu-check's phase).
  int runAttention() {
    attentions();
    return report.finish();
  }

  int run() {
    gemm();
    gemmBf16();
    gemmMisaligned();
    elementwise();
    reductions();
    norms();
    rope();
    attentions();
    embedding();
    crossEntropy();
    adamw();
    events();
    communicators();
    memory();
    return report.finish();
  }

private:
  gpucheck::Report report;
  unsigned seed = 0;
  std::mt19937 rng;
  std::unique_ptr<Device> cpu, cuda;
  /// The device compare() runs on: cuda, or attentions()' backend's.
  Device *gpu = nullptr;
};

} // namespace

/// --probe: one real kernel and one GEMM on GPU 0, read back. A build
/// without this GPU's architecture fails here at once ("no kernel image is
/// available"), not in every check after.
int probe() {
  try {
    std::unique_ptr<Device> dev =
        device::makeDevice(gpucheck::checkedKind(), 0);
    const int64_t n = 1000;
    Tensor x = Tensor::empty(*dev, n), c = Tensor::empty(*dev, 4);
    dev->fill(x.data(), 3.0f, n);
    dev->gemm(mimo::device::DType::F32, false, false, 2, 2, 2, 1.0f, x.data(),
              x.data(), 0.0f, mimo::device::DType::F32, c.data());
    std::vector<float> back(n), product(4);
    dev->download(back.data(), x.data(), n * int64_t(sizeof(float)));
    dev->download(product.data(), c.data(), 4 * int64_t(sizeof(float)));
    for (float v : back)
      if (v != 3.0f)
        throw std::runtime_error("the fill kernel wrote " + std::to_string(v));
    for (float v : product)
      if (v != 18.0f)
        throw std::runtime_error("a 2x2 GEMM of threes gave " +
                                 std::to_string(v) + ", not 18");
    std::printf("mimo-cuda-ops-check: probe: a kernel and a GEMM ran on %s\n",
                dev->name().c_str());
    return 0;
  } catch (const std::exception &e) {
    std::printf("FAIL mimo-cuda-ops-check: probe: %s\n", e.what());
    return 1;
  }
}

int main(int argc, char **argv) {
  // --probe: whether a GPU is usable (exit 0), absent (77, the reason) or
  // broken for this build (1).
  gpucheck::requireGpu("mimo-cuda-ops-check");
  if (argc > 1 && std::string(argv[1]) == "--probe")
    return probe();
  const bool onlyAttention = argc > 2 && std::string(argv[1]) == "--only" &&
                             std::string(argv[2]) == "attention";
  try {
    OpsCheck check;
    return onlyAttention ? check.runAttention() : check.run();
  } catch (const std::exception &e) {
    std::printf("FAIL mimo-cuda-ops-check: %s\n", e.what());
    return 1;
  }
}
