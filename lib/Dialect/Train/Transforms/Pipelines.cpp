//===- Pipelines.cpp - registered pipelines of the train dialect ----------===//

#include "trainmem/Dialect/Train/Transforms/Pipelines.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::train;

LogicalResult mlir::train::buildTrainStepPipeline(
    OpPassManager &pm, const TrainStepPipelineOptions &options,
    function_ref<LogicalResult(const Twine &)> errorHandler) {
  // Each stage is parsed on its own, so that bad options name the pass
  // they belong to.
  auto add = [&](StringRef pass, StringRef passOptions) -> LogicalResult {
    std::string text = (pass + "{" + passOptions + "}").str();
    std::string message;
    llvm::raw_string_ostream errors(message);
    if (succeeded(parsePassPipeline(text, pm, errors)))
      return success();
    return errorHandler("train-step: bad options for " + pass + " ('" +
                        passOptions + "'): " + StringRef(message).trim());
  };
  if (options.fuseAttention && !options.differentiate)
    return errorHandler("train-step: fuse-attention rewrites the forward, "
                        "before train-autodiff; the input is a step already");
  if (options.fuseElementwise && !options.differentiate)
    return errorHandler("train-step: fuse-elementwise rewrites the forward, "
                        "before train-autodiff; the input is a step already");
  if (options.fuseAttention)
    pm.addPass(createTrainFuseAttentionPass());
  if (options.fuseElementwise)
    pm.addPass(createTrainFuseElementwisePass());
  if (options.differentiate && failed(add("train-autodiff", options.autodiff)))
    return failure();
  if (options.lossScale &&
      failed(add("train-loss-scale", options.lossScaleOptions)))
    return failure();
  if (!options.lossScale && !options.lossScaleOptions.empty())
    return errorHandler("train-step: loss-scale-options needs loss-scale=true");
  if (!options.remat.empty() && failed(add("train-remat", options.remat)))
    return failure();
  if (!options.gradAccum.empty() &&
      failed(add("train-grad-accum", options.gradAccum)))
    return failure();
  if (options.quantize &&
      failed(add("train-quantize-optimizer-state", options.quantizeOptions)))
    return failure();
  if (!options.quantize && !options.quantizeOptions.empty())
    return errorHandler("train-step: quantize-options needs quantize=true");
  // Offload last: it marks the state and the updates of the finished step.
  auto offload = [&]() -> LogicalResult {
    if (options.offload.empty())
      return success();
    return add("train-offload-optimizer", "what=" + options.offload);
  };
  if (options.zero.empty()) {
    pm.addPass(createTrainUnrollAccumPass());
    pm.addPass(createTrainMaterializeRematPass());
    return offload();
  }
  // Partitioned, with recompute inside a micro-batch loop: train-zero
  // partitions the rolled loop (stages 0-2 take unmaterialized recompute;
  // stage 3, which gathers for it, refuses it with what to do), then the
  // loop is unrolled and the recompute materialized (which needs the loop
  // unrolled).
  if (!options.remat.empty() && !options.gradAccum.empty()) {
    if (failed(add("train-zero", options.zero)))
      return failure();
    pm.addPass(createTrainUnrollAccumPass());
    pm.addPass(createTrainMaterializeRematPass());
    return offload();
  }
  // Partitioned: recompute is materialized first (stage 3 gathers for it),
  // and the micro-batch loop unrolled after train-zero (stages 2-3 reduce
  // each micro-batch inside it).
  pm.addPass(createTrainMaterializeRematPass());
  if (failed(add("train-zero", options.zero)))
    return failure();
  pm.addPass(createTrainUnrollAccumPass());
  return offload();
}

void mlir::train::registerTrainPipelines() {
  registerPassPipeline(
      "train-step",
      "From a model to a step ready to lower: train-autodiff, then "
      "train-loss-scale, train-remat, train-grad-accum, "
      "train-quantize-optimizer-state as "
      "asked, train-unroll-accum, train-materialize-remat; with zero, "
      "train-materialize-remat, train-zero, train-unroll-accum; then "
      "train-offload-optimizer as asked (trainmem-run's pipeline)",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        TrainStepPipelineOptions options;
        if (failed(options.parseFromString(text)))
          return errorHandler("train-step: cannot parse the options '" +
                              text + "'");
        return buildTrainStepPipeline(pm, options, errorHandler);
      },
      [](function_ref<void(const detail::PassOptions &)> optHandler) {
        optHandler(TrainStepPipelineOptions());
      });
}
