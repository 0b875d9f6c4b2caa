//===- Safetensors.cpp - The safetensors file format ----------------------===//

#include "runtime/checkpoint/Safetensors.h"

#include "runtime/json/JsonReader.h"
#include "runtime/support/InputFile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <limits>

namespace mimo::safetensors {

namespace {

constexpr int64_t kMaxHeaderBytes = int64_t(100) << 20;

} // namespace

int64_t dtypeSize(const std::string &dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64")
    return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32")
    return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16")
    return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL")
    return 1;
  return 0;
}

const TensorEntry *Header::find(const std::string &name) const {
  for (const TensorEntry &t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

std::string encodeHeader(Header &header) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  if (!header.metadata.empty())
    json["__metadata__"] = header.metadata;
  int64_t at = 0;
  for (TensorEntry &t : header.tensors) {
    int64_t n = dtypeSize(t.dtype);
    for (int64_t d : t.shape)
      n *= d;
    t.begin = at;
    t.end = at + n;
    at = t.end;
    json[t.name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = json.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // data 8-byte aligned
  uint64_t length = text.size();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<size_t>(i)] =
        static_cast<char>((length >> (8 * i)) & 0xff);
  header.dataOffset = 8 + static_cast<int64_t>(length);
  header.dataBytes = at;
  return bytes + text;
}

std::optional<Header> readHeader(const std::string &path, std::string &error) {
  auto fail = [&](const std::string &what) -> std::optional<Header> {
    error = path + ": error: " + what;
    return std::nullopt;
  };
  if (std::string problem = inputFileProblem(path, "the tensor file");
      !problem.empty()) {
    error = problem;
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return fail("cannot open it");
  in.seekg(0, std::ios::end);
  int64_t fileSize = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  unsigned char prefix[8];
  if (fileSize < 8 || !in.read(reinterpret_cast<char *>(prefix), 8))
    return fail("the file is truncated: " + std::to_string(fileSize) +
                " bytes, too short for a safetensors header");
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i)
    length = (length << 8) | prefix[i];
  if (length > static_cast<uint64_t>(kMaxHeaderBytes) ||
      static_cast<int64_t>(length) > fileSize - 8)
    return fail("the header claims " + std::to_string(length) +
                " bytes but the file has " + std::to_string(fileSize) +
                "; the file is truncated or not safetensors");
  std::string text(static_cast<size_t>(length), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(length)))
    return fail("the file ends inside its header");
  return parseHeader(text, fileSize - 8 - static_cast<int64_t>(length), path,
                     error);
}

std::optional<Header> parseHeader(std::string_view text, int64_t dataBytes,
                                  const std::string &path, std::string &error) {
  auto fail = [&](const std::string &what) -> std::optional<Header> {
    error = path + ": error: " + what;
    return std::nullopt;
  };
  Diagnostic syntax;
  std::optional<nlohmann::json> parsed = parseJsonText(text, syntax);
  if (!parsed)
    return fail("the header (at its line " +
                std::to_string(syntax.position.line) + ", column " +
                std::to_string(syntax.position.column) +
                ") is not valid: " + syntax.message);
  const nlohmann::json &json = *parsed;
  if (!json.is_object())
    return fail("the header is not a JSON object");
  Header header;
  header.dataOffset = 8 + static_cast<int64_t>(text.size());
  header.dataBytes = dataBytes;
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string &name = it.key();
    const nlohmann::json &entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object())
        return fail("__metadata__ is not an object of strings");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string())
          return fail("__metadata__/" + m.key() + " is not a string");
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string &what) {
      return fail("tensor '" + name + "': " + what);
    };
    if (!entry.is_object() || !entry.contains("dtype") ||
        !entry.contains("shape") || !entry.contains("data_offsets"))
      return bad("expected dtype, shape and data_offsets");
    TensorEntry t;
    t.name = name;
    if (!entry["dtype"].is_string() ||
        dtypeSize(t.dtype = entry["dtype"].get<std::string>()) == 0)
      return bad("unknown dtype " + briefJson(entry["dtype"]));
    const nlohmann::json &shape = entry["shape"];
    if (!shape.is_array() || shape.size() > 8)
      return bad("the shape is not an array of at most 8 sizes");
    int64_t bytes = dtypeSize(t.dtype);
    for (const nlohmann::json &d : shape) {
      if (!d.is_number_unsigned() ||
          d.get<uint64_t>() > static_cast<uint64_t>(1) << 40)
        return bad("a size of its shape is not a non-negative integer "
                   "below 2^40");
      int64_t size = static_cast<int64_t>(d.get<uint64_t>());
      if (size > 0 && bytes > std::numeric_limits<int64_t>::max() / size)
        return bad("its shape holds more bytes than a file can");
      bytes *= size;
      t.shape.push_back(size);
    }
    const nlohmann::json &offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 ||
        !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      return bad("data_offsets is not [begin, end]");
    uint64_t begin = offsets[0].get<uint64_t>(),
             end = offsets[1].get<uint64_t>();
    if (begin > end || end > static_cast<uint64_t>(header.dataBytes))
      return bad("data_offsets [" + std::to_string(begin) + ", " +
                 std::to_string(end) + ") leave the file's " +
                 std::to_string(header.dataBytes) +
                 " data bytes: the file is truncated or corrupt");
    t.begin = static_cast<int64_t>(begin);
    t.end = static_cast<int64_t>(end);
    if (t.end - t.begin != bytes)
      return bad("data_offsets hold " + std::to_string(t.end - t.begin) +
                 " bytes, its dtype and shape need " + std::to_string(bytes));
    header.tensors.push_back(std::move(t));
  }
  // The tensors must tile the data: no gap, no overlap, nothing after.
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorEntry &a, const TensorEntry &b) {
              return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
            });
  int64_t at = 0;
  for (const TensorEntry &t : header.tensors) {
    if (t.begin != at)
      return fail("tensor '" + t.name + "' starts at data byte " +
                  std::to_string(t.begin) + ", expected " + std::to_string(at) +
                  " (tensors must tile the data)");
    at = t.end;
  }
  if (at != header.dataBytes)
    return fail("the tensors cover " + std::to_string(at) +
                " data bytes but the file holds " +
                std::to_string(header.dataBytes) +
                (at > header.dataBytes ? "; the file is truncated"
                                       : "; it has trailing bytes"));
  return header;
}

} // namespace mimo::safetensors
