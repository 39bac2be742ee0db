//===- TrainAttrNames.h - discardable attribute names ------------*- C++ -*-===//
//
// Names of the function-argument attributes that tell passes which arguments
// of a step are parameters and which are data.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRNAMES_H
#define TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRNAMES_H

#include "llvm/ADT/StringRef.h"

namespace mlir {
namespace train {

/// On a function argument: the argument is a trainable parameter; the value
/// is its name (e.g. "h.0.attn.q.weight").
constexpr llvm::StringLiteral kParamAttrName = "train.param";
/// On a function argument: the argument is data; the value says which
/// ("tokens", "targets").
constexpr llvm::StringLiteral kInputAttrName = "train.input";
/// On a training step's argument or result: optimizer state of a parameter;
/// the value is "<param>.master", "<param>.m", "<param>.v" or
/// "<param>.momentum". A result and an argument with the same value are the
/// same state before and after the step (updated in place).
constexpr llvm::StringLiteral kOptimizerStateAttrName =
    "train.optimizer_state";
/// On a training step's result: the loss.
constexpr llvm::StringLiteral kLossAttrName = "train.loss";
/// On a training step's result: the gradient of the named parameter
/// (steps built with optimizer=none).
constexpr llvm::StringLiteral kGradAttrName = "train.grad";
/// On a training step's result: the global gradient norm before clipping.
constexpr llvm::StringLiteral kGradNormAttrName = "train.grad_norm";
/// On a function: a unit attribute marking the training step train-autodiff
/// built, whatever its name (option step-name).
constexpr llvm::StringLiteral kStepAttrName = "train.step";
/// On an op: a unit attribute marking a copy train-materialize-remat cloned
/// to recompute a value for the backward.
constexpr llvm::StringLiteral kRecomputeAttrName = "train.recompute";
/// On the module: a dictionary describing the model the graph came from.
constexpr llvm::StringLiteral kModelAttrName = "train.model";

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRNAMES_H
