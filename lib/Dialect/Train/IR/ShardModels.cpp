//===- ShardModels.cpp - the train interfaces on upstream shard ops ------===//

#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainInterfaces.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace mlir::train;

namespace {

/// Ranks in the group of a collective: the product of its grid's sizes
/// along `grid_axes` (all axes when none are named); 0 when the grid is
/// missing or dynamic along them.
template <typename OpT> int64_t groupSize(OpT op) {
  auto grid = SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(
      op.getOperation(), op.getGridAttr());
  if (!grid)
    return 0;
  ArrayRef<int64_t> shape = grid.getShape();
  SmallVector<int64_t> axes;
  for (auto axis : op.getGridAxes())
    axes.push_back(axis);
  if (axes.empty())
    for (int64_t i = 0, e = shape.size(); i < e; ++i)
      axes.push_back(i);
  int64_t size = 1;
  for (int64_t axis : axes) {
    if (axis < 0 || axis >= static_cast<int64_t>(shape.size()) ||
        ShapedType::isDynamic(shape[axis]))
      return 0;
    size *= shape[axis];
  }
  return size;
}

/// What one pass of a ring sends through each rank: (n - 1) chunks of
/// ceil(elements / n) (a buffer that does not split evenly is sent in
/// equal chunks, the last padded, as the runtime's rings do).
uint64_t ringShare(uint64_t elements, int64_t n) {
  if (n <= 1)
    return 0;
  uint64_t ranks = static_cast<uint64_t>(n);
  return mulCount((elements + ranks - 1) / ranks, ranks - 1);
}

uint64_t elementBytes(Value value) {
  auto type = cast<ShapedType>(value.getType());
  return (type.getElementTypeBitWidth() + 7) / 8;
}

/// The ring's per-rank traffic of each collective, as a multiple of its
/// full buffer's share (N - 1)/N: all-reduce 2, reduce-scatter and
/// all-gather 1, a local slice 0.
template <typename OpT> struct Ring;
template <> struct Ring<shard::AllReduceOp> {
  static constexpr const char *kind = "all_reduce";
  static constexpr unsigned passes = 2;
  static Value buffer(shard::AllReduceOp op) { return op.getInput(); }
};
template <> struct Ring<shard::ReduceScatterOp> {
  static constexpr const char *kind = "reduce_scatter";
  static constexpr unsigned passes = 1;
  static Value buffer(shard::ReduceScatterOp op) { return op.getInput(); }
};
template <> struct Ring<shard::AllGatherOp> {
  static constexpr const char *kind = "all_gather";
  static constexpr unsigned passes = 1;
  static Value buffer(shard::AllGatherOp op) { return op.getResult(); }
};
template <> struct Ring<shard::AllSliceOp> {
  static constexpr const char *kind = "all_slice";
  static constexpr unsigned passes = 0;
  static Value buffer(shard::AllSliceOp op) { return op.getInput(); }
};

template <typename OpT>
struct CommunicationModel
    : public CommunicationOpInterface::ExternalModel<CommunicationModel<OpT>,
                                                     OpT> {
  StringRef getCollectiveKind(Operation *) const { return Ring<OpT>::kind; }
  int64_t getGroupSize(Operation *op) const { return groupSize(cast<OpT>(op)); }
  uint64_t getElementsSent(Operation *op) const {
    auto collective = cast<OpT>(op);
    uint64_t elements =
        getNumElements(Ring<OpT>::buffer(collective).getType());
    return mulCount(ringShare(elements, groupSize(collective)),
                    Ring<OpT>::passes);
  }
  uint64_t getBytesSent(Operation *op) const {
    auto collective = cast<OpT>(op);
    return mulCount(getElementsSent(op),
                    elementBytes(Ring<OpT>::buffer(collective)));
  }
};

/// The reduction a rank does: (N - 1)/N of the buffer's elements for the
/// reducing collectives, none for the others. Bytes: every operand read,
/// every result written (the defaults).
template <typename OpT>
struct CollectiveCostModel
    : public CostOpInterface::ExternalModel<CollectiveCostModel<OpT>, OpT> {
  uint64_t getFlops(Operation *op) const {
    if (!std::is_same_v<OpT, shard::AllReduceOp> &&
        !std::is_same_v<OpT, shard::ReduceScatterOp>)
      return 0;
    auto collective = cast<OpT>(op);
    return ringShare(getNumElements(collective.getInput().getType()),
                     groupSize(collective));
  }
};

/// Collectives that write their result over their operand's buffer: an
/// all-reduce (the result is the operand, reduced), a reduce-scatter marked
/// `train.in_place` and a local slice along the first dimension (the rank's
/// shard is the start of the buffer it came from, as an in-place
/// reduce-scatter leaves it). The memory analysis then keeps
/// one buffer, of the operand's size, where nothing reads the operand
/// afterwards.
template <typename OpT>
struct InPlaceModel
    : public TiedOpInterface::ExternalModel<InPlaceModel<OpT>, OpT> {
  std::optional<unsigned> getTiedResultOperandIndex(Operation *op,
                                                    unsigned) const {
    auto collective = cast<OpT>(op);
    // A reduce-scatter writes over its buffer only where train-zero asked
    // for it (stage 1); otherwise its shard is a buffer of its own and the
    // full one can die (stage 2).
    if (std::is_same_v<OpT, shard::ReduceScatterOp> &&
        !op->hasAttr(kInPlaceAttrName))
      return std::nullopt;
    // A slice along an inner dimension (a sequence-parallel rank's piece)
    // is a buffer of its own, so that the whole one can die.
    if (auto slice = dyn_cast<shard::AllSliceOp>(op);
        slice && slice.getSliceAxis() != 0)
      return std::nullopt;
    auto in = cast<ShapedType>(collective.getInput().getType());
    auto out = cast<ShapedType>(collective.getResult().getType());
    if (in.getElementType() != out.getElementType() ||
        !in.hasStaticShape() || !out.hasStaticShape() ||
        out.getNumElements() > in.getNumElements())
      return std::nullopt;
    return 0u;
  }
};

/// Megatron's g: a sum over the ranks of a tensor-parallel group of their
/// partial results (the row-parallel matmul's), after which every rank
/// holds the whole value and computes the same from it; the gradient of
/// each rank's part is then the sum's gradient, as it is (the identity).
/// train.grad_all_reduce is its conjugate.
struct AllReduceVJPModel
    : public DifferentiableOpInterface::ExternalModel<AllReduceVJPModel,
                                                      shard::AllReduceOp> {
  LogicalResult buildVJP(Operation *op, OpBuilder &, ValueRange resultGrads,
                         SmallVectorImpl<Value> &operandGrads) const {
    auto allReduce = cast<shard::AllReduceOp>(op);
    if (allReduce.getReduction() != shard::ReductionKind::Sum)
      return op->emitOpError("is differentiated as a sum (Megatron's g); "
                             "reduction ")
             << shard::stringifyReductionKind(allReduce.getReduction())
             << " has no gradient here";
    if (resultGrads[0] &&
        resultGrads[0].getType() != allReduce.getInput().getType())
      return op->emitOpError("gradient of another type than its operand");
    operandGrads.push_back(resultGrads[0]);
    return success();
  }
};

/// Megatron's sequence-parallel conjugates (Korthikanti et al. 2022, 4.2.2):
/// an all-gather of a sequence-split value before a tensor-parallel part
/// (each rank's gradient of the gathered value is its part's, summed and
/// split again: a reduce-scatter), and a reduce-scatter of the part's
/// partial sums after it (each rank's gradient is its piece's, which every
/// rank's partial sum needs whole: an all-gather). A slice of a whole value
/// into a rank's piece: the pieces' gradients gathered.
Value gatherGradient(OpBuilder &builder, Location loc, Value grad,
                     FlatSymbolRefAttr grid, DenseI16ArrayAttr axes,
                     IntegerAttr dim, Type wholeType) {
  return shard::AllGatherOp::create(
      builder, loc,
      RankedTensorType::get(cast<ShapedType>(wholeType).getShape(),
                            getElementTypeOrSelf(grad.getType())),
      grid, axes, grad, dim);
}

struct AllGatherVJPModel
    : public DifferentiableOpInterface::ExternalModel<AllGatherVJPModel,
                                                      shard::AllGatherOp> {
  LogicalResult buildVJP(Operation *op, OpBuilder &builder,
                         ValueRange resultGrads,
                         SmallVectorImpl<Value> &operandGrads) const {
    auto gather = cast<shard::AllGatherOp>(op);
    if (!resultGrads[0]) {
      operandGrads.push_back(Value());
      return success();
    }
    auto partType = cast<ShapedType>(gather.getInput().getType());
    operandGrads.push_back(shard::ReduceScatterOp::create(
        builder, op->getLoc(),
        RankedTensorType::get(partType.getShape(),
                              getElementTypeOrSelf(resultGrads[0].getType())),
        gather.getGridAttr(), gather.getGridAxesAttr(), resultGrads[0],
        shard::ReductionKindAttr::get(op->getContext(),
                                      shard::ReductionKind::Sum),
        gather.getGatherAxisAttr()));
    return success();
  }
};

struct ReduceScatterVJPModel
    : public DifferentiableOpInterface::ExternalModel<ReduceScatterVJPModel,
                                                      shard::ReduceScatterOp> {
  LogicalResult buildVJP(Operation *op, OpBuilder &builder,
                         ValueRange resultGrads,
                         SmallVectorImpl<Value> &operandGrads) const {
    auto scatter = cast<shard::ReduceScatterOp>(op);
    if (scatter.getReduction() != shard::ReductionKind::Sum)
      return op->emitOpError("is differentiated as a sum (the sequence-"
                             "parallel reduce-scatter); reduction ")
             << shard::stringifyReductionKind(scatter.getReduction())
             << " has no gradient here";
    operandGrads.push_back(
        resultGrads[0]
            ? gatherGradient(builder, op->getLoc(), resultGrads[0],
                             scatter.getGridAttr(), scatter.getGridAxesAttr(),
                             scatter.getScatterAxisAttr(),
                             scatter.getInput().getType())
            : Value());
    return success();
  }
};

struct AllSliceVJPModel
    : public DifferentiableOpInterface::ExternalModel<AllSliceVJPModel,
                                                      shard::AllSliceOp> {
  LogicalResult buildVJP(Operation *op, OpBuilder &builder,
                         ValueRange resultGrads,
                         SmallVectorImpl<Value> &operandGrads) const {
    auto slice = cast<shard::AllSliceOp>(op);
    operandGrads.push_back(
        resultGrads[0]
            ? gatherGradient(builder, op->getLoc(), resultGrads[0],
                             slice.getGridAttr(), slice.getGridAxesAttr(),
                             slice.getSliceAxisAttr(),
                             slice.getInput().getType())
            : Value());
    return success();
  }
};

template <typename OpT> void attach(MLIRContext *ctx) {
  OpT::template attachInterface<CommunicationModel<OpT>,
                                CollectiveCostModel<OpT>>(*ctx);
}

} // namespace

/// A ring attention's group: its context split's axis.
static std::optional<ProcessGroup> contextRingGroup(Operation *op) {
  ContextSplitAttr context = getRingContext(op);
  if (!context)
    return std::nullopt;
  return getProcessGroup(op, context.getGrid(),
                         {static_cast<int16_t>(context.getAxis())});
}

std::optional<ProcessGroup> mlir::train::getProcessGroup(Operation *op) {
  FlatSymbolRefAttr gridName;
  ArrayRef<int16_t> gridAxes;
  if (auto c = dyn_cast<shard::AllReduceOp>(op))
    gridName = c.getGridAttr(), gridAxes = c.getGridAxes();
  else if (auto c = dyn_cast<shard::ReduceScatterOp>(op))
    gridName = c.getGridAttr(), gridAxes = c.getGridAxes();
  else if (auto c = dyn_cast<shard::AllGatherOp>(op))
    gridName = c.getGridAttr(), gridAxes = c.getGridAxes();
  else if (auto c = dyn_cast<shard::AllSliceOp>(op))
    gridName = c.getGridAttr(), gridAxes = c.getGridAxes();
  else
    return contextRingGroup(op);
  return getProcessGroup(op, gridName, gridAxes);
}

std::optional<ProcessGroup>
mlir::train::getProcessGroup(Operation *op, FlatSymbolRefAttr gridName,
                             ArrayRef<int16_t> gridAxes) {
  auto grid = SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(op, gridName);
  if (!grid)
    return std::nullopt;
  ArrayRef<int64_t> shape = grid.getShape();
  if (shape.empty() || llvm::any_of(shape, ShapedType::isDynamic))
    return std::nullopt;
  SmallVector<int64_t> axes(gridAxes.begin(), gridAxes.end());
  if (axes.empty())
    for (int64_t i = 0, e = shape.size(); i < e; ++i)
      axes.push_back(i);
  llvm::sort(axes);
  for (auto [i, axis] : llvm::enumerate(axes))
    if (axis < 0 || axis >= static_cast<int64_t>(shape.size()) ||
        (i > 0 && axis != axes[i - 1] + 1))
      return std::nullopt;
  ProcessGroup group;
  for (int64_t size : shape)
    group.gridRanks *= size;
  for (int64_t axis : axes)
    group.size *= shape[axis];
  for (int64_t axis = axes.back() + 1, e = shape.size(); axis < e; ++axis)
    group.stride *= shape[axis];
  return group;
}

void mlir::train::registerShardExternalModels(DialectRegistry &registry) {
  registerShardingInterfaceModels(registry);
  registry.addExtension(+[](MLIRContext *ctx, shard::ShardDialect *) {
    attach<shard::AllReduceOp>(ctx);
    attach<shard::ReduceScatterOp>(ctx);
    attach<shard::AllGatherOp>(ctx);
    attach<shard::AllSliceOp>(ctx);
    shard::AllReduceOp::attachInterface<InPlaceModel<shard::AllReduceOp>,
                                        AllReduceVJPModel>(*ctx);
    shard::ReduceScatterOp::attachInterface<
        InPlaceModel<shard::ReduceScatterOp>, ReduceScatterVJPModel>(*ctx);
    shard::AllSliceOp::attachInterface<InPlaceModel<shard::AllSliceOp>,
                                       AllSliceVJPModel>(*ctx);
    shard::AllGatherOp::attachInterface<AllGatherVJPModel>(*ctx);
  });
}
