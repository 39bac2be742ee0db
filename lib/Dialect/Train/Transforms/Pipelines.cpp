//===- Pipelines.cpp - registered pipelines of the train dialect ----------===//

#include "trainmem/Dialect/Train/Transforms/Pipelines.h"
#include "trainmem/Dialect/Train/Transforms/OptimizerRegistry.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/StepPhases.h"

#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-step"

using namespace mlir;
using namespace mlir::train;

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

bool TrainStepOptions::operator==(const TrainStepOptions &other) const {
  return differentiate == other.differentiate &&
         tensorParallel == other.tensorParallel &&
         fuseAttention == other.fuseAttention &&
         contextParallel == other.contextParallel &&
         fuseElementwise == other.fuseElementwise &&
         autodiff == other.autodiff && lossScale == other.lossScale &&
         remat == other.remat && gradAccum == other.gradAccum &&
         unrollAccum == other.unrollAccum && quantize == other.quantize &&
         zero == other.zero && releaseGradients == other.releaseGradients &&
         offloadActivations == other.offloadActivations &&
         offload == other.offload && pipeline == other.pipeline;
}

FailureOr<TrainStepOptions> mlir::train::parseTrainStepOptions(
    const TrainStepPipelineOptions &text,
    function_ref<LogicalResult(const Twine &)> errorHandler) {
  TrainStepOptions options;
  // Each pass's options are parsed on their own, so that bad options name
  // the pass they belong to.
  auto parse = [&](auto &out, StringRef given) -> LogicalResult {
    using OptionsT = std::remove_reference_t<decltype(out)>;
    std::string message;
    llvm::raw_string_ostream errors(message);
    if (succeeded(parsePassOptions(given, out, errors)))
      return success();
    return errorHandler("train-step: bad options for " +
                        PassOptionsTraits<OptionsT>::argument + " ('" + given +
                        "'): " + StringRef(message).trim());
  };
  // An optional pass: run when its text is given.
  auto parseIf = [&](auto &out, StringRef given, bool run) -> LogicalResult {
    if (!run)
      return success();
    return parse(out.emplace(), given);
  };
  options.differentiate = text.differentiate;
  options.fuseAttention = text.fuseAttention;
  options.fuseElementwise = text.fuseElementwise;
  options.unrollAccum = text.unrollAccum;
  options.releaseGradients = text.releaseGradients;
  if (!text.lossScale && !text.lossScaleOptions.empty())
    return errorHandler("train-step: loss-scale-options needs loss-scale=true");
  if (!text.quantize && !text.quantizeOptions.empty())
    return errorHandler("train-step: quantize-options needs quantize=true");
  if (failed(parseIf(options.tensorParallel, text.tensorParallel,
                     !text.tensorParallel.empty())) ||
      failed(parseIf(options.contextParallel, text.contextParallel,
                     !text.contextParallel.empty())) ||
      failed(parse(options.autodiff, text.autodiff)) ||
      failed(
          parseIf(options.lossScale, text.lossScaleOptions, text.lossScale)) ||
      failed(parseIf(options.remat, text.remat, !text.remat.empty())) ||
      failed(parseIf(options.gradAccum, text.gradAccum,
                     !text.gradAccum.empty())) ||
      failed(parseIf(options.quantize, text.quantizeOptions, text.quantize)) ||
      failed(parseIf(options.zero, text.zero, !text.zero.empty())) ||
      failed(parseIf(options.offloadActivations, text.offloadActivations,
                     !text.offloadActivations.empty())) ||
      failed(parseIf(options.offload, "what=" + text.offload,
                     !text.offload.empty())) ||
      failed(parseIf(options.pipeline, text.pipeline, !text.pipeline.empty())))
    return failure();
  // Stages run micro-batches: the batch split into as many as asked.
  if (options.pipeline && !options.gradAccum &&
      options.pipeline->microBatches > 0) {
    options.gradAccum.emplace();
    options.gradAccum->steps = options.pipeline->microBatches;
  }
  return options;
}

FailureOr<TrainStepOptions> mlir::train::parseTrainStepOptions(
    StringRef text, function_ref<LogicalResult(const Twine &)> errorHandler) {
  TrainStepPipelineOptions parsed;
  std::string message;
  llvm::raw_string_ostream errors(message);
  if (failed(parsed.parseFromString(text, errors)))
    return errorHandler("train-step: cannot parse the options '" + text +
                        "': " + StringRef(message).trim());
  return parseTrainStepOptions(parsed, errorHandler);
}

std::string
mlir::train::printTrainStepOptions(const TrainStepOptions &options) {
  TrainStepPipelineOptions text;
  option_text::PassOptionWords words;
  // An optional pass's text: never empty, which would mean "not run".
  auto passText = [](const auto &passOptions) {
    std::string printed = printPassOptions(passOptions);
    return printed.empty() ? printPassOptions(passOptions, /*all=*/true)
                           : printed;
  };
  if (!options.differentiate)
    words.add(text.differentiate, false);
  if (options.tensorParallel)
    words.add(text.tensorParallel, passText(*options.tensorParallel));
  if (options.fuseAttention)
    words.add(text.fuseAttention, true);
  if (options.contextParallel)
    words.add(text.contextParallel, passText(*options.contextParallel));
  if (options.fuseElementwise)
    words.add(text.fuseElementwise, true);
  if (std::string autodiff = printPassOptions(options.autodiff);
      !autodiff.empty())
    words.add(text.autodiff, autodiff);
  if (options.remat)
    words.add(text.remat, passText(*options.remat));
  if (options.gradAccum)
    words.add(text.gradAccum, passText(*options.gradAccum));
  if (options.unrollAccum)
    words.add(text.unrollAccum, true);
  // A pass switched on by a flag, its options apart (when not defaults).
  auto flagged = [&](auto &flag, auto &optionsText, const auto &passOptions) {
    if (!passOptions)
      return;
    words.add(flag, true);
    if (std::string printed = printPassOptions(*passOptions); !printed.empty())
      words.add(optionsText, printed);
  };
  flagged(text.quantize, text.quantizeOptions, options.quantize);
  flagged(text.lossScale, text.lossScaleOptions, options.lossScale);
  if (options.zero)
    words.add(text.zero, passText(*options.zero));
  if (options.releaseGradients)
    words.add(text.releaseGradients, true);
  if (options.offloadActivations)
    words.add(text.offloadActivations, passText(*options.offloadActivations));
  if (options.pipeline)
    words.add(text.pipeline, passText(*options.pipeline));
  if (options.offload)
    words.add(text.offload,
              std::string(options.offload->what == OffloadWhat::statesAndUpdate
                              ? "states+update"
                              : "states") +
                  (options.offload->gradients == OffloadGradients::host
                       ? " gradients=host"
                       : ""));
  return words.str();
}

namespace {

/// The pipeline element of a pass with typed options.
template <typename OptionsT> TrainStepPass stepPass(OptionsT options) {
  std::string text = printPass(options);
  return {PassOptionsTraits<OptionsT>::argument, std::move(text),
          [options]() { return PassOptionsTraits<OptionsT>::create(options); }};
}

/// The pipeline element of a pass without options.
TrainStepPass stepPass(StringRef argument, std::unique_ptr<Pass> (*create)()) {
  return {argument, argument.str(), create};
}

/// train-step's refusals of what no order of its passes does.
LogicalResult
checkTrainStepOptions(const TrainStepOptions &options,
                      function_ref<LogicalResult(const Twine &)> errorHandler) {
  if (options.pipeline && !options.gradAccum)
    return errorHandler("train-step: pipeline stages run micro-batches: give "
                        "their number (pipeline=\"micro-batches=m ...\") or "
                        "grad-accum=\"steps=m\"");
  if (options.pipeline && options.remat &&
      options.remat->policy == RematPolicy::budget &&
      options.pipeline->selectStage < 0)
    return errorHandler("train-step: remat policy=budget with pipeline "
                        "stages is one stage's budget: give the stage "
                        "(pipeline=\"... select-stage=k\"; trainmem-run "
                        "--pipeline gives each rank its own)");
  if (options.pipeline && (options.offload || options.contextParallel))
    return errorHandler(
        Twine("train-step: pipeline stages with ") +
        (options.offload ? "offload" : "context-parallel") +
        " are not built yet (docs/Pipeline.md, \"Not built yet\"): train "
        "the pipeline without it");
  if (options.fuseAttention && !options.differentiate)
    return errorHandler("train-step: fuse-attention rewrites the forward, "
                        "before train-autodiff; the input is a step already");
  if (options.fuseElementwise && !options.differentiate)
    return errorHandler("train-step: fuse-elementwise rewrites the forward, "
                        "before train-autodiff; the input is a step already");
  // Data ranks beside the tensor groups average their gradients through
  // train-zero's collectives (stage 0 is plain data parallelism): refused
  // here, before any pass runs, rather than by the lowering at the end.
  if (options.tensorParallel && options.tensorParallel->data != 1 &&
      !options.zero)
    return errorHandler(
        "train-step: tensor-parallel=\"size=" +
        Twine(options.tensorParallel->size) +
        " data=" + Twine(options.tensorParallel->data) +
        "\" splits the step over " + Twine(options.tensorParallel->data) +
        " data-parallel groups, whose gradients only train-zero averages: "
        "add zero=\"stage=0\" (plain data parallelism) or another stage");
  if (options.contextParallel && !options.differentiate)
    return errorHandler("train-step: context-parallel cuts the forward, "
                        "before train-autodiff; the input is a step already");
  if (options.contextParallel && !options.fuseAttention)
    return errorHandler("train-step: context-parallel cuts a fused "
                        "attention's queries: add fuse-attention=true");
  if (options.tensorParallel && !options.differentiate)
    return errorHandler("train-step: tensor-parallel splits the forward, "
                        "before train-autodiff; the input is a step already");
  // A budget chooses each layer's recompute for the device's memory with
  // the activations on it; offloaded, the choice has nothing to weigh.
  if (options.remat && options.remat->policy == RematPolicy::budget &&
      options.offloadActivations)
    return errorHandler("train-step: remat policy=budget chooses recompute "
                        "for activations kept on the device, which "
                        "offload-activations moves to the host: use "
                        "policy=full (its checkpoints offloaded) or "
                        "selective with offload-activations, or the budget "
                        "without it");
  return success();
}

/// A budget is for the step as it runs: train-remat (at `remat` in
/// `passes`) measures each choice after the passes that follow it (the
/// loop rolled; the offload too where the step is built without it).
void measureAfterRemat(SmallVectorImpl<TrainStepPass> &passes, size_t remat,
                       const TrainStepOptions &options, TrainStepScope scope) {
  SmallVector<std::string> after;
  for (const TrainStepPass &pass : llvm::drop_begin(passes, remat + 1))
    if (pass.argument != "train-plan-arena" &&
        pass.argument != "train-unroll-accum")
      after.push_back(pass.text);
  if (options.offload && !scope.offload)
    after.push_back(stepPass(*options.offload).text);
  TrainRematPassOptions measured = *options.remat;
  // The passes every step runs after train-remat: measured without saying.
  if (after.size() > 2)
    measured.measureAfter = llvm::join(after, ",");
  passes[remat] = stepPass(measured);
  passes[remat].conditions.push_back("policy=budget");
}

/// The budget's measured passes, and the order checked against the
/// phases' table before any pass runs.
FailureOr<SmallVector<TrainStepPass>>
finishTrainStepPasses(SmallVector<TrainStepPass> &passes,
                      std::optional<size_t> remat,
                      const TrainStepOptions &options, TrainStepScope scope,
                      function_ref<LogicalResult(const Twine &)> errorHandler) {
  if (remat && options.remat->policy == RematPolicy::budget &&
      options.remat->measureAfter.empty())
    measureAfterRemat(passes, *remat, options, scope);
  // What no order of these passes can do, refused before any runs.
  SmallVector<PhasedPass> phased;
  for (const TrainStepPass &pass : passes)
    phased.push_back({pass.argument, pass.conditions});
  std::string refusal;
  if (failed(checkPhaseOrder(phased, refusal)))
    return errorHandler("train-step: " + refusal);
  return passes;
}

} // namespace

FailureOr<SmallVector<TrainStepPass>> mlir::train::getTrainStepPasses(
    const TrainStepOptions &options,
    function_ref<LogicalResult(const Twine &)> errorHandler,
    TrainStepScope scope) {
  if (failed(checkTrainStepOptions(options, errorHandler)))
    return failure();
  SmallVector<TrainStepPass> passes;
  // Tensor parallelism first: the fusions then work on a rank's part (a
  // fused attention on its heads).
  if (options.tensorParallel)
    passes.push_back(stepPass(*options.tensorParallel));
  if (options.fuseAttention)
    passes.push_back(
        stepPass("train-fuse-attention", &createTrainFuseAttentionPass));
  // Context parallelism cuts the fused attention's queries.
  if (options.contextParallel)
    passes.push_back(stepPass(*options.contextParallel));
  if (options.fuseElementwise)
    passes.push_back(
        stepPass("train-fuse-elementwise", &createTrainFuseElementwisePass));
  if (options.differentiate) {
    passes.push_back(stepPass(options.autodiff));
    if (const OptimizerInfo *info = lookupOptimizer(options.autodiff.optimizer);
        info && info->hessianStep)
      passes.back().conditions.push_back("hessian");
  }
  if (options.lossScale)
    passes.push_back(stepPass(*options.lossScale));
  std::optional<size_t> remat;
  if (options.remat) {
    remat = passes.size();
    passes.push_back(stepPass(*options.remat));
    if (options.remat->policy == RematPolicy::budget)
      passes.back().conditions.push_back("policy=budget");
  }
  if (options.gradAccum)
    passes.push_back(stepPass(*options.gradAccum));
  if (options.quantize)
    passes.push_back(stepPass(*options.quantize));
  // One order for every combination: recompute is materialized where it
  // stands (in the micro-batch loop's body too), so that train-zero sees
  // the ops that read the weights again (stage 3 gathers for them) and
  // partitions the rolled loop (stages 2-3 reduce-scatter each
  // micro-batch's gradients into f32 shards); the loop is unrolled after.
  passes.push_back(stepPass(TrainMaterializeRematPassOptions()));
  // Activations to host memory once the backward's recompute is there (in
  // the micro-batch loop's body, before the loop is planned or unrolled);
  // a strided view it copies is made row-major by the next pass.
  if (options.offloadActivations)
    passes.push_back(stepPass(*options.offloadActivations));
  // Strided views that a kernel reads row-major are copied here, before
  // train-zero and the unrolling, so that the memory plan holds them.
  passes.push_back(stepPass("train-materialize-layouts",
                            &createTrainMaterializeLayoutsPass));
  // Pipeline stages are partitioned after the cut: each stage's data ranks.
  if (options.zero && !options.pipeline) {
    passes.push_back(stepPass(*options.zero));
    if (options.zero->stage >= 3 && options.zero->ranks > 1)
      passes.back().conditions.push_back("stage=3");
  }
  // Release after partitioning: each shard's update follows its bucket's
  // reduce-scatter.
  if (options.releaseGradients)
    passes.push_back(stepPass(TrainReleaseGradientsPassOptions()));
  // A micro-batch loop runs in its rolled plan: the state and updates are
  // offloaded on the rolled step (as the planner measures it), the loop
  // planned as one iteration, and left rolled (convert-train-to-runtime
  // lowers it as a loop) or, asked to, unrolled at the plan's offsets. A
  // loop summed in groups is analyzed unrolled only: planned when lowered.
  // A step given as input may hold a loop: unrolled.
  // Pipeline stages unroll the loop themselves, in their schedule's order.
  if (options.pipeline) {
    passes.push_back(stepPass(*options.pipeline));
    if (options.zero)
      passes.push_back(stepPass(*options.zero));
    return finishTrainStepPasses(passes, remat, options, scope, errorHandler);
  }
  bool rolled = options.gradAccum && options.gradAccum->groups == 1;
  if (!rolled && (options.gradAccum || !options.differentiate))
    passes.push_back(stepPass(TrainUnrollAccumPassOptions()));
  // Offload last: it marks the state and the updates of the finished step.
  if (options.offload && scope.offload)
    passes.push_back(stepPass(*options.offload));
  if (rolled && scope.planArena)
    passes.push_back(stepPass(TrainPlanArenaPassOptions()));
  if (rolled && options.unrollAccum)
    passes.push_back(stepPass(TrainUnrollAccumPassOptions()));
  return finishTrainStepPasses(passes, remat, options, scope, errorHandler);
}

LogicalResult mlir::train::buildTrainStepPipeline(
    OpPassManager &pm, const TrainStepOptions &options,
    function_ref<LogicalResult(const Twine &)> errorHandler,
    TrainStepScope scope) {
  FailureOr<SmallVector<TrainStepPass>> passes =
      getTrainStepPasses(options, errorHandler, scope);
  if (failed(passes))
    return failure();
  for (const TrainStepPass &pass : *passes)
    pm.addPass(pass.create());
  return success();
}

LogicalResult mlir::train::buildTrainStepPipeline(
    OpPassManager &pm, const TrainStepPipelineOptions &options,
    function_ref<LogicalResult(const Twine &)> errorHandler) {
  FailureOr<TrainStepOptions> typed =
      parseTrainStepOptions(options, errorHandler);
  if (failed(typed))
    return failure();
  return buildTrainStepPipeline(pm, *typed, errorHandler);
}

FailureOr<std::string> mlir::train::printTrainStepPipeline(
    const TrainStepOptions &options,
    function_ref<LogicalResult(const Twine &)> errorHandler,
    TrainStepScope scope) {
  FailureOr<SmallVector<TrainStepPass>> passes =
      getTrainStepPasses(options, errorHandler, scope);
  if (failed(passes))
    return failure();
  return llvm::join(
      llvm::map_range(*passes,
                      [](const TrainStepPass &pass) { return pass.text; }),
      ",");
}

void mlir::train::registerTrainPipelines() {
  registerPassPipeline(
      "train-step",
      "From a model to a step ready to lower: train-autodiff, then "
      "train-loss-scale, train-remat, train-grad-accum, "
      "train-quantize-optimizer-state as "
      "asked, train-materialize-remat, train-offload-activations as asked, "
      "train-materialize-layouts, train-zero and "
      "train-release-gradients as asked, train-unroll-accum, then "
      "train-offload-optimizer as asked (with grad-accum: the offload, "
      "train-plan-arena on the rolled loop, which stays rolled unless "
      "unroll-accum, then train-unroll-accum keeps the plan) "
      "(trainmem-run's pipeline)",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        FailureOr<TrainStepOptions> options =
            parseTrainStepOptions(text, errorHandler);
        if (failed(options) ||
            failed(buildTrainStepPipeline(pm, *options, errorHandler)))
          return failure();
        LLVM_DEBUG({
          llvm::dbgs() << "train-step: ";
          pm.printAsTextualPipeline(llvm::dbgs());
          llvm::dbgs() << "\n";
        });
        return success();
      },
      [](function_ref<void(const ::mlir::detail::PassOptions &)> optHandler) {
        optHandler(TrainStepPipelineOptions());
      });
}
