//===- FuseAttention.cpp - train-fuse-attention ---------------------------===//
//
// One rewrite pattern, rooted at the product of the probabilities with the
// values: it walks the chain back (scale of q·kᵀ, softmax, an optional
// dropout) and replaces it by train.attention when every link is used only
// by the next one (otherwise the score tensor is needed anyway, and fusing
// would compute it twice).
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_TRAINFUSEATTENTIONPASS
#include "trainmem/Dialect/Train/Transforms/Passes.h.inc"

namespace {

/// `value`'s defining op when it is an OpT whose results are used once, by
/// `user`.
template <typename OpT> OpT definedOnlyFor(Value value, Operation *user) {
  auto op = value.getDefiningOp<OpT>();
  if (!op)
    return OpT();
  for (Value result : op->getResults())
    for (Operation *other : result.getUsers())
      if (other != user)
        return OpT();
  return op;
}

struct FuseAttentionPattern : public OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MatmulOp pv,
                                PatternRewriter &rewriter) const override {
    if (pv.getTransposeLhs() || pv.getTransposeRhs())
      return rewriter.notifyMatchFailure(pv, "p·v has a transpose");
    Value probabilities = pv.getLhs();
    DropoutOp dropout = definedOnlyFor<DropoutOp>(probabilities, pv);
    Operation *softmaxUser = pv;
    if (dropout) {
      if (dropout.getResult() != probabilities)
        return rewriter.notifyMatchFailure(pv, "reads the dropout's mask");
      probabilities = dropout.getInput();
      softmaxUser = dropout;
    }
    auto softmax = definedOnlyFor<SoftmaxOp>(probabilities, softmaxUser);
    if (!softmax)
      return rewriter.notifyMatchFailure(pv, "no softmax before it");
    auto scale = definedOnlyFor<ScaleOp>(softmax.getInput(), softmax);
    if (!scale)
      return rewriter.notifyMatchFailure(pv, "no scale of the scores");
    auto qk = definedOnlyFor<MatmulOp>(scale.getInput(), scale);
    if (!qk || qk.getTransposeLhs() || !qk.getTransposeRhs())
      return rewriter.notifyMatchFailure(pv, "scores are not q·kᵀ");
    double factor = scale.getFactor().convertToDouble();
    if (!(factor > 0.0))
      return rewriter.notifyMatchFailure(pv, "scale is not positive");

    Value q = qk.getLhs(), k = qk.getRhs(), v = pv.getRhs();
    auto qType = cast<RankedTensorType>(q.getType());
    auto kType = cast<RankedTensorType>(k.getType());
    auto vType = cast<RankedTensorType>(v.getType());
    auto outType = cast<RankedTensorType>(pv.getResult().getType());
    if (qType.getElementType() != kType.getElementType() ||
        qType.getElementType() != vType.getElementType())
      return rewriter.notifyMatchFailure(pv, "mixed element types");
    Location loc = pv.getLoc();
    // [B, H, S, D] as it is; grouped queries [B, KVH, G, S, D] against
    // [B, KVH, 1, S', D] reshaped to heads.
    if (qType.getRank() == 4) {
      if (kType.getRank() != 4 || vType.getRank() != 4 ||
          kType.getShape().take_front(2) != qType.getShape().take_front(2) ||
          vType.getShape().take_front(2) != qType.getShape().take_front(2))
        return rewriter.notifyMatchFailure(pv, "heads do not line up");
    } else if (qType.getRank() == 5) {
      ArrayRef<int64_t> qs = qType.getShape(), ks = kType.getShape(),
                        vs = vType.getShape();
      if (kType.getRank() != 5 || vType.getRank() != 5 || ks[2] != 1 ||
          vs[2] != 1 || ks.take_front(2) != qs.take_front(2) ||
          vs.take_front(2) != qs.take_front(2))
        return rewriter.notifyMatchFailure(pv, "not grouped-query heads");
      auto heads = [&](RankedTensorType type, int64_t group) {
        ArrayRef<int64_t> s = type.getShape();
        return RankedTensorType::get({s[0], s[1] * group, s[3], s[4]},
                                     type.getElementType());
      };
      q = ReshapeOp::create(rewriter, loc, heads(qType, qs[2]), q);
      k = ReshapeOp::create(rewriter, loc, heads(kType, 1), k);
      v = ReshapeOp::create(rewriter, loc, heads(vType, 1), v);
    } else {
      return rewriter.notifyMatchFailure(pv, "not rank 4 or 5");
    }

    // The model reads the output heads-last ([B, S, H, Dv]) through a
    // transpose (after a reshape to heads, for grouped queries): the op
    // writes that order itself, so the reshape after it is a view and the
    // backward keeps no second copy of the output.
    TransposeOp heads;
    Operation *user = pv->hasOneUse() ? *pv->getUsers().begin() : nullptr;
    if (auto reshape = dyn_cast_or_null<ReshapeOp>(user);
        reshape && qType.getRank() == 5 && reshape->hasOneUse() &&
        cast<RankedTensorType>(reshape.getResult().getType()).getShape() ==
            ArrayRef<int64_t>{outType.getDimSize(0),
                              outType.getDimSize(1) * outType.getDimSize(2),
                              outType.getDimSize(3), outType.getDimSize(4)})
      user = *reshape->getUsers().begin();
    if (auto transpose = dyn_cast_or_null<TransposeOp>(user))
      if (transpose.getPermutation() == ArrayRef<int64_t>{0, 2, 1, 3})
        heads = transpose;

    auto attention = AttentionOp::create(
        rewriter, loc, q, k, v, dropout ? dropout.getKey() : Value(),
        dropout ? dropout.getPart() : Value(), scale.getFactorAttr(),
        softmax.getCausalAttr(),
        heads ? rewriter.getUnitAttr() : UnitAttr(),
        dropout ? dropout.getRateAttr() : rewriter.getF64FloatAttr(0.0),
        dropout ? dropout.getSeedAttr() : rewriter.getI64IntegerAttr(0),
        dropout ? dropout.getOffsetAttr() : rewriter.getI64IntegerAttr(0),
        dropout ? dropout.getFirstAttr() : rewriter.getI64IntegerAttr(0),
        dropout ? dropout.getPartElementsAttr()
                : rewriter.getI64IntegerAttr(0),
        dropout ? dropout.getRankElementsAttr()
                : rewriter.getI64IntegerAttr(0));
    Value output = attention.getOutput();
    if (heads) {
      // The transpose (and the reshape before it) go with the product.
      rewriter.replaceOp(heads, output);
      Operation *between = pv->hasOneUse() ? *pv->getUsers().begin() : nullptr;
      if (between && between != heads.getOperation() &&
          between->use_empty())
        rewriter.eraseOp(between);
      rewriter.eraseOp(pv);
    } else {
      if (output.getType() != outType)
        output = ReshapeOp::create(rewriter, loc, outType, output);
      rewriter.replaceOp(pv, output);
    }
    // The chain has no other users: it goes with its product.
    if (dropout)
      rewriter.eraseOp(dropout);
    rewriter.eraseOp(softmax);
    rewriter.eraseOp(scale);
    rewriter.eraseOp(qk);
    return success();
  }
};

struct TrainFuseAttentionPass
    : public impl::TrainFuseAttentionPassBase<TrainFuseAttentionPass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseAttentionPatterns(patterns);
    uint64_t before = 0, after = 0;
    getOperation()->walk([&](AttentionOp) { ++before; });
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    getOperation()->walk([&](AttentionOp) { ++after; });
    numFused += after - before;
    // After train-autodiff the backward reads the scores: nothing matches.
    // Say so instead of leaving the step as it was without a word.
    if (after == before) {
      Operation *backward = nullptr;
      getOperation()->walk([&](BlockOp block) {
        if (block.getBackward()) {
          backward = block;
          return WalkResult::interrupt();
        }
        return WalkResult::advance();
      });
      if (backward) {
        bool decomposed = false;
        getOperation()->walk([&](SoftmaxOp) { decomposed = true; });
        if (decomposed)
          emitWarning(backward->getLoc(),
                      "train-fuse-attention: fused nothing: the step is "
                      "differentiated already (its backward reads the "
                      "attention scores); run train-fuse-attention on the "
                      "forward, before train-autodiff");
      }
    }
  }
};

} // namespace

void populateFuseAttentionPatterns(RewritePatternSet &patterns) {
  patterns.add<FuseAttentionPattern>(patterns.getContext());
}

} // namespace train
} // namespace mlir
