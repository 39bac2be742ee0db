//===- ShardModels.h - the train interfaces on upstream shard ops -*- C++ -*-===//
//
// train-zero's collectives are upstream MLIR's `shard` ops. The train
// dialect's interfaces are attached to them as external models, so the
// memory analysis, the cost report and the communication count treat them
// as any op: CostOpInterface, TiedOpInterface (an all-reduce works in
// place) and CommunicationOpInterface (bytes sent per rank by the ring).
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_DIALECT_TRAIN_IR_SHARDMODELS_H
#define TRAINMEM_DIALECT_TRAIN_IR_SHARDMODELS_H

#include "mlir/IR/DialectRegistry.h"

namespace mlir {
namespace train {

/// Attaches the models to shard.all_reduce, shard.reduce_scatter,
/// shard.all_gather and shard.all_slice.
void registerShardExternalModels(DialectRegistry &registry);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_IR_SHARDMODELS_H
