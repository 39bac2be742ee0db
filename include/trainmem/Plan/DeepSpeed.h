//===- DeepSpeed.h - DeepSpeed configs in and out of the planner -*- C++
//-*-===//
//
// trainmem-plan --from-deepspeed reads a DeepSpeed config's decisions as
// one candidate; --emit deepspeed-json writes a candidate as a config, with
// the decisions DeepSpeed has no key for said as notes.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_PLAN_DEEPSPEED_H
#define TRAINMEM_PLAN_DEEPSPEED_H

#include "trainmem/Plan/Planner.h"
#include "trainmem/Plan/Recipe.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace train {

/// A DeepSpeed config's decisions, as a candidate and a request's batch.
struct DeepSpeedPlan {
  PlanCandidate candidate;
  int64_t globalBatch = 0;
  /// bf16, f16 or f32, from its bf16/fp16 keys.
  std::optional<std::string> dtype;
  /// The recipe its optimizer params and gradient_clipping give, as
  /// train-autodiff's options ("lr=0.0003 beta1=0.9 ... clip-norm=1";
  /// clip-norm=0 without gradient_clipping, as DeepSpeed does not clip).
  std::string recipe;
};

/// Reads the keys this project models from a config for `rankCount` ranks;
/// every other key is named in `warnings`; a stage, offload or optimizer it
/// does not model, or a batch that does not add up, is an error.
llvm::Expected<DeepSpeedPlan> readDeepSpeed(llvm::StringRef text,
                                            int64_t rankCount,
                                            std::vector<std::string> &warnings);

/// What of `c` and `recipe` a DeepSpeed config cannot express (selective
/// or budget recompute, state on the host with the update on the device,
/// 8-bit state, gradient release, tensor parallelism, an optimizer other
/// than AdamW and Lion, a rate schedule), one reason each; empty: the
/// config trains the plan's step.
std::vector<std::string> deepSpeedCannotExpress(const PlanCandidate &c,
                                                const PlanRecipe &recipe);

/// `c` as a DeepSpeed config for `request` with `recipe`'s optimizer and
/// clipping (for a `c` deepSpeedCannotExpress accepts); the model's own
/// settings the plan assumes (fused attention and element-wise chains) are
/// said in `notes`.
llvm::json::Object toDeepSpeed(const PlanCandidate &c,
                               const PlanRequest &request,
                               const PlanRecipe &recipe,
                               std::vector<std::string> &notes);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_PLAN_DEEPSPEED_H
