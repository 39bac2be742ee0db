//===- ShardingModels.cpp - upstream ShardingInterface on train ops -------===//
//
// The loop structure of the train ops train-tensor-parallel splits, as
// upstream's `shard::ShardingInterface` describes it (iterator types,
// reduction kinds, indexing maps), so that `sharding-propagation` carries a
// sharding through them and `shard-partition` partitions what is trivially
// partitionable:
//
// - element-wise ops (add, mul, scale, GELU, SiLU, cast): every dimension
//   parallel, every operand and result at the same indices;
// - ops with a row of their last dimension (layer_norm, rms_norm, softmax,
//   bias_add): the leading dimensions parallel, the last one parallel for
//   bias_add and a reduction (kind `generic`: a normalization, not a sum)
//   for the others; an operand of lower rank (weights, a bias) indexed by
//   the result's last dimensions;
// - matmul: the result's dimensions parallel, the contracted one a `sum`
//   reduction (Megatron's row-parallel product), the operands' maps as
//   their transposes say;
// - attention: batch, heads, queries and value columns parallel, the keys
//   a `generic` reduction (the softmax) and the key columns a `sum`; a
//   grouped-query one's heads as (K/V head, group).
//
// Partitioning: an op none of whose reduction loops is sharded is cloned on
// the partitioned operands (upstream's trivially shardable partition); a
// sharded reduction (a contraction or a normalization over a split
// dimension) is refused: its partial results need the collectives that
// train-tensor-parallel inserts (g for a contraction) or cannot be summed.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterfaceImpl.h"
#include "mlir/IR/AffineMap.h"

using namespace mlir;
using namespace mlir::train;

namespace {

using shard::ReductionKind;
using utils::IteratorType;

/// The partition shared by the models: a clone on the partitioned
/// operands, unless a reduction loop is sharded.
LogicalResult partitionUnlessReductionSharded(
    Operation *op, ArrayRef<Value> partitionedOperands,
    ArrayRef<shard::Sharding> operandShardings,
    ArrayRef<shard::Sharding> resultShardings, IRMapping &partitionMap,
    SymbolTableCollection &symbolTable, OpBuilder &builder) {
  auto sharding = cast<shard::ShardingInterface>(op);
  SmallVector<IteratorType> iterators = sharding.getLoopIteratorTypes();
  SmallVector<AffineMap> maps = sharding.getIndexingMaps();
  shard::ShardingArray assignment =
      shard::getGridAxisAssignmentForLoopIterators(
          operandShardings, resultShardings, iterators, maps);
  if (shard::isAtLeastOneReductionIteratorSharded(iterators, assignment))
    return op->emitOpError("has a sharded reduction loop: its partial "
                           "results need collectives (train-tensor-parallel "
                           "inserts them for a split contraction)");
  shard::partitionTriviallyShardableOperation(
      *op, partitionedOperands, operandShardings, resultShardings, partitionMap,
      symbolTable, builder);
  return success();
}

/// The models' shared base: `Model` gives the loops and maps, the
/// partition is partitionUnlessReductionSharded.
template <typename Model, typename OpT>
struct LoopModel : public shard::ShardingInterface::ExternalModel<Model, OpT> {
  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    return partitionUnlessReductionSharded(op, partitionedOperands,
                                           operandShardings, resultShardings,
                                           partitionMap, symbolTable, builder);
  }
};

/// The rank of `value`'s ranked tensor type, 0 for a scalar or none.
int64_t rankOf(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type ? type.getRank() : 0;
}

/// Element-wise ops of one shape: every loop parallel, identity maps
/// (operands of another rank, none in these ops, would be refused by
/// their verifiers).
template <typename OpT>
struct ElementwiseModel : public LoopModel<ElementwiseModel<OpT>, OpT> {
  SmallVector<IteratorType> getLoopIteratorTypes(Operation *op) const {
    return SmallVector<IteratorType>(rankOf(op->getResult(0)),
                                     IteratorType::parallel);
  }
  SmallVector<ReductionKind> getReductionLoopIteratorKinds(Operation *) const {
    return {};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    AffineMap identity = AffineMap::getMultiDimIdentityMap(
        rankOf(op->getResult(0)), op->getContext());
    return SmallVector<AffineMap>(op->getNumOperands() + op->getNumResults(),
                                  identity);
  }
};

/// Ops on rows of the last dimension: the leading loops parallel, the last
/// one a normalization (`generic` reduction) unless `LastParallel`.
template <typename OpT, bool LastParallel>
struct RowModel : public LoopModel<RowModel<OpT, LastParallel>, OpT> {
  SmallVector<IteratorType> getLoopIteratorTypes(Operation *op) const {
    int64_t rank = rankOf(op->getResult(0));
    SmallVector<IteratorType> types(rank, IteratorType::parallel);
    if (rank > 0 && !LastParallel)
      types.back() = IteratorType::reduction;
    return types;
  }
  SmallVector<ReductionKind> getReductionLoopIteratorKinds(Operation *) const {
    if (LastParallel)
      return {};
    return {ReductionKind::Generic};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *context = op->getContext();
    int64_t rank = rankOf(op->getResult(0));
    AffineMap identity = AffineMap::getMultiDimIdentityMap(rank, context);
    SmallVector<AffineMap> maps;
    // An operand of lower rank broadcasts from the right (a norm's
    // weights, a bias): the result's last dimensions.
    for (Value operand : op->getOperands()) {
      int64_t r = rankOf(operand);
      SmallVector<AffineExpr> exprs;
      for (int64_t d = rank - r; d < rank; ++d)
        exprs.push_back(getAffineDimExpr(d, context));
      maps.push_back(r == rank ? identity
                               : AffineMap::get(rank, 0, exprs, context));
    }
    for (unsigned i = 0; i < op->getNumResults(); ++i)
      maps.push_back(identity);
    return maps;
  }
};

/// matmul: loops (the result's dimensions: batch..., m, n; then k), k a sum.
/// The lhs is [batch..., m, k] (or [.., k, m] transposed), the rhs
/// [batch'..., k, n] (or [.., n, k]) with batch' a suffix of the result's
/// batch dimensions (a 2-D weight has none).
struct MatmulModel : public LoopModel<MatmulModel, MatmulOp> {
  SmallVector<IteratorType> getLoopIteratorTypes(Operation *op) const {
    SmallVector<IteratorType> types(rankOf(op->getResult(0)),
                                    IteratorType::parallel);
    types.push_back(IteratorType::reduction);
    return types;
  }
  SmallVector<ReductionKind> getReductionLoopIteratorKinds(Operation *) const {
    return {ReductionKind::Sum};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    auto matmul = cast<MatmulOp>(op);
    MLIRContext *context = op->getContext();
    int64_t rank = rankOf(matmul.getResult());
    int64_t loops = rank + 1;
    AffineExpr m = getAffineDimExpr(rank - 2, context),
               n = getAffineDimExpr(rank - 1, context),
               k = getAffineDimExpr(rank, context);
    // An operand of rank r: the result's last r - 2 batch loops, then its
    // two matrix dimensions.
    auto operandMap = [&](Value operand, AffineExpr rows, AffineExpr cols,
                          bool transposed) {
      int64_t r = rankOf(operand);
      SmallVector<AffineExpr> exprs;
      for (int64_t d = 0; d < r - 2; ++d)
        exprs.push_back(getAffineDimExpr(rank - 2 - (r - 2) + d, context));
      exprs.push_back(transposed ? cols : rows);
      exprs.push_back(transposed ? rows : cols);
      return AffineMap::get(loops, 0, exprs, context);
    };
    SmallVector<AffineExpr> result;
    for (int64_t d = 0; d < rank; ++d)
      result.push_back(getAffineDimExpr(d, context));
    return {operandMap(matmul.getLhs(), m, k, matmul.getTransposeLhs()),
            operandMap(matmul.getRhs(), k, n, matmul.getTransposeRhs()),
            AffineMap::get(loops, 0, result, context)};
  }
};

/// Fused attention: loops (batch, heads, queries, value columns; keys,
/// key columns), the keys a normalization (`generic`: the softmax over
/// them) and the key columns a `sum` (the scores). A grouped-query one's
/// K/V heads (h / g for query head h, which no map may say) have a loop of
/// their own, a `generic` reduction; propagation carries shardings through
/// it, its partition is refused (train-tensor-parallel splits it).
struct AttentionModel : public LoopModel<AttentionModel, AttentionOp> {
  static bool isGrouped(Operation *op) {
    auto attention = cast<AttentionOp>(op);
    return attention.getQ().getType().getDimSize(1) !=
           attention.getK().getType().getDimSize(1);
  }
  SmallVector<IteratorType> getLoopIteratorTypes(Operation *op) const {
    SmallVector<IteratorType> types(4, IteratorType::parallel);
    types.append(isGrouped(op) ? 3 : 2, IteratorType::reduction);
    return types;
  }
  SmallVector<ReductionKind>
  getReductionLoopIteratorKinds(Operation *op) const {
    if (isGrouped(op))
      return {ReductionKind::Generic, ReductionKind::Sum,
              ReductionKind::Generic};
    return {ReductionKind::Generic, ReductionKind::Sum};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    auto attention = cast<AttentionOp>(op);
    MLIRContext *context = op->getContext();
    bool grouped = isGrouped(op);
    unsigned loops = grouped ? 7 : 6;
    auto dim = [&](unsigned d) { return getAffineDimExpr(d, context); };
    AffineExpr b = dim(0), h = dim(1), i = dim(2), e = dim(3), j = dim(4),
               d = dim(5), kvHead = grouped ? dim(6) : h;
    auto map = [&](ArrayRef<AffineExpr> exprs) {
      return AffineMap::get(loops, 0, exprs, context);
    };
    SmallVector<AffineMap> maps = {map({b, h, i, d}), map({b, kvHead, j, d}),
                                   map({b, kvHead, j, e})};
    // The key and part counters: scalars.
    for (unsigned n = 3; n < op->getNumOperands(); ++n)
      maps.push_back(map({}));
    maps.push_back(attention.getTransposeOutput() ? map({b, i, h, e})
                                                  : map({b, h, i, e}));
    maps.push_back(map({b, h, i}));
    return maps;
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    auto attention = cast<AttentionOp>(op);
    bool anySplit =
        llvm::any_of(operandShardings, [](shard::Sharding sharding) {
          return sharding &&
                 llvm::any_of(sharding.getSplitAxes(),
                              [](auto axes) { return !axes.empty(); });
        });
    // A dropout draws each element at its place in the whole tensor: a
    // rank's part needs the split train-tensor-parallel marks.
    if (anySplit && attention.getRate().convertToDouble() > 0.0)
      return op->emitOpError("draws dropout on a sharded part: each rank "
                             "would draw the whole tensor's first elements "
                             "(train-tensor-parallel marks the draw's split)");
    // Upstream's trivial partition takes projected permutations only; a
    // grouped-query attention's K/V heads are not one (and a rank's part
    // of the query heads would regroup them).
    if (anySplit && isGrouped(op))
      return op->emitOpError("partitions a grouped-query attention: its "
                             "query heads map to K/V heads by a division "
                             "(train-tensor-parallel splits them with their "
                             "K/V heads)");
    return LoopModel::partition(op, partitionedOperands, operandShardings,
                                resultShardings, partitionMap, symbolTable,
                                builder);
  }
};

} // namespace

void mlir::train::registerShardingInterfaceModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, TrainDialect *) {
    AddOp::attachInterface<ElementwiseModel<AddOp>>(*ctx);
    MulOp::attachInterface<ElementwiseModel<MulOp>>(*ctx);
    ScaleOp::attachInterface<ElementwiseModel<ScaleOp>>(*ctx);
    GeluOp::attachInterface<ElementwiseModel<GeluOp>>(*ctx);
#define TMRT_ACTIVATION(kernel, Name)                                          \
  Name##Op::attachInterface<ElementwiseModel<Name##Op>>(*ctx);
#include "trainmem-runtime/Activations.def"
    CastOp::attachInterface<ElementwiseModel<CastOp>>(*ctx);
    BiasAddOp::attachInterface<RowModel<BiasAddOp, true>>(*ctx);
    LayerNormOp::attachInterface<RowModel<LayerNormOp, false>>(*ctx);
    RMSNormOp::attachInterface<RowModel<RMSNormOp, false>>(*ctx);
    SoftmaxOp::attachInterface<RowModel<SoftmaxOp, false>>(*ctx);
    MatmulOp::attachInterface<MatmulModel>(*ctx);
    AttentionOp::attachInterface<AttentionModel>(*ctx);
  });
}
