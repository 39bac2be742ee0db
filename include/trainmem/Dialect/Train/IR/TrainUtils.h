//===- TrainUtils.h - queries on train IR shared by passes -------*- C++ -*-===//
//
// Questions every stage asks of train IR: which function is the step, and
// what value a region result stands for. They live with the dialect so the
// analyses, the passes and the lowering answer them the same way.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAINUTILS_H
#define TRAINMEM_DIALECT_TRAIN_IR_TRAINUTILS_H

#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir {
namespace train {

/// True for ops with a transparent region (TransparentRegionOpInterface:
/// train.block, train.remat).
bool isTransparentRegionOp(Operation *op);

/// Whether `strides` (in elements) lay a tensor of `shape` out row-major,
/// ignoring dimensions of size 1 (their stride never matters).
bool isRowMajor(ArrayRef<int64_t> shape, ArrayRef<int64_t> strides);

/// The value `value` names: through block and remat results, the value
/// their region yields.
Value resolveRegionResult(Value value);

/// The whole value an integer value stands for: through regions' results
/// and ops of one integer operand that take a piece of it or sum it over a
/// group (a sequence-parallel rank's slice of the targets, its token count
/// summed over the ranks).
Value wholeIntegers(Value integers);

/// The function argument the first loss of `func` (a LossOpInterface op)
/// reads its targets from, found from the dataflow, not from a
/// train.input name; null when there is no loss or its targets are not an
/// argument's.
BlockArgument findLossTargetsArgument(FunctionOpInterface func);

/// The marker that makes a function's argument or result a training state
/// (train.param or train.optimizer_state: name and value, both uniqued):
/// two with the same marker are the same state (a step's result and its
/// argument, a step's argument and its Hessian step's); none without one.
std::optional<std::pair<Attribute, Attribute>>
getStateMarker(DictionaryAttr attrs);

/// Whether some top-level op of `module` is marked `train.step` or is a
/// lowered step.
bool hasMarkedStep(ModuleOp module);

/// The one top-level op of `module` marked `train.step` (the tensor-level
/// step) or lowered by convert-train-to-runtime (`tmrt.arena_bytes`), or null after an error naming `passName`: none, or
/// more than one.
Operation *findMarkedStep(ModuleOp module, StringRef passName);

/// The result types `op` infers from its operands as they are now
/// (InferTypeOpInterface), or its results' element types with the shapes
/// it infers (InferShapedTypeOpInterface); failure when it infers neither
/// or the inference fails.
LogicalResult inferResultTypes(Operation *op, SmallVectorImpl<Type> &types);

/// Whether some argument of `func` is a part of a parameter split by
/// train-tensor-parallel (`train.tensor_split`).
bool isTensorParallel(FunctionOpInterface func);

/// The elements the whole draw that `draw` is one execution of draws: its
/// own, times its split's parts when it draws a rank's part of a
/// tensor-parallel tensor. Batches and micro-batches are placed in the
/// stream by these.
int64_t getWholeDrawnElements(BatchDrawOpInterface draw);

/// Where a draw on one rank's part of a tensor-parallel tensor puts its
/// elements in the whole draw: the part's block (its elements from the
/// split dimension on), the parts, and the stride of the split's process
/// group (a rank's part is (rank / stride) mod parts); {0, 1, 1} for a
/// whole draw. The evaluator and the runtime's kernels place draws by it
/// (trainmem::splitDrawIndex).
struct SplitDrawPlacement {
  int64_t block = 0, parts = 1, stride = 1;
  /// A context-parallel rank's balanced chunks (Philox.h's splitDrawIndex).
  bool balanced = false;
};

/// The process group of `split`'s grid axis, which `op` runs a rank's part
/// of; failure (with an error at `op`) when the axis is not a static group
/// of the split's parts.
FailureOr<ProcessGroup> getSplitGroup(Operation *op, TensorSplitAttr split);

/// The keys an attention's queries see (S'): `k`'s rows, or with `ring`
/// the group's, `parts` blocks of them (saturated at int64's maximum).
int64_t attentionKeys(RankedTensorType k, ContextSplitAttr context, bool ring);

/// The context split of a ring attention (train.attention or
/// train.attention_grad with `ring`), whose group it passes blocks around;
/// null for any other op.
ContextSplitAttr getRingContext(Operation *op);

/// The context split of a step or forward cut by train-context-parallel
/// (its train.context_slice's), or null.
ContextSplitAttr getContextSplit(Operation *func);

/// The process group of `context`'s grid axis, whose positions `op` reads
/// a rank's part of; failure (with an error at `op`) when the axis is not a
/// static group of its parts.
FailureOr<ProcessGroup> getContextGroup(Operation *op,
                                        ContextSplitAttr context);

/// `draw`'s placement in its drawn tensor (getDrawnType); failure (with an
/// error at the op) when its split's grid axis is not a static group of
/// its parts.
FailureOr<SplitDrawPlacement> getSplitDrawPlacement(BatchDrawOpInterface draw);

/// Verifies that `split` (the value of `op`'s attribute `attrName`) names
/// a `shard.grid` in scope whose axis `axis` has `parts` ranks.
LogicalResult verifySplitGrid(Operation *op, TensorSplitAttr split,
                              StringRef attrName);

/// How train-tensor-parallel split the tensor `value` stands for, or null
/// when it is whole: an argument of `func` marked `train.tensor_split`, or
/// an optimizer-state argument (`#train.state`: master weights, moments)
/// of a split parameter, which is split as its parameter is.
TensorSplitAttr getTensorSplit(FunctionOpInterface func, Value value);

/// The ranks between a pipeline stage of `func` (train-pipeline's) and the
/// next: on a tensor-parallel step's (data, pipeline, tensor) grid the
/// tensor group's size (Megatron's layout: the group's ranks consecutive),
/// otherwise 1 (the stages consecutive ranks, on a (data, pipeline) grid
/// or none).
int64_t getPipelineRankStride(FunctionOpInterface func);

/// The exact squared norms (`train.squared_norm`) whose words add up to
/// the squared global norm of `grads`, each rank holding the part
/// `splits[i]` says of `grads[i]` (null: all of it, alike on every rank):
/// one norm per grid axis the split gradients lie on, summed over that
/// axis by a `shard.all_reduce`, then, with `withWhole`, one of the whole
/// gradients, counted once. For `train.clip_grad_norm ... squared_norm`
/// and `train.unscale_gradients ... squared_norm` (whose own operands
/// need no sum). With `shardAxes`, `grads` are each rank's ZeRO shards
/// over those axes of `shardGrid` too: every norm is summed over them as
/// well (the split gradients' grid must be `shardGrid`).
SmallVector<Value> buildSplitSquaredNorms(OpBuilder &builder, Location loc,
                                          ValueRange grads,
                                          ArrayRef<TensorSplitAttr> splits,
                                          bool withWhole,
                                          FlatSymbolRefAttr shardGrid = {},
                                          ArrayRef<int16_t> shardAxes = {});

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINUTILS_H
