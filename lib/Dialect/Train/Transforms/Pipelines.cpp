//===- Pipelines.cpp - registered pipelines of the train dialect ----------===//

#include "trainmem/Dialect/Train/Transforms/Pipelines.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-step"

using namespace mlir;
using namespace mlir::train;

/// The value of option `key` in a pass's option text ("size=2 data=2"),
/// as the pass parses it: words of key=value; none where not given.
static std::optional<StringRef> optionValue(StringRef text, StringRef key) {
  SmallVector<StringRef> words;
  text.split(words, ' ', -1, /*KeepEmpty=*/false);
  for (StringRef word : words) {
    auto [name, value] = word.split('=');
    if (name.trim() == key)
      return value.trim();
  }
  return std::nullopt;
}

std::string mlir::train::autodiffOptionsFor(StringRef recipe,
                                            StringRef optimizer,
                                            bool releaseGradients) {
  bool adamw = optimizer.empty() || optimizer == "adamw";
  SmallVector<std::string> words;
  if (!adamw)
    words.push_back(("optimizer=" + optimizer).str());
  SmallVector<StringRef> given;
  (recipe.empty() ? StringRef(kDefaultRecipe) : recipe)
      .split(given, ' ', -1, /*KeepEmpty=*/false);
  for (StringRef word : given) {
    StringRef name = word.split('=').first.trim();
    if ((releaseGradients && name == "clip-norm") ||
        (recipe.empty() && !adamw && name == "lr"))
      continue;
    words.push_back(word.str());
  }
  return llvm::join(words, " ");
}

/// train-remat's options; a budget (`policy=budget`) is for the step as it
/// runs, so it gets the passes train-step runs after train-remat as
/// `measure-after` (unless given; the micro-batch loop left rolled).
static std::string rematOptions(const TrainStepPipelineOptions &options) {
  StringRef remat = options.remat;
  if (optionValue(remat, "policy") != "budget" ||
      remat.contains("measure-after"))
    return remat.str();
  SmallVector<std::string> after;
  if (!options.gradAccum.empty())
    after.push_back("train-grad-accum{" + options.gradAccum + "}");
  if (options.quantize)
    after.push_back("train-quantize-optimizer-state{" +
                    options.quantizeOptions + "}");
  after.push_back("train-materialize-remat");
  after.push_back("train-materialize-layouts");
  if (!options.zero.empty())
    after.push_back("train-zero{" + options.zero + "}");
  if (options.releaseGradients)
    after.push_back("train-release-gradients");
  if (!options.offload.empty())
    after.push_back("train-offload-optimizer{what=" + options.offload + "}");
  // The passes every step runs after train-remat: measured without saying.
  if (after.size() == 2)
    return remat.str();
  return (remat + " measure-after={" + llvm::join(after, ",") + "}").str();
}

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
  // Data ranks beside the tensor groups average their gradients through
  // train-zero's collectives (stage 0 is plain data parallelism): refused
  // here, before any pass runs, rather than by the lowering at the end.
  if (std::optional<StringRef> data =
          optionValue(options.tensorParallel, "data");
      data && *data != "1" && options.zero.empty())
    return errorHandler(
        "train-step: tensor-parallel=\"" + options.tensorParallel +
        "\" splits the step over " + *data +
        " data-parallel groups, whose gradients only train-zero averages: "
        "add zero=\"stage=0\" (plain data parallelism) or another stage");
  if (!options.tensorParallel.empty() && !options.differentiate)
    return errorHandler("train-step: tensor-parallel splits the forward, "
                        "before train-autodiff; the input is a step already");
  // Tensor parallelism first: the fusions then work on a rank's part (a
  // fused attention on its heads).
  if (!options.tensorParallel.empty() &&
      failed(add("train-tensor-parallel", options.tensorParallel)))
    return failure();
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
  if (!options.remat.empty() &&
      failed(add("train-remat", rematOptions(options))))
    return failure();
  if (!options.gradAccum.empty() &&
      failed(add("train-grad-accum", options.gradAccum)))
    return failure();
  if (options.quantize &&
      failed(add("train-quantize-optimizer-state", options.quantizeOptions)))
    return failure();
  if (!options.quantize && !options.quantizeOptions.empty())
    return errorHandler("train-step: quantize-options needs quantize=true");
  // One order for every combination: recompute is materialized where it
  // stands (in the micro-batch loop's body too), so that train-zero sees
  // the ops that read the weights again (stage 3 gathers for them) and
  // partitions the rolled loop (stages 2-3 reduce-scatter each
  // micro-batch's gradients into f32 shards); the loop is unrolled after.
  pm.addPass(createTrainMaterializeRematPass());
  // Strided views that a kernel reads row-major are copied here, before
  // train-zero and the unrolling, so that the memory plan holds them.
  pm.addPass(createTrainMaterializeLayoutsPass());
  if (!options.zero.empty() && failed(add("train-zero", options.zero)))
    return failure();
  // Release after partitioning: each shard's update follows its bucket's
  // reduce-scatter.
  if (options.releaseGradients)
    pm.addPass(createTrainReleaseGradientsPass());
  // A micro-batch loop runs in its rolled plan: the state and updates are
  // offloaded on the rolled step (as the planner measures it), the loop
  // planned as one iteration, and left rolled (convert-train-to-runtime
  // lowers it as a loop) or, asked to, unrolled at the plan's offsets. A
  // loop summed in groups is analyzed unrolled only: planned when lowered.
  std::optional<StringRef> groups = optionValue(options.gradAccum, "groups");
  if (!options.gradAccum.empty() && (!groups || *groups == "1")) {
    if (!options.offload.empty() &&
        failed(add("train-offload-optimizer", "what=" + options.offload)))
      return failure();
    pm.addPass(createTrainPlanArenaPass());
    if (options.unrollAccum)
      pm.addPass(createTrainUnrollAccumPass());
    return success();
  }
  pm.addPass(createTrainUnrollAccumPass());
  // Offload last: it marks the state and the updates of the finished step.
  if (options.offload.empty())
    return success();
  return add("train-offload-optimizer", "what=" + options.offload);
}

void mlir::train::registerTrainPipelines() {
  registerPassPipeline(
      "train-step",
      "From a model to a step ready to lower: train-autodiff, then "
      "train-loss-scale, train-remat, train-grad-accum, "
      "train-quantize-optimizer-state as "
      "asked, train-materialize-remat, train-materialize-layouts, "
      "train-zero and "
      "train-release-gradients as asked, train-unroll-accum, then "
      "train-offload-optimizer as asked (with grad-accum: the offload, "
      "train-plan-arena on the rolled loop, which stays rolled unless "
      "unroll-accum, then train-unroll-accum keeps the plan) "
      "(trainmem-run's pipeline)",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        TrainStepPipelineOptions options;
        if (failed(options.parseFromString(text)))
          return errorHandler("train-step: cannot parse the options '" +
                              text + "'");
        if (failed(buildTrainStepPipeline(pm, options, errorHandler)))
          return failure();
        LLVM_DEBUG({
          llvm::dbgs() << "train-step: ";
          pm.printAsTextualPipeline(llvm::dbgs());
          llvm::dbgs() << "\n";
        });
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> optHandler) {
        optHandler(TrainStepPipelineOptions());
      });
}
