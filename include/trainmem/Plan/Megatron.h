//===- Megatron.h - a plan as Megatron-LM arguments -------------*- C++ -*-===//
//
// trainmem-plan --emit megatron-args writes a candidate as the arguments
// of Megatron-LM's pretrain scripts, beside the DeepSpeed config of
// DeepSpeed.h; the decisions Megatron-LM has no argument for are said as
// notes.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_PLAN_MEGATRON_H
#define TRAINMEM_PLAN_MEGATRON_H

#include "trainmem/Plan/Planner.h"
#include "trainmem/Plan/Recipe.h"

#include <string>
#include <vector>

namespace mlir {
namespace train {

/// What of `c` and `recipe` Megatron-LM's arguments cannot express (ZeRO
/// stages 2 and 3, budget recompute, optimizer offload, 8-bit state,
/// gradient release, an optimizer other than AdamW), one reason each;
/// empty: the arguments train the plan's step.
std::vector<std::string> megatronCannotExpress(const PlanCandidate &c,
                                               const PlanRecipe &recipe);

/// `c` as Megatron-LM arguments for `request` (one per element, each value
/// its own element: `--micro-batch-size`, `2`, ...): parallelism (the
/// data-parallel size is what the launcher's ranks leave), batch,
/// recompute, the distributed optimizer for ZeRO stage 1, precision,
/// fusions and `recipe`'s AdamW, rate schedule and clipping (for a `c`
/// megatronCannotExpress accepts). What the plan assumes of the model
/// (the vocabulary kept whole) is said in `notes`.
std::vector<std::string> toMegatronArguments(const PlanCandidate &c,
                                             const PlanRequest &request,
                                             const PlanRecipe &recipe,
                                             std::vector<std::string> &notes);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_PLAN_MEGATRON_H
