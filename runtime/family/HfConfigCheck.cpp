//===- HfConfigCheck.cpp - config.json values against an arch -------------===//

#include "runtime/family/HfConfigCheck.h"

#include "runtime/json/JsonReader.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace mimo {

using nlohmann::json;

std::string hfNumberText(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

std::string ConfigCheck::where(const std::string &key) const {
  return pointer + "/" + key + " of " + path;
}

void ConfigCheck::problem(const std::string &key, const std::string &message) {
  problems.push_back(Diagnostic::error(arch + key, message));
}

std::optional<int64_t> ConfigCheck::integer(const char *key) const {
  if (c.contains(key) && c[key].is_number_integer())
    return c[key].get<int64_t>();
  return std::nullopt;
}

std::string ConfigCheck::text(const char *key,
                              const std::string &fallback) const {
  return c.contains(key) && c[key].is_string() ? c[key].get<std::string>()
                                               : fallback;
}

bool ConfigCheck::boolean(const char *key, bool fallback) const {
  return c.contains(key) && c[key].is_boolean() ? c[key].get<bool>() : fallback;
}

bool ConfigCheck::wrongType(const char *key, const char *hfKey, bool ok,
                            const char *expected) {
  if (!c.contains(hfKey) || c[hfKey].is_null() || ok)
    return false;
  problem(key, where(hfKey) + " is " + briefJson(c[hfKey], 40) + ", not " +
                   expected + ": write it as one in config.json");
  return true;
}

void ConfigCheck::size(const char *key, const char *hfKey, int64_t mine,
                       std::optional<int64_t> fallback) {
  if (wrongType(key, hfKey, c.contains(hfKey) && c[hfKey].is_number_integer(),
                "an integer"))
    return;
  std::optional<int64_t> theirs = integer(hfKey);
  if (!theirs)
    theirs = fallback;
  if (!theirs) {
    problem(key, std::string("config.json gives no integer ") + hfKey + " (" +
                     where(hfKey) + ")");
    return;
  }
  if (*theirs != mine)
    problem(key, std::to_string(mine) + " here, but " + where(hfKey) + " is " +
                     std::to_string(*theirs) + ": set arch." + key + " to " +
                     std::to_string(*theirs) + " (the pretrained model's)");
}

void ConfigCheck::number(const char *key, const char *hfKey, double mine,
                         double fallback) {
  if (wrongType(key, hfKey, c.contains(hfKey) && c[hfKey].is_number(),
                "a number"))
    return;
  double theirs = fallback;
  if (c.contains(hfKey) && c[hfKey].is_number())
    theirs = c[hfKey].get<double>();
  if (std::abs(theirs - mine) > 1e-9 * std::max(std::abs(theirs), 1e-30))
    problem(key, hfNumberText(mine) + " here, but " + where(hfKey) + " is " +
                     hfNumberText(theirs) + ": set arch." + key + " to " +
                     hfNumberText(theirs));
}

void ConfigCheck::flag(const char *key, const std::string &hfKey, bool mine,
                       bool theirs) {
  // (A flag the family implies, "model_type", is no boolean key.)
  if (hfKey.find('/') == std::string::npos && hfKey != "model_type" &&
      wrongType(key, hfKey.c_str(), c.contains(hfKey) && c[hfKey].is_boolean(),
                "true or false"))
    return;
  if (mine != theirs)
    problem(key, std::string(mine ? "true" : "false") + " here, but " +
                     where(hfKey) + " makes it " + (theirs ? "true" : "false") +
                     ": set arch." + key + " to " +
                     (theirs ? "true" : "false"));
}

void ConfigCheck::sizes(const ModuleArch &a) {
  size("hidden_size", "hidden_size", a.hiddenSize);
  size("num_layers", "num_hidden_layers", a.numLayers);
  size("num_heads", "num_attention_heads", a.numHeads);
  size("ffn_hidden_size", "intermediate_size", a.ffnHiddenSize);
}

void ConfigCheck::otherFamily(const std::string &what, const std::string &type,
                              const std::string &reads) {
  problems.push_back(Diagnostic::error(
      module + "/init/from", "the folder's " + what + " is " +
                                 (type.empty() ? std::string("of no model_type")
                                               : "a '" + type + "'") +
                                 " (" + where("model_type") + "); " + reads));
}

void ConfigCheck::choice(const char *key, const char *hfKey,
                         const std::string &mine, const std::string &theirs,
                         const std::string &raw, const char *computed) {
  if (theirs.empty())
    problem(key, where(hfKey) + " is '" + raw +
                     "', which mimo does not compute (it computes " + computed +
                     ")");
  else if (theirs != mine)
    problem(key, "\"" + mine + "\" here, but " + where(hfKey) + " is '" + raw +
                     "': set arch." + key + " to \"" + theirs + "\"");
}

} // namespace mimo
