//===- Pipeline.h - pipeline schedules --------------------------*- C++ -*-===//
//
// The schedules train-pipeline writes as IR: the order in which a stage
// runs the forward and backward of its chunks for each micro-batch.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PIPELINE_H
#define TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PIPELINE_H

#include "mlir/Support/LLVM.h"
#include "trainmem/Dialect/Train/IR/TrainAttrs.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace mlir {
namespace train {

/// One unit of a stage's schedule: the forward or backward of model chunk
/// `chunk` (the virtual stage: chunk j of stage k is j·stages + k) for
/// micro-batch `microBatch`.
struct PipelineUnit {
  int64_t chunk = 0;
  bool backward = false;
  int64_t microBatch = 0;
};

/// Stage `stage`'s units in `schedule`'s order: GPipe every forward then
/// every backward; 1F1B min(p - k - 1, m) forwards, then forward and
/// backward in turn; interleaved (v chunks per stage, m a multiple of p)
/// Megatron-LM's order, (p - k - 1)·2 + (v - 1)·p forwards first.
SmallVector<PipelineUnit> pipelineSchedule(PipelineSchedule schedule,
                                           int64_t stage, int64_t stages,
                                           int64_t virtualStages,
                                           int64_t microBatches);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_TRANSFORMS_PIPELINE_H
