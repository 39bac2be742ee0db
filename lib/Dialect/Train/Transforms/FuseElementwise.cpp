//===- FuseElementwise.cpp - train-fuse-elementwise -----------------------===//
//
// Chains of element-wise ops as one op each, so that a kernel reads and
// writes memory once where the chain did it per op. A chain fuses only when
// each link is used by the next alone (otherwise the intermediate is needed
// anyway). The fused ops compute what the chain computes to the bit.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-fuse-elementwise"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINFUSEELEMENTWISEPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

/// gelu(bias_add(x, b)) -> bias_gelu(x, b), when the gelu is the bias_add's
/// only user.
struct FuseBiasGelu : public OpRewritePattern<GeluOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GeluOp gelu,
                                PatternRewriter &rewriter) const override {
    // train.bias_gelu is the tanh approximation's.
    if (gelu.getExact())
      return rewriter.notifyMatchFailure(gelu, "an exact GELU");
    auto biasAdd = gelu.getInput().getDefiningOp<BiasAddOp>();
    if (!biasAdd)
      return rewriter.notifyMatchFailure(gelu, "input is not a bias_add");
    if (!biasAdd->hasOneUse())
      return rewriter.notifyMatchFailure(
          gelu, "the bias_add's sum is read elsewhere too");
    rewriter.replaceOpWithNewOp<BiasGeluOp>(
        gelu, gelu.getType(), biasAdd.getInput(), biasAdd.getBias());
    rewriter.eraseOp(biasAdd);
    return success();
  }
};

struct TrainFuseElementwisePass
    : public impl::TrainFuseElementwisePassBase<TrainFuseElementwisePass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseElementwisePatterns(patterns);
    FailureOr<uint64_t> fused = applyFusionPatterns<BiasGeluOp>(
        getOperation(), std::move(patterns), DEBUG_TYPE);
    if (failed(fused))
      return signalPassFailure();
    numFused += *fused;
    LLVM_DEBUG(llvm::dbgs() << "train-fuse-elementwise: fused " << *fused
                            << " gelu(bias_add) into train.bias_gelu\n");
  }
};

} // namespace

void populateFuseElementwisePatterns(RewritePatternSet &patterns) {
  patterns.add<FuseBiasGelu>(patterns.getContext());
}

} // namespace train
} // namespace mlir
