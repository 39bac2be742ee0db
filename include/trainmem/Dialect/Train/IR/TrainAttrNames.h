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
/// On the module: a dictionary describing the model the graph came from.
constexpr llvm::StringLiteral kModelAttrName = "train.model";

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRNAMES_H
