//===- JsonReader.h - Bounded JSON parsing for every reader ----*- C++ -*-===//
//
// One entry point for every JSON document mimo reads (model.json, plans,
// jsonl lines, checkpoint headers and state; docs/limits.md): the text is
// scanned once before nlohmann builds a tree, so a document that is not valid
// UTF-8, nests deeper than kMaxJsonDepth (nlohmann's parser and destructor
// recurse) or holds a number beyond double's range is refused with a
// line:column, and no exception of nlohmann's escapes.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_JSON_JSONREADER_H
#define MIMO_RUNTIME_JSON_JSONREADER_H

#include "runtime/json/Diagnostic.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string_view>

namespace mimo {

/// The deepest nesting any reader accepts; mimo's own formats nest at most
/// six levels.
inline constexpr int kMaxJsonDepth = 64;

/// Parses a whole JSON document. On failure returns std::nullopt and fills
/// `error` as a syntax error (line:column, the cause, the fix).
std::optional<nlohmann::json> parseJsonText(std::string_view text,
                                            Diagnostic &error);

/// The byte offset of the first ill-formed UTF-8 sequence, or npos.
size_t firstInvalidUtf8(std::string_view text);

/// A JSON value for a message: dumped, never more than `limit` characters,
/// never throwing (invalid UTF-8 is replaced).
std::string briefJson(const nlohmann::json &value, size_t limit = 60);

} // namespace mimo

#endif // MIMO_RUNTIME_JSON_JSONREADER_H
