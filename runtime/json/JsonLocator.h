//===- JsonLocator.h - JSON pointer -> line:column -------------*- C++ -*-===//
//
// nlohmann::json parses values but does not keep their source positions; the
// locator scans the (already valid) text once and remembers where every value
// starts, so diagnostics and IR locations can point into model.json.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_JSON_JSONLOCATOR_H
#define MIMO_RUNTIME_JSON_JSONLOCATOR_H

#include "runtime/json/Diagnostic.h"

#include <string>
#include <string_view>
#include <unordered_map>

namespace mimo {

class JsonLocator {
public:
  JsonLocator() = default;
  /// Indexes `text`; tolerates invalid JSON by indexing what it can.
  explicit JsonLocator(std::string_view text);

  /// Where the value at `pointer` starts; for a pointer that is not in the
  /// document (a missing key), its nearest present ancestor.
  SourcePosition find(std::string_view pointer) const;

  /// Line and column of a byte offset in `text`.
  static SourcePosition positionOfOffset(std::string_view text, size_t offset);

private:
  std::unordered_map<std::string, SourcePosition> positions;
};

} // namespace mimo

#endif // MIMO_RUNTIME_JSON_JSONLOCATOR_H
