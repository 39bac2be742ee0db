//===- PassOptionText.cpp - the passes' options, typed and as text --------===//

#include "trainmem/Dialect/Train/Transforms/PassOptionText.h"

#include "OptimizerPassOptions.h"

#include <cstdio>
#include <cstdlib>

using namespace mlir;
using namespace mlir::train;

std::string mlir::train::option_text::printRoundTripDouble(double value) {
  char buffer[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value)
      break;
  }
  return buffer;
}

void mlir::train::option_text::PassOptionWords::printString(
    llvm::raw_ostream &os, const std::string &value) {
  if (value.empty() || value.find_first_of(" {}'\"") != std::string::npos)
    os << '{' << value << '}';
  else
    os << value;
}

namespace mlir {
namespace train {

/// The optimizer passes fill what the user did not give from the
/// optimizer's registry entry when they parse (TRAINMEM_OPTIMIZER_PASS_
/// OPTIONS); their typed options are completed the same way.
template <typename MirrorT>
static LogicalResult completeOptimizer(MirrorT &parsed, StringRef argument,
                                       llvm::raw_ostream &errors) {
  return completeOptimizerOptions(parsed, argument, [&](const Twine &message) {
    errors << message;
    return failure();
  });
}
template <typename MirrorT>
LogicalResult completeParsedOptions(MirrorT &parsed,
                                    TrainAutodiffPassOptions &options,
                                    llvm::raw_ostream &errors) {
  return completeOptimizer(parsed, "train-autodiff", errors);
}
template <typename MirrorT>
LogicalResult completeParsedOptions(MirrorT &parsed,
                                    TrainAddOptimizerPassOptions &options,
                                    llvm::raw_ostream &errors) {
  return completeOptimizer(parsed, "train-add-optimizer", errors);
}

#define GEN_PASS_OPTION_TEXT_DEF
#include "trainmem/Dialect/Train/Transforms/PassOptionText.h.inc"
} // namespace train
} // namespace mlir
