//===- AssignGrids.cpp - mimo-assign-grids --------------------------------===//
//
// Fixes the rank layout of every mimo.model and checks each module grid
// against it (docs/model-json.md, docs/data.md, docs/plan.md). Diagnostics are
// located at the offending model.json field and carry notes at the other side.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/Locations.h"
#include "runtime/config/Grid.h"
#include "runtime/config/Parameters.h"
#include "runtime/plan/ShapeRules.h"
#include "runtime/plan/Topology.h"

#include "mlir/IR/Builders.h"

namespace mimo {

#define GEN_PASS_DEF_ASSIGNGRIDS
#include "passes/Passes.h.inc"

namespace {

using mlir::InFlightDiagnostic;
using mlir::Location;

/// One module (encoder or language) with the sizes the checks need.
struct ModuleView {
  mlir::Operation *op;
  llvm::StringRef name;
  bool isEncoder;
  mutable ir::GridOp grid;
  ir::ParallelAttr parallel;
  int64_t numHeads, ffnHiddenSize, numLayers, vocabSize;

  Location field(llvm::StringRef name) const {
    return ir::fieldLoc(grid.getLoc(), name);
  }
  std::string describe() const {
    return describeModule(name.str(), !isEncoder);
  }
  RankSpan span() const {
    mimo::Grid g = parallel.getGrid();
    return RankSpan{g.rankOffset(), g.endRank()};
  }
};

std::string formatSpan(RankSpan span) {
  return "[" + std::to_string(span.begin) + ", " + std::to_string(span.end) +
         ")";
}

class AssignGridsPass : public impl::AssignGridsBase<AssignGridsPass> {
public:
  void runOnOperation() override {
    bool ok = true;
    getOperation().walk([&](ir::ModelOp model) {
      if (mlir::failed(assign(model)))
        ok = false;
    });
    if (!ok)
      signalPassFailure();
  }

private:
  bool ok = true;

  InFlightDiagnostic error(Location loc) {
    ok = false;
    return mlir::emitError(loc);
  }

  mlir::LogicalResult assign(ir::ModelOp model);
  void checkModule(const ModuleView &module, ir::MicrobatchOp batch);
  void checkDivides(const ModuleView &module, llvm::StringRef quantity,
                    int64_t value, llvm::StringRef dim, int64_t size);
  std::optional<LayoutResult> checkLayout(ir::ModelOp model,
                                          llvm::ArrayRef<ModuleView> modules);
};

void AssignGridsPass::checkDivides(const ModuleView &module,
                                   llvm::StringRef quantity, int64_t value,
                                   llvm::StringRef dim, int64_t size) {
  std::string problem =
      divisibleRule(module.describe(), quantity.str(), value, dim.str(), size);
  if (!problem.empty())
    error(module.field(dim)) << problem;
}

void AssignGridsPass::checkModule(const ModuleView &module,
                                  ir::MicrobatchOp batch) {
  ir::ParallelAttr p = module.parallel;
  if (module.isEncoder)
    if (std::string problem = encoderCpRule(module.describe(), p.getCp());
        !problem.empty())
      error(module.field("cp")) << problem;
  checkDivides(module, "num_heads", module.numHeads, "tp", p.getTp());
  checkDivides(module, "ffn_hidden_size", module.ffnHiddenSize, "tp",
               p.getTp());
  if (!module.isEncoder)
    checkDivides(module, "vocab_size", module.vocabSize, "tp", p.getTp());
  if (auto split = module.grid.getPipelineLayers()) {
    std::vector<int64_t> counts(split->begin(), split->end());
    std::string problem =
        pipelineLayersRule(module.describe(), counts, module.numLayers,
                           module.numLayers, p.getPp());
    if (!problem.empty())
      error(ir::fieldLoc(module.op->getLoc(), "pipeline_layers")) << problem;
  } else {
    checkDivides(module, "num_layers", module.numLayers, "pp", p.getPp());
  }

  int64_t microBatchSize = static_cast<int64_t>(batch.getMicroBatchSize());
  if (std::string problem =
          microBatchRule(module.describe(), microBatchSize, p.getDp());
      !problem.empty()) {
    InFlightDiagnostic diag = error(module.field("dp")) << problem;
    diag.attachNote(ir::fieldLoc(batch.getLoc(), "micro_batch_size"))
        << "micro_batch_size is set here";
  }
}

/// Classifies the spans; reports overlaps, gaps and a world_size mismatch.
std::optional<LayoutResult>
AssignGridsPass::checkLayout(ir::ModelOp model,
                             llvm::ArrayRef<ModuleView> modules) {
  std::vector<RankSpan> spans;
  for (const ModuleView &module : modules)
    spans.push_back(module.span());
  LayoutResult layout = classifyLayout(spans);
  if (layout.problem) {
    const LayoutProblem &problem = *layout.problem;
    const ModuleView &second = modules[problem.second];
    if (problem.kind == LayoutProblem::Kind::Overlap) {
      const ModuleView &first = modules[*problem.first];
      InFlightDiagnostic diag =
          error(second.field("rank_offset"))
          << second.describe() << " spans ranks "
          << formatSpan(spans[problem.second]) << ", which overlaps "
          << first.describe() << " at ranks "
          << formatSpan(spans[*problem.first])
          << "; module spans must be all equal (colocated) or pairwise "
             "disjoint (non-colocated): set rank_offset of '"
          << second.name << "' to " << spans[*problem.first].end
          << " or make every module span the same ranks";
      diag.attachNote(first.field("rank_offset"))
          << first.describe() << " spans ranks "
          << formatSpan(spans[*problem.first]);
    } else if (problem.first) {
      const ModuleView &first = modules[*problem.first];
      InFlightDiagnostic diag =
          error(second.field("rank_offset"))
          << "no module holds ranks "
          << formatSpan({problem.gapBegin, problem.gapEnd}) << ": "
          << first.describe() << " ends at rank " << problem.gapBegin << " and "
          << second.describe() << " starts at rank " << problem.gapEnd
          << "; set rank_offset of '" << second.name << "' to "
          << problem.gapBegin;
      diag.attachNote(first.field("rank_offset"))
          << first.describe() << " spans ranks "
          << formatSpan(spans[*problem.first]);
    } else {
      error(second.field("rank_offset"))
          << "no module holds ranks "
          << formatSpan({problem.gapBegin, problem.gapEnd})
          << ": the lowest rank_offset is " << problem.gapEnd << " ("
          << second.describe() << "); ranks must start at 0, so set its "
          << "rank_offset to 0";
    }
    return std::nullopt;
  }
  if (auto declared = model.getWorldSize()) {
    int64_t worldSize = static_cast<int64_t>(*declared);
    if (worldSize != layout.worldSize) {
      error(ir::fieldLoc(model.getLoc(), "world_size"))
          << "world_size " << worldSize << " does not match the "
          << layout.worldSize << " ranks the modules span ([0, "
          << layout.worldSize << ")); set world_size to " << layout.worldSize
          << " or remove it";
      return std::nullopt;
    }
  }
  return layout;
}

mlir::LogicalResult AssignGridsPass::assign(ir::ModelOp model) {
  ok = true;
  ir::MicrobatchOp batch = model.getMicrobatch();
  if (!batch || !model.getLanguage())
    return model.emitOpError("needs a mimo.microbatch and a mimo.language");

  std::vector<ModuleView> modules;
  std::optional<size_t> languageIndex;
  for (mlir::Operation &op : model.getBody().front()) {
    if (auto encoder = llvm::dyn_cast<ir::EncoderOp>(op)) {
      ir::EncoderArchAttr arch = encoder.getArch();
      modules.push_back({&op, encoder.getSymName(), true, encoder.getGridOp(),
                         nullptr, arch.getNumHeads(), arch.getFfnHiddenSize(),
                         arch.getNumLayers(), 0});
    } else if (auto language = llvm::dyn_cast<ir::LanguageOp>(op)) {
      ir::LanguageArchAttr arch = language.getArch();
      languageIndex = modules.size();
      modules.push_back({&op, language.getSymName(), false,
                         language.getGridOp(), nullptr, arch.getNumHeads(),
                         arch.getFfnHiddenSize(), arch.getNumLayers(),
                         arch.getVocabSize()});
    } else {
      continue;
    }
    if (!modules.back().grid)
      return op.emitOpError("grid operand must be defined by mimo.grid");
    modules.back().parallel = modules.back().grid.getParallel();
  }

  for (const ModuleView &module : modules)
    checkModule(module, batch);
  const ModuleView &language = modules[*languageIndex];
  // Checked here too, so that one run reports every error of a model.
  if (mlir::failed(
          checkSequenceSharding(language.grid, batch, language.describe())))
    ok = false;

  std::optional<LayoutResult> layout = checkLayout(model, modules);
  if (layout) {
    bool colocated = layout->layout == Layout::Colocated;
    for (const ModuleView &module : modules) {
      if (!module.isEncoder)
        continue;
      if (colocated && module.parallel.getPp() != 1)
        error(module.field("pp"))
            << module.describe() << " must have pp 1 in a colocated layout "
            << "(it runs once per step before the language pipeline), found pp "
            << module.parallel.getPp() << "; set pp to 1";
      int64_t sourceLanes = module.parallel.getDp();
      int64_t destinationLanes = language.parallel.getDp();
      if (!relateLanes(sourceLanes, destinationLanes, colocated)) {
        InFlightDiagnostic diag =
            error(module.field("dp"))
            << "data-parallel lanes of " << module.describe() << " (dp "
            << sourceLanes << ") and " << language.describe() << " (dp "
            << destinationLanes
            << ") must divide one another for the bridge between them; use dp "
               "sizes where one is a multiple of the other";
        diag.attachNote(language.field("dp"))
            << language.describe() << " has dp " << destinationLanes;
      }
    }
  }
  if (!ok || !layout)
    return mlir::failure();

  mlir::Builder builder(model.getContext());
  model.setLayout(layout->layout == Layout::Colocated
                      ? ir::LayoutKind::Colocated
                      : ir::LayoutKind::NonColocated);
  model.setWorldSizeAttr(builder.getI64IntegerAttr(layout->worldSize));
  for (const ModuleView &module : modules) {
    RankSpan span = module.span();
    module.grid.setSpanAttr(
        builder.getDenseI64ArrayAttr({span.begin, span.end}));
  }
  return mlir::success();
}

} // namespace
} // namespace mimo
