//===- Recipe.h - the recipe a plan trains with ------------------*- C++ -*-===//
//
// The recipe is train-autodiff's options (the optimizer and its
// hyperparameters, the rate schedule, clipping): what trainmem-run builds
// the step with and what the planner measures. Its values as the pass
// resolves them (options not given take the optimizer's defaults) are what
// the exports write, so that DeepSpeed and Megatron-LM train as the
// printed trainmem-run command does.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_PLAN_RECIPE_H
#define TRAINMEM_PLAN_RECIPE_H

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace mlir {
namespace train {

struct PlanRecipe {
  std::string optimizer;
  double lr = 0, minLr = 0, beta1 = 0, beta2 = 0, epsilon = 0,
         weightDecay = 0, clipNorm = 0, momentum = 0;
  int64_t warmupSteps = 0, totalSteps = 0;
  /// A rate that changes over the steps (warm-up or cosine decay).
  bool hasSchedule() const { return warmupSteps > 0 || totalSteps > 0; }
};

/// The values train-autodiff runs with given `autodiffOptions` (the text
/// inside `train-autodiff{...}`), read back from the pass as parsed; the
/// pass's own error for options it refuses.
llvm::Expected<PlanRecipe> resolveRecipe(MLIRContext &context,
                                         llvm::StringRef autodiffOptions);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_PLAN_RECIPE_H
