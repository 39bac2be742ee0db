//===- Megatron.cpp - a plan as Megatron-LM arguments ---------------------===//
//
// The arguments are Megatron-LM's (megatron/training/arguments.py):
// --tensor-model-parallel-size, --sequence-parallel, --micro-batch-size,
// --global-batch-size, --recompute-granularity (selective: the attention
// core; full, with --recompute-method uniform --recompute-num-layers 1:
// every layer), --use-distributed-optimizer (the optimizer state sharded
// over the data-parallel ranks: ZeRO stage 1), --bf16 / --fp16,
// --use-flash-attn, --no-bias-gelu-fusion (the fusion is on by default),
// and Adam's hyperparameters (Megatron's Adam decouples the weight decay,
// as AdamW), its rate schedule and clipping.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Plan/Megatron.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstdio>
#include <cstdlib>

namespace mlir {
namespace train {

namespace {

/// A float as Megatron's argparse reads it back exactly: the fewest
/// significant digits that round-trip.
std::string number(double value) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value)
      break;
  }
  return text;
}

} // namespace

std::vector<std::string> toMegatronArguments(const PlanCandidate &c,
                                             const PlanRequest &request,
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
  if (c.tensorParallel > 1 && !c.vocabularyParallel)
    notes.push_back(llvm::formatv(
        "the plan keeps the embedding and head whole on every rank ({0} does "
        "not divide the vocabulary); Megatron pads the vocabulary to a "
        "multiple of 128 x {0} (--make-vocab-size-divisible-by) and splits "
        "it, so its ranks hold less than the plan says",
        c.tensorParallel));
  add("--micro-batch-size", std::to_string(c.microBatch));
  add("--global-batch-size", std::to_string(request.globalBatch));
  switch (c.remat) {
  case PlanRemat::none:
    break;
  case PlanRemat::selective:
    add("--recompute-granularity", "selective");
    break;
  case PlanRemat::full:
    add("--recompute-granularity", "full");
    add("--recompute-method", "uniform");
    add("--recompute-num-layers", "1");
    break;
  case PlanRemat::budget:
    notes.push_back("budget recompute (a choice per layer) has no Megatron-LM "
                    "argument: --recompute-granularity full "
                    "--recompute-method block --recompute-num-layers N "
                    "recomputes the first N layers whole");
    break;
  }
  if (c.stage >= 1)
    add("--use-distributed-optimizer");
  if (c.stage >= 2)
    notes.push_back(llvm::formatv(
        "ZeRO stage {0} has no Megatron-LM argument: "
        "--use-distributed-optimizer shards the optimizer state (stage 1); "
        "the plan's peak assumes the {1} sharded too",
        c.stage, c.stage == 2 ? "gradients" : "gradients and weights"));
  if (request.model.dtype == "bf16")
    add("--bf16");
  else if (request.model.dtype == "f16")
    add("--fp16");
  if (c.fuseAttention)
    add("--use-flash-attn");
  if (!c.fuseElementwise)
    add("--no-bias-gelu-fusion");
  // The step's AdamW, with train-add-optimizer's defaults.
  TrainAddOptimizerPassOptions adamw;
  add("--optimizer", "adam");
  add("--lr", number(adamw.lr));
  add("--adam-beta1", number(adamw.beta1));
  add("--adam-beta2", number(adamw.beta2));
  add("--adam-eps", number(adamw.epsilon));
  add("--weight-decay", number(adamw.weightDecay));
  // Megatron decays the rate linearly and clips the norm to 1 by default;
  // the step keeps its rate constant and does not clip.
  add("--lr-decay-style", "constant");
  add("--clip-grad", number(adamw.clipNorm));
  if (c.offload != PlanOffload::none)
    notes.push_back("optimizer offload has no Megatron-LM argument used "
                    "here; the plan's peak assumes the optimizer state on "
                    "the host");
  if (c.eightBit)
    notes.push_back("8-bit optimizer state has no Megatron-LM argument; the "
                    "plan's peak assumes it");
  return args;
}

} // namespace train
} // namespace mlir
