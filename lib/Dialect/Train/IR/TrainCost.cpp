//===- TrainCost.cpp - CostOpInterface of the train ops -------------------===//
//
// FLOP counts follow one convention, documented in docs/CostModel.md: a
// multiply-add is 2 FLOPs, a transcendental is 1, and per-element counts of
// fused elementwise ops are the arithmetic of their reference formulas.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"

using namespace mlir;
using namespace mlir::train;

uint64_t mlir::train::getNumElements(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  uint64_t count = 1;
  for (int64_t dim : tensor.getShape())
    count = mulCount(count, static_cast<uint64_t>(dim));
  return count;
}

uint64_t mlir::train::getTensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  uint64_t bits = tensor.getElementType().getIntOrFloatBitWidth();
  return mulCount(getNumElements(type), (bits + 7) / 8);
}

static uint64_t elems(Value value) { return getNumElements(value.getType()); }

uint64_t EmbeddingOp::getFlops() { return 0; }
// A gather reads the ids and only the rows it returns, not the whole table.
uint64_t EmbeddingOp::getBytesRead() {
  return addCount(getTensorBytes(getIds().getType()),
                  getTensorBytes(getResult().getType()));
}

uint64_t IotaOp::getFlops() { return 0; }

// A copy of a rank's rows (reads them, writes them).
uint64_t ContextSliceOp::getFlops() { return 0; }
uint64_t ContextSliceOp::getBytesRead() {
  return getTensorBytes(getResult().getType());
}

uint64_t MatmulOp::getFlops() {
  ArrayRef<int64_t> lhs = getLhs().getType().getShape();
  uint64_t k = getTransposeLhs() ? lhs[lhs.size() - 2] : lhs.back();
  return mulCount(2, elems(getResult()), k);
}

/// A product whose weight (a rank-2 `rhs`) is shared by every batch and
/// whose `lhs` is not transposed is one GEMM over all the batches' rows,
/// as the runtime runs it; otherwise one GEMM per batch.
void MatmulOp::getGemms(SmallVectorImpl<GemmShape> &gemms) {
  ArrayRef<int64_t> lhs = getLhs().getType().getShape();
  ArrayRef<int64_t> result = getResult().getType().getShape();
  GemmShape gemm;
  gemm.elementType = getLhs().getType().getElementType();
  gemm.m = static_cast<uint64_t>(result[result.size() - 2]);
  gemm.n = static_cast<uint64_t>(result.back());
  gemm.k = static_cast<uint64_t>(getTransposeLhs() ? lhs[lhs.size() - 2]
                                                   : lhs.back());
  uint64_t rows = gemm.m * gemm.n;
  gemm.batch = rows ? elems(getResult()) / rows : 0;
  if (getRhs().getType().getRank() == 2 && !getTransposeLhs()) {
    gemm.m = mulCount(gemm.m, gemm.batch);
    gemm.batch = 1;
  }
  gemms.push_back(gemm);
}

uint64_t AddOp::getFlops() { return elems(getResult()); }
uint64_t MulOp::getFlops() { return elems(getResult()); }
uint64_t ScaleOp::getFlops() { return elems(getResult()); }
uint64_t BiasAddOp::getFlops() { return elems(getResult()); }
// mean (1), centered square-sum (2), normalize (2), affine (2), per element.
uint64_t LayerNormOp::getFlops() { return mulCount(7, elems(getResult())); }
// square-sum (2), normalize (1), gain (1).
uint64_t RMSNormOp::getFlops() { return mulCount(4, elems(getResult())); }
// x³ (2), fma (2), tanh (1), 1+ (1), two products (2).
uint64_t GeluOp::getFlops() { return mulCount(8, elems(getResult())); }
// The bias add (1) and GELU (8).
uint64_t BiasGeluOp::getFlops() { return mulCount(9, elems(getResult())); }
// max (1), subtract (1), exp (1), sum (1), divide (1); an ALiBi bias one
// multiply-add (2).
uint64_t SoftmaxOp::getFlops() {
  return mulCount(getAlibiSlopes() ? 7 : 5, elems(getResult()));
}
// compare (1), scale (1).
uint64_t DropoutOp::getFlops() { return mulCount(2, elems(getResult())); }
// 2x2 rotation: 6 FLOPs per pair.
/// Score elements of an attention: B · H · S · S' (a ring's rank scores
/// its queries against every block).
template <typename OpT> static uint64_t scoreElements(OpT op) {
  RankedTensorType qt = op.getQ().getType();
  int64_t keys = attentionKeys(op.getK().getType(), op.getContextParallelAttr(),
                               op.getRing());
  return mulCount(mulCount(static_cast<uint64_t>(qt.getDimSize(0)),
                           static_cast<uint64_t>(qt.getDimSize(1))),
                  mulCount(static_cast<uint64_t>(qt.getDimSize(2)),
                           static_cast<uint64_t>(keys)));
}

/// Per score: the scale (1), the softmax (5), an ALiBi bias (2), a dropout
/// (2).
static uint64_t scaleSoftmaxFlops(double rate, bool alibi) {
  return 6 + (alibi ? 2 : 0) + (rate > 0.0 ? 2 : 0);
}

/// The forward's arithmetic, as the decomposed pattern counts it: q·kᵀ,
/// scale, softmax (5 per element), dropout (2) and p·v.
static uint64_t attentionForwardFlops(AttentionOp op) {
  uint64_t scores = scoreElements(op);
  uint64_t headDim = op.getQ().getType().getDimSize(3);
  uint64_t valueDim = op.getV().getType().getDimSize(3);
  double rate = op.getRate().convertToDouble();
  bool alibi = op.getAlibiSlopes().has_value();
  uint64_t flops = mulCount(mulCount(2, scores), headDim); // q·kᵀ
  flops = addCount(flops, mulCount(scaleSoftmaxFlops(rate, alibi), scores));
  return addCount(flops, mulCount(mulCount(2, scores), valueDim)); // p·v
}

uint64_t AttentionOp::getFlops() { return attentionForwardFlops(*this); }

/// The backward redoes the forward up to the probabilities: q·kᵀ, scale,
/// softmax from the log-sum-exp, the dropout draw.
uint64_t AttentionGradOp::getRecomputeFlops() {
  uint64_t scores = scoreElements(*this);
  uint64_t headDim = getQ().getType().getDimSize(3);
  return addCount(mulCount(mulCount(2, scores), headDim),
                  mulCount(scaleSoftmaxFlops(getRate().convertToDouble(),
                                             getAlibiSlopes().has_value()),
                           scores));
}

/// Recompute, then what the decomposed backward does: dv and dp (two
/// products with v's width), dropout's and softmax's gradients, the scale's,
/// dq and dk (two products with the head dimension).
uint64_t AttentionGradOp::getFlops() {
  uint64_t scores = scoreElements(*this);
  uint64_t headDim = getQ().getType().getDimSize(3);
  uint64_t valueDim = getV().getType().getDimSize(3);
  uint64_t flops = getRecomputeFlops();
  flops = addCount(flops, mulCount(mulCount(4, scores), valueDim));
  flops = addCount(flops, mulCount(getRate().convertToDouble() > 0.0 ? 7 : 5,
                                   scores));
  return addCount(flops, mulCount(mulCount(4, scores), headDim));
}

uint64_t RopeOp::getFlops() { return mulCount(3, elems(getResult())); }

uint64_t GradAllReduceOp::getFlops() { return 0; }
uint64_t GradAllReduceOp::getBytesRead() { return 0; }
uint64_t GradAllReduceOp::getBytesWritten() { return 0; }
uint64_t ReshapeOp::getFlops() { return 0; }
uint64_t ReshapeOp::getBytesRead() { return 0; }
// A copy: no arithmetic.
uint64_t BroadcastOp::getFlops() { return 0; }
// Copies: a slice reads the part it copies; its gradient writes zeros
// around the gradient it reads.
uint64_t SliceOp::getFlops() { return 0; }
uint64_t SliceOp::getBytesRead() {
  return getTensorBytes(getResult().getType());
}
uint64_t SliceGradOp::getFlops() { return 0; }
uint64_t ReshapeOp::getBytesWritten() { return 0; }
uint64_t TransposeOp::getFlops() { return 0; }
uint64_t TransposeOp::getBytesRead() { return 0; }
uint64_t TransposeOp::getBytesWritten() { return 0; }

// max, subtract, exp, sum per logit.
uint64_t CrossEntropyOp::getFlops() { return mulCount(4, elems(getLogits())); }
// Vocabulary-parallel cross-entropy: a compare per logit; subtract, exp
// and sum per logit (the target's pick is no arithmetic); log, add and
// subtract per row, and the sum.
uint64_t RowMaxOp::getFlops() { return elems(getInput()); }
uint64_t CrossEntropyPartOp::getFlops() {
  return mulCount(3, elems(getLogits()));
}
uint64_t CrossEntropyMergeOp::getFlops() {
  return mulCount(4, elems(getSumExp()));
}
uint64_t MeanLossOp::getFlops() { return 1; }

uint64_t CastOp::getFlops() { return elems(getResult()); }
// Philox-4x32-10 is integer work, not floating point.
uint64_t DropoutMaskOp::getFlops() { return 0; }

uint64_t CountValidOp::getFlops() { return 0; }
uint64_t TransferOp::getFlops() { return 0; }
// A wait moves nothing: its copy is counted at the transfer.
// A pipeline exchange reads what it sends and writes what it receives.
uint64_t PipelineExchangeOp::getFlops() { return 0; }
uint64_t PipelineExchangeOp::getBytesRead() { return getBytesSent(); }
uint64_t PipelineExchangeOp::getBytesWritten() {
  uint64_t bytes = 0;
  for (Value value : getReceived())
    bytes = addCount(bytes, getTensorBytes(value.getType()));
  return bytes;
}
uint64_t TransferWaitOp::getFlops() { return 0; }
uint64_t TransferWaitOp::getBytesRead() { return 0; }
uint64_t TransferWaitOp::getBytesWritten() { return 0; }
uint64_t SliceRowsOp::getFlops() { return 0; }

uint64_t EmbeddingGradOp::getFlops() { return elems(getGrad()); }
uint64_t SumToOp::getFlops() { return elems(getInput()); }
uint64_t LayerNormGradOp::getFlops() { return mulCount(12, elems(getInput())); }
uint64_t RMSNormGradOp::getFlops() { return mulCount(8, elems(getInput())); }
uint64_t GeluGradOp::getFlops() { return mulCount(12, elems(getInput())); }
// The bias add again (1) and GELU's gradient (12).
uint64_t BiasGeluGradOp::getFlops() { return mulCount(13, elems(getInput())); }
uint64_t SoftmaxGradOp::getFlops() { return mulCount(4, elems(getOutput())); }
uint64_t DropoutGradOp::getFlops() { return mulCount(2, elems(getGrad())); }
uint64_t CrossEntropyGradOp::getFlops() { return mulCount(5, elems(getLogits())); }
// Subtract, exp, multiply per logit, the target's add; a divide and a
// negate per row.
uint64_t CrossEntropyPartGradOp::getFlops() {
  return mulCount(3, elems(getLogits()));
}
uint64_t CrossEntropyMergeGradOp::getFlops() {
  return mulCount(2, elems(getSumExp()));
}

// Moments (5), bias corrections and sqrt/divide (4), decay and step (3).
uint64_t AdamWOp::getFlops() { return mulCount(12, elems(getParam())); }
// Momentum (3), ratio and clip (4), sign, decay and step (5).
uint64_t SophiaOp::getFlops() { return mulCount(12, elems(getParam())); }
// Square, two multiplies and an add.
uint64_t HessianEMAOp::getFlops() { return mulCount(4, elems(getH())); }
// Max, exponential and sum, then exponential and running sum per logit.
uint64_t SampleOp::getFlops() { return mulCount(5, elems(getLogits())); }
uint64_t SGDOp::getFlops() {
  uint64_t perElement = 4;
  if (getMomentumBuffer())
    perElement += getNesterov() ? 4 : 2;
  return mulCount(perElement, elems(getParam()));
}
uint64_t ClipGradNormOp::getFlops() {
  uint64_t total = 0;
  for (Value grad : getGrads())
    total = addCount(total, mulCount(3, elems(grad))); // square-sum, scale
  return total;
}
uint64_t SquaredNormOp::getFlops() {
  uint64_t total = 0;
  for (Value input : getInputs())
    total = addCount(total, mulCount(2, elems(input))); // square, add
  return total;
}
uint64_t LRScheduleOp::getFlops() { return 8; }
uint64_t LossScaleOp::getFlops() { return 1; }
// Finiteness check (1) and the division (1) per element.
uint64_t UnscaleGradientsOp::getFlops() {
  uint64_t total = 0;
  for (Value grad : getGrads())
    total = addCount(total, mulCount(2, elems(grad)));
  return total;
}

// Block absmax (1), scale (1), binary search over 256 entries (8).
uint64_t QuantizeOp::getFlops() { return mulCount(10, elems(getInput())); }
uint64_t DequantizeOp::getFlops() { return elems(getResult()); }
// Dequantize m and v (2), AdamW (12), absmax and requantize both (20).
uint64_t AdamW8bitOp::getFlops() { return mulCount(34, elems(getParam())); }
// Dequantize m and h (2), Sophia (12), absmax and requantize m (10).
uint64_t Sophia8bitOp::getFlops() { return mulCount(24, elems(getParam())); }
// Dequantize (1), SGD with momentum (6, 8 with nesterov), requantize (10).
uint64_t SGD8bitOp::getFlops() {
  return mulCount(getNesterov() ? 19 : 17, elems(getParam()));
}
