//===- Zero.cpp - train-zero ----------------------------------------------===//
//
// ZeRO (Rajbhandari et al. 2020) as IR: the step becomes one SPMD program
// for N data-parallel ranks, with upstream `shard` collectives on a
// `shard.grid`. docs/Zero.md describes the stages; stage 0 (plain data
// parallel: gradients averaged by bucketed all-reduces) is built here.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Dialect/Train/Transforms/StepPhases.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/MathExtras.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-zero"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINZEROPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"
} // namespace train
} // namespace mlir

using namespace mlir;
using namespace mlir::train;

namespace {

/// The gradient a train.clip_grad_norm result clips; `grad` itself when it
/// is not one.
Value throughClip(Value grad) {
  if (auto clip = grad.getDefiningOp<ClipGradNormOp>()) {
    unsigned index = cast<OpResult>(grad).getResultNumber();
    if (index < clip.getGrads().size())
      return clip.getGrads()[index];
  }
  return grad;
}

/// The gradient the optimizer update reads, as the backward made it:
/// through a train.clip_grad_norm to the gradient it clips, then through a
/// train.unscale_gradients to the loss-scaled gradient. The ranks reduce
/// that one; clipping and unscaling then act on the reduced values.
Value rawGradient(OptimizerUpdateOpInterface update) {
  Value grad = throughClip(update.getGradient());
  if (auto unscale = grad.getDefiningOp<UnscaleGradientsOp>()) {
    unsigned index = cast<OpResult>(grad).getResultNumber();
    if (index < unscale.getGrads().size())
      return unscale.getGrads()[index];
  }
  return grad;
}

/// The train.unscale_gradients between the updates' gradients and the
/// backward (loss scaling), directly or under a clip; null without one.
/// Fails on two (one scale per step).
FailureOr<UnscaleGradientsOp>
findUnscale(ArrayRef<OptimizerUpdateOpInterface> updates) {
  UnscaleGradientsOp found;
  for (OptimizerUpdateOpInterface update : updates) {
    auto unscale =
        throughClip(update.getGradient()).getDefiningOp<UnscaleGradientsOp>();
    if (!unscale)
      continue;
    if (found && found != unscale)
      return unscale.emitOpError("train-zero: the updates read gradients "
                                 "unscaled by more than one "
                                 "train.unscale_gradients; one loss scale "
                                 "per step is supported");
    found = unscale;
  }
  return found;
}

/// The op of `block` that `value` comes from (its definition, or the
/// region op holding it); null for a block argument or a value defined
/// outside `block`.
Operation *producerIn(Block &block, Value value) {
  Operation *op = value.getDefiningOp();
  while (op && op->getBlock() != &block)
    op = op->getParentOp();
  return op;
}

/// `values` (indices into it) in buckets of `bucketBytes`, in the order
/// `block` produces them (ties: in the order given), as the backward fills
/// DeepSpeed's buckets. Fails through `noProducer` when a value is not
/// computed in `block`.
FailureOr<SmallVector<SmallVector<unsigned>>>
bucketsInOrder(Block &block, ArrayRef<Value> values, uint64_t bucketBytes,
               function_ref<InFlightDiagnostic()> noProducer) {
  llvm::DenseMap<Operation *, unsigned> position;
  for (Operation &op : block)
    position[&op] = position.size();
  SmallVector<std::pair<unsigned, unsigned>> produced; // (position, index)
  for (auto [index, value] : llvm::enumerate(values)) {
    Operation *producer = producerIn(block, value);
    if (!producer)
      return noProducer();
    produced.push_back({position[producer], static_cast<unsigned>(index)});
  }
  llvm::sort(produced);
  SmallVector<SmallVector<unsigned>> buckets(1);
  uint64_t filled = 0;
  for (auto [at, index] : produced) {
    buckets.back().push_back(index);
    filled += getTensorBytes(values[index].getType());
    if (filled >= bucketBytes) {
      buckets.emplace_back();
      filled = 0;
    }
  }
  if (buckets.back().empty())
    buckets.pop_back();
  return buckets;
}

/// Where a use of a parameter is gathered for (stage 3): the op holding
/// `user` at the top of the step's body or of a micro-batch loop's body,
/// so that each micro-batch gathers again instead of keeping the gathered
/// parameter for the whole loop.
Operation *gatherScope(func::FuncOp func, Operation *user) {
  Operation *op = user;
  while (op->getParentOp() != func.getOperation() &&
         !isa<AccumulateOp>(op->getParentOp()))
    op = op->getParentOp();
  return op;
}

/// The step's arguments that are parameters (train.param), by name.
llvm::StringMap<BlockArgument> parameterArguments(func::FuncOp func) {
  llvm::StringMap<BlockArgument> byName;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto param = func.getArgAttrOfType<StringAttr>(i, kParamAttrName))
      byName[param.getValue()] = func.getArgument(i);
  return byName;
}

/// The gradients the updates read (before clipping), in buckets of
/// `bucket` bytes in the order the backward produces them.
FailureOr<SmallVector<SmallVector<Value>>>
gradientBuckets(func::FuncOp step, ArrayRef<OptimizerUpdateOpInterface> updates,
                int64_t bucket) {
  // The gradients, in the order the updates read them; each bucket is
  // reduced right after the op that produces its last gradient.
  llvm::SetVector<Value> gradients;
  for (OptimizerUpdateOpInterface update : updates)
    gradients.insert(rawGradient(update));
  FailureOr<SmallVector<SmallVector<unsigned>>> order = bucketsInOrder(
      step.front(), gradients.getArrayRef(), static_cast<uint64_t>(bucket),
      [&] {
        return step.emitError("train-zero: a gradient of @")
               << step.getSymName()
               << " is an argument of the step, not computed by it";
      });
  if (failed(order))
    return failure();
  SmallVector<SmallVector<Value>> buckets;
  for (ArrayRef<unsigned> members : *order)
    buckets.push_back(llvm::to_vector(llvm::map_range(
        members, [&](unsigned index) { return gradients[index]; })));
  return buckets;
}

/// -debug-only=train-zero: a bucket, its gradients' bytes and the op after
/// which it is reduced.
[[maybe_unused]] void debugBucket(size_t index, ArrayRef<Value> members,
                                  Operation *last) {
  uint64_t bytes = 0;
  for (Value gradient : members)
    bytes += getTensorBytes(gradient.getType());
  llvm::dbgs() << "train-zero: bucket " << index << ": " << members.size()
               << " gradients, " << bytes << " B, reduced after '"
               << last->getName() << "' at " << last->getLoc() << "\n";
}

struct TrainZeroPass : public train::impl::TrainZeroPassBase<TrainZeroPass> {
  using Base::Base;

  void getDependentDialects(DialectRegistry &registry) const override {
    Base::getDependentDialects(registry);
    registerShardExternalModels(registry);
  }

  void runOnOperation() override;
  /// Partitions `step`; the stages of a pipeline share `stageGrid`, their
  /// (data, pipeline) grid, made by the first.
  LogicalResult partition(ModuleOp module, func::FuncOp step,
                          shard::GridOp &stageGrid);
  /// The (data, tensor) grid of a tensor-parallel step, its data axis
  /// `ranks` long (grown from 1).
  FailureOr<shard::GridOp> dataAxisGrid(func::FuncOp step);
  LogicalResult placeRankDraws(func::FuncOp step, shard::GridOp grid);
  LogicalResult dataParallel(func::FuncOp step, StringAttr grid,
                             ArrayRef<OptimizerUpdateOpInterface> updates);
  LogicalResult shardOptimizer(func::FuncOp step, StringAttr grid,
                               ArrayRef<OptimizerUpdateOpInterface> updates);
};

/// What is wrong with train-zero's options, if anything.
static std::optional<std::string> badOptions(int64_t stage, int64_t ranks,
                                             int64_t bucket, int64_t prefetch) {
  if (stage < 0 || stage > 3)
    return "stage must be 0, 1, 2 or 3, got " + std::to_string(stage);
  if (ranks < 1)
    return "ranks must be at least 1, got " + std::to_string(ranks);
  if (bucket < 1)
    return "bucket must be at least 1 byte, got " + std::to_string(bucket);
  if (prefetch < 0)
    return "prefetch must be >= 0, got " + std::to_string(prefetch);
  return std::nullopt;
}

void TrainZeroPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (std::optional<std::string> bad =
          badOptions(stage, ranks, bucket, prefetch)) {
    emitError(module.getLoc(), "train-zero: ") << *bad;
    return signalPassFailure();
  }
  // A step cut into pipeline stages (train-pipeline without select-stage):
  // each stage's function, each over its own data ranks.
  SmallVector<func::FuncOp> steps;
  if (function.empty() &&
      llvm::none_of(module.getOps<func::FuncOp>(), [](func::FuncOp func) {
        return func->hasAttr(kStepAttrName);
      }))
    for (auto func : module.getOps<func::FuncOp>())
      if (func->hasAttr(kPipelineStageAttrName))
        steps.push_back(func);
  if (steps.empty()) {
    func::FuncOp step = lookupStep(module, function, getArgument());
    if (!step)
      return signalPassFailure();
    steps.push_back(step);
  }
  // Of this run only: a pass instance runs on other modules too.
  shard::GridOp stageGrid;
  for (func::FuncOp step : steps)
    if (failed(partition(module, step, stageGrid)))
      return signalPassFailure();
}

LogicalResult TrainZeroPass::partition(ModuleOp module, func::FuncOp step,
                                       shard::GridOp &stageGrid) {
  auto fail = [&](Location loc, const Twine &message) {
    return emitError(loc, "train-zero: ") << message;
  };
  // Stage 3 gathers the parameters for each op that reads them; recompute
  // must be ops of the backward by then (StepPhases.def), so that it
  // gathers again instead of keeping the forward's gathered parameters
  // until the backward.
  SmallVector<StringRef> conditions;
  if (stage >= 3 && ranks > 1)
    conditions.push_back("stage=3");
  if (failed(checkStepPhases(step, getArgument(), conditions)))
    return failure();
  SmallVector<OptimizerUpdateOpInterface> updates;
  step.walk([&](OptimizerUpdateOpInterface update) {
    updates.push_back(update);
  });
  if (updates.empty())
    return fail(step.getLoc(),
                "@" + step.getSymName() +
                    " has no optimizer update: ZeRO partitions the optimizer "
                    "and its state (a step from train-autodiff{optimizer=none} "
                    "returns gradients; run train-add-optimizer first)");
  if (step->getParentOfType<ModuleOp>() != module)
    return fail(step.getLoc(), "the step is not at the top of the module");
  // A pipeline stage: its data ranks are the same stage of each pipeline,
  // the stages' count apart (a (data, pipeline) grid, rank = data x
  // stages + stage). Its gradients are whole micro-batch sums by now, which
  // stages 2-3 would reduce-scatter inside the micro-batches.
  auto pipeline =
      step->getAttrOfType<PipelineStageAttr>(kPipelineStageAttrName);
  if (pipeline && stage >= 2 && ranks > 1)
    return fail(step.getLoc(),
                "@" + step.getSymName() + " is a pipeline stage: stage " +
                    Twine(static_cast<int64_t>(stage)) +
                    " (gradients or weights sharded inside the micro-"
                    "batches) is not built with pipeline stages, as "
                    "DeepSpeed's pipeline engine refuses it: use stage=0 or "
                    "stage=1");
  // A tensor-parallel stage's clip sums norms from the other stages and
  // over its group; rebuilding them over shards is not built.
  if (pipeline && stage >= 1 && ranks > 1 && isTensorParallel(step))
    return fail(step.getLoc(),
                "@" + step.getSymName() +
                    " is a tensor-parallel pipeline stage: stage " +
                    Twine(static_cast<int64_t>(stage)) +
                    " (its clip's norms over shards, tensor groups and "
                    "stages) is not built yet (docs/Pipeline.md, \"Not built "
                    "yet\"): use stage=0");
  // One rank is the step as it is.
  if (ranks == 1)
    return success();

  // A tensor- or context-parallel step: ZeRO over its grid's data axis
  // (axis 0).
  shard::GridOp grid;
  if (isTensorParallel(step) || getContextSplit(step)) {
    FailureOr<shard::GridOp> found = dataAxisGrid(step);
    if (failed(found))
      return failure();
    grid = *found;
  }
  // The process grid otherwise: one axis of `ranks` data-parallel
  // processes, or (data, pipeline) for a stage; the stages of one run
  // share it.
  if (!grid) {
    SmallVector<int64_t> shape{ranks};
    if (pipeline)
      shape.push_back(pipeline.getStages());
    shard::GridOp &made = pipeline ? stageGrid : grid;
    if (!made) {
      OpBuilder builder(module.getBodyRegion());
      builder.setInsertionPointToStart(module.getBody());
      made = shard::GridOp::create(builder, module.getLoc(), "dp", shape);
      SymbolTable symbols(module);
      symbols.insert(made); // renames it when "dp" is taken
    }
    grid = made;
  }
  // Each rank holds rows [r·B, (r+1)·B) of the global batch: its dropout
  // draws from r·(the elements its batch draws) on, so that N ranks draw
  // the masks one process running the global batch draws.
  if (failed(placeRankDraws(step, grid)))
    return failure();
  LLVM_DEBUG(llvm::dbgs() << "train-zero: @" << step.getSymName() << ": stage "
                          << stage << " over " << ranks << " ranks on @"
                          << grid.getSymName() << ", " << updates.size()
                          << " updates, buckets of " << bucket << " B\n");
  if (failed(stage == 0
                 ? dataParallel(step, grid.getSymNameAttr(), updates)
                 : shardOptimizer(step, grid.getSymNameAttr(), updates)))
    return failure();
  // Prefetch is stage 3's; the attribute keeps what applies.
  step->setAttr(kZeroAttrName,
                ZeroAttr::get(&getContext(), stage, ranks, bucket,
                              stage == 3 ? int64_t(prefetch) : int64_t(0)));
  return success();
}

FailureOr<shard::GridOp> TrainZeroPass::dataAxisGrid(func::FuncOp step) {
  // The group's grid and axis: a split parameter's, or the context's.
  TensorSplitAttr split;
  for (unsigned i = 0, e = step.getNumArguments(); i < e && !split; ++i)
    split = step.getArgAttrOfType<TensorSplitAttr>(i, kTensorSplitAttrName);
  FlatSymbolRefAttr gridName;
  int64_t axis = 0;
  const char *pass = "train-tensor-parallel";
  if (split) {
    gridName = split.getGrid();
    axis = split.getAxis();
  } else if (ContextSplitAttr context = getContextSplit(step)) {
    gridName = context.getGrid();
    axis = context.getAxis();
    pass = "train-context-parallel";
  }
  auto grid =
      SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(step, gridName);
  if (!grid || grid.getShape().size() < 2 || axis < 1)
    return step.emitError("train-zero: the step is split by ")
           << pass << " on " << gridName
           << ", which is not its (data, group...) grid";
  int64_t data = grid.getShape()[0];
  // One data rank (train-tensor-parallel's default): the grid grows a data
  // axis of `ranks`.
  if (data == 1) {
    SmallVector<int64_t> shape(grid.getShape());
    shape[0] = ranks;
    grid.setShape(shape);
    return grid;
  }
  if (data != ranks)
    return step.emitError("train-zero: ranks=")
           << static_cast<int64_t>(ranks) << ", but the grid " << gridName
           << " has " << data << " data ranks (give ranks=" << data << ")";
  return grid;
}

LogicalResult TrainZeroPass::placeRankDraws(func::FuncOp step,
                                            shard::GridOp grid) {
  // Processes between two data ranks: the grid's other axes (tensor,
  // context, pipeline).
  int64_t rankStride = 1;
  for (int64_t extent : grid.getShape().drop_front())
    rankStride *= extent;
  // The rank's batch: the tokens' first dimension.
  int64_t batchRows = 0;
  for (unsigned i = 0; i < step.getNumArguments(); ++i)
    if (auto input = step.getArgAttrOfType<StringAttr>(i, kInputAttrName);
        input && input.getValue() == "tokens")
      if (auto type = dyn_cast<RankedTensorType>(step.getArgument(i).getType());
          type && type.getRank() > 0)
        batchRows = type.getDimSize(0);
  WalkResult walked = step.walk([&](BatchDrawOpInterface draw) {
    if (!draw.drawsRandom())
      return WalkResult::advance();
    // On a (data, tensor) grid the batch is the data rank's: the
    // process's index over the tensor group's size.
    draw.setDataRankStride(rankStride);
    if (draw.getElementsPerRank() != 0) {
      draw->emitOpError("train-zero: already draws for a rank of the "
                        "global batch (rank_elements set)");
      return WalkResult::interrupt();
    }
    int64_t rows = draw.getDrawnRows();
    // A draw over a tensor without the batch's rows (not an activation)
    // draws alike on every rank, as one process draws it once.
    if (batchRows <= 0 || rows <= 0 || batchRows % rows != 0)
      return WalkResult::advance();
    // A rank's part of a tensor-parallel draw: a row of the whole tensor.
    int64_t perRow = getWholeDrawnElements(draw) / rows, perRank = 0;
    if (llvm::MulOverflow(perRow, batchRows, perRank)) {
      draw->emitOpError("train-zero: the elements one rank's batch draws ")
          << "(" << perRow << " per row x " << batchRows
          << " rows) overflow 64 bits";
      return WalkResult::interrupt();
    }
    draw.setElementsPerRank(perRank);
    return WalkResult::advance();
  });
  return failure(walked.wasInterrupted());
}

LogicalResult
TrainZeroPass::dataParallel(func::FuncOp step, StringAttr grid,
                            ArrayRef<OptimizerUpdateOpInterface> updates) {
  FailureOr<SmallVector<SmallVector<Value>>> buckets =
      gradientBuckets(step, updates, bucket);
  if (failed(buckets))
    return failure();
  OpBuilder builder(step.getContext());
  SmallVector<shard::GridAxis> axes{0};
  for (auto [index, members] : llvm::enumerate(*buckets)) {
    Operation *last = producerIn(step.front(), members.back());
    LLVM_DEBUG(debugBucket(index, members, last));
    builder.setInsertionPointAfter(last);
    for (Value gradient : members) {
      auto reduced = shard::AllReduceOp::create(
          builder, gradient.getLoc(), gradient, grid.getValue(), axes,
          shard::ReductionKind::Average);
      reduced->setAttr(kBucketAttrName,
                       builder.getI64IntegerAttr(static_cast<int64_t>(index)));
      // A pipeline stage sends the raw sum of a gradient another stage
      // updates too (tied embeddings): that stage averages it over its own
      // data ranks, alike.
      gradient.replaceUsesWithIf(reduced.getResult(), [&](OpOperand &use) {
        return use.getOwner() != reduced &&
               !isa<PipelineExchangeOp>(use.getOwner());
      });
    }
  }
  return success();
}

/// The ranks' share of a tensor of `type`: flattened and padded to a
/// multiple of `ranks` x `granule` elements (a granule: one element, or an
/// 8-bit block, which is never split across ranks).
struct Partition {
  int64_t elements = 0; // of the full tensor
  int64_t padded = 0;   // a multiple of ranks x granule
  int64_t shard = 0;    // padded / ranks
};

Partition partition(RankedTensorType type, int64_t ranks, int64_t granule) {
  Partition p;
  p.elements = type.getNumElements();
  int64_t unit = ranks * granule;
  p.padded = (p.elements + unit - 1) / unit * unit;
  p.shard = p.padded / ranks;
  return p;
}

/// `full` flattened to one dimension and padded with zeros to `padded`
/// elements.
Value flattenAndPad(OpBuilder &builder, Location loc, Value full,
                    int64_t padded) {
  auto type = cast<RankedTensorType>(full.getType());
  Value flat = full;
  if (type.getRank() != 1) {
    auto flatType =
        RankedTensorType::get({type.getNumElements()}, type.getElementType());
    flat = ReshapeOp::create(builder, loc, flatType, full);
  }
  if (type.getNumElements() == padded)
    return flat;
  auto paddedType = RankedTensorType::get({padded}, type.getElementType());
  return SliceRowsOp::create(builder, loc, paddedType, flat,
                             builder.getI64IntegerAttr(0),
                             builder.getI64IntegerAttr(0));
}

/// The full tensor of `type` from a gathered, padded flat one.
Value unpadAndReshape(OpBuilder &builder, Location loc, Value padded,
                      RankedTensorType type) {
  Value flat = padded;
  if (cast<RankedTensorType>(padded.getType()).getNumElements() !=
      type.getNumElements())
    flat = SliceRowsOp::create(
        builder, loc,
        RankedTensorType::get({type.getNumElements()}, type.getElementType()),
        padded, builder.getI64IntegerAttr(0), builder.getI64IntegerAttr(0));
  if (type.getRank() == 1)
    return flat;
  return ReshapeOp::create(builder, loc, type, flat);
}

/// Gives each region op in `block` (nested ones first) the types its
/// yield now yields.
void retypeRegionResults(Block &block) {
  for (Operation &op : block) {
    auto region = dyn_cast<TransparentRegionOpInterface>(op);
    if (!region)
      continue;
    retypeRegionResults(op.getRegion(0).front());
    for (auto [result, yielded] :
         llvm::zip(op.getResults(), region.getYieldedValues()))
      result.setType(yielded.getType());
  }
}

/// ZeRO stages 1-3 on one step: the optimizer, its state and (stage 3)
/// the weights partitioned over the ranks of `grid`'s one axis. Each
/// concern is a step of its own, run in this order by `run`: the
/// gradients' buckets (stage 2+), the clip and the unscale found, the
/// 8-bit blocks checked, the micro-batch loops' reduce-scatters (stage 2+
/// under accumulate=micro-batch), each update's gradient, parameter and
/// state sharded, the unscale and the clip over the shards, the stage-3
/// gathers, and the signature retyped.
class OptimizerSharding {
public:
  OptimizerSharding(func::FuncOp step, StringAttr grid, int64_t stage,
                    int64_t ranks, int64_t bucket, int64_t prefetch,
                    ZeroAccumulate accumulate)
      : step(step), context(step.getContext()), grid(grid),
        gridRef(FlatSymbolRefAttr::get(grid)),
        axes(DenseI16ArrayAttr::get(context, {0})),
        axis0(IntegerAttr::get(IndexType::get(context), 0)), builder(context),
        stage(stage), n(ranks), bucket(bucket), prefetch(prefetch),
        accumulate(accumulate) {}

  LogicalResult run(ArrayRef<OptimizerUpdateOpInterface> updates);

private:
  /// The ranks' share of the updated parameter, and its granule (an 8-bit
  /// block, which is never split across ranks, or one element).
  std::pair<Partition, int64_t>
  partitionFor(OptimizerUpdateOpInterface update) const;
  LogicalResult placeBuckets(ArrayRef<OptimizerUpdateOpInterface> updates);
  LogicalResult
  findClipAndUnscale(ArrayRef<OptimizerUpdateOpInterface> updates);
  LogicalResult findStageNorm();
  LogicalResult checkBlocks(ArrayRef<OptimizerUpdateOpInterface> updates);
  LogicalResult scatterInLoops(ArrayRef<OptimizerUpdateOpInterface> updates);
  struct InLoop {
    unsigned yieldIndex;
    Partition part;
  };
  LogicalResult scatterInLoop(AccumulateOp loop, ArrayRef<InLoop> gradients);
  LogicalResult shardUpdate(OptimizerUpdateOpInterface update);
  LogicalResult checkWholeBlocks(Operation *op, const Partition &part,
                                 int64_t granule) const;
  Value scatterGradient(Operation *op, Value grad, const Partition &part);
  FailureOr<Value> shardParameter(Operation *op, Value param, bool isMaster,
                                  bool paramIsState, const Partition &part);
  void gatherNewWeights(Operation *op, Value param, Value newParam,
                        bool isMaster, const Partition &part);
  FailureOr<Value> shardArgument(Value value, Operation *update,
                                 int64_t shardElements);
  void shardWeights(BlockArgument weights, Operation *update,
                    const Partition &part);
  FailureOr<SmallVector<Value>> shardsOf(ValueRange gradients, Operation *op,
                                         StringRef verb) const;
  LogicalResult shardUnscale();
  LogicalResult shardClip();
  void gatherWeights();
  void retypeSignature();

  func::FuncOp step;
  MLIRContext *context;
  StringAttr grid;
  FlatSymbolRefAttr gridRef;
  DenseI16ArrayAttr axes;
  IntegerAttr axis0;
  OpBuilder builder;
  int64_t stage, n, bucket, prefetch;
  ZeroAccumulate accumulate;

  /// Stage 2+: the op after which each gradient's bucket is reduce-
  /// scattered, and the bucket's index.
  llvm::DenseMap<Value, std::pair<Operation *, int64_t>> bucketOf;
  /// Where the next reduce-scatter of a bucket goes (after the previous).
  llvm::DenseMap<Operation *, Operation *> lastPlaced;
  ClipGradNormOp clip;
  /// A pipeline stage's own squared norm that its clip takes beside the
  /// other stages' (train-pipeline's); null otherwise.
  SquaredNormOp stageNorm;
  UnscaleGradientsOp unscale;
  /// How each gradient the clip (the unscale) reads is split by
  /// train-tensor-parallel; null where whole.
  SmallVector<TensorSplitAttr> clipSplits, unscaleSplits;
  /// The rank's shard of each gradient an update reads.
  llvm::DenseMap<Value, Value> shardOfGradient;
  /// The gradients reduce-scattered inside a micro-batch loop.
  llvm::DenseSet<Value> scatteredInLoop;
  llvm::StringMap<BlockArgument> parameters;
  /// The arguments that become shards, and the full type of each: set on
  /// the signature once at the end (each setArgAttr rebuilds all of the
  /// arguments' attributes).
  llvm::DenseMap<unsigned, Attribute> shardOfArgument;
  /// Stage 3: the weights arguments the ranks keep shards of, and the ops
  /// (in the step's body or a micro-batch loop's) that each gathers them
  /// for, in program order.
  struct Gather {
    BlockArgument shard;
    RankedTensorType full;
    int64_t padded;
  };
  llvm::MapVector<Operation *, SmallVector<Gather>> gathersFor;
};

LogicalResult
OptimizerSharding::run(ArrayRef<OptimizerUpdateOpInterface> updates) {
  if (failed(placeBuckets(updates)) || failed(findClipAndUnscale(updates)) ||
      failed(checkBlocks(updates)) || failed(scatterInLoops(updates)))
    return failure();
  parameters = parameterArguments(step);
  for (OptimizerUpdateOpInterface update : updates)
    if (failed(shardUpdate(update)))
      return failure();
  if (failed(shardUnscale()) || failed(shardClip()))
    return failure();
  gatherWeights();
  retypeSignature();
  return success();
}

std::pair<Partition, int64_t>
OptimizerSharding::partitionFor(OptimizerUpdateOpInterface update) const {
  Operation *op = update.getOperation();
  int64_t granule = 1;
  for (const OptimizerStateUse &use : update.getStateUses())
    if (use.part != StatePart::value)
      if (auto block = op->getAttrOfType<IntegerAttr>("block"))
        granule = block.getInt();
  auto type = cast<RankedTensorType>(update.getUpdatedParam().getType());
  return {partition(type, n, granule), granule};
}

/// Stage 2: each gradient is reduce-scattered into a shard of its own as
/// soon as its bucket is complete, and the full gradient dies there.
/// Stage 1 keeps the full gradients: the reduce-scatter, just before the
/// update, leaves the shard in place in the gradient's buffer.
LogicalResult
OptimizerSharding::placeBuckets(ArrayRef<OptimizerUpdateOpInterface> updates) {
  if (stage < 2)
    return success();
  FailureOr<SmallVector<SmallVector<Value>>> buckets =
      gradientBuckets(step, updates, bucket);
  if (failed(buckets))
    return failure();
  for (auto [index, members] : llvm::enumerate(*buckets)) {
    Operation *last = producerIn(step.front(), members.back());
    LLVM_DEBUG(debugBucket(index, members, last));
    for (Value gradient : members)
      bucketOf[gradient] = {last, static_cast<int64_t>(index)};
  }
  return success();
}

/// Clipping: the updates read clipped gradients; the ranks reduce-scatter
/// the raw ones and clip their shards by the global norm (shardClip).
/// Loss scaling: the ranks reduce the scaled gradients and unscale their
/// shards (shardUnscale).
LogicalResult OptimizerSharding::findClipAndUnscale(
    ArrayRef<OptimizerUpdateOpInterface> updates) {
  for (OptimizerUpdateOpInterface update : updates)
    if (auto reads = update.getGradient().getDefiningOp<ClipGradNormOp>()) {
      if (clip && reads != clip)
        return reads.emitOpError("train-zero: the updates clip their "
                                 "gradients in more than one "
                                 "train.clip_grad_norm; one global norm is "
                                 "supported");
      clip = reads;
    }
  // A tensor-parallel step's norms sum over its tensor axis already; they
  // are built again over both axes. Another step's are not ZeRO's to
  // rebuild.
  bool tensorParallel = isTensorParallel(step);
  if (clip && !clip.getSquaredNorms().empty() && !tensorParallel &&
      failed(findStageNorm()))
    return failure();
  FailureOr<UnscaleGradientsOp> found = findUnscale(updates);
  if (failed(found))
    return failure();
  unscale = *found;
  if (unscale && !unscale.getSquaredNorms().empty() && !tensorParallel)
    return unscale.emitOpError("train-zero: this unscale takes its "
                               "overflow check from ranks already");
  // How each gradient the clip and the unscale read is split (null:
  // whole), by its update's parameter.
  if (clip)
    clipSplits.assign(clip.getGrads().size(), TensorSplitAttr());
  if (unscale)
    unscaleSplits.assign(unscale.getGrads().size(), TensorSplitAttr());
  for (OptimizerUpdateOpInterface update : updates) {
    TensorSplitAttr split = getTensorSplit(step, update.getUpdatedParam());
    Value grad = update.getGradient();
    if (clip && grad.getDefiningOp() == clip.getOperation())
      clipSplits[cast<OpResult>(grad).getResultNumber()] = split;
    Value raw = rawGradient(update);
    if (unscale && raw != throughClip(grad))
      for (auto [i, unscaled] : llvm::enumerate(unscale.getGrads()))
        if (unscaled == raw)
          unscaleSplits[i] = split;
  }
  return success();
}

/// A pipeline stage's clip (train-pipeline's) takes its own squared norm
/// and the other stages': the one ZeRO sums over the data ranks' shards.
LogicalResult OptimizerSharding::findStageNorm() {
  for (Value norm : clip.getSquaredNorms()) {
    Operation *def = norm.getDefiningOp();
    if (step->hasAttr(kPipelineStageAttrName) &&
        isa_and_nonnull<PipelineExchangeOp>(def))
      continue;
    auto own = dyn_cast_or_null<SquaredNormOp>(def);
    if (!step->hasAttr(kPipelineStageAttrName) || !own || stageNorm ||
        own->getBlock() != &step.front())
      return clip.emitOpError("train-zero: this clip takes its norm from "
                              "ranks already");
    stageNorm = own;
  }
  return success();
}

/// The squared norms that replaced `old`'s (a tensor-parallel step's, over
/// its tensor axis) leave them dead: erased, so that they keep no whole
/// gradient alive.
static void eraseOldNorms(ValueRange old) {
  for (Value norm : old) {
    Operation *op = norm.getDefiningOp();
    while (op && op->use_empty()) {
      Operation *input =
          op->getNumOperands() == 1 && isa<shard::AllReduceOp>(op)
              ? op->getOperand(0).getDefiningOp()
              : nullptr;
      op->erase();
      op = input;
    }
  }
}

/// 8-bit state is sharded by whole blocks: ranks x block elements must be
/// a count (a block from hand-written IR or an option can be huge).
LogicalResult
OptimizerSharding::checkBlocks(ArrayRef<OptimizerUpdateOpInterface> updates) {
  for (OptimizerUpdateOpInterface update : updates) {
    Operation *op = update.getOperation();
    auto block = op->getAttrOfType<IntegerAttr>("block");
    if (!block)
      continue;
    auto type = cast<RankedTensorType>(update.getUpdatedParam().getType());
    int64_t unit = 0, padded = 0;
    if (block.getInt() < 1 || llvm::MulOverflow(n, block.getInt(), unit) ||
        llvm::AddOverflow(type.getNumElements(), unit, padded))
      return op->emitOpError("train-zero: its 8-bit state's block of ")
             << block.getInt() << " elements times " << n
             << " ranks is not a count of elements (it overflows 64 bits): "
                "quantize with a smaller block (train-quantize-optimizer-"
                "state block=)";
  }
  return success();
}

/// Stages 2-3 under a micro-batch loop (accumulate=micro-batch): each
/// micro-batch's gradient is reduce-scattered inside the loop, in buckets
/// in the order the body's backward produces them, and the loop sums the
/// shards in f32. Gradients summed by an unrolled loop cannot be: their
/// micro-batches are gone by now.
LogicalResult OptimizerSharding::scatterInLoops(
    ArrayRef<OptimizerUpdateOpInterface> updates) {
  if (stage < 2 || accumulate != ZeroAccumulate::microBatch)
    return success();
  auto isUnrolledSum = [](Value value) {
    Operation *def = value.getDefiningOp();
    return def && def->hasAttr(kMicroBatchSumAttrName);
  };
  llvm::MapVector<AccumulateOp, SmallVector<InLoop>> perLoop;
  for (OptimizerUpdateOpInterface update : updates) {
    Value raw = rawGradient(update);
    auto loop = raw.getDefiningOp<AccumulateOp>();
    Value yielded = loop ? loop.getBody().front().getTerminator()->getOperand(
                               cast<OpResult>(raw).getResultNumber())
                         : Value();
    if (isUnrolledSum(raw) || (yielded && isUnrolledSum(yielded)))
      return update.emitOpError("train-zero: stage ")
             << stage
             << " reduce-scatters each micro-batch's gradients "
                "(accumulate=micro-batch), but this gradient is the sum of "
                "an unrolled micro-batch loop: run train-zero before "
                "train-unroll-accum, or use accumulate=full to reduce the "
                "sum once";
    if (!loop || loop->getParentOp() != step.getOperation())
      continue;
    perLoop[loop].push_back(
        {cast<OpResult>(raw).getResultNumber(), partitionFor(update).first});
    scatteredInLoop.insert(raw);
  }
  for (auto &[loop, gradients] : perLoop)
    if (failed(scatterInLoop(loop, gradients)))
      return failure();
  return success();
}

/// One loop's gradients, in buckets of `bucket` bytes, each reduce-
/// scattered after the op that produces its last gradient (and after an
/// earlier bucket's reduce-scatters placed there).
LogicalResult OptimizerSharding::scatterInLoop(AccumulateOp loop,
                                               ArrayRef<InLoop> gradients) {
  Block &body = loop.getBody().front();
  Operation *yield = body.getTerminator();
  SmallVector<Value> yielded;
  for (const InLoop &gradient : gradients)
    yielded.push_back(yield->getOperand(gradient.yieldIndex));
  FailureOr<SmallVector<SmallVector<unsigned>>> order =
      bucketsInOrder(body, yielded, static_cast<uint64_t>(bucket), [&] {
        return loop.emitOpError("train-zero: a micro-batch's gradient "
                                "is not computed in the loop's body");
      });
  if (failed(order))
    return failure();
  llvm::DenseMap<Operation *, Operation *> placedAfter;
  for (auto [index, members] : llvm::enumerate(*order)) {
    Operation *last = producerIn(
        body, yield->getOperand(gradients[members.back()].yieldIndex));
    Operation *&previous = placedAfter[last];
    builder.setInsertionPointAfter(previous ? previous : last);
    for (unsigned member : members) {
      const InLoop &gradient = gradients[member];
      Value micro = yield->getOperand(gradient.yieldIndex);
      Location loc = micro.getLoc();
      Value padded = flattenAndPad(builder, loc, micro, gradient.part.padded);
      auto scattered = shard::ReduceScatterOp::create(
          builder, loc,
          RankedTensorType::get({gradient.part.shard},
                                getElementTypeOrSelf(micro.getType())),
          gridRef, axes, padded,
          shard::ReductionKindAttr::get(context, shard::ReductionKind::Average),
          axis0);
      scattered->setAttr(kBucketAttrName, builder.getI64IntegerAttr(
                                              static_cast<int64_t>(index)));
      yield->setOperand(gradient.yieldIndex, scattered);
      previous = scattered;
      // The loop sums the shards, in its sum's type (f32, or 16 bits with
      // train-grad-accum's accumulate-dtype).
      Value sum = loop.getResult(gradient.yieldIndex);
      sum.setType(RankedTensorType::get({gradient.part.shard},
                                        getElementTypeOrSelf(sum.getType())));
    }
  }
  return success();
}

/// Whole blocks per rank: a tensor of fewer blocks than ranks would leave
/// ranks with nothing but padding.
LogicalResult OptimizerSharding::checkWholeBlocks(Operation *op,
                                                  const Partition &part,
                                                  int64_t granule) const {
  if (granule <= 1)
    return success();
  int64_t blocks = (part.elements + granule - 1) / granule;
  if (blocks >= n)
    return success();
  return op->emitOpError("train-zero: its 8-bit state has ")
         << blocks << " block" << (blocks == 1 ? "" : "s") << " of " << granule
         << " elements (" << part.elements
         << " parameters), which cannot be split evenly over " << n
         << " ranks without splitting a block: quantize with a block of at "
            "most "
         << llvm::bit_floor(
                static_cast<uint64_t>(std::max<int64_t>(part.elements / n, 1)))
         << " (train-quantize-optimizer-state block=), keep this tensor's "
            "state in f32 (a min-size above "
         << part.elements << "), or use fewer ranks";
}

/// The gradient: averaged over the ranks, each keeping its shard (summed
/// over the micro-batches already where the loop reduce-scatters).
Value OptimizerSharding::scatterGradient(Operation *op, Value grad,
                                         const Partition &part) {
  if (scatteredInLoop.contains(grad))
    return grad;
  Location loc = op->getLoc();
  std::optional<std::pair<Operation *, int64_t>> early;
  if (auto it = bucketOf.find(grad); it != bucketOf.end())
    early = it->second;
  if (early) {
    Operation *&previous = lastPlaced[early->first];
    builder.setInsertionPointAfter(previous ? previous : early->first);
  } else {
    // Before the update, or before the unscale or the clip that reads all
    // of them.
    Operation *before = op;
    if (clip)
      before = clip;
    // A pipeline stage's own norm, sent to the others before its clip,
    // reads the shards of the gradients it has by then.
    if (clip && stageNorm) {
      Operation *def = grad.getDefiningOp();
      if (!def || (def->getBlock() == stageNorm->getBlock() &&
                   def->isBeforeInBlock(stageNorm)))
        before = stageNorm;
    }
    if (unscale)
      before = unscale;
    builder.setInsertionPoint(before);
  }
  Value paddedGrad = flattenAndPad(builder, loc, grad, part.padded);
  auto scattered = shard::ReduceScatterOp::create(
      builder, loc,
      RankedTensorType::get({part.shard}, getElementTypeOrSelf(grad.getType())),
      gridRef, axes, paddedGrad,
      shard::ReductionKindAttr::get(context, shard::ReductionKind::Average),
      axis0);
  if (early) {
    scattered->setAttr(kBucketAttrName,
                       builder.getI64IntegerAttr(early->second));
    lastPlaced[early->first] = scattered;
  } else {
    scattered->setAttr(kInPlaceAttrName, builder.getUnitAttr());
  }
  return scattered;
}

/// The parameter the update reads: an f32 master (state, sharded) or the
/// weights, which stage 3 keeps sharded and stages 1-2 slice per rank (no
/// communication).
FailureOr<Value> OptimizerSharding::shardParameter(Operation *op, Value param,
                                                   bool isMaster,
                                                   bool paramIsState,
                                                   const Partition &part) {
  if (isMaster || paramIsState)
    return shardArgument(param, op, part.shard);
  if (stage >= 3) {
    auto weights = dyn_cast<BlockArgument>(param);
    if (!weights || weights.getOwner() != &step.front() ||
        !step.getArgAttr(weights.getArgNumber(), kParamAttrName))
      return op->emitOpError("train-zero: stage 3 shards the weights, but "
                             "the parameter this update reads is not a "
                             "parameter argument of the step");
    shardWeights(weights, op, part);
    return Value(weights);
  }
  builder.setInsertionPoint(op);
  Value padded = flattenAndPad(builder, op->getLoc(), param, part.padded);
  auto paramType = cast<RankedTensorType>(param.getType());
  return Value(shard::AllSliceOp::create(
      builder, op->getLoc(),
      RankedTensorType::get({part.shard}, paramType.getElementType()), gridRef,
      axes, padded, axis0));
}

LogicalResult
OptimizerSharding::shardUpdate(OptimizerUpdateOpInterface update) {
  Operation *op = update.getOperation();
  auto [part, granule] = partitionFor(update);
  if (failed(checkWholeBlocks(op, part, granule)))
    return failure();

  Value param = update.getUpdatedParam();
  Value grad = rawGradient(update);
  Value gradShard = scatterGradient(op, grad, part);

  bool paramIsState =
      llvm::any_of(update.getStateUses(), [&](const OptimizerStateUse &use) {
        return op->getOperand(use.operandIndex) == param;
      });
  std::optional<unsigned> paramOperand;
  for (OpOperand &operand : op->getOpOperands())
    if (operand.get() == param)
      paramOperand = operand.getOperandNumber();
  auto paramArgument = dyn_cast<BlockArgument>(param);
  bool isMaster =
      paramArgument && paramArgument.getOwner() == &step.front() &&
      step.getArgAttr(paramArgument.getArgNumber(), kOptimizerStateAttrName);
  LLVM_DEBUG({
    llvm::dbgs() << "train-zero: '" << op->getName() << "' of ";
    if (paramArgument && paramArgument.getOwner() == &step.front())
      llvm::dbgs() << step.getArgAttrDict(paramArgument.getArgNumber());
    else
      llvm::dbgs() << param.getType();
    llvm::dbgs() << ": " << part.elements << " elements padded to "
                 << part.padded << ", " << part.shard << " per rank (granule "
                 << granule << ")\n";
  });
  FailureOr<Value> paramShard =
      shardParameter(op, param, isMaster, paramIsState, part);
  if (failed(paramShard))
    return failure();
  if (!paramOperand)
    return op->emitOpError("train-zero: cannot find the parameter operand");

  // The state: the rank's shards (8-bit block maxima: one per block).
  for (const OptimizerStateUse &use : update.getStateUses()) {
    Value state = op->getOperand(use.operandIndex);
    if (state == param)
      continue;
    int64_t elements =
        use.part == StatePart::absmax ? part.shard / granule : part.shard;
    if (failed(shardArgument(state, op, elements)))
      return failure();
  }
  op->setOperand(*paramOperand, *paramShard);
  shardOfGradient[grad] = gradShard;
  for (OpOperand &operand : op->getOpOperands())
    if (operand.get() == grad)
      operand.set(gradShard);
  // Results take their tied operands' (shard) types.
  auto tied = cast<TiedOpInterface>(op);
  Value newParam = op->getResult(0);
  for (OpResult result : op->getResults())
    if (std::optional<unsigned> index =
            tied.getTiedResultOperandIndex(result.getResultNumber())) {
      result.setType(op->getOperand(*index).getType());
      if (*index == *paramOperand)
        newParam = result;
    }
  if (stage >= 3 && isMaster) {
    // The 16-bit weights the layers read: a shard per rank, like the
    // master they are a copy of.
    auto master = step.getArgAttrOfType<StateAttr>(paramArgument.getArgNumber(),
                                                   kOptimizerStateAttrName);
    BlockArgument weights = parameters.lookup(master.getParam());
    if (!weights)
      return op->emitOpError("train-zero: stage 3 shards the weights of '")
             << master.getParam()
             << "', but the step has no parameter argument of that name";
    shardWeights(weights, op, part);
  }
  gatherNewWeights(op, param, newParam, isMaster, part);
  return success();
}

/// Stages 1-2: the new weights, gathered after the update, from its new
/// parameter or from the 16-bit copy of the new master. Stage 3 returns
/// the new shards: nothing is gathered after the update.
void OptimizerSharding::gatherNewWeights(Operation *op, Value param,
                                         Value newParam, bool isMaster,
                                         const Partition &part) {
  SmallVector<std::pair<Value, RankedTensorType>> toGather;
  if (isMaster) {
    for (Operation *user : llvm::to_vector(newParam.getUsers()))
      if (auto refresh = dyn_cast<CastOp>(user)) {
        auto weights = cast<RankedTensorType>(refresh.getResult().getType());
        refresh.getResult().setType(
            RankedTensorType::get({part.shard}, weights.getElementType()));
        toGather.push_back({refresh.getResult(), weights});
      }
  } else {
    toGather.push_back({newParam, cast<RankedTensorType>(param.getType())});
  }
  if (stage >= 3)
    return;
  for (auto [shardValue, fullType] : toGather) {
    builder.setInsertionPointAfter(shardValue.getDefiningOp());
    auto gathered = shard::AllGatherOp::create(
        builder, op->getLoc(),
        RankedTensorType::get({part.padded}, fullType.getElementType()),
        gridRef, axes, shardValue, axis0);
    Value full = unpadAndReshape(builder, op->getLoc(), gathered, fullType);
    shardValue.replaceAllUsesExcept(full, gathered);
  }
}

/// A state tensor is an argument of the step that only its update reads:
/// it becomes the rank's shard.
FailureOr<Value> OptimizerSharding::shardArgument(Value value,
                                                  Operation *update,
                                                  int64_t shardElements) {
  auto argument = dyn_cast<BlockArgument>(value);
  if (!argument || argument.getOwner() != &step.front() ||
      !llvm::all_of(argument.getUsers(),
                    [&](Operation *user) { return user == update; }))
    return update->emitOpError("train-zero: its state must be an argument "
                               "of the step that only this update reads");
  auto type = cast<RankedTensorType>(argument.getType());
  argument.setType(
      RankedTensorType::get({shardElements}, type.getElementType()));
  shardOfArgument[argument.getArgNumber()] = TypeAttr::get(type);
  return Value(argument);
}

/// Stage 3: `weights` become the rank's shard, gathered for each op other
/// than `update` that reads them (gatherWeights).
void OptimizerSharding::shardWeights(BlockArgument weights, Operation *update,
                                     const Partition &part) {
  auto full = cast<RankedTensorType>(weights.getType());
  for (Operation *user : weights.getUsers()) {
    if (user == update)
      continue;
    SmallVector<Gather> &gathers = gathersFor[gatherScope(step, user)];
    if (gathers.empty() || gathers.back().shard != weights)
      gathers.push_back({weights, full, part.padded});
  }
  weights.setType(RankedTensorType::get({part.shard}, full.getElementType()));
  shardOfArgument[weights.getArgNumber()] = TypeAttr::get(full);
}

/// The shards of the gradients an unscale or a clip reads (those the
/// updates sharded).
FailureOr<SmallVector<Value>>
OptimizerSharding::shardsOf(ValueRange gradients, Operation *op,
                            StringRef verb) const {
  SmallVector<Value> shards;
  for (Value gradient : gradients) {
    Value gradShard = shardOfGradient.lookup(gradient);
    if (!gradShard)
      return op->emitOpError("train-zero: ")
             << verb << " a gradient no optimizer update reads";
    shards.push_back(gradShard);
  }
  return shards;
}

/// Loss scaling of sharded gradients: each rank unscales its shards, and
/// the step overflowed where any rank's shards are not finite (the exact
/// squared norm of every rank's shards, summed: a non-finite element on
/// any rank makes it not finite), so every rank skips or grows alike.
LogicalResult OptimizerSharding::shardUnscale() {
  if (!unscale)
    return success();
  UnscaleGradientsOp old = unscale;
  builder.setInsertionPoint(old);
  FailureOr<SmallVector<Value>> shards =
      shardsOf(old.getGrads(), old, "unscales");
  if (failed(shards))
    return failure();
  SmallVector<Value> oldNorms(old.getSquaredNorms());
  auto sharded = UnscaleGradientsOp::create(
      builder, old.getLoc(), *shards, old.getState(),
      buildSplitSquaredNorms(builder, old.getLoc(), *shards, unscaleSplits,
                             /*withWhole=*/true, gridRef, {0}),
      old.getInitialAttr(), old.getGrowthIntervalAttr());
  sharded->setDiscardableAttrs(old->getDiscardableAttrDictionary());
  for (auto [oldValue, newValue] :
       llvm::zip(old.getUnscaled(), sharded.getUnscaled())) {
    // An update (or the clip) reads the unscaled shard now.
    oldValue.replaceAllUsesWith(newValue);
    shardOfGradient[newValue] = newValue;
  }
  old.getNewState().replaceAllUsesWith(sharded.getNewState());
  old.erase();
  eraseOldNorms(oldNorms);
  unscale = {};
  return success();
}

/// The global norm of sharded gradients: each rank's squared norm of its
/// shards (zeros of padding add nothing), summed over the ranks; every
/// rank clips its shards by it. The sums are exact (integer words), so
/// the norm is the one a single rank computes from the whole gradients.
LogicalResult OptimizerSharding::shardClip() {
  if (!clip)
    return success();
  Location loc = clip.getLoc();
  // A pipeline stage: its own squared norm over its data ranks' shards,
  // where it was (before the exchange that sends it); the other stages'
  // come as they came.
  SmallVector<Value> global, oldNorms;
  if (stageNorm) {
    builder.setInsertionPoint(stageNorm);
    FailureOr<SmallVector<Value>> own =
        shardsOf(stageNorm.getInputs(), stageNorm, "takes the norm of");
    if (failed(own))
      return failure();
    SmallVector<TensorSplitAttr> whole(own->size());
    SmallVector<Value> summed =
        buildSplitSquaredNorms(builder, stageNorm.getLoc(), *own, whole,
                               /*withWhole=*/true, gridRef, {0});
    stageNorm.getResult().replaceAllUsesWith(summed.front());
    stageNorm.erase();
    stageNorm = {};
    global.assign(clip.getSquaredNorms().begin(), clip.getSquaredNorms().end());
  }
  builder.setInsertionPoint(clip);
  FailureOr<SmallVector<Value>> shards =
      shardsOf(clip.getGrads(), clip, "clips");
  if (failed(shards))
    return failure();
  if (global.empty()) {
    global = buildSplitSquaredNorms(builder, loc, *shards, clipSplits,
                                    /*withWhole=*/true, gridRef, {0});
    oldNorms.assign(clip.getSquaredNorms().begin(),
                    clip.getSquaredNorms().end());
  }
  auto sharded = ClipGradNormOp::create(builder, loc, *shards, global,
                                        clip.getMaxNormAttr());
  for (auto [old, clipped] : llvm::zip(clip.getClipped(), sharded.getClipped()))
    old.replaceAllUsesWith(clipped);
  clip.getNorm().replaceAllUsesWith(sharded.getNorm());
  clip.erase();
  eraseOldNorms(oldNorms);
  clip = {};
  return success();
}

/// Stage 3: each op that reads sharded weights gets them gathered just
/// before it (`prefetch` such ops earlier, in the same body), unpadded and
/// reshaped; the gathered tensor dies after that op's last use of it. A
/// layer's forward and its backward are separate ops, so each gathers; an
/// op that reads weights the op before it gathered (the head's forward and
/// backward) keeps those instead of gathering them again.
void OptimizerSharding::gatherWeights() {
  llvm::MapVector<Block *, SmallVector<Operation *>> scopesIn;
  for (auto &entry : gathersFor)
    scopesIn[entry.first->getBlock()].push_back(entry.first);
  for (auto &entry : scopesIn) {
    SmallVector<Operation *> &scopes = entry.second;
    llvm::sort(scopes, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    // Per shard: the last scope that gathered it, and what it gathered.
    llvm::DenseMap<Value, std::pair<size_t, Value>> gatheredFor;
    for (size_t index = 0; index < scopes.size(); ++index) {
      Operation *scope = scopes[index];
      Operation *at =
          scopes[index >= static_cast<size_t>(prefetch) ? index - prefetch
                                                        : 0];
      for (Gather gather : gathersFor[scope]) {
        Value full;
        auto previous = gatheredFor.find(gather.shard);
        if (previous != gatheredFor.end() &&
            previous->second.first + 1 == index) {
          full = previous->second.second;
        } else {
          builder.setInsertionPoint(at);
          Location loc = scope->getLoc();
          auto gathered = shard::AllGatherOp::create(
              builder, loc,
              RankedTensorType::get({gather.padded},
                                    gather.full.getElementType()),
              gridRef, axes, gather.shard, axis0);
          full = unpadAndReshape(builder, loc, gathered, gather.full);
        }
        gatheredFor[gather.shard] = {index, full};
        gather.shard.replaceUsesWithIf(full, [&](OpOperand &use) {
          Operation *user = use.getOwner();
          return scope == user || scope->isProperAncestor(user);
        });
      }
    }
  }
}

/// Types follow: region results, then the function's signature. A result
/// is the same parameter or state as the argument with the same marker: it
/// is a shard of the same tensor (train.shard_of: the full type).
void OptimizerSharding::retypeSignature() {
  retypeRegionResults(step.front());
  auto ret = cast<func::ReturnOp>(step.front().getTerminator());
  step.setFunctionType(FunctionType::get(
      context, step.front().getArgumentTypes(), ret.getOperandTypes()));
  auto withShardOf = [&](DictionaryAttr attrs, Attribute full) {
    NamedAttrList list(attrs);
    list.set(kShardOfAttrName, full);
    return list.getDictionary(context);
  };
  llvm::DenseMap<std::pair<StringRef, Attribute>, Attribute> shardOf;
  constexpr StringLiteral kMarkers[] = {kParamAttrName,
                                        kOptimizerStateAttrName};
  SmallVector<DictionaryAttr> argAttrs;
  for (unsigned a = 0; a < step.getNumArguments(); ++a) {
    DictionaryAttr attrs = step.getArgAttrDict(a);
    if (Attribute full = shardOfArgument.lookup(a)) {
      for (StringRef marker : kMarkers)
        if (Attribute key = step.getArgAttr(a, marker))
          shardOf[{marker, key}] = full;
      attrs = withShardOf(attrs, full);
    }
    argAttrs.push_back(attrs ? attrs : DictionaryAttr::get(context));
  }
  step.setAllArgAttrs(argAttrs);
  SmallVector<DictionaryAttr> resultAttrs;
  for (unsigned i = 0; i < step.getNumResults(); ++i) {
    DictionaryAttr attrs = step.getResultAttrDict(i);
    for (StringRef marker : kMarkers)
      if (Attribute key = step.getResultAttr(i, marker))
        if (Attribute full = shardOf.lookup({marker, key}))
          attrs = withShardOf(attrs, full);
    resultAttrs.push_back(attrs ? attrs : DictionaryAttr::get(context));
  }
  step.setAllResultAttrs(resultAttrs);
}

} // namespace

LogicalResult
TrainZeroPass::shardOptimizer(func::FuncOp step, StringAttr grid,
                              ArrayRef<OptimizerUpdateOpInterface> updates) {
  return OptimizerSharding(step, grid, stage, ranks, bucket, prefetch,
                           accumulate)
      .run(updates);
}
