//===- StepPhases.h - what passes leave a step in, and refuse ---*- C++ -*-===//
//
// The passes' cross-pass refusals in one table (StepPhases.def): a pass
// asks checkStepPhases instead of testing other passes' markers, and
// train-step checks its pass list against the same table before running.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_TRANSFORMS_STEPPHASES_H
#define TRAINMEM_DIALECT_TRAIN_TRANSFORMS_STEPPHASES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace mlir {
namespace train {

enum class StepPhase {
#define TRAIN_STEP_PHASE(Name) Name,
#include "trainmem/Dialect/Train/Transforms/StepPhases.def"
};

/// What a step in `phase` is, for a message about `step`: "has a Hessian
/// step (@s_hessian, optimizer=sophia)"; empty when `step` is not in it.
/// `at` is the op that shows it (the step for its signature's phases).
std::string findStepPhase(func::FuncOp step, StepPhase phase, Operation *&at);

/// The same for a step not built yet: what the pass that makes `phase`
/// leaves ("has a Hessian step (optimizer=sophia)", "accumulates
/// gradients", ...).
StringRef describeStepPhase(StepPhase phase);

/// Fails with an error at the op that shows it when `step` is in a phase
/// `pass` refuses (rows whose condition is "" or among `conditions`):
/// "<pass>: @step <phase>, which <pass> cannot <...>: <remedy>".
LogicalResult checkStepPhases(func::FuncOp step, StringRef pass,
                              ArrayRef<StringRef> conditions = {});

/// A pass of a pipeline, for checking the pipeline before it runs: its
/// argument and the conditions its options meet.
struct PhasedPass {
  StringRef pass;
  SmallVector<StringRef> conditions;
};

/// Checks `passes`, in order, against the table: the first pass that would
/// refuse what an earlier one made is described in `message` ("after
/// train-autodiff the step has a Hessian step (optimizer=sophia), which
/// train-zero cannot partition ...: <remedy>"), and failure returned.
LogicalResult checkPhaseOrder(ArrayRef<PhasedPass> passes,
                              std::string &message);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_TRANSFORMS_STEPPHASES_H
