//===- PlanArena.cpp - train-plan-arena -----------------------------------===//
//
// Writes the static arena plan of the step into the IR (MemoryPlan.h:
// writeToIR), where a test checks it and convert-train-to-runtime lowers
// with it.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Analysis/MemoryPlan.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"
#include "trainmem/Dialect/Train/Transforms/RegionUtils.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-plan-arena"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINPLANARENAPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"
} // namespace train
} // namespace mlir

using namespace mlir;
using namespace mlir::train;

namespace {

struct TrainPlanArenaPass
    : public train::impl::TrainPlanArenaPassBase<TrainPlanArenaPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp step = lookupStep(getOperation(), function, getArgument());
    if (!step)
      return signalPassFailure();
    bool changed = castPartsToSums(step);
    const FunctionMemory *memory = getAnalysis<MemoryAnalysis>().lookup(step);
    if (!memory) {
      step.emitError(getArgument()) << ": no memory analysis of the step";
      return signalPassFailure();
    }
    if (failed(memory->checkCounts(getArgument())))
      return signalPassFailure();
    MemoryPlan plan(*memory);
    LLVM_DEBUG(llvm::dbgs()
               << "train-plan-arena: @" << step.getSymName()
               << ": device arena " << plan.getArenaBytes() << " B, host arena "
               << plan.getHostArenaBytes() << " B"
               << (changed ? ", parts cast to f32" : "") << "\n");
    plan.writeToIR(*memory);
    // Only attributes changed (but for the casts): the analysis still
    // describes the IR.
    if (!changed)
      markAllAnalysesPreserved();
  }
};
} // namespace
