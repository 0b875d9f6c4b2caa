//===- ModuleFamily.cpp - The families' defaults and the registry ---------===//

#include "runtime/family/ModuleFamily.h"

#include <mutex>

namespace mimo {

bool ModuleFamily::hfCheck(ConfigCheck &k, const ModuleArch &arch,
                           int64_t seqLength) const {
  (void)arch, (void)seqLength;
  k.otherFamily(kind() == ModuleKind::Language ? "model" : "vision tower",
                k.text("model_type", k.outerType),
                "the module's family \"" + std::string(name()) +
                    "\" reads no Hugging Face folder");
  return false;
}

std::string ModuleFamily::hfExportProblem(const ModuleArch &arch) const {
  (void)arch;
  return "the family \"" + std::string(name()) + "\" has no Hugging Face form";
}

nlohmann::ordered_json
ModuleFamily::hfConfig(const ModuleArch &arch,
                       const HfExportContext &context) const {
  (void)arch, (void)context;
  return nullptr;
}

void declareAttention(const ModuleArch &m, const std::string &module,
                      const std::string &p, bool qkvBias, bool outBias,
                      bool sequenceParallel, std::vector<ParamSpec> &out) {
  using L = ParamLayout;
  using I = ParamInit;
  auto add = [&](const std::string &name, int64_t rows, int64_t cols, L layout,
                 I init = I::Weight, bool partialOverTp = false) {
    out.push_back({module, name, rows, cols, layout, init, 0, partialOverTp});
  };
  const int64_t H = m.hiddenSize;
  const int64_t A = m.attentionWidth(); // H unless head_dim says otherwise
  const int64_t KV = m.kvHidden();      // A unless grouped-query attention
  // Q, K and V split by heads (column-parallel; K and V by their groups
  // under GQA, which TP divides), the output projection by the same heads
  // (row-parallel). Biases (docs/model.md): of a column-parallel weight
  // split with its columns; of a row-parallel one (added once to the
  // summed output) replicated, its gradient partial over TP under SP (as
  // the norms').
  add(p + "wq", H, A, L::ColumnParallel);
  add(p + "wk", H, KV, L::ColumnParallel);
  add(p + "wv", H, KV, L::ColumnParallel);
  add(p + "wo", A, H, L::RowParallel);
  if (qkvBias) {
    add(p + "bq", 1, A, L::ColumnParallel, I::Zeros);
    add(p + "bk", 1, KV, L::ColumnParallel, I::Zeros);
    add(p + "bv", 1, KV, L::ColumnParallel, I::Zeros);
  }
  if (outBias)
    add(p + "bo", 1, H, L::Replicated, I::Zeros, sequenceParallel);
}

void declareMoeMlp(const MoeConfig &e, int64_t H, const std::string &module,
                   const std::string &p, std::vector<ParamSpec> &out) {
  using L = ParamLayout;
  auto add = [&](const std::string &name, int64_t rows, int64_t cols, L layout,
                 bool expert = false) {
    out.push_back({module, name, rows, cols, layout, ParamInit::Weight, 0,
                   false, expert});
  };
  add(p + kMoeRouter, H, e.experts, L::Replicated);
  for (int64_t j = 0; j < e.experts; ++j) {
    add(p + moeExpertName(j, "gate"), H, e.expertFfn, L::ColumnParallel, true);
    add(p + moeExpertName(j, "up"), H, e.expertFfn, L::ColumnParallel, true);
    add(p + moeExpertName(j, "down"), e.expertFfn, H, L::RowParallel, true);
  }
  if (e.sharedFfn > 0) {
    add(p + moeSharedName("gate"), H, e.sharedFfn, L::ColumnParallel);
    add(p + moeSharedName("up"), H, e.sharedFfn, L::ColumnParallel);
    add(p + moeSharedName("down"), e.sharedFfn, H, L::RowParallel);
    if (e.sharedGate)
      add(p + kMoeSharedGate, H, 1, L::Replicated);
  }
}

std::vector<std::string> moeMlpNames(const MoeConfig &moe) {
  std::vector<ParamSpec> specs;
  declareMoeMlp(moe, 1, "", "", specs);
  std::vector<std::string> names;
  for (const ParamSpec &spec : specs)
    names.push_back(spec.local);
  return names;
}

//===----------------------------------------------------------------------===//
// The registry: one line per built-in family.
//===----------------------------------------------------------------------===//

std::unique_ptr<ModuleFamily> makeLlamaFamily();
std::unique_ptr<ModuleFamily> makeQwen2Family();
std::unique_ptr<ModuleFamily> makeQwen2MoeFamily();
std::unique_ptr<ModuleFamily> makeQwen3Family();
std::unique_ptr<ModuleFamily> makeQwen3MoeFamily();
std::unique_ptr<ModuleFamily> makeMixtralFamily();
std::unique_ptr<ModuleFamily> makeClipFamily();
std::unique_ptr<ModuleFamily> makeSiglipFamily();
std::unique_ptr<ModuleFamily> makeVitFamily();

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<ModuleFamily>> families;
  /// The built-in families, which inferFamily chooses from in this order
  /// (the fallback of each kind last); fixed once made, read unlocked.
  std::vector<const ModuleFamily *> builtIn;

  Registry() {
    families.push_back(makeLlamaFamily());
    families.push_back(makeQwen2Family());
    families.push_back(makeMixtralFamily());
    families.push_back(makeQwen2MoeFamily());
    families.push_back(makeQwen3Family());
    families.push_back(makeQwen3MoeFamily());
    families.push_back(makeClipFamily());
    families.push_back(makeSiglipFamily());
    families.push_back(makeVitFamily());
    for (const std::unique_ptr<ModuleFamily> &family : families)
      builtIn.push_back(family.get());
  }
};

Registry &registry() {
  static Registry instance;
  return instance;
}

} // namespace

const ModuleFamily *findFamily(std::string_view name) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const std::unique_ptr<ModuleFamily> &family : r.families)
    if (family->name() == name)
      return family.get();
  return nullptr;
}

std::vector<const ModuleFamily *> families() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<const ModuleFamily *> out;
  for (const std::unique_ptr<ModuleFamily> &family : r.families)
    out.push_back(family.get());
  return out;
}

const ModuleFamily &inferFamily(const ModuleArch &arch) {
  const ModuleFamily *fallback = nullptr;
  for (const ModuleFamily *built : registry().builtIn) {
    const ModuleFamily &family = *built;
    if (family.kind() != arch.kind)
      continue;
    if (!family.structureProblem(arch))
      return family;
    fallback = &family;
  }
  return *fallback; // every kind has a built-in family
}

bool registerFamily(std::unique_ptr<ModuleFamily> family) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const std::unique_ptr<ModuleFamily> &other : r.families)
    if (other->name() == family->name())
      return false;
  r.families.push_back(std::move(family));
  return true;
}

const ModuleFamily &ModuleArch::family() const {
  return namedFamily ? *namedFamily : inferFamily(*this);
}

} // namespace mimo
