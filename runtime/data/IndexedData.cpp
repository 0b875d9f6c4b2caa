//===- IndexedData.cpp - Megatron's mmap indexed dataset ------------------===//

#include "runtime/data/IndexedData.h"

#include "runtime/support/InputFile.h"
#include "runtime/support/MappedFile.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mimo::exec {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

/// Bytes per token of a Megatron dtype code (0: not a token type).
int64_t tokenBytesOf(int code) {
  switch (code) {
  case 1: // uint8
  case 2: // int8
    return 1;
  case 3: // int16
  case 8: // uint16
    return 2;
  case 4: // int32
    return 4;
  case 5: // int64
    return 8;
  default: // 6 float64, 7 float32: not token ids
    return 0;
  }
}

template <typename T> bool readValue(std::istream &in, T &value) {
  return static_cast<bool>(
      in.read(reinterpret_cast<char *>(&value), sizeof(T)));
}

class IndexedSamples final : public Dataset {
public:
  IndexedSamples(const ModelConfig &config, IndexedDataset dataset,
                 std::unique_ptr<MappedFile> bin, IndexedExtras extras)
      : config(config), encoders(encodersOf(config)),
        dataset(std::move(dataset)), bin(std::move(bin)),
        extras(std::move(extras)) {
    starts.reserve(this->dataset.lengths.size() + 1);
    starts.push_back(0);
    for (int32_t length : this->dataset.lengths)
      starts.push_back(starts.back() + length);
  }

  /// Windows in file order: an epoch is as many windows as the stream has
  /// tokens (window k starts at k · L mod the stream); shuffled, the
  /// stream's whole windows (at least one). Sequences: one sample each.
  int64_t size() const override {
    if (sequences())
      return static_cast<int64_t>(dataset.lengths.size());
    const int64_t total = std::max<int64_t>(1, dataset.totalTokens);
    return config.data.shuffle
               ? std::max<int64_t>(1, total / config.batch.seqLength)
               : total;
  }

  Sample at(int64_t k) const override {
    const int64_t S = config.batch.seqLength;
    Sample sample;
    int64_t at = 0, length = S;
    if (sequences()) {
      at = starts[static_cast<size_t>(k)];
      length = dataset.lengths[static_cast<size_t>(k)];
      if (length > S || length < 1)
        throw std::runtime_error(
            dataset.idxPath + ": error: sequence " + std::to_string(k) +
            " has " + std::to_string(length) + " tokens; samples hold 1 to " +
            "seq_length (" + std::to_string(S) +
            ") tokens: split or drop it when preparing the data");
    } else {
      at = k * S % dataset.totalTokens;
    }
    sample.length = length;
    sample.ids.assign(static_cast<size_t>(config.batch.packing ? length : S),
                      0);
    if (extras.mask)
      sample.target.resize(static_cast<size_t>(length));
    for (int64_t s = 0; s < length; ++s, at = (at + 1) % dataset.totalTokens) {
      sample.ids[static_cast<size_t>(s)] = checkedToken(at);
      if (extras.mask)
        sample.target[static_cast<size_t>(s)] = extras.mask->target(at);
    }
    // Each encoder's rows: one per special token of the sequence.
    sample.counts.assign(encoders.size(), 0);
    sample.features.resize(encoders.size());
    for (size_t e = 0; e < encoders.size(); ++e) {
      for (int64_t s = 0; s < length; ++s)
        sample.counts[e] +=
            sample.ids[static_cast<size_t>(s)] == encoders[e].specialTokenId;
      const FeatureFile &file = *extras.features[e];
      if (file.rowsOf(k) != sample.counts[e])
        throw std::runtime_error(
            file.path() + ": error: sequence " + std::to_string(k) + " has " +
            std::to_string(file.rowsOf(k)) + " feature rows but " +
            std::to_string(sample.counts[e]) + " '" + encoders[e].name +
            "' tokens (id " + std::to_string(encoders[e].specialTokenId) +
            ") in " + dataset.binPath + "; give one row per token");
      file.read(k, sample.features[e]);
      file.checkIntact();
      if (const ItemFile *items = extras.items[e].get()) {
        sample.items.resize(encoders.size());
        items->items(file.firstRow(k), file.firstRow(k) + file.rowsOf(k),
                     sample.items[e]);
        items->checkIntact();
      }
    }
    // A file truncated or rewritten while mapped: an error naming it, not
    // zeros trained on (support/MappedFile.h).
    bin->checkIntact();
    if (extras.mask)
      extras.mask->checkIntact();
    return sample;
  }

private:
  bool sequences() const { return config.data.samples == "sequences"; }

  int64_t checkedToken(int64_t at) const {
    const int64_t id = token(at);
    if (id < 0 || id >= config.language().vocabSize)
      throw std::runtime_error(
          dataset.binPath + ": token " + std::to_string(at) +
          " of the stream is " + std::to_string(id) +
          ", outside the vocabulary [0, " +
          std::to_string(config.language().vocabSize) +
          "); use the tokenizer the model's vocab_size was set for");
    return id;
  }

  /// Token `index` of the stream of every sequence in order.
  int64_t token(int64_t index) const {
    size_t seq = static_cast<size_t>(
        std::upper_bound(starts.begin(), starts.end(), index) - starts.begin() -
        1);
    int64_t offset =
        dataset.pointers[seq] + (index - starts[seq]) * dataset.tokenBytes;
    const unsigned char *p = bin->bytes() + offset;
    switch (dataset.dtypeCode) {
    case 1:
      return *p;
    case 2:
      return static_cast<int8_t>(*p);
    case 3: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case 8: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case 4: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    }
  }

  ModelConfig config;
  std::vector<EncoderInfo> encoders;
  IndexedDataset dataset;
  std::unique_ptr<MappedFile> bin;
  IndexedExtras extras;
  std::vector<int64_t> starts; // stream index of each sequence's first token
};

} // namespace

std::optional<IndexedExtras> openIndexedExtras(const ModelConfig &config,
                                               const std::string &prefix,
                                               const IndexedDataset &dataset,
                                               std::string &error) {
  IndexedExtras extras;
  std::error_code ec;
  const std::string maskPath = prefix + ".mask";
  // A link whose target is gone is a mask that was meant, not none.
  if (std::filesystem::is_symlink(
          std::filesystem::symlink_status(maskPath, ec)) &&
      !std::filesystem::exists(maskPath, ec)) {
    error = maskPath + ": error: a symbolic link to a file that does not "
                       "exist; the loss mask is missing (restore it, or "
                       "remove the link to train on every token)";
    return std::nullopt;
  }
  if (std::filesystem::exists(maskPath, ec)) {
    extras.mask = MaskFile::open(maskPath, dataset.totalTokens, error);
    if (!extras.mask)
      return std::nullopt;
  }
  for (const EncoderInfo &e : encodersOf(config)) {
    const std::string path = prefix + "." + e.name + ".feat";
    if (!std::filesystem::exists(path, ec)) {
      error = path + ": error: no feature rows for encoder '" + e.name +
              "' beside " + dataset.idxPath +
              " (docs/data.md, binary features: tools/mimo-prep writes them)";
      return std::nullopt;
    }
    std::unique_ptr<FeatureFile> file =
        FeatureFile::open(path, e.featureDim,
                          static_cast<int64_t>(dataset.lengths.size()), error);
    if (!file)
      return std::nullopt;
    const std::string itemsPath = prefix + "." + e.name + ".items";
    std::unique_ptr<ItemFile> items;
    if (std::filesystem::exists(itemsPath, ec) ||
        std::filesystem::is_symlink(
            std::filesystem::symlink_status(itemsPath, ec))) {
      items = ItemFile::open(itemsPath, file->totalRows(), error);
      if (!items)
        return std::nullopt;
    }
    extras.features.push_back(std::move(file));
    extras.items.push_back(std::move(items));
  }
  return extras;
}

bool readIndexedDataset(const std::string &prefix, IndexedDataset &out,
                        std::string &error) {
  out = IndexedDataset();
  out.idxPath = prefix + ".idx";
  out.binPath = prefix + ".bin";
  if (std::string problem = inputFileProblem(out.idxPath, "the index");
      !problem.empty() && std::filesystem::exists(out.idxPath)) {
    error = problem;
    return false;
  }
  std::ifstream in(out.idxPath, std::ios::binary);
  if (!in) {
    error = out.idxPath + ": error: cannot open it";
    return false;
  }
  auto fail = [&](const std::string &what) {
    error = out.idxPath + ": error: " + what +
            "; write it with Megatron's tools/preprocess_data.py (mmap "
            "indexed dataset)";
    return false;
  };
  char magic[9];
  uint64_t version = 0, sequences = 0, documents = 0;
  uint8_t code = 0;
  if (!in.read(magic, 9) || std::memcmp(magic, kMagic, 9) != 0)
    return fail("expected the header MMIDIDX\\0\\0, found other bytes");
  if (!readValue(in, version) || version != 1)
    return fail("expected index version 1, found " + std::to_string(version));
  if (!readValue(in, code) || tokenBytesOf(code) == 0)
    return fail("expected a token dtype code (1, 2, 3, 4, 5 or 8), found " +
                std::to_string(code));
  out.dtypeCode = code;
  out.tokenBytes = tokenBytesOf(code);
  if (!readValue(in, sequences) || !readValue(in, documents))
    return fail("the file ends inside its header");
  in.seekg(0, std::ios::end);
  uint64_t fileSize = static_cast<uint64_t>(in.tellg());
  const uint64_t header = 34;
  // The arrays must fit the file (checked before allocating them).
  if (sequences > (fileSize - header) / 12 ||
      documents > (fileSize - header - sequences * 12) / 8)
    return fail("it announces " + std::to_string(sequences) +
                " sequences and " + std::to_string(documents) +
                " document indices, more than its " + std::to_string(fileSize) +
                " bytes hold");
  in.seekg(static_cast<std::streamoff>(header));
  out.lengths.resize(sequences);
  out.pointers.resize(sequences);
  out.documents.resize(documents);
  in.read(reinterpret_cast<char *>(out.lengths.data()),
          static_cast<std::streamsize>(sequences * 4));
  in.read(reinterpret_cast<char *>(out.pointers.data()),
          static_cast<std::streamsize>(sequences * 8));
  in.read(reinterpret_cast<char *>(out.documents.data()),
          static_cast<std::streamsize>(documents * 8));
  if (!in)
    return fail("the file ends inside its arrays");
  struct stat st = {};
  if (stat(out.binPath.c_str(), &st) != 0) {
    error = out.binPath + ": error: cannot open it (the tokens that " +
            out.idxPath + " indexes)";
    return false;
  }
  int64_t binSize = st.st_size;
  for (uint64_t i = 0; i < sequences; ++i) {
    int64_t length = out.lengths[i], pointer = out.pointers[i];
    if (length < 0 || pointer < 0 ||
        pointer > binSize - length * out.tokenBytes) {
      error = out.idxPath + ": error: sequence " + std::to_string(i) + " (" +
              std::to_string(length) + " tokens at byte " +
              std::to_string(pointer) + ") lies outside " + out.binPath + " (" +
              std::to_string(binSize) +
              " bytes); the two files do not belong together";
      return false;
    }
    // Megatron's writer lays the sequences out one after another: each
    // pointer is the last one plus its sequence's bytes (a dtype code that
    // does not match the data breaks this at the second sequence).
    const int64_t expected =
        i == 0 ? 0 : out.pointers[i - 1] + out.lengths[i - 1] * out.tokenBytes;
    if (pointer != expected) {
      error = out.idxPath + ": error: sequence " + std::to_string(i) +
              " starts at byte " + std::to_string(pointer) + ", but the " +
              std::to_string(i == 0 ? 0 : out.lengths[i - 1]) +
              " tokens before it end at byte " + std::to_string(expected) +
              " at " + std::to_string(out.tokenBytes) + " byte" +
              (out.tokenBytes > 1 ? "s" : "") + " a token (dtype code " +
              std::to_string(out.dtypeCode) +
              "): the dtype code does not match the data, or the index does "
              "not belong to " +
              out.binPath + "; rewrite the index with the tokens' dtype";
      return false;
    }
    out.totalTokens += length;
  }
  if (out.totalTokens == 0)
    return fail("it indexes no tokens");
  const int64_t end =
      out.pointers[sequences - 1] + out.lengths[sequences - 1] * out.tokenBytes;
  if (end != binSize) {
    error = out.idxPath + ": error: its sequences end at byte " +
            std::to_string(end) + " of " + out.binPath + ", which has " +
            std::to_string(binSize) + " bytes: the dtype code (" +
            std::to_string(out.dtypeCode) + ", " +
            std::to_string(out.tokenBytes) +
            " bytes a token) does not match the data, or the two files do "
            "not belong together";
    return false;
  }
  return true;
}

bool writeIndexedDataset(const std::string &prefix,
                         const std::vector<std::vector<int64_t>> &sequences,
                         int dtypeCode, std::string &error) {
  int64_t bytes = tokenBytesOf(dtypeCode);
  if (dtypeCode != 8 && dtypeCode != 4) {
    error = "writeIndexedDataset: dtype code 8 (uint16) or 4 (int32)";
    return false;
  }
  std::ofstream bin(prefix + ".bin", std::ios::binary);
  std::ofstream idx(prefix + ".idx", std::ios::binary);
  if (!bin || !idx) {
    error = prefix + ": error: cannot write .bin / .idx";
    return false;
  }
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers, documents = {0};
  int64_t pointer = 0;
  for (const std::vector<int64_t> &seq : sequences) {
    for (int64_t id : seq) {
      if (bytes == 2) {
        uint16_t v = static_cast<uint16_t>(id);
        bin.write(reinterpret_cast<const char *>(&v), 2);
      } else {
        int32_t v = static_cast<int32_t>(id);
        bin.write(reinterpret_cast<const char *>(&v), 4);
      }
    }
    lengths.push_back(static_cast<int32_t>(seq.size()));
    pointers.push_back(pointer);
    pointer += static_cast<int64_t>(seq.size()) * bytes;
    documents.push_back(static_cast<int64_t>(lengths.size()));
  }
  uint64_t version = 1, count = lengths.size(), docs = documents.size();
  uint8_t code = static_cast<uint8_t>(dtypeCode);
  idx.write(kMagic, 9);
  idx.write(reinterpret_cast<const char *>(&version), 8);
  idx.write(reinterpret_cast<const char *>(&code), 1);
  idx.write(reinterpret_cast<const char *>(&count), 8);
  idx.write(reinterpret_cast<const char *>(&docs), 8);
  idx.write(reinterpret_cast<const char *>(lengths.data()),
            static_cast<std::streamsize>(lengths.size() * 4));
  idx.write(reinterpret_cast<const char *>(pointers.data()),
            static_cast<std::streamsize>(pointers.size() * 8));
  idx.write(reinterpret_cast<const char *>(documents.data()),
            static_cast<std::streamsize>(documents.size() * 8));
  if (!bin || !idx) {
    error = prefix + ": error: writing .bin / .idx failed";
    return false;
  }
  return true;
}

std::unique_ptr<Dataset>
loadIndexed(const ModelConfig &config, const std::string &written,
            const std::string &pointer, const std::string &baseDir,
            const std::string &planFile, std::vector<std::string> &errors) {
  namespace fs = std::filesystem;
  std::vector<std::string> tried = {written};
  if (!baseDir.empty() && fs::path(written).is_relative())
    tried.push_back((fs::path(baseDir) / written).string());
  std::string prefix;
  std::error_code ec;
  for (const std::string &candidate : tried)
    if (fs::exists(candidate + ".idx", ec)) {
      prefix = candidate;
      break;
    }
  if (prefix.empty()) {
    std::string list;
    for (const std::string &t : tried)
      list += (list.empty() ? "'" : ", '") + t + ".idx'";
    errors.push_back(planFile + ": " + pointer +
                     ": error: no indexed dataset '" + written + "' (tried " +
                     list + "); give the PREFIX of PREFIX.bin and PREFIX.idx");
    return nullptr;
  }
  IndexedDataset dataset;
  std::string error;
  if (!readIndexedDataset(prefix, dataset, error)) {
    errors.push_back(error);
    return nullptr;
  }
  auto bin = std::make_unique<MappedFile>();
  if (!bin->open(dataset.binPath, "the token data", error)) {
    errors.push_back(error);
    return nullptr;
  }
  std::optional<IndexedExtras> extras =
      openIndexedExtras(config, prefix, dataset, error);
  if (!extras) {
    errors.push_back(error);
    return nullptr;
  }
  return std::make_unique<IndexedSamples>(config, std::move(dataset),
                                          std::move(bin), std::move(*extras));
}

} // namespace mimo::exec
