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

#include "trainmem/Debug/Debug.h"

#define DEBUG_TYPE "train-fuse-attention"

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

/// The ops of an unfused attention, from the scores to the product with
/// the values: qk = q·kᵀ, scale, softmax, an optional dropout, pv = p·v.
struct AttentionChain {
  MatmulOp qk;
  ScaleOp scale;
  SoftmaxOp softmax;
  DropoutOp dropout;
  MatmulOp pv;
};

/// Walks back from `pv` to the scores; fails (with the reason) when a link
/// is missing or used by anything but the next link.
FailureOr<AttentionChain> matchChain(MatmulOp pv, PatternRewriter &rewriter) {
  if (pv.getTransposeLhs() || pv.getTransposeRhs())
    return rewriter.notifyMatchFailure(pv, "p·v has a transpose");
  AttentionChain chain;
  chain.pv = pv;
  Value probabilities = pv.getLhs();
  chain.dropout = definedOnlyFor<DropoutOp>(probabilities, pv);
  Operation *softmaxUser = pv;
  if (chain.dropout) {
    if (chain.dropout.getResult() != probabilities)
      return rewriter.notifyMatchFailure(pv, "reads the dropout's mask");
    probabilities = chain.dropout.getInput();
    softmaxUser = chain.dropout;
  }
  chain.softmax = definedOnlyFor<SoftmaxOp>(probabilities, softmaxUser);
  if (!chain.softmax)
    return rewriter.notifyMatchFailure(pv, "no softmax before it");
  chain.scale =
      definedOnlyFor<ScaleOp>(chain.softmax.getInput(), chain.softmax);
  if (!chain.scale)
    return rewriter.notifyMatchFailure(pv, "no scale of the scores");
  chain.qk = definedOnlyFor<MatmulOp>(chain.scale.getInput(), chain.scale);
  if (!chain.qk || chain.qk.getTransposeLhs() || !chain.qk.getTransposeRhs())
    return rewriter.notifyMatchFailure(pv, "scores are not q·kᵀ");
  if (!(chain.scale.getFactor().convertToDouble() > 0.0))
    return rewriter.notifyMatchFailure(pv, "scale is not positive");
  return chain;
}

/// Whether q, k and v have heads train.attention takes: [B, H, S, D] all
/// three, or grouped queries [B, KVH, G, S, D] against [B, KVH, 1, S', D].
LogicalResult checkHeads(AttentionChain chain, PatternRewriter &rewriter) {
  auto qType = cast<RankedTensorType>(chain.qk.getLhs().getType());
  auto kType = cast<RankedTensorType>(chain.qk.getRhs().getType());
  auto vType = cast<RankedTensorType>(chain.pv.getRhs().getType());
  if (qType.getElementType() != kType.getElementType() ||
      qType.getElementType() != vType.getElementType())
    return rewriter.notifyMatchFailure(chain.pv, "mixed element types");
  ArrayRef<int64_t> qs = qType.getShape(), ks = kType.getShape(),
                    vs = vType.getShape();
  if (qType.getRank() == 4) {
    if (kType.getRank() != 4 || vType.getRank() != 4 ||
        ks.take_front(2) != qs.take_front(2) ||
        vs.take_front(2) != qs.take_front(2))
      return rewriter.notifyMatchFailure(chain.pv, "heads do not line up");
    return success();
  }
  if (qType.getRank() == 5) {
    if (kType.getRank() != 5 || vType.getRank() != 5 || ks[2] != 1 ||
        vs[2] != 1 || ks.take_front(2) != qs.take_front(2) ||
        vs.take_front(2) != qs.take_front(2))
      return rewriter.notifyMatchFailure(chain.pv, "not grouped-query heads");
    return success();
  }
  return rewriter.notifyMatchFailure(chain.pv, "not rank 4 or 5");
}

/// A grouped-query operand [B, KVH, G, S, D] as heads [B, KVH * G, S, D].
Value reshapeToHeads(PatternRewriter &rewriter, Location loc, Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() == 4)
    return value;
  ArrayRef<int64_t> s = type.getShape();
  auto heads = RankedTensorType::get({s[0], s[1] * s[2], s[3], s[4]},
                                     type.getElementType());
  return ReshapeOp::create(rewriter, loc, heads, value);
}

/// The model reads the output heads-last ([B, S, H, Dv]) through a
/// transpose (after a reshape to heads, for grouped queries): the transpose
/// when there is one.
TransposeOp findHeadsLastTranspose(MatmulOp pv) {
  auto outType = cast<RankedTensorType>(pv.getResult().getType());
  Operation *user = pv->hasOneUse() ? *pv->getUsers().begin() : nullptr;
  if (auto reshape = dyn_cast_or_null<ReshapeOp>(user);
      reshape && outType.getRank() == 5 && reshape->hasOneUse() &&
      cast<RankedTensorType>(reshape.getResult().getType()).getShape() ==
          ArrayRef<int64_t>{outType.getDimSize(0),
                            outType.getDimSize(1) * outType.getDimSize(2),
                            outType.getDimSize(3), outType.getDimSize(4)})
    user = *reshape->getUsers().begin();
  if (auto transpose = dyn_cast_or_null<TransposeOp>(user))
    if (transpose.getPermutation() == ArrayRef<int64_t>{0, 2, 1, 3})
      return transpose;
  return TransposeOp();
}

struct FuseAttentionPattern : public OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MatmulOp pv,
                                PatternRewriter &rewriter) const override {
    FailureOr<AttentionChain> chain = matchChain(pv, rewriter);
    if (failed(chain) || failed(checkHeads(*chain, rewriter)))
      return failure();
    Location loc = pv.getLoc();
    Value q = reshapeToHeads(rewriter, loc, chain->qk.getLhs());
    Value k = reshapeToHeads(rewriter, loc, chain->qk.getRhs());
    Value v = reshapeToHeads(rewriter, loc, pv.getRhs());
    // When the model reads the output heads-last, the op writes that order
    // itself, so the reshape after it is a view and the backward keeps no
    // second copy of the output.
    TransposeOp heads = findHeadsLastTranspose(pv);
    DropoutOp dropout = chain->dropout;
    // A rank's heads of a tensor-parallel attention draw their part of the
    // whole mask, as the dropout did: the split of the scores' shape (a
    // grouped-query one splits [kv, g]) as the split of [B, H, S, S'] that
    // places the part's elements alike (the same elements from it on).
    TensorSplitAttr split =
        dropout ? dropout.getSplitAttr() : TensorSplitAttr();
    if (split) {
      ArrayRef<int64_t> scores = dropout.getInput().getType().getShape();
      auto qType = cast<RankedTensorType>(q.getType());
      SmallVector<int64_t> drawn = {qType.getDimSize(0), qType.getDimSize(1),
                                    qType.getDimSize(2), scores.back()};
      auto suffix = [](ArrayRef<int64_t> shape, size_t from) {
        int64_t n = 1;
        for (int64_t d : shape.drop_front(from))
          n *= d;
        return n;
      };
      int64_t block = suffix(scores, split.getDim());
      // The heads' dimension, or the first after the batch with that block
      // (size-1 dimensions between place alike).
      std::optional<int64_t> dim;
      for (size_t d = 1; d < drawn.size() && !dim; ++d)
        if (suffix(drawn, d) == block)
          dim = d;
      if (!dim)
        return rewriter.notifyMatchFailure(
            pv, "the dropout's split does not map onto the heads");
      split = TensorSplitAttr::get(split.getContext(), *dim, split.getParts(),
                                   split.getGrid(), split.getAxis());
    }
    auto attention = AttentionOp::create(
        rewriter, loc, q, k, v, dropout ? dropout.getKey() : Value(),
        dropout ? dropout.getPart() : Value(), chain->scale.getFactorAttr(),
        chain->softmax.getCausalAttr(),
        heads ? rewriter.getUnitAttr() : UnitAttr(),
        dropout ? dropout.getRateAttr() : rewriter.getF64FloatAttr(0.0),
        dropout ? dropout.getSeedAttr() : rewriter.getI64IntegerAttr(0),
        dropout ? dropout.getOffsetAttr() : rewriter.getI64IntegerAttr(0),
        dropout ? dropout.getFirstAttr() : rewriter.getI64IntegerAttr(0),
        dropout ? dropout.getPartElementsAttr() : rewriter.getI64IntegerAttr(0),
        dropout ? dropout.getRankElementsAttr() : rewriter.getI64IntegerAttr(0),
        dropout ? dropout.getRankStrideAttr() : rewriter.getI64IntegerAttr(1),
        split, chain->softmax.getAlibiSlopesAttr(), ContextSplitAttr());
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
      if (output.getType() != pv.getResult().getType())
        output =
            ReshapeOp::create(rewriter, loc, pv.getResult().getType(), output);
      rewriter.replaceOp(pv, output);
    }
    // The chain has no other users: it goes with its product.
    if (dropout)
      rewriter.eraseOp(dropout);
    rewriter.eraseOp(chain->softmax);
    rewriter.eraseOp(chain->scale);
    rewriter.eraseOp(chain->qk);
    return success();
  }
};

struct TrainFuseAttentionPass
    : public impl::TrainFuseAttentionPassBase<TrainFuseAttentionPass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseAttentionPatterns(patterns);
    FailureOr<uint64_t> fused = applyFusionPatterns<AttentionOp>(
        getOperation(), std::move(patterns), DEBUG_TYPE);
    if (failed(fused))
      return signalPassFailure();
    numFused += *fused;
    LLVM_DEBUG(llvm::dbgs() << "train-fuse-attention: fused " << *fused
                            << " attention(s) into train.attention\n");
    // After train-autodiff the backward reads the scores: nothing matches.
    // Say so instead of leaving the step as it was without a word.
    if (*fused == 0) {
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
