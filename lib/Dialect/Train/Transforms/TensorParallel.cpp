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
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-tensor-parallel"

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
  /// Matmuls by a weight that stay whole on every rank: an attention's K
  /// and V projections when t is a multiple of their heads, not a divisor
  /// (each rank then takes its query heads' K/V head: `takeHeads`).
  SmallVector<MatmulOp> replicated;
  /// Their K/V heads.
  int64_t replicatedHeads = 0;
};

/// The heads of a column matmul's product: the second-to-last dimension
/// of the first reshape that splits its last dimension into [heads,
/// dim], through the single-use ops after it (a bias); 0 when none.
int64_t headsOf(MatmulOp matmul) {
  Value value = matmul.getResult();
  while (value.hasOneUse()) {
    Operation *user = *value.getUsers().begin();
    auto in = cast<RankedTensorType>(value.getType());
    if (auto reshape = dyn_cast<ReshapeOp>(user)) {
      auto out = cast<RankedTensorType>(reshape.getType());
      if (out.getRank() == in.getRank() + 1 &&
          out.getShape().drop_back(2) == in.getShape().drop_back() &&
          out.getDimSize(out.getRank() - 2) *
                  out.getDimSize(out.getRank() - 1) ==
              in.getDimSize(in.getRank() - 1))
        return out.getDimSize(out.getRank() - 2);
      return 0;
    }
    if (user->getNumResults() != 1 || user->getNumRegions() != 0)
      return 0;
    value = user->getResult(0);
  }
  return 0;
}

/// Whether `op`'s result types follow from its operands (re-inferred for a
/// rank's part), or it is a reshape (whose split dimension the pass finds).
bool isRetypable(Operation *op) {
  return op->getNumRegions() == 0 &&
         isa<InferTypeOpInterface, InferShapedTypeOpInterface, ReshapeOp>(op);
}

/// Why `op`, reading a split value, cannot run on a rank's part of it
/// (empty: it can).
std::string whyNotOnAPart(Operation *op) {
  // A rank's columns of a fused projection are not its parts' columns.
  if (isa<SliceOp>(op))
    return "slices a value split across the ranks (the parts of a fused "
           "projection, nanoGPT's c_attn): write the parts as separate "
           "projections";
  if (!isRetypable(op))
    return ("has an op between its matmuls whose result type does not "
            "follow from its operands ('" +
            op->getName().getStringRef() + "')")
        .str();
  return "";
}

class TensorParallel {
public:
  TensorParallel(func::FuncOp func, int64_t size, FlatSymbolRefAttr grid)
      : func(func), size(size), grid(grid) {}

  /// Splits an MLP or attention block: matmuls by columns, element-wise
  /// ops and views, a last matmul by rows.
  LogicalResult splitBlock(BlockOp block);

  /// The conjugate collectives the split blocks have: f (what enters a
  /// split part) and g (the sums of the rows' partial products).
  ArrayRef<Operation *> getEntries() const { return entries; }
  ArrayRef<Operation *> getSums() const { return sums; }

  /// Megatron's vocabulary parallelism: the token embeddings' tables split
  /// by rows, their partial lookups summed by g; the weight of the head
  /// whose product a cross-entropy reads split by the vocabulary (the
  /// table's rows again when tied), its input entering through f, and the
  /// cross-entropy computed on each rank's logits.
  LogicalResult splitVocabulary();
  /// The sums of the split embeddings' partial lookups.
  ArrayRef<Operation *> getLookupSums() const { return lookupSums; }
  /// Whether a split block replicates its K/V heads.
  bool replicatesHeads() const { return hasReplicatedHeads; }

private:
  FailureOr<BlockSplit> analyze(BlockOp block);
  /// A whole value that a split op reads, passed through f once.
  Value enter(Value value, Operation *user);
  /// Re-types a reshape of a split value: the dimension of its result that
  /// holds the split one's outermost part is split.
  LogicalResult reshapePart(ReshapeOp reshape, const BlockSplit &split);
  LogicalResult checkContraction(MatmulOp matmul, const BlockSplit &split);
  /// Whether `value` is computed from a replicated K/V projection.
  bool isReplicatedHeads(Value value, const BlockSplit &split) const;
  /// The rank's K/V head of `value`, [batch, kv, 1, seq, dim] whole on
  /// every rank: repeated t/kv times along its size-1 dimension, viewed as
  /// t heads and sliced over the group (the slice's gradient is gathered
  /// and the repeats summed back, so every rank holds the whole K/V
  /// gradient).
  FailureOr<Value> takeHeads(Value value, Operation *user,
                             const BlockSplit &split);
  /// Marks a dropout on a rank's part with its #train.split.
  void markDrawSplit(DropoutOp dropout, const BlockSplit &split);
  /// Makes argument `arg`, read by `users` alone, one rank's part along
  /// `dim`.
  LogicalResult splitParameter(BlockArgument arg, int64_t dim,
                               ArrayRef<Operation *> users);
  /// Replaces a cross-entropy on a rank's vocabulary part of the logits by
  /// the parallel one.
  void splitLoss(CrossEntropyOp loss);
  /// The cross-entropies with their heads (a matmul by a weight), and the
  /// lookups of the step's own ids; an error at a cross-entropy whose
  /// logits are not such a head's.
  LogicalResult findVocabularyUsers(
      SmallVectorImpl<std::pair<CrossEntropyOp, MatmulOp>> &heads,
      SmallVectorImpl<EmbeddingOp> &lookups);
  TensorSplitAttr splitAlong(int64_t dim) const {
    return TensorSplitAttr::get(grid.getContext(), dim, size, grid,
                                kTensorAxis);
  }
  LogicalResult reinfer(Operation *op);

  func::FuncOp func;
  int64_t size;
  FlatSymbolRefAttr grid;
  /// The arguments split so far (each once).
  llvm::DenseSet<BlockArgument> split;
  /// f of each whole value entering the split part of the current block.
  llvm::SmallMapVector<Value, Value, 4> entered;
  SmallVector<Operation *> entries, sums, lookupSums;
  bool hasReplicatedHeads = false;
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
  // The query heads: the most heads of a projection of the block.
  int64_t queryHeads = 0;
  if (block.getKind() == BlockKind::attention)
    block.walk([&](MatmulOp matmul) {
      queryHeads = std::max(queryHeads, headsOf(matmul));
    });
  for (Operation &op : block.getBody().front().without_terminator()) {
    bool readsSplit = llvm::any_of(op.getOperands(), isSplit);
    auto matmul = dyn_cast<MatmulOp>(&op);
    // By a weight [in, out], or [out, in] read transposed (PyTorch's
    // nn.Linear, as trainmem-import writes it).
    bool byParam = matmul && !matmul.getTransposeLhs() &&
                   paramArgument(matmul.getRhs(), func);
    if (byParam && !readsSplit) {
      if (mlp.row)
        return fail(&op) << "has a matmul by a weight after its last one "
                            "(not matmuls, element-wise ops, one matmul)";
      int64_t heads =
          block.getKind() == BlockKind::attention ? headsOf(matmul) : 0;
      // Fewer heads than the queries' (grouped-query K/V), which t splits.
      if (heads > 0 && heads < queryHeads && queryHeads % size == 0 &&
          heads % size != 0 && size % heads == 0) {
        // K/V heads a group of ranks shares: computed whole on each.
        mlp.replicated.push_back(matmul);
        mlp.replicatedHeads = heads;
        continue;
      }
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
    if (std::string why = whyNotOnAPart(&op); !why.empty())
      return fail(&op) << why;
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
                                             ArrayRef<Operation *> users) {
  auto type = cast<RankedTensorType>(arg.getType());
  auto name =
      func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kParamAttrName);
  Operation *user = users.front();
  for (Operation *other : arg.getUsers())
    if (!llvm::is_contained(users, other))
      return other->emitError("train-tensor-parallel: parameter '")
             << name.getValue() << "' is split for its block and read here too";
  if (!split.insert(arg).second)
    return user->emitError("train-tensor-parallel: parameter '")
           << name.getValue() << "' is split twice";
  LLVM_DEBUG(llvm::dbgs() << "train-tensor-parallel: parameter '"
                          << name.getValue() << "' " << type
                          << " split along dimension " << dim << " over "
                          << size << " ranks\n");
  if (type.getDimSize(dim) % size != 0)
    return user->emitError("train-tensor-parallel: ")
           << size << " ranks do not divide dimension " << dim << " ("
           << type.getDimSize(dim) << ") of '" << name.getValue() << "'";
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] /= size;
  arg.setType(RankedTensorType::get(shape, type.getElementType()));
  func.setArgAttr(arg.getArgNumber(), kTensorSplitAttrName, splitAlong(dim));
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
    auto f = GradAllReduceOp::create(builder, user->getLoc(), value,
                                     grid.getValue(), ArrayRef<int16_t>(axes));
    entries.push_back(f);
    it->second = f.getResult();
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
  for (int64_t d = input.getRank() - 1; d >= 0; --d)
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
  // Or across two: a rank's contiguous block of [kv, g] grouped-query
  // heads lies in one K/V group when t is a multiple of kv dividing kv·g.
  for (int64_t j = 0, e = out.size(); j + 1 < e; ++j)
    if (product(out.drop_front(j)) == product(in.drop_front(dim)) &&
        size % out[j] == 0 && out[j + 1] % (size / out[j]) == 0) {
      SmallVector<int64_t> shape(out);
      shape[j + 1] /= size / out[j];
      shape[j] = 1;
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
           << size
           << " must divide the heads, and divide the K/V heads or be a "
              "multiple of them)";
  return success();
}

bool TensorParallel::isReplicatedHeads(Value value,
                                       const BlockSplit &split) const {
  // Back through single-operand ops (views, rotary embedding, a bias).
  while (Operation *def = value.getDefiningOp()) {
    if (auto matmul = dyn_cast<MatmulOp>(def))
      return llvm::is_contained(split.replicated, matmul);
    if (def->getNumOperands() == 0)
      return false;
    value = def->getOperand(0);
  }
  return false;
}

FailureOr<Value> TensorParallel::takeHeads(Value value, Operation *user,
                                           const BlockSplit &split) {
  auto type = cast<RankedTensorType>(value.getType());
  int64_t kv = split.replicatedHeads;
  if (type.getRank() != 5 || type.getDimSize(1) != kv ||
      type.getDimSize(2) != 1)
    return user->emitError("train-tensor-parallel: cannot replicate the K/V "
                           "heads (")
           << size << " ranks share " << kv
           << "): their operand of this product is not [batch, " << kv
           << ", 1, seq, dim] but " << type;
  ArrayRef<int64_t> shape = type.getShape();
  Type element = type.getElementType();
  OpBuilder builder(user);
  Location loc = user->getLoc();
  auto repeated = BroadcastOp::create(
      builder, loc,
      RankedTensorType::get({shape[0], kv, size / kv, shape[3], shape[4]},
                            element),
      value);
  auto heads = ReshapeOp::create(
      builder, loc,
      RankedTensorType::get({shape[0], size, shape[3], shape[4]}, element),
      repeated);
  auto mine = shard::AllSliceOp::create(
      builder, loc,
      RankedTensorType::get({shape[0], 1, shape[3], shape[4]}, element), grid,
      DenseI16ArrayAttr::get(builder.getContext(), {kTensorAxis}),
      heads.getResult(), builder.getIndexAttr(1));
  return ReshapeOp::create(builder, loc,
                           RankedTensorType::get(
                               {shape[0], 1, 1, shape[3], shape[4]}, element),
                           mine.getResult())
      .getResult();
}

LogicalResult TensorParallel::splitBlock(BlockOp block) {
  FailureOr<BlockSplit> parts = analyze(block);
  if (failed(parts))
    return failure();
  LLVM_DEBUG(llvm::dbgs() << "train-tensor-parallel: "
                          << stringifyBlockKind(block.getKind()) << " block at "
                          << block.getLoc() << ": " << parts->columns.size()
                          << " column matmuls, " << parts->between.size()
                          << " ops between, " << parts->replicated.size()
                          << " replicated, one row matmul at "
                          << parts->row.getLoc() << "\n");
  entered.clear();
  llvm::DenseSet<Value> splitValues;
  for (auto &[value, type] : parts->wholeTypes)
    splitValues.insert(value);
  // f: each whole input of the column matmuls enters once.
  for (MatmulOp column : parts->columns) {
    column.getLhsMutable().assign(enter(column.getLhs(), column));
    // The output columns: dimension 1 of [in, out], 0 of [out, in].
    if (failed(splitParameter(cast<BlockArgument>(column.getRhs()),
                              column.getTransposeRhs() ? 0 : 1, {column})) ||
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
        if (failed(splitParameter(arg, 0, {op})))
          return failure();
        continue;
      }
      if (!isa<FloatType>(getElementTypeOrSelf(value.getType())))
        continue;
      if (!parts->replicated.empty() && isa<MatmulOp>(op) &&
          isReplicatedHeads(value, *parts)) {
        FailureOr<Value> mine = takeHeads(value, op, *parts);
        if (failed(mine))
          return failure();
        operand.set(*mine);
        continue;
      }
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
  if (!parts->replicated.empty())
    parts->replicated.front().emitRemark("train-tensor-parallel: the ")
        << stringifyBlockKind(block.getKind()) << " block of layer "
        << (block.getLayer() ? *block.getLayer() : -1)
        << " replicates its K/V heads (" << size << " ranks share "
        << parts->replicatedHeads
        << "): every rank computes them and takes its query heads' one";
  hasReplicatedHeads |= !parts->replicated.empty();
  // The rows: each rank's product is partial; g sums them.
  MatmulOp row = parts->row;
  if (failed(splitParameter(cast<BlockArgument>(row.getRhs()),
                            row.getTransposeRhs() ? 1 : 0, {row})))
    return failure();
  OpBuilder builder(row);
  builder.setInsertionPointAfter(row);
  SmallVector<int16_t> axes = {kTensorAxis};
  auto sum = shard::AllReduceOp::create(
      builder, row.getLoc(), row.getResult(), grid.getValue(),
      ArrayRef<shard::GridAxis>(axes), shard::ReductionKind::Sum);
  row.getResult().replaceAllUsesExcept(sum.getResult(), sum);
  sums.push_back(sum);
  return success();
}

LogicalResult TensorParallel::findVocabularyUsers(
    SmallVectorImpl<std::pair<CrossEntropyOp, MatmulOp>> &heads,
    SmallVectorImpl<EmbeddingOp> &lookups) {
  // The heads: matmuls by a weight whose product a cross-entropy reads.
  WalkResult walk = func.walk([&](Operation *op) {
    if (auto loss = dyn_cast<CrossEntropyOp>(op)) {
      if (loss.getLabelSmoothingAttr().getValueAsDouble() != 0.0) {
        loss.emitError("train-tensor-parallel: a label-smoothed "
                       "cross-entropy has no vocabulary-parallel form "
                       "(train.cross_entropy_part is the plain loss): "
                       "vocabulary-parallel=false keeps the head whole");
        return WalkResult::interrupt();
      }
      auto head = loss.getLogits().getDefiningOp<MatmulOp>();
      if (!head || head.getTransposeLhs() ||
          !paramArgument(head.getRhs(), func) ||
          !loss.getLogits().hasOneUse()) {
        loss.emitError("train-tensor-parallel: the cross-entropy's logits "
                       "are not the product of a matmul by a weight that it "
                       "alone reads; vocabulary parallelism splits that "
                       "weight (vocabulary-parallel=false keeps the head "
                       "whole)");
        return WalkResult::interrupt();
      }
      heads.push_back({loss, head});
    }
    // The token embeddings: lookups of the step's own ids.
    if (auto lookup = dyn_cast<EmbeddingOp>(op)) {
      auto ids = dyn_cast<BlockArgument>(lookup.getIds());
      if (ids && ids.getOwner() == &func.getBody().front())
        lookups.push_back(lookup);
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

LogicalResult TensorParallel::splitVocabulary() {
  SmallVector<std::pair<CrossEntropyOp, MatmulOp>> heads;
  SmallVector<EmbeddingOp> lookups;
  if (failed(findVocabularyUsers(heads, lookups)))
    return failure();
  // Each table or head weight, the dimension that is its vocabulary and
  // the ops that read it (a tied one: a lookup and a head).
  llvm::MapVector<BlockArgument, std::pair<int64_t, SmallVector<Operation *>>>
      weights;
  auto record = [&](Operation *user, Value value,
                    int64_t dim) -> LogicalResult {
    BlockArgument arg = paramArgument(value, func);
    if (!arg)
      return user->emitError("train-tensor-parallel: the token embedding's "
                             "table is not a parameter; vocabulary "
                             "parallelism splits it (vocabulary-parallel="
                             "false keeps it whole)");
    auto [it, inserted] = weights.try_emplace(
        arg, std::make_pair(dim, SmallVector<Operation *>()));
    if (it->second.first != dim)
      return user->emitError("train-tensor-parallel: a tied embedding and "
                             "head read their weight with the vocabulary "
                             "along different dimensions");
    it->second.second.push_back(user);
    return success();
  };
  for (auto [loss, head] : heads)
    if (failed(record(head, head.getRhs(), head.getTransposeRhs() ? 0 : 1)))
      return failure();
  for (EmbeddingOp lookup : lookups)
    if (failed(record(lookup, lookup.getTable(), 0)))
      return failure();
  for (auto &[arg, entry] : weights) {
    auto &[dim, users] = entry;
    int64_t vocabulary = cast<RankedTensorType>(arg.getType()).getDimSize(dim);
    if (vocabulary % size != 0)
      return users.front()->emitError("train-tensor-parallel: ")
             << size << " ranks do not divide the vocabulary (" << vocabulary
             << ") of '"
             << func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  kParamAttrName)
                    .getValue()
             << "' (pad it to a multiple of " << size
             << ", or vocabulary-parallel=false keeps it whole)";
    if (failed(splitParameter(arg, dim, users)))
      return failure();
  }
  // A lookup on a rank's rows: zeros for the others'; g sums them.
  SmallVector<int16_t> axes = {kTensorAxis};
  for (EmbeddingOp lookup : lookups) {
    lookup.setSplitAttr(splitAlong(0));
    OpBuilder builder(lookup);
    builder.setInsertionPointAfter(lookup);
    auto sum = shard::AllReduceOp::create(
        builder, lookup.getLoc(), lookup.getResult(), grid.getValue(),
        ArrayRef<shard::GridAxis>(axes), shard::ReductionKind::Sum);
    lookup.getResult().replaceAllUsesExcept(sum.getResult(), sum);
    lookupSums.push_back(sum);
  }
  // The head on a rank's columns; its input enters through f.
  for (auto [loss, head] : heads) {
    entered.clear();
    head.getLhsMutable().assign(enter(head.getLhs(), head));
    if (failed(reinfer(head)))
      return failure();
    splitLoss(loss);
  }
  return success();
}

void TensorParallel::splitLoss(CrossEntropyOp loss) {
  OpBuilder builder(loss);
  Location loc = loss.getLoc();
  Value logits = loss.getLogits(), targets = loss.getTargets();
  SmallVector<int16_t> axes = {kTensorAxis};
  auto overGroup = [&](Value value, shard::ReductionKind kind) {
    return shard::AllReduceOp::create(builder, loc, value, grid.getValue(),
                                      ArrayRef<shard::GridAxis>(axes), kind)
        .getResult();
  };
  // The rows' maxima over the whole vocabulary, each rank's sums of
  // exponentials and target logit, summed over the group.
  Value most = overGroup(RowMaxOp::create(builder, loc, logits).getResult(),
                         shard::ReductionKind::Max);
  int64_t vocabularyDim =
      cast<RankedTensorType>(logits.getType()).getRank() - 1;
  auto part = CrossEntropyPartOp::create(builder, loc, logits, targets, most,
                                         loss.getIgnoreIndexAttr(),
                                         splitAlong(vocabularyDim));
  Value sumExp = overGroup(part.getSumExp(), shard::ReductionKind::Sum);
  Value target = overGroup(part.getTargetLogit(), shard::ReductionKind::Sum);
  auto merge = CrossEntropyMergeOp::create(builder, loc, sumExp, target, most,
                                           targets, loss.getIgnoreIndexAttr());
  loss.replaceAllUsesWith(merge.getResults());
  loss.erase();
}

/// Megatron's sequence parallelism (Korthikanti et al. 2022, 4.2.2) on a
/// tensor-parallel forward: the residual stream between the split parts,
/// [batch, seq, hidden], is split along the sequence, each rank computing
/// its s/t positions of the ops there (norms, biases, dropout, the
/// residual adds, the head); a split part's input is all-gathered along
/// the sequence in place of f and its rows' partial products
/// reduce-scattered in place of g. What those ops read whole (a norm's
/// weights, a bias, the head's weight) enters through f: each rank's
/// gradient of it is its positions' part.
class SequenceParallel {
public:
  SequenceParallel(func::FuncOp func, int64_t size, FlatSymbolRefAttr grid,
                   const TensorParallel &parallel)
      : func(func), size(size), grid(grid), context(func.getContext()) {
    entries.insert(parallel.getEntries().begin(), parallel.getEntries().end());
    sums.insert(parallel.getSums().begin(), parallel.getSums().end());
    lookupSums.insert(parallel.getLookupSums().begin(),
                      parallel.getLookupSums().end());
  }

  LogicalResult run();

private:
  /// Splits the embedding block's result along the sequence.
  LogicalResult scatterEmbedding(BlockOp block);
  /// Reduce-scatters the vocabulary-parallel lookups' sum of the embedding
  /// block (whose result is `type`) and computes the position-wise ops
  /// after it on the piece; false, changing nothing, when the block has no
  /// such sum or computes its result otherwise.
  FailureOr<bool> scatterLookupSum(BlockOp block, RankedTensorType type);
  /// One op after the embedding, in order: f and g become the gather and
  /// the reduce-scatter; an op reading a piece of the sequence computes on
  /// it.
  LogicalResult rewrite(Operation *op);
  LogicalResult rewritePositionWise(Operation *op);
  LogicalResult rewriteLoss(CrossEntropyOp loss);
  /// A value every rank holds whole, read by an op on a piece of the
  /// sequence: a parameter enters through f.
  FailureOr<Value> enterWhole(Value value, Operation *user, bool matrix);
  /// `value`'s piece along the sequence (a slice of a whole input).
  Value slice(Value value, Operation *user);
  RankedTensorType pieceType(RankedTensorType whole) const;
  DenseI16ArrayAttr axes() const {
    return DenseI16ArrayAttr::get(context, {kTensorAxis});
  }
  IntegerAttr sequenceDim() const {
    return IntegerAttr::get(IndexType::get(context), kSequenceDim);
  }
  InFlightDiagnostic fail(Operation *op) {
    return op->emitError("train-tensor-parallel sequence-parallel=true: ");
  }

  static constexpr int64_t kSequenceDim = 1;
  func::FuncOp func;
  int64_t size;
  FlatSymbolRefAttr grid;
  MLIRContext *context;
  llvm::DenseSet<Operation *> entries, sums, lookupSums;
  /// The values split along the sequence.
  llvm::DenseSet<Value> pieces;
  /// f of each parameter read on a piece, and the piece of each input.
  llvm::DenseMap<Value, Value> entered, sliced;
};

RankedTensorType SequenceParallel::pieceType(RankedTensorType whole) const {
  SmallVector<int64_t> shape(whole.getShape());
  shape[kSequenceDim] /= size;
  return RankedTensorType::get(shape, whole.getElementType());
}

LogicalResult SequenceParallel::scatterEmbedding(BlockOp block) {
  auto yield = cast<YieldOp>(block.getBody().front().getTerminator());
  if (yield.getNumOperands() != 1)
    return fail(block) << "the embedding block yields "
                       << yield.getNumOperands()
                       << " values; one [batch, seq, hidden] is split";
  Value whole = yield.getOperand(0);
  auto type = dyn_cast<RankedTensorType>(whole.getType());
  if (!type || type.getRank() != 3 || !type.hasStaticShape())
    return fail(block) << "the embedding block's result is not a static "
                          "[batch, seq, hidden] tensor";
  if (type.getDimSize(kSequenceDim) % size != 0)
    return fail(block) << size << " ranks do not divide the sequence ("
                       << type.getDimSize(kSequenceDim) << ")";
  FailureOr<bool> scattered = scatterLookupSum(block, type);
  if (failed(scattered))
    return failure();
  if (!*scattered) {
    OpBuilder builder(yield);
    auto piece =
        shard::AllSliceOp::create(builder, yield.getLoc(), pieceType(type),
                                  grid, axes(), whole, sequenceDim());
    yield->setOperand(0, piece.getResult());
  }
  block.getResult(0).setType(yield.getOperand(0).getType());
  pieces.insert(block.getResult(0));
  return success();
}

FailureOr<bool> SequenceParallel::scatterLookupSum(BlockOp block,
                                                   RankedTensorType type) {
  Block &body = block.getBody().front();
  auto sum = llvm::find_if(
      body, [&](Operation &op) { return lookupSums.contains(&op); });
  if (sum == body.end())
    return false;
  // The ops the result is computed by from the sum, on [batch, seq,
  // hidden]: position-wise, each other operand a parameter or a whole
  // activation broadcast along the batch (a GPT's position embeddings).
  llvm::SetVector<Operation *> after;
  llvm::DenseSet<Value> derived = {sum->getResult(0)};
  for (Operation &op : llvm::make_range(std::next(sum), body.end())) {
    bool reads = llvm::any_of(op.getOperands(),
                              [&](Value v) { return derived.contains(v); });
    if (!reads || isa<YieldOp>(op))
      continue;
    if (!op.hasTrait<PositionWise>() ||
        llvm::any_of(op.getResultTypes(), [&](Type t) {
          auto ranked = dyn_cast<RankedTensorType>(t);
          return ranked && isa<FloatType>(ranked.getElementType()) &&
                 ranked.getShape() != type.getShape();
        }))
      return false;
    after.insert(&op);
    for (Value result : op.getResults())
      derived.insert(result);
  }
  Value yielded = body.getTerminator()->getOperand(0);
  if (!derived.contains(yielded) || llvm::any_of(derived, [&](Value v) {
        return llvm::any_of(v.getUsers(), [&](Operation *user) {
          return !after.contains(user) && !isa<YieldOp>(user);
        });
      }))
    return false;
  // Megatron's reduce-scatter of the embedding: each rank's positions of
  // the lookups' sum, the ops after it on them.
  OpBuilder builder(&*sum);
  auto scattered = shard::ReduceScatterOp::create(
      builder, sum->getLoc(), pieceType(type), grid, axes(), sum->getOperand(0),
      shard::ReductionKindAttr::get(context, shard::ReductionKind::Sum),
      sequenceDim());
  sum->getResult(0).replaceAllUsesWith(scattered.getResult());
  sum->erase();
  pieces.insert(scattered.getResult());
  for (Operation *op : after) {
    for (OpOperand &operand : op->getOpOperands()) {
      auto whole = dyn_cast<RankedTensorType>(operand.get().getType());
      if (pieces.contains(operand.get()) || !whole ||
          paramArgument(operand.get(), func) || whole.getRank() < 2)
        continue;
      // Its sequence dimension, aligned with the piece's from the right.
      int64_t dim = kSequenceDim - (type.getRank() - whole.getRank());
      if (dim < 0 || whole.getDimSize(dim) != type.getDimSize(kSequenceDim))
        continue;
      SmallVector<int64_t> shape(whole.getShape());
      shape[dim] /= size;
      OpBuilder at(op);
      Value piece = shard::AllSliceOp::create(
          at, op->getLoc(),
          RankedTensorType::get(shape, whole.getElementType()), grid, axes(),
          operand.get(), IntegerAttr::get(IndexType::get(context), dim));
      operand.set(piece);
      pieces.insert(piece);
    }
    if (failed(rewritePositionWise(op)))
      return failure();
  }
  return true;
}

Value SequenceParallel::slice(Value value, Operation *user) {
  Value &piece = sliced[value];
  if (!piece) {
    OpBuilder builder(context);
    builder.setInsertionPointAfterValue(value);
    piece = shard::AllSliceOp::create(
        builder, user->getLoc(),
        pieceType(cast<RankedTensorType>(value.getType())), grid, axes(), value,
        sequenceDim());
  }
  return piece;
}

FailureOr<Value> SequenceParallel::enterWhole(Value value, Operation *user,
                                              bool matrix) {
  auto type = cast<RankedTensorType>(value.getType());
  BlockArgument arg = paramArgument(value, func);
  if (!arg || type.getRank() > (matrix ? 2 : 1))
    return fail(user) << "reads a value every rank holds whole (not a "
                         "parameter broadcast along the positions) with a "
                         "piece of the sequence";
  Value &f = entered[value];
  if (!f) {
    OpBuilder builder(context);
    builder.setInsertionPointToStart(&func.getBody().front());
    SmallVector<int16_t> gridAxes = {kTensorAxis};
    f = GradAllReduceOp::create(builder, value.getLoc(), value, grid.getValue(),
                                ArrayRef<int16_t>(gridAxes));
  }
  return f;
}

LogicalResult SequenceParallel::rewritePositionWise(Operation *op) {
  auto matmul = dyn_cast<MatmulOp>(op);
  for (OpOperand &operand : op->getOpOperands()) {
    Value value = operand.get();
    if (pieces.contains(value) || !isa<RankedTensorType>(value.getType()) ||
        !isa<FloatType>(getElementTypeOrSelf(value.getType())))
      continue;
    bool rhs = matmul && operand.getOperandNumber() == 1;
    FailureOr<Value> whole = enterWhole(value, op, rhs);
    if (failed(whole))
      return failure();
    operand.set(*whole);
  }
  SmallVector<Type> types;
  if (failed(inferResultTypes(op, types)))
    return fail(op) << "cannot re-type it for a piece of the sequence";
  for (auto [result, type] : llvm::zip(op->getResults(), types)) {
    result.setType(type);
    pieces.insert(result);
  }
  // A dropout on a piece draws its piece of the whole tensor's mask.
  if (auto dropout = dyn_cast<DropoutOp>(op))
    dropout.setSplitAttr(
        TensorSplitAttr::get(context, kSequenceDim, size, grid, kTensorAxis));
  return success();
}

LogicalResult SequenceParallel::rewriteLoss(CrossEntropyOp loss) {
  if (!pieces.contains(loss.getLogits()))
    return success();
  // Each rank's positions' loss and count, summed over the group (g: the
  // identity backward, every rank's loss being the whole loss).
  loss.getTargetsMutable().assign(slice(loss.getTargets(), loss));
  OpBuilder builder(context);
  builder.setInsertionPointAfter(loss);
  for (Value result : loss.getResults()) {
    auto sum = shard::AllReduceOp::create(
        builder, loss.getLoc(), result, grid.getValue(),
        ArrayRef<shard::GridAxis>{kTensorAxis}, shard::ReductionKind::Sum);
    result.replaceAllUsesExcept(sum.getResult(), sum);
  }
  return success();
}

LogicalResult SequenceParallel::rewrite(Operation *op) {
  if (entries.contains(op)) {
    // f of a piece: the whole sequence gathered (its gradient
    // reduce-scattered) for the split part.
    Value input = op->getOperand(0);
    if (!pieces.contains(input))
      return success();
    OpBuilder builder(op);
    auto gathered = shard::AllGatherOp::create(builder, op->getLoc(),
                                               op->getResult(0).getType(), grid,
                                               axes(), input, sequenceDim());
    op->getResult(0).replaceAllUsesWith(gathered.getResult());
    op->erase();
    return success();
  }
  if (sums.contains(op)) {
    // g: each rank's positions of the sum (their gradient gathered).
    auto sum = cast<shard::AllReduceOp>(op);
    auto whole = cast<RankedTensorType>(sum.getType());
    if (whole.getRank() != 3 || whole.getDimSize(kSequenceDim) % size != 0)
      return fail(op) << size << " ranks do not divide the sequence of "
                      << whole;
    OpBuilder builder(op);
    auto scattered = shard::ReduceScatterOp::create(
        builder, op->getLoc(), pieceType(whole), grid, axes(), sum.getInput(),
        shard::ReductionKindAttr::get(context, shard::ReductionKind::Sum),
        sequenceDim());
    sum.getResult().replaceAllUsesWith(scattered.getResult());
    sum.erase();
    pieces.insert(scattered.getResult());
    return success();
  }
  if (auto block = dyn_cast<BlockOp>(op)) {
    for (Operation &inner : llvm::make_early_inc_range(
             block.getBody().front().without_terminator()))
      if (failed(rewrite(&inner)))
        return failure();
    auto yield = cast<YieldOp>(block.getBody().front().getTerminator());
    for (auto [result, value] :
         llvm::zip(block.getResults(), yield.getOperands()))
      if (pieces.contains(value)) {
        result.setType(value.getType());
        pieces.insert(result);
      }
    return success();
  }
  if (auto loss = dyn_cast<CrossEntropyOp>(op))
    return rewriteLoss(loss);
  if (!llvm::any_of(op->getOperands(),
                    [&](Value v) { return pieces.contains(v); }))
    return success();
  auto matmul = dyn_cast<MatmulOp>(op);
  bool byWeight = matmul && !matmul.getTransposeLhs() &&
                  pieces.contains(matmul.getLhs()) &&
                  !pieces.contains(matmul.getRhs());
  if (!op->hasTrait<PositionWise>() && !byWeight)
    return fail(op) << "'" << op->getName()
                    << "' reads a piece of the sequence and is not "
                       "position-wise (a norm, an element-wise op, dropout, "
                       "a matmul by a weight)";
  return rewritePositionWise(op);
}

LogicalResult SequenceParallel::run() {
  Block &body = func.getBody().front();
  auto embedding = llvm::find_if(body, [](Operation &op) {
    auto block = dyn_cast<BlockOp>(&op);
    return block && block.getKind() == BlockKind::embedding;
  });
  if (embedding == body.end())
    return func.emitError("train-tensor-parallel sequence-parallel=true: @")
           << func.getSymName()
           << " has no embedding block (its result is what the sequence "
              "splits from)";
  if (failed(scatterEmbedding(cast<BlockOp>(*embedding))))
    return failure();
  for (Operation &op : llvm::make_early_inc_range(llvm::make_range(
           std::next(embedding), Block::iterator(body.getTerminator()))))
    if (failed(rewrite(&op)))
      return failure();
  // The loss is whole again; nothing split may leave the function.
  for (Value result : body.getTerminator()->getOperands())
    if (pieces.contains(result))
      return fail(body.getTerminator())
             << "returns a piece of the sequence (the loss must be summed "
                "over the group)";
  return success();
}

struct TrainTensorParallelPass
    : public impl::TrainTensorParallelPassBase<TrainTensorParallelPass> {
  using Base::Base;

  /// Splits one forward's blocks, its vocabulary and (with sequence
  /// parallelism) its sequence.
  LogicalResult splitForward(func::FuncOp func, FlatSymbolRefAttr grid) {
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
    if (walk.wasInterrupted() ||
        (vocabularyParallel && failed(parallel.splitVocabulary())))
      return failure();
    if (sequenceParallel && parallel.replicatesHeads())
      return func.emitError("train-tensor-parallel: replicated K/V heads (")
             << static_cast<int64_t>(size)
             << " ranks sharing each) with sequence-parallel=true: the K/V "
                "projections would read the gathered input, whose gradient "
                "the group sums (use a size that divides the K/V heads, or "
                "sequence-parallel=false)";
    if (sequenceParallel &&
        failed(SequenceParallel(func, size, grid, parallel).run()))
      return failure();
    func.setType(FunctionType::get(func.getContext(),
                                   func.getBody().getArgumentTypes(),
                                   func.getResultTypes()));
    const char *kinds[2] = {"embedding", "head"};
    for (unsigned k = 0; k < 2 && !vocabularyParallel; ++k)
      if (whole[k])
        whole[k]->emitRemark("train-tensor-parallel: the ")
            << kinds[k]
            << " blocks' weights stay whole on every rank "
               "(vocabulary-parallel=false)";
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (size < 1 || data < 1) {
      module.emitError("train-tensor-parallel: size and data must be at "
                       "least 1, got size=")
          << static_cast<int64_t>(size)
          << " data=" << static_cast<int64_t>(data);
      return signalPassFailure();
    }
    FailureOr<SmallVector<func::FuncOp>> found =
        lookupForwards(module, getArgument());
    if (failed(found))
      return signalPassFailure();
    SmallVector<func::FuncOp> forwards = std::move(*found);
    if (size == 1)
      return;
    // ALiBi's slopes are per head of the whole attention; a rank's heads
    // would need theirs, which no split of the attribute says.
    for (func::FuncOp func : forwards) {
      WalkResult alibi = func.walk([](Operation *op) {
        if (!op->hasAttr("alibi_slopes") ||
            !isa<SoftmaxOp, AttentionOp>(op))
          return WalkResult::advance();
        op->emitError("train-tensor-parallel: an ALiBi attention "
                      "(alibi_slopes) is not split over ranks: a rank's "
                      "heads would need their slopes; train it with "
                      "size=1 (data parallelism, train-zero)");
        return WalkResult::interrupt();
      });
      if (alibi.wasInterrupted())
        return signalPassFailure();
    }
    OpBuilder builder(module.getBodyRegion());
    builder.setInsertionPointToStart(module.getBody());
    auto gridOp = shard::GridOp::create(builder, module.getLoc(), "tp",
                                        ArrayRef<int64_t>{data, size});
    SymbolTable symbols(module);
    symbols.insert(gridOp); // renames it when "tp" is taken
    auto grid = FlatSymbolRefAttr::get(gridOp.getSymNameAttr());
    for (func::FuncOp func : forwards)
      if (failed(splitForward(func, grid)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace train
} // namespace mlir
