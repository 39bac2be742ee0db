//===- Evaluator.h - reference evaluator for train functions -----*- C++ -*-===//
//
// Executes `train` functions op by op on host tensors, in f32 with f64
// accumulation, written to be obviously right rather than fast. It is the
// oracle that lowerings and rewrites are checked against.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_EVALUATOR_EVALUATOR_H
#define TRAINMEM_EVALUATOR_EVALUATOR_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/LLVM.h"

#include <cstdint>
#include <vector>

namespace mlir {
namespace train {

/// A host tensor. Float element types (f32, bf16, f16) are held and computed
/// as f32 in `floats`; integer element types (ids, counts, steps, i1 masks)
/// as int64 in `ints`.
struct RefTensor {
  std::vector<int64_t> shape;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  bool isInteger = false;

  static RefTensor ofFloats(std::vector<int64_t> shape,
                            std::vector<float> values);
  static RefTensor ofInts(std::vector<int64_t> shape,
                          std::vector<int64_t> values);
  /// A float tensor of `shape` filled with zeros.
  static RefTensor zeros(std::vector<int64_t> shape);

  int64_t numElements() const;
  float scalarFloat() const { return floats.at(0); }
  int64_t scalarInt() const { return ints.at(0); }
};

/// The values an op being evaluated reads and writes (EvaluableOpInterface).
class EvaluationState {
public:
  virtual ~EvaluationState() = default;
  /// The value of `value`, computed before the op that reads it.
  virtual const RefTensor &get(Value value) = 0;
  /// Sets the value of a result.
  virtual void set(Value value, RefTensor tensor) = 0;
  /// An optimizer update left `param` as it was: its gradient was not
  /// finite.
  virtual void noteSkippedUpdate(Value param) {}
  /// The process's index on the data-parallel axis (a partitioned step's
  /// ranks draw dropout for their rows of the global batch); 0 on one.
  virtual int64_t getRank() const { return 0; }
  /// A train.pipeline_exchange `op`: the tensors it receives, once the
  /// stages that send them have (evaluatePipeline runs the stages); failure
  /// after a diagnostic where no pipeline runs.
  virtual FailureOr<SmallVector<RefTensor>> exchange(Operation *op);
  /// While a ring attention runs (train.attention `ring`, on the ranks
  /// evaluateRanks simulates): its group's keys and values gathered in rank
  /// order, the blocks the ring would pass round; null otherwise.
  const RefTensor *ringKeys = nullptr, *ringValues = nullptr;
};

/// Runs `func` on `args` (one per function argument, shapes checked against
/// the argument types). Returns the values of `func.return`, or failure after
/// emitting a diagnostic at the op that could not run (a shape mismatch, an
/// id out of range, an op with no EvaluableOpInterface model). Region ops
/// (train.block, train.remat, train.accumulate) run their bodies in place;
/// every other op runs through its EvaluableOpInterface: the train ops'
/// models (registerEvaluatorExternalModels, attached to the function's
/// context on first use) and those any other dialect brings.
/// With `skippedUpdates`, the parameter operands of the optimizer updates
/// that skipped their tensor because its gradient was not finite.
FailureOr<SmallVector<RefTensor>>
evaluate(func::FuncOp func, ArrayRef<RefTensor> args,
         SmallVectorImpl<Value> *skippedUpdates = nullptr);

/// Runs an SPMD step (train-zero) for argsPerRank.size() ranks in one
/// process, op by op in lockstep: each rank's own values, and the shard
/// collectives (all-reduce, reduce-scatter, all-gather, all-slice on a
/// one-axis grid of that many ranks) combining them, sums in double. Returns
/// each rank's results, or failure after a diagnostic at the op.
FailureOr<std::vector<SmallVector<RefTensor>>>
evaluateRanks(func::FuncOp func, ArrayRef<SmallVector<RefTensor>> argsPerRank);

/// Runs one step of a pipeline-parallel program (train-pipeline): stage
/// function `stages[k]` on `argsPerStage[k]`, each op by op, a stage
/// waiting at a train.pipeline_exchange until its peers have sent what it
/// receives (the stages take turns; the values do not depend on the order).
/// Returns each stage's results, or failure after a diagnostic at the op,
/// or at an exchange no stage can complete (a deadlock).
FailureOr<std::vector<SmallVector<RefTensor>>>
evaluatePipeline(ArrayRef<func::FuncOp> stages,
                 ArrayRef<SmallVector<RefTensor>> argsPerStage);

/// Attaches the train ops' (and splat arith.constant's) evaluation, as
/// EvaluableOpInterface external models.
void registerEvaluatorExternalModels(DialectRegistry &registry);

} // namespace train
} // namespace mlir

#include "trainmem/Evaluator/EvaluableOpInterface.h.inc"

#endif // TRAINMEM_EVALUATOR_EVALUATOR_H
