//===- JsonStream.cpp - A large JSON report written piece by piece --------===//

#include "codegen/JsonStream.h"

namespace mimo {

namespace {

/// `value.dump(2)` as it appears `indent` columns in: every line after the
/// first moved right.
std::string indented(const nlohmann::ordered_json &value, size_t indent) {
  std::string text = value.dump(2);
  std::string out;
  out.reserve(text.size());
  const std::string pad(indent, ' ');
  for (char c : text) {
    out += c;
    if (c == '\n')
      out += pad;
  }
  return out;
}

} // namespace

void writeJsonStreamed(const nlohmann::ordered_json &object,
                       const std::vector<StreamedArray> &arrays,
                       const std::function<void(std::string_view)> &sink) {
  if (!object.is_object() || object.empty()) {
    sink(object.dump(2));
    return;
  }
  sink("{\n");
  size_t left = object.size();
  for (const auto &[key, value] : object.items()) {
    sink("  " + nlohmann::ordered_json(key).dump() + ": ");
    const StreamedArray *streamed = nullptr;
    for (const StreamedArray &array : arrays)
      if (array.key == key)
        streamed = &array;
    if (!streamed) {
      sink(indented(value, 2));
    } else if (streamed->count == 0) {
      sink("[]");
    } else {
      sink("[\n");
      for (size_t i = 0; i < streamed->count; ++i)
        sink("    " + indented(streamed->item(i), 4) +
             (i + 1 < streamed->count ? ",\n" : "\n"));
      sink("  ]");
    }
    sink(--left ? ",\n" : "\n");
  }
  sink("}");
}

} // namespace mimo
