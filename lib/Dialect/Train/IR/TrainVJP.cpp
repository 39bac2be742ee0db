//===- TrainVJP.cpp - DifferentiableOpInterface of the train ops ----------===//
//
// Each VJP builds only what its math needs, from only the values it needs:
// that choice is what makes the forward keep (for instance) a softmax's
// output but not its input, and a dropout's mask but not its input.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"

using namespace mlir;
using namespace mlir::train;

/// Sums `grad` down to `target`'s shape when the forward broadcast it.
static Value sumToType(OpBuilder &builder, Location loc, Value grad,
                       Type target) {
  auto targetType = cast<RankedTensorType>(target);
  auto gradType = cast<RankedTensorType>(grad.getType());
  if (gradType.getShape() == targetType.getShape())
    return grad;
  auto resultType = RankedTensorType::get(targetType.getShape(),
                                          gradType.getElementType());
  return SumToOp::create(builder, loc, resultType, grad);
}

/// A single-result op without an incoming gradient passes null gradients on.
static bool noGradient(Operation *op, ValueRange resultGrads,
                       SmallVectorImpl<Value> &operandGrads) {
  if (llvm::any_of(resultGrads, [](Value v) { return static_cast<bool>(v); }))
    return false;
  operandGrads.append(op->getNumOperands(), Value());
  return true;
}

LogicalResult EmbeddingOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  Value tableGrad =
      EmbeddingGradOp::create(builder, getLoc(), getTable().getType(),
                              resultGrads[0], getIds(), getSplitAttr());
  operandGrads.push_back(tableGrad);
  operandGrads.push_back(Value());
  return success();
}

/// Collapses all but the last two dimensions of `value` into one.
static Value flattenRows(OpBuilder &builder, Location loc, Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  int64_t rows = 1;
  for (int64_t d : type.getShape().drop_back())
    rows *= d;
  auto flat = RankedTensorType::get({rows, type.getShape().back()},
                                    type.getElementType());
  return ReshapeOp::create(builder, loc, flat, value);
}

static Value buildMatmul(OpBuilder &builder, Location loc, Value lhs,
                         Value rhs, bool transposeLhs, bool transposeRhs) {
  // The result type is inferred (InferTypeOpAdaptor).
  return MatmulOp::create(builder, loc, lhs, rhs, transposeLhs, transposeRhs);
}

LogicalResult MatmulOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                 SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  Location loc = getLoc();
  Value grad = resultGrads[0];
  Value lhs = getLhs(), rhs = getRhs();
  bool tl = getTransposeLhs(), tr = getTransposeRhs();

  // d op(lhs) = grad · op(rhs)ᵀ, transposed back when lhs was transposed.
  Value lhsGrad = tl ? buildMatmul(builder, loc, rhs, grad, tr, true)
                     : buildMatmul(builder, loc, grad, rhs, false, !tr);
  operandGrads.push_back(sumToType(builder, loc, lhsGrad, lhs.getType()));

  // d op(rhs) = op(lhs)ᵀ · grad. A weight shared by every batch (rank-2 rhs)
  // gets one GEMM over all rows instead of a batched product summed after.
  Value rhsGrad;
  if (getRhs().getType().getRank() == 2 && getLhs().getType().getRank() > 2 &&
      !tl) {
    Value lhsRows = flattenRows(builder, loc, lhs);
    Value gradRows = flattenRows(builder, loc, grad);
    rhsGrad = tr ? buildMatmul(builder, loc, gradRows, lhsRows, true, false)
                 : buildMatmul(builder, loc, lhsRows, gradRows, true, false);
  } else {
    rhsGrad = tr ? buildMatmul(builder, loc, grad, lhs, true, tl)
                 : buildMatmul(builder, loc, lhs, grad, !tl, false);
  }
  operandGrads.push_back(sumToType(builder, loc, rhsGrad, rhs.getType()));
  return success();
}

LogicalResult AddOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(resultGrads[0]);
  operandGrads.push_back(resultGrads[0]);
  return success();
}

LogicalResult MulOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  Value grad = resultGrads[0];
  operandGrads.push_back(MulOp::create(builder, getLoc(), grad, getRhs()));
  operandGrads.push_back(MulOp::create(builder, getLoc(), grad, getLhs()));
  return success();
}

LogicalResult ScaleOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(
      ScaleOp::create(builder, getLoc(), resultGrads[0], getFactorAttr()));
  return success();
}

LogicalResult BiasAddOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(resultGrads[0]);
  operandGrads.push_back(
      sumToType(builder, getLoc(), resultGrads[0], getBias().getType()));
  return success();
}

LogicalResult LayerNormOp::buildVJP(OpBuilder &builder,
                                    ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  Type gammaType = getGamma().getType();
  auto grads = LayerNormGradOp::create(
      builder, getLoc(), getInput().getType(), gammaType, gammaType,
      resultGrads[0], getInput(), getGamma(), getEpsilonAttr());
  operandGrads.append({grads.getInputGrad(), grads.getGammaGrad(),
                       grads.getBetaGrad()});
  return success();
}

LogicalResult RMSNormOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  auto grads = RMSNormGradOp::create(
      builder, getLoc(), getInput().getType(), getGamma().getType(),
      resultGrads[0], getInput(), getGamma(), getEpsilonAttr(),
      getGainOffsetAttr());
  operandGrads.append({grads.getInputGrad(), grads.getGammaGrad()});
  return success();
}

LogicalResult GeluOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(GeluGradOp::create(builder, getLoc(), resultGrads[0],
                                            getInput(), getExact()));
  return success();
}

LogicalResult BiasGeluOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  Value sumGrad = BiasGeluGradOp::create(builder, getLoc(), resultGrads[0],
                                         getInput(), getBias());
  operandGrads.push_back(sumGrad);
  operandGrads.push_back(
      sumToType(builder, getLoc(), sumGrad, getBias().getType()));
  return success();
}

LogicalResult SoftmaxOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  // Masked (causal) entries have output 0, so their gradient is 0 too; an
  // ALiBi bias is a constant added to the input, so the gradient is the
  // same function of the output.
  operandGrads.push_back(
      SoftmaxGradOp::create(builder, getLoc(), resultGrads[0], getResult()));
  return success();
}

LogicalResult DropoutOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  if (!resultGrads[0]) {
    operandGrads.push_back(Value());
    return success();
  }
  operandGrads.push_back(DropoutGradOp::create(
      builder, getLoc(), getInput().getType(), resultGrads[0], getMask(),
      getRateAttr()));
  return success();
}

LogicalResult AttentionOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  // The log-sum-exp is an internal result: no gradient flows into it.
  if (!resultGrads[0]) {
    operandGrads.append(3, Value());
    operandGrads.append(getNumOperands() - 3, Value());
    return success();
  }
  auto grad = AttentionGradOp::create(
      builder, getLoc(), resultGrads[0], getQ(), getK(), getV(), getOutput(),
      getLse(), getKey(), getPart(), getScaleAttr(), getCausalAttr(),
      getTransposeOutputAttr(), getRateAttr(), getSeedAttr(), getOffsetAttr(),
      getFirstAttr(), getPartElementsAttr(), getRankElementsAttr(),
      getRankStrideAttr(), getSplitAttr(), getAlibiSlopesAttr(),
      getContextParallelAttr(), getRingAttr());
  operandGrads.push_back(grad.getQGrad());
  operandGrads.push_back(grad.getKGrad());
  operandGrads.push_back(grad.getVGrad());
  // key and part are counters, not differentiable.
  operandGrads.append(getNumOperands() - 3, Value());
  return success();
}

LogicalResult RopeOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  // A rotation's transpose is the rotation by the negated angle.
  auto inverse =
      RopeOp::create(builder, getLoc(), resultGrads[0], getThetaAttr(),
                     UnitAttr(), getHalvesAttr(), getContextParallelAttr());
  inverse.setInverse(!getInverse());
  operandGrads.push_back(inverse);
  return success();
}

/// Megatron's f: the ranks' parts of the gradient summed.
LogicalResult GradAllReduceOp::buildVJP(OpBuilder &builder,
                                        ValueRange resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  SmallVector<shard::GridAxis> axes(getGridAxes());
  operandGrads.push_back(
      shard::AllReduceOp::create(builder, getLoc(), resultGrads[0], getGrid(),
                                 axes, shard::ReductionKind::Sum)
          .getResult());
  return success();
}

LogicalResult BroadcastOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  // The repeats summed back.
  operandGrads.push_back(
      sumToType(builder, getLoc(), resultGrads[0], getInput().getType()));
  return success();
}

LogicalResult SliceOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  // The gradient where the slice was, zeros elsewhere. The runtime places
  // a row-major gradient: a reshape to its own shape is a view of a
  // row-major one and a copy of a strided view (the gradient of a
  // transpose that read the slice: GPT-NeoX's qkv[..., :d].permute(...)).
  Value grad = ReshapeOp::create(builder, getLoc(), resultGrads[0].getType(),
                                 resultGrads[0]);
  operandGrads.push_back(SliceGradOp::create(
      builder, getLoc(), grad, getDimAttr(), getOffsetAttr(),
      builder.getI64IntegerAttr(getInput().getType().getDimSize(getDim()))));
  return success();
}

LogicalResult SliceGradOp::buildVJP(OpBuilder &builder,
                                    ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  // The part of the result's gradient where the operand was placed.
  auto gradType = cast<RankedTensorType>(getGrad().getType());
  operandGrads.push_back(SliceOp::create(
      builder, getLoc(), resultGrads[0], getDimAttr(), getOffsetAttr(),
      builder.getI64IntegerAttr(gradType.getDimSize(getDim()))));
  return success();
}

LogicalResult ReshapeOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  auto gradType = cast<RankedTensorType>(resultGrads[0].getType());
  auto type = RankedTensorType::get(getInput().getType().getShape(),
                                    gradType.getElementType());
  operandGrads.push_back(
      ReshapeOp::create(builder, getLoc(), type, resultGrads[0]));
  return success();
}

LogicalResult TransposeOp::buildVJP(OpBuilder &builder,
                                    ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = static_cast<int64_t>(i);
  auto gradType = cast<RankedTensorType>(resultGrads[0].getType());
  auto type = RankedTensorType::get(getInput().getType().getShape(),
                                    gradType.getElementType());
  operandGrads.push_back(TransposeOp::create(
      builder, getLoc(), type, resultGrads[0],
      builder.getDenseI64ArrayAttr(inverse)));
  return success();
}

LogicalResult CrossEntropyOp::buildVJP(OpBuilder &builder,
                                       ValueRange resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  // The count is an integer: only the summed loss carries a gradient.
  if (!resultGrads[0]) {
    operandGrads.append(2, Value());
    return success();
  }
  operandGrads.push_back(CrossEntropyGradOp::create(
      builder, getLoc(), getLogits().getType(), resultGrads[0], getLogits(),
      getTargets(), getIgnoreIndexAttr(), getLabelSmoothingAttr()));
  operandGrads.push_back(Value());
  return success();
}

LogicalResult
CrossEntropyPartOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                             SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  // train.cross_entropy_merge's gradient gives both.
  if (!resultGrads[0] || !resultGrads[1])
    return emitOpError("needs the gradients of both its results (its sums "
                       "feed a train.cross_entropy_merge)");
  operandGrads.push_back(CrossEntropyPartGradOp::create(
      builder, getLoc(), getLogits().getType(), resultGrads[0], resultGrads[1],
      getLogits(), getMax(), getTargets(), getIgnoreIndexAttr(),
      getSplitAttr()));
  // The targets are integers; the maxima are a shift the loss does not
  // depend on (Megatron's parallel cross-entropy differentiates the same
  // way).
  operandGrads.append(2, Value());
  return success();
}

LogicalResult
CrossEntropyMergeOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  // The count is an integer: only the summed loss carries a gradient.
  if (!resultGrads[0]) {
    operandGrads.append(getNumOperands(), Value());
    return success();
  }
  auto grads = CrossEntropyMergeGradOp::create(
      builder, getLoc(), getSumExp().getType(), getTargetLogit().getType(),
      resultGrads[0], getSumExp(), getTargets(), getIgnoreIndexAttr());
  operandGrads.push_back(grads.getDSumExp());
  operandGrads.push_back(grads.getDTargetLogit());
  operandGrads.append(2, Value());
  return success();
}

LogicalResult MeanLossOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  // d(sum / n) / d sum = 1 / n: the same division applied to the gradient.
  operandGrads.push_back(MeanLossOp::create(builder, getLoc(), resultGrads[0],
                                            getCount(), getWeight(),
                                            getScaleAttr()));
  operandGrads.append(getWeight() ? 2 : 1, Value());
  return success();
}

LogicalResult CastOp::buildVJP(OpBuilder &builder, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  if (noGradient(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(CastOp::create(builder, getLoc(),
                                        getInput().getType(), resultGrads[0]));
  return success();
}
