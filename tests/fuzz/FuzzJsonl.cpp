//===- FuzzJsonl.cpp - The jsonl data reader ------------------------------===//
//
// Any bytes as a jsonl file for a fixed two-encoder model: readJsonl returns
// a source, whose microbatches are then built, or located errors.

#include "FuzzInput.h"

#include "runtime/config/ModelConfig.h"
#include "runtime/data/Data.h"

#include <sstream>

namespace {

const mimo::ModelConfig &model() {
  static const mimo::ModelConfig config = [] {
    const char *text = R"({
      "version": 1, "name": "fuzz",
      "batch": {"micro_batch_size": 2, "num_microbatches": 1, "seq_length": 16},
      "modules": [
        {"name": "images", "kind": "encoder", "special_token_id": 5,
         "arch": {"feature_dim": 3, "hidden_size": 8, "num_layers": 1,
                  "num_heads": 2, "ffn_hidden_size": 16}},
        {"name": "audio", "kind": "encoder", "special_token_id": 6,
         "arch": {"feature_dim": 2, "hidden_size": 8, "num_layers": 1,
                  "num_heads": 2, "ffn_hidden_size": 16}},
        {"name": "language", "kind": "language",
         "arch": {"vocab_size": 64, "hidden_size": 8, "num_layers": 1,
                  "num_heads": 2, "ffn_hidden_size": 16}}],
      "data": {"source": "jsonl", "path": "fuzz.jsonl"}})";
    mimo::ParseResult parsed = mimo::parseModelConfig(text, "fuzz.json");
    mimo::fuzz::require(parsed.config.has_value(), "the fixed model parses");
    return *parsed.config;
  }();
  return config;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mimo;
  using namespace mimo::exec;
  std::istringstream in(
      std::string(reinterpret_cast<const char *>(data), size));
  std::vector<std::string> errors;
  std::unique_ptr<DataSource> source =
      readJsonl(model(), in, "fuzz.jsonl", errors);
  fuzz::require((source != nullptr) != !errors.empty(),
                "a jsonl file is either read or has errors");
  fuzz::require(errors.size() <= 21, "at most 20 errors and a count");
  if (source)
    (void)source->get(0, 0);
  return 0;
}
