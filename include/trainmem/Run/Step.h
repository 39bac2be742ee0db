//===- Step.h - compile, JIT and run a training step -------------*- C++ -*-===//

#ifndef TRAINMEM_RUN_STEP_H
#define TRAINMEM_RUN_STEP_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "trainmem/Dialect/Train/IR/TrainAttrs.h"
#include "trainmem/Dialect/Train/Transforms/Pipelines.h"
#include "trainmem/Support/Parts.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct tmrt_context;

namespace mlir {
class ExecutionEngine;
class DialectRegistry;

namespace train {

/// The run library's errors: a message for the user, or an empty one when
/// diagnostics (emitted at the op) said it already.
llvm::Error runError(const llvm::Twine &message);

/// Registers the dialects, translations and passes trainmem-run parses,
/// lowers and JIT-compiles with.
void registerRunDialects(DialectRegistry &registry);

/// What an argument or result of a lowered step is: the marker the step
/// gave it (train.param, train.optimizer_state, ...), none for an unmarked
/// result.
enum class SlotRole {
  none,
  param,
  optimizerState,
  input,
  grad,
  loss,
  gradNorm
};

/// The marker's name, as checkpoints and messages spell it: param,
/// optimizer_state, input, grad, loss, grad_norm ("" for none).
StringRef getSlotRoleName(SlotRole role);

/// An element type's name, as checkpoints and messages spell it: f32, bf16,
/// f16, i64, i32, i8, i1 ("unknown" for another).
StringRef getDtypeName(Type elementType);

/// One argument or result of a lowered step: where it lives in the arena.
struct TensorSlot {
  SlotRole role = SlotRole::none;
  std::string key; // the marker's value: parameter or state name, input name
  uint64_t offset = 0;
  uint64_t bytes = 0;
  /// In the host arena (train-offload-optimizer's memory_space = host).
  bool host = false;
  /// Where the runtime's arena copies find it: the offset, with
  /// TMRT_HOST_MEMORY for a host slot.
  uint64_t location() const;
  std::vector<int64_t> shape;
  Type elementType;
  /// Optimizer state: what it holds (from its #train.state).
  std::optional<StateKind> stateKind;
  std::string stateParam; // the parameter it belongs to
  StatePart statePart = StatePart::value;
  QuantMap stateMap = QuantMap::none;
  /// A rank's shard of a tensor of this shape (train.shard_of; the
  /// flattened tensor padded to ranks x shard, rank r holding elements
  /// [r x shard, (r + 1) x shard)); empty when the slot is the whole tensor.
  std::vector<int64_t> fullShape;
  /// A rank's part of a parameter split by train-tensor-parallel (its
  /// #train.split; its master weights' and moments' too): the whole tensor
  /// is `splitParts` times larger along `splitDim`; the rank at position p
  /// of its tensor-parallel group holds the p-th part. splitParts is 1 for
  /// a slot that is not split.
  int64_t splitDim = 0, splitParts = 1;
  /// The tensor-parallel part this slot holds (a ZeRO shard's full shape:
  /// the part it is a shard of), or its own shape.
  std::vector<int64_t> partShape() const;
  /// The shape of the whole tensor this slot holds a part of: its part's,
  /// `splitParts` times larger along `splitDim`.
  std::vector<int64_t> wholeShape() const;
  /// Parameters: how they start (from #train.init); none without one.
  std::optional<InitKind> init;
  double initStd = 0.0;
  /// The random stream of its initial values (#train.init's `stream`: its
  /// index among the whole model's parameters), if the step names one.
  std::optional<unsigned> initStream;
  int64_t numElements() const;
  StringRef roleName() const { return getSlotRoleName(role); }
  StringRef dtypeName() const { return getDtypeName(elementType); }
  /// "role:key": a state tensor's name in a checkpoint.
  std::string stateName() const { return (roleName() + ":" + key).str(); }
};

using trainmem::extentsAround;
using trainmem::joinAlong;
using trainmem::partAlong;

/// The lowered Hessian step of a step whose optimizer keeps a Hessian
/// estimate (Sophia): it runs in the same arena, its parameters and
/// estimates at the step's offsets.
struct HessianLayout {
  /// The runner calls it after step t when t is a multiple of this.
  int64_t every = 0;
  uint64_t arenaBytes = 0;
  std::vector<TensorSlot> arguments;
  std::vector<TensorSlot> results;
};

struct StepLayout {
  uint64_t arenaBytes = 0;
  /// The host arena (train-offload-optimizer), 0 without one.
  uint64_t hostArenaBytes = 0;
  /// Ops that run in host memory (what=states+update: the updates and the
  /// casts of their refreshed weights): their kernels read the host arena,
  /// which a device backend's cannot.
  uint64_t hostOps = 0;
  std::vector<TensorSlot> arguments;
  std::vector<TensorSlot> results;
  /// The step's Hessian step, when its optimizer has one.
  std::optional<HessianLayout> hessian;
  const TensorSlot *findArgument(SlotRole role, StringRef key) const;
  const TensorSlot *findResult(SlotRole role) const;
  /// The device arena both the step and its Hessian step run in.
  uint64_t deviceArenaBytes() const {
    return hessian ? std::max(arenaBytes, hessian->arenaBytes) : arenaBytes;
  }
};

/// Makes `module` hold a tensor-level step (marked train.step) ready to
/// lower, through the registered train-step pipeline with `options` (a
/// command line fills them: trainmem-run's flags are its fields).
/// `options.differentiate` follows from the module: a module with @forward
/// is differentiated (train-autodiff with `options.autodiff`), a marked
/// step is taken as it is. A step lowered already runs as it is: options
/// that would reshape it are refused with an error at the step.
LogicalResult prepareStep(ModuleOp module, TrainStepPipelineOptions &options);

/// Lowers a tensor-level step to the LLVM dialect (convert-train-to-runtime,
/// convert-to-llvm) and reads its arena layout.
FailureOr<StepLayout> lowerStep(ModuleOp module);

/// A JIT-compiled step: call run() once per training step.
class JitStep {
public:
  ~JitStep();
  /// Compiles a lowered module.
  static llvm::Expected<std::unique_ptr<JitStep>> create(ModuleOp lowered);
  void run(tmrt_context *ctx) const { entry(ctx); }
  /// Runs the Hessian step (a module lowered with one).
  void runHessian(tmrt_context *ctx) const { hessianEntry(ctx); }

private:
  std::unique_ptr<ExecutionEngine> engine;
  void (*entry)(void *) = nullptr;
  void (*hessianEntry)(void *) = nullptr;
};

} // namespace train
} // namespace mlir

#endif // TRAINMEM_RUN_STEP_H
