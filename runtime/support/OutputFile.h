//===- OutputFile.h - Writing an output file without harm -------*- C++ -*-===//
//
// Every file a tool writes (mimoc's plan, IR, trace and tuned model;
// mimo-run's trace, metrics and profile) goes through here:
//  - a regular file, or a path that does not exist yet, is written to a
//    temporary file beside it and renamed over it, so a reader never sees
//    half of it and a failed write leaves what was there; a symbolic link
//    is followed (the file it names is replaced, the link stays);
//  - anything else that exists (/dev/null, /dev/stdout, a terminal, a
//    FIFO with a reader, a path through /dev/fd or /proc/self/fd) is
//    opened and written in place: never replaced, also for root, who could
//    otherwise rename a regular file over the system's /dev/null;
//  - a directory, a FIFO nobody reads, and a path that names one of the
//    run's inputs (the plan, the model, a data file) are refused before any
//    work, as is a folder that does not exist or cannot be written.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SUPPORT_OUTPUTFILE_H
#define MIMO_RUNTIME_SUPPORT_OUTPUTFILE_H

#include <optional>
#include <string>
#include <vector>

namespace mimo {

/// How an output is written.
enum class OutputMode {
  /// A temporary file beside `target`, renamed over it.
  Replace,
  /// Opened and written where it is (devices, pipes, terminals).
  InPlace,
};

struct OutputTarget {
  /// The file written: the path itself, or where its links lead.
  std::string target;
  OutputMode mode = OutputMode::Replace;
};

/// Whether `path` can take an output, checked before any work: the
/// problem ("PATH: error: ... ; the fix") or the target. `inputs` are the
/// files the run reads (missing ones are skipped).
std::optional<OutputTarget> checkOutput(const std::string &path,
                                        const std::vector<std::string> &inputs,
                                        std::string &problem);

/// Writes `text` to `path` as checkOutput says (checking again first);
/// false with `problem` set when it could not, in which case a regular
/// target is left as it was.
bool writeOutput(const std::string &path, const std::string &text,
                 std::string &problem,
                 const std::vector<std::string> &inputs = {});

/// An output written piece by piece (metrics: a line per step, flushed):
/// opened in place, truncated when it is a regular file. nullopt-like
/// failure through ok(); the problem names the path.
class StreamedOutput {
public:
  StreamedOutput() = default;
  ~StreamedOutput();
  StreamedOutput(const StreamedOutput &) = delete;
  StreamedOutput &operator=(const StreamedOutput &) = delete;
  /// Checks and opens `path`; false with `problem` set.
  bool open(const std::string &path, const std::vector<std::string> &inputs,
            std::string &problem);
  /// Appends and flushes; false once a write failed.
  bool write(const std::string &text);
  bool isOpen() const { return fd >= 0; }
  bool ok() const { return good; }

private:
  int fd = -1;
  bool good = true;
};

} // namespace mimo

#endif // MIMO_RUNTIME_SUPPORT_OUTPUTFILE_H
