//===- Pipelines.h - registered pipelines of the train dialect ---*- C++ -*-===//
//
// `train-step`: from a model (or a step) to a step ready to lower, the
// pipeline trainmem-run compiles with, usable from trainmem-opt:
//
//   trainmem-opt model.mlir --pass-pipeline='builtin.module(train-step{
//       autodiff="lr=1e-3 clip-norm=1.0" remat="policy=selective"
//       grad-accum="steps=4" quantize=true})'
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PIPELINES_H
#define TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PIPELINES_H

#include "trainmem/Dialect/Train/Transforms/PassOptionText.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <functional>
#include <optional>

namespace mlir {
namespace train {

struct TrainStepPipelineOptions
    : public PassPipelineOptions<TrainStepPipelineOptions> {
  Option<bool> differentiate{
      *this, "differentiate",
      llvm::cl::desc("Differentiate @forward first (train-autodiff); false "
                     "when the input is a step already"),
      llvm::cl::init(true)};
  Option<std::string> tensorParallel{
      *this, "tensor-parallel",
      llvm::cl::desc("train-tensor-parallel options (first, on the forward "
                     "before train-autodiff), e.g. \"size=2\"; empty: "
                     "none"),
      llvm::cl::init("")};
  Option<std::string> contextParallel{
      *this, "context-parallel",
      llvm::cl::desc("train-context-parallel options (on the forward after "
                     "train-fuse-attention, before train-autodiff), e.g. "
                     "\"size=2\"; empty: none"),
      llvm::cl::init("")};
  Option<bool> fuseAttention{
      *this, "fuse-attention",
      llvm::cl::desc("Fuse decomposed attention into train.attention "
                     "(train-fuse-attention, on the forward before "
                     "train-autodiff)"),
      llvm::cl::init(false)};
  Option<bool> fuseElementwise{
      *this, "fuse-elementwise",
      llvm::cl::desc("Fuse element-wise chains (train-fuse-elementwise, on "
                     "the forward before train-autodiff)"),
      llvm::cl::init(false)};
  Option<std::string> autodiff{
      *this, "autodiff",
      llvm::cl::desc("train-autodiff options (optimizer included), e.g. "
                     "\"lr=1e-3 clip-norm=1.0\""),
      llvm::cl::init("")};
  Option<std::string> remat{
      *this, "remat",
      llvm::cl::desc("train-remat options, e.g. \"policy=selective\"; "
                     "empty: no rematerialization"),
      llvm::cl::init("")};
  Option<std::string> gradAccum{
      *this, "grad-accum",
      llvm::cl::desc("train-grad-accum options, e.g. \"steps=4\"; empty: "
                     "one batch per update"),
      llvm::cl::init("")};
  Option<bool> unrollAccum{
      *this, "unroll-accum",
      llvm::cl::desc("Unroll the micro-batch loop (train-unroll-accum, in "
                     "its rolled plan); by default it stays rolled and "
                     "convert-train-to-runtime lowers it as a loop, whose "
                     "code does not grow with the micro-batches (a loop "
                     "summed in groups is unrolled either way)"),
      llvm::cl::init(false)};
  Option<bool> quantize{
      *this, "quantize",
      llvm::cl::desc("Keep optimizer state in 8 bits "
                     "(train-quantize-optimizer-state)"),
      llvm::cl::init(false)};
  Option<bool> lossScale{
      *this, "loss-scale",
      llvm::cl::desc("Dynamic loss scaling (train-loss-scale), for f16"),
      llvm::cl::init(false)};
  Option<std::string> lossScaleOptions{
      *this, "loss-scale-options",
      llvm::cl::desc("train-loss-scale options, e.g. \"initial=1024\" "
                     "(with loss-scale=true)"),
      llvm::cl::init("")};
  Option<std::string> zero{
      *this, "zero",
      llvm::cl::desc("train-zero options, e.g. \"ranks=2 stage=1\"; empty: "
                     "one process"),
      llvm::cl::init("")};
  Option<bool> releaseGradients{
      *this, "release-gradients",
      llvm::cl::desc("Run each update as soon as its gradient is complete "
                     "(train-release-gradients, after train-zero)"),
      llvm::cl::init(false)};
  Option<std::string> offload{
      *this, "offload",
      llvm::cl::desc("Keep the optimizer state in host memory "
                     "(train-offload-optimizer, last): \"states\" or "
                     "\"states+update\"; empty: on the device"),
      llvm::cl::init("")};
  Option<std::string> offloadActivations{
      *this, "offload-activations",
      llvm::cl::desc("train-offload-activations options (after "
                     "train-materialize-remat, inside a micro-batch loop), "
                     "e.g. \"what=all prefetch=1\"; empty: none"),
      llvm::cl::init("")};
  Option<std::string> pipeline{
      *this, "pipeline",
      llvm::cl::desc("train-pipeline options (after "
                     "train-materialize-layouts, instead of the micro-batch "
                     "loop's unrolling), e.g. \"stages=2 schedule=1f1b "
                     "select-stage=0\"; without grad-accum, the batch is "
                     "split into its micro-batches first; empty: none"),
      llvm::cl::init("")};
  Option<std::string> quantizeOptions{
      *this, "quantize-options",
      llvm::cl::desc("train-quantize-optimizer-state options, e.g. "
                     "\"block=256\" (with quantize=true)"),
      llvm::cl::init("")};
};

/// train-step's options, typed: each pass's generated options struct
/// (Passes.td), set where train-step runs the pass. The registered
/// `train-step{...}` text (TrainStepPipelineOptions) is their user-facing
/// form: parseTrainStepOptions and printTrainStepOptions convert, and the
/// printed text parses back to equal options.
struct TrainStepOptions {
  bool differentiate = true;
  std::optional<TrainTensorParallelPassOptions> tensorParallel;
  bool fuseAttention = false;
  std::optional<TrainContextParallelPassOptions> contextParallel;
  bool fuseElementwise = false;
  TrainAutodiffPassOptions autodiff;
  std::optional<TrainLossScalePassOptions> lossScale;
  std::optional<TrainRematPassOptions> remat;
  std::optional<TrainGradAccumPassOptions> gradAccum;
  bool unrollAccum = false;
  std::optional<TrainQuantizeOptimizerStatePassOptions> quantize;
  std::optional<TrainZeroPassOptions> zero;
  bool releaseGradients = false;
  std::optional<TrainOffloadActivationsPassOptions> offloadActivations;
  std::optional<TrainOffloadOptimizerPassOptions> offload;
  std::optional<TrainPipelinePassOptions> pipeline;

  bool operator==(const TrainStepOptions &other) const;
  bool operator!=(const TrainStepOptions &other) const {
    return !(*this == other);
  }
};

/// `text` as typed options; bad options of a pass name it (through
/// `errorHandler`).
FailureOr<TrainStepOptions>
parseTrainStepOptions(const TrainStepPipelineOptions &text,
                      function_ref<LogicalResult(const Twine &)> errorHandler);
FailureOr<TrainStepOptions>
parseTrainStepOptions(StringRef text,
                      function_ref<LogicalResult(const Twine &)> errorHandler);

/// `options` as train-step's option text (what differs from the defaults),
/// which parseTrainStepOptions reads back to equal options.
std::string printTrainStepOptions(const TrainStepOptions &options);

/// What of train-step's pipeline to build: the planner compiles a step
/// without its offload (it measures each offload variant from one compiled
/// step) and without train-plan-arena (it plans the rolled loop itself).
struct TrainStepScope {
  bool offload = true;
  bool planArena = true;
};

/// One pass of train-step's pipeline: its text, how to make it and the
/// conditions of StepPhases.def its options meet.
struct TrainStepPass {
  StringRef argument;
  std::string text;
  std::function<std::unique_ptr<Pass>()> create;
  SmallVector<StringRef> conditions = {};
};

/// The passes of `train-step` for `options`, in its one order:
/// train-tensor-parallel and the fusions on the forward, train-autodiff
/// (with `differentiate`), train-loss-scale, train-remat, train-grad-accum
/// and train-quantize-optimizer-state when asked for, then
/// train-materialize-remat, train-materialize-layouts, train-zero and
/// train-release-gradients when asked for, then for a micro-batch loop
/// train-offload-optimizer, train-plan-arena and (asked to)
/// train-unroll-accum, else train-unroll-accum and the offload. A budget
/// recompute gets the passes after it as `measure-after`. Combinations no
/// order can do go to `errorHandler`: the list is checked against the
/// passes' phase table (StepPhases.def) before anything runs.
FailureOr<SmallVector<TrainStepPass>>
getTrainStepPasses(const TrainStepOptions &options,
                   function_ref<LogicalResult(const Twine &)> errorHandler,
                   TrainStepScope scope = {});

/// Adds the passes of `train-step` to `pm`, made from their typed options
/// (each pass's generated create...Pass(options)).
LogicalResult
buildTrainStepPipeline(OpPassManager &pm, const TrainStepOptions &options,
                       function_ref<LogicalResult(const Twine &)> errorHandler,
                       TrainStepScope scope = {});
/// The same from the text form (parsed by parseTrainStepOptions).
LogicalResult
buildTrainStepPipeline(OpPassManager &pm,
                       const TrainStepPipelineOptions &options,
                       function_ref<LogicalResult(const Twine &)> errorHandler);

/// The passes of `train-step` as the text of a pipeline (inside
/// builtin.module(...)): each pass with the options that differ from its
/// defaults, as trainmem-opt parses it back.
FailureOr<std::string>
printTrainStepPipeline(const TrainStepOptions &options,
                       function_ref<LogicalResult(const Twine &)> errorHandler,
                       TrainStepScope scope = {});

/// trainmem-run's recipe: the train-autodiff options it builds a step from
/// a forward + loss with unless told otherwise (AdamW at a constant 1e-3,
/// no weight decay, gradients clipped at norm 1). trainmem-plan measures
/// the step this recipe builds, and prints and exports it.
inline constexpr llvm::StringLiteral kDefaultRecipe =
    "lr=1e-3 weight-decay=0.0 clip-norm=1.0";

/// The train-autodiff options of a plan's step: `recipe` (empty: the
/// default one, without its lr for another optimizer than AdamW, whose
/// registered default rate applies) with `optimizer` (named unless AdamW)
/// and without clipping when the gradients are released (the norm needs
/// them all before the first update).
std::string autodiffOptionsFor(StringRef recipe, StringRef optimizer,
                               bool releaseGradients);

/// Registers `train-step`.
void registerTrainPipelines();

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PIPELINES_H
