//===- MemoryReport.cpp - train-memory-report -----------------------------===//

#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Analysis/MemoryPlan.h"
#include "trainmem/Analysis/MemoryTimeline.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Support/ByteSize.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdio>
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"

#include <map>
#include <set>

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-memory-report"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINMEMORYREPORTPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

constexpr MemoryCategory kCategories[] = {
    MemoryCategory::Weights, MemoryCategory::Gradients,
    MemoryCategory::Optimizer, MemoryCategory::Activations,
    MemoryCategory::Temporaries};

/// The op at the peak for programs: its name, block kind, layer, phase
/// and location name (null where it has none), and `describeOp`'s text.
llvm::json::Object peakOpJson(const FunctionMemory &memory) {
  Operation *op = memory.getPeakOp();
  llvm::json::Object object{{"text", describeOp(op)}};
  if (!op) {
    object["op"] = nullptr;
    return object;
  }
  object["op"] = op->getName().getStringRef();
  auto block = op->getParentOfType<BlockOp>();
  object["block"] = block ? llvm::json::Value(stringifyBlockKind(block.getKind()))
                          : llvm::json::Value(nullptr);
  IntegerAttr layer = block ? block.getLayerAttr() : IntegerAttr();
  object["layer"] = layer ? llvm::json::Value(layer.getInt())
                          : llvm::json::Value(nullptr);
  constexpr const char *kPhases[] = {"forward", "backward", "optimizer"};
  object["phase"] = kPhases[static_cast<unsigned>(memory.getPhase(op))];
  auto name = dyn_cast<NameLoc>(op->getLoc());
  object["name"] = name ? llvm::json::Value(name.getName().getValue())
                        : llvm::json::Value(nullptr);
  return object;
}

/// Bytes of the step's optimizer-state arguments by kind (StateKind: the
/// registry's kinds, "master", "m", "v", "momentum", "h"; an 8-bit state's
/// codes and block maxima under its kind), in the order of the arguments.
std::vector<std::pair<std::string, uint64_t>>
optimizerStateByKind(func::FuncOp func) {
  std::vector<std::pair<std::string, uint64_t>> kinds;
  for (BlockArgument arg : func.getArguments()) {
    auto state = func.getArgAttrOfType<StateAttr>(arg.getArgNumber(),
                                                  kOptimizerStateAttrName);
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!state || !type || !type.hasStaticShape())
      continue;
    std::string label = stringifyStateKind(state.getKind()).str();
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
  /// The tensor-parallel group's size (the parts of a #train.split), 1
  /// without.
  int64_t tensorParts = 1;
  int64_t rankBatch = 0; // the step's batch (tokens' first dimension)
  std::map<TrafficKey, CollectiveTraffic> traffic;
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
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto split =
            func.getArgAttrOfType<TensorSplitAttr>(i, kTensorSplitAttrName))
      p.tensorParts = split.getParts();
  p.traffic = collectiveTrafficOf(func);
  return p;
}

llvm::json::Object trafficObject(const CollectiveTraffic &t) {
  return llvm::json::Object{{"ops", t.ops},
                            {"elements_per_rank", t.elements},
                            {"bytes_per_rank", t.bytes}};
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
    layers.push_back(
        llvm::json::Object{{"index", layer.index},
                           {"saved_activation_bytes", layer.total()},
                           {"attention", layer.attention},
                           {"mlp", layer.mlp},
                           {"norm", layer.norm},
                           {"host_bytes", layer.host}});
  llvm::json::Object object{
      {"function", memory.getFunction().getSymName()},
      {"parameters", memory.getParameters()},
      {"peak_bytes", memory.getPeakBytes()},
      {"peak_op", peakOpJson(memory)},
      {"plan",
       llvm::json::Object{
           {"arena_bytes", plan.getArenaBytes()},
           {"alignment", plan.getAlignment()},
           {"algorithm", "greedy-by-size"},
           // The plan the step carries (train-plan-arena, a micro-batch
           // loop's planned rolled), or one made for the report.
           {"source", MemoryPlan::hasPlanInIR(memory.getFunction())
                          ? "ir"
                          : "report"}}},
      {"at_peak",
       categoryObject(memory.getAtPeak(), gathers(memory.getFunction()))},
      {"totals",
       categoryObject(memory.getTotals(), gathers(memory.getFunction()))},
      {"layers", std::move(layers)},
      {"optimizer_state",
       [&] {
         llvm::json::Object kinds;
         for (auto &[kind, bytes] : optimizerStateByKind(memory.getFunction()))
           kinds[kind] = bytes;
         return kinds;
       }()},
      {"model_states_bytes_per_parameter", modelStatesPerParameter(memory)},
      {"most_live_gradients", memory.getMostLiveGradients()},

      {"flops",
       llvm::json::Object{{"forward", memory.getFlops(Phase::Forward)},
                          {"backward", memory.getFlops(Phase::Backward)},
                          {"optimizer", memory.getFlops(Phase::Optimizer)},
                          {"recompute", memory.getRecomputeFlops()}}}};
  // Host memory (train-offload-optimizer): apart from the device's above.
  if (memory.getHostBytes() > 0) {
    object["host"] = llvm::json::Object{
        {"bytes", memory.getHostBytes()},
        {"arena_bytes", plan.getHostArenaBytes()},
        {"totals", categoryObject(memory.getHostTotals(), false)},
        {"host_device_bytes_per_step", memory.getHostDeviceBytes()}};
  }
  // Data and tensor parallelism (the numbers above are one rank's): ZeRO's
  // partitioning and what the collectives send, by kind and by axis.
  if (parallelism.zero || !parallelism.traffic.empty()) {
    Padding padding = paddingOf(memory.getFunction(), parallelism.ranks);
    std::map<std::string, CollectiveTraffic> byKind;
    llvm::json::Object byAxis;
    for (auto &[key, t] : parallelism.traffic) {
      CollectiveTraffic &sum = byKind[key.kind];
      sum.ops += t.ops;
      sum.elements += t.elements;
      sum.bytes += t.bytes;
      if (!byAxis.getObject(key.axis))
        byAxis[key.axis] = llvm::json::Object{};
      (*byAxis.getObject(key.axis))[key.kind] = trafficObject(t);
    }
    llvm::json::Object kinds;
    for (auto &[kind, t] : byKind)
      kinds[kind] = trafficObject(t);
    llvm::json::Object extra{
        {"padding",
         llvm::json::Object{{"elements_all_ranks", padding.elements},
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
        {"tensor_parallel", parallelism.tensorParts},
        {"communication", std::move(kinds)},
        {"communication_by_axis", std::move(byAxis)},
    };
    for (auto &entry : extra)
      object[entry.first] = std::move(entry.second);
  }
  return object;
}

/// The text report's parallelism lines: ZeRO's partitioning and padding,
/// the tensor-parallel group, what the collectives send by axis and kind
/// (the numbers above them are one rank's).
void printParallelism(llvm::raw_ostream &os, func::FuncOp func) {
  // Data and tensor parallelism: the numbers above are one rank's.
  Parallelism parallelism = parallelismOf(func);
  if (parallelism.zero) {
    os << llvm::formatv("  zero       stage {0}, {1} ranks (per rank above); "
                        "global batch {2} = {3} per rank x {1} ranks\n",
                        parallelism.zero.getStage(), parallelism.ranks,
                        parallelism.globalBatch(), parallelism.rankBatch);
    Padding padding = paddingOf(func, parallelism.ranks);
    if (parallelism.zero.getStage() >= 1)
      os << llvm::formatv("  padding    {0} elements, {1} B over all ranks' "
                          "shards ({2:F1} B per rank; in the categories "
                          "above)\n",
                          padding.elements, padding.bytes,
                          static_cast<double>(padding.bytes) /
                              static_cast<double>(parallelism.ranks));
  }
  if (parallelism.tensorParts > 1)
    os << llvm::formatv("  tensor     {0} ranks per tensor-parallel group "
                        "(per rank above)\n",
                        parallelism.tensorParts);
  for (auto &[key, t] : parallelism.traffic)
    os << llvm::formatv("  communication {0,-11} {1,-15} {2,6} ops {3,20} "
                        "elements {4,20} B per rank and step\n",
                        key.axis, key.kind, t.ops, t.elements, t.bytes);
}

void printText(llvm::raw_ostream &os, const FunctionMemory &memory,
               const MemoryPlan &plan) {
  os << "memory of @" << memory.getFunction().getSymName() << "\n";
  os << llvm::formatv("  parameters {0,20}\n", memory.getParameters());
  os << llvm::formatv("  peak       {0,20} B  {1,12}  at {2}\n",
                      memory.getPeakBytes(),
                      trainmem::formatByteSize(memory.getPeakBytes()),
                      describeOp(memory.getPeakOp()));
  os << llvm::formatv(
      "  arena plan {0,20} B  {1,12}  {2:F4}x the peak "
      "(greedy by size, {3}-B aligned{4})\n",
      plan.getArenaBytes(), trainmem::formatByteSize(plan.getArenaBytes()),
      memory.getPeakBytes() ? static_cast<double>(plan.getArenaBytes()) /
                                  static_cast<double>(memory.getPeakBytes())
                            : 0.0,
      plan.getAlignment(),
      MemoryPlan::hasPlanInIR(memory.getFunction())
          ? "; the step's own, train-plan-arena"
          : "");
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
  os << llvm::formatv("  gradients live at once, at most {0,20} B\n",
                      memory.getMostLiveGradients());
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
  printParallelism(os, memory.getFunction());
  if (memory.getHostBytes() > 0) {
    // The passes that put tensors there.
    SmallVector<StringRef> movedBy;
    const CategoryBytes &host = memory.getHostTotals();
    if (host[static_cast<unsigned>(MemoryCategory::Activations)])
      movedBy.push_back("train-offload-activations");
    if (memory.getHostBytes() >
        host[static_cast<unsigned>(MemoryCategory::Activations)])
      movedBy.push_back("train-offload-optimizer");
    os << llvm::formatv("  host       {0,20} B  {1,12}  ({2}; "
                        "not in the device figures above)\n",
                        memory.getHostBytes(),
                        trainmem::formatByteSize(memory.getHostBytes()),
                        llvm::join(movedBy, ", "));
    for (MemoryCategory category : kCategories)
      if (uint64_t bytes =
              memory.getHostTotals()[static_cast<unsigned>(category)])
        os << llvm::formatv("    {0,-10} {1,20} B\n",
                            stringifyMemoryCategory(category), bytes);
    os << llvm::formatv("  host arena plan {0,15} B\n",
                        plan.getHostArenaBytes());
    os << llvm::formatv("  host<->device {0,17} B per step\n",
                        memory.getHostDeviceBytes());
  }
  if (memory.getLayers().empty())
    return;
  // A column for host memory where train-offload-activations put some.
  bool offloaded =
      llvm::any_of(memory.getLayers(), [](const LayerActivations &layer) {
        return layer.host > 0;
      });
  os << "  saved activations per layer (B)\n";
  os << llvm::formatv("  {0,5} {1,16} {2,16} {3,16} {4,16}", "layer",
                      "attention", "mlp", "norm", "total");
  os << (offloaded ? llvm::formatv(" {0,16}\n", "host").str() : "\n");
  for (const LayerActivations &layer : memory.getLayers()) {
    os << llvm::formatv("  {0,5} {1,16} {2,16} {3,16} {4,16}", layer.index,
                        layer.attention, layer.mlp, layer.norm, layer.total());
    os << (offloaded ? llvm::formatv(" {0,16}\n", layer.host).str() : "\n");
  }
}

/// What a pipeline stage holds at its peak: the units (chunk, micro-batch)
/// whose saved activations are live there, and their micro-batches.
std::pair<int64_t, int64_t> inFlightAtPeak(const FunctionMemory &memory) {
  SmallVector<std::pair<int64_t, int64_t>> units =
      memory.getUnitsLiveAt(memory.getPeakPoint());
  std::set<int64_t> microBatches;
  for (auto [chunk, microBatch] : units)
    microBatches.insert(microBatch);
  return {static_cast<int64_t>(units.size()),
          static_cast<int64_t>(microBatches.size())};
}

/// A pipeline stage's report: the step's, with its place in the pipeline
/// and what is in flight at its peak.
llvm::json::Value stageJSON(const FunctionMemory &memory,
                            const MemoryPlan &plan) {
  auto stage = memory.getFunction()->getAttrOfType<PipelineStageAttr>(
      kPipelineStageAttrName);
  llvm::json::Object object = *toJSON(memory, plan).getAsObject();
  auto [units, microBatches] = inFlightAtPeak(memory);
  object["stage"] = stage.getStage();
  object["stages"] = stage.getStages();
  object["schedule"] = stringifyPipelineSchedule(stage.getSchedule());
  object["micro_batches"] = stage.getMicroBatches();
  object["virtual"] = stage.getVirtualStages();
  object["saved_activation_bytes"] =
      memory.getAtPeak()[static_cast<unsigned>(MemoryCategory::Activations)];
  object["units_in_flight"] = units;
  object["micro_batches_in_flight"] = microBatches;
  return object;
}

void printStageText(llvm::raw_ostream &os, const FunctionMemory &memory,
                    const MemoryPlan &plan) {
  auto stage = memory.getFunction()->getAttrOfType<PipelineStageAttr>(
      kPipelineStageAttrName);
  auto [units, microBatches] = inFlightAtPeak(memory);
  os << "=== pipeline stage " << stage.getStage() << " of " << stage.getStages()
     << " (" << stringifyPipelineSchedule(stage.getSchedule()) << ", "
     << stage.getMicroBatches() << " micro-batches";
  if (stage.getVirtualStages() > 1)
    os << ", " << stage.getVirtualStages() << " chunks";
  os << "): " << microBatches << " micro-batches (" << units
     << " units) in flight at the peak, "
     << trainmem::formatByteSize(memory.getAtPeak()[static_cast<unsigned>(
            MemoryCategory::Activations)])
     << " of saved activations ===\n";
  printText(os, memory, plan);
}

struct TrainMemoryReportPass
    : public impl::TrainMemoryReportPassBase<TrainMemoryReportPass> {
  using Base::Base;

  /// The function reported on: `function`, else the training step (the
  /// function marked train.step) if there is one, else the one function
  /// with a body; null after an error.
  func::FuncOp selectFunction(ModuleOp module) {
    if (!function.empty()) {
      auto named = module.lookupSymbol<func::FuncOp>(function);
      if (!named)
        emitError(module.getLoc(), "train-memory-report: no function @")
            << function;
      return named;
    }
    if (hasMarkedStep(module)) {
      Operation *marked = findMarkedStep(module, "train-memory-report");
      if (!marked)
        return {};
      auto func = dyn_cast<func::FuncOp>(marked);
      if (!func)
        emitError(marked->getLoc(), "train-memory-report: @")
            << SymbolTable::getSymbolName(marked).getValue() << " is a '"
            << marked->getName()
            << "': it is already lowered; report on the tensor-level step "
               "(before convert-train-to-runtime)";
      return func;
    }
    SmallVector<func::FuncOp> candidates;
    for (auto f : module.getOps<func::FuncOp>())
      if (!f.isExternal())
        candidates.push_back(f);
    if (candidates.size() == 1)
      return candidates.front();
    emitError(module.getLoc(),
              "train-memory-report: expected a function marked ")
        << kStepAttrName << " or one function with a body, found "
        << candidates.size();
    return {};
  }

  /// The stages of a pipeline-parallel program (train-pipeline), in order;
  /// empty without.
  static SmallVector<func::FuncOp> pipelineStages(ModuleOp module) {
    SmallVector<func::FuncOp> stages;
    for (auto f : module.getOps<func::FuncOp>())
      if (f->hasAttr(kPipelineStageAttrName))
        stages.push_back(f);
    llvm::sort(stages, [](func::FuncOp a, func::FuncOp b) {
      return a->getAttrOfType<PipelineStageAttr>(kPipelineStageAttrName)
                 .getStage() <
             b->getAttrOfType<PipelineStageAttr>(kPipelineStageAttrName)
                 .getStage();
    });
    return stages;
  }

  /// Whether `func`'s arguments are tensors the report can measure (an
  /// error that says what they are otherwise).
  static LogicalResult checkArguments(func::FuncOp func) {
    // A lowered step (the runtime's arena pointer instead of tensors) has
    // no tensors left to measure: say so instead of printing zeros.
    // Any other argument that is not a tensor is input the report cannot
    // measure: say which, not that the step is lowered.
    for (auto [index, type] : llvm::enumerate(func.getArgumentTypes())) {
      if (isa<RankedTensorType>(type))
        continue;
      bool lowered = type.getDialect().getNamespace() == "llvm";
      if (lowered)
        emitError(func.getLoc(), "train-memory-report: @")
            << func.getSymName() << " takes " << type
            << ", not tensors: it is already lowered; report on the "
               "tensor-level step (before convert-train-to-runtime)";
      else {
        std::string zeroD;
        llvm::raw_string_ostream(zeroD) << "tensor<" << type << ">";
        emitError(func.getLoc(), "train-memory-report: argument ")
            << index << " of @" << func.getSymName() << " is " << type
            << ", not a ranked tensor: the report measures tensors (a "
               "scalar input is a 0-d tensor, e.g. "
            << zeroD << ")";
      }
      return failure();
    }
    return success();
  }

  /// `func`'s memory and the plan it runs in (the one it carries, or one
  /// made here); unmaterialized train.remat regions are measured as they
  /// will run, on a copy with their recompute materialized.
  struct Measured {
    OwningOpRef<ModuleOp> materialized;
    std::optional<MemoryAnalysis> ownAnalysis;
    const FunctionMemory *memory = nullptr;
    std::optional<MemoryPlan> plan;
  };
  LogicalResult measure(func::FuncOp func, Measured &measured) {
    ModuleOp module = getOperation();
    if (failed(checkArguments(func)))
      return failure();
    if (func.walk([](RematOp) { return WalkResult::interrupt(); })
            .wasInterrupted()) {
      measured.materialized = module.clone();
      auto copy =
          measured.materialized->lookupSymbol<func::FuncOp>(func.getSymName());
      if (failed(materializeRemat(copy)))
        return failure();
      measured.ownAnalysis.emplace(copy);
      measured.memory = &measured.ownAnalysis->getFunctions().front();
    } else {
      measured.memory = getAnalysis<MemoryAnalysis>().lookup(func);
    }
    const FunctionMemory &memory = *measured.memory;
    if (failed(memory.checkCounts("train-memory-report")))
      return failure();
    if (MemoryPlan::hasPlanInIR(memory.getFunction())) {
      FailureOr<MemoryPlan> written =
          MemoryPlan::readFromIR(memory, "train-memory-report");
      if (failed(written))
        return failure();
      measured.plan = std::move(*written);
    } else {
      measured.plan.emplace(memory);
    }
    LLVM_DEBUG(llvm::dbgs()
               << "train-memory-report: @" << func.getSymName() << ": "
               << memory.getBuffers().size() << " buffers, arena "
               << measured.plan->getArenaBytes() << " B ("
               << (MemoryPlan::hasPlanInIR(func) ? "the step's"
                                                 : "planned here")
               << ")\n");
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> stages;
    if (function.empty())
      stages = pipelineStages(module);
    std::string errorMessage;
    std::unique_ptr<llvm::ToolOutputFile> file =
        openOutputFile(output, &errorMessage);
    if (!file) {
      emitError(module.getLoc(), "train-memory-report: ") << errorMessage;
      return signalPassFailure();
    }
    if (!stages.empty()) {
      if (format == ReportFormat::svg) {
        emitError(module.getLoc(), "train-memory-report: a pipeline's "
                                   "timeline is one stage's: name it "
                                   "(function=")
            << stages.front().getSymName() << ")";
        return signalPassFailure();
      }
      llvm::json::Array stageObjects;
      for (func::FuncOp stage : stages) {
        Measured measured;
        if (failed(measure(stage, measured)))
          return signalPassFailure();
        if (format == ReportFormat::json) {
          stageObjects.push_back(stageJSON(*measured.memory, *measured.plan));
          continue;
        }
        printStageText(file->os(), *measured.memory, *measured.plan);
      }
      if (format == ReportFormat::json)
        file->os() << llvm::formatv("{0:2}",
                                    llvm::json::Value(llvm::json::Object{
                                        {"stages", std::move(stageObjects)}}))
                   << "\n";
      file->keep();
      markAllAnalysesPreserved();
      return;
    }
    func::FuncOp func = selectFunction(module);
    if (!func)
      return signalPassFailure();
    Measured measured;
    if (failed(measure(func, measured)))
      return signalPassFailure();
    const FunctionMemory *memory = measured.memory;
    MemoryPlan &plan = *measured.plan;
    if (format == ReportFormat::json)
      file->os() << llvm::formatv("{0:2}", toJSON(*memory, plan)) << "\n";
    else if (format == ReportFormat::svg)
      printMemoryTimelineSvg(file->os(), *memory);
    else
      printText(file->os(), *memory, plan);
    file->keep();
    markAllAnalysesPreserved();
  }
};

} // namespace
} // namespace train
} // namespace mlir
