//===- ContextParallel.cpp - train-context-parallel
//------------------------===//
//
// Context parallelism on the forward pass: each rank of a context group
// holds its rows of every sequence (a contiguous piece, or two chunks
// balanced for the causal mask), computes the position-wise ops on them,
// and attends with its queries over the group's keys and values, gathered
// along the sequence (their gradients reduce-scattered back). The loss's
// sum and token count are summed over the group; each parameter enters
// through f (train.grad_all_reduce), so its gradient is the group's sum.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-context-parallel"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINCONTEXTPARALLELPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

/// The pass's grid is (data, context), its data axis train-zero's (grown
/// from 1 by train-zero{ranks=d}); on a tensor-parallel forward, the
/// tensor-parallel grid grows a last axis: (data, tensor, context).

/// Rewrites one forward for a rank of a context group.
class ContextParallel {
public:
  ContextParallel(func::FuncOp func, ContextSplitAttr split, bool ring)
      : func(func), split(split), ring(ring), context(func.getContext()) {}

  LogicalResult run();

private:
  LogicalResult sliceInputs();
  LogicalResult rewrite(Operation *op);
  LogicalResult rewriteBlock(BlockOp block);
  LogicalResult rewriteAttention(AttentionOp attention);
  LogicalResult rewriteReshape(ReshapeOp reshape);
  LogicalResult rewriteLoss(LossOpInterface loss);
  /// Re-types `op` for its operands' pieces; each result a piece along
  /// `dim` (its rank's sequence dimension), or aligned from the right with
  /// the piece `from` when `dim` is negative.
  LogicalResult retype(Operation *op, int64_t dim, Value from = {});
  /// A whole value read with pieces: a parameter enters through f.
  LogicalResult enterWhole(OpOperand &operand);
  /// `value` (a piece along `dim`, rank-4 [b, heads, s, d]) gathered along
  /// the sequence, before the transpose that makes it when there is one
  /// (the runtime gathers contiguous buffers).
  Value gather(Value value, Operation *user);
  /// Rows `dim` of a whole id tensor: this rank's.
  Value slice(Value ids, int64_t dim, Location loc);
  InFlightDiagnostic fail(Operation *op) {
    return op->emitError("train-context-parallel: ");
  }
  int64_t parts() const { return split.getParts(); }
  int16_t axis() const { return static_cast<int16_t>(split.getAxis()); }
  /// What a balanced cut of the sequence needs: 2 · parts chunks (named
  /// without the product when it is not a count).
  std::string balancedHint() const {
    int64_t chunks = 0;
    if (llvm::MulOverflow(parts(), int64_t(2), chunks))
      return llvm::formatv(" into 2 x {0} chunks (or load-balance=false)",
                           parts());
    return llvm::formatv(" into 2 x {0} = {1} chunks (give a sequence "
                         "divisible by {1}, or load-balance=false)",
                         parts(), chunks);
  }
  bool isPiece(Value value) const { return pieces.contains(value); }
  RankedTensorType cutType(RankedTensorType whole, int64_t dim) const {
    SmallVector<int64_t> shape(whole.getShape());
    shape[dim] /= parts();
    return RankedTensorType::get(shape, whole.getElementType());
  }

  func::FuncOp func;
  ContextSplitAttr split;
  /// The attention passes its keys and values around the group's ring
  /// (train.attention `ring`) instead of reading them gathered.
  bool ring;
  MLIRContext *context;
  /// The whole sequence's length (the tokens' second dimension).
  int64_t sequence = 0;
  /// Each piece's sequence dimension.
  llvm::DenseMap<Value, int64_t> pieces;
  /// f of each parameter read with a piece.
  llvm::DenseMap<Value, Value> entered;
};

Value ContextParallel::slice(Value ids, int64_t dim, Location loc) {
  OpBuilder builder(context);
  builder.setInsertionPointAfterValue(ids);
  auto sliced = ContextSliceOp::create(
      builder, loc, cutType(cast<RankedTensorType>(ids.getType()), dim), ids,
      builder.getI64IntegerAttr(dim), split);
  pieces[sliced.getResult()] = dim;
  return sliced.getResult();
}

LogicalResult ContextParallel::sliceInputs() {
  for (BlockArgument arg : func.getArguments()) {
    auto input =
        func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kInputAttrName);
    if (!input || arg.use_empty())
      continue;
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || type.getRank() != 2 || !type.hasStaticShape())
      return func.emitError("train-context-parallel: input '")
             << input.getValue() << "' is not a static [batch, sequence] "
             << "tensor of ids, got " << arg.getType();
    int64_t rows = type.getDimSize(1);
    if (sequence != 0 && rows != sequence)
      return func.emitError("train-context-parallel: inputs of ")
             << sequence << " and " << rows << " positions";
    sequence = rows;
    if (split.rowsOf(rows) == 0)
      return func.emitError("train-context-parallel: ")
             << parts() << " ranks do not divide the sequence (" << rows
             << " positions)"
             << (split.isBalanced() ? balancedHint() : std::string());
    Value piece = slice(arg, 1, arg.getLoc());
    arg.replaceAllUsesExcept(piece, piece.getDefiningOp());
  }
  if (sequence == 0)
    return func.emitError("train-context-parallel: @")
           << func.getSymName()
           << " has no token inputs (train.input) to cut along the sequence";
  return success();
}

LogicalResult ContextParallel::enterWhole(OpOperand &operand) {
  Value value = operand.get();
  if (isPiece(value) || !isa<RankedTensorType>(value.getType()) ||
      !isa<FloatType>(getElementTypeOrSelf(value.getType())))
    return success();
  auto arg = dyn_cast<BlockArgument>(value);
  if (!arg || arg.getOwner() != &func.getBody().front() ||
      !func.getArgAttr(arg.getArgNumber(), kParamAttrName))
    return fail(operand.getOwner())
           << "reads a value every rank holds whole (not a parameter) with "
              "a rank's positions of the sequence";
  Value &f = entered[value];
  if (!f) {
    OpBuilder builder(context);
    builder.setInsertionPointToStart(&func.getBody().front());
    SmallVector<int16_t> axes = {axis()};
    f = GradAllReduceOp::create(builder, value.getLoc(), value,
                                split.getGrid().getValue(),
                                ArrayRef<int16_t>(axes));
  }
  operand.set(f);
  return success();
}

LogicalResult ContextParallel::retype(Operation *op, int64_t dim, Value from) {
  for (OpOperand &operand : op->getOpOperands())
    if (failed(enterWhole(operand)))
      return failure();
  SmallVector<Type> types;
  if (failed(inferResultTypes(op, types)))
    return fail(op) << "cannot re-type '" << op->getName()
                    << "' for a rank's positions";
  for (auto [result, type] : llvm::zip(op->getResults(), types)) {
    result.setType(type);
    auto ranked = dyn_cast<RankedTensorType>(type);
    if (!ranked || ranked.getRank() == 0)
      continue;
    int64_t at = dim;
    if (at < 0) {
      // Aligned from the right with the piece it is computed from.
      auto source = cast<RankedTensorType>(from.getType());
      at = pieces.lookup(from) + (ranked.getRank() - source.getRank());
      if (at < 0 || at >= ranked.getRank())
        return fail(op) << "cannot place the sequence in its result " << ranked;
    }
    pieces[result] = at;
  }
  return success();
}

Value ContextParallel::gather(Value value, Operation *user) {
  OpBuilder builder(user);
  // A piece's rows of the whole group, along its sequence dimension.
  auto gatherAll = [&](Value piece) -> Value {
    int64_t dim = pieces.lookup(piece);
    auto type = cast<RankedTensorType>(piece.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] *= parts();
    return shard::AllGatherOp::create(
        builder, user->getLoc(),
        RankedTensorType::get(shape, type.getElementType()), split.getGrid(),
        DenseI16ArrayAttr::get(context, {axis()}), piece,
        IntegerAttr::get(IndexType::get(context), dim));
  };
  // A view of heads ([b, s, h, d] transposed) is gathered before the
  // transpose, which the runtime cannot gather through.
  if (auto transpose = value.getDefiningOp<TransposeOp>();
      transpose && isPiece(transpose.getInput()))
    return TransposeOp::create(builder, transpose.getLoc(),
                               gatherAll(transpose.getInput()),
                               transpose.getPermutationAttr());
  return gatherAll(value);
}

LogicalResult ContextParallel::rewriteAttention(AttentionOp attention) {
  for (Value operand : {attention.getQ(), attention.getK(), attention.getV()})
    if (!isPiece(operand) || pieces.lookup(operand) != 2)
      return fail(attention)
             << "q, k and v must each be a rank's positions [batch, heads, "
                "positions, dim] (keys every rank holds whole are not cut "
                "by the pass)";
  if (attention.getAlibiSlopes())
    return fail(attention)
           << "an ALiBi attention (alibi_slopes) is not cut along the "
              "sequence: train it with size=1";
  if (!attention.getCausal() && split.isBalanced())
    return fail(attention)
           << "balanced chunks serve a causal mask; this attention is not "
              "causal (use load-balance=false)";
  if (ring) {
    // The rank's own keys and values, passed around inside the op.
    attention.setRing(true);
  } else {
    Value oldKeys = attention.getK(), oldValues = attention.getV();
    attention.getKMutable().assign(gather(oldKeys, attention));
    attention.getVMutable().assign(gather(oldValues, attention));
    for (Value old : {oldKeys, oldValues})
      if (Operation *view = old.getDefiningOp();
          view && isa<TransposeOp>(view) && view->use_empty()) {
        pieces.erase(old);
        view->erase();
      }
  }
  attention.setContextParallelAttr(split);
  // The results are the rank's queries' rows.
  SmallVector<Type> types;
  if (failed(inferResultTypes(attention, types)))
    return fail(attention) << "cannot re-type it for a rank's queries";
  for (auto [result, type] : llvm::zip(attention->getResults(), types))
    result.setType(type);
  pieces[attention.getOutput()] = attention.getTransposeOutput() ? 1 : 2;
  pieces[attention.getLse()] = 2;
  return success();
}

LogicalResult ContextParallel::rewriteReshape(ReshapeOp reshape) {
  Value input = reshape.getInput();
  auto in = cast<RankedTensorType>(input.getType());
  auto out = reshape.getResult().getType();
  int64_t dim = pieces.lookup(input);
  // The dimensions before the sequence's keep their extents, and the
  // sequence stays one dimension of the result.
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= in.getDimSize(d);
  int64_t at = -1, product = 1;
  for (int64_t e = 0; e < out.getRank() && product <= outer; ++e) {
    if (product == outer && out.getDimSize(e) == in.getDimSize(dim) * parts())
      at = e;
    product *= out.getDimSize(e);
  }
  if (at < 0)
    return fail(reshape) << "reshapes the sequence dimension (" << in << " -> "
                         << out << "): a rank's positions would not stay rows";
  reshape.getResult().setType(cutType(out, at));
  pieces[reshape.getResult()] = at;
  return success();
}

LogicalResult ContextParallel::rewriteLoss(LossOpInterface loss) {
  if (!isPiece(loss.getTargets()))
    return fail(loss) << "its targets are not the step's (train.input) "
                         "targets, which the pass cuts";
  if (failed(retype(loss, 0)))
    return failure();
  // Each rank's positions' loss and count, summed over the group (the
  // identity backward: every rank's loss is the whole loss).
  OpBuilder builder(context);
  builder.setInsertionPointAfter(loss);
  for (Value result : loss->getResults()) {
    pieces.erase(result);
    auto sum = shard::AllReduceOp::create(
        builder, loss.getLoc(), result, split.getGrid().getValue(),
        ArrayRef<shard::GridAxis>{axis()}, shard::ReductionKind::Sum);
    result.replaceAllUsesExcept(sum.getResult(), sum);
  }
  return success();
}

LogicalResult ContextParallel::rewriteBlock(BlockOp block) {
  for (Operation &inner :
       llvm::make_early_inc_range(block.getBody().front().without_terminator()))
    if (failed(rewrite(&inner)))
      return failure();
  auto yield = cast<YieldOp>(block.getBody().front().getTerminator());
  for (auto [result, value] :
       llvm::zip(block.getResults(), yield.getOperands())) {
    result.setType(value.getType());
    if (isPiece(value))
      pieces[result] = pieces.lookup(value);
  }
  return success();
}

LogicalResult ContextParallel::rewrite(Operation *op) {
  if (auto block = dyn_cast<BlockOp>(op))
    return rewriteBlock(block);
  // Positions of the whole sequence (a GPT's position ids): this rank's.
  if (auto iota = dyn_cast<IotaOp>(op)) {
    if (iota.getType().getDimSize(0) != sequence)
      return success();
    Value piece = slice(iota.getResult(), 0, iota.getLoc());
    iota.getResult().replaceAllUsesExcept(piece, piece.getDefiningOp());
    return success();
  }
  if (isa<ContextSliceOp>(op) ||
      llvm::none_of(op->getOperands(), [&](Value v) { return isPiece(v); }))
    return success();
  if (auto attention = dyn_cast<AttentionOp>(op))
    return rewriteAttention(attention);
  if (auto loss = dyn_cast<LossOpInterface>(op))
    return rewriteLoss(loss);
  // A tensor-parallel forward's collectives on a rank's positions (f, g,
  // the parallel cross-entropy's sums and maxima): the same rows.
  if (isa<GradAllReduceOp, shard::AllReduceOp>(op)) {
    Value input = op->getOperand(0);
    op->getResult(0).setType(input.getType());
    pieces[op->getResult(0)] = pieces.lookup(input);
    return success();
  }
  if (isa<RowMaxOp>(op))
    return retype(op, pieces.lookup(op->getOperand(0)));
  if (auto part = dyn_cast<CrossEntropyPartOp>(op)) {
    if (!isPiece(part.getTargets()))
      return fail(op) << "its targets are not the step's, which the pass "
                         "cuts";
    return retype(op, pieces.lookup(part.getTargets()));
  }
  if (auto reshape = dyn_cast<ReshapeOp>(op))
    return rewriteReshape(reshape);
  if (auto transpose = dyn_cast<TransposeOp>(op)) {
    int64_t dim = pieces.lookup(transpose.getInput());
    ArrayRef<int64_t> permutation = transpose.getPermutation();
    int64_t at = llvm::find(permutation, dim) - permutation.begin();
    return retype(op, at);
  }
  // A fused projection's parts (nanoGPT's and GPT-2's c_attn): each
  // position's columns.
  if (auto part = dyn_cast<SliceOp>(op)) {
    int64_t dim = pieces.lookup(part.getInput());
    if (part.getDim() == dim)
      return fail(op) << "slices the sequence dimension (a shift of the "
                         "labels, say), which a rank holds only part of";
    return retype(op, dim);
  }
  // K/V heads repeated for grouped queries (Falcon's multi-query
  // attention): along the heads, each position's.
  if (auto repeat = dyn_cast<BroadcastOp>(op)) {
    int64_t dim = pieces.lookup(repeat.getInput());
    RankedTensorType in = repeat.getInput().getType(),
                     out = repeat.getResult().getType();
    if (out.getRank() != in.getRank() ||
        out.getDimSize(dim) != in.getDimSize(dim) * parts())
      return fail(op) << "repeats along the sequence dimension";
    repeat.getResult().setType(cutType(out, dim));
    pieces[repeat.getResult()] = dim;
    return success();
  }
  if (auto rope = dyn_cast<RopeOp>(op)) {
    auto type = rope.getInput().getType();
    if (pieces.lookup(rope.getInput()) != type.getRank() - 2)
      return fail(op) << "rotates along a dimension other than the "
                         "sequence's";
    rope.setContextParallelAttr(split);
    return retype(op, type.getRank() - 2);
  }
  if (auto embedding = dyn_cast<EmbeddingOp>(op))
    return retype(op, pieces.lookup(embedding.getIds()));
  if (auto matmul = dyn_cast<MatmulOp>(op)) {
    if (isPiece(matmul.getRhs()) || matmul.getTransposeLhs() ||
        pieces.lookup(matmul.getLhs()) >=
            cast<RankedTensorType>(matmul.getLhs().getType()).getRank() - 1)
      return fail(op) << "a product over the sequence (an attention's "
                         "scores?): fuse the attention first "
                         "(train-fuse-attention; train-step "
                         "fuse-attention=true), which the pass cuts; where "
                         "it ran, -debug-only=train-fuse-attention says why "
                         "it did not match";
    return retype(op, -1, matmul.getLhs());
  }
  if (auto dropout = dyn_cast<DropoutOp>(op)) {
    // A rank's positions draw their part of the whole tensor's mask.
    Value input = dropout.getInput();
    if (failed(retype(op, -1, input)))
      return failure();
    dropout.setSplitAttr(TensorSplitAttr::get(context, pieces.lookup(input),
                                              parts(), split.getGrid(), axis(),
                                              split.getOrder()));
    return success();
  }
  if (op->hasTrait<PositionWise>()) {
    Value from =
        *llvm::find_if(op->getOperands(), [&](Value v) { return isPiece(v); });
    for (Value operand : op->getOperands())
      if (isPiece(operand) && operand != from &&
          cast<RankedTensorType>(operand.getType()).getRank() -
                  pieces.lookup(operand) !=
              cast<RankedTensorType>(from.getType()).getRank() -
                  pieces.lookup(from))
        return fail(op) << "its operands' sequence dimensions do not align";
    return retype(op, -1, from);
  }
  return fail(op) << "'" << op->getName()
                  << "' reads a rank's positions of the sequence and is not "
                     "position-wise (a norm, an element-wise op, dropout, a "
                     "matmul by a weight, a view) nor a fused attention";
}

LogicalResult ContextParallel::run() {
  if (failed(sliceInputs()))
    return failure();
  Block &body = func.getBody().front();
  for (Operation &op : llvm::make_early_inc_range(llvm::make_range(
           body.begin(), Block::iterator(body.getTerminator()))))
    if (failed(rewrite(&op)))
      return failure();
  for (Value result : body.getTerminator()->getOperands())
    if (isPiece(result))
      return fail(body.getTerminator())
             << "returns a rank's positions of the sequence (the loss must "
                "be summed over the group)";
  func.setType(FunctionType::get(context, body.getArgumentTypes(),
                                 func.getResultTypes()));
  return success();
}

struct TrainContextParallelPass
    : public impl::TrainContextParallelPassBase<TrainContextParallelPass> {
  using Base::Base;

  /// The grid and axis of the context group: a last axis grown on a
  /// tensor-parallel forward's (data, tensor) grid, or a (data, context)
  /// grid of the pass's own.
  FailureOr<std::pair<FlatSymbolRefAttr, int64_t>>
  contextGrid(ModuleOp module, ArrayRef<func::FuncOp> forwards) {
    for (func::FuncOp func : forwards) {
      TensorSplitAttr tensor;
      for (unsigned i = 0; i < func.getNumArguments() && !tensor; ++i)
        tensor =
            func.getArgAttrOfType<TensorSplitAttr>(i, kTensorSplitAttrName);
      if (!tensor)
        continue;
      WalkResult sequence = func.walk([](Operation *op) {
        return isa<shard::AllGatherOp, shard::ReduceScatterOp,
                   shard::AllSliceOp>(op)
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      });
      if (sequence.wasInterrupted())
        return func.emitError("train-context-parallel: @")
               << func.getSymName()
               << " is split along the sequence already "
                  "(train-tensor-parallel sequence-parallel=true); cut it "
                  "over a context group with sequence-parallel=false";
      auto gridOp = SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(
          func, tensor.getGrid());
      if (!gridOp || gridOp.getShape().size() != 2 || tensor.getAxis() != 1)
        return func.emitError("train-context-parallel: @")
               << func.getSymName() << " is split on " << tensor.getGrid()
               << ", which is not train-tensor-parallel's (data, tensor) "
                  "grid";
      SmallVector<int64_t> shape(gridOp.getShape());
      shape.push_back(size);
      gridOp.setShape(shape);
      return std::make_pair(tensor.getGrid(), int64_t(2));
    }
    OpBuilder builder(module.getBodyRegion());
    builder.setInsertionPointToStart(module.getBody());
    auto gridOp = shard::GridOp::create(builder, module.getLoc(), "cp",
                                        ArrayRef<int64_t>{1, size});
    SymbolTable symbols(module);
    symbols.insert(gridOp); // renames it when "cp" is taken
    return std::make_pair(FlatSymbolRefAttr::get(gridOp.getSymNameAttr()),
                          int64_t(1));
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (size < 1) {
      module.emitError("train-context-parallel: size must be at least 1, "
                       "got ")
          << static_cast<int64_t>(size);
      return signalPassFailure();
    }
    FailureOr<SmallVector<func::FuncOp>> found =
        lookupForwards(module, getArgument());
    if (failed(found))
      return signalPassFailure();
    SmallVector<func::FuncOp> forwards = std::move(*found);
    if (size == 1)
      return;
    FailureOr<std::pair<FlatSymbolRefAttr, int64_t>> grid =
        contextGrid(module, forwards);
    if (failed(grid))
      return signalPassFailure();
    auto split = ContextSplitAttr::get(
        &getContext(), size, grid->first, grid->second,
        loadBalance ? ContextOrder::balanced : ContextOrder::contiguous);
    for (func::FuncOp func : forwards) {
      LLVM_DEBUG(llvm::dbgs()
                 << "train-context-parallel: @" << func.getSymName() << " over "
                 << size << " ranks\n");
      if (failed(ContextParallel(func, split, exchange == ContextExchange::ring)
                     .run()))
        return signalPassFailure();
    }
  }
};

} // namespace
} // namespace train
} // namespace mlir
