//===- TrainUtils.cpp - queries on train IR shared by passes --------------===//

#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"

#include "mlir/Interfaces/InferTypeOpInterface.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"

using namespace mlir;
using namespace mlir::train;

bool mlir::train::isRowMajor(ArrayRef<int64_t> shape,
                             ArrayRef<int64_t> strides) {
  SmallVector<int64_t> expected = computeSuffixProduct(shape);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1 && strides[i] != expected[i])
      return false;
  return true;
}

bool mlir::train::isTransparentRegionOp(Operation *op) {
  return isa_and_nonnull<TransparentRegionOpInterface>(op);
}

std::optional<std::pair<Attribute, Attribute>>
mlir::train::getStateMarker(DictionaryAttr attrs) {
  if (!attrs)
    return std::nullopt;
  for (NamedAttribute attr : attrs)
    if (attr.getName() == kParamAttrName ||
        attr.getName() == kOptimizerStateAttrName)
      return std::pair<Attribute, Attribute>{attr.getName(), attr.getValue()};
  return std::nullopt;
}

Value mlir::train::resolveRegionResult(Value value) {
  while (auto region = value.getDefiningOp<TransparentRegionOpInterface>())
    value = region.getYieldedValue(cast<OpResult>(value).getResultNumber());
  return value;
}

Value mlir::train::wholeIntegers(Value integers) {
  Value value = resolveRegionResult(integers);
  while (Operation *def = value.getDefiningOp()) {
    if (def->getNumOperands() != 1 || def->getNumResults() != 1 ||
        !isa<IntegerType>(getElementTypeOrSelf(def->getOperand(0).getType())))
      break;
    value = resolveRegionResult(def->getOperand(0));
  }
  return value;
}

BlockArgument mlir::train::findLossTargetsArgument(FunctionOpInterface func) {
  LossOpInterface loss;
  func->walk([&](LossOpInterface op) {
    loss = op;
    return WalkResult::interrupt();
  });
  if (!loss)
    return BlockArgument();
  auto arg = dyn_cast<BlockArgument>(wholeIntegers(loss.getTargets()));
  if (!arg || arg.getOwner() != &func.getFunctionBody().front())
    return BlockArgument();
  return arg;
}

bool mlir::train::hasMarkedStep(ModuleOp module) {
  return llvm::any_of(module.getOps(), [](Operation &op) {
    return op.hasAttr(kStepAttrName) || isLoweredStep(&op);
  });
}

Operation *mlir::train::findMarkedStep(ModuleOp module, StringRef passName) {
  Operation *found = nullptr;
  for (Operation &op : module.getOps()) {
    // A Hessian step (Sophia's) belongs to a step; it is not one.
    if ((!op.hasAttr(kStepAttrName) && !isLoweredStep(&op)) ||
        op.hasAttr(kHessianStepAttrName))
      continue;
    if (found) {
      emitError(op.getLoc())
          << passName << ": @" << SymbolTable::getSymbolName(found).getValue()
          << " and @" << SymbolTable::getSymbolName(&op).getValue()
          << " are both marked " << kStepAttrName
          << "; give the pass function=NAME";
      return nullptr;
    }
    found = &op;
  }
  if (!found)
    emitError(module.getLoc())
        << passName << ": no function marked " << kStepAttrName
        << " (run train-autodiff first)";
  return found;
}

bool mlir::train::isTensorParallel(FunctionOpInterface func) {
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    if (func.getArgAttr(i, kTensorSplitAttrName))
      return true;
  return false;
}

LogicalResult mlir::train::inferResultTypes(Operation *op,
                                            SmallVectorImpl<Type> &types) {
  if (auto infer = dyn_cast<InferTypeOpInterface>(op))
    return infer.inferReturnTypes(
        op->getContext(), op->getLoc(), op->getOperands(),
        op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
        op->getRegions(), types);
  auto infer = dyn_cast<InferShapedTypeOpInterface>(op);
  SmallVector<ShapedTypeComponents> shapes;
  if (!infer || failed(infer.inferReturnTypeComponents(
                    op->getContext(), op->getLoc(), op->getOperands(),
                    op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                    op->getRegions(), shapes)))
    return failure();
  for (auto [result, shape] : llvm::zip(op->getResults(), shapes))
    types.push_back(RankedTensorType::get(
        shape.getDims(), getElementTypeOrSelf(result.getType())));
  return success();
}

int64_t mlir::train::getPipelineRankStride(FunctionOpInterface func) {
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    auto split =
        func.getArgAttrOfType<TensorSplitAttr>(i, kTensorSplitAttrName);
    if (!split)
      continue;
    auto grid = SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(
        func, split.getGrid());
    if (!grid || grid.getShape().size() < 3)
      return 1;
    int64_t stride = 1;
    for (int64_t extent : grid.getShape().drop_front(2))
      stride *= extent;
    return stride;
  }
  return 1;
}

TensorSplitAttr mlir::train::getTensorSplit(FunctionOpInterface func,
                                            Value value) {
  auto arg = dyn_cast<BlockArgument>(value);
  if (!arg || arg.getOwner() != &func.getFunctionBody().front())
    return {};
  unsigned index = arg.getArgNumber();
  if (auto split =
          func.getArgAttrOfType<TensorSplitAttr>(index, kTensorSplitAttrName))
    return split;
  auto state = func.getArgAttrOfType<StateAttr>(index, kOptimizerStateAttrName);
  if (!state)
    return {};
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    if (auto name = func.getArgAttrOfType<StringAttr>(i, kParamAttrName);
        name && name.getValue() == state.getParam())
      return func.getArgAttrOfType<TensorSplitAttr>(i, kTensorSplitAttrName);
  return {};
}

SmallVector<Value> mlir::train::buildSplitSquaredNorms(
    OpBuilder &builder, Location loc, ValueRange grads,
    ArrayRef<TensorSplitAttr> splits, bool withWhole,
    FlatSymbolRefAttr shardGrid, ArrayRef<int16_t> shardAxes) {
  assert(grads.size() == splits.size() && "one split per gradient");
  // The groups: a grid and the sorted axes each norm is summed over.
  llvm::MapVector<std::pair<Attribute, SmallVector<int16_t>>,
                  SmallVector<Value>>
      groups;
  // The split gradients' groups first, then the whole ones'.
  SmallVector<std::pair<Value, TensorSplitAttr>> ordered;
  for (auto [grad, split] : llvm::zip(grads, splits))
    if (split)
      ordered.push_back({grad, split});
  if (withWhole)
    for (auto [grad, split] : llvm::zip(grads, splits))
      if (!split)
        ordered.push_back({grad, split});
  for (auto [grad, split] : ordered) {
    SmallVector<int16_t> axes(shardAxes);
    Attribute grid = shardGrid;
    if (split) {
      assert((!shardGrid || shardGrid == split.getGrid()) &&
             "ZeRO shards of split gradients on another grid");
      grid = split.getGrid();
      axes.push_back(static_cast<int16_t>(split.getAxis()));
    }
    llvm::sort(axes);
    groups[{grid, axes}].push_back(grad);
  }
  SmallVector<Value> norms;
  for (auto &[key, members] : groups) {
    Value norm = SquaredNormOp::create(builder, loc, members).getResult();
    if (!key.second.empty())
      norm =
          shard::AllReduceOp::create(
              builder, loc, norm, cast<FlatSymbolRefAttr>(key.first).getValue(),
              key.second, shard::ReductionKind::Sum)
              .getResult();
    norms.push_back(norm);
  }
  return norms;
}

int64_t mlir::train::getWholeDrawnElements(BatchDrawOpInterface draw) {
  int64_t elements = draw.getDrawnElements();
  if (auto split = dyn_cast_or_null<TensorSplitAttr>(draw.getDrawSplit()))
    elements *= split.getParts();
  return elements;
}

FailureOr<ProcessGroup> mlir::train::getSplitGroup(Operation *op,
                                                   TensorSplitAttr split) {
  std::optional<ProcessGroup> group = getProcessGroup(
      op, split.getGrid(), {static_cast<int16_t>(split.getAxis())});
  if (!group || group->size != split.getParts())
    return op->emitOpError("its split's grid axis is not a static group of ")
           << split.getParts() << " ranks";
  return *group;
}

ContextSplitAttr mlir::train::getContextSplit(Operation *func) {
  ContextSplitAttr split;
  func->walk([&](ContextSliceOp slice) {
    split = slice.getContextParallel();
    return WalkResult::interrupt();
  });
  return split;
}

ContextSplitAttr mlir::train::getRingContext(Operation *op) {
  if (auto attention = dyn_cast<AttentionOp>(op))
    return attention.getRing() ? attention.getContextParallelAttr()
                               : ContextSplitAttr();
  if (auto grad = dyn_cast<AttentionGradOp>(op))
    return grad.getRing() ? grad.getContextParallelAttr() : ContextSplitAttr();
  return {};
}

FailureOr<ProcessGroup> mlir::train::getContextGroup(Operation *op,
                                                     ContextSplitAttr context) {
  std::optional<ProcessGroup> group = getProcessGroup(
      op, context.getGrid(), {static_cast<int16_t>(context.getAxis())});
  if (!group || group->size != context.getParts())
    return op->emitOpError("its context split's grid axis is not a static "
                           "group of ")
           << context.getParts() << " ranks";
  return *group;
}

FailureOr<SplitDrawPlacement>
mlir::train::getSplitDrawPlacement(BatchDrawOpInterface draw) {
  RankedTensorType drawn = draw.getDrawnType();
  SplitDrawPlacement placement;
  auto split = dyn_cast_or_null<TensorSplitAttr>(draw.getDrawSplit());
  if (!split)
    return placement;
  FailureOr<ProcessGroup> group = getSplitGroup(draw, split);
  if (failed(group))
    return failure();
  placement.block = 1;
  for (int64_t d = split.getDim(); d < drawn.getRank(); ++d)
    placement.block *= drawn.getDimSize(d);
  placement.parts = split.getParts();
  placement.stride = group->stride;
  placement.balanced = split.isBalanced();
  return placement;
}
