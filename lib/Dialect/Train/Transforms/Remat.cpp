//===- Remat.cpp - train-remat and train-materialize-remat ----------------===//

#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Dialect/Train/Transforms/StepPhases.h"
#include "trainmem/Support/ByteSize.h"

#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Analysis/MemoryPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <array>
#include <climits>
#include <map>
#include <optional>

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-remat"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINREMATPASS
#define GEN_PASS_DEF_TRAINMATERIALIZEREMATPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

bool isBackwardOp(Operation *op) {
  for (auto block = op->getParentOfType<BlockOp>(); block;
       block = block->getParentOfType<BlockOp>())
    if (block.getBackward())
      return true;
  return false;
}

/// The outermost train.remat that contains `op`, if any.
RematOp outermostRemat(Operation *op) {
  RematOp outermost;
  for (auto remat = op->getParentOfType<RematOp>(); remat;
       remat = remat->getParentOfType<RematOp>())
    outermost = remat;
  return outermost;
}

/// The forward blocks of each layer, in program order.
struct Layer {
  BlockOp attention, mlp;
};

std::map<int64_t, Layer> collectLayers(func::FuncOp func) {
  std::map<int64_t, Layer> layers;
  for (Operation &op : func.front()) {
    auto block = dyn_cast<BlockOp>(op);
    if (!block || block.getBackward() || !block.getLayerAttr())
      continue;
    Layer &layer = layers[block.getLayerAttr().getInt()];
    if (block.getKind() == BlockKind::attention)
      layer.attention = block;
    else if (block.getKind() == BlockKind::mlp)
      layer.mlp = block;
  }
  return layers;
}

/// Top-level ops from `first` to `last` inclusive.
SmallVector<Operation *> opRange(Operation *first, Operation *last) {
  SmallVector<Operation *> ops;
  for (Operation *op = first; op; op = op->getNextNode()) {
    ops.push_back(op);
    if (op == last)
      break;
  }
  return ops;
}

/// The attention core of an attention block: QKᵀ, scale, softmax, dropout
/// and ·V, as the consecutive ops from the QKᵀ matmul to the ·V matmul.
FailureOr<SmallVector<Operation *>> attentionCore(BlockOp block) {
  SoftmaxOp softmax;
  block.getBody().walk([&](SoftmaxOp op) { softmax = op; });
  if (!softmax)
    return failure();
  Operation *first = softmax.getInput().getDefiningOp();
  while (first && !isa<MatmulOp>(first) && first->getNumOperands() == 1)
    first = first->getOperand(0).getDefiningOp();
  Operation *last = softmax;
  while (last && !isa<MatmulOp>(last)) {
    // The block's yield (what the backward keeps, or the probabilities
    // leaving the block for a ·V elsewhere) is not a step of the core.
    Operation *next = nullptr;
    for (Operation *user : last->getResult(0).getUsers())
      if (user->getBlock() == softmax->getBlock() && user->getNumResults())
        next = user;
    last = next;
  }
  if (!first || !isa<MatmulOp>(first) || !last ||
      first->getBlock() != last->getBlock() || !first->isBeforeInBlock(last))
    return failure();
  return opRange(first, last);
}

LogicalResult parseRange(StringRef text, int64_t &begin, int64_t &end) {
  begin = 0;
  end = INT64_MAX;
  if (text.empty())
    return success();
  auto [a, b] = text.split(':');
  if ((!a.empty() && a.getAsInteger(10, begin)) ||
      (!b.empty() && b.getAsInteger(10, end)) || begin < 0 || end <= begin ||
      !text.contains(':'))
    return failure();
  return success();
}

/// What to recompute of one layer.
enum class Choice { None, Selective, Attention, MLP, Full };
constexpr Choice kChoices[] = {Choice::None, Choice::Selective,
                               Choice::Attention, Choice::MLP, Choice::Full};

StringRef stringifyChoice(Choice choice) {
  switch (choice) {
  case Choice::None:
    return "none";
  case Choice::Selective:
    return "selective";
  case Choice::Attention:
    return "attention";
  case Choice::MLP:
    return "mlp";
  case Choice::Full:
    return "full";
  }
  llvm_unreachable("unknown choice");
}

std::optional<Choice> parseChoice(StringRef text) {
  for (Choice choice : kChoices)
    if (stringifyChoice(choice) == text)
      return choice;
  return std::nullopt;
}

/// The top-level ops of a whole layer: its attention block to its MLP block.
SmallVector<Operation *> wholeLayer(Layer layer) {
  Operation *first = layer.attention ? layer.attention.getOperation()
                                     : layer.mlp.getOperation();
  Operation *last =
      layer.mlp ? layer.mlp.getOperation() : layer.attention.getOperation();
  return opRange(first, last);
}

/// Wraps what `choice` recomputes of `layer` in a train.remat; returns the
/// number of regions made, or failure after a diagnostic. A selective
/// choice on a fused attention makes none (it keeps no score tensor); the
/// layer is added to `fused`, for the caller to say.
FailureOr<unsigned> applyChoice(int64_t index, Layer layer, Choice choice,
                                SmallVectorImpl<int64_t> *fused = nullptr) {
  switch (choice) {
  case Choice::None:
    return 0u;
  case Choice::Full:
    wrapInRemat(wholeLayer(layer));
    return 1u;
  case Choice::Attention:
  case Choice::MLP: {
    BlockOp block = choice == Choice::Attention ? layer.attention : layer.mlp;
    if (!block)
      return 0u;
    wrapInRemat({block});
    return 1u;
  }
  case Choice::Selective: {
    if (!layer.attention)
      return 0u;
    // A fused attention keeps no score tensor: selective recompute has
    // nothing to do there.
    if (layer.attention
            .walk([](AttentionOp) { return WalkResult::interrupt(); })
            .wasInterrupted()) {
      if (fused)
        fused->push_back(index);
      return 0u;
    }
    FailureOr<SmallVector<Operation *>> core = attentionCore(layer.attention);
    if (failed(core)) {
      layer.attention.emitError("train-remat: the attention block of layer ")
          << index << " has no attention core (matmul, softmax, matmul)";
      return failure();
    }
    wrapInRemat(*core);
    return 1u;
  }
  }
  llvm_unreachable("unknown choice");
}

/// What the budget planner knows of a step: per layer and choice, the bytes
/// the layer keeps for its backward, the most bytes live inside the layer
/// apart from what other layers keep, and its recompute FLOPs; and for the
/// points outside layers, the bytes live there apart from the layers' saved
/// activations, by how many layers (a prefix) have them live.
struct BudgetModel {
  int64_t numLayers = 0;
  // [layer][choice]
  std::vector<std::array<uint64_t, 5>> saved, working, flops;
  // For k = 0..numLayers: the most bytes at points outside layers where
  // layers 0..k-1 hold their saved activations.
  std::vector<uint64_t> outside;
  uint64_t states = 0; // weights + gradients + optimizer state
  // The partitioning measured (train-zero in measure-after): one rank's.
  int64_t ranks = 1, stage = -1;
};

/// The position in the measured layers of the layer `op` is in (or is), if
/// any.
std::optional<size_t>
measuredLayerOf(Operation *op,
                const llvm::DenseMap<int64_t, size_t> &position) {
  auto lookup = [&](BlockOp block) -> std::optional<size_t> {
    if (IntegerAttr layer = block.getLayerAttr()) {
      auto it = position.find(layer.getInt());
      if (it != position.end())
        return it->second;
    }
    return std::nullopt;
  };
  for (auto block = op->getParentOfType<BlockOp>(); block;
       block = block->getParentOfType<BlockOp>())
    if (std::optional<size_t> layer = lookup(block))
      return layer;
  if (auto block = dyn_cast<BlockOp>(op))
    return lookup(block);
  return std::nullopt;
}

/// Records in `model`'s column `c` what `memory` (the step with every
/// measured layer at one choice) says: each layer's saved bytes, its
/// working bytes apart from what other layers keep, its recompute FLOPs,
/// and the bytes at points outside layers.
void recordMeasurement(BudgetModel &model, const FunctionMemory &memory,
                       const llvm::DenseMap<int64_t, size_t> &position,
                       unsigned c) {
  size_t numLayers = static_cast<size_t>(model.numLayers);
  std::vector<uint64_t> saved(numLayers, 0);
  for (const LayerActivations &layer : memory.getLayers())
    if (auto it = position.find(layer.index); it != position.end())
      saved[it->second] = layer.total();
  // A pipeline stage (train-pipeline's, unrolled): each layer's copies,
  // one per micro-batch, are live only as many at once as the schedule
  // keeps in flight (the units live at the stage's peak).
  if (auto stage = memory.getFunction()->getAttrOfType<PipelineStageAttr>(
          kPipelineStageAttrName)) {
    uint64_t copies =
        static_cast<uint64_t>(std::max<int64_t>(1, stage.getMicroBatches()));
    uint64_t live = std::max<uint64_t>(
        1, memory.getUnitsLiveAt(memory.getPeakPoint()).size());
    for (uint64_t &bytes : saved)
      bytes = bytes / copies * std::min(live, copies);
  }
  for (size_t i = 0; i < numLayers; ++i)
    model.saved[i][c] = saved[i];

  // The span of each layer in program order: first forward point to last
  // backward point.
  std::vector<unsigned> firstPoint(numLayers, UINT_MAX),
      lastPoint(numLayers, 0);
  for (Operation *op : memory.getSchedule())
    if (std::optional<size_t> layer = measuredLayerOf(op, position)) {
      unsigned point = memory.getPoint(op);
      firstPoint[*layer] = std::min(firstPoint[*layer], point);
      lastPoint[*layer] = std::max(lastPoint[*layer], point);
    }
  for (Operation *op : memory.getSchedule()) {
    unsigned point = memory.getPoint(op);
    uint64_t live = memory.getLiveBytes()[point];
    std::optional<size_t> own = measuredLayerOf(op, position);
    // Layers whose saved activations are live here, apart from its own.
    uint64_t others = 0;
    size_t prefix = 0;
    for (size_t j = 0; j < numLayers; ++j) {
      if (own && j == *own)
        continue;
      if (firstPoint[j] < point && point < lastPoint[j]) {
        others = addCount(others, saved[j]);
        prefix = std::max(prefix, j + 1);
      }
    }
    // In an unrolled micro-batch loop a layer's span runs from the first
    // copy's forward to the last copy's backward, and its saved bytes are
    // every copy's: between copies they are not all live, and where the
    // device holds little else (the optimizer state offloaded) they can
    // exceed what is. Nothing apart is then left, not a wrapped-around
    // count; the chosen plan's arena is measured whole (measureArena).
    uint64_t apart = live > others ? live - others : 0;
    if (own)
      model.working[*own][c] = std::max(model.working[*own][c], apart);
    else
      model.outside[prefix] = std::max(model.outside[prefix], apart);
    if (own && op->hasAttr(kRecomputeAttrName))
      if (auto cost = dyn_cast<CostOpInterface>(op))
        model.flops[*own][c] = addCount(model.flops[*own][c], cost.getFlops());
  }
  const CategoryBytes &totals = memory.getTotals();
  model.states =
      addCount(addCount(totals[static_cast<unsigned>(MemoryCategory::Weights)],
                        totals[static_cast<unsigned>(MemoryCategory::Gradients)]),
               totals[static_cast<unsigned>(MemoryCategory::Optimizer)]);
}

/// The passes every step runs after train-remat (train-step's), measured
/// when a budget is given no measure-after.
constexpr llvm::StringLiteral kEveryStepAfterRemat =
    "train-materialize-remat,train-materialize-layouts";

/// Runs a pipeline on an operation nested under the pass's (the pass's
/// Pass::runPipeline).
using PipelineRunner =
    function_ref<LogicalResult(OpPassManager &, Operation *)>;

/// Runs the measure-after pipeline on `copy`, a copy of the module; returns
/// the copy's step. The copy is nested in the step's module while the
/// pipeline runs, so that it runs as a dynamic pipeline of this pass (the
/// pass manager's instrumentation, timing and crash reproducers cover it).
FailureOr<func::FuncOp> runMeasureAfter(func::FuncOp func, ModuleOp copy,
                                        StringRef after,
                                        PipelineRunner runPipeline) {
  OpPassManager pm(ModuleOp::getOperationName());
  std::string message;
  llvm::raw_string_ostream errors(message);
  if (failed(parsePassPipeline(after, pm, errors)))
    return func.emitError("train-remat: bad measure-after pipeline '")
           << after << "': " << StringRef(message).trim();
  auto module = func->getParentOfType<ModuleOp>();
  module.getBody()->push_back(copy);
  LogicalResult ran = runPipeline(pm, copy);
  copy->remove();
  if (failed(ran))
    return func.emitError("train-remat: the budget's measure-after "
                          "passes failed on the step (see above)");
  auto step = copy.lookupSymbol<func::FuncOp>(func.getSymName());
  if (step)
    return step;
  // Cut into pipeline stages: the budget is the one stage's the passes
  // keep (train-pipeline select-stage=k marks it the step; trainmem-run
  // builds each rank's so), its layers measured, the others' absent.
  for (auto stage : copy.getOps<func::FuncOp>())
    if (stage->hasAttr(kPipelineStageAttrName) && stage->hasAttr(kStepAttrName))
      return stage;
  if (llvm::any_of(copy.getOps<func::FuncOp>(), [](func::FuncOp other) {
        return other->hasAttr(kPipelineStageAttrName);
      }))
    return func.emitError("train-remat: the measure-after passes cut @")
           << func.getSymName()
           << " into pipeline stages: a budget is one stage's, give "
              "train-pipeline select-stage=k (trainmem-run --pipeline gives "
              "each rank its stage's)";
  return func.emitError("train-remat: no @")
         << func.getSymName() << " after the measure-after passes";
}

/// Measures `func` with every layer at one choice, for each choice. Each
/// layer's numbers depend only on its own choice: what layers before it
/// keep is live at all its points, what layers after it keep at none.
/// With `after` (a pass pipeline: the passes that follow) each copy runs
/// it once its recompute is materialized, and is measured as it will run
/// (per rank under train-zero; the whole module is copied for it, as
/// train-zero adds its grid).
FailureOr<BudgetModel> measureBudgetModel(func::FuncOp func,
                                          ArrayRef<int64_t> layerIndices,
                                          StringRef after,
                                          PipelineRunner runPipeline) {
  BudgetModel model;
  model.numLayers = static_cast<int64_t>(layerIndices.size());
  model.saved.assign(layerIndices.size(), {});
  model.working.assign(layerIndices.size(), {});
  model.flops.assign(layerIndices.size(), {});
  model.outside.assign(layerIndices.size() + 1, 0);
  llvm::DenseMap<int64_t, size_t> position;
  for (auto [i, index] : llvm::enumerate(layerIndices))
    position[index] = i;

  // The copies measured say nothing to the user: their remarks (a fused
  // attention selective recompute leaves as it is, once per copy) and
  // warnings are the chosen plan's to give; errors go through.
  ScopedDiagnosticHandler quiet(func.getContext(), [](Diagnostic &d) {
    return success(d.getSeverity() != DiagnosticSeverity::Error);
  });
  for (Choice choice : kChoices) {
    OwningOpRef<func::FuncOp> funcCopy;
    OwningOpRef<ModuleOp> moduleCopy;
    func::FuncOp copy;
    if (after.empty()) {
      funcCopy = func.clone();
      copy = *funcCopy;
    } else {
      moduleCopy = cast<ModuleOp>(func->getParentOp()->clone());
      copy = moduleCopy->lookupSymbol<func::FuncOp>(func.getSymName());
    }
    unsigned regions = 0;
    for (auto &[index, layer] : collectLayers(copy)) {
      if (!position.count(index))
        continue;
      FailureOr<unsigned> made = applyChoice(index, layer, choice);
      if (failed(made))
        return failure();
      regions += *made;
    }
    // A choice that recomputes nothing (selective on fused attention) is
    // the step without recompute, measured first: the same numbers.
    unsigned c = static_cast<unsigned>(choice);
    if (regions == 0 && choice != Choice::None) {
      unsigned none = static_cast<unsigned>(Choice::None);
      for (size_t i = 0; i < layerIndices.size(); ++i) {
        model.saved[i][c] = model.saved[i][none];
        model.working[i][c] = model.working[i][none];
        model.flops[i][c] = model.flops[i][none];
      }
      continue;
    }
    // The passes after, where given, materialize the recompute where the
    // step's pipeline does (train-materialize-remat among them); what they
    // leave is materialized here.
    if (moduleCopy) {
      FailureOr<func::FuncOp> step =
          runMeasureAfter(func, *moduleCopy, after, runPipeline);
      if (failed(step))
        return failure();
      copy = *step;
    }
    if (failed(materializeRemat(copy)))
      return failure();
    // A count past 64 bits (a vocabulary of 10^17) is refused where it
    // arises, not summed into a plan.
    FunctionMemory memory(copy);
    if (failed(memory.checkCounts("train-remat")))
      return failure();
    // One rank's, under train-zero.
    if (auto zero = copy->getAttrOfType<ZeroAttr>(kZeroAttrName))
      model.ranks = zero.getRanks(), model.stage = zero.getStage();
    recordMeasurement(model, memory, position, c);
  }
  return model;
}

/// The arena the step's memory plan needs with each layer of
/// `layerIndices` at its choice: measured on a copy of the module as
/// measureBudgetModel measures (the passes `after`, or without them those
/// every step runs after train-remat; the recompute materialized), a
/// micro-batch loop planned as train-plan-arena plans it.
FailureOr<uint64_t> measureArena(func::FuncOp func,
                                 ArrayRef<int64_t> layerIndices,
                                 ArrayRef<Choice> choices, StringRef after,
                                 PipelineRunner runPipeline) {
  ScopedDiagnosticHandler quiet(func.getContext(), [](Diagnostic &d) {
    return success(d.getSeverity() != DiagnosticSeverity::Error);
  });
  llvm::DenseMap<int64_t, Choice> choiceOf;
  for (auto [index, choice] : llvm::zip(layerIndices, choices))
    choiceOf[index] = choice;
  OwningOpRef<ModuleOp> moduleCopy =
      cast<ModuleOp>(func->getParentOp()->clone());
  func::FuncOp copy = moduleCopy->lookupSymbol<func::FuncOp>(func.getSymName());
  for (auto &[index, layer] : collectLayers(copy)) {
    auto choice = choiceOf.find(index);
    if (choice != choiceOf.end() &&
        failed(applyChoice(index, layer, choice->second)))
      return failure();
  }
  // Without passes after, the ones every step runs after train-remat.
  FailureOr<func::FuncOp> step = runMeasureAfter(
      func, *moduleCopy,
      after.empty() ? StringRef(kEveryStepAfterRemat) : after, runPipeline);
  if (failed(step))
    return failure();
  copy = *step;
  if (failed(materializeRemat(copy)))
    return failure();
  castPartsToSums(copy);
  FunctionMemory memory(copy);
  if (failed(memory.checkCounts("train-remat")))
    return failure();
  return std::max(MemoryPlan(memory).getArenaBytes(), memory.getPeakBytes());
}

/// Least recompute FLOPs whose predicted peak fits `budget`: a dynamic
/// program over the chain of layers, keeping per layer the Pareto front of
/// (bytes kept by the layers so far, FLOPs so far). The peak of a plan is
/// the largest, over layers i, of (bytes kept by layers before i + layer
/// i's working bytes) and over the points outside layers of (their bytes +
/// what the layers before them keep).
/// Plans made for a budget lowered by their arena's excess (and below
/// their own peak) before the budget is refused.
constexpr int kArenaAttempts = 8;

struct Plan {
  std::vector<Choice> choices;
  uint64_t flops = 0;
  uint64_t peak = 0;
};

std::optional<Plan> planForBudget(const BudgetModel &model, uint64_t budget) {
  struct State {
    uint64_t kept, flops, peak;
    std::vector<Choice> choices;
  };
  std::vector<State> front = {{0, 0, model.outside[0], {}}};
  if (model.outside[0] > budget)
    return std::nullopt;
  for (int64_t i = 0; i < model.numLayers; ++i) {
    std::vector<State> next;
    for (const State &state : front)
      for (Choice choice : kChoices) {
        unsigned c = static_cast<unsigned>(choice);
        // Saturating sums: a plan past 64 bits is past any budget.
        uint64_t inside = addCount(state.kept, model.working[i][c]);
        uint64_t kept = addCount(state.kept, model.saved[i][c]);
        uint64_t after = addCount(kept, model.outside[i + 1]);
        uint64_t peak = std::max({state.peak, inside, after});
        if (peak > budget)
          continue;
        State extended{kept, addCount(state.flops, model.flops[i][c]), peak,
                       state.choices};
        extended.choices.push_back(choice);
        next.push_back(std::move(extended));
      }
    // Keep the states no other beats in both bytes kept and FLOPs.
    std::sort(next.begin(), next.end(), [](const State &a, const State &b) {
      return a.kept != b.kept ? a.kept < b.kept : a.flops < b.flops;
    });
    front.clear();
    for (State &state : next)
      if (front.empty() || state.flops < front.back().flops)
        front.push_back(std::move(state));
    if (front.empty())
      return std::nullopt;
  }
  const State *best = &front.front();
  for (const State &state : front)
    if (state.flops < best->flops ||
        (state.flops == best->flops && state.peak < best->peak))
      best = &state;
  return Plan{best->choices, best->flops, best->peak};
}

/// The smallest peak any plan reaches (budget unbounded, peak minimized).
uint64_t smallestPeak(const BudgetModel &model) {
  // Minimizing the peak is the same program with FLOPs replaced by the
  // running peak; bisect on the budget instead, which reuses it.
  uint64_t low = 0, high = UINT64_MAX / 2;
  std::optional<Plan> any = planForBudget(model, high);
  if (!any)
    return high;
  high = any->peak;
  while (low < high) {
    uint64_t mid = low + (high - low) / 2;
    if (planForBudget(model, mid))
      high = mid;
    else
      low = mid + 1;
  }
  return high;
}

/// A layer train-remat chooses for: its index and its ops.
using SelectedLayer = std::pair<int64_t, Layer>;

struct TrainRematPass : public impl::TrainRematPassBase<TrainRematPass> {
  using Base::Base;

  void runOnOperation() override;
  /// The dialects of the passes a budget runs (its measure-after pipeline,
  /// a dynamic pipeline of this pass, which cannot load dialects itself).
  void getDependentDialects(DialectRegistry &registry) const override {
    Base::getDependentDialects(registry);
    OpPassManager after(ModuleOp::getOperationName());
    if (succeeded(parsePassPipeline(measureAfter.empty()
                                        ? StringRef(kEveryStepAfterRemat)
                                        : StringRef(measureAfter),
                                    after, llvm::nulls())))
      after.getDependentDialects(registry);
  }
  /// Pass::runPipeline, for the budget's measurements.
  auto runner() {
    return [this](OpPassManager &pm, Operation *op) {
      return runPipeline(pm, op);
    };
  }
  LogicalResult fail(const Twine &message) {
    emitError(getOperation().getLoc(), "train-remat: ") << message;
    return failure();
  }
  /// The budget option's bytes (0 without policy=budget), the other options
  /// checked against the policy.
  FailureOr<uint64_t> checkOptions();
  /// The layers of `func` in [begin, end) (the layers option's range).
  FailureOr<SmallVector<SelectedLayer>>
  selectLayers(func::FuncOp func, int64_t begin, int64_t end);
  LogicalResult apply(ArrayRef<SelectedLayer> selected,
                      ArrayRef<Choice> choices);
  LogicalResult applyCustom(ArrayRef<SelectedLayer> selected);
  LogicalResult applyBudget(func::FuncOp func, ArrayRef<SelectedLayer> selected,
                            uint64_t budgetBytes);
  void wrapLayers(ArrayRef<SelectedLayer> selected);
};

FailureOr<uint64_t> TrainRematPass::checkOptions() {
  // The budget: bytes, or a size with a unit (as trainmem-plan reads
  // --memory).
  uint64_t budgetBytes = 0;
  if (policy == RematPolicy::budget) {
    if (budget.empty())
      return fail("policy=budget needs budget=SIZE (bytes, or with a "
                  "unit: 6GiB, 8GB, 512MiB)");
    std::optional<uint64_t> parsed = trainmem::parseByteSize(budget);
    if (!parsed)
      return fail("budget '" + budget +
                  "' is not a size from 1 byte to below 2^63 bytes "
                  "(bytes, or with a unit: 6GiB, 8GB, 512MiB)");
    budgetBytes = *parsed;
  } else if (!budget.empty()) {
    return fail("budget= is for policy=budget");
  }
  if (policy != RematPolicy::budget && !measureAfter.empty())
    return fail("measure-after= is for policy=budget");
  // The budget weighs recompute against activations kept on the device.
  if (policy == RematPolicy::budget &&
      StringRef(measureAfter).contains("train-offload-activations"))
    return fail("policy=budget chooses recompute for activations kept on "
                "the device, which train-offload-activations (in "
                "measure-after) moves to the host: use policy=full or "
                "selective with it, or the budget without it");
  if (policy == RematPolicy::every && every < 1)
    return fail("every must be >= 1, got " + Twine(every));
  return budgetBytes;
}

FailureOr<SmallVector<SelectedLayer>>
TrainRematPass::selectLayers(func::FuncOp func, int64_t begin, int64_t end) {
  SmallVector<SelectedLayer> selected;
  for (auto &[index, layer] : collectLayers(func))
    if (index >= begin && index < end)
      selected.push_back({index, layer});
  if (selected.empty())
    return fail("@" + func.getSymName() + " has no transformer layers" +
                (layers.empty() ? "" : " in range " + layers) +
                " (forward train.block attention/mlp with a layer index)");
  return selected;
}

/// Each selected layer recomputed as its choice says.
LogicalResult TrainRematPass::apply(ArrayRef<SelectedLayer> selected,
                                    ArrayRef<Choice> choices) {
  SmallVector<int64_t> fused;
  Operation *firstFused = nullptr;
  for (auto [choice, entry] : llvm::zip(choices, selected)) {
    size_t before = fused.size();
    FailureOr<unsigned> made =
        applyChoice(entry.first, entry.second, choice, &fused);
    if (failed(made))
      return failure();
    LLVM_DEBUG(llvm::dbgs() << "train-remat: layer " << entry.first << ": "
                            << stringifyChoice(choice) << ", " << *made
                            << " remat regions\n");
    if (!firstFused && fused.size() > before)
      firstFused = entry.second.attention;
    numRegions += *made;
  }
  // Once for the step, not per layer (a remark prints its op).
  if (firstFused) {
    std::string layers;
    llvm::raw_string_ostream os(layers);
    llvm::interleaveComma(fused, os);
    firstFused->emitRemark("train-remat: the attention of layer")
        << (fused.size() > 1 ? "s " : " ") << layers
        << (fused.size() > 1 ? " are" : " is")
        << " fused (train.attention keeps no score tensor); selective "
           "recompute leaves it as it is";
  }
  return success();
}

/// policy=custom: one named choice per layer.
LogicalResult TrainRematPass::applyCustom(ArrayRef<SelectedLayer> selected) {
  SmallVector<StringRef> names;
  for (const std::string &name : choices)
    if (!StringRef(name).trim().empty())
      names.push_back(StringRef(name).trim());
  if (names.size() != selected.size())
    return fail("choices names " + Twine(names.size()) +
                " layers but the step has " + Twine(selected.size()));
  SmallVector<Choice> parsed;
  for (StringRef name : names) {
    std::optional<Choice> choice = parseChoice(name.trim());
    if (!choice)
      return fail("unknown choice '" + name.trim() +
                  "' (expected none, selective, attention, mlp or full)");
    parsed.push_back(*choice);
  }
  return apply(selected, parsed);
}

/// policy=budget: the fewest recompute FLOPs whose peak fits the budget
/// (per rank under ZeRO), said in a remark.
LogicalResult TrainRematPass::applyBudget(func::FuncOp func,
                                          ArrayRef<SelectedLayer> selected,
                                          uint64_t budgetBytes) {
  SmallVector<int64_t> indices;
  for (auto &[index, layer] : selected)
    indices.push_back(index);
  FailureOr<BudgetModel> model =
      measureBudgetModel(func, indices, measureAfter, runner());
  if (failed(model))
    return failure();
  uint64_t states = model->states;
  std::string perRank = model->stage >= 0 && model->ranks > 1
                            ? (" per rank (ZeRO-" + Twine(model->stage) +
                               " over " + Twine(model->ranks) + " ranks)")
                                  .str()
                            : std::string();
  if (budgetBytes < states)
    return fail("budget " + Twine(budgetBytes) + " B is below the " +
                Twine(states) +
                " B that weights, gradients and "
                "optimizer state need" +
                perRank);
  // The budget is for the arena the step's plan needs, which the layers'
  // live bytes do not give to the byte (the arena is within a few percent
  // above them): a plan whose arena is over is made again for a budget
  // lowered by the excess and below that plan's peak.
  uint64_t target = budgetBytes, arena = 0;
  std::optional<Plan> plan;
  for (int attempt = 0; attempt < kArenaAttempts; ++attempt) {
    plan = planForBudget(*model, target);
    if (!plan)
      break;
    FailureOr<uint64_t> measured =
        measureArena(func, indices, plan->choices, measureAfter, runner());
    if (failed(measured))
      return failure();
    arena = *measured;
    LLVM_DEBUG({
      llvm::dbgs() << "train-remat: budget attempt " << attempt << ": target "
                   << target << " B, predicted peak " << plan->peak
                   << " B, arena " << arena << " B, choices ";
      llvm::interleaveComma(plan->choices, llvm::dbgs(), [](Choice choice) {
        llvm::dbgs() << stringifyChoice(choice);
      });
      llvm::dbgs() << "\n";
    });
    if (arena <= budgetBytes || arena - budgetBytes >= target)
      break;
    // Below this plan's own peak: the next is another plan.
    target = std::min(target - (arena - budgetBytes), plan->peak - 1);
  }
  if (!plan) {
    uint64_t reachable = smallestPeak(*model);
    if (reachable <= budgetBytes)
      return fail("no recompute plan's arena fits " + Twine(budgetBytes) +
                  " B" + perRank + ": the nearest needs " + Twine(arena) +
                  " B, " + Twine(arena - budgetBytes) + " B over the budget");
    return fail("no recompute plan fits " + Twine(budgetBytes) + " B" +
                perRank + ": the smallest peak reachable is " +
                Twine(reachable) + " B, " + Twine(reachable - budgetBytes) +
                " B over the budget");
  }
  if (arena > budgetBytes)
    return fail("no recompute plan's arena fits " + Twine(budgetBytes) +
                " B" + perRank + ": the nearest needs " + Twine(arena) +
                " B, " + Twine(arena - budgetBytes) + " B over the budget");
  if (failed(apply(selected, plan->choices)))
    return failure();
  // Say what was chosen, as a remark a user can read and a test check.
  std::string summary;
  llvm::raw_string_ostream os(summary);
  llvm::interleaveComma(plan->choices, os,
                        [&](Choice choice) { os << stringifyChoice(choice); });
  func.emitRemark("train-remat: budget ")
      << budgetBytes << " B: choices " << summary << "; predicted peak "
      << plan->peak << " B, recompute " << plan->flops << " FLOPs; arena "
      << arena << " B";
  return success();
}

/// policy=every: whole layers in regions, `every` layers per region
/// (method=uniform) or the first `every` layers (method=block).
void TrainRematPass::wrapLayers(ArrayRef<SelectedLayer> selected) {
  if (method == RematMethod::uniform) {
    for (size_t chunk = 0; chunk < selected.size(); chunk += every) {
      size_t last = std::min(selected.size(), chunk + every) - 1;
      wrapInRemat(opRange(wholeLayer(selected[chunk].second).front(),
                          wholeLayer(selected[last].second).back()));
      ++numRegions;
    }
    return;
  }
  for (size_t i = 0; i < selected.size() && i < static_cast<size_t>(every);
       ++i) {
    wrapInRemat(wholeLayer(selected[i].second));
    ++numRegions;
  }
}

void TrainRematPass::runOnOperation() {
  FailureOr<uint64_t> budgetBytes = checkOptions();
  if (failed(budgetBytes))
    return signalPassFailure();
  int64_t begin, end;
  if (failed(parseRange(layers, begin, end))) {
    (void)fail("bad layer range '" + layers + "' (expected A:B, A < B)");
    return signalPassFailure();
  }
  func::FuncOp func = lookupStep(getOperation(), function, "train-remat");
  if (!func)
    return signalPassFailure();
  // After train-grad-accum the layers live inside the micro-batch loop (or
  // its unrolled copies): checkpointing is chosen per layer first. A
  // Hessian step (Sophia's) runs the same layers: it recomputes as the step
  // does, or its peak would be the run's (a budget is the step's).
  SmallVector<StringRef> conditions;
  if (policy == RematPolicy::budget)
    conditions.push_back("policy=budget");
  if (failed(checkStepPhases(func, getArgument(), conditions)))
    return signalPassFailure();
  FailureOr<SmallVector<SelectedLayer>> selected =
      selectLayers(func, begin, end);
  if (failed(selected))
    return signalPassFailure();
  std::optional<Choice> everyLayer;
  switch (policy) {
  case RematPolicy::full:
    everyLayer = Choice::Full;
    break;
  case RematPolicy::attention:
    everyLayer = Choice::Attention;
    break;
  case RematPolicy::mlp:
    everyLayer = Choice::MLP;
    break;
  case RematPolicy::selective:
    everyLayer = Choice::Selective;
    break;
  default:
    break;
  }
  func::FuncOp hessian = findHessianStep(func);
  for (func::FuncOp target : {func, hessian}) {
    if (!target)
      continue;
    if (target != func) {
      selected = selectLayers(target, begin, end);
      if (failed(selected))
        return signalPassFailure();
    }
    LogicalResult applied = success();
    if (everyLayer)
      applied =
          apply(*selected, SmallVector<Choice>(selected->size(), *everyLayer));
    else if (policy == RematPolicy::custom)
      applied = applyCustom(*selected);
    else if (policy == RematPolicy::budget)
      applied = applyBudget(func, *selected, *budgetBytes);
    else
      wrapLayers(*selected);
    if (failed(applied))
      return signalPassFailure();
  }
}

struct TrainMaterializeRematPass
    : public impl::TrainMaterializeRematPassBase<TrainMaterializeRematPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func = lookupStep(module, function, "train-materialize-remat");
    if (!func)
      return signalPassFailure();
    // The step's Hessian step (Sophia's) recomputes as the step does.
    for (func::FuncOp target : {func, findHessianStep(func)}) {
      if (!target)
        continue;
      FailureOr<unsigned> cloned = materializeRemat(target);
      if (failed(cloned))
        return signalPassFailure();
      DEBUG_WITH_TYPE("train-materialize-remat",
                      llvm::dbgs() << "train-materialize-remat: @"
                                   << target.getSymName() << ": " << *cloned
                                   << " ops recomputed in the backward\n");
      numRecomputed += *cloned;
    }
  }
};

} // namespace

FailureOr<unsigned> materializeRemat(func::FuncOp func) {
  // Program order of every op.
  llvm::DenseMap<Operation *, unsigned> order;
  func.walk<WalkOrder::PreOrder>(
      [&](Operation *op) { order[op] = order.size(); });

  // For each region: the backward operands that read a value it defines
  // and does not pass on to the forward after it.
  struct Need {
    OpOperand *use;
    Value value;
  };
  llvm::MapVector<Operation *, SmallVector<Need>> needs;
  auto passedOn = [](Value value, RematOp remat) {
    // A value the region's forward successors read stays: it is what the
    // recompute starts from, not what it produces.
    SmallVector<Value> worklist{value};
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      for (OpOperand &use : v.getUses()) {
        Operation *user = use.getOwner();
        if (auto yield = dyn_cast<YieldOp>(user)) {
          worklist.push_back(
              yield->getParentOp()->getResult(use.getOperandNumber()));
          continue;
        }
        if (!remat->isAncestor(user) && !isBackwardOp(user))
          return true;
      }
    }
    return false;
  };
  func.walk([&](Operation *op) {
    if (!isBackwardOp(op))
      return;
    for (OpOperand &use : op->getOpOperands()) {
      Value value = resolveRegionResult(use.get());
      Operation *def = value.getDefiningOp();
      if (!def)
        continue;
      RematOp remat = outermostRemat(def);
      if (remat && !passedOn(value, remat))
        needs[remat].push_back({&use, value});
    }
  });

  unsigned cloned = 0;
  for (auto &[remat, uses] : needs) {
    // The ops inside the region that compute what the backward needs.
    llvm::SetVector<Operation *> slice;
    SmallVector<Value> worklist;
    for (const Need &need : uses)
      worklist.push_back(need.value);
    while (!worklist.empty()) {
      Value value = resolveRegionResult(worklist.pop_back_val());
      Operation *def = value.getDefiningOp();
      if (!def || !remat->isAncestor(def) || !slice.insert(def))
        continue;
      for (Value operand : def->getOperands())
        worklist.push_back(operand);
    }
    SmallVector<Operation *> ordered(slice.begin(), slice.end());
    llvm::sort(ordered, [&](Operation *a, Operation *b) {
      return order.lookup(a) < order.lookup(b);
    });

    // Cloned once, before the first backward op that needs any of it.
    Operation *first = uses.front().use->getOwner();
    for (const Need &need : uses)
      if (order.lookup(need.use->getOwner()) < order.lookup(first))
        first = need.use->getOwner();
    OpBuilder builder(first);
    IRMapping mapping;
    for (Operation *op : ordered) {
      for (Value operand : op->getOperands()) {
        Value source = resolveRegionResult(operand);
        mapping.map(operand, mapping.lookupOrDefault(source));
      }
      Operation *clone = builder.clone(*op, mapping);
      clone->setAttr(kRecomputeAttrName, builder.getUnitAttr());
      ++cloned;
    }
    for (const Need &need : uses)
      need.use->set(mapping.lookup(need.value));
  }

  // The regions have done their job.
  SmallVector<Operation *> remats;
  func.walk([&](RematOp remat) { remats.push_back(remat); });
  for (Operation *remat : remats)
    inlineRegionOp(remat);
  pruneUnusedResults(func);
  exportEscapingValues(func);
  return cloned;
}

} // namespace train
} // namespace mlir
