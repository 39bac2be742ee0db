//===- TrainAttrNames.h - discardable attribute names ------------*- C++
//-*-===//
//
// The C++ names of the dialect's discardable attributes (declared with their
// value types in TrainDialect.td, whose generated helpers hold the names)
// and what each means; and the names of the attributes of a lowered step.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRNAMES_H
#define TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRNAMES_H

#include "trainmem/Dialect/Train/IR/TrainDialect.h"

#include "mlir/IR/Operation.h"
#include "llvm/ADT/StringRef.h"

namespace mlir {
namespace train {

/// On a function argument: the argument is a trainable parameter; the value
/// is its name (e.g. "h.0.attn.q.weight").
constexpr llvm::StringLiteral kParamAttrName =
    TrainDialect::ParamAttrHelper::getNameStr();
/// On a function argument: the argument is data; the value says which
/// ("tokens", "targets").
constexpr llvm::StringLiteral kInputAttrName =
    TrainDialect::InputAttrHelper::getNameStr();
/// On a training step's argument or result: optimizer state of a parameter;
/// the value is a #train.state (the parameter, the kind, the encoding). A
/// result and an argument with the same value are the same state before and
/// after the step (updated in place).
constexpr llvm::StringLiteral kOptimizerStateAttrName =
    TrainDialect::OptimizerStateAttrHelper::getNameStr();
/// On a parameter argument: how the runner initializes it, a #train.init
/// the model builder writes.
constexpr llvm::StringLiteral kInitAttrName =
    TrainDialect::InitAttrHelper::getNameStr();
/// #train.space on a step's argument or result (the memory it lives in) or
/// on an optimizer update (where it runs): train-offload-optimizer.
constexpr llvm::StringLiteral kMemorySpaceAttrName =
    TrainDialect::MemorySpaceAttrHelper::getNameStr();
/// On a training step's result: the loss.
constexpr llvm::StringLiteral kLossAttrName =
    TrainDialect::LossAttrHelper::getNameStr();
/// On a training step's result: the gradient of the named parameter
/// (steps built with optimizer=none).
constexpr llvm::StringLiteral kGradAttrName =
    TrainDialect::GradAttrHelper::getNameStr();
/// On a training step's result: the global gradient norm before clipping.
constexpr llvm::StringLiteral kGradNormAttrName =
    TrainDialect::GradNormAttrHelper::getNameStr();
/// The name of a step marker (train.param, ...) in a lowered step's slot
/// entry (tmrt.arguments, tmrt.results): without the dialect's prefix.
inline llvm::StringRef getSlotEntryName(llvm::StringRef markerName) {
  return markerName.drop_front(llvm::StringRef("train.").size());
}

/// On a function: a unit attribute marking the training step train-autodiff
/// built, whatever its name (option step-name).
constexpr llvm::StringLiteral kStepAttrName =
    TrainDialect::StepAttrHelper::getNameStr();
/// On a function that refreshes a step's Hessian estimate (Sophia): which
/// step and how often (#train.hessian_step).
constexpr llvm::StringLiteral kHessianStepAttrName =
    TrainDialect::HessianStepAttrHelper::getNameStr();
/// On a function train-pipeline made: which stage of the pipeline it is,
/// and its schedule (#train.pipeline).
constexpr llvm::StringLiteral kPipelineStageAttrName =
    TrainDialect::PipelineStageAttrHelper::getNameStr();
/// On an op of a pipeline stage (train-pipeline): the micro-batch whose
/// forward or backward it runs (i64), and with interleaving its model
/// chunk (`train.chunk`, i64).
constexpr llvm::StringLiteral kMicroBatchAttrName =
    TrainDialect::MicroBatchAttrHelper::getNameStr();
constexpr llvm::StringLiteral kChunkAttrName =
    TrainDialect::ChunkAttrHelper::getNameStr();
/// On the step: how train-zero partitioned it (#train.zero).
constexpr llvm::StringLiteral kZeroAttrName =
    TrainDialect::ZeroAttrHelper::getNameStr();
/// On a collective train-zero inserted: the gradient bucket it reduces
/// (i64, in the order the backward fills them).
constexpr llvm::StringLiteral kBucketAttrName =
    TrainDialect::BucketAttrHelper::getNameStr();
/// On a parameter argument train-tensor-parallel split: a #train.split (the
/// dimension, the parts, the grid axis of the tensor-parallel group).
constexpr llvm::StringLiteral kTensorSplitAttrName =
    TrainDialect::TensorSplitAttrHelper::getNameStr();
/// On an argument or result of a step train-zero partitioned: the value is
/// one rank's shard of a tensor of this type (a TypeAttr), flattened and
/// padded with zeros to ranks x shard elements; rank r holds elements
/// [r * shard, (r + 1) * shard) of it.
constexpr llvm::StringLiteral kShardOfAttrName =
    TrainDialect::ShardOfAttrHelper::getNameStr();
/// On a train.add train-unroll-accum made: it sums micro-batches'
/// gradients (or losses) of one optimizer step.
constexpr llvm::StringLiteral kMicroBatchSumAttrName =
    TrainDialect::MicroBatchSumAttrHelper::getNameStr();
/// On a shard.reduce_scatter: the rank's shard stays in place, at the start
/// of the reduced buffer (ZeRO stage 1 keeps the full gradients).
constexpr llvm::StringLiteral kInPlaceAttrName =
    TrainDialect::InPlaceAttrHelper::getNameStr();
/// On an op: a unit attribute marking a copy train-materialize-remat cloned
/// to recompute a value for the backward.
constexpr llvm::StringLiteral kRecomputeAttrName =
    TrainDialect::RecomputeAttrHelper::getNameStr();
/// On the module: a dictionary describing the model the graph came from.
constexpr llvm::StringLiteral kModelAttrName =
    TrainDialect::ModelAttrHelper::getNameStr();

/// The static arena plan train-plan-arena writes into a tensor-level step
/// (convert-train-to-runtime lowers with it when present): on the function
/// the arena's bytes (i64), on each tensor argument its byte offset (i64),
/// on each op with tensor results one offset per result (array<i64>, -1 for
/// a result that is not a tensor).
constexpr llvm::StringLiteral kPlanArenaBytesAttrName =
    TrainDialect::ArenaBytesAttrHelper::getNameStr();
constexpr llvm::StringLiteral kPlanOffsetAttrName =
    TrainDialect::OffsetAttrHelper::getNameStr();
constexpr llvm::StringLiteral kPlanOffsetsAttrName =
    TrainDialect::OffsetsAttrHelper::getNameStr();
/// With host memory (train-offload-optimizer): on the function the host
/// arena's bytes (i64; a host tensor's offsets are in it), and on an update
/// that runs on the device with host state one device offset per operand
/// for its staging copy (array<i64>, -1 for an operand without one).
constexpr llvm::StringLiteral kPlanHostArenaBytesAttrName =
    TrainDialect::HostArenaBytesAttrHelper::getNameStr();
constexpr llvm::StringLiteral kPlanStagingOffsetsAttrName =
    TrainDialect::StagingOffsetsAttrHelper::getNameStr();
/// On a micro-batch loop (train.accumulate), one offset per argument of
/// its body (array<i64>, -1 for one that is not a tensor): where each
/// micro-batch's rows, index and share are written. train-unroll-accum
/// gives each copy's arguments these offsets, as its ops keep the body's:
/// the unrolled step runs in the rolled loop's plan.
constexpr llvm::StringLiteral kPlanArgumentOffsetsAttrName =
    TrainDialect::ArgumentOffsetsAttrHelper::getNameStr();
/// On an op with a workspace (WorkspaceOpInterface: a ring attention's
/// blocks in flight), its byte offset in the arena (i64).
constexpr llvm::StringLiteral kPlanWorkspaceOffsetAttrName =
    TrainDialect::WorkspaceOffsetAttrHelper::getNameStr();

/// Attributes of a step lowered by convert-train-to-runtime: the arena's
/// planned size, and where the host finds each argument and result. A
/// lowered step is marked by the first (train.step marks the tensor-level
/// one).
constexpr llvm::StringLiteral kArenaBytesAttrName = "tmrt.arena_bytes";
constexpr llvm::StringLiteral kArgumentSlotsAttrName = "tmrt.arguments";
constexpr llvm::StringLiteral kResultSlotsAttrName = "tmrt.results";
/// With host memory (train-offload-optimizer): the host arena's planned
/// size (a slot with `memory_space = #train.space<host>` lies in it), and
/// the number of ops that run in host memory (what=states+update: the
/// updates and the casts of their refreshed weights; a backend whose
/// kernels run on a device cannot run them).
constexpr llvm::StringLiteral kHostArenaBytesAttrName = "tmrt.host_arena_bytes";
constexpr llvm::StringLiteral kHostOpsAttrName = "tmrt.host_ops";
/// On a lowered step train-zero partitioned: the ranks it runs on (i64), as
/// many processes as the runtime's communicator must have.
constexpr llvm::StringLiteral kLoweredRanksAttrName = "tmrt.ranks";
/// On the function that runs a lowered micro-batch loop (a rolled
/// train.accumulate): its iterations (i64). Its body is walked that many
/// times by whoever maps a run's kernel calls to their call sites.
constexpr llvm::StringLiteral kLoopStepsAttrName = "tmrt.loop_steps";

/// Whether `op` (a func.func or llvm.func) is a step that
/// convert-train-to-runtime already lowered.
inline bool isLoweredStep(Operation *op) {
  return op && op->hasAttr(kArenaBytesAttrName);
}

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_IR_TRAINATTRNAMES_H
