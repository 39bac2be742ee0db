//===- RegionUtils.cpp - editing train.block / train.remat regions --------===//

#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::train;

static YieldOp getYield(Operation *regionOp) {
  return cast<YieldOp>(regionOp->getRegion(0).front().getTerminator());
}

/// A copy of `op` (block or remat, same properties) with `types` as result
/// types, taking over its body; `op` itself stays for the caller to replace.
static Operation *rebuildWithResults(Operation *op, TypeRange types) {
  OpBuilder builder(op);
  OperationState state(op->getLoc(), op->getName());
  state.addTypes(types);
  // The arena plan's offsets are per result: with other results they no
  // longer apply (the lowering then asks for a new plan).
  for (NamedAttribute attr : op->getDiscardableAttrs())
    if (attr.getName() != kPlanOffsetsAttrName)
      state.addAttribute(attr.getName(), attr.getValue());
  state.propertiesAttr = op->getPropertiesAsAttribute();
  state.addRegion();
  Operation *replacement = builder.create(state);
  replacement->getRegion(0).takeBody(op->getRegion(0));
  return replacement;
}

void mlir::train::exportEscapingValues(Operation *regionOp) {
  Block &body = regionOp->getRegion(0).front();
  for (Operation &op : llvm::make_early_inc_range(body))
    if (isTransparentRegionOp(&op))
      exportEscapingValues(&op);

  auto isOutside = [&](OpOperand &use) {
    return !regionOp->isProperAncestor(use.getOwner());
  };
  YieldOp yield = getYield(regionOp);
  unsigned numOld = regionOp->getNumResults();
  for (auto [index, yielded] : llvm::enumerate(yield.getValues()))
    if (yielded.getParentBlock() == &body)
      yielded.replaceUsesWithIf(regionOp->getResult(index), isOutside);

  SmallVector<Value> escaping;
  for (Operation &op : body)
    for (Value result : op.getResults())
      if (llvm::any_of(result.getUses(), isOutside))
        escaping.push_back(result);
  if (escaping.empty())
    return;

  yield.getValuesMutable().append(escaping);
  SmallVector<Type> types(regionOp->getResultTypes());
  for (Value value : escaping)
    types.push_back(value.getType());
  Operation *replacement = rebuildWithResults(regionOp, types);
  for (auto [index, value] : llvm::enumerate(escaping))
    value.replaceUsesWithIf(
        replacement->getResult(numOld + index), [&](OpOperand &use) {
          return !replacement->isProperAncestor(use.getOwner());
        });
  regionOp->replaceAllUsesWith(
      replacement->getResults().take_front(numOld));
  regionOp->erase();
}

/// Calls `fn` on each outermost transparent region op in `block`, looking
/// through the ops with their own scope (a train.accumulate loop body).
static void forEachOutermostRegionOp(Block &block,
                                     function_ref<void(Operation *)> fn) {
  for (Operation &op : llvm::make_early_inc_range(block)) {
    if (isTransparentRegionOp(&op)) {
      fn(&op);
      continue;
    }
    for (Region &region : op.getRegions())
      for (Block &inner : region)
        forEachOutermostRegionOp(inner, fn);
  }
}

void mlir::train::exportEscapingValues(func::FuncOp func) {
  forEachOutermostRegionOp(func.front(),
                           [](Operation *op) { exportEscapingValues(op); });
}

void mlir::train::pruneUnusedResults(Operation *regionOp) {
  for (Operation &op :
       llvm::make_early_inc_range(regionOp->getRegion(0).front()))
    if (isTransparentRegionOp(&op))
      pruneUnusedResults(&op);
  if (llvm::all_of(regionOp->getResults(),
                   [](Value result) { return !result.use_empty(); }))
    return;
  YieldOp yield = getYield(regionOp);
  SmallVector<Value> kept;
  SmallVector<Type> types;
  SmallVector<unsigned> keptIndices;
  for (auto [index, result] : llvm::enumerate(regionOp->getResults()))
    if (!result.use_empty()) {
      kept.push_back(yield.getValues()[index]);
      types.push_back(result.getType());
      keptIndices.push_back(index);
    }
  yield.getValuesMutable().assign(kept);
  Operation *replacement = rebuildWithResults(regionOp, types);
  for (auto [newIndex, oldIndex] : llvm::enumerate(keptIndices))
    regionOp->getResult(oldIndex).replaceAllUsesWith(
        replacement->getResult(newIndex));
  regionOp->erase();
}

void mlir::train::setStepResults(func::FuncOp func, ArrayRef<Value> results,
                                 ArrayRef<DictionaryAttr> resultAttrs) {
  assert(results.size() == resultAttrs.size() && "one marker per result");
  auto ret = cast<func::ReturnOp>(func.front().getTerminator());
  ret.getOperandsMutable().assign(results);
  func.setFunctionType(FunctionType::get(func.getContext(),
                                         func.getArgumentTypes(),
                                         ValueRange(results).getTypes()));
  func.setAllResultAttrs(resultAttrs);
}

void mlir::train::pruneUnusedResults(func::FuncOp func) {
  forEachOutermostRegionOp(func.front(),
                           [](Operation *op) { pruneUnusedResults(op); });
}

RematOp mlir::train::wrapInRemat(ArrayRef<Operation *> ops) {
  assert(!ops.empty() && "nothing to wrap");
  OpBuilder builder(ops.front());
  auto remat = RematOp::create(builder, ops.front()->getLoc(), TypeRange{});
  Block *body = builder.createBlock(&remat.getBody());
  for (Operation *op : ops)
    op->moveBefore(body, body->end());
  builder.setInsertionPointToEnd(body);
  YieldOp::create(builder, ops.front()->getLoc());
  // Export what the wrapped ops define and later ops use.
  Operation *anchor = remat->getNextNode();
  exportEscapingValues(remat);
  return cast<RematOp>(anchor ? anchor->getPrevNode()
                              : &remat->getBlock()->back());
}

void mlir::train::inlineRegionOp(Operation *regionOp) {
  IRRewriter rewriter(regionOp->getContext());
  YieldOp yield = getYield(regionOp);
  SmallVector<Value> yielded(yield.getValues());
  rewriter.eraseOp(yield);
  rewriter.inlineBlockBefore(&regionOp->getRegion(0).front(), regionOp);
  rewriter.replaceOp(regionOp, yielded);
}

FailureOr<SmallVector<func::FuncOp>>
mlir::train::lookupForwards(ModuleOp module, StringRef passName) {
  SmallVector<func::FuncOp> forwards;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func->hasAttr(kStepAttrName)) {
      func.emitError(passName)
          << ": runs on the forward pass (before train-autodiff); @"
          << func.getSymName() << " is already a training step";
      return failure();
    }
    bool hasParams = false;
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      hasParams |= static_cast<bool>(func.getArgAttr(i, kParamAttrName));
    if (hasParams)
      forwards.push_back(func);
  }
  return forwards;
}

func::FuncOp mlir::train::lookupStep(ModuleOp module, StringRef name,
                                     StringRef passName) {
  if (name.empty()) {
    Operation *marked = findMarkedStep(module, passName);
    if (!marked)
      return nullptr;
    auto func = dyn_cast<func::FuncOp>(marked);
    if (!func || func.isExternal()) {
      emitError(marked->getLoc())
          << passName << ": the step @"
          << SymbolTable::getSymbolName(marked).getValue()
          << " is not a func.func with a body (already lowered?)";
      return nullptr;
    }
    return func;
  }
  auto func = module.lookupSymbol<func::FuncOp>(name);
  if (func && !func.isExternal())
    return func;
  InFlightDiagnostic diag = emitError(module.getLoc())
                            << passName << ": no function @" << name;
  for (auto other : module.getOps<func::FuncOp>())
    if (other->hasAttr(kStepAttrName)) {
      diag << "; the training step here is @" << other.getSymName()
           << " (give the pass function=" << other.getSymName() << ")";
      return nullptr;
    }
  diag << " (run train-autodiff first)";
  return nullptr;
}

Operation *mlir::train::findAccumulation(func::FuncOp func) {
  Operation *found = nullptr;
  func.walk([&](Operation *op) {
    if (!isa<AccumulateOp, SliceRowsOp>(op))
      return WalkResult::advance();
    found = op;
    return WalkResult::interrupt();
  });
  return found;
}

bool mlir::train::castPartsToSums(func::FuncOp step) {
  bool changed = false;
  step.walk([&](AccumulateOp loop) {
    Block &body = loop.getBody().front();
    auto yield = cast<YieldOp>(body.getTerminator());
    for (auto [index, part] : llvm::enumerate(yield.getValues())) {
      Type sumType = loop.getResult(index).getType();
      if (part.getType() == sumType)
        continue;
      Operation *def = part.getDefiningOp();
      Operation *anchor = def ? body.findAncestorOpInBlock(*def) : nullptr;
      OpBuilder builder(yield);
      if (anchor)
        builder.setInsertionPointAfter(anchor);
      Value inF32 = CastOp::create(builder, part.getLoc(), sumType, part);
      yield->setOperand(index, inF32);
      changed = true;
    }
  });
  return changed;
}
