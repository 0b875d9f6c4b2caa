//===- HfConfigCheck.h - config.json values against an arch ----*- C++ -*-===//
//
// docs/pretrained.md: each disagreement between a part of a Hugging Face
// folder's config.json (the language model's, the vision tower's, or a
// LLaVA config's own keys) and a module's `arch`, at the arch key's
// pointer, with config.json's pointer in the message and the fix. The
// families' checks (ModuleFamily::hfCheck) and the LLaVA composer
// (checkpoint/HfConfigCheck.cpp) speak through it.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_FAMILY_HFCONFIGCHECK_H
#define MIMO_RUNTIME_FAMILY_HFCONFIGCHECK_H

#include "runtime/family/ModuleArch.h"
#include "runtime/json/Diagnostic.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mimo {

/// A number as messages write it (4, 0.5, 1e-06).
std::string hfNumberText(double x);

struct ConfigCheck {
  /// The part of config.json checked, its JSON pointer there ("" or
  /// "/text_config"), config.json's path, and the arch's pointer with a
  /// trailing '/' ("/modules/1/arch/").
  const nlohmann::json &c;
  std::string pointer, path, arch;
  std::vector<Diagnostic> &problems;
  /// The module's pointer ("/modules/1"), for problems of the folder as a
  /// whole (they point at its init).
  std::string module;
  /// The whole config.json's model_type ("" when none): a part that names
  /// none is of that type ("clip" for a CLIPModel's vision_config).
  std::string outerType;

  /// "/KEY of PATH": where config.json says it.
  std::string where(const std::string &key) const;
  /// A problem at arch key `key`.
  void problem(const std::string &key, const std::string &message);
  bool has(const char *key) const { return c.contains(key); }
  std::optional<int64_t> integer(const char *key) const;
  std::string text(const char *key, const std::string &fallback) const;
  bool boolean(const char *key, bool fallback) const;
  /// Whether config.json gives `hfKey` as a value of the wrong JSON type
  /// (a string "500000" where a number belongs): a problem naming it, so
  /// that a default never stands in for what the file meant. null is
  /// absent.
  bool wrongType(const char *key, const char *hfKey, bool ok,
                 const char *expected);
  /// An integer size of config.json against arch (`fallback` when the file
  /// gives none).
  void size(const char *key, const char *hfKey, int64_t mine,
            std::optional<int64_t> fallback = std::nullopt);
  void number(const char *key, const char *hfKey, double mine, double fallback);
  /// A flag of arch against what config.json's `hfKey` makes it.
  void flag(const char *key, const std::string &hfKey, bool mine, bool theirs);
  /// The transformer's sizes, named alike in every family's config.
  void sizes(const ModuleArch &arch);
  /// The folder's `what` is of a family mimo does not read (`type` its
  /// model_type); `reads` says what this module reads.
  void otherFamily(const std::string &what, const std::string &type,
                   const std::string &reads);
  /// A choice of arch (`mine`) against config.json's, translated to
  /// mimo's name (`theirs`, "" when mimo does not compute it).
  void choice(const char *key, const char *hfKey, const std::string &mine,
              const std::string &theirs, const std::string &raw,
              const char *computed);
};

} // namespace mimo

#endif // MIMO_RUNTIME_FAMILY_HFCONFIGCHECK_H
