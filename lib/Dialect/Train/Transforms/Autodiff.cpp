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
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/RegionUtils.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

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
  if (!differentiable)
    return op->emitOpError("has no VJP (it does not implement "
                           "DifferentiableOpInterface) but the loss depends "
                           "on it");
  SmallVector<Value> operandGrads;
  if (failed(differentiable.buildVJP(builder, resultGrads, operandGrads)))
    return op->emitOpError("failed to build its VJP");
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
          dropout.getFirstAttr(), dropout.getPartElementsAttr());
      use.set(mask);
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

  void runOnOperation() override;
  LogicalResult buildStep(func::FuncOp func);
  LogicalResult checkOptions(Location loc);
};

/// Options that would train nothing, or train on nonsense, are refused here
/// rather than producing a step that runs and learns nothing.
LogicalResult TrainAutodiffPass::checkOptions(Location loc) {
  auto bad = [&](StringRef option, double value, StringRef expected) {
    return emitError(loc, "train-autodiff: ")
           << option << "=" << value << " is out of range (expected "
           << expected << ")";
  };
  auto finite = [](double v) { return std::isfinite(v); };
  if (optimizer != "adamw" && optimizer != "sgd" && optimizer != "none")
    return emitError(loc, "train-autodiff: unknown optimizer '")
           << optimizer << "' (expected adamw, sgd or none)";
  // Learning rates beyond 10 diverge on any model this compiler targets;
  // such a value is a typo (1e30 for 1e-3), not a setting.
  if (!finite(lr) || lr <= 0.0 || lr > 10.0)
    return bad("lr", lr, "a finite value in (0, 10]");
  if (!finite(minLr) || minLr < 0.0 || minLr > lr)
    return bad("min-lr", minLr, "a finite value in [0, lr]");
  if (warmupSteps < 0)
    return bad("warmup-steps", warmupSteps, ">= 0");
  if (totalSteps < 0)
    return bad("total-steps", totalSteps, ">= 0; 0 keeps the rate constant");
  if (totalSteps > 0 && totalSteps <= warmupSteps)
    return bad("total-steps", totalSteps, "more than warmup-steps");
  if (!finite(beta1) || beta1 < 0.0 || beta1 >= 1.0)
    return bad("beta1", beta1, "a value in [0, 1)");
  if (!finite(beta2) || beta2 < 0.0 || beta2 >= 1.0)
    return bad("beta2", beta2, "a value in [0, 1)");
  if (!finite(epsilon) || epsilon <= 0.0)
    return bad("eps", epsilon, "a finite value > 0");
  if (!finite(weightDecay) || weightDecay < 0.0 || weightDecay >= 1.0 / lr)
    return bad("weight-decay", weightDecay,
               "a finite value >= 0 with lr * weight-decay < 1");
  if (!finite(momentum) || momentum < 0.0 || momentum >= 1.0)
    return bad("momentum", momentum, "a value in [0, 1)");
  if (!finite(clipNorm) || clipNorm < 0.0)
    return bad("clip-norm", clipNorm, "a finite value >= 0; 0 disables "
                                      "clipping");
  return success();
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

  SmallVector<Value> paramGrads;
  for (const ParamInfo &param : params) {
    Value grad = diff.grads.lookup(func.getArgument(param.argIndex));
    if (!grad) // An unused parameter has a zero gradient.
      grad = arith::ConstantOp::create(
          builder, func.getLoc(),
          cast<TypedAttr>(builder.getZeroAttr(param.type)));
    paramGrads.push_back(grad);
  }

  // New arguments: the step counter, then each parameter's optimizer state,
  // added in one signature change (one at a time would be quadratic).
  unsigned firstNew = func.getNumArguments();
  SmallVector<Type> newTypes;
  SmallVector<DictionaryAttr> newAttrs;
  auto planArgument = [&](Type type, StringRef attrName,
                          Attribute value) -> int {
    newTypes.push_back(type);
    newAttrs.push_back(
        builder.getDictionaryAttr(builder.getNamedAttr(attrName, value)));
    return static_cast<int>(firstNew + newTypes.size() - 1);
  };
  auto stateAttr = [&](const ParamInfo &param, StateKind kind) {
    return StateAttr::get(builder.getContext(), param.name, kind);
  };
  auto i64Scalar = RankedTensorType::get({}, builder.getI64Type());
  int stepIndex = planArgument(i64Scalar, kInputAttrName,
                               builder.getStringAttr("step"));

  struct StateIndices {
    int master = -1, m = -1, v = -1, momentum = -1;
  };
  SmallVector<StateIndices> stateIndices;
  for (const ParamInfo &param : params) {
    StateIndices state;
    auto f32Type =
        RankedTensorType::get(param.type.getShape(), builder.getF32Type());
    bool needsMaster = optimizer != "none" && masterWeights &&
                       !param.type.getElementType().isF32();
    if (needsMaster)
      state.master = planArgument(f32Type, kOptimizerStateAttrName,
                                  stateAttr(param, StateKind::master));
    if (optimizer == "adamw") {
      state.m = planArgument(f32Type, kOptimizerStateAttrName,
                                  stateAttr(param, StateKind::m));
      state.v = planArgument(f32Type, kOptimizerStateAttrName,
                                  stateAttr(param, StateKind::v));
    } else if (optimizer == "sgd" && momentum > 0.0) {
      Type bufferType = needsMaster ? Type(f32Type) : Type(param.type);
      state.momentum = planArgument(bufferType, kOptimizerStateAttrName,
                                  stateAttr(param, StateKind::momentum));
    }
    stateIndices.push_back(state);
  }
  SmallVector<unsigned> newIndices(newTypes.size(), firstNew);
  SmallVector<Location> newLocs(newTypes.size(), func.getLoc());
  if (failed(func.insertArguments(newIndices, newTypes, newAttrs, newLocs)))
    return func.emitError("train-autodiff: cannot extend the signature");
  Value step = func.getArgument(stepIndex);
  // Each step draws fresh dropout masks: the step counter keys the RNG.
  func.walk([&](DropoutOp dropout) {
    if (!dropout.getKey())
      dropout.getKeyMutable().assign(step);
  });
  auto argumentAt = [&](int index) {
    return index < 0 ? Value() : Value(func.getArgument(index));
  };

  struct StateArgs {
    Value master, m, v, momentum;
  };
  SmallVector<StateArgs> states;
  for (const StateIndices &state : stateIndices)
    states.push_back({argumentAt(state.master), argumentAt(state.m),
                      argumentAt(state.v), argumentAt(state.momentum)});

  // The update, in one optimizer block.
  SmallVector<Value> results{loss};
  SmallVector<NamedAttribute> resultAttrs{
      builder.getNamedAttr(kLossAttrName, builder.getUnitAttr())};
  auto block = BlockOp::create(
      builder, func.getLoc(), TypeRange{},
      BlockKindAttr::get(context, BlockKind::optimizer), IntegerAttr(),
      UnitAttr());
  builder.createBlock(&block.getBody());
  auto yield = YieldOp::create(builder, func.getLoc());
  builder.setInsertionPoint(yield);
  SmallVector<Value> yielded;
  SmallVector<NamedAttribute> yieldedAttrs;
  auto give = [&](Value value, StringRef attrName, Attribute attrValue) {
    yielded.push_back(value);
    yieldedAttrs.push_back(builder.getNamedAttr(attrName, attrValue));
  };
  auto giveNamed = [&](Value value, StringRef attrName, StringRef name) {
    give(value, attrName, builder.getStringAttr(name));
  };

  if (optimizer == "none") {
    for (auto [param, grad] : llvm::zip(params, paramGrads))
      giveNamed(grad, kGradAttrName, param.name);
  } else {
    Value lrValue;
    if (totalSteps > 0)
      lrValue = LRScheduleOp::create(builder, func.getLoc(), f32Scalar, step,
                                builder.getF64FloatAttr(lr),
                                builder.getF64FloatAttr(minLr),
                                builder.getI64IntegerAttr(warmupSteps),
                                builder.getI64IntegerAttr(totalSteps));
    else
      lrValue = arith::ConstantOp::create(
          builder, func.getLoc(),
          DenseElementsAttr::get(f32Scalar, static_cast<float>(lr)));
    Value norm;
    if (clipNorm > 0.0) {
      SmallVector<Type> types;
      for (Value grad : paramGrads)
        types.push_back(grad.getType());
      auto clip = ClipGradNormOp::create(builder, func.getLoc(), types,
                                         f32Scalar, paramGrads,
                                         builder.getF64FloatAttr(clipNorm));
      paramGrads.assign(clip.getClipped().begin(), clip.getClipped().end());
      norm = clip.getNorm();
    }
    for (auto [param, grad, state] : llvm::zip(params, paramGrads, states)) {
      Value weights = func.getArgument(param.argIndex);
      Value updated = state.master ? state.master : weights;
      Value newMomentum;
      Value newM, newV;
      if (optimizer == "adamw") {
        auto adamw = AdamWOp::create(
            builder, func.getLoc(), updated, grad, state.m, state.v, lrValue, step,
            builder.getF64FloatAttr(beta1), builder.getF64FloatAttr(beta2),
            builder.getF64FloatAttr(epsilon),
            builder.getF64FloatAttr(weightDecay));
        updated = adamw.getNewParam();
        newM = adamw.getNewM();
        newV = adamw.getNewV();
      } else {
        auto sgd = SGDOp::create(
            builder, func.getLoc(), updated.getType(),
            state.momentum ? state.momentum.getType() : Type(), updated, grad,
            lrValue, state.momentum, builder.getF64FloatAttr(momentum),
            builder.getF64FloatAttr(weightDecay), UnitAttr());
        updated = sgd.getNewParam();
        newMomentum = sgd.getNewMomentumBuffer();
      }
      if (state.master) {
        Value newWeights =
            CastOp::create(builder, func.getLoc(), param.type, updated);
        giveNamed(newWeights, kParamAttrName, param.name);
        give(updated, kOptimizerStateAttrName,
                                  stateAttr(param, StateKind::master));
      } else {
        giveNamed(updated, kParamAttrName, param.name);
      }
      if (newM) {
        give(newM, kOptimizerStateAttrName,
                                  stateAttr(param, StateKind::m));
        give(newV, kOptimizerStateAttrName,
                                  stateAttr(param, StateKind::v));
      }
      if (newMomentum)
        give(newMomentum, kOptimizerStateAttrName,
                                  stateAttr(param, StateKind::momentum));
    }
    if (norm)
      give(norm, kGradNormAttrName, builder.getUnitAttr());
  }
  // The return reads the new state from inside the block for now; exporting
  // escaping values below turns them into the block's results.
  results.append(yielded);
  resultAttrs.append(yieldedAttrs);

  ret.getOperandsMutable().assign(results);
  SmallVector<Type> resultTypes;
  for (Value value : results)
    resultTypes.push_back(value.getType());
  func.setFunctionType(
      FunctionType::get(context, func.getArgumentTypes(), resultTypes));
  SmallVector<DictionaryAttr> resultDicts;
  for (NamedAttribute attr : resultAttrs)
    resultDicts.push_back(builder.getDictionaryAttr(attr));
  func.setAllResultAttrs(resultDicts);

  // Gradients of data arguments (and whatever only they needed) are dead.
  eraseDeadBackwardOps(func);
  if (regenerateDropoutMasks)
    train::regenerateDropoutMasks(func);

  // Make block-crossing values explicit block results.
  exportEscapingValues(func);
  return success();
}

void TrainAutodiffPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (failed(checkOptions(module.getLoc())))
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
  if (failed(buildStep(func)))
    return signalPassFailure();
  func.setSymName(stepName);
  func->setAttr(kStepAttrName, UnitAttr::get(&getContext()));
}

} // namespace
} // namespace train
} // namespace mlir
