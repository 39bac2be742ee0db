//===- TrainInterfaces.h - interfaces of the train dialect -------*- C++ -*-===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAININTERFACES_H
#define TRAINMEM_DIALECT_TRAIN_IR_TRAININTERFACES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "trainmem/Dialect/Train/IR/TrainAttrs.h"

#include <optional>

namespace mlir {
namespace train {

/// Counts (elements, bytes, FLOPs) saturate here instead of wrapping past
/// 2^64: a count equal to kCountOverflow is too large to hold, and analyses
/// report it at the op instead of printing a wrapped number.
constexpr uint64_t kCountOverflow = ~uint64_t(0);

/// a · b, or kCountOverflow when it does not fit (or either is).
inline uint64_t mulCount(uint64_t a, uint64_t b) {
  if (a == kCountOverflow || b == kCountOverflow)
    return a == 0 || b == 0 ? 0 : kCountOverflow;
  uint64_t product;
  return __builtin_mul_overflow(a, b, &product) ? kCountOverflow : product;
}
inline uint64_t mulCount(uint64_t a, uint64_t b, uint64_t c) {
  return mulCount(mulCount(a, b), c);
}

/// a + b, or kCountOverflow when it does not fit (or either is).
inline uint64_t addCount(uint64_t a, uint64_t b) {
  uint64_t sum;
  return __builtin_add_overflow(a, b, &sum) ? kCountOverflow : sum;
}

/// Bytes a value of `type` occupies in memory: elements times the element
/// size, with i1 masks at one byte per element. 0 for non-tensor types;
/// kCountOverflow when it does not fit in 64 bits.
uint64_t getTensorBytes(Type type);

/// Number of elements of a ranked tensor type (1 for rank 0);
/// kCountOverflow when it does not fit in 64 bits.
uint64_t getNumElements(Type type);

/// A product a time model rates by its shape: `batch` independent GEMMs
/// C[m, n] = A[m, k] · B[k, n] with operands of element type
/// `elementType`.
struct GemmShape {
  uint64_t batch = 1, m = 0, n = 0, k = 0;
  Type elementType;
  uint64_t getFlops() const { return mulCount(mulCount(2, batch, m), n, k); }
};

/// One state tensor an optimizer update reads (operand `operandIndex`) and
/// writes (result `resultIndex`): what it holds and which part of its
/// encoding it is.
struct OptimizerStateUse {
  StateKind kind;
  StatePart part;
  unsigned operandIndex;
  unsigned resultIndex;
};

/// The 8-bit map a state of `kind` is stored on: Adam's v and Sophia's h
/// are non-negative (unsigned map); m and momentum take both signs.
inline QuantMap quantMapFor(StateKind kind) {
  return kind == StateKind::v || kind == StateKind::h
             ? QuantMap::unsigned_dynamic
             : QuantMap::signed_dynamic;
}

} // namespace train
} // namespace mlir

#include "trainmem/Dialect/Train/IR/TrainInterfaces.h.inc"

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAININTERFACES_H
