//===- JsonReader.cpp - Bounded JSON parsing for every reader -------------===//

#include "runtime/json/JsonReader.h"

#include "runtime/json/JsonLocator.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

namespace mimo {

using json = nlohmann::json;

size_t firstInvalidUtf8(std::string_view text) {
  const auto *bytes = reinterpret_cast<const unsigned char *>(text.data());
  size_t size = text.size();
  for (size_t i = 0; i < size;) {
    unsigned char c = bytes[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t length;
    unsigned char low = 0x80, high = 0xBF; // range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0)
        low = 0xA0; // no overlong forms
      if (c == 0xED)
        high = 0x9F; // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0)
        low = 0x90;
      if (c == 0xF4)
        high = 0x8F; // nothing above U+10FFFF
    } else {
      return i;
    }
    if (i + length > size || bytes[i + 1] < low || bytes[i + 1] > high)
      return i;
    for (size_t k = 2; k < length; ++k)
      if (bytes[i + k] < 0x80 || bytes[i + k] > 0xBF)
        return i;
    i += length;
  }
  return std::string_view::npos;
}

namespace {

/// What the scan found wrong, and where.
struct ScanProblem {
  size_t offset;
  std::string message;
};

/// One pass over the text: nesting depth, keys given twice in one object
/// (nlohmann would keep the last silently), and the range of every
/// number. Tolerates invalid JSON (nlohmann reports that afterwards).
std::optional<ScanProblem> scan(std::string_view text) {
  int depth = 0;
  // The keys of each open object (nothing for arrays), as written.
  struct Frame {
    bool object = false;
    std::unordered_map<std::string_view, size_t> keys;
  };
  std::vector<Frame> frames;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      const size_t begin = i + 1;
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      if (frames.empty() || !frames.back().object || i >= text.size())
        continue;
      size_t next = i + 1;
      while (next < text.size() && (text[next] == ' ' || text[next] == '\t' ||
                                    text[next] == '\n' || text[next] == '\r'))
        ++next;
      if (next < text.size() && text[next] == ':') {
        std::string_view key = text.substr(begin, i - begin);
        auto [at, fresh] = frames.back().keys.emplace(key, begin - 1);
        if (!fresh) {
          std::string shown(key.substr(0, 60));
          return ScanProblem{
              begin - 1,
              "the key '" + shown + "' appears twice in one object (first " +
                  "at line " +
                  std::to_string(
                      JsonLocator::positionOfOffset(text, at->second).line) +
                  "); remove one of them"};
        }
      }
      continue;
    }
    if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth)
        return ScanProblem{i, "the document nests deeper than " +
                                  std::to_string(kMaxJsonDepth) +
                                  " levels; mimo's formats nest at most a "
                                  "few levels: remove the extra nesting"};
      frames.push_back(Frame{c == '{', {}});
      continue;
    }
    if (c == '}' || c == ']') {
      depth = std::max(0, depth - 1);
      if (!frames.empty())
        frames.pop_back();
      continue;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = i + 1;
      while (end < text.size() &&
             ((text[end] >= '0' && text[end] <= '9') || text[end] == '.' ||
              text[end] == 'e' || text[end] == 'E' || text[end] == '+' ||
              text[end] == '-'))
        ++end;
      std::string token(text.substr(i, end - i));
      double value = std::strtod(token.c_str(), nullptr);
      if (std::isinf(value)) {
        if (token.size() > 40)
          token = token.substr(0, 37) + "...";
        return ScanProblem{i, "the number " + token +
                                  " is out of range (beyond +-1.8e308); "
                                  "write a finite number"};
      }
      i = end - 1;
    }
  }
  return std::nullopt;
}

Diagnostic syntaxError(std::string_view text, size_t offset,
                       std::string message) {
  Diagnostic error;
  error.syntax = true;
  error.position = JsonLocator::positionOfOffset(text, offset);
  error.message = std::move(message);
  return error;
}

} // namespace

std::optional<json> parseJsonText(std::string_view text, Diagnostic &error) {
  size_t bad = firstInvalidUtf8(text);
  if (bad != std::string_view::npos) {
    error = syntaxError(text, bad,
                        "invalid UTF-8 (an ill-formed byte sequence); save "
                        "the file as UTF-8");
    return std::nullopt;
  }
  // JSON has no raw NUL byte anywhere (strings escape it as \u0000): one
  // means a damaged or binary file, never the document's end.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    error = syntaxError(text, nul,
                        "invalid JSON: a NUL byte; JSON text holds none (the "
                        "file is damaged, or not text)");
    return std::nullopt;
  }
  if (std::optional<ScanProblem> problem = scan(text)) {
    error =
        syntaxError(text, problem->offset, "invalid JSON: " + problem->message);
    return std::nullopt;
  }
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error &failure) {
    size_t offset = failure.byte > 0 ? failure.byte - 1 : 0;
    std::string what = failure.what();
    // nlohmann's text: "[json.exception.parse_error.101] parse error at
    // line 3, column 5: syntax error while parsing object key - ...".
    size_t detail = what.find("syntax error");
    if (detail != std::string::npos)
      what = what.substr(detail);
    // "last read: '<the token so far>'" can be a whole file: keep its ends.
    size_t token = what.find("last read: '");
    size_t close = what.rfind('\'');
    if (token != std::string::npos && close != std::string::npos &&
        close > token + 12 + 60)
      what = what.substr(0, token + 12 + 30) + "..." + what.substr(close - 20);
    error = syntaxError(text, offset,
                        "invalid JSON: " + what +
                            "; fix the JSON syntax at this position");
  } catch (const json::exception &failure) {
    // Anything the scan did not foresee: still a located refusal.
    error =
        syntaxError(text, 0, std::string("invalid JSON: ") + failure.what());
  }
  return std::nullopt;
}

std::string briefJson(const json &value, size_t limit) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > limit)
    text = text.substr(0, limit > 3 ? limit - 3 : 0) + "...";
  return text;
}

} // namespace mimo
