//===- RuntimeLowering.h - lowering ops to runtime calls --------*- C++ -*-===//
//
// What an op's RuntimeLoweringOpInterface model gets to emit its runtime
// calls with: the arena offset of every tensor (the static plan), shapes
// and strides, and `call`, which checks the call against
// RuntimeFunctions.def. registerRuntimeLoweringExternalModels attaches the
// train dialect's models; a dialect with ops of its own attaches its own.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_CONVERSION_RUNTIMELOWERING_H
#define TRAINMEM_CONVERSION_RUNTIMELOWERING_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/Value.h"

#include <cstdint>
#include <functional>

namespace mlir {
namespace train {

/// One argument of a runtime call: an i64 or an f64 constant.
struct RuntimeArg {
  RuntimeArg(int64_t value) : isFloat(false), integer(value) {}
  RuntimeArg(int value) : isFloat(false), integer(value) {}
  RuntimeArg(uint64_t value)
      : isFloat(false), integer(static_cast<int64_t>(value)) {}
  RuntimeArg(double value) : isFloat(true), real(value) {}
  bool isFloat;
  int64_t integer = 0;
  double real = 0.0;
};

class RuntimeCallBuilder {
public:
  /// `offsetOf` gives the arena byte offset of a tensor value.
  RuntimeCallBuilder(OpBuilder &builder, Value context,
                     std::function<int64_t(Value)> offsetOf)
      : builder(builder), context(context), offsetOf(std::move(offsetOf)) {}

  /// Calls runtime function `name` (RuntimeFunctions.def) with the context
  /// and `args`; asserts that the function and the argument count exist.
  void call(StringRef name, ArrayRef<RuntimeArg> args, Location loc);
  /// Fails with an error at `op` when a tensor operand is a strided view:
  /// most kernels read row-major operands.
  LogicalResult requireContiguous(Operation *op);
  /// requireContiguous, then call.
  LogicalResult callContiguous(Operation *op, StringRef name,
                               ArrayRef<RuntimeArg> args);

  /// Where `value` lives in the arena.
  int64_t offset(Value value) const { return offsetOf(value); }
  static int64_t elements(Value value);
  static ArrayRef<int64_t> shape(Value value);
  static int64_t lastDim(Value value);
  /// Elements / last dimension: the rows a row-wise kernel runs over.
  static int64_t rows(Value value);
  /// Bits of an integer tensor's element (ids: 32 or 64).
  static int64_t idBits(Value ids);

  /// Emits the calls that follow into another function whose argument is
  /// the context.
  void setContext(Value value) { context = value; }
  uint64_t getNumCalls() const { return numCalls; }

private:
  OpBuilder &builder;
  Value context;
  std::function<int64_t(Value)> offsetOf;
  uint64_t numCalls = 0;
};

/// Attaches the runtime lowering of every train op (and of splat
/// arith.constant tensors) to the ops, as external models.
void registerRuntimeLoweringExternalModels(DialectRegistry &registry);

} // namespace train
} // namespace mlir

#include "trainmem/Conversion/RuntimeLoweringInterface.h.inc"

#endif // TRAINMEM_CONVERSION_RUNTIMELOWERING_H
