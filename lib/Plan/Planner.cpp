//===- Planner.cpp - the search behind trainmem-plan ----------------------===//
//
// Every candidate is compiled by the project's own passes (train-autodiff,
// train-remat, train-grad-accum, train-quantize-optimizer-state,
// train-materialize-remat, train-zero) and measured by MemoryAnalysis: the
// planner has no formula of its own for any byte it reports.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Plan/Planner.h"
#include "trainmem/Plan/TimeModel.h"
#include "trainmem/Analysis/MemoryPlan.h"

#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/Pipelines.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Model/Layers.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <thread>

namespace mlir {
namespace train {

llvm::StringRef stringifyPlanRemat(PlanRemat remat) {
  switch (remat) {
  case PlanRemat::none:
    return "none";
  case PlanRemat::selective:
    return "selective";
  case PlanRemat::full:
    return "full";
  case PlanRemat::budget:
    return "budget";
  }
  return "?";
}

llvm::StringRef stringifyPlanOffload(PlanOffload offload) {
  switch (offload) {
  case PlanOffload::none:
    return "none";
  case PlanOffload::states:
    return "states";
  case PlanOffload::statesAndUpdate:
    return "states+update";
  case PlanOffload::statesUpdateGradients:
    return "states+update+gradients";
  }
  return "?";
}

std::optional<PlanRemat> parsePlanRemat(llvm::StringRef name) {
  for (PlanRemat remat : {PlanRemat::none, PlanRemat::selective,
                          PlanRemat::full, PlanRemat::budget})
    if (stringifyPlanRemat(remat) == name)
      return remat;
  return std::nullopt;
}

std::optional<PlanOffload> parsePlanOffload(llvm::StringRef name) {
  for (PlanOffload offload :
       {PlanOffload::none, PlanOffload::states, PlanOffload::statesAndUpdate,
        PlanOffload::statesUpdateGradients})
    if (stringifyPlanOffload(offload) == name)
      return offload;
  return std::nullopt;
}

namespace {

constexpr MemoryCategory kPlanCategories[] = {
    MemoryCategory::Weights,     MemoryCategory::Gradients,
    MemoryCategory::Optimizer,   MemoryCategory::Gathered,
    MemoryCategory::Activations, MemoryCategory::Temporaries};

/// Bytes in GB, or in MB below a GB.
std::string gigabytes(uint64_t bytes) {
  if (bytes < 1000000000)
    return llvm::formatv("{0:F2} MB", static_cast<double>(bytes) / 1e6).str();
  return llvm::formatv("{0:F2} GB", static_cast<double>(bytes) / 1e9).str();
}

llvm::Error planError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Runs the passes `build` adds on `module`; the passes' errors (and
/// build's) as the error.
llvm::Error runPasses(
    MLIRContext &context, ModuleOp module,
    function_ref<LogicalResult(OpPassManager &,
                               function_ref<LogicalResult(const Twine &)>)>
        build) {
  std::string diagnostics;
  llvm::raw_string_ostream diagnosticStream(diagnostics);
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error)
      diagnosticStream << d.str() << "\n";
    return success();
  });
  PassManager pm(&context);
  // Verified once, at the end: the planner compiles thousands of
  // candidates, and verifying each after every pass (the budget's nested
  // measurements included) took 45 % of bench/planner.py's time.
  pm.enableVerifier(false);
  if (failed(build(pm, [&](const Twine &message) {
        diagnosticStream << message << "\n";
        return failure();
      })))
    return planError(StringRef(diagnostics).trim());
  if (failed(pm.run(module)) || failed(verify(module))) {
    StringRef error = StringRef(diagnostics).trim();
    return planError(error.empty() ? "the pipeline failed" : error);
  }
  return llvm::Error::success();
}

/// The compiled step of the last candidate measured without its offload,
/// by layer count: the offload variants of a candidate (consecutive in the
/// search) start from it instead of compiling it again.
struct CompiledSteps {
  /// By pipeline, micro-batch x steps and layers.
  std::map<std::string, OwningOpRef<ModuleOp>> steps;
};

/// The model at `layers` layers for `c` (the request's module as it is, if
/// it has one), compiled by train-step's passes for `options` (`c`'s)
/// without its offload.
llvm::Expected<OwningOpRef<ModuleOp>>
compileWithoutOffload(MLIRContext &context, const PlanRequest &request,
                      const PlanCandidate &c, const TrainStepOptions &options,
                      int64_t layers) {
  OwningOpRef<ModuleOp> module;
  if (request.module) {
    module = cast<ModuleOp>(request.module->clone());
    std::string why;
    if (failed(truncateLayers(*module, layers, why)))
      return planError("the model file at " + std::to_string(layers) +
                       " layers: " + why);
  } else {
    ModelConfig config = request.model;
    config.layers = layers;
    config.batch = c.microBatch * c.accumulation;
    std::string why;
    if (!validateConfig(config, why))
      return planError(why);
    module = buildModel(&context, config);
  }
  // Without its offload (measured per variant from this step) and with the
  // loop rolled (the planner plans it).
  if (llvm::Error error =
          runPasses(context, *module, [&](OpPassManager &pm, auto onError) {
            return buildTrainStepPipeline(pm, options, onError,
                                          {/*offload=*/false,
                                           /*planArena=*/false});
          }))
    return std::move(error);
  return module;
}

/// What the planner keeps of a compiled step's memory analysis.
PlanMeasure measureStep(func::FuncOp step, const FunctionMemory &memory,
                        const Hardware &hardware) {
  PlanMeasure out;
  // Each op's time in its phase: a rolled micro-batch loop's ops as many
  // times as it runs, the ops around it once.
  for (Operation *op : memory.getSchedule()) {
    double seconds = opSeconds(op, hardware);
    // The loop's sums: in the backward, where its parts are complete.
    unsigned phase = static_cast<unsigned>(memory.getPhase(op));
    if (auto loop = dyn_cast<AccumulateOp>(op)) {
      seconds = loopSumSeconds(loop, hardware);
      phase = static_cast<unsigned>(Phase::Backward);
    }
    if (seconds == 0)
      continue;
    for (auto loop = op->getParentOfType<AccumulateOp>(); loop;
         loop = loop->getParentOfType<AccumulateOp>())
      seconds *= static_cast<double>(loop.getStepsAttr().getInt());
    if (auto loop = dyn_cast<AccumulateOp>(op))
      seconds *= static_cast<double>(loop.getStepsAttr().getInt());
    out.phaseSeconds[phase] += seconds;
  }
  out.peak = memory.getPeakBytes();
  out.arena = std::max(MemoryPlan(memory).getArenaBytes(), out.peak);
  out.atPeak = memory.getAtPeak();
  // Each phase's most live bytes and its categories there.
  ArrayRef<Operation *> schedule = memory.getSchedule();
  ArrayRef<uint64_t> live = memory.getLiveBytes();
  std::array<int64_t, 3> phasePoint = {-1, -1, -1};
  for (size_t point = 1; point < live.size(); ++point) {
    unsigned phase =
        static_cast<unsigned>(memory.getPhase(schedule[point - 1]));
    if (phasePoint[phase] < 0 || live[point] > out.phasePeak[phase]) {
      out.phasePeak[phase] = live[point];
      phasePoint[phase] = static_cast<int64_t>(point);
    }
  }
  for (const Buffer &buffer : memory.getBuffers())
    for (unsigned phase = 0; phase < 3; ++phase)
      if (!buffer.host && phasePoint[phase] >= 0 &&
          buffer.firstPoint <= static_cast<uint64_t>(phasePoint[phase]) &&
          static_cast<uint64_t>(phasePoint[phase]) <= buffer.lastPoint)
        out.phaseAtPeak[phase][static_cast<unsigned>(buffer.category)] +=
            buffer.bytes;
  // A rolled micro-batch loop's ops are counted once: its FLOPs are one
  // micro-batch's, multiplied here by the steps (the few ops outside the
  // loop, the gradients' sums, are counted that many times too: a
  // negligible overcount).
  uint64_t trips = 1;
  step.walk([&](AccumulateOp loop) {
    trips = static_cast<uint64_t>(loop.getStepsAttr().getInt());
  });
  out.forwardFlops = memory.getFlops(Phase::Forward) * trips;
  out.backwardFlops = memory.getFlops(Phase::Backward) * trips;
  out.optimizerFlops = memory.getFlops(Phase::Optimizer);
  out.recomputeFlops = memory.getRecomputeFlops() * trips;
  const CategoryBytes &totals = memory.getTotals();
  out.modelStateBytes =
      totals[static_cast<unsigned>(MemoryCategory::Weights)] +
      totals[static_cast<unsigned>(MemoryCategory::Gradients)] +
      totals[static_cast<unsigned>(MemoryCategory::Optimizer)];
  out.bytesSent = 0;
  for (auto &[key, traffic] : collectiveTrafficOf(step)) {
    // A pipeline stage's exchanges (a ring attention's are its context
    // group's collectives).
    if (key.kind == "send_recv" && key.axis != "context")
      out.exchangeBytes += traffic.bytes;
    else
      out.bytesSent += traffic.bytes;
    if (key.axis == "tensor")
      out.tensorBytes += traffic.bytes;
  }
  out.hostBytes = memory.getHostBytes();
  out.hostDeviceBytes = memory.getHostDeviceBytes();
  out.activationTransferBytes = memory.getActivationTransferBytes();
  return out;
}

/// Folds the Hessian step's measure into the step's (Sophia: the runner
/// calls it every `every` steps, in the same memory). While it runs, the
/// step's state that it does not read (m) stays resident: its bytes join
/// the Hessian step's at every point. Each phase's most live bytes are the
/// larger of the two functions'; its FLOPs count once per `every` steps.
void foldHessianStep(func::FuncOp step, const FunctionMemory &stepMemory,
                     const FunctionMemory &hessianMemory, int64_t every,
                     const Hardware &hardware, PlanMeasure &out) {
  func::FuncOp hessian = hessianMemory.getFunction();
  llvm::DenseSet<std::pair<Attribute, Attribute>> read;
  for (unsigned i = 0; i < hessian.getNumArguments(); ++i)
    if (auto marker = getStateMarker(hessian.getArgAttrDict(i)))
      read.insert(*marker);
  CategoryBytes resident{};
  uint64_t residentBytes = 0;
  for (const Buffer &buffer : stepMemory.getBuffers()) {
    auto arg = dyn_cast<BlockArgument>(buffer.owner);
    if (buffer.host || !arg || arg.getOwner() != &step.front())
      continue;
    auto marker = getStateMarker(step.getArgAttrDict(arg.getArgNumber()));
    if (!marker || read.contains(*marker))
      continue;
    resident[static_cast<unsigned>(buffer.category)] += buffer.bytes;
    residentBytes += buffer.bytes;
  }
  PlanMeasure h = measureStep(hessian, hessianMemory, hardware);
  for (unsigned phase = 0; phase < 3; ++phase) {
    uint64_t bytes = h.phasePeak[phase] + residentBytes;
    if (bytes <= out.phasePeak[phase])
      continue;
    out.phasePeak[phase] = bytes;
    for (unsigned c = 0; c < kNumMemoryCategories; ++c)
      out.phaseAtPeak[phase][c] = h.phaseAtPeak[phase][c] + resident[c];
    if (bytes > out.peak) {
      out.peak = bytes;
      out.atPeak = out.phaseAtPeak[phase];
    }
  }
  // The Hessian step plans its arena around the step's state: no smaller
  // than its most live bytes with that state.
  out.arena = std::max(out.arena, out.peak);
  auto perStep = [&](uint64_t flops) {
    return (flops + static_cast<uint64_t>(every) / 2) /
           static_cast<uint64_t>(every);
  };
  out.forwardFlops += perStep(h.forwardFlops);
  out.backwardFlops += perStep(h.backwardFlops);
  out.optimizerFlops += perStep(h.optimizerFlops);
  out.recomputeFlops += perStep(h.recomputeFlops);
  for (unsigned phase = 0; phase < 3; ++phase)
    out.phaseSeconds[phase] += h.phaseSeconds[phase] / static_cast<double>(every);
}

/// Compiles the model at `layers` layers for `c` and measures it (with its
/// Hessian step, if it has one); the passes' diagnostics as the error.
llvm::Error measureAt(MLIRContext &context, const PlanRequest &request,
                      const PlanCandidate &c, int64_t layers, PlanMeasure &out,
                      CompiledSteps &cache) {
  llvm::Expected<TrainStepOptions> options =
      c.stepOptions(request.ranks, request.memoryBytes);
  if (!options)
    return options.takeError();
  std::string refusal;
  FailureOr<std::string> passes =
      printTrainStepPipeline(*options,
                             [&](const Twine &message) {
                               refusal = message.str();
                               return failure();
                             },
                             {/*offload=*/false, /*planArena=*/false});
  if (failed(passes))
    return planError(refusal);
  std::string baseKey =
      *passes +
      llvm::formatv("/{0}x{1}/{2}", c.microBatch, c.accumulation, layers).str();
  OwningOpRef<ModuleOp> &base = cache.steps[baseKey];
  if (!base) {
    llvm::Expected<OwningOpRef<ModuleOp>> compiled =
        compileWithoutOffload(context, request, c, *options, layers);
    if (!compiled)
      return compiled.takeError();
    base = std::move(*compiled);
  }
  OwningOpRef<ModuleOp> module = cast<ModuleOp>(base->clone());
  if (options->offload)
    if (llvm::Error error =
            runPasses(context, *module, [&](OpPassManager &pm, auto) {
              addPass(pm, *options->offload);
              return success();
            }))
      return error;
  Operation *marked = findMarkedStep(*module, "trainmem-plan");
  auto step = dyn_cast_or_null<func::FuncOp>(marked);
  if (!step)
    return planError("no training step after the pipeline");
  // The loop as train-plan-arena plans it (its 16-bit parts cast in the
  // body, as the unrolled step casts them).
  castPartsToSums(step);
  MemoryAnalysis analysis(step);
  const FunctionMemory &memory = analysis.getFunctions().front();
  if (failed(memory.checkCounts("trainmem-plan")))
    return planError("a count overflows 64 bits");
  out = measureStep(step, memory, request.hardware);
  if (func::FuncOp hessian = findHessianStep(step)) {
    // findHessianStep finds it by this attribute.
    auto attr = cast<HessianStepAttr>(hessian->getAttr(kHessianStepAttrName));
    MemoryAnalysis hessianAnalysis(hessian);
    const FunctionMemory &hessianMemory =
        hessianAnalysis.getFunctions().front();
    if (failed(hessianMemory.checkCounts("trainmem-plan")))
      return planError("a count of the Hessian step overflows 64 bits");
    foldHessianStep(step, memory, hessianMemory, attr.getEvery(),
                    request.hardware, out);
  }
  return llvm::Error::success();
}

/// a + (b - a) · t for counts measured at two layer counts, t layers past
/// the first; never below zero. A count at or past 2^63 sets `overflow`
/// (as MemoryAnalysis refuses counts that overflow, instead of printing a
/// saturated one).
uint64_t extrapolateCount(uint64_t a, uint64_t b, int64_t t, bool &overflow) {
  double value = static_cast<double>(a) +
                 (static_cast<double>(b) - static_cast<double>(a)) *
                     static_cast<double>(t);
  if (!(value < 0x1p63)) {
    overflow = true;
    return 0;
  }
  return value <= 0.0 ? 0 : static_cast<uint64_t>(value + 0.5);
}

PlanMeasure extrapolate(const PlanMeasure &a, const PlanMeasure &b, int64_t t,
                        bool &overflow) {
  auto extrapolate = [&](uint64_t x, uint64_t y, int64_t layers) {
    return extrapolateCount(x, y, layers, overflow);
  };
  PlanMeasure m;
  // Each phase's most live bytes are linear in the layers; the peak is the
  // largest of them, with that phase's categories.
  for (unsigned phase = 0; phase < 3; ++phase) {
    m.phasePeak[phase] = extrapolate(a.phasePeak[phase], b.phasePeak[phase], t);
    for (unsigned c = 0; c < kNumMemoryCategories; ++c)
      m.phaseAtPeak[phase][c] =
          extrapolate(a.phaseAtPeak[phase][c], b.phaseAtPeak[phase][c], t);
    if (m.phasePeak[phase] > m.peak) {
      m.peak = m.phasePeak[phase];
      m.atPeak = m.phaseAtPeak[phase];
    }
  }
  // The placement is greedy: an arena linear at 2, 3 and 4 layers can
  // still bend later, and the extrapolated one is within a few 1e-3 of the
  // whole model's (PlannerTest). The best is measured whole again
  // (remeasureBest).
  m.arena = std::max(extrapolate(a.arena, b.arena, t), m.peak);
  m.forwardFlops = extrapolate(a.forwardFlops, b.forwardFlops, t);
  m.backwardFlops = extrapolate(a.backwardFlops, b.backwardFlops, t);
  m.optimizerFlops = extrapolate(a.optimizerFlops, b.optimizerFlops, t);
  m.recomputeFlops = extrapolate(a.recomputeFlops, b.recomputeFlops, t);
  // Times are sums over the ops: linear in the layers where the counts are.
  for (unsigned phase = 0; phase < 3; ++phase)
    m.phaseSeconds[phase] =
        std::max(0.0, a.phaseSeconds[phase] +
                          (b.phaseSeconds[phase] - a.phaseSeconds[phase]) *
                              static_cast<double>(t));
  m.bytesSent = extrapolate(a.bytesSent, b.bytesSent, t);
  m.exchangeBytes = extrapolate(a.exchangeBytes, b.exchangeBytes, t);
  m.tensorBytes = extrapolate(a.tensorBytes, b.tensorBytes, t);
  m.unitsInFlight = b.unitsInFlight;
  m.modelStateBytes = extrapolate(a.modelStateBytes, b.modelStateBytes, t);
  m.hostBytes = extrapolate(a.hostBytes, b.hostBytes, t);
  m.hostDeviceBytes = extrapolate(a.hostDeviceBytes, b.hostDeviceBytes, t);
  m.activationTransferBytes =
      extrapolate(a.activationTransferBytes, b.activationTransferBytes, t);
  return m;
}

/// The layer counts a candidate is measured at: three, to see that its
/// counts grow linearly (then they are extrapolated from the last two).
constexpr int64_t kFirstLayers = 2, kSecondLayers = 3, kThirdLayers = 4;

/// The most layers a candidate whose counts are not linear at small layer
/// counts is compiled whole with.
constexpr int64_t kWholeModelLayers = 1024;

/// The most sequences per rank and step the planner searches: beyond them
/// the steps it would compile grow without bound.
constexpr int64_t kMaxPerRankBatch = 65536;

/// Whether c - b == b - a for every phase peak and count of the measures
/// at three consecutive layer counts (what extrapolation assumes).
bool linear(const PlanMeasure &a, const PlanMeasure &b, const PlanMeasure &c) {
  auto same = [](uint64_t x, uint64_t y, uint64_t z) {
    return static_cast<int64_t>(z - y) == static_cast<int64_t>(y - x);
  };
  for (unsigned phase = 0; phase < 3; ++phase) {
    if (!same(a.phasePeak[phase], b.phasePeak[phase], c.phasePeak[phase]))
      return false;
    for (unsigned k = 0; k < kNumMemoryCategories; ++k)
      if (!same(a.phaseAtPeak[phase][k], b.phaseAtPeak[phase][k],
                c.phaseAtPeak[phase][k]))
        return false;
  }
  return same(a.arena, b.arena, c.arena) &&
         same(a.forwardFlops, b.forwardFlops, c.forwardFlops) &&
         same(a.backwardFlops, b.backwardFlops, c.backwardFlops) &&
         same(a.recomputeFlops, b.recomputeFlops, c.recomputeFlops) &&
         same(a.bytesSent, b.bytesSent, c.bytesSent) &&
         same(a.modelStateBytes, b.modelStateBytes, c.modelStateBytes) &&
         same(a.hostBytes, b.hostBytes, c.hostBytes) &&
         same(a.hostDeviceBytes, b.hostDeviceBytes, c.hostDeviceBytes) &&
         same(a.activationTransferBytes, b.activationTransferBytes,
              c.activationTransferBytes);
}

} // namespace

llvm::Expected<TrainStepOptions>
PlanCandidate::stepOptions(int64_t ranks, uint64_t memoryBytes) const {
  TrainStepOptions options;
  if (tensorParallel > 1) {
    TrainTensorParallelPassOptions &t = options.tensorParallel.emplace();
    t.size = tensorParallel;
    t.sequenceParallel = sequenceParallel;
    t.vocabularyParallel = vocabularyParallel;
  }
  options.fuseAttention = fuseAttention;
  options.fuseElementwise = fuseElementwise;
  if (contextParallel > 1) {
    TrainContextParallelPassOptions &c = options.contextParallel.emplace();
    c.size = contextParallel;
    c.exchange = contextExchange;
  }
  std::string message;
  llvm::raw_string_ostream errors(message);
  if (failed(parsePassOptions(autodiffOptions(), options.autodiff, errors)))
    return planError("the recipe '" + autodiffOptions() +
                     "': " + StringRef(message).trim());
  switch (remat) {
  case PlanRemat::none:
    break;
  case PlanRemat::selective:
    options.remat.emplace().policy = RematPolicy::selective;
    break;
  case PlanRemat::full:
    options.remat.emplace().policy = RematPolicy::full;
    break;
  case PlanRemat::budget:
    options.remat.emplace().policy = RematPolicy::budget;
    options.remat->budget = std::to_string(memoryBytes);
    break;
  }
  if (accumulation > 1) {
    options.gradAccum.emplace().steps = accumulation;
    options.gradAccum->accumulateDtype = sumDtype;
  }
  if (pipelineParallel > 1) {
    TrainPipelinePassOptions &pipeline = options.pipeline.emplace();
    pipeline.stages = pipelineParallel;
    pipeline.microBatches = accumulation;
    pipeline.virtualStages = virtualStages;
    pipeline.schedule = virtualStages > 1 ? PipelineSchedule::interleaved
                                          : PipelineSchedule::one_f_one_b;
  }
  if (eightBit)
    options.quantize.emplace();
  if (stage >= 0) {
    TrainZeroPassOptions &zero = options.zero.emplace();
    zero.stage = stage;
    zero.ranks = dataRanks(ranks);
  }
  options.releaseGradients = releaseGradients;
  if (offloadActivations)
    options.offloadActivations.emplace().what =
        remat == PlanRemat::none ? OffloadActivationsWhat::all
                                 : OffloadActivationsWhat::checkpoints;
  if (offload != PlanOffload::none) {
    options.offload.emplace().what = offload == PlanOffload::states
                                         ? OffloadWhat::states
                                         : OffloadWhat::statesAndUpdate;
    if (offload == PlanOffload::statesUpdateGradients)
      options.offload->gradients = OffloadGradients::host;
  }
  return options;
}

std::string PlanCandidate::passPipeline(int64_t ranks,
                                        uint64_t memoryBytes) const {
  llvm::Expected<TrainStepOptions> options = stepOptions(ranks, memoryBytes);
  if (!options)
    return "<" + llvm::toString(options.takeError()) + ">";
  std::string why;
  FailureOr<std::string> passes =
      printTrainStepPipeline(*options, [&](const Twine &message) {
        why = message.str();
        return failure();
      });
  return succeeded(passes) ? *passes : "<" + why + ">";
}

/// Whether `recipe` (empty: the default) clips the gradients' norm.
static bool recipeClips(StringRef recipe) {
  SmallVector<StringRef> words;
  (recipe.empty() ? StringRef(kDefaultRecipe) : recipe)
      .split(words, ' ', -1, /*KeepEmpty=*/false);
  for (StringRef word : words) {
    auto [name, value] = word.split('=');
    double norm = 0;
    if (name.trim() == "clip-norm" && !value.trim().getAsDouble(norm))
      return norm > 0;
  }
  return false;
}

std::string PlanCandidate::autodiffOptions() const {
  return autodiffOptionsFor(recipe, optimizer, releaseGradients);
}

std::string PlanCandidate::tensorParallelOptions() const {
  return llvm::formatv("size={0}{1}{2}", tensorParallel,
                       sequenceParallel ? " sequence-parallel=true" : "",
                       vocabularyParallel ? "" : " vocabulary-parallel=false");
}

std::string PlanCandidate::runOptions(uint64_t memoryBytes) const {
  std::string text;
  if (tensorParallel > 1)
    text += " --tensor-parallel=\"" + tensorParallelOptions() + "\"";
  if (fuseAttention)
    text += " --fuse-attention";
  if (contextRing())
    text += llvm::formatv(" --context-parallel=\"size={0} exchange=ring\"",
                          contextParallel);
  else if (contextParallel > 1)
    text += llvm::formatv(" --context-parallel=size={0}", contextParallel);
  if (fuseElementwise)
    text += " --fuse-elementwise";
  if (remat == PlanRemat::budget)
    text += llvm::formatv(" --remat=\"policy=budget budget={0}\"", memoryBytes);
  else if (remat != PlanRemat::none)
    text += " --remat=policy=" + stringifyPlanRemat(remat).str();
  if (accumulation > 1 && sumDtype != AccumDtype::f32)
    text += llvm::formatv(" --grad-accum=\"steps={0} accumulate-dtype={1}\"",
                          accumulation, accumDtypeName(sumDtype));
  else if (accumulation > 1 && pipelineParallel == 1)
    text += llvm::formatv(" --grad-accum=steps={0}", accumulation);
  if (pipelineParallel > 1)
    text += " --pipeline=\"" + pipelineOptions() + "\"";
  if (eightBit)
    text += " --quantize-optimizer-state";
  // The recipe with the plan's optimizer, unless trainmem-run's default.
  std::string autodiff = autodiffOptions();
  if (autodiff != kDefaultRecipe)
    text += " --autodiff-options=\"" + autodiff + "\"";
  if (releaseGradients)
    text += " --release-gradients";
  if (stage >= 0)
    text += llvm::formatv(" --zero=stage={0}", stage);
  if (offload == PlanOffload::statesUpdateGradients)
    text += " --offload-optimizer=\"states+update gradients=host\"";
  else if (offload != PlanOffload::none)
    text += " --offload-optimizer=" + stringifyPlanOffload(offload).str();
  if (offloadActivations)
    text += remat == PlanRemat::none ? " --offload-activations=what=all"
                                     : " --offload-activations";
  return text;
}

std::string PlanCandidate::pipelineOptions() const {
  std::string text = llvm::formatv("stages={0} micro-batches={1}",
                                   pipelineParallel, accumulation);
  if (virtualStages > 1)
    text += llvm::formatv(" schedule=interleaved virtual={0}", virtualStages);
  return text;
}

std::string PlanCandidate::describe() const {
  std::string text =
      llvm::formatv("micro-batch {0} x {1}", microBatch, accumulation);
  if (sumDtype != AccumDtype::f32)
    text +=
        llvm::formatv(" (gradients summed in {0})", accumDtypeName(sumDtype));
  text += remat == PlanRemat::none
              ? ", no recompute"
              : ", " + stringifyPlanRemat(remat).str() + " recompute";
  if (tensorParallel > 1)
    text += llvm::formatv(", tensor-parallel {0}{1}{2}", tensorParallel,
                          sequenceParallel ? " + sequence-parallel" : "",
                          vocabularyParallel ? "" : " (vocabulary whole)");
  if (contextParallel > 1)
    text += llvm::formatv(", context-parallel {0}{1}", contextParallel,
                          contextRing() ? " (ring)" : "");
  if (pipelineParallel > 1)
    text +=
        virtualStages > 1
            ? llvm::formatv(", pipeline {0} x {1} chunks (interleaved)",
                            pipelineParallel, virtualStages)
                  .str()
            : llvm::formatv(", pipeline {0} (1F1B)", pipelineParallel).str();
  if (stage >= 0)
    text += llvm::formatv(", ZeRO-{0}", stage);
  if (eightBit)
    text += ", 8-bit state";
  if (optimizer != "adamw")
    text += ", " + optimizer;
  if (releaseGradients)
    text += ", gradient release";
  if (offload != PlanOffload::none)
    text += ", offload " + stringifyPlanOffload(offload).str();
  if (offloadActivations)
    text += remat == PlanRemat::none ? ", activations to host"
                                     : ", checkpoints to host";
  if (fuseAttention)
    text += ", fused attention";
  if (fuseElementwise)
    text += ", fused element-wise";
  return text;
}

llvm::Error mlir::train::batchOfModule(ModuleOp module, int64_t &batch,
                                       int64_t &seq) {
  for (auto func : module.getOps<func::FuncOp>())
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto input = func.getArgAttrOfType<StringAttr>(i, kInputAttrName);
      auto type = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
      if (!input || input.getValue() != "tokens" || !type ||
          type.getRank() != 2 || !type.hasStaticShape())
        continue;
      batch = type.getDimSize(0);
      seq = type.getDimSize(1);
      // trainmem-run feeds the batch's targets to the argument marked so:
      // a plan for a module whose loss reads another is one it refuses.
      BlockArgument targets = findLossTargetsArgument(func);
      auto name = targets ? func.getArgAttrOfType<StringAttr>(
                                targets.getArgNumber(), kInputAttrName)
                          : StringAttr();
      if (targets && (!name || name.getValue() != "targets"))
        return planError(
            llvm::formatv("the loss of @{0} reads its targets from argument "
                          "#{1}, which is not marked {2} = \"targets\": "
                          "trainmem-run feeds the batch's targets to the "
                          "argument so marked; mark it",
                          func.getSymName(), targets.getArgNumber(),
                          kInputAttrName)
                .str());
      return llvm::Error::success();
    }
  return planError(
      "the model file has no tokens input (a function argument marked "
      "train.input = \"tokens\" of type tensor<batch x seq x i...>, as "
      "trainmem-model writes it)");
}

/// The micro-batches of a batch of `n` sequences: its divisors.
static std::vector<int64_t> divisorsOf(int64_t n) {
  std::vector<int64_t> divisors;
  for (int64_t m = 1; m <= n; ++m)
    if (n % m == 0)
      divisors.push_back(m);
  return divisors;
}

std::vector<int64_t> tensorParallelSizes(const PlanRequest &request,
                                         int64_t maxSize) {
  std::vector<int64_t> sizes = {1};
  const ModelConfig &m = request.model;
  for (int64_t t = 2; t <= std::min<int64_t>(maxSize, request.ranks); ++t)
    if (request.ranks % t == 0 && m.heads % t == 0 &&
        (m.kvHeads % t == 0 || t % m.kvHeads == 0))
      sizes.push_back(t);
  return sizes;
}

/// The request's empty choice lists (recompute, ZeRO stages, 8-bit state,
/// fusion, offload, tensor and sequence parallelism) as their defaults;
/// an error for a stage or a tensor-parallel size the ranks do not allow.
AccumDtype sixteenBitGradients(const PlanRequest &request) {
  auto of = [](Type type) {
    if (type.isBF16())
      return AccumDtype::bf16;
    if (type.isF16())
      return AccumDtype::f16;
    return AccumDtype::f32;
  };
  if (!request.module) {
    if (request.model.dtype == "bf16")
      return AccumDtype::bf16;
    if (request.model.dtype == "f16")
      return AccumDtype::f16;
    return AccumDtype::f32;
  }
  AccumDtype found = AccumDtype::f32;
  request.module->walk([&](func::FuncOp func) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (found == AccumDtype::f32 && func.getArgAttr(i, kParamAttrName))
        found = of(getElementTypeOrSelf(func.getArgument(i).getType()));
  });
  return found;
}

static llvm::Error completeSpace(PlanRequest &request) {
  if (request.remats.empty())
    request.remats = {PlanRemat::none, PlanRemat::selective, PlanRemat::full,
                      PlanRemat::budget};
  if (request.stages.empty()) {
    if (request.ranks > 1)
      request.stages = {0, 1, 2, 3};
    else
      request.stages = {-1};
  }
  for (int64_t stage : request.stages)
    if (stage < -1 || stage > 3 || (stage == -1) != (request.ranks == 1)) {
      return planError(
          llvm::formatv("ZeRO stage {0} on {1} ranks: stages are 0 to 3 "
                        "on more than one rank, none on one",
                        stage, request.ranks));
    }
  if (request.eightBit.empty())
    request.eightBit = {false, true};
  if (request.releaseGradients.empty())
    request.releaseGradients = {false};
  if (request.fuseAttention.empty())
    request.fuseAttention = {false, true};
  if (request.offloads.empty())
    request.offloads = {PlanOffload::none, PlanOffload::states,
                        PlanOffload::statesAndUpdate,
                        PlanOffload::statesUpdateGradients};
  if (request.offloadActivations.empty()) {
    request.offloadActivations = {false};
    request.defaultOffloadActivations = true;
  }
  if (request.sixteenBitSums.empty()) {
    request.sixteenBitSums = {false};
    request.defaultSixteenBitSums = true;
  }
  if (request.tensorParallel.empty()) {
    request.tensorParallel = {1};
    request.defaultTensorParallel = true;
  }
  for (int64_t t : request.tensorParallel)
    if (t < 1 || request.ranks % t != 0)
      return planError(llvm::formatv(
          "tensor-parallel size {0} does not divide the {1} ranks", t,
          request.ranks));
  if (request.contextParallel.empty()) {
    request.contextParallel = {1};
    request.defaultContextParallel = true;
  }
  if (request.contextExchanges.empty())
    request.contextExchanges = {ContextExchange::allGather,
                                ContextExchange::ring};
  for (int64_t c : request.contextParallel) {
    if (c < 1 || request.ranks % c != 0)
      return planError(llvm::formatv(
          "context-parallel size {0} does not divide the {1} ranks", c,
          request.ranks));
    if (c > 1 && request.model.seq % (2 * c) != 0)
      return planError(llvm::formatv(
          "context-parallel size {0} does not cut the sequence ({1}) into "
          "2 x {0} balanced chunks: give a size whose double divides it",
          c, request.model.seq));
  }
  if (request.sequenceParallel.empty())
    request.sequenceParallel = {false, true};
  if (request.pipelineParallel.empty())
    request.pipelineParallel = {1};
  if (request.virtualStages.empty())
    request.virtualStages = {1};
  for (int64_t p : request.pipelineParallel) {
    if (p < 1 || request.ranks % p != 0)
      return planError(llvm::formatv(
          "pipeline-parallel size {0} does not divide the {1} ranks", p,
          request.ranks));
    if (p > 1 && request.module)
      return planError("--pipeline-parallel plans a preset's layers (cut "
                       "evenly); a model file's stages are not planned yet "
                       "(docs/Pipeline.md, \"Not built yet\")");
    if (request.model.layers % p != 0)
      return planError(llvm::formatv(
          "pipeline-parallel size {0} does not divide the {1} layers", p,
          request.model.layers));
  }
  for (int64_t v : request.virtualStages) {
    if (v < 1)
      return planError(
          llvm::formatv("virtual stages must be at least 1, got {0}", v));
    if (v > 1 && llvm::none_of(request.pipelineParallel, [&](int64_t p) {
          return p > 1 && request.model.layers % (p * v) == 0;
        }))
      return planError(llvm::formatv(
          "virtual stages {0}: no pipeline-parallel size p > 1 asked for "
          "cuts the {1} layers into p x {0} chunks",
          v, request.model.layers));
  }
  // A pipeline's batch must give each stage a micro-batch (1F1B): the
  // most model-parallel groups leave the most sequences per pipeline.
  int64_t groups = 1;
  for (int64_t t : request.tensorParallel)
    for (int64_t c : request.contextParallel)
      groups = std::max(groups, t * c);
  for (int64_t p : request.pipelineParallel) {
    if (p == 1 || request.ranks % (groups * p) != 0)
      continue;
    int64_t perPipeline = request.globalBatch /
                          std::max<int64_t>(1, request.ranks / (groups * p));
    if (perPipeline < p)
      return planError(llvm::formatv(
          "pipeline-parallel size {0}: the global batch {1} leaves {2} "
          "sequence(s) per pipeline, fewer than its {0} stages' micro-batches "
          "(1F1B runs at least one per stage): a larger --global-batch or "
          "fewer stages",
          p, request.globalBatch, perPipeline));
  }
  return llvm::Error::success();
}

llvm::Error completePlanRequest(PlanRequest &request) {
  if (request.ranks < 1) {
    return planError("--ranks must be at least 1");
  }
  if (request.module) {
    int64_t batch = 0, seq = 0;
    if (llvm::Error error = batchOfModule(request.module, batch, seq))
      return error;
    if (request.globalBatch == 0)
      request.globalBatch = batch * request.ranks;
    if (request.globalBatch != batch * request.ranks)
      return planError(llvm::formatv(
          "the model file's batch is {0} per rank: "
          "the global batch on {1} ranks is {2}, "
          "not {3}",
          batch, request.ranks, batch * request.ranks, request.globalBatch));
    request.model.seq = seq;
    request.model.batch = batch;
    // Uniform layers are extrapolated from small counts, as a preset's.
    LayerStructure structure = analyzeLayers(request.module);
    request.model.layers = structure.layers;
    if (!structure.uniform && !request.exact)
      request.wholeModelReason =
          "its layers are not uniform (" + structure.why + "): compiled whole";
    if (!structure.uniform)
      request.exact = true;
  }
  // Model-parallel groups (tensor, context, pipeline) train a data rank's
  // share together: the global batch is then a multiple of the data
  // ranks, checked per candidate.
  auto parallel = [](const std::vector<int64_t> &sizes) {
    return llvm::any_of(sizes, [](int64_t size) { return size > 1; });
  };
  bool groups = parallel(request.tensorParallel) ||
                parallel(request.contextParallel) ||
                parallel(request.pipelineParallel);
  if (request.globalBatch < 1 ||
      (request.globalBatch % request.ranks != 0 && !groups)) {
    return planError(
        llvm::formatv("the global batch {0} must be a positive multiple "
                      "of the ranks ({1}), or of the data ranks that "
                      "--tensor-parallel, --context-parallel or "
                      "--pipeline-parallel groups leave",
                      request.globalBatch, request.ranks));
  }
  if (request.memoryBytes == 0) {
    return planError("no memory budget (--memory, or a hardware with memory)");
  }
  int64_t perRank = std::max<int64_t>(1, request.globalBatch / request.ranks);
  if (perRank > kMaxPerRankBatch) {
    return planError(
        llvm::formatv("{0} sequences per rank and step: the planner "
                      "searches up to {1}",
                      perRank, kMaxPerRankBatch));
  }
  if (request.microBatches.empty()) {
    request.defaultMicroBatches = true;
    if (request.globalBatch % request.ranks == 0)
      request.microBatches = divisorsOf(perRank);
  }
  for (int64_t m : request.microBatches)
    if (m < 1 || perRank % m != 0 || request.globalBatch % request.ranks != 0) {
      return planError(llvm::formatv("micro-batch {0} does not divide the {1} "
                                     "sequences each rank takes per step",
                                     m, perRank));
    }
  if (llvm::Error error = completeSpace(request))
    return error;
  // Activation offload needs host memory to hold the activations: where
  // the hardware's figures give none, it is refused when asked for and
  // never escalated to.
  if (request.hardware.hostMemoryBytes == 0) {
    if (llvm::is_contained(request.offloadActivations, true))
      return planError(llvm::formatv(
          "--offload-activations: the hardware '{0}' gives no host memory "
          "to offload to: add \"host_memory_bytes\" (a node's system "
          "memory over its devices) to its JSON, or search with "
          "--offload-activations off",
          request.hardware.name));
    request.defaultOffloadActivations = false;
  }
  std::string why;
  if (!request.module && !validateConfig(request.model, why)) {
    return planError("the model: " + why);
  }
  return llvm::Error::success();
}

void predictThroughput(PlanCandidate &c, const PlanRequest &request) {
  const Hardware &hw = request.hardware;
  const PlanMeasure &m = c.measure;
  // Each op at its own rate (TimeModel.h), one after another.
  c.computeSeconds = m.phaseSeconds[static_cast<unsigned>(Phase::Forward)] +
                     m.phaseSeconds[static_cast<unsigned>(Phase::Backward)];
  c.optimizerSeconds = m.phaseSeconds[static_cast<unsigned>(Phase::Optimizer)];
  // Ranks that share one device (the cores of this machine, measured with
  // all of them) each run at their share of it.
  if (hw.sharedByRanks) {
    c.computeSeconds *= static_cast<double>(request.ranks);
    c.optimizerSeconds *= static_cast<double>(request.ranks);
  }
  c.communicationSeconds =
      static_cast<double>(m.bytesSent) / hw.interconnectBandwidth;
  // Offload of the optimizer: its bytes over the host link, not
  // overlapped; with the update on the host, its FLOPs at the host's rate
  // instead of the device's update (the device keeps weights and gradients
  // only).
  uint64_t activationBytes =
      std::min(m.activationTransferBytes, m.hostDeviceBytes);
  c.offloadSeconds = static_cast<double>(m.hostDeviceBytes - activationBytes) /
                     hw.hostBandwidth;
  // Offload of activations: a device copies on a side stream, each layer's
  // out while the next layer's forward runs and back while the one after
  // it (prefetch 1) runs its backward (docs/LongContext.md); what the
  // forward and the backward do not cover is exposed. Ranks sharing this
  // machine's cores (a calibrated CPU) copy in line.
  double copies = static_cast<double>(activationBytes) / 2 / hw.hostBandwidth;
  if (hw.sharedByRanks)
    c.offloadSeconds += 2 * copies;
  else
    c.offloadSeconds +=
        std::max(0.0,
                 copies -
                     m.phaseSeconds[static_cast<unsigned>(Phase::Forward)]) +
        std::max(0.0,
                 copies -
                     m.phaseSeconds[static_cast<unsigned>(Phase::Backward)]);
  if (c.offload == PlanOffload::statesAndUpdate ||
      c.offload == PlanOffload::statesUpdateGradients)
    c.optimizerSeconds = static_cast<double>(m.optimizerFlops) / hw.hostFlops;
  // A pipeline: its slowest stage's pace per micro-batch, m of them and
  // (p - 1) / v more while the pipeline fills and drains (the bubble); the
  // exchanges over NVLink within a node, over the network where a
  // pipeline's p x t x c ranks span nodes (Megatron's layout: a stage's
  // peer is t x c ranks away).
  c.bubbleSeconds = c.pointToPointSeconds = 0;
  if (c.pipelineParallel > 1) {
    double pace = m.stageMicroBatchSeconds;
    if (hw.sharedByRanks)
      pace *= static_cast<double>(request.ranks);
    c.bubbleSeconds = pace * static_cast<double>(c.pipelineParallel - 1) /
                      static_cast<double>(c.virtualStages);
    c.computeSeconds =
        pace * static_cast<double>(c.accumulation) + c.bubbleSeconds;
    int64_t span = c.pipelineParallel * c.tensorParallel * c.contextParallel;
    double link = span > hw.ranksPerNode && hw.nodeBandwidth > 0
                      ? hw.nodeBandwidth
                      : hw.interconnectBandwidth;
    c.pointToPointSeconds = static_cast<double>(m.exchangeBytes) / link;
  }
  c.stepSeconds = c.computeSeconds + c.optimizerSeconds +
                  c.communicationSeconds + c.offloadSeconds +
                  c.pointToPointSeconds;
  // A tensor group's t devices share its sequences, a pipeline's p stages
  // its micro-batches.
  double tokens =
      static_cast<double>(c.microBatch * c.accumulation * request.model.seq) /
      static_cast<double>(c.tensorParallel * c.contextParallel *
                          c.pipelineParallel);
  c.tokensPerSecond = c.stepSeconds > 0 ? tokens / c.stepSeconds : 0.0;
}

namespace {

/// The candidate's choices apart from its recompute, as a key.
std::string candidateKey(const PlanCandidate &c) {
  return llvm::formatv(
             "{0}/{1}/{2}/{3}/{4}/{5}/{6}/{7}/{8}/{9}/{10}/{11}/{12}/{13}/{14}",
             c.microBatch, c.stage, c.eightBit, static_cast<int>(c.offload),
             c.fuseAttention, c.fuseElementwise, stringifyPlanRemat(c.remat),
             c.tensorParallel, c.sequenceParallel, c.releaseGradients,
             c.offloadActivations,
             c.contextParallel * (c.contextRing() ? -1 : 1),
             accumDtypeName(c.sumDtype), c.pipelineParallel, c.virtualStages)
      .str();
}

/// Whether budget candidate `c` is not compiled, and why (in
/// c.rejected): where the same configuration fits without recompute, the
/// budget plan is that one (the least recompute that fits is none); where
/// it does not fit with full recompute, which keeps the fewest bytes of
/// every layer, no per-layer mix of choices fits either.
bool skipBudget(const PlanResult &result,
                const std::map<std::string, size_t> &byKey, PlanCandidate &c) {
  auto twin = [&](PlanRemat remat) -> const PlanCandidate * {
    PlanCandidate other = c;
    other.remat = remat;
    auto it = byKey.find(candidateKey(other));
    return it == byKey.end() ? nullptr : &result.candidates[it->second];
  };
  auto number = [&](const PlanCandidate *other) {
    return other - result.candidates.data() + 1;
  };
  if (const PlanCandidate *none = twin(PlanRemat::none); none && none->fits) {
    c.rejected = llvm::formatv("not compiled: #{0} fits without recompute, "
                               "the plan a budget makes here",
                               number(none));
    return true;
  }
  const PlanCandidate *full = twin(PlanRemat::full);
  if (full && !full->fits && full->rejected.rfind("not compiled", 0) != 0) {
    c.rejected = llvm::formatv("not compiled: full recompute (#{0}), which "
                               "keeps the fewest bytes of each layer, does "
                               "not fit either ({1})",
                               number(full), gigabytes(full->measure.arena));
    return true;
  }
  return false;
}

/// A pipeline stage as compiled: its measure, and at its peak the saved
/// activation bytes and the units in flight.
struct StageMeasure {
  PlanMeasure measure;
  uint64_t saved = 0;
  int64_t units = 0;
};

/// Compiles `c` cut into `stages` stages of `perStage` layers each, over
/// `microBatches` micro-batches (its other choices and its data ranks
/// kept), and measures every stage's function.
llvm::Expected<std::vector<StageMeasure>>
measureStages(MLIRContext &context, const PlanRequest &request,
              const PlanCandidate &c, int64_t perStage, int64_t stages,
              int64_t microBatches) {
  PlanCandidate probe = c;
  probe.pipelineParallel = stages;
  probe.accumulation = microBatches;
  int64_t ranks = c.dataRanks(request.ranks) * c.tensorParallel *
                  c.contextParallel * stages;
  llvm::Expected<TrainStepOptions> options =
      probe.stepOptions(ranks, request.memoryBytes);
  if (!options)
    return options.takeError();
  llvm::Expected<OwningOpRef<ModuleOp>> compiled = compileWithoutOffload(
      context, request, probe, *options, perStage * stages);
  if (!compiled)
    return compiled.takeError();
  std::vector<StageMeasure> out(stages);
  for (auto func : (**compiled).getOps<func::FuncOp>()) {
    auto stage = func->getAttrOfType<PipelineStageAttr>(kPipelineStageAttrName);
    if (!stage || stage.getStage() >= stages)
      continue;
    MemoryAnalysis analysis(func);
    const FunctionMemory &memory = analysis.getFunctions().front();
    if (failed(memory.checkCounts("trainmem-plan")))
      return planError("a count overflows 64 bits");
    StageMeasure &m = out[stage.getStage()];
    m.measure = measureStep(func, memory, request.hardware);
    m.saved =
        memory.getAtPeak()[static_cast<unsigned>(MemoryCategory::Activations)];
    m.units = static_cast<int64_t>(
        memory.getUnitsLiveAt(memory.getPeakPoint()).size());
    m.measure.unitsInFlight = m.units;
  }
  return out;
}

/// The units stage `stage` of `p` holds in flight over `m` micro-batches
/// (the schedules' counts, PipelineStagesTest): 1F1B min(p - k, m);
/// interleaved (p - k - 1) x 2 + (v - 1) x p + 1 chunks.
int64_t unitsInFlight(int64_t stage, int64_t p, int64_t v, int64_t m) {
  if (v == 1)
    return std::min(p - stage, m);
  return (p - stage - 1) * 2 + (v - 1) * p + 1;
}

/// A pipeline's layers small enough to compile as they run (its layers
/// times its micro-batches, the units the stages unroll).
constexpr int64_t kExactPipelineUnits = 64;

/// The forward and backward seconds of a stage per micro-batch.
double microBatchSeconds(const PlanMeasure &m, int64_t microBatches) {
  return (m.phaseSeconds[static_cast<unsigned>(Phase::Forward)] +
          m.phaseSeconds[static_cast<unsigned>(Phase::Backward)]) /
         static_cast<double>(microBatches);
}

/// The most units (layers times micro-batches) of a pipeline the planner
/// compiles as it runs to measure its best (remeasureBest): beyond them
/// its figures stay extrapolated (the whole pipeline unrolls every
/// micro-batch of every layer).
constexpr int64_t kWholePipelineUnits = 2048;

/// `base`'s memory (its arena, peaks and their categories) with `t` times
/// what `next` holds beyond it added: a stage holding t more units in
/// flight than `base`, where `next` holds one more (in units of the
/// difference).
PlanMeasure addInFlight(const PlanMeasure &base, const PlanMeasure &next,
                        double t) {
  auto grow = [&](uint64_t x, uint64_t y) {
    double value = static_cast<double>(x) +
                   (static_cast<double>(y) - static_cast<double>(x)) * t;
    return value > 0 ? static_cast<uint64_t>(std::llround(value)) : 0;
  };
  PlanMeasure m = base;
  m.arena = grow(base.arena, next.arena);
  m.peak = grow(base.peak, next.peak);
  for (unsigned c = 0; c < kNumMemoryCategories; ++c)
    m.atPeak[c] = grow(base.atPeak[c], next.atPeak[c]);
  for (unsigned phase = 0; phase < 3; ++phase) {
    m.phasePeak[phase] = grow(base.phasePeak[phase], next.phasePeak[phase]);
    for (unsigned c = 0; c < kNumMemoryCategories; ++c)
      m.phaseAtPeak[phase][c] =
          grow(base.phaseAtPeak[phase][c], next.phaseAtPeak[phase][c]);
  }
  m.arena = std::max(m.arena, m.peak);
  return m;
}

/// Measures pipeline candidate `c`: compiled as it runs where small (or
/// asked: --exact, up to kWholePipelineUnits); otherwise its first and
/// last stages (the embedding and the most units in flight; the head and
/// the loss; the stages between hold fewer units and neither end's
/// layers) from small pipelines: 2 stages of v, 2v and 3v layers over 3
/// micro-batches (4 interleaved), extrapolated linearly to the stage's
/// layers, and 3 stages of 2v and 3v layers over 4 (6), whose difference
/// is what a unit more in flight holds (a stage's memory is linear in its
/// units in flight once the micro-batches outnumber the stages). The plan's
/// measure is the stage with the larger arena; its pace the slower
/// stage's, per micro-batch.
llvm::Error measurePipeline(MLIRContext &context, const PlanRequest &request,
                            PlanCandidate &c) {
  int64_t p = c.pipelineParallel, v = c.virtualStages, m = c.accumulation;
  int64_t layers = request.model.layers, perStage = layers / p;
  if ((request.exact && layers * m <= kWholePipelineUnits) ||
      layers * m <= kExactPipelineUnits) {
    llvm::Expected<std::vector<StageMeasure>> stages =
        measureStages(context, request, c, perStage, p, m);
    if (!stages)
      return stages.takeError();
    const StageMeasure *worst = &stages->front();
    double pace = 0;
    uint64_t sent = 0, exchanged = 0;
    for (const StageMeasure &stage : *stages) {
      if (stage.measure.arena > worst->measure.arena)
        worst = &stage;
      pace = std::max(pace, microBatchSeconds(stage.measure, m));
      sent = std::max(sent, stage.measure.bytesSent);
      exchanged = std::max(exchanged, stage.measure.exchangeBytes);
    }
    c.measure = worst->measure;
    c.measure.stageMicroBatchSeconds = pace;
    c.measure.bytesSent = sent;
    c.measure.exchangeBytes = exchanged;
    c.wholeModel = true;
    return llvm::Error::success();
  }
  // More micro-batches than stages, so that the peak is in the steady
  // state, where the first micro-batches' gradient sums are live (a
  // multiple of the stages, interleaved).
  auto probeMicroBatches = [&](int64_t stages) {
    return v > 1 ? 2 * stages : stages + 1;
  };
  int64_t m2 = probeMicroBatches(2), m3 = probeMicroBatches(3);
  // Two stages of v, 2v, 3v layers; three of 2v, 3v.
  std::array<std::vector<StageMeasure>, 3> two;
  std::array<std::vector<StageMeasure>, 2> three;
  for (auto [stages, first, probes] :
       {std::tuple{int64_t(2), int64_t(1), llvm::MutableArrayRef(two)},
        std::tuple{int64_t(3), int64_t(2), llvm::MutableArrayRef(three)}})
    for (auto [k, probe] : llvm::enumerate(probes)) {
      llvm::Expected<std::vector<StageMeasure>> measured = measureStages(
          context, request, c, (first + static_cast<int64_t>(k)) * v, stages,
          stages == 2 ? m2 : m3);
      if (!measured)
        return measured.takeError();
      probe = std::move(*measured);
    }
  bool overflow = false;
  int64_t past = perStage / v - 2;
  // Stage `stage` of p from the probes' first (end = 0) or last (end = 1).
  auto stageAt = [&](int end, int64_t stage) {
    PlanMeasure base =
        extrapolate(two[1][end].measure, two[2][end].measure, past, overflow);
    size_t last3 = end == 0 ? 0 : 2;
    PlanMeasure next = extrapolate(three[0][last3].measure,
                                   three[1][last3].measure, past, overflow);
    int64_t units2 = unitsInFlight(end == 0 ? 0 : 1, 2, v, m2);
    int64_t units3 = unitsInFlight(end == 0 ? 0 : 2, 3, v, m3);
    int64_t units = unitsInFlight(stage, p, v, m);
    PlanMeasure at = base;
    if (units3 != units2)
      at = addInFlight(base, next,
                       static_cast<double>(units - units2) /
                           static_cast<double>(units3 - units2));
    at.unitsInFlight = units;
    // m2 micro-batches measured; m of them run.
    double scale = static_cast<double>(m) / static_cast<double>(m2);
    auto scaled = [&](uint64_t count) {
      return static_cast<uint64_t>(static_cast<double>(count) * scale);
    };
    at.forwardFlops = scaled(at.forwardFlops);
    at.backwardFlops = scaled(at.backwardFlops);
    at.recomputeFlops = scaled(at.recomputeFlops);
    at.bytesSent = at.bytesSent - at.tensorBytes + scaled(at.tensorBytes);
    at.tensorBytes = scaled(at.tensorBytes);
    at.exchangeBytes = scaled(at.exchangeBytes);
    at.stageMicroBatchSeconds = microBatchSeconds(at, m2);
    for (Phase phase : {Phase::Forward, Phase::Backward})
      at.phaseSeconds[static_cast<unsigned>(phase)] *= scale;
    return at;
  };
  PlanMeasure first = stageAt(0, 0), last = stageAt(1, p - 1);
  if (overflow)
    return planError("a count overflows 64 bits");
  c.measure = first.arena >= last.arena ? first : last;
  c.measure.stageMicroBatchSeconds =
      std::max(first.stageMicroBatchSeconds, last.stageMicroBatchSeconds);
  c.measure.bytesSent = std::max(first.bytesSent, last.bytesSent);
  c.measure.exchangeBytes = std::max(first.exchangeBytes, last.exchangeBytes);
  c.wholeModel = false;
  c.approximate =
      !linear(two[0][0].measure, two[1][0].measure, two[2][0].measure) ||
      !linear(two[0][1].measure, two[1][1].measure, two[2][1].measure);
  return llvm::Error::success();
}

/// Measures candidate `c` at the request's layer count: compiled whole, or
/// extrapolated from three small layer counts where the model is linear in
/// them.
llvm::Error measureCandidate(MLIRContext &context, const PlanRequest &request,
                             PlanCandidate &c, CompiledSteps &cache) {
  if (c.pipelineParallel > 1)
    return measurePipeline(context, request, c);
  int64_t layers = request.model.layers;
  bool extrapolated = !request.exact && layers > kThirdLayers;
  c.wholeModel = true;
  if (!extrapolated || c.remat == PlanRemat::budget)
    return measureAt(context, request, c, layers, c.measure, cache);
  PlanMeasure a, b, d;
  if (llvm::Error error =
          measureAt(context, request, c, kFirstLayers, a, cache))
    return error;
  if (llvm::Error error =
          measureAt(context, request, c, kSecondLayers, b, cache))
    return error;
  if (llvm::Error error =
          measureAt(context, request, c, kThirdLayers, d, cache))
    return error;
  bool overflow = false;
  if (linear(a, b, d)) {
    c.measure = extrapolate(b, d, layers - kSecondLayers, overflow);
    c.wholeModel = false;
  } else if (layers > kWholeModelLayers) {
    // Not linear at small counts, and too large to compile whole in the
    // planner's time: extrapolated from the last two, said so
    // (reduce-scatter buckets holding parts of several layers move a peak
    // by a few percent).
    c.measure = extrapolate(b, d, layers - kSecondLayers, overflow);
    c.wholeModel = false;
    c.approximate = true;
  } else {
    // Not linear at small counts (buckets holding parts of several layers,
    // a peak that moves): the whole model.
    return measureAt(context, request, c, layers, c.measure, cache);
  }
  if (overflow)
    return planError("a count overflows 64 bits");
  return llvm::Error::success();
}

/// Measures candidate `c` (its measure, throughput, fit and reason).
void evaluate(MLIRContext &context, const PlanRequest &request,
              PlanCandidate &c, CompiledSteps &cache) {
  int64_t layers = request.model.layers;
  // A budget plan depends on the whole model's bytes: measured whole.
  if (c.remat == PlanRemat::budget && !request.module &&
      layers > kWholeModelLayers) {
    c.rejected = llvm::formatv("not compiled: a budget plan is made on the "
                               "whole model, and {0} layers are more than "
                               "the {1} the planner compiles whole",
                               layers, kWholeModelLayers);
    return;
  }
  // What the passes and analyses say is the candidate's, not the
  // terminal's: the candidates are measured on several threads, whose
  // diagnostics would interleave mid-line. The first error joins the
  // candidate's reason, printed with its row in candidate order.
  std::string firstError;
  ScopedDiagnosticHandler capture(&context, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && firstError.empty())
      firstError = d.str();
    return success();
  });
  if (llvm::Error error = measureCandidate(context, request, c, cache)) {
    std::string why = llvm::toString(std::move(error));
    if (!firstError.empty() && why.find(firstError) == std::string::npos)
      why += ": " + firstError;
    c.rejected = "not compiled: " + why;
    return;
  }
  predictThroughput(c, request);
  c.fits = c.measure.arena <= request.memoryBytes;
  // What it keeps in host memory must fit there too (where the hardware
  // says how much there is).
  uint64_t host = request.hardware.hostMemoryBytes;
  if (c.fits && host && c.measure.hostBytes > host) {
    c.fits = false;
    c.rejected = llvm::formatv("host {0} > {1}", gigabytes(c.measure.hostBytes),
                               gigabytes(host));
    return;
  }
  if (!c.fits) {
    MemoryCategory largest = MemoryCategory::Weights;
    for (MemoryCategory cat : kPlanCategories)
      if (c.measure.atPeak[static_cast<unsigned>(cat)] >
          c.measure.atPeak[static_cast<unsigned>(largest)])
        largest = cat;
    c.rejected = llvm::formatv(
        "peak {0} > {1} (most: {2} {3})", gigabytes(c.measure.arena),
        gigabytes(request.memoryBytes), stringifyMemoryCategory(largest),
        gigabytes(c.measure.atPeak[static_cast<unsigned>(largest)]));
  }
}

} // namespace

/// Whether train-fuse-elementwise fuses anything in the model (a GPT's
/// bias + GELU; a Llama's MLP has no such chain): the model at one layer,
/// before and after the pass.
static bool fusesElementwise(MLIRContext &context, const PlanRequest &request) {
  OwningOpRef<ModuleOp> module;
  if (request.module) {
    module = cast<ModuleOp>(request.module->clone());
    std::string why;
    if (!request.exact && failed(truncateLayers(*module, 1, why)))
      return false;
  } else {
    ModelConfig config = request.model;
    config.layers = 1;
    config.batch = 1;
    std::string why;
    if (!validateConfig(config, why))
      return false;
    module = buildModel(&context, config);
  }
  auto countOps = [&] {
    int64_t n = 0;
    module->walk([&](Operation *) { ++n; });
    return n;
  };
  int64_t before = countOps();
  if (llvm::Error error =
          runPasses(context, *module, [](OpPassManager &pm, auto) {
            pm.addPass(createTrainFuseElementwisePass());
            return success();
          })) {
    llvm::consumeError(std::move(error));
    return false;
  }
  return countOps() != before;
}

/// The classes of the request's loss: the model file's cross-entropy's,
/// else the preset's vocabulary.
static int64_t vocabularyOf(const PlanRequest &request) {
  int64_t vocabulary = request.model.vocab;
  if (request.module)
    request.module->walk([&](CrossEntropyOp loss) {
      vocabulary = loss.getLogits().getType().getShape().back();
    });
  return vocabulary;
}

/// The ZeRO stages searched over `data` data ranks (of t x p model-parallel
/// ranks): the request's, none on one rank; not 2-3 on pipeline stages
/// (refused there, as DeepSpeed's pipeline engine refuses them) nor 1 on
/// tensor-parallel ones (not built).
static std::vector<int64_t> zeroStagesFor(const PlanRequest &request,
                                          int64_t data, int64_t t, int64_t pp) {
  std::vector<int64_t> stages;
  for (int64_t stage : request.stages)
    if ((stage < 0) == (data == 1) && !llvm::is_contained(stages, stage) &&
        (pp == 1 || stage < 1 || (stage == 1 && t == 1)))
      stages.push_back(stage);
  if (stages.empty())
    stages.push_back(data == 1 ? -1 : 0);
  return stages;
}

/// Whether `pp` pipeline stages (`v` chunks each) over `m` micro-batches
/// compose with a row's choices: a micro-batch per stage at least (a
/// multiple of the stages, interleaved), and no remat budget, activation
/// offload, release or Sophia (docs/Pipeline.md, "Not built yet").
static bool stagesCompose(int64_t pp, int64_t v, int64_t m, PlanRemat remat,
                          bool activations, bool release, StringRef optimizer) {
  return m >= pp && (v == 1 || m % pp == 0) && remat != PlanRemat::budget &&
         !activations && !release && optimizer != "sophia";
}

/// Every candidate of the request's choices, in groups that differ in
/// their offload only (measured from one compiled step: CompiledSteps);
/// the start of each group, and the end of the last.
static std::vector<size_t> enumerateCandidates(const PlanRequest &request,
                                               PlanResult &result) {
  std::vector<size_t> groupStart;
  // The optimizer and gradient release: how each update runs.
  std::vector<std::pair<std::string, bool>> updates;
  for (const std::string &optimizer : request.optimizers)
    for (bool release : request.releaseGradients)
      updates.emplace_back(optimizer, release);
  // What the backward keeps, and where: the recompute and the activation
  // offload (a budget chooses per layer for the device's memory alone:
  // not with offload).
  std::vector<std::pair<PlanRemat, bool>> keeps;
  for (PlanRemat remat : request.remats)
    for (bool activations : request.offloadActivations)
      if (!(activations && remat == PlanRemat::budget))
        keeps.emplace_back(remat, activations);
  // A vocabulary t does not divide stays whole on every rank.
  int64_t vocabulary = vocabularyOf(request);
  // The gradients' sums: f32, and the gradients' 16-bit type where asked
  // (a step of one micro-batch has no sums).
  AccumDtype narrow = sixteenBitGradients(request);
  auto sumTypesFor = [&](int64_t accumulation) {
    std::vector<AccumDtype> types;
    for (bool sixteen : request.sixteenBitSums)
      if (!sixteen)
        types.push_back(AccumDtype::f32);
      else if (narrow != AccumDtype::f32 && accumulation > 1)
        types.push_back(narrow);
    return types;
  };
  // The exchanges apply to c > 1 only.
  auto exchangesFor = [&](int64_t cp) {
    return cp > 1 ? request.contextExchanges
                  : std::vector<ContextExchange>{ContextExchange::allGather};
  };
  for (int64_t cp : request.contextParallel)
    for (ContextExchange exchange : exchangesFor(cp))
      for (int64_t t : request.tensorParallel)
        for (bool sequence : request.sequenceParallel)
          for (int64_t pp : request.pipelineParallel)
            for (int64_t v : request.virtualStages) {
              // K/V heads t is a multiple of are replicated, which
              // train-tensor-parallel refuses with sequence parallelism;
              // context parallelism cuts a sequence sequence parallelism has
              // not.
              bool replicated =
                  request.model.kvHeads > 0 && request.model.kvHeads % t != 0;
              if (sequence && (t == 1 || replicated || cp > 1))
                continue;
              if (request.ranks % (t * cp * pp) != 0)
                continue;
              // Pipeline stages (docs/Pipeline.md): the layers cut evenly into
              // p x v chunks; chunks are interleaved stages' alone; not with
              // context parallelism.
              if (pp == 1 ? v > 1
                          : cp > 1 || request.model.layers % (pp * v) != 0)
                continue;
              // Each tensor x context group (each pipeline of them) trains on
              // its data rank's share of the global batch; ZeRO runs over the
              // data ranks (none when there is one).
              int64_t data = request.ranks / (t * cp * pp);
              if (request.globalBatch % data != 0)
                continue;
              int64_t perRank = request.globalBatch / data;
              std::vector<int64_t> micros = request.microBatches;
              if (request.defaultMicroBatches && t * cp * pp > 1)
                micros = divisorsOf(perRank);
              std::vector<int64_t> stages = zeroStagesFor(request, data, t, pp);
              for (int64_t micro : micros)
                for (auto [remat, activations] : keeps)
                  for (int64_t stage : stages)
                    for (bool eightBit : request.eightBit)
                      for (bool fuseAttention : request.fuseAttention)
                        for (bool fuseElementwise : request.fuseElementwise)
                          for (auto &[optimizer, release] : updates)
                            for (AccumDtype sums :
                                 sumTypesFor(perRank / micro)) {
                              // Context parallelism cuts a fused attention.
                              if (cp > 1 && !fuseAttention)
                                continue;
                              if (pp > 1 &&
                                  !stagesCompose(pp, v, perRank / micro, remat,
                                                 activations, release,
                                                 optimizer))
                                continue;
                              // Release applies to one micro-batch (a gradient
                              // is complete after the last one).
                              if (release && perRank / micro > 1)
                                continue;
                              // Gradients summed on the host: a loop to sum,
                              // and no reduction of its sums after it.
                              std::vector<PlanOffload> offloads;
                              for (PlanOffload offload : request.offloads)
                                if ((offload !=
                                         PlanOffload::statesUpdateGradients ||
                                     (perRank / micro > 1 && stage != 0 &&
                                      stage != 1)) &&
                                    (pp == 1 || offload == PlanOffload::none))
                                  offloads.push_back(offload);
                              if (offloads.empty())
                                continue;
                              groupStart.push_back(result.candidates.size());
                              for (PlanOffload offload : offloads) {
                                PlanCandidate c;
                                c.tensorParallel = t;
                                c.contextParallel = cp;
                                c.contextExchange = exchange;
                                c.pipelineParallel = pp;
                                c.virtualStages = v;
                                c.sequenceParallel = sequence;
                                c.vocabularyParallel =
                                    t > 1 && vocabulary % t == 0;
                                c.fuseAttention = fuseAttention;
                                c.fuseElementwise = fuseElementwise;
                                c.microBatch = micro;
                                c.accumulation = perRank / micro;
                                c.remat = remat;
                                c.offloadActivations = activations;
                                c.stage = stage;
                                c.eightBit = eightBit;
                                c.offload = offload;
                                c.optimizer = optimizer;
                                c.releaseGradients = release;
                                c.sumDtype = sums;
                                c.recipe = request.recipe;
                                c.changesNumerics =
                                    eightBit ||
                                    optimizer != request.optimizers.front() ||
                                    (release && recipeClips(request.recipe)) ||
                                    sums != AccumDtype::f32;
                                result.candidates.push_back(c);
                              }
                            }
            }
  groupStart.push_back(result.candidates.size());
  return groupStart;
}

/// Measures the groups, over threads, each with a context of its own (a
/// model file's module lives in the caller's context: one thread then).
/// The results are per candidate, so they do not depend on the threads. A
/// budget plan compiles the whole model once per choice: it is measured
/// after the others, and only where it can differ from them (budgetTwin).
static void measureGroups(MLIRContext &context, const PlanRequest &request,
                          PlanResult &result, ArrayRef<size_t> groupStart) {
  size_t groups = groupStart.size() - 1;
  std::map<std::string, size_t> byKey;
  for (size_t i = 0; i < result.candidates.size(); ++i)
    byKey[candidateKey(result.candidates[i])] = i;
  auto runGroups = [&](MLIRContext &ctx, std::atomic<size_t> &next,
                       ArrayRef<size_t> order) {
    CompiledSteps cache;
    for (size_t k = next++; k < order.size(); k = next++) {
      size_t g = order[k];
      cache.steps.clear();
      for (size_t i = groupStart[g]; i < groupStart[g + 1]; ++i) {
        PlanCandidate &c = result.candidates[i];
        if (c.remat == PlanRemat::budget && skipBudget(result, byKey, c))
          continue;
        evaluate(ctx, request, c, cache);
      }
    }
  };
  unsigned threads =
      request.module
          ? 1u
          : std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  auto runAll = [&](ArrayRef<size_t> order) {
    std::atomic<size_t> next{0};
    if (threads == 1) {
      runGroups(context, next, order);
      return;
    }
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t)
      workers.emplace_back([&] {
        MLIRContext own(context.getDialectRegistry(),
                        MLIRContext::Threading::DISABLED);
        own.loadAllAvailableDialects();
        runGroups(own, next, order);
      });
    for (std::thread &worker : workers)
      worker.join();
  };
  std::vector<size_t> first, budgets;
  for (size_t g = 0; g < groups; ++g)
    (result.candidates[groupStart[g]].remat == PlanRemat::budget ? budgets
                                                                 : first)
        .push_back(g);
  runAll(first);
  runAll(budgets);
}

/// The fastest candidate that fits (the smaller peak on a tie), and each
/// candidate's speed relative to the fastest.
static void chooseBest(PlanResult &result, const PlanRequest &request) {
  result.best.reset();
  double fastest = 0.0;
  for (const PlanCandidate &c : result.candidates)
    fastest = std::max(fastest, c.tokensPerSecond);
  // The fastest that fits, and the fastest that fits and keeps the
  // recipe's numerics (ties: the smaller arena).
  std::optional<size_t> keeping;
  auto better = [&](const PlanCandidate &c, std::optional<size_t> than) {
    if (!than)
      return true;
    const PlanCandidate &other = result.candidates[*than];
    return c.tokensPerSecond > other.tokensPerSecond ||
           (c.tokensPerSecond == other.tokensPerSecond &&
            c.measure.arena < other.measure.arena);
  };
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    PlanCandidate &c = result.candidates[i];
    c.relative = fastest > 0 ? c.tokensPerSecond / fastest : 0.0;
    if (!c.fits)
      continue;
    if (better(c, result.best))
      result.best = i;
    if (!c.changesNumerics && better(c, keeping))
      keeping = i;
  }
  // Other numerics only to fit, or for more than the margin's speed.
  if (result.best && keeping &&
      result.candidates[*result.best].changesNumerics &&
      result.candidates[*result.best].tokensPerSecond <=
          result.candidates[*keeping].tokensPerSecond *
              (1.0 + request.numericsMargin))
    result.best = keeping;
}

/// `c` to measure again from scratch.
static PlanCandidate unmeasured(const PlanCandidate &c) {
  PlanCandidate again = c;
  again.measure = PlanMeasure();
  again.rejected.clear();
  again.fits = false;
  return again;
}

/// The best, extrapolated from small layer counts, is measured again on
/// the whole model: its arena is then the printed command's to the byte
/// (an extrapolated arena is within about 1e-3 of it: the placement of the
/// buffers is not exactly linear in the layers); should it no longer fit,
/// the next is.
static void remeasureBest(MLIRContext &context, const PlanRequest &request,
                          PlanResult &result) {
  PlanRequest whole = request;
  whole.exact = true;
  while (result.best) {
    PlanCandidate &best = result.candidates[*result.best];
    // A pipeline too large to unroll whole keeps its extrapolated figures
    // (the table and JSON say "extrapolated").
    if (best.wholeModel ||
        (best.pipelineParallel > 1 &&
         request.model.layers * best.accumulation > kWholePipelineUnits))
      break;
    PlanCandidate again = unmeasured(best);
    again.approximate = false;
    CompiledSteps cache;
    evaluate(context, whole, again, cache);
    best = again;
    chooseBest(result, request);
  }
}

/// What would shrink `largest`, the category that dominates the smallest
/// candidate's peak, beyond this search: for activations, fused attention
/// is measured on the smallest.
static std::string hintFor(MLIRContext &context, const PlanRequest &request,
                           const PlanCandidate &smallest,
                           MemoryCategory largest) {
  switch (largest) {
  case MemoryCategory::Activations: {
    // Recompute policies the request left out of the search keep fewer
    // activations too: named, with the option that searches them.
    std::string unsearched;
    for (PlanRemat remat :
         {PlanRemat::selective, PlanRemat::full, PlanRemat::budget})
      if (!llvm::is_contained(request.remats, remat) &&
          remat != smallest.remat)
        unsearched += (unsearched.empty() ? "" : ",") +
                      stringifyPlanRemat(remat).str();
    std::string notSearched =
        unsearched.empty()
            ? std::string()
            : "; recompute not searched (--remat " + unsearched +
                  ") keeps fewer activations";
    if (!smallest.fuseAttention) {
      PlanCandidate fused = unmeasured(smallest);
      fused.fuseAttention = true;
      CompiledSteps cache;
      evaluate(context, request, fused, cache);
      if (fused.rejected.rfind("not compiled", 0) != 0 &&
          fused.measure.arena < smallest.measure.arena)
        return fused.fits
                   ? llvm::formatv("fused attention would fit: peak {0} "
                                   "(trainmem-run ...{1})",
                                   gigabytes(fused.measure.arena),
                                   fused.runOptions(request.memoryBytes))
                         .str()
                   : llvm::formatv(
                         "fused attention would bring it to {0}, "
                         "still {1} over; smaller micro-batches "
                         "keep fewer activations{2}",
                         gigabytes(fused.measure.arena),
                         gigabytes(fused.measure.arena - request.memoryBytes),
                         notSearched)
                         .str();
    }
    // Fused attention is in the candidate already (or gains nothing): it
    // is not advised again.
    return (smallest.remat == PlanRemat::full
                ? "full recompute keeps each layer's input only: smaller "
                  "micro-batches, or a shorter sequence, keep fewer"
                : std::string("smaller micro-batches keep fewer "
                              "activations")) +
           notSearched;
  }
  case MemoryCategory::Optimizer:
    return "8-bit state, CPU offload or ZeRO over more ranks shrink the "
           "optimizer's bytes";
  case MemoryCategory::Gradients: {
    // A micro-batch loop's sums: on the host, or in the gradients' 16-bit
    // type, where the request kept them out of the search.
    std::string text =
        "ZeRO-3 over more ranks shards the weights and gradients";
    if (smallest.accumulation > 1 &&
        !llvm::is_contained(request.offloads,
                            PlanOffload::statesUpdateGradients))
      text += "; the micro-batches' sums leave the device with --offload "
              "states+update+gradients";
    if (smallest.accumulation > 1 && smallest.sumDtype == AccumDtype::f32 &&
        sixteenBitGradients(request) != AccumDtype::f32 &&
        !llvm::is_contained(request.sixteenBitSums, true))
      text += llvm::formatv("; the f32 sums of its {0} gradients take half "
                            "in {0} (--accumulate-dtype {0}, which changes "
                            "the numerics)",
                            accumDtypeName(sixteenBitGradients(request)));
    return text;
  }
  case MemoryCategory::Weights:
  case MemoryCategory::Gathered:
    return "ZeRO-3 over more ranks shards the weights and gradients";
  default:
    return "a smaller micro-batch shrinks the temporaries";
  }
}

/// Why nothing fits: the smallest peak compiled, by how much it is over,
/// the category that dominates it and what would shrink that.
static std::string explainNothingFits(MLIRContext &context,
                                      const PlanRequest &request,
                                      const PlanResult &result) {
  const PlanCandidate *smallest = nullptr;
  for (const PlanCandidate &c : result.candidates)
    if (c.rejected.rfind("not compiled", 0) != 0 &&
        (!smallest || c.measure.arena < smallest->measure.arena))
      smallest = &c;
  if (!smallest) {
    std::string why = "no candidate could be compiled";
    if (result.candidates.empty() &&
        llvm::all_of(request.releaseGradients, [](bool r) { return r; }))
      why = "no candidate releases its gradients: release applies to one "
            "micro-batch per step (--release-gradients both also tries "
            "without)";
    else if (result.candidates.empty() &&
             llvm::all_of(request.offloads, [](PlanOffload o) {
               return o == PlanOffload::statesUpdateGradients;
             }))
      why = "no candidate sums its gradients on the host: "
            "states+update+gradients needs more than one micro-batch per "
            "step and no ZeRO-0/1 reduction after the loop (--offload "
            "states+update also tries the sums on the device)";
    else if (!result.candidates.empty())
      why += " (the first, " + result.candidates.front().describe() + ": " +
             result.candidates.front().rejected + ")";
    return why;
  }
  MemoryCategory largest = MemoryCategory::Weights;
  for (MemoryCategory cat : kPlanCategories)
    if (smallest->measure.atPeak[static_cast<unsigned>(cat)] >
        smallest->measure.atPeak[static_cast<unsigned>(largest)])
      largest = cat;
  return llvm::formatv(
      "nothing fits in {0}: the smallest peak is {1}, {5} over ({2}), of "
      "which {3} {4} dominate: {6}",
      gigabytes(request.memoryBytes), gigabytes(smallest->measure.arena),
      smallest->describe(), stringifyMemoryCategory(largest),
      gigabytes(smallest->measure.atPeak[static_cast<unsigned>(largest)]),
      gigabytes(smallest->measure.arena - request.memoryBytes),
      hintFor(context, request, *smallest, largest));
}

PlanResult plan(MLIRContext &context, const PlanRequest &originalRequest) {
  PlanResult result;
  PlanRequest request = originalRequest;
  if (request.fuseElementwise.empty()) {
    request.fuseElementwise = {false};
    if (fusesElementwise(context, request))
      request.fuseElementwise.push_back(true);
  }
  std::vector<size_t> groupStart = enumerateCandidates(request, result);
  measureGroups(context, request, result, groupStart);
  chooseBest(result, request);
  // Nothing fits on t = 1 (the default): split the model over a node, as
  // practitioners do when it does not fit, searching t > 1 too (its rows
  // after t = 1's). Searched only then: it multiplies the planning time
  // (docs/Planner.md).
  if (!result.best && request.defaultTensorParallel) {
    PlanRequest split = request;
    split.tensorParallel.clear();
    for (int64_t t : tensorParallelSizes(request))
      if (t > 1)
        split.tensorParallel.push_back(t);
    if (!split.tensorParallel.empty()) {
      result.escalatedTensorParallel = split.tensorParallel;
      measureGroups(context, split, result, enumerateCandidates(split, result));
      chooseBest(result, request);
    }
  }
  // Still nothing fits: keep the saved activations in host memory, as
  // long-context training does (docs/LongContext.md), over the sizes
  // searched so far.
  if (!result.best && request.defaultOffloadActivations) {
    PlanRequest offloaded = request;
    offloaded.offloadActivations = {true};
    offloaded.tensorParallel.insert(offloaded.tensorParallel.end(),
                                    result.escalatedTensorParallel.begin(),
                                    result.escalatedTensorParallel.end());
    result.escalatedOffloadActivations = true;
    measureGroups(context, offloaded, result,
                  enumerateCandidates(offloaded, result));
    chooseBest(result, request);
  }
  // Still nothing fits: sum the 16-bit gradients in their own type (half
  // the accumulators; the numerics change, docs/GradAccum.md), with and
  // without the activation offload searched so far.
  if (!result.best && request.defaultSixteenBitSums &&
      sixteenBitGradients(request) != AccumDtype::f32) {
    PlanRequest narrowed = request;
    narrowed.sixteenBitSums = {true};
    narrowed.tensorParallel.insert(narrowed.tensorParallel.end(),
                                   result.escalatedTensorParallel.begin(),
                                   result.escalatedTensorParallel.end());
    if (result.escalatedOffloadActivations)
      narrowed.offloadActivations = {false, true};
    result.escalatedSixteenBitSums = true;
    measureGroups(context, narrowed, result,
                  enumerateCandidates(narrowed, result));
    chooseBest(result, request);
  }
  // Still nothing fits: split each sequence over ranks (context
  // parallelism, with fused attention), over everything searched so far.
  if (!result.best && request.defaultContextParallel) {
    PlanRequest split = request;
    split.contextParallel.clear();
    for (int64_t c : {int64_t(2), int64_t(4), int64_t(8)})
      if (request.ranks % c == 0 && request.model.seq % (2 * c) == 0)
        split.contextParallel.push_back(c);
    split.tensorParallel.insert(split.tensorParallel.end(),
                                result.escalatedTensorParallel.begin(),
                                result.escalatedTensorParallel.end());
    if (result.escalatedOffloadActivations)
      split.offloadActivations = {false, true};
    if (result.escalatedSixteenBitSums)
      split.sixteenBitSums = {false, true};
    if (!split.contextParallel.empty() &&
        llvm::is_contained(split.fuseAttention, true)) {
      result.escalatedContextParallel = split.contextParallel;
      measureGroups(context, split, result, enumerateCandidates(split, result));
      chooseBest(result, request);
    }
  }
  remeasureBest(context, request, result);
  if (!result.best)
    result.nothingFits = explainNothingFits(context, request, result);
  return result;
}

} // namespace train
} // namespace mlir
