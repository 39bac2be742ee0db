//===- MaterializeLayouts.cpp - row-major copies of strided views ---------===//
//
// Kernels read their operands row-major unless the op says otherwise
// (StridedOperandsOpInterface); a strided view read by one is copied first.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Analysis/Layout.h"
#include "trainmem/Dialect/Train/IR/TrainInterfaces.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-materialize-layouts"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINMATERIALIZELAYOUTSPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"
} // namespace train
} // namespace mlir

using namespace mlir;
using namespace mlir::train;

namespace {

struct TrainMaterializeLayoutsPass
    : public train::impl::TrainMaterializeLayoutsPassBase<
          TrainMaterializeLayoutsPass> {
  void runOnOperation() override {
    // The uses to copy are found first: a copy changes no other operand's
    // layout (it is row-major, and views of it are made before it).
    SmallVector<OpOperand *> strided;
    getOperation().walk([&](CostOpInterface op) {
      auto reader = dyn_cast<StridedOperandsOpInterface>(op.getOperation());
      for (OpOperand &use : op->getOpOperands()) {
        if (!isa<RankedTensorType>(use.get().getType()) ||
            (reader && reader.readsStridedOperand(use.getOperandNumber())))
          continue;
        if (!isContiguous(use.get()))
          strided.push_back(&use);
      }
    });
    for (OpOperand *use : strided) {
      LLVM_DEBUG(llvm::dbgs() << "train-materialize-layouts: a copy of "
                              << "operand " << use->getOperandNumber()
                              << " of '" << use->getOwner()->getName()
                              << "' at " << use->getOwner()->getLoc()
                              << " (a strided view it cannot read)\n");
      OpBuilder builder(use->getOwner());
      Value view = use->get();
      use->set(ReshapeOp::create(builder, use->getOwner()->getLoc(),
                                 view.getType(), view));
      ++numCopies;
    }
  }
};

} // namespace
