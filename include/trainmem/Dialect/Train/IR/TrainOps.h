//===- TrainOps.h - ops of the train dialect ---------------------*- C++ -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAINOPS_H
#define TRAINMEM_DIALECT_TRAIN_IR_TRAINOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

#include "trainmem/Dialect/Train/IR/TrainAttrs.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainInterfaces.h"

namespace mlir {
namespace train {

/// Marks a compute op a step never differentiates (Train_NotDifferentiated
/// in TrainOps.td): gradient, optimizer and index ops.
template <typename ConcreteType>
class NotDifferentiated
    : public OpTrait::TraitBase<ConcreteType, NotDifferentiated> {};

/// Marks an op whose result is the element-wise sum of its operands
/// (Train_SumsOperands): analyses follow a gradient through it to the
/// partial gradients it sums.
template <typename ConcreteType>
class SumsOperands : public OpTrait::TraitBase<ConcreteType, SumsOperands> {};

/// Marks an op that computes each position from that position's values
/// alone (Train_PositionWise): it runs unchanged on a piece of the sequence.
template <typename ConcreteType>
class PositionWise : public OpTrait::TraitBase<ConcreteType, PositionWise> {};

/// True when a tensor of shape `from` broadcasts (NumPy rules, aligned from
/// the right) to shape `to` without changing `to`.
bool isBroadcastableTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to);

} // namespace train
} // namespace mlir

#define GET_OP_CLASSES
#include "trainmem/Dialect/Train/IR/TrainOps.h.inc"

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINOPS_H
