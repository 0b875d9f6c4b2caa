//===- JsonValidator.cpp - Typed, range-checked reads of JSON -------------===//

#include "runtime/json/JsonValidator.h"

#include "runtime/json/JsonReader.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace mimo {

using json = nlohmann::json;

std::string joinNames(const std::vector<std::string> &names) {
  std::string text;
  for (const std::string &name : names)
    text += (text.empty() ? "" : ", ") + name;
  return text;
}

std::string describeJson(const json &value) {
  switch (value.type()) {
  case json::value_t::null:
    return "null";
  case json::value_t::boolean:
    return value.get<bool>() ? "true" : "false";
  case json::value_t::string:
    return "the string " + briefJson(value);
  case json::value_t::number_integer:
  case json::value_t::number_unsigned:
  case json::value_t::number_float:
    return "the number " + briefJson(value);
  case json::value_t::array:
    return "an array";
  case json::value_t::object:
    return "an object";
  default:
    return "an unsupported value";
  }
}

namespace {

/// A name Megatron-LM or Hugging Face users write for a mimo key.
struct KeySynonym {
  const char *name;   // theirs
  const char *key;    // mimo's key in the same object, when there is one
  const char *where;  // where mimo keeps it
  const char *origin; // whose name it is ("": a near miss of mimo's)
};

constexpr KeySynonym kSynonyms[] = {
    {"num_attention_heads", "num_heads", "/modules/N/arch/num_heads",
     "Megatron"},
    {"n_heads", "num_heads", "/modules/N/arch/num_heads", "Llama"},
    {"num_hidden_layers", "num_layers", "/modules/N/arch/num_layers",
     "Hugging Face"},
    {"n_layers", "num_layers", "/modules/N/arch/num_layers", "Llama"},
    {"intermediate_size", "ffn_hidden_size", "/modules/N/arch/ffn_hidden_size",
     "Hugging Face"},
    {"padded_vocab_size", "vocab_size", "/modules/N/arch/vocab_size",
     "Megatron"},
    {"tensor_model_parallel_size", "tp", "/modules/N/parallel/tp", "Megatron"},
    {"pipeline_model_parallel_size", "pp", "/modules/N/parallel/pp",
     "Megatron"},
    {"context_parallel_size", "cp", "/modules/N/parallel/cp", "Megatron"},
    {"data_parallel_size", "dp", "/modules/N/parallel/dp", "Megatron"},
    {"seq_len", "seq_length", "/batch/seq_length", ""},
    {"max_position_embeddings", "seq_length", "/batch/seq_length", "Megatron"},
    {"train_iters", "steps", "/train/steps", "Megatron"},
    {"lr_warmup_iters", "warmup_steps", "/train/lr_schedule/warmup_steps",
     "Megatron"},
    {"lr_warmup_steps", "warmup_steps", "/train/lr_schedule/warmup_steps", ""},
    {"lr_decay_style", "decay", "/train/lr_schedule/decay", "Megatron"},
    {"lr_decay_iters", "decay_steps", "/train/lr_schedule/decay_steps",
     "Megatron"},
    {"adam_beta1", "betas", "/train/betas (as [beta1, beta2])", "Megatron"},
    {"adam_beta2", "betas", "/train/betas (as [beta1, beta2])", "Megatron"},
    {"adam_eps", "eps", "/train/eps", "Megatron"},
    {"eval_interval", "eval_every", "/train/eval_every", "Megatron"},
    {"eval_iters", "eval_steps", "/train/eval_steps", "Megatron"},
    {"lora_alpha", "alpha", "/modules/N/lora/alpha", "PEFT"},
    {"target_modules", "targets", "/modules/N/lora/targets", "PEFT"},
    {"use_rslora", "rslora", "/modules/N/lora/rslora", "PEFT"},
    {"lora_dropout", "", "no key (adapters train without dropout; remove it)",
     "PEFT"},
    {"num_local_experts", "num_experts", "/modules/N/arch/moe/num_experts",
     "Mixtral"},
    {"num_moe_experts", "num_experts", "/modules/N/arch/moe/num_experts",
     "Megatron"},
    {"num_experts_per_tok", "top_k", "/modules/N/arch/moe/top_k",
     "Hugging Face"},
    {"moe_router_topk", "top_k", "/modules/N/arch/moe/top_k", "Megatron"},
    {"moe_intermediate_size", "expert_ffn_hidden_size",
     "/modules/N/arch/moe/expert_ffn_hidden_size", "Hugging Face"},
    {"moe_ffn_hidden_size", "expert_ffn_hidden_size",
     "/modules/N/arch/moe/expert_ffn_hidden_size", "Megatron"},
    {"shared_expert_intermediate_size", "shared_expert_ffn_hidden_size",
     "/modules/N/arch/moe/shared_expert_ffn_hidden_size", "Hugging Face"},
    {"norm_topk_prob", "norm_topk", "/modules/N/arch/moe/router/norm_topk",
     "Hugging Face"},
    {"router_aux_loss_coef", "aux_loss_coef",
     "/modules/N/arch/moe/router/aux_loss_coef", "Hugging Face"},
    {"moe_aux_loss_coeff", "aux_loss_coef",
     "/modules/N/arch/moe/router/aux_loss_coef", "Megatron"},
    {"moe_z_loss_coeff", "z_loss_coef",
     "/modules/N/arch/moe/router/z_loss_coef", "Megatron"},
    {"mlp_only_layers", "layers",
     "/modules/N/arch/moe/layers (the sparse ones)", "Hugging Face"},
    {"expert_model_parallel_size", "ep", "/modules/N/parallel/ep", "Megatron"},
    {"expert_tensor_parallel_size", "etp", "/modules/N/parallel/etp",
     "Megatron"},
    {"kv_channels", "head_dim", "/modules/N/arch/head_dim", "Megatron"},
    {"grad_reduce_in_bf16", "", "/train/grad_reduce_dtype (\"bf16\" for true)",
     "Megatron"},
    {"global_batch_size", "",
     "/batch/micro_batch_size x /batch/num_microbatches (micro_batch_size "
     "is the global micro-batch: the data-parallel ranks share it)",
     "Megatron"},
};

/// "/modules/1/arch" -> "/modules/N/arch": array indices as N.
std::string genericPointer(const std::string &pointer) {
  std::string generic;
  size_t i = 0;
  while (i < pointer.size()) {
    size_t next = pointer.find('/', i + 1);
    std::string token = pointer.substr(i, next - i);
    bool index = token.size() > 1 &&
                 token.find_first_not_of("0123456789", 1) == std::string::npos;
    generic += index ? "/N" : token;
    i = next == std::string::npos ? pointer.size() : next;
  }
  return generic;
}

const KeySynonym *synonymOf(const std::string &name) {
  for (const KeySynonym &synonym : kSynonyms)
    if (name == synonym.name)
      return &synonym;
  return nullptr;
}

} // namespace

void JsonValidator::error(std::string pointer, std::string message) {
  diagnostics.push_back(
      Diagnostic::error(std::move(pointer), std::move(message)));
}

bool JsonValidator::object(const json &value, const std::string &pointer,
                           const std::vector<std::string> &known,
                           const std::string &what) {
  if (!value.is_object()) {
    error(pointer, "expected " + what + " (a JSON object), found " +
                       describeJson(value) + "; write it as { ... }");
    return false;
  }
  for (const auto &item : value.items()) {
    if (std::find(known.begin(), known.end(), item.key()) != known.end())
      continue;
    std::string key =
        item.key().size() > 60 ? item.key().substr(0, 57) + "..." : item.key();
    std::string message = "unknown key '" + key + "' in " + what;
    if (known.empty()) {
      message += "; nothing is allowed here: remove it";
      error(pointer + "/" + escapePointerToken(item.key()), message);
      continue;
    }
    // Another framework's name first (edit distance would offer 'lr' for
    // 'lr_warmup_steps'), then a key of another object, then a typo.
    const KeySynonym *synonym = synonymOf(item.key());
    std::string where = genericPointer(pointer);
    std::string place = placeOf ? placeOf(where, item.key()) : "";
    if (place == where + "/" + item.key())
      place.clear(); // allowed here in other cases, not in this one
    std::string suggestion = closestMatch(key, known);
    bool here = synonym && std::find(known.begin(), known.end(),
                                     synonym->key) != known.end();
    std::string origin =
        synonym && *synonym->origin
            ? std::string(" (") + synonym->origin + "'s name for it)"
            : "";
    if (here)
      message +=
          "; did you mean '" + std::string(synonym->key) + "'" + origin + "?";
    else if (synonym && !*synonym->key) // no single mimo key means it
      message += "; " + std::string(synonym->origin) + "'s '" + item.key() +
                 "' is " + synonym->where + " in mimo";
    else if (synonym)
      message += "; did you mean " + std::string(synonym->where) + origin + "?";
    else if (!place.empty())
      message += "; it belongs in " + place;
    else if (!suggestion.empty())
      message += "; did you mean '" + suggestion + "'?";
    else
      message += "; remove it";
    std::string allowed = joinNames(known);
    if (allowed.size() > 300) // names taken from the input can be long
      allowed = allowed.substr(0, 297) + "...";
    message += " (keys allowed here: " + allowed + ")";
    error(pointer + "/" + escapePointerToken(item.key()), message);
  }
  return true;
}

const json *JsonValidator::member(const json &object,
                                  const std::string &pointer,
                                  const std::string &key, bool required,
                                  const std::string &meaning) {
  auto it = object.find(key);
  if (it != object.end())
    return &*it;
  if (required)
    error(pointer + "/" + key,
          "missing required key '" + key + "' (" + meaning + "); add \"" + key +
              "\": <value> to " + (pointer.empty() ? "/" : pointer));
  return nullptr;
}

std::optional<int64_t>
JsonValidator::integer(const json &object, const std::string &pointer,
                       const std::string &key, bool required, int64_t minimum,
                       const std::string &meaning, int64_t maximum) {
  const json *value = member(object, pointer, key, required, meaning);
  if (!value)
    return std::nullopt;
  return integerValue(*value, pointer + "/" + key, minimum, meaning, maximum);
}

std::optional<int64_t> JsonValidator::integerValue(const json &value,
                                                   const std::string &pointer,
                                                   int64_t minimum,
                                                   const std::string &meaning,
                                                   int64_t maximum) {
  std::string expected = minimum == 1 ? "a positive integer"
                         : minimum == 0
                             ? "a non-negative integer"
                             : "an integer >= " + std::to_string(minimum);
  if (maximum != kNoMaximum)
    expected += " <= " + std::to_string(maximum);
  if (!value.is_number_integer()) {
    error(pointer, "expected " + expected + " (" + meaning + "), found " +
                       describeJson(value) + "; write a whole number such as " +
                       std::to_string(std::max<int64_t>(minimum, 1)));
    return std::nullopt;
  }
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(maximum)) {
    error(pointer, "expected " + expected + " (" + meaning + "), found " +
                       briefJson(value) + ", which is too large; use " +
                       std::to_string(maximum) + " or less");
    return std::nullopt;
  }
  int64_t number = value.get<int64_t>();
  if (number < minimum) {
    error(pointer, "expected " + expected + " (" + meaning + "), found " +
                       std::to_string(number) + "; use " +
                       std::to_string(minimum) + " or more");
    return std::nullopt;
  }
  if (number > maximum) {
    error(pointer, "expected " + expected + " (" + meaning + "), found " +
                       std::to_string(number) + ", which is too large; use " +
                       std::to_string(maximum) + " or less");
    return std::nullopt;
  }
  return number;
}

std::optional<double>
JsonValidator::number(const json &object, const std::string &pointer,
                      const std::string &key, double minimum,
                      bool minimumExcluded, double maximum,
                      bool maximumExcluded, const std::string &meaning) {
  const json *value = member(object, pointer, key, false, meaning);
  if (!value)
    return std::nullopt;
  return numberValue(*value, pointer + "/" + key, minimum, minimumExcluded,
                     maximum, maximumExcluded, meaning);
}

std::optional<double>
JsonValidator::numberValue(const json &value, const std::string &pointer,
                           double minimum, bool minimumExcluded, double maximum,
                           bool maximumExcluded, const std::string &meaning) {
  std::ostringstream range;
  range << (minimumExcluded ? "(" : "[") << minimum << ", ";
  if (std::isinf(maximum))
    range << "inf)";
  else
    range << maximum << (maximumExcluded ? ")" : "]");
  if (!value.is_number()) {
    error(pointer, "expected a number in " + range.str() + " (" + meaning +
                       "), found " + describeJson(value) +
                       "; write it as a plain number");
    return std::nullopt;
  }
  double number = value.get<double>();
  bool low = minimumExcluded ? number <= minimum : number < minimum;
  bool high = maximumExcluded ? number >= maximum : number > maximum;
  if (low || high || !std::isfinite(number)) {
    error(pointer, "expected a number in " + range.str() + " (" + meaning +
                       "), found " + briefJson(value) +
                       "; choose a value in that range");
    return std::nullopt;
  }
  return number;
}

std::optional<bool> JsonValidator::boolean(const json &object,
                                           const std::string &pointer,
                                           const std::string &key,
                                           const std::string &meaning) {
  const json *value = member(object, pointer, key, false, meaning);
  if (!value)
    return std::nullopt;
  if (!value->is_boolean()) {
    error(pointer + "/" + key, "expected true or false (" + meaning +
                                   "), found " + describeJson(*value) +
                                   "; write true or false without quotes");
    return std::nullopt;
  }
  return value->get<bool>();
}

std::optional<std::string> JsonValidator::string(const json &object,
                                                 const std::string &pointer,
                                                 const std::string &key,
                                                 bool required,
                                                 const std::string &meaning) {
  const json *value = member(object, pointer, key, required, meaning);
  if (!value)
    return std::nullopt;
  if (!value->is_string() || value->get<std::string>().empty()) {
    error(pointer + "/" + key, "expected a non-empty string (" + meaning +
                                   "), found " + describeJson(*value) +
                                   "; write it in double quotes");
    return std::nullopt;
  }
  return value->get<std::string>();
}

std::optional<std::string>
JsonValidator::choice(const json &object, const std::string &pointer,
                      const std::string &key, bool required,
                      const std::vector<std::string> &allowed,
                      const std::string &meaning) {
  const json *value = member(object, pointer, key, required,
                             meaning + ": one of " + quoted(allowed));
  if (!value)
    return std::nullopt;
  if (value->is_string()) {
    std::string text = value->get<std::string>();
    if (std::find(allowed.begin(), allowed.end(), text) != allowed.end())
      return text;
    std::string suggestion = closestMatch(text, allowed);
    error(pointer + "/" + key,
          "expected one of " + quoted(allowed) + " (" + meaning + "), found " +
              describeJson(*value) +
              (suggestion.empty() ? ""
                                  : "; did you mean \"" + suggestion + "\"?"));
    return std::nullopt;
  }
  error(pointer + "/" + key, "expected one of " + quoted(allowed) + " (" +
                                 meaning + "), found " + describeJson(*value));
  return std::nullopt;
}

std::string JsonValidator::quoted(const std::vector<std::string> &names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i)
      text += i + 1 == names.size() ? " or " : ", ";
    text += "\"" + names[i] + "\"";
  }
  return text;
}

} // namespace mimo
