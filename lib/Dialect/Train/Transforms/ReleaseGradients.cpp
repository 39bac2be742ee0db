//===- ReleaseGradients.cpp - train-release-gradients ---------------------===//
//
// Each update runs as soon as its gradient is complete: the optimizer
// block is dissolved, every op of it moves to the earliest point of the
// step's top level where its operands are defined (an op that only moved
// ops read: to the point of the first of them; program order among the
// moved ops kept), and each run of moved ops becomes a train.block
// optimizer of its own. The ops and their operands are unchanged, so the
// step computes the same bits; only the gradients' lifetimes shrink.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Dialect/Train/Transforms/StepPhases.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-release-gradients"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINRELEASEGRADIENTSPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"
} // namespace train
} // namespace mlir

using namespace mlir;
using namespace mlir::train;

namespace {

/// Why the updates of `step` cannot run before its backward ends, or "".
std::string whyNotReleasable(func::FuncOp step, Operation *&at) {
  at = step;
  std::string why;
  step.walk([&](Operation *op) {
    if (isa<ClipGradNormOp>(op))
      why = "the step clips the global gradient norm, which reads every "
            "gradient before the first update: release with clip-norm=0, "
            "or clip without releasing";
    if (why.empty())
      return WalkResult::advance();
    at = op;
    return WalkResult::interrupt();
  });
  return why;
}

} // namespace

namespace {

/// Where each of `moved` (the optimizer blocks' ops, now at the top level
/// of `body`) goes: the top-level op it follows, null for the step's start.
llvm::DenseMap<Operation *, Operation *>
placeReleased(Block &body, ArrayRef<Operation *> moved) {
  // Each op's earliest point: after the last top-level op defining one of
  // its operands (or one of the operands of the ops nested in it), or
  // after that point of a moved op it reads. Null: the step's start.
  llvm::DenseMap<Operation *, unsigned> position;
  for (auto [index, op] : llvm::enumerate(body))
    position[&op] = index;
  auto later = [&](Operation *a, Operation *b) {
    if (!a || !b)
      return a ? a : b;
    return position.lookup(a) < position.lookup(b) ? b : a;
  };
  llvm::DenseSet<Operation *> isMoved(moved.begin(), moved.end());
  llvm::DenseMap<Operation *, Operation *> earliest;
  for (Operation *op : moved) {
    Operation *anchor = nullptr;
    op->walk([&](Operation *nested) {
      for (Value operand : nested->getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (!def)
          continue; // an argument: defined from the start
        def = body.findAncestorOpInBlock(*def);
        if (!def || def == op)
          continue;
        anchor =
            later(anchor, isMoved.contains(def) ? earliest.lookup(def) : def);
      }
    });
    earliest[op] = anchor;
  }
  // An op whose results only moved ops read waits for the first of them
  // (the slice of a parameter, a step count: not live through the whole
  // backward); the others (the updates, what follows them) run at their
  // earliest point.
  llvm::DenseMap<Operation *, Operation *> placedAt;
  for (Operation *op : llvm::reverse(moved)) {
    std::optional<Operation *> firstUse;
    bool onlyMovedUsers = !op->use_empty();
    for (Operation *user : op->getUsers()) {
      Operation *top = body.findAncestorOpInBlock(*user);
      if (!top || !isMoved.contains(top)) {
        onlyMovedUsers = false;
        break;
      }
      Operation *userAt = placedAt.lookup(top);
      if (!firstUse || later(*firstUse, userAt) == *firstUse)
        firstUse = userAt;
    }
    Operation *at = earliest.lookup(op);
    placedAt[op] = onlyMovedUsers && firstUse ? later(at, *firstUse) : at;
  }
  return placedAt;
}

struct TrainReleaseGradientsPass
    : public train::impl::TrainReleaseGradientsPassBase<
          TrainReleaseGradientsPass> {
  using Base::Base;

  void runOnOperation() override;
  LogicalResult release(func::FuncOp step);
};

/// Moves every op of the step's optimizer blocks to its earliest point and
/// wraps each run of them in an optimizer block.
LogicalResult TrainReleaseGradientsPass::release(func::FuncOp step) {
  Block &body = step.front();
  SmallVector<BlockOp> optimizerBlocks;
  for (Operation &op : body)
    if (auto block = dyn_cast<BlockOp>(op);
        block && block.getKind() == BlockKind::optimizer)
      optimizerBlocks.push_back(block);
  bool updates = false;
  for (BlockOp block : optimizerBlocks)
    block.walk([&](OptimizerUpdateOpInterface) { updates = true; });
  if (!updates)
    return step.emitError("train-release-gradients: @")
           << step.getSymName()
           << " updates no parameter (build it with an optimizer: "
              "train-autodiff, or train-add-optimizer)";
  // The blocks' ops, at the top level in their order.
  SmallVector<Operation *> moved;
  for (BlockOp block : optimizerBlocks) {
    for (Operation &op : block.getBody().front().without_terminator())
      moved.push_back(&op);
    inlineRegionOp(block.getOperation());
  }
  llvm::DenseMap<Operation *, Operation *> placedAt =
      placeReleased(body, moved);
  llvm::DenseSet<Operation *> isMoved(moved.begin(), moved.end());
  // In program order, each after the ops moved to the same point before it.
  llvm::DenseMap<Operation *, Operation *> lastAt;
  for (Operation *op : moved) {
    Operation *anchor = placedAt.lookup(op);
    Operation *&last = lastAt[anchor];
    if (last)
      op->moveAfter(last);
    else if (anchor)
      op->moveAfter(anchor);
    else
      op->moveBefore(&body.front());
    last = op;
    if (isa<OptimizerUpdateOpInterface>(op)) {
      ++numReleased;
      LLVM_DEBUG({
        llvm::dbgs() << "train-release-gradients: '" << op->getName() << "' at "
                     << op->getLoc() << " runs after ";
        if (anchor)
          llvm::dbgs() << "'" << anchor->getName() << "' at "
                       << anchor->getLoc() << "\n";
        else
          llvm::dbgs() << "nothing (first in the step)\n";
      });
    }
  }
  // Runs of moved ops become optimizer blocks.
  SmallVector<SmallVector<Operation *>> runs;
  for (Operation &op : body) {
    if (!isMoved.contains(&op))
      continue;
    if (runs.empty() || !isMoved.contains(op.getPrevNode()))
      runs.emplace_back();
    runs.back().push_back(&op);
  }
  OpBuilder builder(step.getContext());
  for (ArrayRef<Operation *> run : runs) {
    builder.setInsertionPoint(run.front());
    auto block = BlockOp::create(
        builder, run.front()->getLoc(), TypeRange{},
        BlockKindAttr::get(step.getContext(), BlockKind::optimizer),
        IntegerAttr(), UnitAttr());
    Block *inner = builder.createBlock(&block.getBody());
    YieldOp::create(builder, run.front()->getLoc());
    for (Operation *op : run)
      op->moveBefore(inner->getTerminator());
  }
  exportEscapingValues(step);
  return success();
}

void TrainReleaseGradientsPass::runOnOperation() {
  func::FuncOp step = lookupStep(getOperation(), function, getArgument());
  if (!step || failed(checkStepPhases(step, getArgument())))
    return signalPassFailure();
  Operation *at = nullptr;
  std::string why = whyNotReleasable(step, at);
  if (!why.empty()) {
    at->emitError("train-release-gradients: ") << why;
    return signalPassFailure();
  }
  if (failed(release(step)))
    return signalPassFailure();
}

} // namespace
