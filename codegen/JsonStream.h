//===- JsonStream.h - Large JSON written piece by piece ---------*- C++ -*-===//
//
// explain --json and simulate --format json at 2^20 ranks would hold a JSON
// object per rank (gigabytes): their per-rank arrays are made one item at a
// time and written as they are made, in exactly the text that
// nlohmann::json's dump(2) gives the whole document.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_CODEGEN_JSONSTREAM_H
#define MIMO_CODEGEN_JSONSTREAM_H

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mimo {

/// An array of `count` items, item i made by `item(i)` when it is written.
struct StreamedArray {
  std::string key;
  size_t count = 0;
  std::function<nlohmann::ordered_json(size_t)> item;
};

/// Writes `object` as `object.dump(2)` would, each key named by `arrays`
/// (whose value in `object` is a placeholder keeping the key's place)
/// written from its items instead. `sink` receives the text in pieces.
void writeJsonStreamed(const nlohmann::ordered_json &object,
                       const std::vector<StreamedArray> &arrays,
                       const std::function<void(std::string_view)> &sink);

} // namespace mimo

#endif // MIMO_CODEGEN_JSONSTREAM_H
