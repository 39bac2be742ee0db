//===- GradAccum.cpp - train-grad-accum and train-unroll-accum ------------===//
//
// The forward and backward of a step move into a train.accumulate body and
// are re-typed for a micro-batch: every tensor whose shape carries the
// batch gets its batch dimension (or the outermost part of a flattened
// batch dimension) divided by the number of micro-batches.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Analysis/MemoryPlan.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Dialect/Train/Transforms/StepPhases.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-grad-accum"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINGRADACCUMPASS
#define GEN_PASS_DEF_TRAINUNROLLACCUMPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

RankedTensorType withShape(Type type, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape,
                               cast<RankedTensorType>(type).getElementType());
}

/// The new shape of a reshape result when its input changed from `oldIn` to
/// `newIn` in one dimension (the batch): the result dimension where that
/// input dimension's span begins shrinks by the same factor.
FailureOr<SmallVector<int64_t>> rebatchReshape(ArrayRef<int64_t> oldIn,
                                               ArrayRef<int64_t> newIn,
                                               ArrayRef<int64_t> oldOut) {
  SmallVector<int64_t> out(oldOut);
  if (oldIn == newIn)
    return out;
  size_t d = 0;
  while (d < oldIn.size() && oldIn[d] == newIn[d])
    ++d;
  int64_t before = 1;
  for (size_t i = 0; i < d; ++i)
    before *= oldIn[i];
  int64_t product = 1;
  for (size_t r = 0; r < out.size(); ++r) {
    product *= out[r];
    if (product > before) {
      // The result dimension holds whole batch rows (the batch, or rows
      // merged with what follows): it holds the micro-batch's rows now. A
      // micro-batch need not divide the batch (an uneven split pads it).
      if (out[r] % oldIn[d] == 0) {
        out[r] = out[r] / oldIn[d] * newIn[d];
        return out;
      }
      // The batch split over several result dimensions: the outermost
      // shrinks, when the micro-batch divides the batch evenly.
      if (oldIn[d] % newIn[d] != 0)
        return failure();
      int64_t factor = oldIn[d] / newIn[d];
      if (out[r] % factor != 0)
        return failure();
      out[r] /= factor;
      return out;
    }
  }
  return failure();
}

/// Re-types the results of `clone` (a copy of `original` whose operands
/// may have new types) for a micro-batch.
LogicalResult rebatchResults(Operation *original, Operation *clone,
                             int64_t batch, int64_t micro) {
  auto shapeOf = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getShape();
  };
  for (auto [index, result] : llvm::enumerate(clone->getResults())) {
    auto oldType = dyn_cast<RankedTensorType>(result.getType());
    if (!oldType)
      continue;
    std::optional<SmallVector<int64_t>> shape;
    if (isa<InferTypeOpInterface, InferShapedTypeOpInterface>(clone)) {
      // Ops whose result types (or shapes) follow from their operands
      // (matmul, transpose, embedding, element-wise ops, gradients,
      // dropout and its mask, ...) say what they are now.
      SmallVector<Type> types;
      if (failed(inferResultTypes(clone, types)))
        return clone->emitOpError("cannot be re-typed for a micro-batch");
      ArrayRef<int64_t> inferred =
          cast<RankedTensorType>(types[index]).getShape();
      shape.emplace(inferred.begin(), inferred.end());
    } else if (auto reshape = dyn_cast<ReshapeOp>(clone)) {
      FailureOr<SmallVector<int64_t>> s = rebatchReshape(
          shapeOf(original->getOperand(0)), shapeOf(reshape.getInput()),
          oldType.getShape());
      if (failed(s))
        return clone->emitOpError("cannot be re-typed for a micro-batch: "
                                  "the batch does not divide its result");
      shape = *s;
    } else if (auto region = dyn_cast<TransparentRegionOpInterface>(clone)) {
      shape.emplace(shapeOf(region.getYieldedValue(index)));
    } else if (auto sumTo = dyn_cast<SumToOp>(clone)) {
      // A kept dimension that was the batch shrinks with it.
      ArrayRef<int64_t> oldInput = shapeOf(original->getOperand(0));
      ArrayRef<int64_t> newInput = shapeOf(sumTo.getInput());
      shape.emplace(oldType.getShape());
      size_t lead = oldInput.size() - shape->size();
      for (size_t j = 0; j < shape->size(); ++j)
        if ((*shape)[j] == oldInput[lead + j] &&
            oldInput[lead + j] != newInput[lead + j])
          (*shape)[j] = newInput[lead + j];
    } else if (isa<BroadcastOp>(clone)) {
      // The repeated dimensions stay; the others follow the input.
      ArrayRef<int64_t> oldInput = shapeOf(original->getOperand(0));
      ArrayRef<int64_t> newInput = shapeOf(clone->getOperand(0));
      shape.emplace(oldType.getShape());
      for (size_t d = 0; d < shape->size(); ++d)
        if (oldInput[d] != 1)
          (*shape)[d] = newInput[d];
    } else if (isa<DropoutMaskOp>(clone)) {
      // No operand to follow: its leading dimension is the batch.
      shape.emplace(oldType.getShape());
      if (!shape->empty() && (*shape)[0] == batch)
        (*shape)[0] = micro;
    } else if (clone->hasTrait<OpTrait::SameOperandsAndResultShape>()) {
      // Casts: the shape of the input, another element type.
      shape.emplace(shapeOf(clone->getOperand(0)));
    } else if (isa<CommunicationOpInterface>(clone) &&
               clone->getNumOperands() == 1 &&
               shapeOf(original->getOperand(0)).size() ==
                   oldType.getShape().size()) {
      // A collective changes its split dimension only (a sequence-parallel
      // gather, reduce-scatter or slice): the others follow its operand.
      ArrayRef<int64_t> oldInput = shapeOf(original->getOperand(0));
      ArrayRef<int64_t> newInput = shapeOf(clone->getOperand(0));
      shape.emplace(oldType.getShape());
      for (size_t d = 0; d < shape->size(); ++d)
        if ((*shape)[d] == oldInput[d])
          (*shape)[d] = newInput[d];
    }
    // Any other result (an embedding table's gradient, a loss sum) does not
    // depend on the batch: it keeps its type.
    if (shape)
      result.setType(withShape(oldType, *shape));
  }
  return success();
}

/// Gives a dropout of the loop body (a clone of `original`, re-typed for a
/// micro-batch) the micro-batch index as its part, so that a sample draws
/// the mask it draws in the whole batch: the micro-batch's tensor is rows
/// [j·micro, (j+1)·micro) of dimension 0 of the batch's, that is elements
/// [j·N, (j+1)·N) for N elements of the micro-batch's tensor. A dropout on a
/// tensor without the batch keeps its mask.
LogicalResult placeDropout(Operation *original, Operation *clone,
                           Value microIndex) {
  auto draw = dyn_cast<BatchDrawOpInterface>(clone);
  if (!draw || !draw.drawsRandom())
    return success();
  auto oldType = cast<RankedTensorType>(original->getResult(0).getType());
  auto newType = cast<RankedTensorType>(clone->getResult(0).getType());
  if (oldType.getShape() == newType.getShape())
    return success();
  if (oldType.getRank() == 0 ||
      oldType.getShape().drop_front() != newType.getShape().drop_front())
    return clone->emitOpError("cannot draw its micro-batch's part of the "
                              "batch's mask: the batch is not the first "
                              "dimension of ")
           << oldType;
  if (draw.getPartValue())
    return clone->emitOpError("already has a part (accumulated twice?)");
  draw.setPartValue(microIndex);
  // A rank's part of a tensor-parallel draw: the whole draw's elements.
  draw.setElementsPerPart(getWholeDrawnElements(draw));
  return success();
}

/// What train-grad-accum finds in a step and builds from it.
struct Accumulation {
  func::FuncOp func;
  /// The batch: data arguments sharing the tokens' first dimension.
  SmallVector<BlockArgument> batchArgs;
  int64_t batch = 0, micro = 0;
  /// Everything before the optimizer block: it runs per micro-batch.
  SmallVector<Operation *> bodyOps;
  Operation *optimizerBlock = nullptr;
  /// The loss (a cross-entropy) gives the ignore index (padding of the
  /// targets).
  LossOpInterface crossEntropy;
  Value targets;
  /// What the rest of the step reads from the body: summed.
  SmallVector<Value> yielded;
  AccumulateOp loop;
  Block *body = nullptr;
  /// The batched arguments to their micro-batch's, the body's arguments.
  IRMapping mapping;
  Value microIndex, share, windowCount;
};

struct TrainGradAccumPass
    : public impl::TrainGradAccumPassBase<TrainGradAccumPass> {
  using Base::Base;
  void runOnOperation() override;
  LogicalResult fail(Location loc, const Twine &message) {
    emitError(loc, "train-grad-accum: ") << message;
    return failure();
  }
  LogicalResult findBatch(Accumulation &a);
  LogicalResult findBody(Accumulation &a);
  FailureOr<SmallVector<Type>> sumTypes(Accumulation &a);
  void createLoop(Accumulation &a, ArrayRef<Type> resultTypes);
  LogicalResult cloneBody(Accumulation &a);
  void normalizeLoss(Accumulation &a);
};

/// The batched data arguments, and the options checked against the batch.
LogicalResult TrainGradAccumPass::findBatch(Accumulation &a) {
  func::FuncOp func = a.func;
  for (BlockArgument arg : func.getArguments()) {
    auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  kInputAttrName);
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!name || !type || type.getRank() == 0)
      continue;
    if (!a.batch)
      a.batch = type.getDimSize(0);
    if (type.getDimSize(0) == a.batch)
      a.batchArgs.push_back(arg);
  }
  // The loss's targets are the batch's whether or not they are marked: an
  // argument found from the dataflow (what feeds the loss) is split with
  // the tokens, in argument order.
  if (BlockArgument targets = findLossTargetsArgument(func);
      targets && !llvm::is_contained(a.batchArgs, targets)) {
    auto type = dyn_cast<RankedTensorType>(targets.getType());
    if (!type || type.getRank() == 0 ||
        (a.batch && type.getDimSize(0) != a.batch))
      return fail(func.getLoc(),
                  "the loss's targets (argument #" +
                      Twine(targets.getArgNumber()) + " of @" +
                      func.getSymName() +
                      ") do not have the batch's first dimension (" +
                      Twine(a.batch) +
                      "), so they cannot be split into micro-batches; "
                      "mark the batch's arguments " +
                      kInputAttrName + " (\"tokens\", \"targets\")");
    if (!a.batch)
      a.batch = type.getDimSize(0);
    a.batchArgs.push_back(targets);
    llvm::sort(a.batchArgs, [](BlockArgument x, BlockArgument y) {
      return x.getArgNumber() < y.getArgNumber();
    });
  }
  if (a.batchArgs.empty())
    return fail(func.getLoc(), "@" + func.getSymName() +
                                   " has no batched data arguments "
                                   "(train.input with a first dimension)");
  if (steps > a.batch)
    return fail(func.getLoc(), "steps (" + Twine(static_cast<int64_t>(steps)) +
                                   ") is larger than the batch (" +
                                   Twine(a.batch) + ")");
  bool even = a.batch % steps == 0;
  if (!even && uneven == AccumUneven::refuse)
    return fail(func.getLoc(), "the batch (" + Twine(a.batch) +
                                   ") is not divisible by steps (" +
                                   Twine(static_cast<int64_t>(steps)) +
                                   ") and uneven=refuse");
  if (groups < 1 || steps % groups != 0)
    return fail(func.getLoc(), "groups (" +
                                   Twine(static_cast<int64_t>(groups)) +
                                   ") must divide steps (" +
                                   Twine(static_cast<int64_t>(steps)) + ")");
  if (interleaved && groups == 1)
    return fail(func.getLoc(), "interleaved needs groups > 1");
  a.micro = (a.batch + steps - 1) / steps;
  return success();
}

/// The ops that run per micro-batch, the loss's cross-entropy, and the
/// values the rest of the step reads from them (float tensors, to sum).
LogicalResult TrainGradAccumPass::findBody(Accumulation &a) {
  Block &entry = a.func.front();
  for (Operation &op : entry)
    if (auto block = dyn_cast<BlockOp>(op))
      if (block.getKind() == BlockKind::optimizer)
        a.optimizerBlock = block;
  Operation *end = a.optimizerBlock ? a.optimizerBlock : entry.getTerminator();
  for (Operation &op : entry) {
    if (&op == end)
      break;
    a.bodyOps.push_back(&op);
  }
  llvm::SmallPtrSet<Operation *, 16> inBody(a.bodyOps.begin(), a.bodyOps.end());
  for (Operation *op : a.bodyOps)
    op->walk([&](LossOpInterface loss) { a.crossEntropy = loss; });
  if (normalize == AccumNormalize::tokens && !a.crossEntropy)
    return fail(a.func.getLoc(),
                "normalize=tokens needs a cross-entropy loss "
                "(train.cross_entropy or train.cross_entropy_merge with an "
                "ignore index) in @" +
                    a.func.getSymName());
  // The whole targets (wholeIntegers), so that the window's tokens are
  // counted and padded whole and replace the whole count.
  a.targets =
      a.crossEntropy ? wholeIntegers(a.crossEntropy.getTargets()) : Value();
  auto readOutside = [&](Operation *user) {
    Operation *top = user;
    while (top->getBlock() != &entry)
      top = top->getParentOp();
    return !inBody.contains(top);
  };
  for (Operation *op : a.bodyOps)
    for (Value result : op->getResults())
      if (llvm::any_of(result.getUsers(), readOutside)) {
        auto type = dyn_cast<RankedTensorType>(result.getType());
        if (!type || !isa<FloatType>(type.getElementType()))
          return fail(op->getLoc(), "the optimizer reads a non-float value "
                                    "of the forward or backward; it cannot "
                                    "be summed over micro-batches");
        a.yielded.push_back(result);
      }
  return success();
}

/// The sums' types: f32, or with accumulate-dtype=bf16|f16 the parts' own
/// type where they are computed in it.
FailureOr<SmallVector<Type>> TrainGradAccumPass::sumTypes(Accumulation &a) {
  Builder builder(&getContext());
  StringRef name = accumDtypeName(accumulateDtype);
  Type narrow = accumulateDtype == AccumDtype::bf16 ? builder.getBF16Type()
                : accumulateDtype == AccumDtype::f16
                    ? Type(builder.getF16Type())
                    : Type();
  SmallVector<Type> types;
  int64_t narrowed = 0;
  for (Value value : a.yielded) {
    auto type = cast<RankedTensorType>(value.getType());
    bool keep = narrow && type.getElementType() == narrow;
    narrowed += keep;
    types.push_back(
        keep ? Type(type)
             : RankedTensorType::get(type.getShape(), builder.getF32Type()));
  }
  if (narrow && narrowed == 0) {
    llvm::SetVector<Type> partTypes;
    for (Value value : a.yielded)
      partTypes.insert(getElementTypeOrSelf(value.getType()));
    std::string listed;
    llvm::raw_string_ostream os(listed);
    llvm::interleaveComma(partTypes, os);
    return fail(a.func.getLoc(),
                "accumulate-dtype=" + name + ": no gradient of @" +
                    a.func.getSymName() + " is computed in " + name +
                    " (its parts are " + listed + "); write the model in " +
                    name + " (trainmem-model --dtype " + name +
                    ") or accumulate in f32");
  }
  return types;
}

/// The train.accumulate loop before the body's first op, and its body's
/// arguments: the micro-batch's rows of each batched argument, its index
/// (dropout draws by position in the batch, train.dropout's part) and its
/// share of the rows (normalize=mean weighs each micro-batch's mean by it).
void TrainGradAccumPass::createLoop(Accumulation &a,
                                    ArrayRef<Type> resultTypes) {
  OpBuilder builder(a.bodyOps.front());
  Location loc = a.func.getLoc();
  // The window's valid tokens, counted before any backward.
  if (normalize == AccumNormalize::tokens)
    a.windowCount =
        CountValidOp::create(builder, a.crossEntropy->getLoc(), a.targets,
                             a.crossEntropy.getIgnoredTarget());
  SmallVector<Value> inputs;
  SmallVector<int64_t> padding;
  for (BlockArgument arg : a.batchArgs) {
    inputs.push_back(arg);
    padding.push_back(arg == a.targets ? a.crossEntropy.getIgnoredTarget() : 0);
  }
  bool hasDropout = llvm::any_of(a.bodyOps, [](Operation *op) {
    return op
        ->walk([](Operation *inner) {
          auto draw = dyn_cast<BatchDrawOpInterface>(inner);
          return draw && draw.drawsRandom() ? WalkResult::interrupt()
                                            : WalkResult::advance();
        })
        .wasInterrupted();
  });
  a.loop = AccumulateOp::create(
      builder, loc, resultTypes, inputs, builder.getI64IntegerAttr(steps),
      builder.getDenseI64ArrayAttr(padding),
      hasDropout ? builder.getUnitAttr() : UnitAttr(),
      normalize == AccumNormalize::mean ? builder.getUnitAttr() : UnitAttr(),
      groups > 1 ? builder.getI64IntegerAttr(groups) : IntegerAttr(),
      interleaved ? builder.getUnitAttr() : UnitAttr(),
      /*host_sums=*/DenseBoolArrayAttr());
  a.body = builder.createBlock(&a.loop.getBody());
  for (BlockArgument arg : a.batchArgs) {
    SmallVector<int64_t> shape(
        cast<RankedTensorType>(arg.getType()).getShape());
    shape[0] = a.micro;
    a.mapping.map(arg, a.body->addArgument(withShape(arg.getType(), shape),
                                           arg.getLoc()));
  }
  if (hasDropout)
    a.microIndex = a.body->addArgument(
        RankedTensorType::get({}, builder.getI64Type()), loc);
  if (normalize == AccumNormalize::mean)
    a.share = a.body->addArgument(
        RankedTensorType::get({}, builder.getF32Type()), loc);
}

/// The body's ops cloned into the loop, their results re-typed for a
/// micro-batch in program order (post-order puts a region op after its
/// body), dropouts placed, the summed values yielded.
LogicalResult TrainGradAccumPass::cloneBody(Accumulation &a) {
  IRMapping &mapping = a.mapping;
  OpBuilder builder = OpBuilder::atBlockEnd(a.body);
  llvm::DenseMap<Operation *, Operation *> originalOf;
  for (Operation *op : a.bodyOps) {
    Operation *clone = builder.clone(*op, mapping);
    SmallVector<Operation *> originals, clones;
    op->walk([&](Operation *o) { originals.push_back(o); });
    clone->walk([&](Operation *o) { clones.push_back(o); });
    for (auto [o, c] : llvm::zip(originals, clones))
      originalOf[c] = o;
  }
  SmallVector<Operation *> cloned;
  a.body->walk([&](Operation *op) { cloned.push_back(op); });
  for (Operation *clone : cloned)
    if (failed(
            rebatchResults(originalOf.lookup(clone), clone, a.batch, a.micro)))
      return failure();
  if (a.microIndex)
    for (Operation *clone : cloned)
      if (failed(placeDropout(originalOf.lookup(clone), clone, a.microIndex)))
        return failure();
  SmallVector<Value> bodyYield;
  for (Value value : a.yielded)
    bodyYield.push_back(mapping.lookup(value));
  YieldOp::create(builder, a.func.getLoc(), bodyYield);
  return success();
}

/// Loss normalization: over the window's valid tokens, or each
/// micro-batch's mean weighed by its share.
void TrainGradAccumPass::normalizeLoss(Accumulation &a) {
  a.body->walk([&](MeanLossOp meanLoss) {
    if (normalize == AccumNormalize::tokens) {
      Value count = wholeIntegers(meanLoss.getCount());
      if (isa_and_nonnull<LossOpInterface>(count.getDefiningOp()))
        meanLoss.getCountMutable().assign(a.windowCount);
    } else {
      meanLoss.getWeightMutable().assign(a.share);
    }
  });
}

void TrainGradAccumPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (steps < 1) {
    (void)fail(module.getLoc(),
               "steps must be >= 1, got " + Twine(static_cast<int64_t>(steps)));
    return signalPassFailure();
  }
  Accumulation a;
  a.func = lookupStep(module, function, "train-grad-accum");
  // Accumulating twice would nest a loop over micro-batches of
  // micro-batches; the table says so instead of re-typing the loop's body.
  if (!a.func || failed(checkStepPhases(a.func, "train-grad-accum")))
    return signalPassFailure();
  if (failed(findBatch(a)) || failed(findBody(a)))
    return signalPassFailure();
  LLVM_DEBUG(llvm::dbgs() << "train-grad-accum: @" << a.func.getSymName()
                          << ": batch " << a.batch << " in " << steps
                          << " micro-batches of " << a.micro << " rows, "
                          << a.bodyOps.size() << " ops per micro-batch, "
                          << a.batchArgs.size() << " batched arguments\n");
  FailureOr<SmallVector<Type>> types = sumTypes(a);
  if (failed(types))
    return signalPassFailure();
  createLoop(a, *types);
  if (failed(cloneBody(a)))
    return signalPassFailure();
  LLVM_DEBUG(llvm::dbgs() << "train-grad-accum: the loop sums "
                          << a.yielded.size() << " values\n");
  normalizeLoss(a);

  // The rest of the step reads the sums.
  for (auto [value, sum] : llvm::zip(a.yielded, a.loop.getResults()))
    value.replaceAllUsesWith(sum);
  for (Operation *op : llvm::reverse(a.bodyOps))
    op->erase();
  // Clipping now sees the sums (f32, or 16-bit with accumulate-dtype):
  // its results follow, and the optimizer block's and the step's.
  a.func.walk([&](ClipGradNormOp clip) {
    for (auto [in, out] : llvm::zip(clip.getGrads(), clip.getClipped()))
      out.setType(in.getType());
  });
  if (a.optimizerBlock)
    for (auto [result, value] :
         llvm::zip(a.optimizerBlock->getResults(),
                   cast<YieldOp>(
                       a.optimizerBlock->getRegion(0).front().getTerminator())
                       .getValues()))
      result.setType(value.getType());
  auto ret = cast<func::ReturnOp>(a.func.front().getTerminator());
  a.func.setFunctionType(FunctionType::get(
      &getContext(), a.func.getArgumentTypes(), ret.getOperandTypes()));
}

/// One train.accumulate loop unrolled: completely (its micro-batches one
/// after the other in the step) or by `perIteration` (a loop of steps / K
/// iterations whose body is K micro-batches). Each micro-batch's copy
/// reads its rows of the batch, places its dropouts, and its parts are
/// summed where they are complete.
class Unrolling {
public:
  Unrolling(AccumulateOp loop, int64_t perIteration)
      : loop(loop), builder(loop), steps(loop.getStepsAttr().getInt()),
        perIteration(perIteration), micro(loop.getMicroBatchRows()),
        sums(loop.getNumResults()), total(loop.getNumResults()) {}

  LogicalResult run();
  /// Called with each op a micro-batch's copy made at the top level, its
  /// rows, dropouts and sums included (train-pipeline places them).
  llvm::function_ref<void(int64_t, Operation *)> onCopy;

private:
  LogicalResult check();
  void createOuterLoop();
  void copyMicroBatch(int64_t step);
  void mapArguments(int64_t step, IRMapping &mapping);
  void placeDraws(int64_t step, IRMapping &mapping);
  void sumParts(IRMapping &mapping);
  /// `into[index]` plus `part` (marked as a micro-batch sum), or `part`.
  void addInto(SmallVector<Value> &into, unsigned index, Value part);

  AccumulateOp loop;
  OpBuilder builder;
  int64_t steps, perIteration, micro;
  /// The partial unroll's loop and its index; null for a complete one.
  AccumulateOp outer;
  Value outerIndex;
  /// What each micro-batch slices its rows from: the loop's inputs, or
  /// the outer loop's arguments.
  SmallVector<Value> sources;
  /// The dropouts the loop's index places; whether it feeds other ops.
  SmallVector<Operation *> placed;
  bool indexElsewhere = false;
  /// The sums of the current group and of the groups before it.
  SmallVector<Value> sums, total;
  /// With an arena plan of the rolled loop in the IR (train-plan-arena):
  /// the offsets of the body's arguments and of the sums, which every
  /// copy's rows, index, share and sums take (its ops keep the body's), so
  /// that the unrolled step runs in the rolled loop's memory.
  DenseI64ArrayAttr argumentOffsets, sumOffsets;
  /// Gives `op`'s one result the offset `offsets[index]` (with a plan).
  void place(Operation *op, DenseI64ArrayAttr offsets, unsigned index);
};

LogicalResult Unrolling::check() {
  if (loop.getHostSums())
    return loop.emitOpError("train-unroll-accum: the loop sums gradients in "
                            "host memory (train-offload-optimizer "
                            "gradients=host), which the rolled loop does: "
                            "run it rolled, or offload with gradients=device");
  if (steps % perIteration != 0)
    return loop.emitOpError("train-unroll-accum: factor ")
           << perIteration << " does not divide steps " << steps;
  auto batchType = cast<RankedTensorType>(loop.getInputs()[0].getType());
  if (perIteration != steps && micro * steps != batchType.getDimSize(0))
    return loop.emitOpError("train-unroll-accum: a partial unroll needs "
                            "an even split of the batch");
  // The dropouts placed by the index: unrolled, each copy's place is
  // static (first), or the outer loop's index times the iteration's size.
  if (BlockArgument indexArg = loop.getIndexArgument())
    for (OpOperand &use : indexArg.getUses()) {
      if (isa<BatchDrawOpInterface>(use.getOwner()))
        placed.push_back(use.getOwner());
      else
        indexElsewhere = true;
    }
  if (loop.getGroups() && perIteration != steps)
    return loop.emitOpError("train-unroll-accum: a loop summed in groups "
                            "unrolls completely only (factor=0)");
  if (indexElsewhere && perIteration != steps)
    return loop.emitOpError("train-unroll-accum: a partial unroll of a "
                            "loop whose index feeds other ops than "
                            "dropouts is not supported");
  auto func = loop->getParentOfType<func::FuncOp>();
  if (!MemoryPlan::hasPlanInIR(func))
    return success();
  // The rolled loop's plan holds for its copies only when each copy runs
  // as one iteration did: a complete unroll, sums in order.
  if (perIteration != steps)
    return loop.emitOpError("train-unroll-accum: a partial unroll (factor=")
           << perIteration
           << ") of a loop whose step carries an arena plan: plan after the "
              "unrolling (train-plan-arena)";
  argumentOffsets =
      loop->getAttrOfType<DenseI64ArrayAttr>(kPlanArgumentOffsetsAttrName);
  sumOffsets = loop->getAttrOfType<DenseI64ArrayAttr>(kPlanOffsetsAttrName);
  if (!argumentOffsets || !sumOffsets)
    return loop.emitOpError("train-unroll-accum: the step carries an arena "
                            "plan without the offsets of this loop's ")
           << (argumentOffsets ? "sums" : "arguments")
           << "; the plan is older than the IR: run train-plan-arena again";
  // A part of another type would need a cast the plan has no place for
  // (train-plan-arena casts the parts in the body before planning).
  auto yield = cast<YieldOp>(loop.getBody().front().getTerminator());
  for (auto [index, value] : llvm::enumerate(yield.getValues()))
    if (value.getType() != loop.getResult(index).getType())
      return loop.emitOpError("train-unroll-accum: part ")
             << index << " is " << value.getType() << ", its sum "
             << loop.getResult(index).getType()
             << ", and the step's arena plan has no place for the cast: run "
                "train-plan-arena again (it casts the parts in the body)";
  return success();
}

void Unrolling::place(Operation *op, DenseI64ArrayAttr offsets,
                      unsigned index) {
  if (offsets)
    op->setAttr(kPlanOffsetsAttrName,
                builder.getDenseI64ArrayAttr({offsets[index]}));
}

/// A loop of steps / K iterations whose body is K micro-steps, reading
/// K micro-batches' rows per iteration.
void Unrolling::createOuterLoop() {
  outer = AccumulateOp::create(
      builder, loop.getLoc(), loop.getResultTypes(), loop.getInputs(),
      builder.getI64IntegerAttr(steps / perIteration), loop.getPaddingAttr(),
      loop.getIndexedAttr(), UnitAttr(), IntegerAttr(), UnitAttr(),
      /*host_sums=*/DenseBoolArrayAttr());
  Block *outerBody = builder.createBlock(&outer.getBody());
  sources.clear();
  for (Value input : loop.getInputs()) {
    SmallVector<int64_t> shape(
        cast<RankedTensorType>(input.getType()).getShape());
    shape[0] = micro * perIteration;
    sources.push_back(outerBody->addArgument(withShape(input.getType(), shape),
                                             input.getLoc()));
  }
  if (outer.getIndexed())
    outerIndex = outerBody->addArgument(
        RankedTensorType::get({}, builder.getI64Type()), loop.getLoc());
  builder.setInsertionPointToEnd(outerBody);
}

void Unrolling::addInto(SmallVector<Value> &into, unsigned index, Value part) {
  if (!into[index] && !sumOffsets) {
    into[index] = part;
    return;
  }
  Operation *sum;
  if (!into[index]) {
    // Planned: the part lies where the next copy writes its own; the sum
    // starts as a copy of it in the loop's accumulator (a cast to its own
    // type copies).
    sum = CastOp::create(builder, loop.getLoc(), part.getType(), part);
  } else {
    sum = AddOp::create(builder, loop.getLoc(), into[index], part);
  }
  sum->setAttr(kMicroBatchSumAttrName, builder.getUnitAttr());
  place(sum, sumOffsets, index);
  into[index] = sum->getResult(0);
}

/// The body's arguments for micro-batch `step`: its rows of each input,
/// its index (the outer loop's, or a constant for readers other than
/// dropouts, whose copies stop reading it) and its share of the rows.
void Unrolling::mapArguments(int64_t step, IRMapping &mapping) {
  BlockArgument indexArg = loop.getIndexArgument();
  if (indexArg && outer) {
    mapping.map(indexArg, outerIndex);
  } else if (indexElsewhere) {
    auto constant = arith::ConstantOp::create(
        builder, loop.getLoc(),
        DenseElementsAttr::get(RankedTensorType::get({}, builder.getI64Type()),
                               static_cast<int64_t>(step)));
    place(constant, argumentOffsets, indexArg.getArgNumber());
    mapping.map(indexArg, Value(constant));
  }
  if (loop.getWeighted()) {
    auto constant = arith::ConstantOp::create(
        builder, loop.getLoc(),
        DenseElementsAttr::get(RankedTensorType::get({}, builder.getF32Type()),
                               static_cast<float>(loop.getShare(step))));
    place(constant, argumentOffsets, loop.getShareArgument().getArgNumber());
    mapping.map(loop.getShareArgument(), Value(constant));
  }
  Block &body = loop.getBody().front();
  for (auto [index, input] : llvm::enumerate(loop.getInputs())) {
    BlockArgument arg = body.getArgument(index);
    auto rows = SliceRowsOp::create(
        builder, loop.getLoc(), arg.getType(), sources[index],
        builder.getI64IntegerAttr(step * micro),
        builder.getI64IntegerAttr(loop.getPadding()[index]));
    place(rows, argumentOffsets, index);
    mapping.map(arg, Value(rows));
  }
}

/// Each copied dropout draws micro-batch `step`'s place in the batch: a
/// static first position, plus the outer loop's index times its rows.
void Unrolling::placeDraws(int64_t step, IRMapping &mapping) {
  for (Operation *op : placed) {
    Operation *copy = mapping.lookup(op->getResult(0)).getDefiningOp();
    auto draw = cast<BatchDrawOpInterface>(copy);
    int64_t elements = draw.getElementsPerPart();
    draw.setFirstPosition(draw.getFirstPosition() + step * elements);
    if (outer) {
      draw.setElementsPerPart(elements * perIteration);
    } else {
      draw.setPartValue(Value());
      draw.setElementsPerPart(0);
    }
  }
}

/// Each part is summed where it is complete (after the op, at this level,
/// that defines it): a gradient's part dies as the backward makes the
/// next, instead of all of them living to the copy's end.
void Unrolling::sumParts(IRMapping &mapping) {
  auto yield = cast<YieldOp>(loop.getBody().front().getTerminator());
  Block *level = builder.getInsertionBlock();
  OpBuilder::InsertPoint end = builder.saveInsertionPoint();
  llvm::DenseMap<Operation *, Operation *> lastAfter;
  for (auto [index, value] : llvm::enumerate(yield.getValues())) {
    Value part = mapping.lookup(value);
    Operation *anchor = nullptr;
    if (Operation *def = part.getDefiningOp())
      anchor = level->findAncestorOpInBlock(*def);
    if (anchor) {
      Operation *&last = lastAfter[anchor];
      builder.setInsertionPointAfter(last ? last : anchor);
    } else {
      builder.restoreInsertionPoint(end);
    }
    Type sumType = loop.getResult(index).getType();
    if (part.getType() != sumType)
      part = CastOp::create(builder, loop.getLoc(), sumType, part);
    addInto(sums, index, part);
    if (anchor)
      lastAfter[anchor] = &*std::prev(builder.getInsertionPoint());
  }
  builder.restoreInsertionPoint(end);
}

void Unrolling::copyMicroBatch(int64_t step) {
  Block *level = builder.getInsertionBlock();
  Block::iterator end = builder.getInsertionPoint();
  Operation *before = end == level->begin() ? nullptr : &*std::prev(end);
  IRMapping mapping;
  mapArguments(step, mapping);
  for (Operation &op : loop.getBody().front().without_terminator())
    builder.clone(op, mapping);
  placeDraws(step, mapping);
  sumParts(mapping);
  if (!onCopy)
    return;
  for (Operation &op : llvm::make_range(
           before ? std::next(before->getIterator()) : level->begin(),
           builder.getInsertionPoint()))
    onCopy(step, &op);
}

LogicalResult Unrolling::run() {
  if (failed(check()))
    return failure();
  sources.assign(loop.getInputs().begin(), loop.getInputs().end());
  DEBUG_WITH_TYPE("train-unroll-accum",
                  llvm::dbgs() << "train-unroll-accum: a loop of " << steps
                               << " micro-batches of " << micro << " rows at "
                               << loop.getLoc() << ": " << perIteration
                               << " per iteration\n");
  if (perIteration != steps)
    createOuterLoop();
  // Micro-batches in the order their parts are summed (the loop's groups);
  // a group's sum joins the total when the next group starts.
  SmallVector<std::pair<int64_t, bool>> order;
  if (perIteration == steps)
    order = loop.getSumOrder();
  else
    for (int64_t step = 0; step < perIteration; ++step)
      order.push_back({step, step == 0});
  for (auto [step, startsGroup] : order) {
    if (startsGroup && !sums.empty() && sums.front())
      for (unsigned index = 0; index < sums.size(); ++index) {
        addInto(total, index, sums[index]);
        sums[index] = Value();
      }
    copyMicroBatch(step);
  }
  if (!total.empty() && total.front())
    for (unsigned index = 0; index < sums.size(); ++index) {
      addInto(total, index, sums[index]);
      sums[index] = total[index];
    }
  if (outer) {
    YieldOp::create(builder, loop.getLoc(), sums);
    loop.replaceAllUsesWith(outer.getResults());
  } else {
    loop.replaceAllUsesWith(sums);
  }
  loop.erase();
  return success();
}

} // namespace

LogicalResult
unrollAccumulate(AccumulateOp loop,
                 llvm::function_ref<void(int64_t, Operation *)> onCopy) {
  Unrolling unrolling(loop, loop.getStepsAttr().getInt());
  unrolling.onCopy = onCopy;
  return unrolling.run();
}

namespace {

struct TrainUnrollAccumPass
    : public impl::TrainUnrollAccumPassBase<TrainUnrollAccumPass> {
  using Base::Base;

  void runOnOperation() override {
    if (factor < 0) {
      emitError(getOperation().getLoc(),
                "train-unroll-accum: factor must be >= 0");
      return signalPassFailure();
    }
    SmallVector<AccumulateOp> loops;
    getOperation().walk([&](AccumulateOp op) { loops.push_back(op); });
    for (AccumulateOp loop : loops) {
      int64_t steps = loop.getStepsAttr().getInt();
      if (failed(Unrolling(loop, factor == 0 ? steps : int64_t(factor)).run()))
        return signalPassFailure();
    }
  }
};

} // namespace
} // namespace train
} // namespace mlir
