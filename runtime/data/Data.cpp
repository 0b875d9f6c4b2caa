//===- Data.cpp - Synthetic and jsonl training data -----------------------===//

#include "runtime/data/Data.h"

#include "runtime/data/IndexedData.h"
#include "runtime/data/Order.h"
#include "runtime/json/JsonReader.h"
#include "runtime/support/InputFile.h"
#include "runtime/support/MappedFile.h"
#include "runtime/support/Random.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace mimo::exec {

std::vector<EncoderInfo> encodersOf(const ModelConfig &config) {
  std::vector<EncoderInfo> encoders;
  for (const ModuleConfig &module : config.modules)
    if (module.kind == ModuleKind::Encoder)
      encoders.push_back(
          {module.name, module.specialTokenId, module.featureDim});
  return encoders;
}

namespace {

bool isSpecial(const std::vector<EncoderInfo> &encoders, int64_t id) {
  for (const EncoderInfo &e : encoders)
    if (e.specialTokenId == id)
      return true;
  return false;
}

/// docs/data.md, docs/runtime.md synthetic source (docs/data.md defines it
/// exactly): per sample, modality-token counts drawn from each encoder's [min,
/// max] (all zero for a text-only sample), a block of each modality's special
/// tokens at a random place, and text from a seeded sparse Markov chain: each
/// token has kSuccessors possible next tokens, chosen with probabilities
/// 1/2, 1/4, 1/8, 1/8, so the text carries structure a model can learn
/// (the best possible loss is 1.21 nats per text token, far below ln V).
class SyntheticSource final : public DataSource {
public:
  SyntheticSource(const ModelConfig &config, const char *stream)
      : config(config), encoders(encodersOf(config)), stream(stream) {}

  static constexpr int64_t kSuccessors = 4;

  /// The j-th possible successor of token `previous` (never special).
  int64_t successor(int64_t previous, int64_t j) const {
    int64_t vocab = config.language().vocabSize;
    uint64_t key = combine(combine(combine(static_cast<uint64_t>(config.seed),
                                           hashString("markov")),
                                   static_cast<uint64_t>(previous)),
                           static_cast<uint64_t>(j));
    Stream rng(key);
    int64_t id;
    do
      id = rng.below(vocab);
    while (isSpecial(encoders, id));
    return id;
  }

  /// Which successor a draw u in [0, 1) picks: 0 with 1/2, 1 with 1/4, 2
  /// and 3 with 1/8 each.
  static int64_t pick(double u) {
    return u < 0.5 ? 0 : u < 0.75 ? 1 : u < 0.875 ? 2 : 3;
  }

  Microbatch get(int64_t step, int64_t mb) const override {
    Microbatch out;
    const int64_t B = config.batch.microBatchSize;
    for (int64_t b = 0; b < B; ++b)
      out.samples.push_back(
          sample(globalSample(step, mb, b, config.batch.numMicrobatches, B)));
    return out;
  }

  /// Global sample g: keyed by (seed, stream, g) alone, so every layout and
  /// micro-batch split of a global batch draws the same samples.
  Sample sample(int64_t g) const {
    const int64_t S = config.batch.seqLength;
    const int64_t vocab = config.language().vocabSize;
    const bool variableLength =
        config.batch.packing || config.batch.attentionMask == "dense";
    const uint64_t key =
        combine(combine(static_cast<uint64_t>(config.seed), hashString(stream)),
                static_cast<uint64_t>(g));
    {
      Stream rng(key);
      Sample sample;
      bool textOnly = rng.uniform() < config.data.textOnlyFraction;
      sample.length = variableLength ? S / 4 + rng.below(S - S / 4 + 1) : S;
      sample.length = std::max<int64_t>(sample.length, 2);
      sample.counts.assign(encoders.size(), 0);
      for (size_t e = 0; e < encoders.size(); ++e) {
        TokenRange range = config.data.tokensPerSample[e].second;
        int64_t count = range.min + rng.below(range.max - range.min + 1);
        sample.counts[e] = textOnly ? 0 : count;
      }
      // Keep the first token and at least one text token after the
      // modality blocks.
      int64_t capacity = sample.length - 2, total = 0;
      for (int64_t c : sample.counts)
        total += c;
      while (total > capacity) {
        auto largest =
            std::max_element(sample.counts.begin(), sample.counts.end());
        --*largest;
        --total;
      }
      int64_t start = 1 + rng.below(capacity - total + 1);
      sample.ids.assign(
          static_cast<size_t>(config.batch.packing ? sample.length : S), 0);
      // Text: the first token uniform over the non-special ids, each next
      // one a successor of the previous text token.
      int64_t id;
      do
        id = rng.below(vocab);
      while (isSpecial(encoders, id));
      sample.ids[0] = id;
      for (int64_t s = 1; s < sample.length; ++s) {
        id = successor(id, pick(rng.uniform()));
        sample.ids[static_cast<size_t>(s)] = id;
      }
      int64_t at = start;
      for (size_t e = 0; e < encoders.size(); ++e)
        for (int64_t j = 0; j < sample.counts[e]; ++j)
          sample.ids[static_cast<size_t>(at++)] = encoders[e].specialTokenId;
      sample.features.resize(encoders.size());
      for (size_t e = 0; e < encoders.size(); ++e) {
        Stream features(combine(key, hashString(encoders[e].name)));
        auto &rows = sample.features[e];
        rows.resize(
            static_cast<size_t>(sample.counts[e] * encoders[e].featureDim));
        for (float &value : rows)
          value = static_cast<float>(2.0 * features.uniform() - 1.0);
      }
      return sample;
    }
  }

private:
  ModelConfig config;
  std::vector<EncoderInfo> encoders;
  const char *stream;
};

/// docs/data.md "Order": global sample g through the blend (several
/// datasets) and each dataset's epochs, shuffled or in file order.
class OrderedSource final : public DataSource {
public:
  OrderedSource(const ModelConfig &config,
                std::vector<std::unique_ptr<Dataset>> datasets)
      : config(config), datasets(std::move(datasets)) {
    if (this->datasets.size() > 1) {
      std::vector<double> weights;
      for (const DataConfig::BlendEntry &entry : config.data.blend)
        weights.push_back(entry.weight);
      blend = std::make_unique<BlendOrder>(std::move(weights));
    }
  }

  Microbatch get(int64_t step, int64_t mb) const override {
    const int64_t B = config.batch.microBatchSize;
    const int64_t g =
        globalSample(step, mb, 0, config.batch.numMicrobatches, B);
    std::vector<std::pair<size_t, int64_t>> draws;
    if (blend)
      draws = blend->pick(g, B);
    else
      for (int64_t b = 0; b < B; ++b)
        draws.emplace_back(0, g + b);
    Microbatch out;
    for (auto [d, k] : draws) {
      const Dataset &dataset = *datasets[d];
      const uint64_t key = combine(
          combine(static_cast<uint64_t>(config.seed), hashString("shuffle")),
          static_cast<uint64_t>(d));
      out.samples.push_back(
          dataset.at(epochSample(k, dataset.size(), config.data.shuffle, key)));
    }
    return out;
  }

private:
  ModelConfig config;
  std::vector<std::unique_ptr<Dataset>> datasets;
  std::unique_ptr<BlendOrder> blend;
};

std::optional<Sample> parseJsonlLine(
    const ModelConfig &config, const std::vector<EncoderInfo> &encoders,
    const std::string &line, const std::string &path, int64_t lineNumber,
    const std::function<void(std::string)> &report);

/// The first 20 problems of a file, then a count.
struct Problems {
  std::vector<std::string> &errors;
  size_t more = 0;
  static constexpr size_t kMax = 20;
  void operator()(std::string message) {
    if (errors.size() >= kMax)
      ++more;
    else
      errors.push_back(std::move(message));
  }
  void close(const std::string &path) {
    if (more > 0)
      errors.push_back(path + ": error: ... and " + std::to_string(more) +
                       " more problems");
  }
};

/// docs/data.md: a jsonl file through a memory map (or a stream read
/// whole: readJsonl). Opening indexes its lines (indexJsonl, which checks
/// the share of them it is given); a step parses the lines it reads, and the
/// last two global batches' samples are kept for the other ranks of the
/// process.
class JsonlFile final : public Dataset {
public:
  struct Line {
    int64_t begin = 0, end = 0, number = 0;
  };
  /// The file's bytes: `map`'s, or `text` (a stream read whole).
  JsonlFile(const ModelConfig &config, std::unique_ptr<MappedFile> map,
            std::string text, std::string path, std::vector<Line> lines)
      : config(config), encoders(encodersOf(config)), map(std::move(map)),
        text(std::move(text)), path(std::move(path)), lines(std::move(lines)),
        capacity(static_cast<size_t>(2 * config.batch.microBatchSize *
                                         config.batch.numMicrobatches +
                                     16)) {}

  int64_t size() const override { return static_cast<int64_t>(lines.size()); }

  Sample at(int64_t i) const override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (auto it = cache.find(i); it != cache.end())
        return *it->second;
    }
    const Line &line = lines[static_cast<size_t>(i)];
    const char *bytes =
        map ? reinterpret_cast<const char *>(map->bytes()) : text.data();
    const std::string one(bytes + line.begin,
                          static_cast<size_t>(line.end - line.begin));
    if (map)
      map->checkIntact();
    std::string problem;
    std::optional<Sample> sample = parseJsonlLine(
        config, encoders, one, path, line.number, [&](std::string m) {
          if (problem.empty())
            problem = std::move(m);
        });
    if (!sample) // a line another rank checked (the check failed there)
      throw std::runtime_error(problem);
    auto kept = std::make_shared<const Sample>(std::move(*sample));
    std::lock_guard<std::mutex> lock(mutex);
    if (cache.emplace(i, kept).second) {
      order.push_back(i);
      while (order.size() > capacity) {
        cache.erase(order.front());
        order.pop_front();
      }
    }
    return *kept;
  }

private:
  ModelConfig config;
  std::vector<EncoderInfo> encoders;
  std::unique_ptr<MappedFile> map;
  std::string text;
  std::string path;
  std::vector<Line> lines;
  size_t capacity;
  mutable std::mutex mutex;
  mutable std::unordered_map<int64_t, std::shared_ptr<const Sample>> cache;
  mutable std::deque<int64_t> order;
};

/// Indexes the lines of a jsonl file's bytes (blank ones are none) and
/// checks the share `part` of `parts` of them (line k by k mod parts);
/// nothing with `errors` (the first 20 problems, then a count).
std::optional<std::vector<JsonlFile::Line>>
indexJsonl(const ModelConfig &config, const char *bytes, int64_t size,
           const std::string &path, int64_t part, int64_t parts,
           std::vector<std::string> &errors) {
  std::vector<JsonlFile::Line> lines;
  Problems problems{errors};
  const std::function<void(std::string)> report = std::ref(problems);
  const std::vector<EncoderInfo> encoders = encodersOf(config);
  int64_t number = 0;
  for (int64_t at = 0; at < size;) {
    const void *newline =
        std::memchr(bytes + at, '\n', static_cast<size_t>(size - at));
    const int64_t end =
        newline ? static_cast<const char *>(newline) - bytes : size;
    ++number;
    bool blank = true;
    for (int64_t k = at; k < end && blank; ++k)
      blank = bytes[k] == ' ' || bytes[k] == '\t' || bytes[k] == '\r';
    if (!blank) {
      if (static_cast<int64_t>(lines.size()) % parts == part)
        (void)parseJsonlLine(
            config, encoders,
            std::string(bytes + at, static_cast<size_t>(end - at)), path,
            number, report);
      lines.push_back({at, end, number});
    }
    at = end + 1;
  }
  problems.close(path);
  if (!errors.empty())
    return std::nullopt;
  if (lines.empty()) {
    errors.push_back(path + ": error: the jsonl file has no samples; add one "
                            "JSON object per line");
    return std::nullopt;
  }
  return lines;
}

std::unique_ptr<Dataset>
loadJsonl(const ModelConfig &config, const std::string &written,
          const std::string &pointer, const std::string &baseDir,
          const std::string &planFile, std::vector<std::string> &errors,
          int64_t part, int64_t parts) {
  namespace fs = std::filesystem;
  std::string path = written;
  std::error_code ec;
  if (!fs::exists(path, ec) && !baseDir.empty() &&
      fs::exists(fs::path(baseDir) / path, ec))
    path = (fs::path(baseDir) / path).string();
  if (fs::exists(path, ec)) {
    // A FIFO or a device would block or never end (InputFile.h).
    std::string problem = inputFileProblem(path, "the jsonl data");
    if (!problem.empty()) {
      errors.push_back(planFile + ": " + pointer + ": " + problem);
      return nullptr;
    }
  }
  auto map = std::make_unique<MappedFile>();
  std::string mapError;
  if (!fs::exists(path, ec) || !map->open(path, "the jsonl data", mapError)) {
    errors.push_back(
        planFile + ": " + pointer + ": error: cannot open the jsonl file '" +
        written + "' (tried '" + written + "'" +
        (baseDir.empty()
             ? std::string()
             : " and '" + (fs::path(baseDir) / written).string() + "'") +
        "); give a path relative to the plan file or the "
        "working directory");
    return nullptr;
  }
  const char *bytes = reinterpret_cast<const char *>(map->bytes());
  std::optional<std::vector<JsonlFile::Line>> lines =
      indexJsonl(config, bytes, map->size, path, part, parts, errors);
  if (!lines)
    return nullptr;
  return std::make_unique<JsonlFile>(config, std::move(map), std::string(),
                                     path, std::move(*lines));
}

/// One line of a jsonl file as a sample (docs/data.md), or nullopt with its
/// problems given to `report` ("PATH:LINE: POINTER: error: ...").
std::optional<Sample> parseJsonlLine(
    const ModelConfig &config, const std::vector<EncoderInfo> &encoders,
    const std::string &line, const std::string &path, int64_t lineNumber,
    const std::function<void(std::string)> &report) {
  const int64_t S = config.batch.seqLength, vocab = config.language().vocabSize;
  auto error = [&](const std::string &pointer, const std::string &message) {
    report(path + ":" + std::to_string(lineNumber) + ": " +
           (pointer.empty() ? "" : pointer + ": ") + "error: " + message);
  };
  Diagnostic syntax;
  std::optional<nlohmann::json> parsed = parseJsonText(line, syntax);
  if (!parsed) {
    report(path + ":" + std::to_string(lineNumber) + ":" +
           std::to_string(syntax.position.column) +
           ": error: " + syntax.message);
    return std::nullopt;
  }
  const nlohmann::json &json = *parsed;
  if (!json.is_object()) {
    error("", "expected one JSON object per line");
    return std::nullopt;
  }
  Sample sample;
  auto ids = json.find("input_ids");
  if (ids == json.end() || !ids->is_array() || ids->empty()) {
    error("/input_ids", "expected a non-empty array of token ids");
    return std::nullopt;
  }
  bool ok = true;
  for (size_t i = 0; i < ids->size(); ++i) {
    const auto &id = (*ids)[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= vocab) {
      error("/input_ids/" + std::to_string(i), "expected a token id in [0, " +
                                                   std::to_string(vocab) +
                                                   "), found " + briefJson(id));
      ok = false;
      break;
    }
    sample.ids.push_back(id.get<int64_t>());
  }
  if (!ok)
    return std::nullopt;
  if (static_cast<int64_t>(sample.ids.size()) > S) {
    error("/input_ids", "the sample has " + std::to_string(sample.ids.size()) +
                            " tokens, more than seq_length " +
                            std::to_string(S) + "; shorten it");
    return std::nullopt;
  }
  sample.length = static_cast<int64_t>(sample.ids.size());
  if (!config.batch.packing)
    sample.ids.resize(static_cast<size_t>(S), 0);
  // loss_mask: 0 or 1 (or false/true) per id; all 1 is the default.
  if (auto mask = json.find("loss_mask"); mask != json.end()) {
    if (!mask->is_array() ||
        mask->size() != static_cast<size_t>(sample.length)) {
      error("/loss_mask",
            "expected an array of " + std::to_string(sample.length) +
                " 0s and 1s (one per input id), found " +
                (mask->is_array() ? std::to_string(mask->size()) + " values"
                                  : briefJson(*mask)));
      return std::nullopt;
    }
    for (size_t i = 0; i < mask->size() && ok; ++i) {
      const auto &m = (*mask)[i];
      const bool bit =
          m.is_boolean() || (m.is_number_integer() &&
                             (m.get<int64_t>() == 0 || m.get<int64_t>() == 1));
      if (!bit) {
        error("/loss_mask/" + std::to_string(i),
              "expected 0 or 1 (1: token " + std::to_string(i) +
                  " is a target), found " + briefJson(m));
        ok = false;
        break;
      }
      sample.target.push_back(m.is_boolean() ? m.get<bool>()
                                             : m.get<int64_t>() == 1);
    }
    if (!ok)
      return std::nullopt;
  }
  for (auto it = json.begin(); it != json.end(); ++it) {
    bool known = it.key() == "input_ids" || it.key() == "loss_mask";
    for (const EncoderInfo &e : encoders)
      known = known || it.key() == e.name;
    if (!known) {
      error("/" + escapePointerToken(it.key()),
            "unknown key '" + it.key().substr(0, 60) +
                "'; expected input_ids, loss_mask or a modality name");
      ok = false;
    }
  }
  sample.counts.assign(encoders.size(), 0);
  sample.features.resize(encoders.size());
  for (size_t e = 0; e < encoders.size() && ok; ++e) {
    int64_t count = 0;
    for (int64_t s = 0; s < sample.length; ++s)
      count += sample.ids[static_cast<size_t>(s)] == encoders[e].specialTokenId;
    sample.counts[e] = count;
    std::string pointer = "/" + encoders[e].name + "/features";
    auto modality = json.find(encoders[e].name);
    if (modality == json.end()) {
      if (count > 0) {
        error("/" + encoders[e].name,
              "input_ids has " + std::to_string(count) + " '" +
                  encoders[e].name + "' tokens (id " +
                  std::to_string(encoders[e].specialTokenId) +
                  ") but the sample has no '" + encoders[e].name +
                  "' features; add {\"features\": [[...], ...]}");
        ok = false;
      }
      continue;
    }
    auto features =
        modality->is_object() ? modality->find("features") : modality->end();
    if (!modality->is_object() || features == modality->end() ||
        !features->is_array()) {
      error(pointer, "expected {\"features\": [[...], ...]}");
      ok = false;
      continue;
    }
    if (static_cast<int64_t>(features->size()) != count) {
      error(pointer, "the sample has " + std::to_string(features->size()) +
                         " feature rows but input_ids has " +
                         std::to_string(count) + " '" + encoders[e].name +
                         "' tokens (id " +
                         std::to_string(encoders[e].specialTokenId) +
                         "); give one row per modality token");
      ok = false;
      continue;
    }
    for (size_t r = 0; r < features->size() && ok; ++r) {
      const auto &row = (*features)[r];
      if (!row.is_array() ||
          static_cast<int64_t>(row.size()) != encoders[e].featureDim) {
        error(
            pointer + "/" + std::to_string(r),
            "expected " + std::to_string(encoders[e].featureDim) +
                " numbers (feature_dim), found " +
                (row.is_array() ? std::to_string(row.size()) : briefJson(row)));
        ok = false;
        break;
      }
      for (const auto &value : row) {
        if (!value.is_number() || !(std::fabs(value.get<double>()) <=
                                    std::numeric_limits<float>::max())) {
          error(pointer + "/" + std::to_string(r),
                "expected numbers within float's range (+-3.4e38), found " +
                    briefJson(value));
          ok = false;
          break;
        }
        sample.features[e].push_back(value.get<float>());
      }
    }
    // "items": the rows of each image (tile, frame) in order; the encoder
    // runs each as its own sequence (docs/data.md).
    auto items = modality->find("items");
    if (!ok || items == modality->end())
      continue;
    const std::string where = "/" + encoders[e].name + "/items";
    std::vector<int64_t> counts;
    int64_t sum = 0;
    if (items->is_array())
      for (const auto &n : *items) {
        if (!n.is_number_integer() || n.get<int64_t>() < 1 ||
            n.get<int64_t>() > count) {
          counts.clear();
          break;
        }
        counts.push_back(n.get<int64_t>());
        sum += counts.back();
      }
    if (counts.empty() || sum != count) {
      error(where, "expected the rows of each item (an image, a tile, a "
                   "frame) in order, integers from 1 summing to the " +
                       std::to_string(count) + " feature rows, found " +
                       briefJson(*items));
      ok = false;
      continue;
    }
    sample.items.resize(encoders.size());
    sample.items[e] = std::move(counts);
  }
  if (!ok)
    return std::nullopt;
  return sample;
}

} // namespace

std::unique_ptr<DataSource>
orderedSource(const ModelConfig &config,
              std::vector<std::unique_ptr<Dataset>> datasets) {
  return std::make_unique<OrderedSource>(config, std::move(datasets));
}

std::unique_ptr<DataSource> readJsonl(const ModelConfig &config,
                                      std::istream &in, const std::string &path,
                                      std::vector<std::string> &errors) {
  // The file readers' indexer and dataset, over the stream's bytes.
  std::ostringstream whole;
  whole << in.rdbuf();
  std::string text = whole.str();
  std::optional<std::vector<JsonlFile::Line>> lines =
      indexJsonl(config, text.data(), static_cast<int64_t>(text.size()), path,
                 0, 1, errors);
  if (!lines)
    return nullptr;
  std::vector<std::unique_ptr<Dataset>> one;
  one.push_back(std::make_unique<JsonlFile>(config, nullptr, std::move(text),
                                            path, std::move(*lines)));
  return orderedSource(config, std::move(one));
}

std::unique_ptr<DataSource>
makeDataSource(const ModelConfig &config, const std::string &baseDir,
               const std::string &planFile, std::vector<std::string> &errors,
               DataSplit split, int64_t checkPart, int64_t checkParts) {
  bool eval = split == DataSplit::Eval;
  if (config.data.source == "synthetic")
    return std::make_unique<SyntheticSource>(config, eval ? "eval" : "data");
  // Held-out batches: one file, in file order, whatever the training
  // data's shuffle says (its windows included: the held-out loss must not
  // depend on the training data's order).
  ModelConfig plain = config;
  plain.data.shuffle = false;
  plain.data.blend.clear();
  const ModelConfig &reading = eval ? plain : config;
  // The files: the eval file, data.path, or every file of data.blend.
  std::vector<std::pair<std::string, std::string>> files;
  if (eval)
    files.emplace_back(config.data.evalPath, "/model/data/eval_path");
  else if (config.data.blend.empty())
    files.emplace_back(config.data.path, "/model/data/path");
  else
    for (size_t i = 0; i < config.data.blend.size(); ++i)
      files.emplace_back(config.data.blend[i].path,
                         "/model/data/blend/" + std::to_string(i) + "/path");
  std::vector<std::unique_ptr<Dataset>> datasets;
  for (const auto &[path, pointer] : files) {
    std::unique_ptr<Dataset> dataset =
        config.data.source == "jsonl"
            ? loadJsonl(reading, path, pointer, baseDir, planFile, errors,
                        checkPart, checkParts)
            : loadIndexed(reading, path, pointer, baseDir, planFile, errors);
    if (!dataset)
      return nullptr;
    datasets.push_back(std::move(dataset));
  }
  if (eval)
    return orderedSource(plain, std::move(datasets));
  return orderedSource(config, std::move(datasets));
}

namespace {

/// Why the first record of a data file does not parse ("" if it does).
std::string firstRecordProblem(const ModelConfig &config,
                               const std::string &path) {
  if (config.data.source == "indexed") {
    IndexedDataset dataset;
    std::string error;
    if (!readIndexedDataset(path, dataset, error))
      return error;
    return openIndexedExtras(config, path, dataset, error) ? "" : error;
  }
  std::string problem = inputFileProblem(path, "the data");
  if (!problem.empty())
    return problem;
  std::ifstream in(path);
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    Diagnostic syntax;
    std::optional<nlohmann::json> json = parseJsonText(line, syntax);
    if (!json || !json->is_object() || !json->contains("input_ids") ||
        !(*json)["input_ids"].is_array())
      return path + ":" + std::to_string(number) +
             ": error: expected one JSON object per line with an "
             "\"input_ids\" array (docs/data.md)";
    return "";
  }
  return path + ": error: the jsonl file has no samples; add one JSON "
                "object per line";
}

} // namespace

std::vector<Diagnostic> resolveDataPaths(ModelConfig &config,
                                         const std::string &modelDir) {
  namespace fs = std::filesystem;
  std::vector<Diagnostic> problems;
  if (config.data.source == "synthetic")
    return problems;
  bool indexed = config.data.source == "indexed";
  auto resolve = [&](std::string &path, const char *pointer) {
    if (path.empty())
      return;
    std::vector<fs::path> tried;
    fs::path written(path);
    if (written.is_absolute()) {
      tried.push_back(written);
    } else {
      tried.push_back(fs::path(modelDir.empty() ? "." : modelDir) / written);
      std::error_code cwd;
      fs::path here = fs::current_path(cwd);
      if (!cwd && here / written != tried.back())
        tried.push_back(here / written);
    }
    std::error_code ec;
    for (const fs::path &candidate : tried) {
      fs::path probe =
          indexed ? fs::path(candidate.string() + ".idx") : candidate;
      if (fs::exists(probe, ec)) {
        std::string resolved =
            fs::absolute(candidate, ec).lexically_normal().string();
        std::string problem = firstRecordProblem(config, resolved);
        if (!problem.empty())
          problems.push_back(Diagnostic::error(pointer, problem));
        else
          path = resolved;
        return;
      }
    }
    std::string list;
    for (const fs::path &t : tried)
      list += (list.empty() ? "'" : ", '") + t.lexically_normal().string() +
              (indexed ? ".idx'" : "'");
    problems.push_back(Diagnostic::error(
        pointer, std::string("cannot find the ") +
                     (indexed ? "indexed dataset '" : "jsonl file '") + path +
                     "' (tried " + list +
                     "); give a path relative to model.json's directory"));
  };
  resolve(config.data.path, "/data/path");
  resolve(config.data.evalPath, "/data/eval_path");
  for (size_t i = 0; i < config.data.blend.size(); ++i)
    resolve(config.data.blend[i].path,
            ("/data/blend/" + std::to_string(i) + "/path").c_str());
  return problems;
}

bool lossMasked(const Sample &sample, const std::vector<EncoderInfo> &encoders,
                int64_t s) {
  if (s + 1 >= sample.length)
    return true;
  if (!sample.target.empty() && !sample.target[static_cast<size_t>(s + 1)])
    return true;
  return isSpecial(encoders, sample.ids[static_cast<size_t>(s)]) ||
         isSpecial(encoders, sample.ids[static_cast<size_t>(s + 1)]);
}

int64_t modalityRows(const Microbatch &mb, size_t encoder, int64_t begin,
                     int64_t end) {
  int64_t rows = 0;
  for (int64_t b = begin; b < end; ++b)
    rows += mb.samples[static_cast<size_t>(b)].counts[encoder];
  return rows;
}

EncoderLane encoderLane(const Microbatch &mb, size_t encoder,
                        int64_t featureDim, int64_t begin, int64_t end) {
  EncoderLane lane;
  int64_t item = 0;
  for (int64_t b = begin; b < end; ++b) {
    const Sample &sample = mb.samples[static_cast<size_t>(b)];
    const auto &rows = sample.features[encoder];
    lane.features.insert(lane.features.end(), rows.begin(), rows.end());
    const int64_t count = sample.counts[encoder];
    const bool itemised =
        encoder < sample.items.size() && !sample.items[encoder].empty();
    for (int64_t n :
         itemised ? sample.items[encoder] : std::vector<int64_t>{count}) {
      if (n <= 0)
        continue;
      lane.segment.insert(lane.segment.end(), static_cast<size_t>(n), item);
      ++item;
    }
    lane.rows += count;
  }
  (void)featureDim;
  return lane;
}

LanguageLane languageLane(const Microbatch &mb,
                          const std::vector<EncoderInfo> &encoders,
                          int64_t begin, int64_t end, bool packing,
                          int64_t padMultiple) {
  LanguageLane lane;
  int64_t samples = end - begin;
  size_t E = encoders.size();
  lane.modalityRows.assign(E, 0);
  // Rows of each sample's modality tokens: sample-major within the lane.
  std::vector<std::vector<int64_t>> sampleFirstRow(
      E, std::vector<int64_t>(static_cast<size_t>(samples), 0));
  for (size_t e = 0; e < E; ++e)
    for (int64_t b = begin; b < end; ++b) {
      sampleFirstRow[e][static_cast<size_t>(b - begin)] = lane.modalityRows[e];
      lane.modalityRows[e] += mb.samples[static_cast<size_t>(b)].counts[e];
    }
  auto place = [&](int64_t token, const Sample &sample, int64_t s,
                   int64_t localSample, int64_t segment, int64_t position,
                   std::vector<int64_t> &seen) {
    bool real = s < sample.length;
    int64_t id = real ? sample.ids[static_cast<size_t>(s)] : 0;
    lane.ids[static_cast<size_t>(token)] = id;
    lane.labels[static_cast<size_t>(token)] =
        real && s + 1 < sample.length ? sample.ids[static_cast<size_t>(s + 1)]
                                      : 0;
    lane.mask[static_cast<size_t>(token)] =
        real && !lossMasked(sample, encoders, s) ? 1.0f : 0.0f;
    lane.positions[static_cast<size_t>(token)] = position;
    // Padding attends only to padding of its own sample.
    lane.segments[static_cast<size_t>(token)] = real ? segment : -1 - segment;
    for (size_t e = 0; e < E; ++e)
      if (real && id == encoders[e].specialTokenId)
        lane.modalityRow[e][static_cast<size_t>(token)] =
            sampleFirstRow[e][static_cast<size_t>(localSample)] + seen[e]++;
  };
  auto allocate = [&](int64_t tokens) {
    lane.ids.assign(static_cast<size_t>(tokens), 0);
    lane.labels.assign(static_cast<size_t>(tokens), 0);
    lane.mask.assign(static_cast<size_t>(tokens), 0.0f);
    lane.positions.assign(static_cast<size_t>(tokens), 0);
    lane.segments.assign(static_cast<size_t>(tokens), 0);
    lane.modalityRow.assign(
        E, std::vector<int64_t>(static_cast<size_t>(tokens), int64_t(-1)));
  };
  if (packing) {
    lane.cuSeqlens.push_back(0);
    for (int64_t b = begin; b < end; ++b) {
      int64_t length = mb.samples[static_cast<size_t>(b)].length;
      int64_t padded = (length + padMultiple - 1) / padMultiple * padMultiple;
      lane.cuSeqlens.push_back(lane.cuSeqlens.back() + padded);
    }
    lane.seq = lane.cuSeqlens.back();
    lane.batch = 1;
    allocate(lane.seq);
    for (int64_t b = begin; b < end; ++b) {
      const Sample &sample = mb.samples[static_cast<size_t>(b)];
      std::vector<int64_t> seen(E, 0);
      int64_t offset = lane.cuSeqlens[static_cast<size_t>(b - begin)];
      int64_t padded =
          lane.cuSeqlens[static_cast<size_t>(b - begin + 1)] - offset;
      for (int64_t s = 0; s < padded; ++s)
        place(offset + s, sample, s, b - begin, b, s, seen);
    }
    return lane;
  }
  int64_t S = static_cast<int64_t>(mb.samples[0].ids.size());
  lane.seq = S;
  lane.batch = samples;
  allocate(S * samples);
  for (int64_t b = begin; b < end; ++b) {
    const Sample &sample = mb.samples[static_cast<size_t>(b)];
    std::vector<int64_t> seen(E, 0);
    for (int64_t s = 0; s < S; ++s)
      place(s * samples + (b - begin), sample, s, b - begin, b, s, seen);
  }
  return lane;
}

} // namespace mimo::exec
