//===- Megatron.cpp - a plan as Megatron-LM arguments ---------------------===//
//
// The arguments are Megatron-LM's (megatron/training/arguments.py):
// --tensor-model-parallel-size, --sequence-parallel, --micro-batch-size,
// --global-batch-size, --recompute-granularity (selective: the attention
// core; full, with --recompute-method uniform --recompute-num-layers 1:
// every layer), --use-distributed-optimizer (the optimizer state sharded
// over the data-parallel ranks: ZeRO stage 1), --bf16 / --fp16,
// --use-flash-attn, --no-bias-gelu-fusion (the fusion is on by default),
// and the recipe's Adam hyperparameters (Megatron's Adam decouples the
// weight decay, as AdamW), its rate schedule (--lr-decay-style,
// --lr-warmup-iters, --lr-decay-iters, --min-lr) and clipping. A row it
// cannot express is refused by the caller (megatronCannotExpress).
//
//===----------------------------------------------------------------------===//

#include "trainmem/Plan/Megatron.h"
#include "trainmem/Dialect/Train/Transforms/OptimizerRegistry.h"
#include "trainmem/Plan/Json.h"

#include "llvm/Support/FormatVariadic.h"


namespace mlir {
namespace train {

std::vector<std::string> megatronCannotExpress(const PlanCandidate &c,
                                               const PlanRecipe &recipe) {
  std::vector<std::string> reasons;
  if (c.remat == PlanRemat::budget)
    reasons.push_back("budget recompute (a choice per layer; "
                      "--recompute-method block --recompute-num-layers N "
                      "recomputes the first N layers whole, no other mix)");
  if (c.stage >= 2)
    reasons.push_back(llvm::formatv(
        "ZeRO stage {0} (--use-distributed-optimizer shards the optimizer "
        "state: stage 1)",
        c.stage));
  if (c.offload != PlanOffload::none)
    reasons.push_back("optimizer offload");
  if (c.offloadActivations)
    reasons.push_back("activation offload (Megatron-Core's TransformerConfig "
                      "cpu_offloading=True, cpu_offloading_activations=True, "
                      "cpu_offloading_num_layers=<layers - 1>: NeMo and "
                      "Megatron Bridge set them, Megatron-LM's arguments do "
                      "not)");
  if (c.eightBit)
    reasons.push_back("8-bit optimizer state");
  if (c.releaseGradients)
    reasons.push_back("gradient release");
  if (c.sumDtype != AccumDtype::f32)
    reasons.push_back(
        "gradients summed in " + accumDtypeName(c.sumDtype).str() +
        " (Megatron-LM turns --accumulate-allreduce-grads-in-fp32 "
        "on with --bf16)");
  const OptimizerInfo *optimizer = lookupOptimizer(recipe.optimizer);
  if (!optimizer || optimizer->megatronName.empty())
    reasons.push_back("the " + recipe.optimizer +
                      " optimizer (--optimizer adam is AdamW)");
  return reasons;
}

std::vector<std::string> toMegatronArguments(const PlanCandidate &c,
                                             const PlanRequest &request,
                                             const PlanRecipe &recipe,
                                             std::vector<std::string> &notes) {
  std::vector<std::string> args;
  auto add = [&](llvm::StringRef name, std::string value = std::string()) {
    args.push_back(name.str());
    if (!value.empty())
      args.push_back(std::move(value));
  };
  add("--tensor-model-parallel-size", std::to_string(c.tensorParallel));
  if (c.sequenceParallel)
    add("--sequence-parallel");
  if (c.contextParallel > 1) {
    add("--context-parallel-size", std::to_string(c.contextParallel));
    // Megatron-Core's default is p2p, its ring.
    add("--cp-comm-type", c.contextRing() ? "p2p" : "allgather");
  }
  if (c.tensorParallel > 1 && !c.vocabularyParallel)
    notes.push_back(llvm::formatv(
        "the plan keeps the embedding and head whole on every rank ({0} does "
        "not divide the vocabulary); Megatron pads the vocabulary to a "
        "multiple of 128 x {0} (--make-vocab-size-divisible-by) and splits "
        "it, so its ranks hold less than the plan says",
        c.tensorParallel));
  if (c.pipelineParallel > 1) {
    add("--pipeline-model-parallel-size", std::to_string(c.pipelineParallel));
    // Megatron's interleaved schedule: layers per model chunk.
    if (c.virtualStages > 1)
      add("--num-layers-per-virtual-pipeline-stage",
          std::to_string(request.model.layers /
                         (c.pipelineParallel * c.virtualStages)));
  }
  add("--micro-batch-size", std::to_string(c.microBatch));
  add("--global-batch-size", std::to_string(request.globalBatch));
  if (c.remat == PlanRemat::selective) {
    add("--recompute-granularity", "selective");
  } else if (c.remat == PlanRemat::full) {
    add("--recompute-granularity", "full");
    add("--recompute-method", "uniform");
    add("--recompute-num-layers", "1");
  }
  if (c.stage >= 1)
    add("--use-distributed-optimizer");
  if (request.model.dtype == "bf16")
    add("--bf16");
  else if (request.model.dtype == "f16")
    add("--fp16");
  if (c.fuseAttention)
    add("--use-flash-attn");
  if (!c.fuseElementwise)
    add("--no-bias-gelu-fusion");
  // The recipe's AdamW, its rate schedule and clipping (Megatron decays
  // the rate linearly and clips the norm to 1 by default), each float the
  // shortest text argparse reads back exactly.
  if (const OptimizerInfo *optimizer = lookupOptimizer(recipe.optimizer);
      optimizer && !optimizer->megatronName.empty())
    add("--optimizer", optimizer->megatronName.str());
  add("--lr", shortestNumber(recipe.lr));
  add("--adam-beta1", shortestNumber(recipe.beta1));
  add("--adam-beta2", shortestNumber(recipe.beta2));
  add("--adam-eps", shortestNumber(recipe.epsilon));
  add("--weight-decay", shortestNumber(recipe.weightDecay));
  if (recipe.totalSteps > 0) {
    add("--lr-decay-style", "cosine");
    add("--lr-decay-iters", std::to_string(recipe.totalSteps));
    add("--min-lr", shortestNumber(recipe.minLr));
  } else {
    add("--lr-decay-style", "constant");
  }
  if (recipe.warmupSteps > 0)
    add("--lr-warmup-iters", std::to_string(recipe.warmupSteps));
  add("--clip-grad", shortestNumber(recipe.clipNorm));
  return args;
}

} // namespace train
} // namespace mlir
