//===- Planner.h - one memory budget in, a training configuration out -*- C++
//-*-===//
//
// trainmem-plan's search: for a model, a global batch, a number of ranks
// and a per-device memory budget, every combination of micro-batch (and so
// accumulation steps), recompute policy, ZeRO stage and 8-bit optimizer
// state is compiled with this project's passes and measured with the
// memory analysis (the per-device peak by category, FLOPs, recompute FLOPs,
// communication bytes); a throughput model on a Hardware description turns
// the counts into a predicted step time. The candidates that fit are
// ranked by predicted throughput; the rest say why they do not fit.
//
// Measuring a model of L layers: the step is compiled at 2, 3 and 4
// layers; where every count (each phase's most live bytes and its
// categories, FLOPs, bytes sent) grows linearly over the three, it is
// extrapolated to L (exact for a stack of equal layers whose peak stays
// where it is); where one does not (reduce-scatter buckets holding parts of
// several layers, a peak that moves), the whole model is compiled.
// `exact = true` compiles the whole model for every candidate (PlannerTest
// checks that both choose the same on small models).
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_PLAN_PLANNER_H
#define TRAINMEM_PLAN_PLANNER_H

#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Dialect/Train/Transforms/Pipelines.h"
#include "trainmem/Model/ModelBuilder.h"
#include "trainmem/Plan/Hardware.h"

#include "mlir/IR/MLIRContext.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace train {

/// The recompute policies the planner tries (train-remat's policies; none
/// is no train-remat; budget is train-remat policy=budget with the
/// device's budget).
enum class PlanRemat { none, selective, full, budget };
llvm::StringRef stringifyPlanRemat(PlanRemat remat);

/// CPU optimizer offload (train-offload-optimizer what=): none, the state on
/// the host, or the state and its update on the host (CPU Adam).
/// train-offload-optimizer's choices: none, states, states+update, and
/// states+update with the micro-batches' gradients summed on the host
/// (gradients=host; where a step accumulates and no reduction follows the
/// loop: no ZeRO, or stages 2-3).
enum class PlanOffload { none, states, statesAndUpdate, statesUpdateGradients };
llvm::StringRef stringifyPlanOffload(PlanOffload offload);

/// The policy or offload a name (what the stringify functions give) names.
std::optional<PlanRemat> parsePlanRemat(llvm::StringRef name);
std::optional<PlanOffload> parsePlanOffload(llvm::StringRef name);

struct PlanRequest {
  /// The model: a preset's configuration, its layers and sequence as the
  /// user set them; its batch is ignored (the plan chooses micro-batches).
  ModelConfig model;
  /// Or a model file's forward + loss (trainmem-model's or
  /// trainmem-import's form), used as it is: its batch is the per-rank
  /// batch, split into micro-batches by train-grad-accum. Its layers,
  /// where uniform (analyzeLayers), are measured at small counts and
  /// extrapolated as a preset's; otherwise it is compiled whole for every
  /// candidate (`wholeModelReason` says why). Not owned.
  ModuleOp module;
  std::string wholeModelReason;
  /// Sequences per optimizer step over all ranks.
  int64_t globalBatch = 0;
  int64_t ranks = 1;
  /// Bytes one device may hold.
  uint64_t memoryBytes = 0;
  Hardware hardware;
  /// The space; empty lists take the defaults (micro-batches: the
  /// divisors of the per-rank batch; every policy; ZeRO stages 0-3 on more
  /// than one rank, none on one; 8-bit state off and on).
  std::vector<int64_t> microBatches;
  std::vector<PlanRemat> remats;
  std::vector<int64_t> stages;
  std::vector<bool> eightBit;
  std::vector<PlanOffload> offloads;
  /// Activation offload to try (default: off, and on where nothing fits
  /// without it, as tensor parallelism is escalated).
  std::vector<bool> offloadActivations;
  bool defaultOffloadActivations = false;
  /// 16-bit gradient sums (train-grad-accum accumulate-dtype, the model's
  /// 16-bit type) off and on: tried where a step accumulates more than one
  /// micro-batch of 16-bit gradients. Default off, and on where nothing
  /// fits without them (after activation offload); a row with them
  /// changes the numerics.
  std::vector<bool> sixteenBitSums;
  bool defaultSixteenBitSums = false;
  /// The optimizers tried (registered names; default AdamW alone: the
  /// planner changes a recipe only where asked), and gradient release
  /// (train-release-gradients) off and on (default: off; tried only where
  /// it applies: one micro-batch per step).
  std::vector<std::string> optimizers = {"adamw"};
  /// The recipe: train-autodiff options other than the optimizer (empty:
  /// trainmem-run's default, kDefaultRecipe), measured, printed with each
  /// row's trainmem-run command and exported.
  std::string recipe;
  std::vector<bool> releaseGradients;
  /// train-fuse-attention and train-fuse-elementwise off and on (default:
  /// both for attention; for element-wise chains both where the model has
  /// one to fuse, else off).
  std::vector<bool> fuseAttention;
  std::vector<bool> fuseElementwise;
  /// Tensor-parallel group sizes t (train-tensor-parallel size=t: each
  /// divides the ranks; the data-parallel ranks, ZeRO's, are ranks / t, and
  /// each tensor group trains on global batch / (ranks / t) sequences) and
  /// sequence parallelism off and on (tried with t > 1 only). Default: t =
  /// 1 (completePlanRequest); tensorParallelSizes() gives the divisors a
  /// model and a node allow.
  std::vector<int64_t> tensorParallel;
  std::vector<bool> sequenceParallel;
  /// Context-parallel group sizes c (train-context-parallel size=c, load
  /// balanced, with fused attention; t · c divides the ranks and 2c the
  /// sequence; the data ranks are ranks / (t · c)). Default: c = 1.
  std::vector<int64_t> contextParallel;
  /// How context parallelism's attention gets the group's keys and values
  /// (train-context-parallel exchange=), tried with c > 1 only. Default:
  /// both (completePlanRequest): the ring holds two blocks of K/V where
  /// the gather holds the group's, and sends more.
  std::vector<ContextExchange> contextExchanges;
  /// Pipeline stages p (train-pipeline: 1F1B, the layers cut evenly; each
  /// p divides the ranks over t · c and the layers) and model chunks per
  /// stage v (the interleaved schedule where v > 1; p · v divides the
  /// layers). Default: p = 1, v = 1. The data ranks are then ranks / (t ·
  /// c · p), each pipeline's batch split into m = batch / micro-batch
  /// micro-batches (m >= p; a multiple of p interleaved).
  std::vector<int64_t> pipelineParallel;
  std::vector<int64_t> virtualStages;
  /// Whether contextParallel was defaulted (to c = 1): then, when nothing
  /// fits otherwise, the planner searches c = 2, 4 and 8 where they apply.
  bool defaultContextParallel = false;
  /// Whether microBatches were defaulted: then each t takes the divisors
  /// of its own per-group batch.
  bool defaultMicroBatches = false;
  /// Whether tensorParallel was defaulted (to t = 1): then, when nothing
  /// fits, the planner searches tensorParallelSizes() too.
  bool defaultTensorParallel = false;
  /// Device memory kept out of the plan (the CUDA context, communicator
  /// buffers: --reserve); memoryBytes is what is left for the arena.
  uint64_t reserveBytes = 0;
  /// Compile the whole model for every candidate (no extrapolation).
  bool exact = false;
  /// A candidate that changes the training's numerics (8-bit state,
  /// another optimizer than the first of `optimizers`, gradient release
  /// that drops the recipe's clipping) is the best only where nothing
  /// that keeps them fits, or where it is predicted faster than the best
  /// that does by more than this fraction.
  double numericsMargin = 0.05;
};

/// The tensor-parallel sizes worth searching for `request`: the t > 1 up
/// to `maxSize` (a node's GPUs) that divide the ranks and the heads, and
/// divide the K/V heads or are a multiple of them (replicated K/V heads,
/// searched without sequence parallelism), after t = 1.
std::vector<int64_t> tensorParallelSizes(const PlanRequest &request,
                                         int64_t maxSize = 8);

/// What the analysis says of one configuration, per device and step.
struct PlanMeasure {
  /// The device arena the step's memory plan needs (MemoryPlan, as the
  /// lowering plans it; a micro-batch loop planned rolled, as train-step
  /// runs it): the figure that must fit, and the run's measured arena.
  uint64_t arena = 0;
  /// The analysis's most live bytes (a lower bound of the arena).
  uint64_t peak = 0;
  CategoryBytes atPeak{};
  /// The most live bytes within each phase (forward, backward, optimizer)
  /// and the categories at that point: each is linear in the layers of a
  /// stack of equal layers, where the step's peak (their maximum) may move
  /// from one phase to another.
  std::array<uint64_t, 3> phasePeak{};
  std::array<CategoryBytes, 3> phaseAtPeak{};
  uint64_t forwardFlops = 0, backwardFlops = 0, optimizerFlops = 0,
           recomputeFlops = 0;
  /// The predicted seconds of each phase's ops (TimeModel.h, on the
  /// request's hardware; recompute in the backward's), collectives apart.
  std::array<double, 3> phaseSeconds{};
  /// Bytes a rank sends through collectives per step (pipeline exchanges
  /// apart).
  uint64_t bytesSent = 0;
  /// Bytes a pipeline stage sends to the others per step (its exchanges),
  /// and of bytesSent those on the tensor axis (per micro-batch, where
  /// ZeRO's on the data axis are per step).
  uint64_t exchangeBytes = 0, tensorBytes = 0;
  /// A pipeline: its slowest stage's forward and backward seconds per
  /// micro-batch, and the units (a chunk's forward kept for its backward,
  /// one micro-batch) the measured stage holds at its peak.
  double stageMicroBatchSeconds = 0;
  int64_t unitsInFlight = 0;
  /// Model states (weights, gradients, optimizer state), all of the step.
  uint64_t modelStateBytes = 0;
  /// Host memory (offloaded optimizer state and activations) and the bytes
  /// that cross between host and device per step; of those, the
  /// activations' (train.transfer: out in the forward, back before the
  /// backward).
  uint64_t hostBytes = 0, hostDeviceBytes = 0, activationTransferBytes = 0;
};

struct PlanCandidate {
  int64_t microBatch = 1, accumulation = 1;
  PlanRemat remat = PlanRemat::none;
  /// -1: one rank, no train-zero.
  int64_t stage = -1;
  bool eightBit = false;
  PlanOffload offload = PlanOffload::none;
  /// train-offload-activations: the checkpoints under recompute, every
  /// saved tensor without (prefetch 1).
  bool offloadActivations = false;
  /// The gradients' sums over the micro-batches: f32, or the model's
  /// 16-bit type (train-grad-accum accumulate-dtype).
  AccumDtype sumDtype = AccumDtype::f32;
  /// The optimizer (one of the request's) and gradient release.
  std::string optimizer = "adamw";
  bool releaseGradients = false;
  /// The request's recipe (empty: trainmem-run's default).
  std::string recipe;
  /// Whether it trains other numbers than the request's recipe does: 8-bit
  /// state, another optimizer than the request's first, release without
  /// the recipe's clipping.
  bool changesNumerics = false;
  /// train-fuse-attention and train-fuse-elementwise on the forward.
  bool fuseAttention = false;
  bool fuseElementwise = false;
  /// train-tensor-parallel's size (1: none) and sequence parallelism.
  int64_t tensorParallel = 1;
  bool sequenceParallel = false;
  /// Whether the embedding and head are split by the vocabulary (t > 1
  /// and t divides it; otherwise whole on every rank).
  bool vocabularyParallel = false;
  /// train-context-parallel's size (1: none), load balanced, and how its
  /// attention gets the keys and values.
  int64_t contextParallel = 1;
  ContextExchange contextExchange = ContextExchange::allGather;
  /// train-pipeline's stages (1: none) and chunks per stage (v > 1: the
  /// interleaved schedule; else 1F1B).
  int64_t pipelineParallel = 1, virtualStages = 1;
  bool contextRing() const {
    return contextParallel > 1 && contextExchange == ContextExchange::ring;
  }

  PlanMeasure measure;
  /// Whether the measure is of the whole model (else extrapolated from
  /// three small layer counts that grow linearly).
  bool wholeModel = true;
  /// Extrapolated although the small layer counts did not grow linearly
  /// (the whole model was too large to compile in the planner's time).
  bool approximate = false;
  /// The throughput model (seconds per optimizer step). A pipeline's
  /// compute is its slowest stage's per micro-batch times m + (p - 1) / v
  /// (of which the bubble, (p - 1) / v of them), its exchanges' bytes over
  /// the link between stages (pointToPointSeconds).
  double computeSeconds = 0, optimizerSeconds = 0, communicationSeconds = 0,
         offloadSeconds = 0, stepSeconds = 0, bubbleSeconds = 0,
         pointToPointSeconds = 0;
  /// Tokens per second per device, and relative to the fastest candidate.
  double tokensPerSecond = 0, relative = 0;
  bool fits = false;
  /// Why it does not fit, or why it could not be compiled.
  std::string rejected;

  /// This configuration as train-step's typed options (the planner builds
  /// its pass pipelines from them); an error when the recipe does not
  /// parse.
  llvm::Expected<TrainStepOptions> stepOptions(int64_t ranks,
                                               uint64_t memoryBytes) const;
  /// The passes of this configuration, comma-separated (inside
  /// builtin.module(...)): train-step's for stepOptions, as the planner
  /// measured them (the micro-batch loop planned rolled).
  std::string passPipeline(int64_t ranks, uint64_t memoryBytes) const;
  /// The same as trainmem-run options.
  std::string runOptions(uint64_t memoryBytes) const;
  /// train-tensor-parallel's options (size, sequence and vocabulary
  /// parallelism).
  std::string tensorParallelOptions() const;
  /// train-autodiff's options: the recipe with this row's optimizer.
  std::string autodiffOptions() const;
  /// One line: "micro-batch 4 x 8, selective, ZeRO-1, 8-bit".
  std::string describe() const;
  /// The data-parallel ranks of `ranks` (ZeRO's): ranks / (t · c · p).
  int64_t dataRanks(int64_t ranks) const {
    return ranks / (tensorParallel * contextParallel * pipelineParallel);
  }
  /// The trainmem-run --pipeline options ("stages=p micro-batches=m ...").
  std::string pipelineOptions() const;
};

struct PlanResult {
  std::vector<PlanCandidate> candidates;
  /// The index of the fitting candidate with the highest predicted
  /// throughput (ties: the smaller peak).
  std::optional<size_t> best;
  /// Where nothing fits: the smallest peak found and what dominates it.
  std::string nothingFits;
  /// The tensor-parallel sizes searched because nothing fit at t = 1 (a
  /// defaulted request's), in order; empty when none were.
  std::vector<int64_t> escalatedTensorParallel;
  /// Whether activation offload was searched because nothing fit without
  /// it (a defaulted request's).
  bool escalatedOffloadActivations = false;
  /// Whether 16-bit gradient sums were searched because nothing fit
  /// without them (a defaulted request's).
  bool escalatedSixteenBitSums = false;
  /// The context-parallel sizes searched because nothing fit without them
  /// (a defaulted request's), in order; empty when none were.
  std::vector<int64_t> escalatedContextParallel;
};

/// The 16-bit type of the request's gradients (a preset's --dtype, a model
/// file's parameters'), which train-grad-accum can sum them in; f32 where
/// they are f32.
AccumDtype sixteenBitGradients(const PlanRequest &request);

/// Fills the request's empty space lists with the defaults; an error when
/// the request is inconsistent (a global batch the ranks do not
/// divide, no budget, ...). With a module: takes the model's name, sequence
/// and per-rank batch from it (a global batch of 0 becomes that batch times
/// the ranks).
llvm::Error completePlanRequest(PlanRequest &request);

/// The batch and sequence of a forward + loss module: its tokens input's
/// shape; an error where it has none or its loss reads targets from an
/// argument trainmem-run does not feed them to.
llvm::Error batchOfModule(ModuleOp module, int64_t &batch, int64_t &seq);

/// Plans a completed request (completePlanRequest).
PlanResult plan(MLIRContext &context, const PlanRequest &request);

/// The predicted step time of a measured candidate on `hardware` (fills its
/// seconds and tokensPerSecond): its ops' times (TimeModel.h) one after
/// another, then the bytes its collectives send at the interconnect's
/// bandwidth and its offload's over the host link, neither overlapped with
/// compute (docs/Planner.md).
void predictThroughput(PlanCandidate &candidate, const PlanRequest &request);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_PLAN_PLANNER_H
