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

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

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
  Option<std::string> quantizeOptions{
      *this, "quantize-options",
      llvm::cl::desc("train-quantize-optimizer-state options, e.g. "
                     "\"block=256\" (with quantize=true)"),
      llvm::cl::init("")};
};

/// Adds the passes of `train-step` to `pm`: train-autodiff (with
/// `differentiate`), train-loss-scale, train-remat, train-grad-accum and
/// train-quantize-optimizer-state when asked for, then
/// train-materialize-remat, train-zero and train-release-gradients when
/// asked for, train-unroll-accum and train-offload-optimizer when asked
/// for. Bad nested options go to
/// `errorHandler`.
LogicalResult
buildTrainStepPipeline(OpPassManager &pm,
                       const TrainStepPipelineOptions &options,
                       function_ref<LogicalResult(const Twine &)> errorHandler);

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
