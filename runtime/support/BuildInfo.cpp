//===- BuildInfo.cpp - What this build of mimo is -------------------------===//

#include "runtime/support/BuildInfo.h"

#include "mimo/GitCommit.h" // generated at build time (cmake/GitCommit.cmake)

#include <string>

#ifndef MIMO_VERSION
#define MIMO_VERSION "unknown"
#endif

namespace mimo {

const char *mimoVersion() { return MIMO_VERSION; }

const char *gitCommit() { return MIMO_GIT_COMMIT; }

std::string versionText(const std::string &tool) {
  std::string text = tool + " (mimo) " + mimoVersion() + "\n";
  text += "  commit:  " + std::string(gitCommit()) + "\n";
  std::string with, without;
  auto feature = [&](bool built, const std::string &what) {
    std::string &list = built ? with : without;
    list += (list.empty() ? "" : ", ") + what;
  };
#ifdef MIMO_HAVE_CUDA
  feature(true, "CUDA " MIMO_CUDA_VERSION " (--device cuda)");
#else
  feature(false, "CUDA");
#endif
#ifdef MIMO_HAVE_NCCL
  feature(true, "NCCL (--backend nccl)");
#else
  feature(false, "NCCL");
#endif
#ifdef MIMO_HAVE_MPI
  feature(true, "MPI (--backend mpi)");
#else
  feature(false, "MPI");
#endif
#ifdef MIMO_HAVE_BLAS
  feature(true, "BLAS");
#else
  feature(false, "BLAS");
#endif
#ifdef _OPENMP
  feature(true, "OpenMP");
#else
  feature(false, "OpenMP");
#endif
  text +=
      "  built with:    " + (with.empty() ? "nothing optional" : with) + "\n";
  if (!without.empty())
    text += "  built without: " + without + "\n";
#if defined(__clang__)
  text += "  compiler: clang " __clang_version__ "\n";
#elif defined(__GNUC__)
  text += "  compiler: GCC " __VERSION__ "\n";
#endif
  return text;
}

} // namespace mimo
