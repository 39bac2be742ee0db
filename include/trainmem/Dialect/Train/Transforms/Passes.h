//===- Passes.h - passes of the train dialect --------------------*- C++ -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_H
#define TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
namespace train {

#define GEN_PASS_DECL
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PASSES_H
