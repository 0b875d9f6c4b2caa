//===- JsonLocator.cpp - JSON pointer -> line:column ----------------------===//

#include "runtime/json/JsonLocator.h"

namespace mimo {
namespace {

/// A recursive-descent walk that records the start of every value.
class Scanner {
public:
  Scanner(std::string_view text,
          std::unordered_map<std::string, SourcePosition> &positions)
      : text(text), positions(positions) {}

  void run() {
    skipSpace();
    value("");
  }

private:
  std::string_view text;
  std::unordered_map<std::string, SourcePosition> &positions;
  size_t at = 0;
  int line = 1, column = 1;
  int depth = 0;

  bool done() const { return at >= text.size(); }
  char peek() const { return done() ? '\0' : text[at]; }
  void advance() {
    if (done())
      return;
    if (text[at] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    ++at;
  }
  void skipSpace() {
    while (!done() && (peek() == ' ' || peek() == '\t' || peek() == '\n' ||
                       peek() == '\r'))
      advance();
  }

  std::string string() {
    std::string decoded;
    advance(); // opening quote
    while (!done() && peek() != '"') {
      if (peek() == '\\') {
        advance();
        char escape = peek();
        switch (escape) {
        case 'n':
          decoded += '\n';
          break;
        case 't':
          decoded += '\t';
          break;
        case 'u':
          // Keys are plain ASCII in practice; keep the escape verbatim.
          decoded += "\\u";
          break;
        default:
          decoded += escape;
        }
        advance();
        continue;
      }
      decoded += peek();
      advance();
    }
    advance(); // closing quote
    return decoded;
  }

  void value(const std::string &pointer) {
    if (done() || ++depth > 512)
      return;
    positions.emplace(pointer, SourcePosition{line, column});
    char c = peek();
    if (c == '{') {
      advance();
      skipSpace();
      while (!done() && peek() != '}') {
        if (peek() != '"')
          break;
        std::string key = string();
        skipSpace();
        if (peek() != ':')
          break;
        advance();
        skipSpace();
        value(pointer + "/" + escapePointerToken(key));
        skipSpace();
        if (peek() == ',') {
          advance();
          skipSpace();
        }
      }
      advance();
    } else if (c == '[') {
      advance();
      skipSpace();
      size_t index = 0;
      while (!done() && peek() != ']') {
        size_t before = at;
        value(pointer + "/" + std::to_string(index++));
        skipSpace();
        if (peek() == ',') {
          advance();
          skipSpace();
        } else if (at == before) {
          break;
        }
      }
      advance();
    } else if (c == '"') {
      string();
    } else {
      while (!done() && peek() != ',' && peek() != '}' && peek() != ']' &&
             peek() != ' ' && peek() != '\n' && peek() != '\t' &&
             peek() != '\r')
        advance();
    }
    --depth;
  }
};

} // namespace

JsonLocator::JsonLocator(std::string_view text) {
  Scanner(text, positions).run();
}

SourcePosition JsonLocator::find(std::string_view pointer) const {
  std::string key(pointer);
  while (true) {
    auto it = positions.find(key);
    if (it != positions.end())
      return it->second;
    if (key.empty())
      return SourcePosition{};
    key.erase(key.rfind('/'));
  }
}

SourcePosition JsonLocator::positionOfOffset(std::string_view text,
                                             size_t offset) {
  SourcePosition position{1, 1};
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++position.line;
      position.column = 1;
    } else {
      ++position.column;
    }
  }
  return position;
}

} // namespace mimo
