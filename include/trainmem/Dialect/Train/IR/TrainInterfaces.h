//===- TrainInterfaces.h - interfaces of the train dialect -------*- C++ -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAININTERFACES_H
#define TRAINMEM_DIALECT_TRAIN_IR_TRAININTERFACES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"

namespace mlir {
namespace train {

/// Bytes a value of `type` occupies in memory: elements times the element
/// size, with i1 masks at one byte per element. 0 for non-tensor types.
uint64_t getTensorBytes(Type type);

/// Number of elements of a ranked tensor type (1 for rank 0).
uint64_t getNumElements(Type type);

} // namespace train
} // namespace mlir

#include "trainmem/Dialect/Train/IR/TrainInterfaces.h.inc"

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAININTERFACES_H
