//===- Checkpoint.cpp - Checkpoints that reshard --------------------------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/FileIo.h"
#include "runtime/checkpoint/HfWeights.h"
#include "runtime/checkpoint/PeftAdapter.h"

#include "runtime/config/LearningRate.h"
#include "runtime/config/Parameters.h"
#include "runtime/json/JsonReader.h"
#include "runtime/model/Model.h"
#include "runtime/support/InputFile.h"
#include "runtime/support/Limits.h"
#include "runtime/support/Random.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace mimo::exec {

namespace fs = std::filesystem;

namespace {

const char *kModelFile = "model.safetensors";
const char *kOptimizerFile = "optimizer.safetensors";

std::vector<int64_t> shapeOf(const ParamSpec &spec) {
  if (spec.rows == 1)
    return {spec.cols};
  return {spec.rows, spec.cols};
}

std::string stepName(int64_t step) { return "step-" + std::to_string(step); }

void syncDirectory(const std::string &dir) {
  File d(dir, O_RDONLY | O_DIRECTORY);
  d.sync();
}

/// Writes `text` to `path` and syncs it.
void writeSynced(const std::string &path, const std::string &text) {
  File f(path, O_WRONLY | O_CREAT | O_TRUNC);
  f.writeAt(text.data(), static_cast<int64_t>(text.size()), 0);
  f.sync();
}

/// The byte offset of row `row`, column `col` of tensor `entry` in a file.
int64_t offsetOf(const safetensors::Header &header,
                 const safetensors::TensorEntry &entry, int64_t cols,
                 int64_t row, int64_t col) {
  return header.dataOffset + entry.begin + (row * cols + col) * 4;
}

/// Moves one block of a [globalRows, globalCols] tensor between the device
/// tensor `t` (the block, row-major) and its place in a file.
void transferBlock(File &file, const safetensors::Header &header,
                   const std::string &name, const Param &p, Tensor &t,
                   bool write) {
  const safetensors::TensorEntry *entry = header.find(name);
  if (!entry)
    throw std::runtime_error("checkpoint: no tensor '" + name + "'");
  int64_t rows = p.rowEnd - p.rowBegin, cols = p.colEnd - p.colBegin;
  // A frozen parameter keeps no moments: zeros are written, and what a
  // checkpoint holds is checked and dropped.
  const bool absent = t.size() == 0 && rows * cols > 0;
  std::vector<float> host;
  if (write && !absent)
    host = t.toHost();
  else
    host.resize(static_cast<size_t>(rows * cols));
  if (cols == p.globalCols) { // whole rows: one contiguous range
    int64_t at = offsetOf(header, *entry, p.globalCols, p.rowBegin, 0);
    if (write)
      file.writeAt(host.data(), rows * cols * 4, at);
    else
      file.readAt(host.data(), rows * cols * 4, at);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      int64_t at =
          offsetOf(header, *entry, p.globalCols, p.rowBegin + r, p.colBegin);
      float *row = host.data() + r * cols;
      if (write)
        file.writeAt(row, cols * 4, at);
      else
        file.readAt(row, cols * 4, at);
    }
  }
  if (!write) {
    // A damaged or hand-made checkpoint must not train on NaN: every value
    // finite, and AdamW's second moments never negative.
    const bool second = name.size() > 11 &&
                        name.compare(name.size() - 11, 11, ".exp_avg_sq") == 0;
    for (size_t i = 0; i < host.size(); ++i)
      if (!std::isfinite(host[i]) || (second && host[i] < 0.0f)) {
        const int64_t row = p.rowBegin + static_cast<int64_t>(i) / cols;
        const int64_t col = p.colBegin + static_cast<int64_t>(i) % cols;
        throw std::runtime_error(
            file.name() + ": error: tensor '" + name + "' holds " +
            std::to_string(host[i]) + " at [" + std::to_string(row) + ", " +
            std::to_string(col) + "]" +
            (second && std::isfinite(host[i]) ? " (a second moment below 0)"
                                              : "") +
            "; the checkpoint is damaged: load an earlier step");
      }
    if (!host.empty() && !absent)
      t.device().upload(t.raw(), host.data(), t.bytes());
  }
}

} // namespace

CheckpointFiles checkpointFiles(const ModelConfig &config) {
  CheckpointFiles files;
  files.model.metadata = {{"format", "mimo"}, {"model", config.name}};
  files.optimizer.metadata = {
      {"format", "mimo"}, {"model", config.name}, {"optimizer", "adamw"}};
  for (const ParamSpec &spec : checkpointParameters(config)) {
    files.model.tensors.push_back({spec.name(), "F32", shapeOf(spec)});
    files.optimizer.tensors.push_back(
        {spec.name() + ".exp_avg", "F32", shapeOf(spec)});
    files.optimizer.tensors.push_back(
        {spec.name() + ".exp_avg_sq", "F32", shapeOf(spec)});
  }
  files.modelHeader = safetensors::encodeHeader(files.model);
  files.optimizerHeader = safetensors::encodeHeader(files.optimizer);
  return files;
}

std::string architectureDigest(const ModelConfig &config) {
  uint64_t h = hashString("mimo-architecture");
  for (const ParamSpec &spec : modelParameters(config))
    h = combine(combine(combine(h, hashString(spec.name())),
                        static_cast<uint64_t>(spec.rows)),
                static_cast<uint64_t>(spec.cols));
  std::ostringstream os;
  os << std::hex << h;
  return os.str();
}

std::optional<std::string> checkpointDirProblem(const std::string &dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return "cannot create the checkpoint directory '" + dir +
           "': " + ec.message();
  std::string probe = (fs::path(dir) / ".mimo-write-test").string();
  {
    std::ofstream out(probe);
    if (!out)
      return "cannot write in the checkpoint directory '" + dir + "'";
  }
  fs::remove(probe, ec);
  return std::nullopt;
}

std::unique_ptr<SaveFolderLock> SaveFolderLock::acquire(const std::string &dir,
                                                        std::string &problem) {
  const std::string path = (fs::path(dir) / ".mimo-lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    problem = "cannot open " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    char holder[256] = {};
    const ssize_t n = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    if (why != EWOULDBLOCK) {
      problem = "cannot lock " + path + ": " + std::strerror(why);
      return nullptr;
    }
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "";
    while (!who.empty() && (who.back() == '\n' || who.back() == ' '))
      who.pop_back();
    problem = dir + " is being saved into by another mimo-run" +
              (who.empty() ? "" : " (" + who + ")") +
              ": two runs saving into one folder would overwrite each "
              "other's checkpoints; give this run another --save folder, or "
              "stop the other run first";
    return nullptr;
  }
  char host[128] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  const std::string text = "pid " + std::to_string(::getpid()) + " on " + host +
                           ", since " + when + "\n";
  if (::ftruncate(fd, 0) == 0) {
    ssize_t ignored = ::pwrite(fd, text.data(), text.size(), 0);
    (void)ignored;
  }
  auto lock = std::unique_ptr<SaveFolderLock>(new SaveFolderLock());
  lock->fd = fd;
  return lock;
}

SaveFolderLock::~SaveFolderLock() {
  if (fd >= 0)
    ::close(fd); // releases the lock
}

std::optional<int64_t> parseCheckpointState(std::string_view text,
                                            const std::string &statePath,
                                            nlohmann::json &state,
                                            std::string &error) {
  Diagnostic syntax;
  std::optional<nlohmann::json> parsed;
  if (text.size() > (size_t(1) << 20)) {
    error = statePath + ": error: " + std::to_string(text.size()) +
            " bytes, more than a checkpoint state ever holds (1 MiB); the "
            "file is not a mimo checkpoint state";
    return std::nullopt;
  }
  parsed = parseJsonText(text, syntax);
  if (!parsed) {
    error = formatDiagnostic(statePath, syntax);
    return std::nullopt;
  }
  const nlohmann::json &j = *parsed;
  auto format = j.is_object() ? j.find("format") : j.end();
  auto version = j.is_object() ? j.find("version") : j.end();
  if (!j.is_object() || format == j.end() || *format != "mimo-checkpoint" ||
      version == j.end() || !version->is_number_integer()) {
    error = statePath + ": error: not a mimo checkpoint state (expected "
                        "\"format\": \"mimo-checkpoint\" and a version)";
    return std::nullopt;
  }
  if (!version->is_number_unsigned() ||
      version->get<uint64_t>() != uint64_t(kCheckpointVersion)) {
    error = statePath + ": /version: error: checkpoint version " +
            briefJson(*version) + ", this mimo-run reads version " +
            std::to_string(kCheckpointVersion);
    return std::nullopt;
  }
  auto step = j.find("step");
  if (step == j.end() || !step->is_number_unsigned() ||
      step->get<uint64_t>() < 1 || step->get<uint64_t>() > kMaxSteps) {
    error = statePath + ": /step: error: expected the step the checkpoint "
                        "was written after (>= 1)";
    return std::nullopt;
  }
  state = std::move(*parsed);
  return static_cast<int64_t>(state["step"].get<uint64_t>());
}

/// Why tensor `want` does not fit the file `path` whose header is `got`,
/// or "".
std::string tensorMismatch(const std::string &path,
                           const safetensors::TensorEntry &want,
                           const safetensors::Header &got) {
  const safetensors::TensorEntry *g = got.find(want.name);
  auto shape = [](const std::vector<int64_t> &s) {
    std::string t;
    for (int64_t d : s)
      t += (t.empty() ? "" : ", ") + std::to_string(d);
    return "[" + t + "]";
  };
  if (!g)
    return path + ": error: tensor '" + want.name +
           "' is missing: the checkpoint is of another model "
           "(architecture), or incomplete";
  if (g->dtype != "F32")
    return path + ": error: tensor '" + want.name + "' is " + g->dtype +
           ", expected F32";
  if (g->shape != want.shape)
    return path + ": error: tensor '" + want.name + "' has shape " +
           shape(g->shape) + " in the checkpoint but " + shape(want.shape) +
           " in this model: the checkpoint is of another architecture";
  return "";
}

std::optional<ModuleWeights> openModuleWeights(const std::string &path,
                                               const ModelConfig &config,
                                               const ModuleConfig &module,
                                               std::string &error) {
  ModuleWeights weights;
  weights.module = module.name;
  if (module.init && module.init->format == "hf") {
    std::optional<HfFolder> folder = openHfFolder(path, error);
    if (!folder)
      return std::nullopt;
    std::vector<Diagnostic> problems =
        hfConfigProblems(*folder, module, config.batch.seqLength);
    if (!problems.empty()) {
      error = folder->configPath + ": error: " + problems.front().pointer +
              " of the model: " + problems.front().message;
      return std::nullopt;
    }
    error = hfTensorProblem(*folder, config, module);
    if (!error.empty())
      return std::nullopt;
    weights.dir = path;
    weights.hf = std::make_shared<const HfFolder>(std::move(*folder));
    weights.hfModule = std::make_shared<const ModuleConfig>(module);
    if (!module.init->adapterFrom.empty()) {
      std::optional<PeftAdapter> adapter = openPeftAdapter(
          module.init->adapterFrom, *weights.hf, config, module, error);
      if (!adapter)
        return std::nullopt;
      weights.adapter =
          std::make_shared<const PeftAdapter>(std::move(*adapter));
    }
    return weights;
  }
  std::optional<std::string> dir = checkpointStepDir(path, error);
  if (!dir)
    return std::nullopt;
  weights.dir = *dir;
  std::string file = (fs::path(*dir) / kModelFile).string();
  std::optional<safetensors::Header> header =
      safetensors::readHeader(file, error);
  if (!header)
    return std::nullopt;
  // A LoRA module's init is its base: every parameter but the adapters'.
  ModelConfig base = config;
  for (ModuleConfig &m : base.modules)
    if (m.name == module.name)
      m.lora.reset();
  CheckpointFiles expected = checkpointFiles(base);
  const std::string prefix = module.name + ".";
  for (const safetensors::TensorEntry &w : expected.model.tensors) {
    if (w.name.compare(0, prefix.size(), prefix) != 0)
      continue;
    error = tensorMismatch(file, w, *header);
    if (!error.empty())
      return std::nullopt;
  }
  weights.model = std::move(*header);
  return weights;
}

std::optional<std::string> checkpointStepDir(const std::string &path,
                                             std::string &error) {
  std::error_code ec;
  fs::path latest = fs::path(path) / "latest";
  if (fs::exists(fs::path(path) / "state.json", ec))
    return path;
  if (fs::exists(latest, ec)) {
    std::optional<std::string> text = readInputFile(
        latest.string(), 4096, "the checkpoint's `latest`", error);
    if (!text)
      return std::nullopt;
    std::string name = text->substr(0, text->find('\n'));
    if (name.empty() || name.find('/') != std::string::npos ||
        name.rfind("step-", 0) != 0) {
      error = latest.string() +
              ": error: expected the name of a step-N "
              "directory, found '" +
              (name.size() > 80 ? name.substr(0, 80) + "..." : name) + "'";
      return std::nullopt;
    }
    std::string dir = (fs::path(path) / name).string();
    // A re-save moves step-N.resave to step-N just before `latest` follows
    // (finishCheckpoint): killed in between, step-N is that checkpoint.
    const std::string resave = ".resave";
    if (name.size() > resave.size() &&
        name.compare(name.size() - resave.size(), resave.size(), resave) == 0 &&
        !fs::exists(dir, ec))
      dir = (fs::path(path) / name.substr(0, name.size() - resave.size()))
                .string();
    return dir;
  }
  error = path + ": error: no checkpoint here (neither " + latest.string() +
          " nor " + (fs::path(path) / "state.json").string() +
          "); give a --save directory or one of its step-N directories";
  return std::nullopt;
}

std::optional<Checkpoint> openCheckpoint(const std::string &path,
                                         const ModelConfig &config,
                                         std::string &error, bool otherRun) {
  std::error_code ec;
  Checkpoint c;
  std::optional<std::string> dir = checkpointStepDir(path, error);
  if (!dir)
    return std::nullopt;
  c.dir = *dir;
  // state.json
  std::string statePath = (fs::path(c.dir) / "state.json").string();
  if (!fs::exists(statePath, ec)) {
    error = statePath + ": error: cannot open it (an incomplete checkpoint?)";
    return std::nullopt;
  }
  // Read at most a byte past what a state ever holds (1 MiB): a larger
  // file is refused by the parser without being read whole.
  std::optional<std::string> stateText = readInputFile(
      statePath, (int64_t(1) << 20), "the checkpoint state", error);
  if (!stateText)
    return std::nullopt;
  std::optional<int64_t> step =
      parseCheckpointState(*stateText, statePath, c.state, error);
  if (!step)
    return std::nullopt;
  c.step = *step;
  // Both files, against this model's parameters.
  CheckpointFiles expected = checkpointFiles(config);
  auto check = [&](const char *file, const safetensors::Header &want,
                   safetensors::Header &got) {
    std::string p = (fs::path(c.dir) / file).string();
    std::optional<safetensors::Header> header =
        safetensors::readHeader(p, error);
    if (!header)
      return false;
    // A checkpoint of a run without LoRA loaded into a LoRA module: its
    // weights are the module's base, an init.
    auto fullForLora = [&](const std::string &name) {
      std::string base = name;
      const bool factor = isLoraFactor(name, &base);
      for (const ModuleConfig &m : config.modules)
        if (m.lora && base.compare(0, m.name.size() + 1, m.name + ".") == 0 &&
            (!factor || header->find(base))) {
          error = p + ": error: the checkpoint holds the weights of module '" +
                  m.name + "' (" + name +
                  (factor ? " is not there, " + base + " is"
                          : " is of its frozen base") +
                  "), a LoRA run's checkpoint its adapters: start from it "
                  "with the module's \"init\": {\"from\": \"" +
                  path + "\", \"format\": \"mimo\"} instead of --load";
          return true;
        }
      return false;
    };
    for (const safetensors::TensorEntry &w : want.tensors) {
      error = tensorMismatch(p, w, *header);
      if (!error.empty()) {
        fullForLora(w.name);
        return false;
      }
    }
    for (const safetensors::TensorEntry &g : header->tensors)
      if (!want.find(g.name)) {
        error = p + ": error: tensor '" + g.name +
                "' is not a parameter of this model: the checkpoint is of "
                "another architecture";
        fullForLora(g.name);
        return false;
      }
    got = std::move(*header);
    return true;
  };
  if (!check(kModelFile, expected.model, c.model) ||
      !check(kOptimizerFile, expected.optimizer, c.optimizer))
    return std::nullopt;
  // Whose checkpoint it is: this architecture always; this model and seed
  // unless the caller starts from another run on purpose.
  const nlohmann::json &state = c.state;
  auto text = [&](const char *key) {
    auto it = state.find(key);
    return it == state.end() ? std::string("(missing)")
           : it->is_string() ? it->get<std::string>()
                             : it->dump();
  };
  if (text("architecture_digest") != architectureDigest(config)) {
    error = statePath + ": /architecture_digest: error: '" +
            text("architecture_digest") + "' is not this model's ('" +
            architectureDigest(config) +
            "'), though the tensors fit: the state was edited or belongs to "
            "another checkpoint; load a checkpoint written by mimo-run";
    return std::nullopt;
  }
  std::vector<std::string> names;
  for (const ModuleConfig &m : config.modules)
    names.push_back(m.name);
  std::vector<std::string> saved;
  auto layout = state.find("layout");
  if (layout != state.end() && layout->is_object() &&
      layout->contains("modules") && (*layout)["modules"].is_array())
    for (const nlohmann::json &m : (*layout)["modules"])
      saved.push_back(m.is_object() && m.contains("name") &&
                              m["name"].is_string()
                          ? m["name"].get<std::string>()
                          : std::string("?"));
  if (saved != names) {
    std::string list;
    for (const std::string &n : saved)
      list += (list.empty() ? "" : ", ") + n;
    error = statePath + ": /layout/modules: error: the checkpoint's modules (" +
            (list.empty() ? std::string("none") : list) +
            ") are not this model's; load a checkpoint of this model";
    return std::nullopt;
  }
  if (!otherRun && text("model") != config.name) {
    error = statePath + ": /model: error: the checkpoint is of model '" +
            text("model") + "', this is '" + config.name +
            "'; to start from another run's weights on purpose (fine-tuning), "
            "pass --load-other-run";
    return std::nullopt;
  }
  if (!otherRun && text("seed") != nlohmann::json(config.seed).dump()) {
    error = statePath +
            ": /seed: error: the checkpoint was trained with seed " +
            text("seed") + ", this model has " + std::to_string(config.seed) +
            " (resuming with another seed changes the data order); set "
            "\"seed\" back, or pass --load-other-run to start from it on "
            "purpose";
    return std::nullopt;
  }
  if (!otherRun) {
    error = loraBaseProblem(c, config);
    if (!error.empty())
      return std::nullopt;
  }
  return c;
}

std::string loraBaseProblem(const Checkpoint &checkpoint,
                            const ModelConfig &config) {
  const nlohmann::json &state = checkpoint.state;
  const std::string statePath =
      (fs::path(checkpoint.dir) / "state.json").string();
  auto bases = state.find("lora_base");
  for (const ModuleConfig &m : config.modules) {
    if (!m.lora || bases == state.end() || !bases->is_object() ||
        !bases->contains(m.name))
      continue;
    const nlohmann::json want =
        m.init ? nlohmann::json(m.init->from)
               : nlohmann::json("seed " + std::to_string(config.seed));
    if ((*bases)[m.name] != want)
      return statePath + ": /lora_base/" + m.name +
             ": error: the checkpoint's adapters of module '" + m.name +
             "' apply to the base " + (*bases)[m.name].dump() +
             ", this model's is " + want.dump() +
             "; set the module's init to that base (the seed with it)";
  }
  return "";
}

void beginCheckpoint(const std::string &dir, int64_t step,
                     const CheckpointFiles &files) {
  fs::path tmp = fs::path(dir) / (stepName(step) + ".tmp");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec)
    throw std::runtime_error("checkpoint: cannot create '" + tmp.string() +
                             "': " + ec.message());
  auto create = [&](const char *name, const std::string &header,
                    const safetensors::Header &h) {
    File f((tmp / name).string(), O_WRONLY | O_CREAT | O_TRUNC);
    f.writeAt(header.data(), static_cast<int64_t>(header.size()), 0);
    f.resize(h.dataOffset + h.dataBytes);
  };
  create(kModelFile, files.modelHeader, files.model);
  create(kOptimizerFile, files.optimizerHeader, files.optimizer);
}

void writeCheckpointShards(const std::string &dir, int64_t step,
                           const CheckpointFiles &files,
                           const HeldParams &held) {
  fs::path tmp = fs::path(dir) / (stepName(step) + ".tmp");
  File model((tmp / kModelFile).string(), O_WRONLY);
  File optimizer((tmp / kOptimizerFile).string(), O_WRONLY);
  for (size_t i = 0; i < held.params.size(); ++i) {
    if (!held.owned[i])
      continue;
    Param &p = *held.params[i];
    transferBlock(model, files.model, p.name, p, p.value, true);
    transferBlock(optimizer, files.optimizer, p.name + ".exp_avg", p, p.m,
                  true);
    transferBlock(optimizer, files.optimizer, p.name + ".exp_avg_sq", p, p.v,
                  true);
  }
  model.sync();
  optimizer.sync();
}

nlohmann::json hfOriginsOf(const ModelConfig &config) {
  nlohmann::json origins = nlohmann::json::object();
  for (const ModuleConfig &module : config.modules) {
    if (!module.init)
      continue;
    if (module.init->format == "hf") {
      origins[module.name] = module.init->from;
      continue;
    }
    // A mimo checkpoint: what its own state.json records, when it can be
    // read (an unreadable one is refused when the weights are read).
    std::string error;
    std::optional<std::string> step =
        checkpointStepDir(module.init->from, error);
    if (!step)
      continue;
    const std::string path = (fs::path(*step) / "state.json").string();
    std::optional<std::string> text =
        readInputFile(path, kMaxSmallJsonBytes, "the checkpoint state", error);
    if (!text)
      continue;
    Diagnostic syntax;
    std::optional<nlohmann::json> state = parseJsonText(*text, syntax);
    if (state && state->is_object() && state->contains("hf_origin") &&
        (*state)["hf_origin"].is_object() &&
        (*state)["hf_origin"].contains(module.name) &&
        (*state)["hf_origin"][module.name].is_string())
      origins[module.name] = (*state)["hf_origin"][module.name];
  }
  return origins;
}

void finishCheckpoint(const std::string &dir, int64_t step,
                      const ModelConfig &config, const nlohmann::json &layout) {
  fs::path tmp = fs::path(dir) / (stepName(step) + ".tmp");
  fs::path final = fs::path(dir) / stepName(step);
  const TrainConfig &t = config.train;
  nlohmann::ordered_json state = {
      {"format", "mimo-checkpoint"},
      {"version", kCheckpointVersion},
      {"model", config.name},
      {"step", step},
      {"consumed_samples",
       step * config.batch.microBatchSize * config.batch.numMicrobatches},
      {"seed", config.seed},
      {"lr",
       {{"lr", t.lr},
        {"schedule",
         {{"warmup_steps", t.lrSchedule.warmupSteps},
          {"decay", t.lrSchedule.decay},
          {"decay_steps", t.lrSchedule.decaySteps},
          {"min_lr", t.lrSchedule.minLr}}},
        {"last", learningRate(t, step)},
        {"next", learningRate(t, step + 1)}}},
      {"architecture_digest", architectureDigest(config)},
      {"layout", layout},
      {"hf_origin", hfOriginsOf(config)}};
  // LoRA: the base the adapters apply to, not in the checkpoint
  // (docs/checkpoints.md): the module's init, or the seed's weights.
  for (const ModuleConfig &module : config.modules)
    if (module.lora)
      state["lora_base"][module.name] =
          module.init ? nlohmann::json(module.init->from)
                      : nlohmann::json("seed " + std::to_string(config.seed));
  writeSynced((tmp / "state.json").string(), state.dump(2) + "\n");
  for (const char *name : {kModelFile, kOptimizerFile}) {
    File f((tmp / name).string(), O_RDONLY);
    f.sync();
  }
  syncDirectory(tmp.string());
  std::error_code ec;
  auto pointLatestAt = [&](const std::string &name) {
    fs::path latestTmp = fs::path(dir) / "latest.tmp";
    writeSynced(latestTmp.string(), name + "\n");
    fs::rename(latestTmp, fs::path(dir) / "latest", ec);
    if (ec)
      throw std::runtime_error("checkpoint: cannot replace '" +
                               (fs::path(dir) / "latest").string() +
                               "': " + ec.message());
    syncDirectory(dir);
  };
  auto move = [&](const fs::path &from, const fs::path &to) {
    fs::rename(from, to, ec);
    if (ec)
      throw std::runtime_error("checkpoint: cannot rename '" + from.string() +
                               "' to '" + to.string() + "': " + ec.message());
    syncDirectory(dir);
  };
  // Tests: MIMO_TEST_KILL_IN_RESAVE=K ends the process as if killed after
  // the K-th move of a re-save (1-4).
  const char *killAt = std::getenv("MIMO_TEST_KILL_IN_RESAVE");
  auto killPoint = [&](int k) {
    if (killAt && std::atoi(killAt) == k)
      std::_Exit(9);
  };
  if (fs::exists(final, ec)) {
    // An earlier run's step-N (a run resumed from an older step into the
    // same folder), perhaps the one `latest` names. It goes only once the
    // new one is durable and `latest` names it: at every instant `latest`
    // names a complete checkpoint, whatever kills the process.
    fs::path resaved = fs::path(dir) / (stepName(step) + ".resave");
    fs::remove_all(resaved, ec); // a re-save killed before `latest` moved
    move(tmp, resaved);
    killPoint(1);
    pointLatestAt(resaved.filename().string());
    killPoint(2);
    fs::remove_all(final, ec);
    if (ec)
      throw std::runtime_error("checkpoint: cannot remove the earlier '" +
                               final.string() + "': " + ec.message());
    syncDirectory(dir);
    killPoint(3);
    move(resaved, final);
    killPoint(4);
  } else {
    move(tmp, final);
  }
  pointLatestAt(stepName(step));
}

void readModuleWeights(const ModuleWeights &weights,
                       const std::vector<Param *> &params) {
  if (weights.hf) {
    readHfWeights(*weights.hf, *weights.hfModule, params);
    if (weights.adapter)
      readPeftAdapter(*weights.adapter, *weights.hfModule, params);
    return;
  }
  File model((fs::path(weights.dir) / kModelFile).string(), O_RDONLY);
  for (Param *p : params)
    if (!isLoraFactor(p->name)) // a base's adapters are not in it
      transferBlock(model, weights.model, p->name, *p, p->value, false);
}

void readCheckpointShards(const Checkpoint &checkpoint,
                          const HeldParams &held) {
  File model((fs::path(checkpoint.dir) / kModelFile).string(), O_RDONLY);
  File optimizer((fs::path(checkpoint.dir) / kOptimizerFile).string(),
                 O_RDONLY);
  for (Param *p : held.params) {
    transferBlock(model, checkpoint.model, p->name, *p, p->value, false);
    transferBlock(optimizer, checkpoint.optimizer, p->name + ".exp_avg", *p,
                  p->m, false);
    transferBlock(optimizer, checkpoint.optimizer, p->name + ".exp_avg_sq", *p,
                  p->v, false);
  }
}

} // namespace mimo::exec
