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

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINZEROPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"
} // namespace train
} // namespace mlir

using namespace mlir;
using namespace mlir::train;

namespace {

/// The gradient the optimizer update reads, before clipping: through a
/// train.clip_grad_norm to the gradient it clips.
Value rawGradient(OptimizerUpdateOpInterface update) {
  Value grad = update.getGradient();
  if (auto clip = grad.getDefiningOp<ClipGradNormOp>()) {
    auto result = cast<OpResult>(grad);
    if (result.getResultNumber() < clip.getGrads().size())
      return clip.getGrads()[result.getResultNumber()];
  }
  return grad;
}

/// The op at the top of `func`'s body that `value` comes from (its
/// definition, or the region op holding it); null for an argument.
Operation *topLevelProducer(func::FuncOp func, Value value) {
  Operation *op = value.getDefiningOp();
  while (op && op->getParentOp() != func.getOperation())
    op = op->getParentOp();
  return op;
}

struct TrainZeroPass : public train::impl::TrainZeroPassBase<TrainZeroPass> {
  using Base::Base;

  void getDependentDialects(DialectRegistry &registry) const override {
    Base::getDependentDialects(registry);
    registerShardExternalModels(registry);
  }

  void runOnOperation() override;
  LogicalResult dataParallel(func::FuncOp step, StringAttr grid,
                             ArrayRef<OptimizerUpdateOpInterface> updates);
};

void TrainZeroPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto fail = [&](Location loc, const Twine &message) {
    emitError(loc, "train-zero: ") << message;
    signalPassFailure();
  };
  if (stage < 0 || stage > 3)
    return fail(module.getLoc(), "stage must be 0, 1, 2 or 3, got " +
                                     Twine(static_cast<int64_t>(stage)));
  if (ranks < 1)
    return fail(module.getLoc(), "ranks must be at least 1, got " +
                                     Twine(static_cast<int64_t>(ranks)));
  if (bucket < 1)
    return fail(module.getLoc(),
                "bucket must be at least 1 byte, got " +
                    Twine(static_cast<int64_t>(bucket)));
  if (prefetch < 0)
    return fail(module.getLoc(), "prefetch must be >= 0, got " +
                                     Twine(static_cast<int64_t>(prefetch)));
  func::FuncOp step = lookupStep(module, function, getArgument());
  if (!step)
    return signalPassFailure();
  if (auto zero = step->getAttrOfType<ZeroAttr>(kZeroAttrName))
    return fail(step.getLoc(),
                "@" + step.getSymName() +
                    " is partitioned already (stage " +
                    Twine(zero.getStage()) + ", " + Twine(zero.getRanks()) +
                    " ranks); run train-zero once");
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
  // One rank is the step as it is.
  if (ranks == 1)
    return;
  if (stage > 0)
    return fail(step.getLoc(),
                "stage " + Twine(static_cast<int64_t>(stage)) +
                    " is not built yet (stage 0 is; docs/Zero.md)");

  // The process grid: one axis of `ranks` data-parallel processes.
  OpBuilder builder(module.getBodyRegion());
  builder.setInsertionPointToStart(module.getBody());
  auto grid = shard::GridOp::create(builder, module.getLoc(), "dp",
                                    ArrayRef<int64_t>{ranks});
  SymbolTable symbols(module);
  symbols.insert(grid); // renames it when "dp" is taken
  if (failed(dataParallel(step, grid.getSymNameAttr(), updates)))
    return signalPassFailure();
  // Prefetch is stage 3's; the attribute keeps what applies.
  step->setAttr(kZeroAttrName,
                ZeroAttr::get(&getContext(), stage, ranks, bucket,
                              stage == 3 ? int64_t(prefetch) : int64_t(0)));
}

LogicalResult
TrainZeroPass::dataParallel(func::FuncOp step, StringAttr grid,
                            ArrayRef<OptimizerUpdateOpInterface> updates) {
  // The gradients, in the order the backward produces them.
  llvm::SetVector<Value> gradients;
  for (OptimizerUpdateOpInterface update : updates)
    gradients.insert(rawGradient(update));
  llvm::DenseMap<Operation *, unsigned> position;
  for (Operation &op : step.front())
    position[&op] = position.size();
  SmallVector<std::pair<unsigned, Value>> produced;
  for (Value gradient : gradients) {
    Operation *producer = topLevelProducer(step, gradient);
    if (!producer)
      return step.emitError("train-zero: a gradient of @")
             << step.getSymName()
             << " is an argument of the step, not computed by it";
    produced.push_back({position[producer], gradient});
  }
  llvm::stable_sort(produced, [](const auto &a, const auto &b) {
    return a.first < b.first;
  });

  // Buckets of `bucket` bytes; each reduced right after the op that
  // produces its last gradient.
  SmallVector<SmallVector<Value>> buckets(1);
  uint64_t filled = 0;
  for (auto [index, gradient] : produced) {
    buckets.back().push_back(gradient);
    filled += getTensorBytes(gradient.getType());
    if (filled >= static_cast<uint64_t>(bucket)) {
      buckets.emplace_back();
      filled = 0;
    }
  }
  if (buckets.back().empty())
    buckets.pop_back();

  OpBuilder builder(step.getContext());
  SmallVector<shard::GridAxis> axes{0};
  for (auto [index, members] : llvm::enumerate(buckets)) {
    Operation *last = topLevelProducer(step, members.back());
    builder.setInsertionPointAfter(last);
    for (Value gradient : members) {
      auto reduced = shard::AllReduceOp::create(
          builder, gradient.getLoc(), gradient, grid.getValue(), axes,
          shard::ReductionKind::Average);
      reduced->setAttr(kBucketAttrName,
                       builder.getI64IntegerAttr(static_cast<int64_t>(index)));
      gradient.replaceAllUsesExcept(reduced.getResult(), reduced);
    }
  }
  return success();
}

} // namespace
