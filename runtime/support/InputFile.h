//===- InputFile.h - Reading an input file that may be hostile --*- C++ -*-===//
//
// Every file mimoc and mimo-run read (model.json, a plan, a profile or
// cluster file, data, a checkpoint's state.json and `latest`) is opened
// without blocking and must be a regular file: a FIFO, a device such as
// /dev/zero or a directory is refused at once with what to give instead,
// rather than blocking forever (before --timeout applies) or being read
// until memory runs out. A file read whole is refused past a size meant
// for it, before any of it is read.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SUPPORT_INPUTFILE_H
#define MIMO_RUNTIME_SUPPORT_INPUTFILE_H

#include <cstdint>
#include <optional>
#include <string>

namespace mimo {

/// Why `path` is not a readable regular file ("PATH: error: ..."), or ""
/// when it is. `what` names it in the message ("the plan").
std::string inputFileProblem(const std::string &path, const std::string &what);

/// The whole of regular file `path`, at most `maxBytes` of it (a larger
/// file is refused, naming both sizes and `what`); nullopt with `error`.
std::optional<std::string> readInputFile(const std::string &path,
                                         int64_t maxBytes,
                                         const std::string &what,
                                         std::string &error);

/// Hands the heap's free pages back to the system (glibc keeps them): call
/// once a large input's parse tree is gone, before large allocations that
/// could not reuse it.
void releaseFreedMemory();

/// Sizes the readers allow.
inline constexpr int64_t kMaxModelFileBytes = int64_t(64) << 20;
inline constexpr int64_t kMaxPlanFileBytes = int64_t(1) << 30;
inline constexpr int64_t kMaxSmallJsonBytes = int64_t(16) << 20;

} // namespace mimo

#endif // MIMO_RUNTIME_SUPPORT_INPUTFILE_H
