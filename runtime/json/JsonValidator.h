//===- JsonValidator.h - Typed, range-checked reads of JSON ----*- C++ -*-===//
//
// The one validator every reader shares (model.json, the plan, jsonl
// samples): each getter checks the type and range of one value, reports a
// located Diagnostic ("expected ..., found ...; fix") at its JSON pointer and
// returns std::nullopt when the value is unusable, so a reader collects
// every problem of a document in one pass.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_JSON_JSONVALIDATOR_H
#define MIMO_RUNTIME_JSON_JSONVALIDATOR_H

#include "runtime/json/Diagnostic.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace mimo {

/// "the string \"x\"", "the number 2.5", "an object", ... (bounded length).
std::string describeJson(const nlohmann::json &value);

/// "a, b, c".
std::string joinNames(const std::vector<std::string> &names);

class JsonValidator {
public:
  using json = nlohmann::json;
  static constexpr int64_t kNoMaximum = std::numeric_limits<int64_t>::max();

  std::vector<Diagnostic> diagnostics;

  /// Where else in the document `key`, found unknown in the object at
  /// `where` (array indices written N), is allowed ("/batch/seq_length"),
  /// or "": it is then reported as out of place.
  std::function<std::string(const std::string &where, const std::string &key)>
      placeOf;

  void error(std::string pointer, std::string message);

  /// Checks that `value` is an object and that every key is known.
  bool object(const json &value, const std::string &pointer,
              const std::vector<std::string> &known, const std::string &what);

  /// The member `key` of `object`, or nullptr (reporting it when required).
  const json *member(const json &object, const std::string &pointer,
                     const std::string &key, bool required,
                     const std::string &meaning);

  /// An integer in [minimum, maximum].
  std::optional<int64_t> integer(const json &object, const std::string &pointer,
                                 const std::string &key, bool required,
                                 int64_t minimum, const std::string &meaning,
                                 int64_t maximum = kNoMaximum);
  std::optional<int64_t>
  integerValue(const json &value, const std::string &pointer, int64_t minimum,
               const std::string &meaning, int64_t maximum = kNoMaximum);

  /// A number in the given range (each end open or closed).
  std::optional<double> number(const json &object, const std::string &pointer,
                               const std::string &key, double minimum,
                               bool minimumExcluded, double maximum,
                               bool maximumExcluded,
                               const std::string &meaning);
  std::optional<double> numberValue(const json &value,
                                    const std::string &pointer, double minimum,
                                    bool minimumExcluded, double maximum,
                                    bool maximumExcluded,
                                    const std::string &meaning);

  std::optional<bool> boolean(const json &object, const std::string &pointer,
                              const std::string &key,
                              const std::string &meaning);

  /// A non-empty string.
  std::optional<std::string> string(const json &object,
                                    const std::string &pointer,
                                    const std::string &key, bool required,
                                    const std::string &meaning);

  /// One of `allowed` (suggesting the closest on a typo).
  std::optional<std::string> choice(const json &object,
                                    const std::string &pointer,
                                    const std::string &key, bool required,
                                    const std::vector<std::string> &allowed,
                                    const std::string &meaning);

  /// "\"a\", \"b\" or \"c\"".
  static std::string quoted(const std::vector<std::string> &names);
};

} // namespace mimo

#endif // MIMO_RUNTIME_JSON_JSONVALIDATOR_H
