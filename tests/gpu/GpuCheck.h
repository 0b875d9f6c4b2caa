//===- GpuCheck.h - The harness of the GPU checks ---------------*- C++ -*-===//
//
// The GPU checks are plain programs (no GoogleTest: the GPU machines have
// only the CUDA toolkit). Each prints one line per check and a summary,
// exits 0 when all pass, 1 when one fails, and 77 (ctest: skipped) when
// this machine has no usable GPU.
//
// MIMO_GPU_CHECK_DEVICE=cpu runs a check with the CPU device standing in
// for the GPU (the CPU against itself): a dry run of the harness on
// machines without a GPU, so that a GPU session's time is not spent on the
// checks' own bugs. ctest runs it so (tests/gpu/CMakeLists.txt).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_TESTS_GPU_GPUCHECK_H
#define MIMO_TESTS_GPU_GPUCHECK_H

#include "runtime/device/Devices.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

namespace mimo::gpucheck {

inline constexpr int kSkipped = 77;

/// The device under check: cuda, or cpu for a dry run.
inline device::DeviceKind checkedKind() {
  const char *kind = std::getenv("MIMO_GPU_CHECK_DEVICE");
  return kind && std::string(kind) == "cpu" ? device::DeviceKind::Cpu
                                            : device::DeviceKind::Cuda;
}

/// Exits 77 with the reason when there is no usable GPU (unless this is a
/// dry run on the CPU).
inline void requireGpu(const char *program) {
  if (checkedKind() == device::DeviceKind::Cpu) {
    std::printf("%s: dry run: the CPU device stands in for the GPU\n", program);
    return;
  }
  const device::CudaStatus &status = device::cudaStatus();
  if (status.devices > 0) {
    std::printf("%s: %d GPU(s), the first %s, driver %d\n", program,
                status.devices, status.firstName.c_str(), status.driverVersion);
    return;
  }
  std::printf("%s: skipped: no usable GPU: %s\n", program,
              status.problem.c_str());
  std::exit(kSkipped);
}

/// max |a - ref| / max |ref| (normwise relative); infinity on a NaN or a
/// size mismatch.
template <typename T>
double relativeError(const std::vector<T> &a, const std::vector<T> &ref) {
  if (a.size() != ref.size())
    return std::numeric_limits<double>::infinity();
  double scale = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double x = static_cast<double>(a[i]), r = static_cast<double>(ref[i]);
    if (std::isnan(x) != std::isnan(r))
      return std::numeric_limits<double>::infinity();
    if (std::isinf(r) || std::isnan(r)) {
      if (!(x == r || (std::isnan(x) && std::isnan(r))))
        return std::numeric_limits<double>::infinity();
      continue;
    }
    scale = std::max(scale, std::abs(r));
    worst = std::max(worst, std::abs(x - r));
  }
  return scale > 0 ? worst / scale : worst;
}

/// Counts and prints check results.
class Report {
public:
  explicit Report(const char *program) : program(program) {}
  /// One check: `ok`, its name and what was measured.
  bool check(bool ok, const std::string &what, const std::string &detail = "") {
    std::printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what.c_str(),
                detail.empty() ? "" : ": ", detail.c_str());
    std::fflush(stdout);
    ++checks;
    failures += ok ? 0 : 1;
    return ok;
  }
  /// A relative error against a tolerance.
  bool close(double error, double tolerance, const std::string &what) {
    char text[96];
    std::snprintf(text, sizeof(text), "relative error %.3g (limit %.0e)", error,
                  tolerance);
    return check(error <= tolerance, what, text);
  }
  int finish() const {
    std::printf("%s: %d of %d checks passed\n", program, checks - failures,
                checks);
    return failures == 0 ? 0 : 1;
  }

private:
  const char *program;
  int checks = 0, failures = 0;
};

} // namespace mimo::gpucheck

#endif // MIMO_TESTS_GPU_GPUCHECK_H
