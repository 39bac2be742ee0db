//===- RuntimeLowering.h - lowering ops to runtime calls --------*- C++ -*-===//
//
// What an op's RuntimeLoweringOpInterface model gets to emit its runtime
// calls with: the arena offset of every tensor (the static plan), shapes
// and strides, and `emit`, which takes a call whose arguments are named
// (rt::<kernel>, generated from the runtime's Kernels.def). registerRuntimeLoweringExternalModels attaches the
// train dialect's models; a dialect with ops of its own attaches its own.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_CONVERSION_RUNTIMELOWERING_H
#define TRAINMEM_CONVERSION_RUNTIMELOWERING_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/DenseMap.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/Value.h"

#include "trainmem-runtime/Runtime.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace mlir {
namespace train {

/// An argument a call computes when it runs: an i64 or f64 SSA value (a
/// micro-batch loop's index, or what the lowering derives from it).
struct RuntimeValue {
  Value value;
};

/// One argument of a runtime call: an i64 or an f64 constant, a constant
/// array of f64 (the kernel gets a pointer to it: a global of the module,
/// null when empty), a constant descriptor (tmrt_attention_shape: a global
/// array of its int64_t fields, in AttentionShape.def's order), or a value
/// computed when the call runs.
struct RuntimeArg {
  RuntimeArg(const tmrt_attention_shape &shape) : isIntArray(true) {
#define TMRT_ATTENTION_FIELD(name) ints.push_back(shape.name);
#include "trainmem-runtime/AttentionShape.def"
  }
  RuntimeArg(int64_t value) : isFloat(false), integer(value) {}
  RuntimeArg(int value) : isFloat(false), integer(value) {}
  RuntimeArg(uint64_t value)
      : isFloat(false), integer(static_cast<int64_t>(value)) {}
  RuntimeArg(double value) : isFloat(true), real(value) {}
  RuntimeArg(ArrayRef<double> values) : isArray(true), array(values) {}
  RuntimeArg(RuntimeValue value) : dynamic(value.value) {}
  bool isFloat = false;
  bool isArray = false;
  bool isIntArray = false;
  std::vector<int64_t> ints;
  int64_t integer = 0;
  double real = 0.0;
  ArrayRef<double> array;
  Value dynamic;
};

/// A parameter of a runtime call: it has no default, so a call that leaves
/// one out does not compile. It is a constant, or a RuntimeValue.
template <typename T> struct RuntimeParam {
  RuntimeParam(T value) : value(value) {}
  RuntimeParam(RuntimeValue dynamic) : value(), dynamic(dynamic) {}
  RuntimeArg arg() const {
    return dynamic.value ? RuntimeArg(dynamic) : RuntimeArg(value);
  }
  T value;
  RuntimeValue dynamic;
};

/// A runtime function compiled code may call: its name and ABI letters (c:
/// the context, i: int64_t, f: double, p: const double *, a constant array).
struct RuntimeFunctionInfo {
  const char *name;
  const char *signature;
};

} // namespace train
} // namespace mlir

// rt::<kernel>: one struct per kernel of trainmem-runtime/Kernels.def, with
// the kernel's parameters as fields, and kRuntimeFunctions.
#include "trainmem/Conversion/RuntimeCalls.h.inc"

namespace mlir {
namespace train {

/// Emits runtime calls. A call names each argument (C++20 designated
/// initializers, which must follow the parameters' order):
///
///   builder.emitContiguous(op, rt::add{.a = builder.offset(lhs),
///                                      .b = builder.offset(rhs),
///                                      .out = builder.offset(result),
///                                      .n = RuntimeCallBuilder::elements(result)});
class RuntimeCallBuilder {
public:
  /// `offsetOf` gives the arena byte offset of a tensor value.
  RuntimeCallBuilder(OpBuilder &builder, Value context,
                     std::function<int64_t(Value)> offsetOf)
      : builder(builder), context(context), offsetOf(std::move(offsetOf)) {}

  /// Emits the call `callArgs` (an rt:: struct) at `loc`.
  template <typename Call> void emit(const Call &callArgs, Location loc) {
    call(Call::kName, callArgs.args(), loc);
  }
  /// Fails with an error at `op` when a tensor operand is a strided view:
  /// most kernels read row-major operands.
  LogicalResult requireContiguous(Operation *op);
  /// requireContiguous, then emit at `op`'s location.
  template <typename Call>
  LogicalResult emitContiguous(Operation *op, const Call &callArgs) {
    if (failed(requireContiguous(op)))
      return failure();
    emit(callArgs, op->getLoc());
    return success();
  }

  /// The runtime's reference to `value`: its arena byte offset, with the
  /// element type of a bf16 or f16 tensor in the bits above
  /// (TMRT_DTYPE_SHIFT); f32 and integer tensors are their offset.
  int64_t offset(Value value) const {
    return offsetOf(value) | (dtypeCode(value.getType()) << kDtypeShift);
  }
  /// The runtime's element-type code of a tensor type (Runtime.h's
  /// TMRT_DTYPE_*): 1 bf16, 2 f16, 0 for everything else.
  static int64_t dtypeCode(Type type);
  /// Whether the runtime's kernels take tensors of `elementType`: f32,
  /// bf16, f16 and integers.
  static bool isRuntimeElementType(Type elementType);
  /// Fails with an error at `op` when one of `values` is a 16-bit float
  /// tensor: for the kernels that are f32 only, `what` says which.
  static LogicalResult requireF32(Operation *op, ValueRange values,
                                  StringRef what);
  static constexpr int64_t kDtypeShift = 56;
  /// The bit of a location that names the host arena (TMRT_HOST_MEMORY):
  /// offsetOf gives it for a tensor in host memory (train-offload-optimizer).
  static constexpr int64_t kHostMemoryBit = int64_t(1) << 55;
  static int64_t elements(Value value);
  static ArrayRef<int64_t> shape(Value value);
  static int64_t lastDim(Value value);
  /// Elements / last dimension: the rows a row-wise kernel runs over.
  static int64_t rows(Value value);
  /// Bits of an integer tensor's element (ids: 32 or 64).
  static int64_t idBits(Value ids);

  uint64_t getNumCalls() const { return numCalls; }

  /// The arena offset of the op's workspace (WorkspaceOpInterface), planned
  /// with its buffers; -1 when it has none.
  int64_t workspace() const { return workspaceOffset; }
  void setWorkspace(int64_t offset) { workspaceOffset = offset; }

private:
  /// Calls runtime function `name` with the context and `args`; asserts
  /// that the function and the argument count exist.
  void call(StringRef name, ArrayRef<RuntimeArg> args, Location loc);
  /// A pointer to `values` as a constant global of the module (one per
  /// distinct array), or a null pointer when it is empty.
  Value constantArray(ArrayRef<double> values, Location loc);
  Value constantIntArray(ArrayRef<int64_t> values, Location loc);

  OpBuilder &builder;
  Value context;
  std::function<int64_t(Value)> offsetOf;
  uint64_t numCalls = 0;
  int64_t workspaceOffset = -1;
};

/// What convert-train-to-runtime's patterns share while they run.
struct RuntimeLoweringState {
  /// The runtime context the calls take.
  Value context;
  /// The location of a tensor value (the static plan): its byte offset in
  /// the arena, or in the host arena with RuntimeCallBuilder::kHostMemoryBit.
  std::function<int64_t(Value)> offsetOf;
  /// A device copy of host memory that an op's calls use instead of it
  /// (train-offload-optimizer what=states): the op's operands and results
  /// at `host` are named at arena offset `device`; with `in`, the `bytes`
  /// come into the copy before the op's calls (the update), with `out` they
  /// go back after them (the last op that reads the copy), by
  /// tmrt_transfer.
  struct StagingCopy {
    int64_t host;
    int64_t device;
    int64_t bytes;
    bool in;
    bool out;
  };
  /// The staging copies an op uses (none for most ops); null: none at all.
  std::function<SmallVector<StagingCopy>(Operation *)> stagingOf;
  /// The arena offset of an op's workspace, -1 for none.
  std::function<int64_t(Operation *)> workspaceOf;
  /// Calls emitted so far.
  uint64_t numCalls = 0;
  /// An op's lowering failed (it said why at the op).
  bool failed = false;
  /// The calls of each op: the first op emitted for it, and how many calls.
  llvm::DenseMap<Operation *, uint64_t> callGroups;
  /// The lowered step is cut into functions of about this many calls each
  /// (an op's calls never straddle two).
  uint64_t callsPerPart = 256;
};

/// The patterns of convert-train-to-runtime: an op with a
/// RuntimeLoweringOpInterface model becomes its runtime calls, a transparent
/// region op (train.block) its inlined body, a func.return one without
/// operands. The calls read `state.offsetOf`, take `state.context`, and
/// land in program order.
void populateTrainToRuntimePatterns(RewritePatternSet &patterns,
                                    RuntimeLoweringState &state);

/// Attaches the runtime lowering of every train op (and of splat
/// arith.constant tensors) to the ops, as external models.
void registerRuntimeLoweringExternalModels(DialectRegistry &registry);

} // namespace train
} // namespace mlir

#include "trainmem/Conversion/RuntimeLoweringInterface.h.inc"

#endif // TRAINMEM_CONVERSION_RUNTIMELOWERING_H
