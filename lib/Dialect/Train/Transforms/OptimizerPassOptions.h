//===- OptimizerPassOptions.h - the optimizer options of two passes -*- C++
//-*-===//
//
// train-autodiff and train-add-optimizer declare the optimizer's options
// once (TrainOptimizerOptions in Passes.td); these read them into an
// OptimizerOptions and, when the options are parsed, fill what the user
// did not give from the optimizer's registry entry, so that a printed
// pipeline names the values the pass runs with.
//
//===----------------------------------------------------------------------===//

#ifndef LIB_DIALECT_TRAIN_TRANSFORMS_OPTIMIZERPASSOPTIONS_H
#define LIB_DIALECT_TRAIN_TRANSFORMS_OPTIMIZERPASSOPTIONS_H

#include "trainmem/Dialect/Train/Transforms/OptimizerRegistry.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

namespace mlir {
namespace train {

/// After `pass` (a pass, or the PassOptions mirror of its options that
/// PassOptionText.h parses with) parsed its options: an unknown optimizer
/// and an option the optimizer does not read, given another value than its
/// default, are errors naming `argument`; options not given take the
/// optimizer's defaults.
template <typename PassT>
LogicalResult
completeOptimizerOptions(PassT &pass, StringRef argument,
                         function_ref<LogicalResult(const Twine &)> onError) {
  StringRef name = pass.optimizer;
  if (name == "none")
    return success();
  const OptimizerInfo *info = lookupOptimizer(name);
  if (!info)
    return onError(argument + ": unknown optimizer '" + name + "' (expected " +
                   listOptimizerNames() + ", or none)");
  struct Given {
    OptimizerOption option;
    ::mlir::detail::PassOptions::Option<double> &value;
    double fallback;
  };
  const OptimizerDefaults &d = info->defaults;
  Given options[] = {
      {OptimizerOption::beta1, pass.beta1, d.beta1},
      {OptimizerOption::beta2, pass.beta2, d.beta2},
      {OptimizerOption::epsilon, pass.epsilon, d.epsilon},
      {OptimizerOption::weightDecay, pass.weightDecay, d.weightDecay},
      {OptimizerOption::momentum, pass.momentum, 0.0},
      // rho's default is its own (only Sophia reads it).
      {OptimizerOption::rho, pass.rho, pass.rho.getValue()}};
  // An option the optimizer does not read is an error when given a value
  // of its own: a printed pipeline names every option, at its default
  // where it does not apply, and parses again.
  auto givenApart = [](auto &option) {
    return option.hasValue() &&
           !(option.getDefault().hasValue() &&
             option.getValue() == option.getDefault().getValue());
  };
  for (Given &given : options) {
    if (givenApart(given.value) && !info->reads(given.option)) {
      std::string reads;
      for (OptimizerOption option : info->options)
        reads +=
            (reads.empty() ? "" : ", ") + getOptimizerOptionName(option).str();
      return onError(argument + ": optimizer=" + name + " has no option " +
                     getOptimizerOptionName(given.option) + " (it reads " +
                     reads + ")");
    }
    if (!given.value.hasValue())
      given.value = given.fallback;
  }
  if (givenApart(pass.hessianInterval) &&
      !info->reads(OptimizerOption::hessianInterval))
    return onError(argument + ": optimizer=" + name +
                   " has no option hessian-interval (only an optimizer "
                   "with a Hessian step reads it: sophia)");
  if (!pass.lr.hasValue())
    pass.lr = d.lr;
  return success();
}

/// The optimizer options `pass` runs with.
template <typename PassT>
OptimizerOptions readOptimizerOptions(const PassT &pass) {
  OptimizerOptions options;
  options.optimizer = pass.optimizer;
  options.lr = pass.lr;
  options.minLr = pass.minLr;
  options.warmupSteps = pass.warmupSteps;
  options.totalSteps = pass.totalSteps;
  options.beta1 = pass.beta1;
  options.beta2 = pass.beta2;
  options.epsilon = pass.epsilon;
  options.weightDecay = pass.weightDecay;
  options.momentum = pass.momentum;
  options.rho = pass.rho;
  options.hessianInterval = pass.hessianInterval;
  options.clipNorm = pass.clipNorm;
  options.masterWeights = pass.masterWeights;
  return options;
}

/// The members a pass with TrainOptimizerOptions declares to use the two.
#define TRAINMEM_OPTIMIZER_PASS_OPTIONS                                        \
  LogicalResult initializeOptions(                                             \
      StringRef options,                                                       \
      function_ref<LogicalResult(const Twine &)> errorHandler) override {      \
    if (failed(Base::initializeOptions(options, errorHandler)))                \
      return failure();                                                        \
    return completeOptimizerOptions(*this, getArgument(), errorHandler);       \
  }                                                                            \
  template <typename PassT>                                                    \
  friend LogicalResult mlir::train::completeOptimizerOptions(                  \
      PassT &, StringRef, function_ref<LogicalResult(const Twine &)>);         \
  template <typename PassT>                                                    \
  friend OptimizerOptions mlir::train::readOptimizerOptions(const PassT &);

} // namespace train
} // namespace mlir

#endif // LIB_DIALECT_TRAIN_TRANSFORMS_OPTIMIZERPASSOPTIONS_H
