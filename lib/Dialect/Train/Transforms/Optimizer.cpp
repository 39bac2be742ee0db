//===- Optimizer.cpp - train-add-optimizer --------------------------------===//
//
// Appends the optimizer update to a step that returns its gradients: the
// state arguments and results, the learning rate, global-norm clipping and
// one update op per parameter, in the step's `train.block optimizer`.
// train-autodiff calls the same code after differentiating, so the two
// spellings of a step print the same IR.
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
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

#include <cmath>

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-add-optimizer"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINADDOPTIMIZERPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"
} // namespace train
} // namespace mlir

using namespace mlir;
using namespace mlir::train;

LogicalResult mlir::train::checkOptimizerOptions(
    const OptimizerOptions &options, Location loc, StringRef passName,
    bool allowNone) {
  auto bad = [&](StringRef option, double value, StringRef expected) {
    return emitError(loc, passName)
           << ": " << option << "=" << value << " is out of range (expected "
           << expected << ")";
  };
  auto finite = [](double v) { return std::isfinite(v); };
  const OptimizerOptions &o = options;
  if (o.optimizer == "none") {
    if (allowNone)
      return success();
    return emitError(loc, passName)
           << ": optimizer=none adds no optimizer (expected "
           << listOptimizerNames() << ")";
  }
  if (!lookupOptimizer(o.optimizer))
    return emitError(loc, passName)
           << ": unknown optimizer '" << o.optimizer << "' (expected "
           << listOptimizerNames() << (allowNone ? ", or none)" : ")");
  // Learning rates beyond 10 diverge on any model this compiler targets;
  // such a value is a typo (1e30 for 1e-3), not a setting.
  if (!finite(o.lr) || o.lr <= 0.0 || o.lr > 10.0)
    return bad("lr", o.lr, "a finite value in (0, 10]");
  if (!finite(o.minLr) || o.minLr < 0.0 || o.minLr > o.lr)
    return bad("min-lr", o.minLr, "a finite value in [0, lr]");
  if (o.warmupSteps < 0)
    return bad("warmup-steps", o.warmupSteps, ">= 0");
  if (o.totalSteps < 0)
    return bad("total-steps", o.totalSteps, ">= 0; 0 keeps the rate constant");
  if (o.totalSteps > 0 && o.totalSteps <= o.warmupSteps)
    return bad("total-steps", o.totalSteps, "more than warmup-steps");
  if (!finite(o.beta1) || o.beta1 < 0.0 || o.beta1 >= 1.0)
    return bad("beta1", o.beta1, "a value in [0, 1)");
  if (!finite(o.beta2) || o.beta2 < 0.0 || o.beta2 >= 1.0)
    return bad("beta2", o.beta2, "a value in [0, 1)");
  if (!finite(o.epsilon) || o.epsilon <= 0.0)
    return bad("eps", o.epsilon, "a finite value > 0");
  if (!finite(o.weightDecay) || o.weightDecay < 0.0 ||
      o.weightDecay >= 1.0 / o.lr)
    return bad("weight-decay", o.weightDecay,
               "a finite value >= 0 with lr * weight-decay < 1");
  if (!finite(o.momentum) || o.momentum < 0.0 || o.momentum >= 1.0)
    return bad("momentum", o.momentum, "a value in [0, 1)");
  if (!finite(o.rho) || o.rho <= 0.0)
    return bad("rho", o.rho, "a finite value > 0");
  if (o.hessianInterval < 1)
    return bad("hessian-interval", o.hessianInterval,
               ">= 1 (the Hessian step runs every k steps)");
  if (!finite(o.clipNorm) || o.clipNorm < 0.0)
    return bad("clip-norm", o.clipNorm, "a finite value >= 0; 0 disables "
                                        "clipping");
  return success();
}

namespace {
struct ParamInfo {
  unsigned argIndex;
  std::string name;
  RankedTensorType type;
};

/// The arguments of one parameter's optimizer state: its f32 master (-1:
/// none) and the optimizer's state present, in the registry's order.
struct StateIndices {
  int master = -1;
  SmallVector<unsigned, 2> state;
};

/// addOptimizer's steps on one step function, in order: what the step has
/// (parameters, the step counter, the loss and gradients), the optimizer
/// block, the state arguments, then the update and the new results.
class OptimizerAppender {
public:
  OptimizerAppender(func::FuncOp func, const OptimizerInfo &info,
                    const OptimizerOptions &options, StringRef passName)
      : func(func), context(func.getContext()), info(info), o(options),
        passName(passName), builder(context),
        f32Scalar(RankedTensorType::get({}, Float32Type::get(context))) {}

  LogicalResult run();

private:
  LogicalResult readParameters();
  LogicalResult readResults();
  void findOrCreateBlock();
  LogicalResult addStateArguments();
  Value learningRate(Location loc);
  void update(const ParamInfo &param, Value grad, const StateIndices &indices,
              Value lr);
  void give(Value value, StringRef attrName, Attribute attrValue);
  StateAttr stateAttr(const ParamInfo &param, StateKind kind) const {
    return StateAttr::get(context, param.name, kind);
  }
  Value argumentAt(int index) {
    return index < 0 ? Value() : Value(func.getArgument(index));
  }

  func::FuncOp func;
  MLIRContext *context;
  const OptimizerInfo &info;
  const OptimizerOptions &o;
  StringRef passName;
  OpBuilder builder;
  RankedTensorType f32Scalar;

  SmallVector<ParamInfo> params;
  llvm::StringMap<unsigned> paramByName;
  int stepIndex = -1;
  /// The tokens one step trains on (its tokens input's elements; 0 without
  /// one).
  int64_t batchTokens = 0;
  func::ReturnOp ret;
  Value loss;
  SmallVector<Value> paramGrads;
  BlockOp block;
  SmallVector<StateIndices> stateIndices;
  /// The step's new results and their markers.
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
};
} // namespace

/// What the step has: parameters (float tensors), no optimizer state yet,
/// and the step counter.
LogicalResult OptimizerAppender::readParameters() {
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    if (auto name = func.getArgAttrOfType<StringAttr>(i, kParamAttrName)) {
      auto type = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
      if (!type || !isa<FloatType>(type.getElementType()))
        return func.emitError(passName)
               << ": parameter '" << name.getValue()
               << "' is not a float tensor";
      paramByName[name.getValue()] = params.size();
      params.push_back({i, name.getValue().str(), type});
    }
    if (func.getArgAttr(i, kOptimizerStateAttrName))
      return func.emitError(passName)
             << ": the step has an optimizer already (argument " << i
             << " is optimizer state)";
    if (auto input = func.getArgAttrOfType<StringAttr>(i, kInputAttrName)) {
      if (input.getValue() == "step")
        stepIndex = i;
      if (input.getValue() == "tokens")
        if (auto type =
                dyn_cast<RankedTensorType>(func.getArgument(i).getType());
            type && type.hasStaticShape())
          batchTokens = type.getNumElements();
    }
  }
  if (info.hessianStep && batchTokens == 0)
    return func.emitError(passName)
           << ": optimizer=" << info.name
           << " scales its Hessian estimate by the tokens of a step, and the "
              "step has no tokens input (an argument marked "
           << kInputAttrName << " = \"tokens\")";
  if (params.empty())
    return func.emitError(passName)
           << ": the step has no parameters (arguments marked "
           << kParamAttrName << ")";
  if (stepIndex < 0)
    return func.emitError(passName)
           << ": the step has no step counter (an argument marked "
           << kInputAttrName << " = \"step\")";
  return success();
}

/// The step's results: its loss and one gradient per parameter, of the
/// parameter's type.
LogicalResult OptimizerAppender::readResults() {
  ret = cast<func::ReturnOp>(func.front().getTerminator());
  paramGrads.assign(params.size(), Value());
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    Value value = ret.getOperand(i);
    if (func.getResultAttr(i, kLossAttrName) && !loss) {
      loss = value;
      continue;
    }
    auto name = func.getResultAttrOfType<StringAttr>(i, kGradAttrName);
    if (!name)
      return func.emitError(passName)
             << ": result " << i
             << " of the step is neither its loss nor a gradient ("
             << kLossAttrName << ", " << kGradAttrName
             << "); the optimizer goes onto a step that returns gradients "
                "(train-autodiff{optimizer=none})";
    auto it = paramByName.find(name.getValue());
    if (it == paramByName.end())
      return func.emitError(passName)
             << ": result " << i << " is the gradient of '" << name.getValue()
             << "', which is not a parameter of the step";
    if (paramGrads[it->second])
      return func.emitError(passName)
             << ": the step returns the gradient of '" << name.getValue()
             << "' twice";
    if (value.getType() != params[it->second].type)
      return func.emitError(passName)
             << ": the gradient of '" << name.getValue() << "' is "
             << value.getType() << ", its parameter "
             << params[it->second].type;
    paramGrads[it->second] = value;
  }
  if (!loss)
    return func.emitError(passName)
           << ": the step returns no loss (a result marked " << kLossAttrName
           << ")";
  for (auto [param, grad] : llvm::zip(params, paramGrads))
    if (!grad)
      return func.emitError(passName)
             << ": the step returns no gradient of parameter '" << param.name
             << "' (a result marked " << kGradAttrName << ")";
  return success();
}

/// The optimizer block: the step's last `train.block optimizer`, or a new
/// one before the return.
void OptimizerAppender::findOrCreateBlock() {
  for (Operation &op : func.front())
    if (auto candidate = dyn_cast<BlockOp>(op))
      if (candidate.getKind() == BlockKind::optimizer)
        block = candidate;
  builder.setInsertionPoint(ret);
  if (block)
    return;
  block = BlockOp::create(builder, func.getLoc(), TypeRange{},
                          BlockKindAttr::get(context, BlockKind::optimizer),
                          IntegerAttr(), UnitAttr());
  builder.createBlock(&block.getBody());
  YieldOp::create(builder, func.getLoc());
}

/// New arguments: each parameter's optimizer state (an f32 master of a
/// 16-bit parameter, then the registry entry's states: AdamW's m and v,
/// Lion's m, SGD's momentum buffer), added in one signature change (one at
/// a time would be quadratic).
LogicalResult OptimizerAppender::addStateArguments() {
  unsigned firstNew = func.getNumArguments();
  SmallVector<Type> newTypes;
  SmallVector<DictionaryAttr> newAttrs;
  auto planState = [&](Type type, const ParamInfo &param,
                       StateKind kind) -> unsigned {
    newTypes.push_back(type);
    newAttrs.push_back(builder.getDictionaryAttr(
        builder.getNamedAttr(kOptimizerStateAttrName, stateAttr(param, kind))));
    return firstNew + newTypes.size() - 1;
  };
  for (const ParamInfo &param : params) {
    StateIndices state;
    auto f32Type =
        RankedTensorType::get(param.type.getShape(), builder.getF32Type());
    bool needsMaster = o.masterWeights && !param.type.getElementType().isF32();
    if (needsMaster)
      state.master = planState(f32Type, param, StateKind::master);
    for (const OptimizerStateInfo &spec : info.states) {
      if (spec.presentWhen && !spec.presentWhen(o))
        continue;
      Type type = spec.type == StateElementType::f32 || needsMaster
                      ? Type(f32Type)
                      : Type(param.type);
      state.state.push_back(planState(type, param, spec.kind));
    }
    stateIndices.push_back(state);
  }
  if (newTypes.empty())
    return success();
  SmallVector<unsigned> newIndices(newTypes.size(), firstNew);
  SmallVector<Location> newLocs(newTypes.size(), func.getLoc());
  if (failed(func.insertArguments(newIndices, newTypes, newAttrs, newLocs)))
    return func.emitError(passName) << ": cannot extend the signature";
  return success();
}

/// The learning rate: scheduled (warm-up and cosine decay) or constant.
Value OptimizerAppender::learningRate(Location loc) {
  Value step = func.getArgument(stepIndex);
  if (o.totalSteps > 0)
    return LRScheduleOp::create(builder, loc, f32Scalar, step,
                                builder.getF64FloatAttr(o.lr),
                                builder.getF64FloatAttr(o.minLr),
                                builder.getI64IntegerAttr(o.warmupSteps),
                                builder.getI64IntegerAttr(o.totalSteps));
  return arith::ConstantOp::create(
      builder, loc,
      DenseElementsAttr::get(f32Scalar, static_cast<float>(o.lr)));
}

void OptimizerAppender::give(Value value, StringRef attrName,
                             Attribute attrValue) {
  results.push_back(value);
  resultAttrs.push_back(
      builder.getDictionaryAttr(builder.getNamedAttr(attrName, attrValue)));
}

/// One parameter's update (of its master where it has one, whose 16-bit
/// copy is the new weights), and its new weights and state as results.
void OptimizerAppender::update(const ParamInfo &param, Value grad,
                               const StateIndices &indices, Value lr) {
  Location loc = func.getLoc();
  Value master = argumentAt(indices.master);
  Value weights = func.getArgument(param.argIndex);
  SmallVector<Value> state;
  for (unsigned index : indices.state)
    state.push_back(func.getArgument(index));
  OptimizerUpdateOperands operands{
      master ? master : weights,   grad,        lr,
      func.getArgument(stepIndex), batchTokens, state};
  OptimizerUpdateOpInterface update = info.build(builder, loc, operands, o);
  Value updated = update.getNewParamValue();
  if (master) {
    Value newWeights = CastOp::create(builder, loc, param.type, updated);
    give(newWeights, kParamAttrName, builder.getStringAttr(param.name));
    give(updated, kOptimizerStateAttrName, stateAttr(param, StateKind::master));
  } else {
    give(updated, kParamAttrName, builder.getStringAttr(param.name));
  }
  for (const OptimizerStateUse &use : update.getStateUses())
    give(update->getResult(use.resultIndex), kOptimizerStateAttrName,
         stateAttr(param, use.kind));
}

LogicalResult OptimizerAppender::run() {
  if (func.isExternal())
    return func.emitError(passName) << ": the step has no body";
  if (failed(readParameters()) || failed(readResults()))
    return failure();
  findOrCreateBlock();
  if (failed(addStateArguments()))
    return failure();
  // The update, in the optimizer block. The return reads the new state
  // from inside the block for now; exporting escaping values below turns
  // them into the block's results.
  builder.setInsertionPoint(block.getBody().front().getTerminator());
  give(loss, kLossAttrName, builder.getUnitAttr());
  Location loc = func.getLoc();
  Value lr = learningRate(loc);
  Value norm;
  if (o.clipNorm > 0.0) {
    // A tensor-parallel step's global norm: its split gradients' parts
    // summed over their group, its whole ones once.
    SmallVector<Value> squaredNorms;
    if (isTensorParallel(func)) {
      SmallVector<TensorSplitAttr> splits;
      for (const ParamInfo &param : params)
        splits.push_back(
            getTensorSplit(func, func.getArgument(param.argIndex)));
      squaredNorms = buildSplitSquaredNorms(builder, loc, paramGrads, splits,
                                            /*withWhole=*/true);
    }
    auto clip = ClipGradNormOp::create(builder, loc, paramGrads, squaredNorms,
                                       builder.getF64FloatAttr(o.clipNorm));
    paramGrads.assign(clip.getClipped().begin(), clip.getClipped().end());
    norm = clip.getNorm();
  }
  for (auto [param, grad, indices] :
       llvm::zip(params, paramGrads, stateIndices))
    update(param, grad, indices, lr);
  if (norm)
    give(norm, kGradNormAttrName, builder.getUnitAttr());
  setStepResults(func, results, resultAttrs);
  // Results the block had before (gradients it yielded) are dead now; the
  // update's values become its results.
  pruneUnusedResults(block.getOperation());
  exportEscapingValues(func);
  return success();
}

LogicalResult mlir::train::addOptimizer(func::FuncOp func,
                                        const OptimizerOptions &options,
                                        StringRef passName) {
  const OptimizerInfo *info = lookupOptimizer(options.optimizer);
  if (!info)
    return func.emitError(passName)
           << ": unknown optimizer '" << options.optimizer << "' (expected "
           << listOptimizerNames() << ")";
  if (info->hessianStep && !findHessianStep(func)) {
    return func.emitError(passName)
           << ": optimizer=" << info->name
           << " keeps a Hessian estimate that a Hessian step refreshes, and "
              "the module has none for @"
           << func.getSymName()
           << ": build the step with train-autodiff{optimizer=" << info->name
           << "}, which builds both from the forward";
  }
  LLVM_DEBUG(llvm::dbgs() << passName << ": @" << func.getSymName() << ": "
                          << info->name << ", " << info->states.size()
                          << " state(s) per parameter, lr " << options.lr
                          << "\n");
  return OptimizerAppender(func, *info, options, passName).run();
}

func::FuncOp mlir::train::findHessianStep(func::FuncOp step) {
  auto module = step->getParentOfType<ModuleOp>();
  if (!module)
    return {};
  for (auto func : module.getOps<func::FuncOp>())
    if (auto hessian =
            func->getAttrOfType<HessianStepAttr>(kHessianStepAttrName))
      if (hessian.getStep().getValue() == step.getSymName())
        return func;
  return {};
}

LogicalResult mlir::train::addHessianUpdate(func::FuncOp func,
                                            const OptimizerOptions &o,
                                            StringRef stepName,
                                            StringRef passName) {
  MLIRContext *context = func.getContext();
  OpBuilder builder(context);
  auto ret = cast<func::ReturnOp>(func.front().getTerminator());
  // The parameters and their gradients, as train-autodiff{optimizer=none}
  // returned them.
  llvm::StringMap<unsigned> paramIndex;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto name = func.getArgAttrOfType<StringAttr>(i, kParamAttrName))
      paramIndex[name.getValue()] = i;
  Value loss;
  SmallVector<std::pair<std::string, Value>> grads;
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    if (func.getResultAttr(i, kLossAttrName))
      loss = ret.getOperand(i);
    else if (auto name = func.getResultAttrOfType<StringAttr>(i, kGradAttrName))
      grads.push_back({name.getValue().str(), ret.getOperand(i)});
  }
  if (!loss || grads.empty())
    return func.emitError(passName)
           << ": the Hessian step returns no loss or no gradients";
  // One f32 estimate per parameter, marked as the step's h, in one
  // signature change.
  unsigned firstNew = func.getNumArguments();
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> attrs;
  for (auto &[name, grad] : grads) {
    auto type = cast<RankedTensorType>(grad.getType());
    types.push_back(
        RankedTensorType::get(type.getShape(), Float32Type::get(context)));
    attrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        kOptimizerStateAttrName, StateAttr::get(context, name, StateKind::h))));
  }
  SmallVector<unsigned> at(types.size(), firstNew);
  SmallVector<Location> locs(types.size(), func.getLoc());
  if (failed(func.insertArguments(at, types, attrs, locs)))
    return func.emitError(passName) << ": cannot extend the signature";
  // The refresh, in the step's (last) optimizer block.
  BlockOp block;
  for (Operation &op : func.front())
    if (auto candidate = dyn_cast<BlockOp>(op))
      if (candidate.getKind() == BlockKind::optimizer)
        block = candidate;
  if (!block)
    return func.emitError(passName)
           << ": the Hessian step has no optimizer block";
  builder.setInsertionPoint(block.getBody().front().getTerminator());
  SmallVector<Value> results{loss};
  SmallVector<DictionaryAttr> resultAttrs{builder.getDictionaryAttr(
      builder.getNamedAttr(kLossAttrName, builder.getUnitAttr()))};
  for (auto [index, entry] : llvm::enumerate(grads)) {
    auto &[name, grad] = entry;
    Value h = func.getArgument(firstNew + index);
    auto refresh = HessianEMAOp::create(builder, func.getLoc(), h.getType(), h,
                                        grad, builder.getF64FloatAttr(o.beta2));
    results.push_back(refresh.getNewH());
    resultAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        kOptimizerStateAttrName, StateAttr::get(context, name, StateKind::h))));
  }
  setStepResults(func, results, resultAttrs);
  pruneUnusedResults(block.getOperation());
  exportEscapingValues(func);
  func->setAttr(kHessianStepAttrName,
                HessianStepAttr::get(context,
                                     FlatSymbolRefAttr::get(context, stepName),
                                     o.hessianInterval));
  return success();
}

namespace {
struct TrainAddOptimizerPass
    : public train::impl::TrainAddOptimizerPassBase<TrainAddOptimizerPass> {
  using Base::Base;
  TRAINMEM_OPTIMIZER_PASS_OPTIONS

  void runOnOperation() override {
    ModuleOp module = getOperation();
    OptimizerOptions options = readOptimizerOptions(*this);
    if (failed(checkOptimizerOptions(options, module.getLoc(), getArgument(),
                                     /*allowNone=*/false)))
      return signalPassFailure();
    Operation *step = findMarkedStep(module, getArgument());
    if (!step)
      return signalPassFailure();
    auto func = dyn_cast<func::FuncOp>(step);
    if (!func || isLoweredStep(step)) {
      step->emitError(getArgument())
          << ": expects the tensor-level step (before "
             "convert-train-to-runtime)";
      return signalPassFailure();
    }
    if (failed(addOptimizer(func, options, getArgument())))
      return signalPassFailure();
  }
};
} // namespace
