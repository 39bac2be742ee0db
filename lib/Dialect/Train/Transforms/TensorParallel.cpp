//===- TensorParallel.cpp - train-tensor-parallel -------------------------===//
//
// Megatron's tensor parallelism on the forward pass: an MLP or attention
// block's first matmuls split by columns (an MLP's inner columns, the
// attention's heads), its last by rows, with the conjugate collectives f
// (train.grad_all_reduce) and g (shard.all_reduce) around the split part.
// The split parameters become one rank's part, marked #train.split; the
// ops between re-infer their types (a reshape's split dimension is the one
// that holds the split dimension's outer part).
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINTENSORPARALLELPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

constexpr int16_t kTensorAxis = 1;

/// The parameter argument `value` is, if it is one.
BlockArgument paramArgument(Value value, func::FuncOp func) {
  auto arg = dyn_cast<BlockArgument>(value);
  if (!arg || arg.getOwner() != &func.getBody().front() ||
      !func.getArgAttr(arg.getArgNumber(), kParamAttrName))
    return BlockArgument();
  return arg;
}

/// A block's matmuls and ops, as the split needs them.
struct BlockSplit {
  /// The matmuls by columns (their results are split), in order.
  SmallVector<MatmulOp> columns;
  /// The ops between them and `row`, whose results are split, in order.
  SmallVector<Operation *> between;
  /// The matmul by rows (its product is partial on each rank).
  MatmulOp row;
  /// The types of the split values before the split.
  llvm::DenseMap<Value, RankedTensorType> wholeTypes;
};

/// Whether `op`'s result types follow from its operands (re-inferred for a
/// rank's part), or it is a reshape (whose split dimension the pass finds).
bool isRetypable(Operation *op) {
  return op->getNumRegions() == 0 &&
         isa<InferTypeOpInterface, InferShapedTypeOpInterface, ReshapeOp>(op);
}

class TensorParallel {
public:
  TensorParallel(func::FuncOp func, int64_t size, FlatSymbolRefAttr grid)
      : func(func), size(size), grid(grid) {}

  /// Splits an MLP or attention block: matmuls by columns, element-wise
  /// ops and views, a last matmul by rows.
  LogicalResult splitBlock(BlockOp block);

private:
  FailureOr<BlockSplit> analyze(BlockOp block);
  /// A whole value that a split op reads, passed through f once.
  Value enter(Value value, Operation *user);
  /// Re-types a reshape of a split value: the dimension of its result that
  /// holds the split one's outermost part is split.
  LogicalResult reshapePart(ReshapeOp reshape, const BlockSplit &split);
  LogicalResult checkContraction(MatmulOp matmul, const BlockSplit &split);
  /// Marks a dropout on a rank's part with its #train.split.
  void markDrawSplit(DropoutOp dropout, const BlockSplit &split);
  /// Makes argument `arg` one rank's part along `dim`.
  LogicalResult splitParameter(BlockArgument arg, int64_t dim, Operation *user);
  LogicalResult reinfer(Operation *op);

  func::FuncOp func;
  int64_t size;
  FlatSymbolRefAttr grid;
  /// The arguments split so far (each once).
  llvm::DenseSet<BlockArgument> split;
  /// f of each whole value entering the split part of the current block.
  llvm::SmallMapVector<Value, Value, 4> entered;
};

FailureOr<BlockSplit> TensorParallel::analyze(BlockOp block) {
  BlockSplit mlp;
  llvm::DenseSet<Value> splitValues;
  auto isSplit = [&](Value v) { return splitValues.contains(v); };
  auto fail = [&](Operation *op) {
    return op->emitError("train-tensor-parallel: the ")
           << stringifyBlockKind(block.getKind()) << " block of layer "
           << (block.getLayer() ? *block.getLayer() : -1) << " ";
  };
  for (Operation &op : block.getBody().front().without_terminator()) {
    bool readsSplit = llvm::any_of(op.getOperands(), isSplit);
    auto matmul = dyn_cast<MatmulOp>(&op);
    bool byParam = matmul && !matmul.getTransposeLhs() &&
                   !matmul.getTransposeRhs() &&
                   paramArgument(matmul.getRhs(), func);
    if (byParam && !readsSplit) {
      if (mlp.row)
        return fail(&op) << "has a matmul by a weight after its last one "
                            "(not matmuls, element-wise ops, one matmul)";
      mlp.columns.push_back(matmul);
      splitValues.insert(matmul.getResult());
      mlp.wholeTypes[matmul.getResult()] =
          cast<RankedTensorType>(matmul.getType());
      continue;
    }
    if (byParam && readsSplit) {
      if (mlp.row)
        return fail(&op) << "has two matmuls by rows";
      if (isSplit(matmul.getRhs()))
        return fail(&op) << "multiplies two split values";
      mlp.row = matmul;
      continue;
    }
    if (!readsSplit)
      continue;
    if (mlp.row)
      return fail(&op) << "reads a split value after its last matmul";
    if (!isRetypable(&op))
      return fail(&op) << "has an op between its matmuls whose result type "
                          "does not follow from its operands ('"
                       << op.getName() << "')";
    mlp.between.push_back(&op);
    for (Value result : op.getResults()) {
      splitValues.insert(result);
      if (auto type = dyn_cast<RankedTensorType>(result.getType()))
        mlp.wholeTypes[result] = type;
    }
  }
  if (mlp.columns.empty() || !mlp.row)
    return block.emitError("train-tensor-parallel: the ")
           << stringifyBlockKind(block.getKind()) << " block of layer "
           << (block.getLayer() ? *block.getLayer() : -1)
           << " is not matmuls by weights, element-wise ops and a last "
              "matmul by a weight";
  // Nothing split leaves the part of the block it is split in.
  for (Value value : splitValues)
    for (Operation *user : value.getUsers())
      if (user != mlp.row && !llvm::is_contained(mlp.between, user))
        return fail(user) << "uses a split value outside the split part";
  return mlp;
}

LogicalResult TensorParallel::splitParameter(BlockArgument arg, int64_t dim,
                                             Operation *user) {
  auto type = cast<RankedTensorType>(arg.getType());
  auto name =
      func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kParamAttrName);
  for (Operation *other : arg.getUsers())
    if (other != user)
      return other->emitError("train-tensor-parallel: parameter '")
             << name.getValue() << "' is split for its block and read here too";
  if (!split.insert(arg).second)
    return user->emitError("train-tensor-parallel: parameter '")
           << name.getValue() << "' is split twice";
  if (type.getDimSize(dim) % size != 0)
    return user->emitError("train-tensor-parallel: ")
           << size << " ranks do not divide dimension " << dim << " ("
           << type.getDimSize(dim) << ") of '" << name.getValue() << "'";
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] /= size;
  arg.setType(RankedTensorType::get(shape, type.getElementType()));
  func.setArgAttr(
      arg.getArgNumber(), kTensorSplitAttrName,
      TensorSplitAttr::get(func.getContext(), dim, size, grid, kTensorAxis));
  return success();
}

LogicalResult TensorParallel::reinfer(Operation *op) {
  SmallVector<Type> types;
  if (failed(inferResultTypes(op, types)))
    return op->emitError("train-tensor-parallel: cannot re-type it for one "
                         "rank's part");
  for (auto [result, type] : llvm::zip(op->getResults(), types))
    result.setType(type);
  return success();
}

Value TensorParallel::enter(Value value, Operation *user) {
  auto [it, inserted] = entered.try_emplace(value, Value());
  if (inserted) {
    OpBuilder builder(user);
    if (Operation *def = value.getDefiningOp();
        def && def->getBlock() == user->getBlock())
      builder.setInsertionPointAfter(def);
    SmallVector<int16_t> axes = {kTensorAxis};
    it->second =
        GradAllReduceOp::create(builder, user->getLoc(), value, grid.getValue(),
                                ArrayRef<int16_t>(axes))
            .getResult();
  }
  return it->second;
}

LogicalResult TensorParallel::reshapePart(ReshapeOp reshape,
                                          const BlockSplit &split) {
  auto fail = [&]() {
    return reshape.emitError("train-tensor-parallel: cannot split this "
                             "reshape: no dimension of its result holds the "
                             "split dimension's outer part in ")
           << size << " parts";
  };
  auto input = cast<RankedTensorType>(reshape.getInput().getType());
  RankedTensorType wholeInput = split.wholeTypes.lookup(reshape.getInput());
  RankedTensorType wholeResult = split.wholeTypes.lookup(reshape.getResult());
  if (!wholeInput || !wholeResult)
    return fail();
  // The split dimension of the input: where its size changed.
  int64_t dim = -1;
  for (int64_t d = 0; d < input.getRank(); ++d)
    if (input.getDimSize(d) != wholeInput.getDimSize(d))
      dim = d;
  if (dim < 0)
    return fail();
  ArrayRef<int64_t> in = wholeInput.getShape(), out = wholeResult.getShape();
  auto product = [](ArrayRef<int64_t> dims) {
    int64_t p = 1;
    for (int64_t d : dims)
      p *= d;
    return p;
  };
  // The result dimension that starts the same block of elements: split
  // by t, its parts hold the same elements as the input's parts.
  for (int64_t j = 0, e = out.size(); j < e; ++j)
    if (product(out.drop_front(j)) == product(in.drop_front(dim)) &&
        out[j] % size == 0) {
      SmallVector<int64_t> shape(out);
      shape[j] /= size;
      reshape.getResult().setType(
          RankedTensorType::get(shape, wholeResult.getElementType()));
      return success();
    }
  return fail();
}

void TensorParallel::markDrawSplit(DropoutOp dropout, const BlockSplit &split) {
  auto part = cast<RankedTensorType>(dropout.getInput().getType());
  RankedTensorType whole = split.wholeTypes.lookup(dropout.getInput());
  if (!whole)
    return;
  for (int64_t d = 0; d < part.getRank(); ++d)
    if (part.getDimSize(d) != whole.getDimSize(d)) {
      dropout.setSplitAttr(TensorSplitAttr::get(dropout.getContext(), d, size,
                                                grid, kTensorAxis));
      return;
    }
}

/// A product of split values sums over a dimension that is whole on every
/// rank: the attention's scores over a head's dimension, its output over
/// the keys. A split one would leave partial sums.
LogicalResult TensorParallel::checkContraction(MatmulOp matmul,
                                               const BlockSplit &split) {
  auto contracted = [&](Value operand, bool lhs, bool transposed) {
    auto type = cast<RankedTensorType>(operand.getType());
    RankedTensorType whole = split.wholeTypes.lookup(operand);
    int64_t dim = type.getRank() - ((lhs != transposed) ? 1 : 2);
    return whole && whole.getDimSize(dim) != type.getDimSize(dim);
  };
  if (contracted(matmul.getLhs(), true, matmul.getTransposeLhs()) ||
      contracted(matmul.getRhs(), false, matmul.getTransposeRhs()))
    return matmul.emitError("train-tensor-parallel: would sum over a split "
                            "dimension (for attention: ")
           << size << " must divide the heads and the K/V heads)";
  return success();
}

LogicalResult TensorParallel::splitBlock(BlockOp block) {
  FailureOr<BlockSplit> parts = analyze(block);
  if (failed(parts))
    return failure();
  entered.clear();
  llvm::DenseSet<Value> splitValues;
  for (auto &[value, type] : parts->wholeTypes)
    splitValues.insert(value);
  // f: each whole input of the column matmuls enters once.
  for (MatmulOp column : parts->columns) {
    column.getLhsMutable().assign(enter(column.getLhs(), column));
    if (failed(
            splitParameter(cast<BlockArgument>(column.getRhs()), 1, column)) ||
        failed(reinfer(column)))
      return failure();
  }
  // The ops on a rank's part: a bias among their operands is split with
  // them, another whole value enters through f.
  for (Operation *op : parts->between) {
    for (OpOperand &operand : op->getOpOperands()) {
      Value value = operand.get();
      if (splitValues.contains(value) ||
          !isa<RankedTensorType>(value.getType()))
        continue;
      if (BlockArgument arg = paramArgument(value, func)) {
        if (cast<RankedTensorType>(arg.getType()).getRank() != 1)
          return op->emitError("train-tensor-parallel: reads a whole "
                               "parameter of rank > 1 with a split value");
        if (failed(splitParameter(arg, 0, op)))
          return failure();
        continue;
      }
      if (isa<FloatType>(getElementTypeOrSelf(value.getType())))
        operand.set(enter(value, op));
    }
    if (auto matmul = dyn_cast<MatmulOp>(op);
        matmul && failed(checkContraction(matmul, *parts)))
      return failure();
    LogicalResult retyped = isa<ReshapeOp>(op)
                                ? reshapePart(cast<ReshapeOp>(op), *parts)
                                : reinfer(op);
    if (failed(retyped))
      return failure();
    // A dropout on a rank's part draws its part of the whole tensor's mask.
    if (auto dropout = dyn_cast<DropoutOp>(op))
      markDrawSplit(dropout, *parts);
  }
  // The rows: each rank's product is partial; g sums them.
  MatmulOp row = parts->row;
  if (failed(splitParameter(cast<BlockArgument>(row.getRhs()), 0, row)))
    return failure();
  OpBuilder builder(row);
  builder.setInsertionPointAfter(row);
  SmallVector<int16_t> axes = {kTensorAxis};
  auto sum = shard::AllReduceOp::create(
      builder, row.getLoc(), row.getResult(), grid.getValue(),
      ArrayRef<shard::GridAxis>(axes), shard::ReductionKind::Sum);
  row.getResult().replaceAllUsesExcept(sum.getResult(), sum);
  return success();
}

struct TrainTensorParallelPass
    : public impl::TrainTensorParallelPassBase<TrainTensorParallelPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (size < 1 || data < 1) {
      module.emitError("train-tensor-parallel: size and data must be at "
                       "least 1, got size=")
          << static_cast<int64_t>(size)
          << " data=" << static_cast<int64_t>(data);
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> forwards;
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func->hasAttr(kStepAttrName)) {
        func.emitError("train-tensor-parallel: runs on the forward pass "
                       "(before train-autodiff); @")
            << func.getSymName() << " is already a training step";
        return signalPassFailure();
      }
      bool hasParams = false;
      for (unsigned i = 0; i < func.getNumArguments(); ++i)
        hasParams |= static_cast<bool>(func.getArgAttr(i, kParamAttrName));
      if (hasParams)
        forwards.push_back(func);
    }
    if (size == 1)
      return;
    OpBuilder builder(module.getBodyRegion());
    builder.setInsertionPointToStart(module.getBody());
    auto gridOp = shard::GridOp::create(builder, module.getLoc(), "tp",
                                        ArrayRef<int64_t>{data, size});
    SymbolTable symbols(module);
    symbols.insert(gridOp); // renames it when "tp" is taken
    auto grid = FlatSymbolRefAttr::get(gridOp.getSymNameAttr());
    for (func::FuncOp func : forwards) {
      TensorParallel parallel(func, size, grid);
      Operation *whole[2] = {nullptr, nullptr};
      WalkResult walk = func.walk([&](BlockOp block) {
        switch (block.getKind()) {
        case BlockKind::mlp:
        case BlockKind::attention:
          if (failed(parallel.splitBlock(block)))
            return WalkResult::interrupt();
          ++numSplitBlocks;
          return WalkResult::skip();
        case BlockKind::embedding:
          whole[0] = whole[0] ? whole[0] : block.getOperation();
          break;
        case BlockKind::head:
          whole[1] = whole[1] ? whole[1] : block.getOperation();
          break;
        default:
          break;
        }
        return WalkResult::skip();
      });
      if (walk.wasInterrupted())
        return signalPassFailure();
      func.setType(FunctionType::get(func.getContext(),
                                     func.getBody().getArgumentTypes(),
                                     func.getResultTypes()));
      const char *kinds[2] = {"embedding", "head"};
      for (unsigned k = 0; k < 2; ++k)
        if (whole[k])
          whole[k]->emitRemark("train-tensor-parallel: the ")
              << kinds[k]
              << " blocks stay whole on every rank (this version splits "
                 "attention and MLPs)";
    }
  }
};

} // namespace
} // namespace train
} // namespace mlir
