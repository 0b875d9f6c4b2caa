//===- Diagnostic.cpp - Errors about an input document --------------------===//

#include "runtime/json/Diagnostic.h"

#include <algorithm>
#include <cctype>

namespace mimo {

std::string formatDiagnostic(std::string_view file, const Diagnostic &diag) {
  std::string text(file);
  if (diag.syntax) {
    text += ":" + std::to_string(diag.position.line) + ":" +
            std::to_string(diag.position.column);
  } else {
    text += ": ";
    text += diag.pointer.empty() ? std::string("/") : diag.pointer;
  }
  text += diag.note ? ": note: " : ": error: ";
  text += diag.message;
  return text;
}

std::string escapePointerToken(std::string_view token) {
  std::string escaped;
  for (char c : token) {
    if (c == '~')
      escaped += "~0";
    else if (c == '/')
      escaped += "~1";
    else
      escaped += c;
  }
  return escaped;
}

static size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] =
          std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closestMatch(std::string_view word,
                         const std::vector<std::string> &candidates) {
  std::string best;
  size_t bestDistance = 0;
  for (const std::string &candidate : candidates) {
    size_t distance = editDistance(word, candidate);
    // A plausible typo: at most a third of the longer word changed.
    size_t limit =
        std::max<size_t>(1, std::max(word.size(), candidate.size()) / 3);
    bool prefix =
        candidate.size() >= 2 && word.size() >= 2 &&
        (candidate.rfind(word, 0) == 0 || word.rfind(candidate, 0) == 0);
    if ((distance <= limit || prefix) &&
        (best.empty() || distance < bestDistance)) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

} // namespace mimo
