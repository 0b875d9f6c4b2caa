//===- Diagnostic.h - Errors about an input document -----------*- C++ -*-===//
//
// Every user-facing input error names the file, the JSON pointer and a fix:
//   model.json: /modules/1/parallel/tp: error: <expected>, <found>; <fix>
// Syntax errors have no pointer and carry line:column instead.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_JSON_DIAGNOSTIC_H
#define MIMO_RUNTIME_JSON_DIAGNOSTIC_H

#include <string>
#include <string_view>
#include <vector>

namespace mimo {

/// 1-based line and column; 0 when unknown.
struct SourcePosition {
  int line = 0;
  int column = 0;
};

struct Diagnostic {
  /// RFC 6901 JSON pointer of the offending value ("" = the whole document).
  std::string pointer;
  std::string message;
  /// Set for syntax errors (where there is no pointer yet).
  SourcePosition position;
  bool syntax = false;
  /// A note attached to the preceding error (printed as "note:").
  bool note = false;

  static Diagnostic error(std::string pointer, std::string message) {
    Diagnostic diag;
    diag.pointer = std::move(pointer);
    diag.message = std::move(message);
    return diag;
  }
};

/// "FILE: POINTER: error: MESSAGE", or "FILE:LINE:COL: error: MESSAGE" for
/// syntax errors ("note:" for notes).
std::string formatDiagnostic(std::string_view file, const Diagnostic &diag);

/// Escapes one reference token of a JSON pointer ("~" -> "~0", "/" -> "~1").
std::string escapePointerToken(std::string_view token);

/// The closest of `candidates` to `word` by edit distance, or "" when none is
/// close enough to be a plausible typo.
std::string closestMatch(std::string_view word,
                         const std::vector<std::string> &candidates);

} // namespace mimo

#endif // MIMO_RUNTIME_JSON_DIAGNOSTIC_H
