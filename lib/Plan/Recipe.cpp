//===- Recipe.cpp - the recipe a plan trains with -------------------------===//
//
// The pass parses the options (and fills the optimizer's defaults); its
// textual form names every option's value, which is read back here.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Plan/Recipe.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace mlir;
using namespace mlir::train;

static llvm::Error recipeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Expected<PlanRecipe>
mlir::train::resolveRecipe(MLIRContext &context,
                           llvm::StringRef autodiffOptions) {
  PassManager pm(&context);
  std::string message;
  llvm::raw_string_ostream errors(message);
  std::string pipeline = ("train-autodiff{" + autodiffOptions + "}").str();
  if (failed(parsePassPipeline(pipeline, pm, errors)))
    return recipeError("the recipe '" + autodiffOptions +
                       "': " + llvm::StringRef(message).trim());
  std::string text;
  llvm::raw_string_ostream printed(text);
  pm.printAsTextualPipeline(printed);
  // `...train-autodiff{beta1=9.000000e-01 ... weight-decay=0.000000e+00}`.
  llvm::StringRef options = llvm::StringRef(text).split('{').second;
  options = options.split('}').first;
  llvm::StringMap<std::string> values;
  llvm::SmallVector<llvm::StringRef> words;
  options.split(words, ' ', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef word : words) {
    auto [key, value] = word.split('=');
    values[key.trim()] = value.trim().str();
  }
  auto real = [&](llvm::StringRef key) {
    return std::strtod(values.lookup(key).c_str(), nullptr);
  };
  auto count = [&](llvm::StringRef key) {
    return static_cast<int64_t>(
        std::strtoll(values.lookup(key).c_str(), nullptr, 10));
  };
  if (!values.count("optimizer") || !values.count("lr"))
    return recipeError("the recipe '" + autodiffOptions +
                       "': train-autodiff did not print its options");
  PlanRecipe recipe;
  recipe.optimizer = values.lookup("optimizer");
  recipe.lr = real("lr");
  recipe.minLr = real("min-lr");
  recipe.beta1 = real("beta1");
  recipe.beta2 = real("beta2");
  recipe.epsilon = real("eps");
  recipe.weightDecay = real("weight-decay");
  recipe.clipNorm = real("clip-norm");
  recipe.momentum = real("momentum");
  recipe.warmupSteps = count("warmup-steps");
  recipe.totalSteps = count("total-steps");
  return recipe;
}
