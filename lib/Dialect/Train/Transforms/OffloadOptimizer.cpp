//===- OffloadOptimizer.cpp - train-offload-optimizer ---------------------===//
//
// Marks the step's optimizer state as living in host memory (and, with
// what=states+update, its updates as running there): a typed
// #train.space<host> on the state arguments and results and on the updates.
// The memory analysis reads the marks (device and host memory apart, the
// bytes that cross); nothing else about the step changes.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"
#include "trainmem/Dialect/Train/Transforms/StepPhases.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-offload-optimizer"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINOFFLOADOPTIMIZERPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

struct TrainOffloadOptimizerPass
    : impl::TrainOffloadOptimizerPassBase<TrainOffloadOptimizerPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func = lookupStep(module, "", "train-offload-optimizer");
    if (!func || failed(checkStepPhases(func, getArgument())))
      return signalPassFailure();
    auto host = SpaceAttr::get(&getContext(), MemorySpace::host);
    // Every argument's and result's attributes set at once (one setArgAttr
    // each would build an array of all of them per call).
    auto withSpace = [&](DictionaryAttr attrs) {
      NamedAttrList list(attrs);
      list.set(kMemorySpaceAttrName, host);
      return list.getDictionary(&getContext());
    };
    unsigned states = 0;
    SmallVector<DictionaryAttr> argAttrs, resultAttrs;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      DictionaryAttr attrs = func.getArgAttrDict(i);
      if (func.getArgAttrOfType<StateAttr>(i, kOptimizerStateAttrName)) {
        attrs = withSpace(attrs);
        ++states;
      }
      argAttrs.push_back(attrs ? attrs : DictionaryAttr::get(&getContext()));
    }
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      DictionaryAttr attrs = func.getResultAttrDict(i);
      if (func.getResultAttrOfType<StateAttr>(i, kOptimizerStateAttrName))
        attrs = withSpace(attrs);
      resultAttrs.push_back(attrs ? attrs
                                  : DictionaryAttr::get(&getContext()));
    }
    LLVM_DEBUG(llvm::dbgs()
               << "train-offload-optimizer: @" << func.getSymName() << ": "
               << states << " state arguments to host memory\n");
    func.setAllArgAttrs(argAttrs);
    func.setAllResultAttrs(resultAttrs);
    if (states == 0) {
      func.emitError("train-offload-optimizer: @")
          << func.getSymName()
          << " has no optimizer state to offload (no argument marked "
          << kOptimizerStateAttrName
          << "): give it an optimizer with state (AdamW, Lion, SGD with "
             "momentum)";
      return signalPassFailure();
    }
    if (gradients == OffloadGradients::host &&
        what != OffloadWhat::statesAndUpdate) {
      func.emitError("train-offload-optimizer: gradients=host sums them "
                     "where the updates read them: give what=states+update");
      return signalPassFailure();
    }
    if (what != OffloadWhat::statesAndUpdate)
      return;
    unsigned updates = 0;
    func.walk([&](OptimizerUpdateOpInterface update) {
      update->setAttr(kMemorySpaceAttrName, host);
      ++updates;
      // The refreshed 16-bit weight is cast there too, from the host's
      // master: only it comes back.
      for (Operation *user : update.getNewParamValue().getUsers())
        if (isa<CastOp>(user))
          user->setAttr(kMemorySpaceAttrName, host);
    });
    LLVM_DEBUG(llvm::dbgs() << "train-offload-optimizer: " << updates
                            << " updates run on the host\n");
    if (updates == 0) {
      func.emitError("train-offload-optimizer: what=states+update, but @")
          << func.getSymName() << " has no optimizer update to run on the host";
      return signalPassFailure();
    }
    if (gradients == OffloadGradients::host &&
        failed(sumGradientsOnHost(func, host)))
      return signalPassFailure();
  }

  /// gradients=host: the micro-batch loop's sums the host updates read, in
  /// host memory (host_sums), and the ops between them (clipping, loss
  /// unscaling: tied to the sums) run there too.
  LogicalResult sumGradientsOnHost(func::FuncOp func, SpaceAttr host) {
    llvm::MapVector<AccumulateOp, SmallVector<bool>> loops;
    llvm::SetVector<Operation *> between;
    WalkResult walked = func.walk([&](OptimizerUpdateOpInterface update) {
      Value value = update.getGradient();
      // Back through the ops that update the gradients in place.
      while (auto result = dyn_cast<OpResult>(value)) {
        Operation *def = result.getOwner();
        if (auto loop = dyn_cast<AccumulateOp>(def)) {
          if (loop.getGroups().value_or(1) > 1) {
            loop.emitOpError("train-offload-optimizer: gradients=host sums "
                             "each micro-batch in host memory as the rolled "
                             "loop runs; this loop is summed in groups "
                             "(unrolled): use train-grad-accum without "
                             "groups, or gradients=device");
            return WalkResult::interrupt();
          }
          SmallVector<bool> &flags = loops[loop];
          flags.resize(loop.getNumResults(), false);
          flags[result.getResultNumber()] = true;
          return WalkResult::advance();
        }
        // A collective reduces on the device (and is tied to its operand
        // too): not moved.
        bool collective = isa<shard::ShardDialect>(def->getDialect());
        auto tied = dyn_cast<TiedOpInterface>(def);
        std::optional<unsigned> operand =
            tied && !collective
                ? tied.getTiedResultOperandIndex(result.getResultNumber())
                : std::nullopt;
        // Loss scaling's unscaled gradient i is gradient i over the scale
        // (a new f32 tensor, not tied).
        if (auto unscale = dyn_cast<UnscaleGradientsOp>(def);
            unscale && result.getResultNumber() < unscale.getGrads().size())
          operand = unscale.getGradsMutable()[result.getResultNumber()]
                        .getOperandNumber();
        if (!operand) {
          update.emitOpError("train-offload-optimizer: gradients=host sums "
                             "the micro-batches' gradients in host memory, "
                             "but this update's gradient comes from '")
              << def->getName() << "', not from a micro-batch loop"
              << (collective
                      ? " (a collective after the loop, which runs on the "
                        "device: train-zero stages 2-3 reduce each "
                        "micro-batch inside the loop and compose with "
                        "gradients=host; stages 0-1 reduce the sums after "
                        "it)"
                      : " (accumulate first, train-grad-accum steps > 1, "
                        "and keep its loop rolled)");
          return WalkResult::interrupt();
        }
        between.insert(def);
        value = def->getOperand(*operand);
      }
      update.emitOpError("train-offload-optimizer: gradients=host sums the "
                         "micro-batches' gradients in host memory, but this "
                         "update's gradient is an argument of the step, not "
                         "a micro-batch loop's sum (accumulate first, "
                         "train-grad-accum steps > 1, and keep its loop "
                         "rolled)");
      return WalkResult::interrupt();
    });
    if (walked.wasInterrupted())
      return failure();
    for (Operation *op : between)
      op->setAttr(kMemorySpaceAttrName, host);
    for (auto &[loop, flags] : loops)
      loop.setHostSumsAttr(DenseBoolArrayAttr::get(&getContext(), flags));
    LLVM_DEBUG(llvm::dbgs() << "train-offload-optimizer: " << loops.size()
                            << " micro-batch loops sum on the host, "
                            << between.size() << " ops between run there\n");
    return success();
  }
};

} // namespace
} // namespace train
} // namespace mlir
