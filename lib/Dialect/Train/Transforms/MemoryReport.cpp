//===- MemoryReport.cpp - train-memory-report -----------------------------===//

#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Analysis/MemoryPlan.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"

#include <map>

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINMEMORYREPORTPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

constexpr MemoryCategory kCategories[] = {
    MemoryCategory::Weights, MemoryCategory::Gradients,
    MemoryCategory::Optimizer, MemoryCategory::Activations,
    MemoryCategory::Temporaries};

std::string gib(uint64_t bytes) {
  return llvm::formatv("{0:F2} GiB", static_cast<double>(bytes) /
                                         (1024.0 * 1024.0 * 1024.0))
      .str();
}

std::string describe(Operation *op) {
  if (!op)
    return "function entry";
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "'" << op->getName() << "'";
  if (auto block = op->getParentOfType<BlockOp>()) {
    os << " in " << stringifyBlockKind(block.getKind());
    if (IntegerAttr layer = block.getLayerAttr())
      os << " layer " << layer.getInt();
    if (block.getBackward())
      os << " backward";
  }
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    os << " (" << name.getName().getValue() << ")";
  return text;
}

/// Bytes of the step's optimizer-state arguments by kind: "master", "m+v"
/// (Adam's moments, f32 or 8-bit codes plus block maxima), "momentum".
std::vector<std::pair<std::string, uint64_t>>
optimizerStateByKind(func::FuncOp func) {
  std::vector<std::pair<std::string, uint64_t>> kinds;
  for (BlockArgument arg : func.getArguments()) {
    auto state = func.getArgAttrOfType<StateAttr>(arg.getArgNumber(),
                                                  kOptimizerStateAttrName);
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!state || !type || !type.hasStaticShape())
      continue;
    StateKind kind = state.getKind();
    std::string label = kind == StateKind::m || kind == StateKind::v
                            ? "m+v"
                            : stringifyStateKind(kind).str();
    uint64_t bytes = static_cast<uint64_t>(type.getNumElements()) *
                     ((type.getElementTypeBitWidth() + 7) / 8);
    auto it = llvm::find_if(kinds, [&](auto &k) { return k.first == label; });
    if (it == kinds.end())
      kinds.push_back({label, bytes});
    else
      it->second += bytes;
  }
  return kinds;
}

/// Weights, gradients and optimizer state (totals) per parameter.
double modelStatesPerParameter(const FunctionMemory &memory) {
  const CategoryBytes &totals = memory.getTotals();
  uint64_t bytes = totals[static_cast<unsigned>(MemoryCategory::Weights)] +
                   totals[static_cast<unsigned>(MemoryCategory::Gradients)] +
                   totals[static_cast<unsigned>(MemoryCategory::Optimizer)];
  return memory.getParameters()
             ? static_cast<double>(bytes) /
                   static_cast<double>(memory.getParameters())
             : 0.0;
}

/// Data parallelism of the step: its ZeRO partitioning (#train.zero), the
/// batch one rank and all ranks train on, and what the collectives send per
/// rank and step, by kind (ops inside a micro-batch loop count once per
/// micro-batch).
struct Parallelism {
  ZeroAttr zero;
  int64_t ranks = 1;
  int64_t rankBatch = 0; // the step's batch (tokens' first dimension)
  std::map<std::string, CollectiveTraffic> traffic;
  int64_t globalBatch() const { return rankBatch * ranks; }
};

Parallelism parallelismOf(func::FuncOp func) {
  Parallelism p;
  p.zero = func->getAttrOfType<ZeroAttr>(kZeroAttrName);
  if (p.zero)
    p.ranks = p.zero.getRanks();
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto input = func.getArgAttrOfType<StringAttr>(i, kInputAttrName))
      if (input.getValue() == "tokens")
        if (auto type = dyn_cast<RankedTensorType>(
                func.getArgument(i).getType()))
          if (type.getRank() >= 1)
            p.rankBatch = type.getDimSize(0);
  p.traffic = collectiveTrafficOf(func);
  return p;
}

/// The zeros train-zero padded the ranks' shards with (arguments marked
/// train.shard_of): elements and bytes over all ranks together.
struct Padding {
  uint64_t elements = 0, bytes = 0;
};
Padding paddingOf(func::FuncOp func, int64_t ranks) {
  Padding padding;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto full = func.getArgAttrOfType<TypeAttr>(i, kShardOfAttrName);
    auto shard = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
    if (!full || !shard || !shard.hasStaticShape())
      continue;
    auto fullType = cast<RankedTensorType>(full.getValue());
    uint64_t held = mulCount(static_cast<uint64_t>(shard.getNumElements()),
                             static_cast<uint64_t>(ranks));
    uint64_t zeros = held - static_cast<uint64_t>(fullType.getNumElements());
    padding.elements = addCount(padding.elements, zeros);
    padding.bytes = addCount(
        padding.bytes,
        mulCount(zeros, (shard.getElementTypeBitWidth() + 7) / 8));
  }
  return padding;
}

/// Stage 3 gathers parameters: their category shows.
bool gathers(func::FuncOp func) {
  auto zero = func->getAttrOfType<ZeroAttr>(kZeroAttrName);
  return zero && zero.getStage() >= 3;
}

llvm::json::Object categoryObject(const CategoryBytes &bytes,
                                  bool withGathered) {
  llvm::json::Object object;
  for (MemoryCategory category : kCategories)
    object[stringifyMemoryCategory(category)] =
        bytes[static_cast<unsigned>(category)];
  if (withGathered)
    object[stringifyMemoryCategory(MemoryCategory::Gathered)] =
        bytes[static_cast<unsigned>(MemoryCategory::Gathered)];
  return object;
}

llvm::json::Value toJSON(const FunctionMemory &memory,
                         const MemoryPlan &plan) {
  Parallelism parallelism = parallelismOf(memory.getFunction());
  llvm::json::Array layers;
  for (const LayerActivations &layer : memory.getLayers())
    layers.push_back(llvm::json::Object{
        {"index", layer.index},
        {"saved_activation_bytes", layer.total()},
        {"attention", layer.attention},
        {"mlp", layer.mlp},
        {"norm", layer.norm}});
  llvm::json::Object object{
      {"function", memory.getFunction().getSymName()},
      {"parameters", memory.getParameters()},
      {"peak_bytes", memory.getPeakBytes()},
      {"peak_op", describe(memory.getPeakOp())},
      {"plan",
       llvm::json::Object{{"arena_bytes", plan.getArenaBytes()},
                          {"alignment", plan.getAlignment()},
                          {"algorithm", "greedy-by-size"}}},
      {"at_peak", categoryObject(memory.getAtPeak(),
                                 gathers(memory.getFunction()))},
      {"totals", categoryObject(memory.getTotals(),
                                gathers(memory.getFunction()))},
      {"layers", std::move(layers)},
      {"optimizer_state", [&] {
         llvm::json::Object kinds;
         for (auto &[kind, bytes] : optimizerStateByKind(memory.getFunction()))
           kinds[kind] = bytes;
         return kinds;
       }()},
      {"model_states_bytes_per_parameter", modelStatesPerParameter(memory)},

      {"flops",
       llvm::json::Object{
           {"forward", memory.getFlops(Phase::Forward)},
           {"backward", memory.getFlops(Phase::Backward)},
           {"optimizer", memory.getFlops(Phase::Optimizer)},
           {"recompute", memory.getRecomputeFlops()}}}};
  // Data parallelism, for a step train-zero partitioned (the numbers above
  // are one rank's).
  if (parallelism.zero) {
    Padding padding = paddingOf(memory.getFunction(), parallelism.ranks);
    llvm::json::Object extra{
        {"padding",
         llvm::json::Object{
             {"elements_all_ranks", padding.elements},
             {"bytes_all_ranks", padding.bytes},
             {"bytes_per_rank_mean",
              static_cast<double>(padding.bytes) /
                  static_cast<double>(parallelism.ranks)}}},
        {"ranks", parallelism.ranks},
        {"zero_stage", parallelism.zero
                         ? llvm::json::Value(parallelism.zero.getStage())
                         : llvm::json::Value(nullptr)},
        {"rank_batch", parallelism.rankBatch},
        {"global_batch", parallelism.globalBatch()},
        {"communication", [&] {
         llvm::json::Object kinds;
         for (auto &[kind, t] : parallelism.traffic)
           kinds[kind] = llvm::json::Object{{"ops", t.ops},
                                              {"elements_per_rank", t.elements},
                                              {"bytes_per_rank", t.bytes}};
         return kinds;
       }()},
    };
    for (auto &entry : extra)
      object[entry.first] = std::move(entry.second);
  }
  return object;
}

void printText(llvm::raw_ostream &os, const FunctionMemory &memory,
               const MemoryPlan &plan) {
  os << "memory of @" << memory.getFunction().getSymName() << "\n";
  os << llvm::formatv("  parameters {0,20}\n", memory.getParameters());
  os << llvm::formatv("  peak       {0,20} B  {1,12}  at {2}\n",
                      memory.getPeakBytes(), gib(memory.getPeakBytes()),
                      describe(memory.getPeakOp()));
  os << llvm::formatv("  arena plan {0,20} B  {1,12}  {2:F4}x the peak "
                      "(greedy by size, {3}-B aligned)\n",
                      plan.getArenaBytes(), gib(plan.getArenaBytes()),
                      memory.getPeakBytes()
                          ? static_cast<double>(plan.getArenaBytes()) /
                                static_cast<double>(memory.getPeakBytes())
                          : 0.0,
                      plan.getAlignment());
  os << llvm::formatv("  {0,-12} {1,20}   {2,20}\n", "category", "at peak (B)",
                      "totals (B)");
  SmallVector<MemoryCategory> categories(std::begin(kCategories),
                                         std::end(kCategories));
  if (gathers(memory.getFunction()))
    categories.push_back(MemoryCategory::Gathered);
  for (MemoryCategory category : categories) {
    unsigned i = static_cast<unsigned>(category);
    os << llvm::formatv("  {0,-12} {1,20}   {2,20}\n",
                        stringifyMemoryCategory(category),
                        memory.getAtPeak()[i], memory.getTotals()[i]);
  }
  double params = static_cast<double>(std::max<uint64_t>(
      memory.getParameters(), 1));
  for (auto &[kind, bytes] : optimizerStateByKind(memory.getFunction()))
    os << llvm::formatv("  optimizer state {0,-9} {1,20} B  {2:F4} B/param\n",
                        kind, bytes, static_cast<double>(bytes) / params);
  os << llvm::formatv("  model states (weights + gradients + optimizer) "
                      "{0:F4} B/param\n",
                      modelStatesPerParameter(memory));
  os << llvm::formatv("  flops      forward {0}  backward {1}  optimizer {2}"
                      "  recompute {3}\n",
                      memory.getFlops(Phase::Forward),
                      memory.getFlops(Phase::Backward),
                      memory.getFlops(Phase::Optimizer),
                      memory.getRecomputeFlops());
  // Data parallelism, for a step train-zero partitioned: the numbers above
  // are one rank's.
  Parallelism parallelism = parallelismOf(memory.getFunction());
  if (parallelism.zero) {
    os << llvm::formatv("  zero       stage {0}, {1} ranks (per rank above); "
                        "global batch {2} = {3} per rank x {1} ranks\n",
                        parallelism.zero.getStage(), parallelism.ranks,
                        parallelism.globalBatch(), parallelism.rankBatch);
    Padding padding = paddingOf(memory.getFunction(), parallelism.ranks);
    if (parallelism.zero.getStage() >= 1)
      os << llvm::formatv("  padding    {0} elements, {1} B over all ranks' "
                          "shards ({2:F1} B per rank; in the categories "
                          "above)\n",
                          padding.elements, padding.bytes,
                          static_cast<double>(padding.bytes) /
                              static_cast<double>(parallelism.ranks));
    for (auto &[kind, t] : parallelism.traffic)
      os << llvm::formatv("  communication {0,-15} {1,6} ops {2,20} elements "
                          "{3,20} B per rank and step\n",
                          kind, t.ops, t.elements, t.bytes);
  }
  if (memory.getLayers().empty())
    return;
  os << "  saved activations per layer (B)\n";
  os << llvm::formatv("  {0,5} {1,16} {2,16} {3,16} {4,16}\n", "layer",
                      "attention", "mlp", "norm", "total");
  for (const LayerActivations &layer : memory.getLayers())
    os << llvm::formatv("  {0,5} {1,16} {2,16} {3,16} {4,16}\n", layer.index,
                        layer.attention, layer.mlp, layer.norm, layer.total());
}

struct TrainMemoryReportPass
    : public impl::TrainMemoryReportPassBase<TrainMemoryReportPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // The training step (the function marked train.step) if there is one,
    // else the one function with a body.
    func::FuncOp func;
    if (hasMarkedStep(module)) {
      Operation *marked = findMarkedStep(module, "train-memory-report");
      if (!marked)
        return signalPassFailure();
      func = dyn_cast<func::FuncOp>(marked);
      if (!func) {
        emitError(marked->getLoc(), "train-memory-report: @")
            << SymbolTable::getSymbolName(marked).getValue() << " is a '"
            << marked->getName()
            << "': it is already lowered; report on the tensor-level step "
               "(before convert-train-to-runtime)";
        return signalPassFailure();
      }
    } else {
      SmallVector<func::FuncOp> candidates;
      for (auto f : module.getOps<func::FuncOp>())
        if (!f.isExternal())
          candidates.push_back(f);
      if (candidates.size() != 1) {
        emitError(module.getLoc(),
                  "train-memory-report: expected a function marked ")
            << kStepAttrName << " or one function with a body, found "
            << candidates.size();
        return signalPassFailure();
      }
      func = candidates.front();
    }
    // A lowered step (the runtime's arena pointer instead of tensors) has
    // no tensors left to measure: say so instead of printing zeros.
    for (Type type : func.getArgumentTypes())
      if (!isa<RankedTensorType>(type)) {
        emitError(func.getLoc(), "train-memory-report: @")
            << func.getSymName() << " takes " << type
            << ", not tensors: it is already lowered; report on the "
               "tensor-level step (before convert-train-to-runtime)";
        return signalPassFailure();
      }
    // Unmaterialized train.remat regions are reported as they will run:
    // on a copy with their recompute materialized.
    OwningOpRef<ModuleOp> materialized;
    std::optional<MemoryAnalysis> ownAnalysis;
    const FunctionMemory *memory;
    if (func.walk([](RematOp) { return WalkResult::interrupt(); })
            .wasInterrupted()) {
      materialized = module.clone();
      auto copy = materialized->lookupSymbol<func::FuncOp>(func.getSymName());
      if (failed(materializeRemat(copy)))
        return signalPassFailure();
      ownAnalysis.emplace(copy);
      memory = &ownAnalysis->getFunctions().front();
    } else {
      memory = getAnalysis<MemoryAnalysis>().lookup(func);
    }

    if (failed(memory->checkCounts("train-memory-report")))
      return signalPassFailure();
    std::string errorMessage;
    std::unique_ptr<llvm::ToolOutputFile> file =
        openOutputFile(output, &errorMessage);
    if (!file) {
      emitError(module.getLoc(), "train-memory-report: ") << errorMessage;
      return signalPassFailure();
    }
    MemoryPlan plan(*memory);
    if (format == ReportFormat::json)
      file->os() << llvm::formatv("{0:2}", toJSON(*memory, plan)) << "\n";
    else
      printText(file->os(), *memory, plan);
    file->keep();
    markAllAnalysesPreserved();
  }
};

} // namespace
} // namespace train
} // namespace mlir
