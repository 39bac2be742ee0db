//===- Autodiff.cpp - train-autodiff --------------------------------------===//
//
// Reverse-mode differentiation of a forward-plus-loss function into one
// training step. The backward is built block by block in reverse: each
// forward `train.block` gets a `train.block ... backward` of the same kind and
// layer, filled by the ops' own VJPs. Values crossing block boundaries are
// exported afterwards as extra block results, so the IR stays valid and what
// the forward keeps for the backward is explicit.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/OptimizerRegistry.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"

#include "OptimizerPassOptions.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-autodiff"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINAUTODIFFPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

bool isFloatTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

struct Differentiator {
  explicit Differentiator(OpBuilder &builder) : builder(builder) {}

  OpBuilder &builder;
  llvm::DenseMap<Value, Value> grads;
  uint64_t numVJPs = 0;

  /// Adds `grad` to the gradient of `value`.
  LogicalResult accumulate(Operation *user, Value value, Value grad) {
    if (grad.getType() != value.getType())
      return user->emitOpError("VJP produced a gradient of type ")
             << grad.getType() << " for an operand of type "
             << value.getType();
    auto it = grads.find(value);
    if (it == grads.end()) {
      grads[value] = grad;
      return success();
    }
    it->second = AddOp::create(builder, grad.getLoc(), it->second, grad);
    return success();
  }

  LogicalResult backprop(Operation *op);
  LogicalResult backpropBlock(BlockOp block);
};

LogicalResult Differentiator::backpropBlock(BlockOp forward) {
  auto backward = BlockOp::create(builder, forward.getLoc(), TypeRange{},
                                  forward.getKindAttr(),
                                  forward.getLayerAttr(), builder.getUnitAttr());
  Block *body = builder.createBlock(&backward.getBody());
  YieldOp::create(builder, forward.getLoc());
  builder.setInsertionPointToStart(body);
  builder.setInsertionPoint(body->getTerminator());

  Block &forwardBody = forward.getBody().front();
  auto yield = cast<YieldOp>(forwardBody.getTerminator());
  for (auto [result, yielded] :
       llvm::zip(forward.getResults(), yield.getValues()))
    if (Value grad = grads.lookup(result))
      if (failed(accumulate(yield, yielded, grad)))
        return failure();
  for (Operation &op : llvm::reverse(forwardBody.without_terminator()))
    if (failed(backprop(&op)))
      return failure();

  builder.setInsertionPointAfter(backward);
  return success();
}

LogicalResult Differentiator::backprop(Operation *op) {
  if (auto block = dyn_cast<BlockOp>(op))
    return backpropBlock(block);

  SmallVector<Value> resultGrads;
  bool anyGrad = false;
  for (Value result : op->getResults()) {
    resultGrads.push_back(grads.lookup(result));
    anyGrad |= static_cast<bool>(resultGrads.back());
  }
  if (!anyGrad)
    return success();

  auto differentiable = dyn_cast<DifferentiableOpInterface>(op);
  if (!differentiable && op->hasTrait<NotDifferentiated>())
    return op->emitOpError("is never differentiated (a gradient, optimizer, "
                           "loss-scaling, index or mask op: "
                           "NotDifferentiated) but the loss depends on it; "
                           "a forward pass is written with forward ops");
  if (!differentiable)
    return op->emitOpError("has no VJP (it does not implement "
                           "DifferentiableOpInterface) but the loss depends "
                           "on it");
  SmallVector<Value> operandGrads;
  if (failed(differentiable.buildVJP(builder, resultGrads, operandGrads)))
    return op->emitOpError("failed to build its VJP");
  LLVM_DEBUG(llvm::dbgs() << "train-autodiff: VJP of '" << op->getName()
                          << "' at " << op->getLoc() << "\n");
  ++numVJPs;
  if (operandGrads.size() != op->getNumOperands())
    return op->emitOpError("VJP returned ")
           << operandGrads.size() << " gradients for " << op->getNumOperands()
           << " operands";
  for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads))
    if (grad && isFloatTensor(operand.getType()))
      if (failed(accumulate(op, operand, grad)))
        return failure();
  return success();
}

/// Replaces each backward use of a dropout keep-mask by a mask regenerated
/// from the same RNG stream right before the use.
void regenerateDropoutMasks(func::FuncOp func) {
  func.walk([&](DropoutOp dropout) {
    for (OpOperand &use : llvm::make_early_inc_range(dropout.getMask().getUses())) {
      auto block = use.getOwner()->getParentOfType<BlockOp>();
      if (!block || !block.getBackward())
        continue;
      OpBuilder builder(use.getOwner());
      auto mask = DropoutMaskOp::create(
          builder, dropout.getLoc(), dropout.getMask().getType(),
          dropout.getKey(), dropout.getPart(), dropout.getRateAttr(),
          dropout.getSeedAttr(), dropout.getOffsetAttr(),
          dropout.getFirstAttr(), dropout.getPartElementsAttr(),
          dropout.getRankElementsAttr(), dropout.getRankStrideAttr(),
          dropout.getSplitAttr());
      use.set(mask);
    }
  });
}

/// Gathers a gathered value again where a backward block reads it, so that
/// the step keeps each rank's piece for the backward, not the whole value:
/// sequence parallelism's all-gathers before a split part (Korthikanti et
/// al. 2022, 4.2.2: "we store only Y_i^s ... and perform an extra
/// all-gather in the backward pass"). One gather per backward block.
void regatherInBackward(func::FuncOp func) {
  func.walk([&](shard::AllGatherOp gather) {
    auto forward = gather->getParentOfType<BlockOp>();
    if (!forward || forward.getBackward())
      return;
    // The gather and the views of it in its block (a context-parallel
    // attention's values, gathered before their transpose to heads): a
    // backward reading any of them gathers again.
    SmallVector<Operation *> chain = {gather};
    llvm::SmallPtrSet<Value, 4> gathered = {gather.getResult()};
    for (Operation &op : llvm::make_range(std::next(Block::iterator(gather)),
                                          gather->getBlock()->end()))
      if (isa<TransposeOp, ReshapeOp>(op) &&
          gathered.contains(op.getOperand(0))) {
        chain.push_back(&op);
        gathered.insert(op.getResult(0));
      }
    // Each backward block's first reader, where its gather goes.
    llvm::MapVector<Operation *, Operation *> firstReader;
    for (Operation *link : chain)
      for (Operation *user : link->getResult(0).getUsers()) {
        auto block = user->getParentOfType<BlockOp>();
        if (!block || !block.getBackward())
          continue;
        Operation *reader =
            block.getBody().front().findAncestorOpInBlock(*user);
        auto [it, inserted] = firstReader.try_emplace(block, reader);
        if (!inserted && reader->isBeforeInBlock(it->second))
          it->second = reader;
      }
    for (auto &entry : firstReader) {
      Operation *block = entry.first;
      OpBuilder builder(entry.second);
      IRMapping again;
      SmallVector<Operation *> clones;
      for (Operation *link : chain)
        clones.push_back(builder.clone(*link, again));
      for (Operation *link : chain)
        link->getResult(0).replaceUsesWithIf(
            again.lookup(link->getResult(0)), [&](OpOperand &use) {
              return block->isProperAncestor(use.getOwner());
            });
      for (Operation *clone : llvm::reverse(clones))
        if (clone->use_empty())
          clone->erase();
    }
  });
}

/// Erases backward ops whose results nobody reads, last first so chains of
/// dead ops go in one sweep.
void eraseDeadBackwardOps(func::FuncOp func) {
  SmallVector<Operation *> backwardOps;
  func.walk([&](Operation *op) {
    auto block = op->getParentOfType<BlockOp>();
    if (block && block.getBackward() && !isa<YieldOp>(op))
      backwardOps.push_back(op);
  });
  for (Operation *op : llvm::reverse(backwardOps))
    if (isOpTriviallyDead(op))
      op->erase();
}

struct ParamInfo {
  unsigned argIndex;
  std::string name;
  RankedTensorType type;
};

struct TrainAutodiffPass
    : public impl::TrainAutodiffPassBase<TrainAutodiffPass> {
  using Base::Base;
  TRAINMEM_OPTIMIZER_PASS_OPTIONS

  void runOnOperation() override;
  LogicalResult buildStep(func::FuncOp func);
  LogicalResult buildHessianStep(func::FuncOp forward,
                                 const OptimizerOptions &options);
};

/// -debug-only=train-autodiff: what the step differentiated.
[[maybe_unused]] static void debugStep(func::FuncOp func, size_t params,
                                       size_t forwardOps, uint64_t vjps) {
  llvm::dbgs() << "train-autodiff: @" << func.getSymName() << ": " << params
               << " parameters, " << forwardOps << " forward ops, " << vjps
               << " VJPs\n";
}

LogicalResult TrainAutodiffPass::buildStep(func::FuncOp func) {
  MLIRContext *context = func.getContext();
  auto f32Scalar = RankedTensorType::get({}, Float32Type::get(context));
  if (func.isExternal())
    return func.emitError("train-autodiff: @") << function << " has no body";
  if (func.getNumResults() != 1 || func.getResultTypes()[0] != f32Scalar)
    return func.emitError("train-autodiff: @")
           << function << " must return its loss, one tensor<f32>; it returns "
           << func.getNumResults() << " values";

  SmallVector<ParamInfo> params;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto name = func.getArgAttrOfType<StringAttr>(i, kParamAttrName)) {
      auto type = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
      if (!type || !isFloatTensor(type))
        return func.emitError("train-autodiff: parameter '")
               << name.getValue() << "' is not a float tensor";
      params.push_back({i, name.getValue().str(), type});
    }
  if (params.empty())
    return func.emitError("train-autodiff: @")
           << function << " has no parameters (arguments marked "
           << kParamAttrName << ")";

  Block &entry = func.front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  Value loss = ret.getOperand(0);
  SmallVector<Operation *> forwardOps;
  for (Operation &op : entry.without_terminator())
    forwardOps.push_back(&op);

  // Backward.
  OpBuilder builder(ret);
  Location lossLoc = loss.getLoc();
  Value seed = arith::ConstantOp::create(
      builder, lossLoc, DenseElementsAttr::get(f32Scalar, 1.0f));
  Differentiator diff(builder);
  diff.grads[loss] = seed;
  for (Operation *op : llvm::reverse(forwardOps))
    if (failed(diff.backprop(op)))
      return failure();
  numVJPs += diff.numVJPs;
  LLVM_DEBUG(debugStep(func, params.size(), forwardOps.size(), diff.numVJPs));

  SmallVector<Value> paramGrads;
  for (const ParamInfo &param : params) {
    Value grad = diff.grads.lookup(func.getArgument(param.argIndex));
    if (!grad) // An unused parameter has a zero gradient.
      grad = arith::ConstantOp::create(
          builder, func.getLoc(),
          cast<TypedAttr>(builder.getZeroAttr(param.type)));
    paramGrads.push_back(grad);
  }

  // A new argument: the step counter (train-add-optimizer adds the
  // optimizer state after it).
  auto i64Scalar = RankedTensorType::get({}, builder.getI64Type());
  unsigned stepIndex = func.getNumArguments();
  if (failed(func.insertArgument(
          stepIndex, i64Scalar,
          builder.getDictionaryAttr(builder.getNamedAttr(
              kInputAttrName, builder.getStringAttr("step"))),
          func.getLoc())))
    return func.emitError("train-autodiff: cannot extend the signature");
  Value step = func.getArgument(stepIndex);
  // Each step draws fresh dropout masks: the step counter keys the RNG.
  func.walk([&](BatchDrawOpInterface draw) {
    if (draw.drawsRandom() && !draw.getKeyValue())
      draw.setKeyValue(step);
  });

  // The step returns the loss and the gradients; the optimizer block that
  // will hold the update is empty until train-add-optimizer fills it.
  auto block = BlockOp::create(
      builder, func.getLoc(), TypeRange{},
      BlockKindAttr::get(context, BlockKind::optimizer), IntegerAttr(),
      UnitAttr());
  builder.createBlock(&block.getBody());
  YieldOp::create(builder, func.getLoc());
  SmallVector<Value> results{loss};
  SmallVector<DictionaryAttr> resultAttrs{builder.getDictionaryAttr(
      builder.getNamedAttr(kLossAttrName, builder.getUnitAttr()))};
  for (auto [param, grad] : llvm::zip(params, paramGrads)) {
    results.push_back(grad);
    resultAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        kGradAttrName, builder.getStringAttr(param.name))));
  }
  setStepResults(func, results, resultAttrs);

  // Gradients of data arguments (and whatever only they needed) are dead.
  eraseDeadBackwardOps(func);
  if (regenerateDropoutMasks)
    train::regenerateDropoutMasks(func);
  regatherInBackward(func);

  // Make block-crossing values explicit block results.
  exportEscapingValues(func);
  return success();
}

/// The copy of the forward a Hessian step differentiates: its loss reads
/// labels sampled from its own logits (`train.sample`, drawn after every
/// other draw of the forward) in place of the targets, which it no longer
/// takes (Sophia's Gauss-Newton-Bartlett estimator).
static LogicalResult sampleOwnLabels(func::FuncOp forward) {
  SmallVector<LossOpInterface> losses;
  forward.walk([&](LossOpInterface loss) { losses.push_back(loss); });
  if (losses.size() != 1)
    return forward.emitError("train-autodiff: a Hessian step samples the "
                             "labels of one cross-entropy; the forward has ")
           << losses.size() << " losses";
  auto loss = dyn_cast<CrossEntropyOp>(losses.front().getOperation());
  if (!loss)
    return losses.front()->emitOpError(
        "train-autodiff: a Hessian step samples labels from the logits of a "
        "train.cross_entropy, which this loss has not (vocabulary "
        "parallelism: use tensor-parallel vocabulary-parallel=false)");
  auto targets = dyn_cast<BlockArgument>(loss.getTargets());
  if (!targets || targets.getOwner()->getParentOp() != forward)
    return loss.emitOpError("train-autodiff: a Hessian step replaces the "
                            "targets the loss reads, which are not an "
                            "argument of the forward");
  int64_t offset = 0;
  forward.walk([&](Operation *op) {
    if (auto drawn = op->getAttrOfType<IntegerAttr>("offset"))
      offset = std::max(offset, drawn.getInt() + 1);
  });
  OpBuilder builder(loss);
  auto sample = SampleOp::create(
      builder, loss.getLoc(), targets.getType(), loss.getLogits(), Value(),
      builder.getI64IntegerAttr(0), builder.getI64IntegerAttr(offset));
  for (OpOperand &use : llvm::make_early_inc_range(targets.getUses())) {
    Operation *user = use.getOwner();
    // A count of the targets before the logits reads nothing else: it
    // moves after the labels.
    if (user->getBlock() == sample->getBlock() &&
        user->isBeforeInBlock(sample) && user->getNumOperands() == 1)
      user->moveAfter(sample);
    use.set(sample.getLabels());
  }
  DominanceInfo dominance(forward);
  for (Operation *user : sample.getLabels().getUsers())
    if (!dominance.properlyDominates(sample.getOperation(), user))
      return user->emitOpError("train-autodiff: a Hessian step samples the "
                               "labels from the logits, and this op reads "
                               "the targets before them");
  forward.eraseArgument(targets.getArgNumber());
  return success();
}

/// The Hessian step of the optimizer in `options` (Sophia): a copy of
/// @`forward` with sampled labels, differentiated, refreshing h.
LogicalResult TrainAutodiffPass::buildHessianStep(func::FuncOp forward,
                                                  const OptimizerOptions &o) {
  ModuleOp module = getOperation();
  std::string name = stepName + "_hessian";
  if (Operation *existing = module.lookupSymbol(name))
    return emitError(existing->getLoc(), "train-autodiff: a symbol @")
           << name << " already exists (the Hessian step's name)";
  if (isTensorParallel(forward))
    return forward.emitError("train-autodiff: optimizer=")
           << o.optimizer
           << "'s Hessian step does not run tensor-parallel (its estimate "
              "would need the split gradients' parts); use optimizer=adamw "
              "or lion with train-tensor-parallel";
  auto hessian = cast<func::FuncOp>(forward->clone());
  hessian.setSymName(name);
  SymbolTable(module).insert(hessian, std::next(Block::iterator(forward)));
  if (failed(sampleOwnLabels(hessian)) || failed(buildStep(hessian)))
    return failure();
  Value step;
  for (unsigned i = 0; i < hessian.getNumArguments(); ++i)
    if (auto input = hessian.getArgAttrOfType<StringAttr>(i, kInputAttrName))
      if (input.getValue() == "step")
        step = hessian.getArgument(i);
  hessian.walk([&](SampleOp sample) { sample.getKeyMutable().assign(step); });
  return addHessianUpdate(hessian, o, stepName, getArgument());
}

void TrainAutodiffPass::runOnOperation() {
  ModuleOp module = getOperation();
  OptimizerOptions options = readOptimizerOptions(*this);
  if (failed(checkOptimizerOptions(options, module.getLoc(), getArgument(),
                                   /*allowNone=*/true)))
    return signalPassFailure();
  auto func = module.lookupSymbol<func::FuncOp>(function);
  if (!func) {
    emitError(module.getLoc(), "train-autodiff: no function @") << function;
    return signalPassFailure();
  }
  if (Operation *existing = module.lookupSymbol(stepName)) {
    emitError(existing->getLoc(), "train-autodiff: a symbol @")
        << stepName << " already exists";
    return signalPassFailure();
  }
  // An optimizer with a Hessian estimate (Sophia) gets its Hessian step
  // first, from the forward as it is.
  if (const OptimizerInfo *info = lookupOptimizer(options.optimizer);
      info && info->hessianStep && failed(buildHessianStep(func, options)))
    return signalPassFailure();
  if (failed(buildStep(func)))
    return signalPassFailure();
  func.setSymName(stepName);
  func->setAttr(kStepAttrName, UnitAttr::get(&getContext()));
  // The optimizer is train-add-optimizer's, run on the gradient step.
  if (options.optimizer != "none" &&
      failed(addOptimizer(func, options, getArgument())))
    return signalPassFailure();
}

} // namespace
} // namespace train
} // namespace mlir
