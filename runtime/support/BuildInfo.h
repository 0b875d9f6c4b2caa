//===- BuildInfo.h - What this build of mimo is ----------------*- C++ -*-===//
//
// `--version` of mimoc and mimo-run (README.md): mimo's version, the git
// commit it was built from, and what was built in (CUDA, NCCL, MPI, BLAS,
// OpenMP).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SUPPORT_BUILDINFO_H
#define MIMO_RUNTIME_SUPPORT_BUILDINFO_H

#include <string>

namespace mimo {

/// "0.1.0".
const char *mimoVersion();

/// The short git commit ("-dirty" when tracked files differed), or
/// "unknown" outside a git checkout.
const char *gitCommit();

/// The `--version` text of `tool`: "TOOL (mimo) 0.1.0\n  commit ...\n
///   built with: ...\n".
std::string versionText(const std::string &tool);

} // namespace mimo

#endif // MIMO_RUNTIME_SUPPORT_BUILDINFO_H
