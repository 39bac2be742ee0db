//===- Recipe.cpp - the recipe a plan trains with -------------------------===//
//
// train-autodiff's typed options, parsed as the pass parses them (the
// optimizer's defaults filled from its registry entry).
//
//===----------------------------------------------------------------------===//

#include "trainmem/Plan/Recipe.h"

#include "trainmem/Dialect/Train/Transforms/PassOptionText.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::train;

static llvm::Error recipeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Expected<PlanRecipe>
mlir::train::resolveRecipe(MLIRContext &context,
                           llvm::StringRef autodiffOptions) {
  TrainAutodiffPassOptions options;
  std::string message;
  llvm::raw_string_ostream errors(message);
  if (failed(parsePassOptions(autodiffOptions, options, errors)))
    return recipeError("the recipe '" + autodiffOptions +
                       "': " + llvm::StringRef(message).trim());
  PlanRecipe recipe;
  recipe.optimizer = options.optimizer;
  recipe.lr = options.lr;
  recipe.minLr = options.minLr;
  recipe.beta1 = options.beta1;
  recipe.beta2 = options.beta2;
  recipe.epsilon = options.epsilon;
  recipe.weightDecay = options.weightDecay;
  recipe.clipNorm = options.clipNorm;
  recipe.momentum = options.momentum;
  recipe.warmupSteps = options.warmupSteps;
  recipe.totalSteps = options.totalSteps;
  return recipe;
}
