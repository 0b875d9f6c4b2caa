//===- Versions.h - The CUDA and NCCL versions mimo needs -------*- C++ -*-===//
//
// docs/gpu.md, start-up checks: the CUDA driver must support the CUDA
// runtime mimo was built with, and NCCL must be 2.18 or later (the
// ncclCommSplit its groups are made with). Their version numbers as the
// libraries report them, written out, and the refusals.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SUPPORT_VERSIONS_H
#define MIMO_RUNTIME_SUPPORT_VERSIONS_H

#include <string>

namespace mimo {

/// cudaDriverGetVersion's and cudaRuntimeGetVersion's number (1000 major
/// + 10 minor) as "13.0".
inline std::string cudaVersionText(int version) {
  return std::to_string(version / 1000) + "." +
         std::to_string(version % 1000 / 10);
}

/// The refusal of a driver older than the runtime ("" when it is not).
inline std::string cudaDriverProblem(int driver, int runtime) {
  if (driver >= runtime)
    return "";
  return "the CUDA driver supports CUDA " +
         (driver > 0 ? cudaVersionText(driver) : std::string("none")) +
         ", older than this build's CUDA runtime " + cudaVersionText(runtime) +
         ": install an NVIDIA driver for CUDA " + cudaVersionText(runtime) +
         " or later (nvidia-smi shows the driver's CUDA version)";
}

/// ncclGetVersion's number as "2.21.5": 10000 major + 100 minor + patch
/// since NCCL 2.9, 1000 major + 100 minor + patch before.
inline std::string ncclVersionText(int version) {
  const bool old = version < 20900;
  const int major = old ? version / 1000 : version / 10000;
  const int minor = old ? version % 1000 / 100 : version % 10000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(version % 100);
}

inline constexpr int kNcclMinimum = 21800; // 2.18.0: ncclCommSplit

/// The refusal of an NCCL older than mimo needs ("" when it is not).
inline std::string ncclVersionProblem(int version) {
  if (version >= kNcclMinimum)
    return "";
  return "NCCL " + ncclVersionText(version) +
         " is older than the 2.18 mimo needs (ncclCommSplit): install "
         "libnccl2 2.18 or later, or put its directory first in "
         "LD_LIBRARY_PATH";
}

} // namespace mimo

#endif // MIMO_RUNTIME_SUPPORT_VERSIONS_H
