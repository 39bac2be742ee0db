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
  }
};

} // namespace
} // namespace train
} // namespace mlir
