//===- Data.h - Training data: synthetic and jsonl sources ------*- C++ -*-===//
//
// docs/data.md, docs/runtime.md. Every rank derives the same global microbatch
// from (seed, step, microbatch) through the global sample index (data/
// Order.h), the same in every layout and micro-batch split; a module's
// data-parallel lane takes its slice of samples. The lane views below turn
// samples into what a module computes on: token lists for encoders, [sequence,
// batch] token grids (or one packed THD row) for the language module.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DATA_DATA_H
#define MIMO_RUNTIME_DATA_DATA_H

#include "runtime/config/ModelConfig.h"

#include <cstdint>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mimo::exec {

/// One training sample.
struct Sample {
  /// Token ids: seq_length of them (positions >= length are padding), or
  /// exactly `length` when batches are packed.
  std::vector<int64_t> ids;
  int64_t length = 0;
  /// Per encoder (model order): modality-token count and features
  /// [count, feature_dim] row-major.
  std::vector<int64_t> counts;
  std::vector<std::vector<float>> features;
  /// Per encoder (or empty): the row count of each item (an image, a tile,
  /// a frame) in order, which the encoder runs as its own sequence; none
  /// (the usual case) means the sample's rows are one item.
  std::vector<std::vector<int64_t>> items;
  /// docs/data.md `loss_mask`: target[i] = 0 leaves token i out of the
  /// loss as a label (the prediction of it from the positions before);
  /// empty: every token is a target.
  std::vector<uint8_t> target;
};

struct Microbatch {
  std::vector<Sample> samples;
};

/// The encoders of a model in model order (the topology's order), with
/// what the data needs of them.
struct EncoderInfo {
  std::string name;
  int64_t specialTokenId = 0, featureDim = 0;
};
std::vector<EncoderInfo> encodersOf(const ModelConfig &config);

class DataSource {
public:
  virtual ~DataSource() = default;
  /// The global microbatch `mb` of step `step` (0-based).
  virtual Microbatch get(int64_t step, int64_t mb) const = 0;
};

/// One file's samples in file order (a jsonl file's lines, an indexed
/// dataset's windows); data/Order.h decides which one a step reads.
class Dataset {
public:
  virtual ~Dataset() = default;
  /// The samples of one epoch.
  virtual int64_t size() const = 0;
  /// Sample i, 0 <= i < size().
  virtual Sample at(int64_t i) const = 0;
};

/// The source over `datasets` (one, or data.blend's in order): global
/// sample g through data/Order.h (the blend, epochs, data.shuffle).
std::unique_ptr<DataSource>
orderedSource(const ModelConfig &config,
              std::vector<std::unique_ptr<Dataset>> datasets);

/// Training data, or the held-out data of evaluations (docs/runtime.md).
enum class DataSplit { Train, Eval };

/// The source model.json asks for: synthetic (the eval split its own stream
/// of samples), or the file at data.path (eval: data.eval_path). File
/// paths are tried as written, then relative to `baseDir`. A jsonl file's
/// lines are checked when it is opened, those of share `checkPart` of
/// `checkParts` (every line by default; under mpirun each rank its own
/// share). Bad data fills `errors` with whole messages ("FILE:LINE:
/// POINTER: error: ...; fix") and returns nullptr.
std::unique_ptr<DataSource>
makeDataSource(const ModelConfig &config, const std::string &baseDir,
               const std::string &planFile, std::vector<std::string> &errors,
               DataSplit split = DataSplit::Train, int64_t checkPart = 0,
               int64_t checkParts = 1);

/// The jsonl source of `in` (docs/data.md), or nullptr with `errors` filled
/// ("PATH:LINE: POINTER: error: ...", at most 20 and a count).
std::unique_ptr<DataSource> readJsonl(const ModelConfig &config,
                                      std::istream &in, const std::string &path,
                                      std::vector<std::string> &errors);

/// docs/runtime.md, at compile time: resolves data.path and data.eval_path
/// (file sources) against `modelDir` (then the working directory), checks that
/// each file exists and that its first record parses, and writes the
/// resolved absolute paths into `config`. Errors name the pointer and every
/// path tried.
std::vector<Diagnostic> resolveDataPaths(ModelConfig &config,
                                         const std::string &modelDir);

/// Loss mask of position s of a sample (docs/data.md): 0 at modality tokens
/// (as input or as label), padding, the last position, and where the
/// sample's loss_mask leaves token s + 1 out.
bool lossMasked(const Sample &sample, const std::vector<EncoderInfo> &encoders,
                int64_t position);

/// An encoder's data-parallel lane: the modality tokens of samples
/// [begin, end), sample-major.
struct EncoderLane {
  int64_t rows = 0;
  std::vector<float> features; // [rows, feature_dim]
  /// Each row's item (docs/model.md: the encoder runs each item, a
  /// sample's rows or one image of them, as its own sequence), numbered
  /// from 0 in lane order.
  std::vector<int64_t> segment;
};
EncoderLane encoderLane(const Microbatch &mb, size_t encoder,
                        int64_t featureDim, int64_t begin, int64_t end);
/// Rows of encoder `encoder` for samples [begin, end).
int64_t modalityRows(const Microbatch &mb, size_t encoder, int64_t begin,
                     int64_t end);

/// The language module's lane: samples [begin, end) as a [seq, batch] grid
/// of tokens (token index = position * batch + b), or one packed THD row
/// (batch 1) whose samples are padded to `padMultiple`.
struct LanguageLane {
  int64_t seq = 0, batch = 1;
  std::vector<int64_t> cuSeqlens; // packed only
  std::vector<int64_t> ids, labels, positions, segments;
  std::vector<float> mask;
  /// Per encoder: the row of the lane's modality tensor each token takes,
  /// or -1; and the lane's row count.
  std::vector<std::vector<int64_t>> modalityRow;
  std::vector<int64_t> modalityRows;
  int64_t tokens() const { return seq * batch; }
};
LanguageLane languageLane(const Microbatch &mb,
                          const std::vector<EncoderInfo> &encoders,
                          int64_t begin, int64_t end, bool packing,
                          int64_t padMultiple);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_DATA_DATA_H
