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
#include "mlir/IR/Operation.h"

#include <optional>

namespace mlir {
namespace train {

/// Attaches the models to shard.all_reduce, shard.reduce_scatter,
/// shard.all_gather and shard.all_slice, and upstream's ShardingInterface
/// to the train ops train-tensor-parallel splits
/// (registerShardingInterfaceModels).
void registerShardExternalModels(DialectRegistry &registry);

/// Upstream's `shard::ShardingInterface` on the element-wise ops, the
/// norms, softmax, bias_add and matmul (ShardingModels.cpp), so that
/// `sharding-propagation` and `shard-partition` see through them.
void registerShardingInterfaceModels(DialectRegistry &registry);

/// The process group of a shard collective (all_reduce, reduce_scatter,
/// all_gather, all_slice) on its grid, a row-major grid of ranks: its axes
/// `grid_axes` (all of them when none are named) as `size` ranks `stride`
/// apart, out of the grid's `gridRanks`. On a (data, tensor) grid of d x t
/// ranks the tensor axis is (t, 1), the data axis (d, t).
struct ProcessGroup {
  int64_t size = 1, stride = 1, gridRanks = 1;
  /// The position in its group of rank `rank`.
  int64_t positionOf(int64_t rank) const { return (rank / stride) % size; }
};
/// The group of `collective`; std::nullopt when its grid is missing or not
/// static, or its axes are not consecutive (then its ranks are not a
/// stride apart), or it is not a shard collective (or a ring attention,
/// whose group is its context split's axis).
std::optional<ProcessGroup> getProcessGroup(Operation *collective);

/// The group of ranks along `axes` of `grid` (looked up from `scope`).
std::optional<ProcessGroup> getProcessGroup(Operation *scope,
                                            FlatSymbolRefAttr grid,
                                            ArrayRef<int16_t> axes);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_DIALECT_TRAIN_IR_SHARDMODELS_H
