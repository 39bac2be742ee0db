//===- LossScale.cpp - train-loss-scale -----------------------------------===//
//
// Dynamic loss scaling as IR: the backward's seed times the scale, the
// gradients unscaled (in f32) at the top of the optimizer block, the scale
// and its counters one state tensor of the step. What happens on an
// overflow is train.unscale_gradients's: every gradient NaN, so that every
// update skips its tensor.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Dialect/Train/Transforms/StepPhases.h"
#include "trainmem/Support/LossScaleUpdate.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-loss-scale"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINLOSSSCALEPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"
} // namespace train
} // namespace mlir

using namespace mlir;
using namespace mlir::train;

namespace {

constexpr llvm::StringLiteral kPassName = "train-loss-scale";

/// The step's state tensor holding the loss scale: the parameter name the
/// state attribute needs (the scale belongs to the whole step).
constexpr llvm::StringLiteral kLossScaleStateParam = "step";

struct TrainLossScalePass
    : public train::impl::TrainLossScalePassBase<TrainLossScalePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!trainmem::isUsableLossScale(initial)) {
      emitError(module.getLoc(), kPassName)
          << ": initial must be a positive normal f32 (the scale is an f32: "
             "from 2^-126 to below 2^128), got "
          << initial;
      return signalPassFailure();
    }
    if (growthInterval < 1) {
      emitError(module.getLoc(), kPassName)
          << ": growth-interval must be >= 1, got "
          << static_cast<int64_t>(growthInterval);
      return signalPassFailure();
    }
    func::FuncOp func = lookupStep(module, function, kPassName);
    if (!func || failed(checkStepPhases(func, kPassName)) ||
        failed(scale(func)))
      return signalPassFailure();
  }

  /// The step's optimizer block (checkStepPhases said the step is not
  /// loss-scaled or partitioned yet).
  FailureOr<BlockOp> findOptimizer(func::FuncOp func) {
    BlockOp optimizer;
    func.walk([&](BlockOp block) {
      if (block.getKind() == BlockKind::optimizer)
        optimizer = block;
    });
    if (!optimizer)
      return func.emitError(kPassName)
             << ": @" << func.getSymName()
             << " has no train.block optimizer (run train-autodiff with an "
                "optimizer, or train-add-optimizer, first)";
    return optimizer;
  }

  /// The gradients the updates apply, before clipping, how
  /// train-tensor-parallel split each (null: whole), and the clips.
  static void collectGradients(func::FuncOp func, BlockOp optimizer,
                               llvm::SetVector<Value> &grads,
                               SmallVectorImpl<TensorSplitAttr> &splits,
                               SmallVectorImpl<ClipGradNormOp> &clips) {
    optimizer.walk([&](OptimizerUpdateOpInterface update) {
      Value grad = update.getGradient();
      if (auto clip = grad.getDefiningOp<ClipGradNormOp>()) {
        if (!llvm::is_contained(clips, clip))
          clips.push_back(clip);
        auto clipped = llvm::find(clip.getClipped(), grad);
        grad = clip.getGrads()[clipped - clip.getClipped().begin()];
      }
      if (grads.insert(grad))
        splits.push_back(getTensorSplit(func, update.getUpdatedParam()));
    });
  }

  /// The gradients unscaled, first thing in the optimizer block: every
  /// read of them in the block reads the unscaled ones. Split gradients
  /// (a tensor-parallel step) overflow on one rank of their group only:
  /// their squared norms summed over the group make every rank decide
  /// alike.
  UnscaleGradientsOp unscaleInBlock(BlockOp optimizer, ArrayRef<Value> grads,
                                    ArrayRef<TensorSplitAttr> splits,
                                    Value state) {
    OpBuilder builder = OpBuilder::atBlockBegin(&optimizer.getBody().front());
    SmallVector<Value> squaredNorms = buildSplitSquaredNorms(
        builder, optimizer.getLoc(), grads, splits, /*withWhole=*/false);
    auto unscale = UnscaleGradientsOp::create(
        builder, optimizer.getLoc(), grads, state, squaredNorms,
        builder.getF64FloatAttr(initial),
        builder.getI64IntegerAttr(growthInterval));
    // The unscale and the norms it takes read the scaled gradients.
    llvm::SmallPtrSet<Operation *, 4> readsScaled = {unscale};
    for (Value norm : squaredNorms) {
      if (auto sum = norm.getDefiningOp<shard::AllReduceOp>())
        norm = sum.getInput();
      readsScaled.insert(norm.getDefiningOp());
    }
    for (auto [gradValue, unscaled] : llvm::zip(grads, unscale.getUnscaled())) {
      Value grad = gradValue;
      grad.replaceUsesWithIf(unscaled, [&](OpOperand &use) {
        return !readsScaled.contains(use.getOwner()) &&
               optimizer->isProperAncestor(use.getOwner());
      });
    }
    return unscale;
  }

  /// A clip now reads f32 gradients: rebuilt with f32 results.
  static void rebuildClips(ArrayRef<ClipGradNormOp> clips) {
    for (ClipGradNormOp clip : clips) {
      OpBuilder builder(clip);
      auto rebuilt =
          ClipGradNormOp::create(builder, clip.getLoc(), clip.getGrads(),
                                 clip.getSquaredNorms(), clip.getMaxNormAttr());
      rebuilt->setAttrs(clip->getAttrs());
      clip.replaceAllUsesWith(rebuilt.getResults());
      clip.erase();
    }
  }

  /// The new state leaves the block and the step, marked `stateAttr`.
  static void returnState(func::FuncOp func, Value newState,
                          StateAttr stateAttr) {
    Builder builder(func.getContext());
    auto ret = cast<func::ReturnOp>(func.front().getTerminator());
    SmallVector<Value> results(ret.getOperands());
    results.push_back(newState);
    SmallVector<DictionaryAttr> resultAttrs;
    func.getAllResultAttrs(resultAttrs);
    resultAttrs.push_back(builder.getDictionaryAttr(
        builder.getNamedAttr(kOptimizerStateAttrName, stateAttr)));
    setStepResults(func, results, resultAttrs);
    exportEscapingValues(func);
  }

  LogicalResult scale(func::FuncOp func) {
    MLIRContext *context = func.getContext();
    FailureOr<BlockOp> optimizer = findOptimizer(func);
    if (failed(optimizer))
      return failure();
    llvm::SetVector<Value> grads;
    SmallVector<TensorSplitAttr> splits;
    SmallVector<ClipGradNormOp> clips;
    collectGradients(func, *optimizer, grads, splits, clips);
    LLVM_DEBUG(llvm::dbgs()
               << "train-loss-scale: @" << func.getSymName() << ": "
               << grads.size() << " gradients unscaled, " << clips.size()
               << " clips, initial scale " << initial << ", growth every "
               << growthInterval << " steps\n");
    if (grads.empty())
      return func.emitError(kPassName)
             << ": @" << func.getSymName()
             << " has no optimizer update (a step from "
                "train-autodiff{optimizer=none} returns gradients; run "
                "train-add-optimizer first)";
    SmallVector<LossGradOpInterface> seeds;
    func.walk([&](LossGradOpInterface op) { seeds.push_back(op); });
    if (seeds.empty())
      return func.emitError(kPassName)
             << ": @" << func.getSymName()
             << " has no train.cross_entropy_grad to seed with the scale "
                "(its loss must be a cross-entropy)";

    // The state: an argument and a result of the step.
    OpBuilder builder(context);
    auto stateType = RankedTensorType::get({3}, builder.getI64Type());
    auto stateAttr =
        StateAttr::get(context, kLossScaleStateParam, StateKind::loss_scale);
    unsigned stateIndex = func.getNumArguments();
    if (failed(func.insertArguments(
            {stateIndex}, {stateType},
            {builder.getDictionaryAttr(
                builder.getNamedAttr(kOptimizerStateAttrName, stateAttr))},
            {func.getLoc()})))
      return func.emitError(kPassName) << ": cannot extend the signature";
    Value state = func.getArgument(stateIndex);

    // The seed: the loss gradient times the scale.
    auto f32Scalar = RankedTensorType::get({}, builder.getF32Type());
    for (LossGradOpInterface seed : seeds) {
      builder.setInsertionPoint(seed);
      OpOperand &grad = seed.getLossGradOperand();
      Value scale =
          LossScaleOp::create(builder, seed->getLoc(), f32Scalar, state,
                              builder.getF64FloatAttr(initial));
      Value scaled = MulOp::create(builder, seed->getLoc(), grad.get(), scale);
      grad.set(scaled);
    }
    UnscaleGradientsOp unscale =
        unscaleInBlock(*optimizer, grads.getArrayRef(), splits, state);
    rebuildClips(clips);
    returnState(func, unscale.getNewState(), stateAttr);
    return success();
  }
};

} // namespace
