//===- RegionUtils.h - editing train.block / train.remat regions -*- C++ -*-===//
//
// train.block and train.remat are transparent regions: their bodies use outer
// values directly and their results are what they yield. Passes that move
// ops across them use these helpers to keep the IR valid.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_TRANSFORMS_REGIONUTILS_H
#define TRAINMEM_DIALECT_TRAIN_TRANSFORMS_REGIONUTILS_H

#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir {
namespace train {

/// Makes every value defined in `regionOp`'s body and used outside it an
/// extra result (nested region ops first) and rewires the outside uses.
/// A value already yielded is read through its existing result.
void exportEscapingValues(Operation *regionOp);

/// exportEscapingValues for every outermost region op of `func`, at its top
/// level and in the bodies of its micro-batch loops.
void exportEscapingValues(func::FuncOp func);

/// Makes `func` return `results`, marked by `resultAttrs` (one dictionary
/// per result): the return's operands, the function type and the result
/// attributes at once.
void setStepResults(func::FuncOp func, ArrayRef<Value> results,
                    ArrayRef<DictionaryAttr> resultAttrs);

/// Removes the results nobody reads from every block and remat in `func`
/// (in micro-batch loop bodies too).
void pruneUnusedResults(func::FuncOp func);
/// The same for one region op (and the region ops nested in it).
void pruneUnusedResults(Operation *regionOp);

/// Moves `ops`, consecutive in one block, into a new train.remat at their
/// place; what they define and is used after them becomes its results.
RematOp wrapInRemat(ArrayRef<Operation *> ops);

/// Replaces `regionOp` by its body's ops, its results by what it yields.
void inlineRegionOp(Operation *regionOp);

/// The training step of `module` for pass `passName`: the function called
/// `name`, or with an empty `name` the one marked `train.step`; null after
/// an error that says what is there instead (a step under another name, two
/// marked steps, none yet).
func::FuncOp lookupStep(ModuleOp module, StringRef name, StringRef passName);

/// The forwards of `module` a pass that splits the forward runs on (the
/// functions with parameters); failure after an error at a function that
/// is a training step already, naming `passName`.
FailureOr<SmallVector<func::FuncOp>> lookupForwards(ModuleOp module,
                                                    StringRef passName);

/// The first op of `func` that accumulates gradients over micro-batches (a
/// train.accumulate loop, or a train.slice_rows of an unrolled one), or null.
Operation *findAccumulation(func::FuncOp func);

/// Unrolls `loop` completely, as train-unroll-accum does: its
/// micro-batches one after the other, their parts summed in order.
/// `onCopy` (if given) is called with each op made at the loop's level
/// and the micro-batch it belongs to (its rows, its sums).
LogicalResult
unrollAccumulate(AccumulateOp loop,
                 llvm::function_ref<void(int64_t, Operation *)> onCopy = {});

/// Casts each part a micro-batch loop of `func` yields in another type
/// than its f32 sum (a 16-bit gradient) in the body, right after the op
/// that makes it (where the loop sums it), so that the cast's buffer is
/// the body's and a plan of the rolled loop places it (train-plan-arena,
/// trainmem-plan). Whether anything changed.
bool castPartsToSums(func::FuncOp func);

/// Clones the recompute of every train.remat in `func` next to the
/// backward ops that need it and dissolves the regions
/// (train-materialize-remat). Returns the number of ops cloned.
FailureOr<unsigned> materializeRemat(func::FuncOp func);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_TRANSFORMS_REGIONUTILS_H
