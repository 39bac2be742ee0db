//===- TrainOps.cpp - ops of the train dialect: verifiers ------------------===//

#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Support/ExactSum.h"
#include "trainmem/Support/LossScaleUpdate.h"
#include "trainmem/Support/RingAttention.h"

#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>

using namespace mlir;
using namespace mlir::train;

//===----------------------------------------------------------------------===//
// Shape helpers
//===----------------------------------------------------------------------===//

static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "[";
  llvm::interleave(shape, os, "x");
  os << "]";
  return text;
}

/// Shape of `op(lhs) · op(rhs)` for a batched matmul whose batch dimensions
/// broadcast NumPy-style; on a mismatch, fails and sets `why`.
static FailureOr<SmallVector<int64_t>>
inferMatmulShape(ArrayRef<int64_t> lhs, ArrayRef<int64_t> rhs,
                              bool transposeLhs, bool transposeRhs,
                              std::string &why) {
  if (lhs.size() < 2 || rhs.size() < 2) {
    why = "operands must have rank >= 2";
    return failure();
  }
  int64_t m = lhs[lhs.size() - 2], kL = lhs.back();
  if (transposeLhs)
    std::swap(m, kL);
  int64_t kR = rhs[rhs.size() - 2], n = rhs.back();
  if (transposeRhs)
    std::swap(kR, n);
  if (kL != kR) {
    why = "contraction dimensions differ (" + std::to_string(kL) + " vs " +
          std::to_string(kR) + ")";
    return failure();
  }
  ArrayRef<int64_t> batchL = lhs.drop_back(2), batchR = rhs.drop_back(2);
  size_t rank = std::max(batchL.size(), batchR.size());
  SmallVector<int64_t> shape(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t dl = i < batchL.size() ? batchL[batchL.size() - 1 - i] : 1;
    int64_t dr = i < batchR.size() ? batchR[batchR.size() - 1 - i] : 1;
    if (dl != dr && dl != 1 && dr != 1) {
      why = "batch dimensions " + shapeString(batchL) + " and " +
            shapeString(batchR) + " do not broadcast";
      return failure();
    }
    shape[rank - 1 - i] = std::max(dl, dr);
  }
  shape.push_back(m);
  shape.push_back(n);
  return shape;
}

bool mlir::train::isBroadcastableTo(ArrayRef<int64_t> from,
                                    ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  for (size_t i = 0; i < from.size(); ++i) {
    int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1)
      return false;
  }
  return true;
}

static RankedTensorType rankedType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// Verifies that `param` is a rank-1 tensor of the size of `input`'s last
/// dimension (norm weights and biases).
static LogicalResult verifyFeatureVector(Operation *op, StringRef name,
                                         Value param, Value input) {
  RankedTensorType paramType = rankedType(param);
  RankedTensorType inputType = rankedType(input);
  if (inputType.getRank() < 1)
    return op->emitOpError("input must have rank >= 1");
  if (paramType.getRank() != 1 ||
      paramType.getDimSize(0) != inputType.getShape().back())
    return op->emitOpError()
           << name << " must be a vector of the last dimension's size ("
           << inputType.getShape().back() << "), got "
           << shapeString(paramType.getShape());
  if (paramType.getElementType() != inputType.getElementType())
    return op->emitOpError()
           << name << " element type " << paramType.getElementType()
           << " differs from input element type "
           << inputType.getElementType();
  return success();
}

static LogicalResult verifyEpsilon(Operation *op, double epsilon) {
  if (!(epsilon > 0.0))
    return op->emitOpError("epsilon must be > 0, got ") << epsilon;
  return success();
}

/// An RMS norm's gain offset (its scale is gamma + offset) is a number.
static LogicalResult verifyGainOffset(Operation *op, double offset) {
  if (!std::isfinite(offset))
    return op->emitOpError("gain_offset must be finite, got ") << offset;
  return success();
}

static LogicalResult verifyDropoutRate(Operation *op, double rate) {
  if (!(rate >= 0.0 && rate < 1.0))
    return op->emitOpError("rate must be in [0, 1), got ") << rate;
  return success();
}

//===----------------------------------------------------------------------===//
// Forward ops
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Result types from the operands (InferTypeOpAdaptor)
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  auto table = dyn_cast<RankedTensorType>(adaptor.getTable().getType());
  auto ids = dyn_cast<RankedTensorType>(adaptor.getIds().getType());
  if (!table || !ids || table.getRank() != 2)
    return emitOptionalError(location, "table must have rank 2 ([vocab, "
                                       "hidden]) and ids must be ranked");
  SmallVector<int64_t> shape(ids.getShape());
  shape.push_back(table.getDimSize(1));
  inferred.push_back(RankedTensorType::get(shape, table.getElementType()));
  return success();
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  auto lhs = dyn_cast<RankedTensorType>(adaptor.getLhs().getType());
  auto rhs = dyn_cast<RankedTensorType>(adaptor.getRhs().getType());
  if (!lhs || !rhs)
    return emitOptionalError(location, "operands must be ranked tensors");
  std::string why;
  FailureOr<SmallVector<int64_t>> shape =
      inferMatmulShape(lhs.getShape(), rhs.getShape(),
                       static_cast<bool>(adaptor.getTransposeLhs()),
                       static_cast<bool>(adaptor.getTransposeRhs()), why);
  if (failed(shape))
    return emitOptionalError(location, why);
  inferred.push_back(RankedTensorType::get(*shape, lhs.getElementType()));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  auto input = dyn_cast<RankedTensorType>(adaptor.getInput().getType());
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  if (!input || static_cast<int64_t>(perm.size()) != input.getRank() ||
      llvm::any_of(perm, [&](int64_t p) {
        return p < 0 || p >= input.getRank();
      }))
    return emitOptionalError(location, "permutation must have one entry per "
                                       "dimension of the input");
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(input.getDimSize(p));
  inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

/// An embedding table's vocabulary split: along its rows.
static LogicalResult verifyTableSplit(Operation *op, TensorSplitAttr split) {
  if (!split)
    return success();
  if (split.getDim() != 0)
    return op->emitOpError("'split' must split the table's rows (dimension "
                           "0, the vocabulary), got dimension ")
           << split.getDim();
  return verifySplitGrid(op, split, "split");
}

LogicalResult EmbeddingOp::verify() {
  RankedTensorType table = getTable().getType();
  RankedTensorType ids = getIds().getType();
  RankedTensorType result = getResult().getType();
  if (table.getRank() != 2)
    return emitOpError("table must have rank 2 ([vocab, hidden]), got rank ")
           << table.getRank();
  SmallVector<int64_t> expected(ids.getShape());
  expected.push_back(table.getDimSize(1));
  if (result.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("result shape must be ")
           << shapeString(expected) << " (ids shape, then hidden), got "
           << shapeString(result.getShape());
  if (result.getElementType() != table.getElementType())
    return emitOpError("result element type must match the table's");
  return verifyTableSplit(*this, getSplitAttr());
}

LogicalResult BroadcastOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("result element type must match the input's");
  if (in.getRank() != out.getRank())
    return emitOpError("result rank ")
           << out.getRank() << " must equal the input's " << in.getRank();
  for (int64_t d = 0; d < in.getRank(); ++d)
    if (in.getDimSize(d) != out.getDimSize(d) && in.getDimSize(d) != 1)
      return emitOpError("dimension ")
             << d << " of the input (" << in.getDimSize(d)
             << ") is not 1 and differs from the result's ("
             << out.getDimSize(d) << ")";
  return success();
}

LogicalResult IotaOp::verify() {
  if (getResult().getType().getRank() != 1)
    return emitOpError("result must have rank 1");
  return success();
}

LogicalResult MatmulOp::verify() {
  RankedTensorType lhs = getLhs().getType(), rhs = getRhs().getType();
  RankedTensorType result = getResult().getType();
  if (lhs.getElementType() != rhs.getElementType() ||
      lhs.getElementType() != result.getElementType())
    return emitOpError("operand and result element types must match");
  std::string why;
  FailureOr<SmallVector<int64_t>> shape =
      inferMatmulShape(lhs.getShape(), rhs.getShape(), getTransposeLhs(),
                       getTransposeRhs(), why);
  if (failed(shape))
    return emitOpError(why);
  if (result.getShape() != ArrayRef<int64_t>(*shape))
    return emitOpError("result shape must be ")
           << shapeString(*shape) << ", got "
           << shapeString(result.getShape());
  return success();
}

LogicalResult ScaleOp::verify() {
  if (!std::isfinite(getFactor().convertToDouble()))
    return emitOpError("factor must be finite");
  return success();
}

/// A bias broadcast over `input`'s leading dimensions: its element type,
/// and the shape of its trailing dimensions.
static LogicalResult verifyBias(Operation *op, RankedTensorType input,
                                RankedTensorType bias) {
  if (bias.getElementType() != input.getElementType())
    return op->emitOpError("bias element type must match the input's");
  if (bias.getRank() < 1 || bias.getRank() > input.getRank() ||
      input.getShape().take_back(bias.getRank()) != bias.getShape())
    return op->emitOpError("bias shape ")
           << shapeString(bias.getShape())
           << " must equal the trailing dimensions of input shape "
           << shapeString(input.getShape());
  return success();
}

LogicalResult BiasAddOp::verify() {
  return verifyBias(*this, getInput().getType(), getBias().getType());
}

LogicalResult BiasGeluOp::verify() {
  return verifyBias(*this, getInput().getType(), getBias().getType());
}

LogicalResult BiasGeluGradOp::verify() {
  return verifyBias(*this, getInput().getType(), getBias().getType());
}

LogicalResult LayerNormOp::verify() {
  if (failed(verifyFeatureVector(*this, "gamma", getGamma(), getInput())) ||
      failed(verifyFeatureVector(*this, "beta", getBeta(), getInput())) ||
      failed(verifyEpsilon(*this, getEpsilon().convertToDouble())))
    return failure();
  return success();
}

LogicalResult RMSNormOp::verify() {
  if (failed(verifyFeatureVector(*this, "gamma", getGamma(), getInput())) ||
      failed(verifyEpsilon(*this, getEpsilon().convertToDouble())) ||
      failed(verifyGainOffset(*this, getGainOffset().convertToDouble())))
    return failure();
  return success();
}

/// ALiBi slopes: one finite slope per head, whose bias over `keys` keys
/// stays finite.
static LogicalResult verifyAlibiSlopes(Operation *op,
                                       std::optional<ArrayRef<double>> slopes,
                                       int64_t heads, int64_t keys,
                                       StringRef what) {
  if (!slopes)
    return success();
  if (static_cast<int64_t>(slopes->size()) != heads)
    return op->emitOpError("has ")
           << slopes->size() << " ALiBi slopes for " << heads << " " << what;
  for (double slope : *slopes) {
    if (!std::isfinite(slope))
      return op->emitOpError("has an ALiBi slope that is not finite: ")
             << slope;
    if (!std::isfinite(slope * static_cast<double>(keys)))
      return op->emitOpError("has an ALiBi slope whose bias over ")
             << keys << " keys is not finite: " << slope;
  }
  return success();
}

LogicalResult SoftmaxOp::verify() {
  RankedTensorType type = getInput().getType();
  if (type.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  if (std::optional<ArrayRef<double>> slopes = getAlibiSlopes()) {
    if (type.getRank() < 3)
      return emitOpError("ALiBi softmax needs rank >= 3 (heads, query, key)");
    // The heads: the dimensions before (query, key), from the back (a
    // grouped-query [B, KVH, G, S, S] has KVH · G).
    ArrayRef<int64_t> shape = type.getShape().drop_back(2);
    auto n = static_cast<int64_t>(slopes->size());
    int64_t heads = shape.back();
    for (size_t d = shape.size() - 1; d > 0 && heads < n; --d)
      heads *= shape[d - 1];
    if (failed(verifyAlibiSlopes(*this, slopes, heads, type.getShape().back(),
                                 "heads (the dimensions before query and key, "
                                 "from the back)")))
      return failure();
  }
  if (getCausal()) {
    if (type.getRank() < 2)
      return emitOpError("causal softmax needs rank >= 2 (query, key)");
    ArrayRef<int64_t> shape = type.getShape();
    if (shape[shape.size() - 2] != shape.back())
      return emitOpError("causal softmax needs as many queries as keys, got ")
             << shape[shape.size() - 2] << " queries and " << shape.back()
             << " keys";
  }
  return success();
}

/// The counters of a dropout site: `offset` and `first` are unsigned
/// positions; `part` needs the size of a part to place it.
static LogicalResult verifyDropoutCounters(Operation *op, int64_t offset,
                                           int64_t first, Value part,
                                           int64_t partElements,
                                           int64_t rankElements) {
  if (rankElements < 0)
    return op->emitOpError("rank_elements must be >= 0, got ")
           << rankElements;
  if (auto stride = op->getAttrOfType<IntegerAttr>("rank_stride");
      stride && stride.getInt() < 1)
    return op->emitOpError("rank_stride must be >= 1, got ") << stride.getInt();
  if (offset < 0)
    return op->emitOpError("offset must be >= 0");
  if (first < 0)
    return op->emitOpError("first must be >= 0, got ") << first;
  if (partElements < 0)
    return op->emitOpError("part_elements must be >= 0, got ")
           << partElements;
  if (part && partElements == 0)
    return op->emitOpError("a part operand needs part_elements > 0 (the "
                           "elements of one part)");
  if (!part && partElements != 0)
    return op->emitOpError("part_elements without a part operand");
  return success();
}

void DropoutOp::build(OpBuilder &builder, OperationState &state, Value input,
                      double rate, int64_t seed, int64_t offset) {
  auto inputType = cast<RankedTensorType>(input.getType());
  auto maskType =
      RankedTensorType::get(inputType.getShape(), builder.getI1Type());
  build(builder, state, inputType, maskType, input, /*key=*/Value(),
        /*part=*/Value(), builder.getF64FloatAttr(rate),
        builder.getI64IntegerAttr(seed), builder.getI64IntegerAttr(offset),
        builder.getI64IntegerAttr(0), builder.getI64IntegerAttr(0),
        builder.getI64IntegerAttr(0),
        /*rank_stride=*/builder.getI64IntegerAttr(1),
        /*split=*/TensorSplitAttr());
}

/// A draw's `split`: a dimension of the drawn tensor, on a grid axis of
/// `parts` ranks.
static LogicalResult verifyDrawSplit(Operation *op, TensorSplitAttr split,
                                     ShapedType drawn) {
  if (!split)
    return success();
  if (split.getDim() >= drawn.getRank())
    return op->emitOpError("split dimension ")
           << split.getDim() << " is not a dimension of the drawn " << drawn;
  return verifySplitGrid(op, split, "split");
}

LogicalResult DropoutOp::verify() {
  if (failed(verifyDropoutRate(*this, getRate().convertToDouble())))
    return failure();
  if (getMask().getType().getShape() != getInput().getType().getShape())
    return emitOpError("mask shape must equal the input shape");
  if (failed(verifyDrawSplit(*this, getSplitAttr(), getMask().getType())))
    return failure();
  return verifyDropoutCounters(*this, getOffsetAttr().getInt(),
                               getFirstAttr().getInt(), getPart(),
                               getPartElementsAttr().getInt(),
                               getRankElementsAttr().getInt());
}

//===----------------------------------------------------------------------===//
// Fused attention
//===----------------------------------------------------------------------===//

namespace {
/// The shapes of an attention: q [B, H, S, D], k [B, KVH, S', D],
/// v [B, KVH, S', Dv].
struct AttentionShape {
  int64_t batch, heads, kvHeads, queries, keys, headDim, valueDim;
};
} // namespace

/// Checks q, k and v against each other and the attributes; `emit` gives
/// the op's error.
static FailureOr<AttentionShape>
checkAttention(Type qType, Type kType, Type vType, bool causal,
               function_ref<InFlightDiagnostic()> emit,
               ContextSplitAttr context = {}) {
  auto q = dyn_cast<RankedTensorType>(qType);
  auto k = dyn_cast<RankedTensorType>(kType);
  auto v = dyn_cast<RankedTensorType>(vType);
  if (!q || !k || !v || q.getRank() != 4 || k.getRank() != 4 ||
      v.getRank() != 4) {
    emit() << "q, k and v must be rank-4 tensors [batch, heads, sequence, "
              "head dim]";
    return failure();
  }
  if (q.getElementType() != k.getElementType() ||
      q.getElementType() != v.getElementType()) {
    emit() << "q, k and v must have one element type";
    return failure();
  }
  AttentionShape shape{q.getDimSize(0), q.getDimSize(1), k.getDimSize(1),
                       q.getDimSize(2), k.getDimSize(2), q.getDimSize(3),
                       v.getDimSize(3)};
  if (k.getDimSize(0) != shape.batch || v.getDimSize(0) != shape.batch) {
    emit() << "q, k and v must have one batch size";
    return failure();
  }
  if (v.getDimSize(1) != shape.kvHeads || v.getDimSize(2) != shape.keys) {
    emit() << "k and v must have the same heads and sequence, got "
           << k << " and " << v;
    return failure();
  }
  if (shape.kvHeads <= 0 || shape.heads % shape.kvHeads != 0) {
    emit() << "the query heads (" << shape.heads
           << ") must be a multiple of the key/value heads ("
           << shape.kvHeads << ")";
    return failure();
  }
  if (k.getDimSize(3) != shape.headDim) {
    emit() << "q and k must have one head dimension, got " << shape.headDim
           << " and " << k.getDimSize(3);
    return failure();
  }
  // A context-parallel rank's queries see the group's keys, gathered.
  if (causal && !context && shape.queries != shape.keys) {
    emit() << "causal attention needs as many keys as queries, got "
           << shape.keys << " and " << shape.queries;
    return failure();
  }
  return shape;
}

static RankedTensorType attentionOutputType(RankedTensorType q,
                                            RankedTensorType v,
                                            bool transposed) {
  if (transposed)
    return RankedTensorType::get(
        {q.getDimSize(0), q.getDimSize(2), q.getDimSize(1), v.getDimSize(3)},
        q.getElementType());
  return RankedTensorType::get(
      {q.getDimSize(0), q.getDimSize(1), q.getDimSize(2), v.getDimSize(3)},
      q.getElementType());
}

static RankedTensorType attentionLseType(RankedTensorType q) {
  return RankedTensorType::get(
      {q.getDimSize(0), q.getDimSize(1), q.getDimSize(2)},
      Float32Type::get(q.getContext()));
}

LogicalResult AttentionOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  auto emit = [&]() { return mlir::emitError(*location); };
  if (!location) {
    auto q = dyn_cast<RankedTensorType>(adaptor.getQ().getType());
    auto v = dyn_cast<RankedTensorType>(adaptor.getV().getType());
    if (!q || !v || q.getRank() != 4 || v.getRank() != 4)
      return failure();
  } else if (failed(checkAttention(adaptor.getQ().getType(),
                                   adaptor.getK().getType(),
                                   adaptor.getV().getType(),
                                   static_cast<bool>(adaptor.getCausal()), emit,
                                   adaptor.getContextParallelAttr()))) {
    return failure();
  }
  auto q = cast<RankedTensorType>(adaptor.getQ().getType());
  auto v = cast<RankedTensorType>(adaptor.getV().getType());
  inferred.push_back(
      attentionOutputType(q, v, static_cast<bool>(adaptor.getTransposeOutput())));
  inferred.push_back(attentionLseType(q));
  return success();
}

/// What the forward and the backward check alike: shapes, dropout, and the
/// results' types.
template <typename OpT> static LogicalResult verifyAttentionCommon(OpT op) {
  FailureOr<AttentionShape> shape = checkAttention(
      op.getQ().getType(), op.getK().getType(), op.getV().getType(),
      op.getCausal(), [&]() { return op.emitOpError(); },
      op.getContextParallelAttr());
  if (failed(shape))
    return failure();
  double scale = op.getScale().convertToDouble();
  if (!(scale > 0.0) || !std::isfinite(scale))
    return op.emitOpError("scale must be finite and > 0, got ") << scale;
  if (failed(verifyDropoutRate(op, op.getRate().convertToDouble())))
    return failure();
  if (op.getRate().convertToDouble() == 0.0 &&
      (op.getKey() || op.getPart() || op.getSeedAttr().getInt() != 0 ||
       op.getOffsetAttr().getInt() != 0 || op.getFirstAttr().getInt() != 0 ||
       op.getPartElementsAttr().getInt() != 0 ||
       op.getRankElementsAttr().getInt() != 0))
    return op.emitOpError("has dropout counters (key, part, seed, offset, "
                          "first, part_elements, rank_elements) but no "
                          "dropout (rate 0)");
  if (failed(verifyAlibiSlopes(op, op.getAlibiSlopes(),
                               op.getQ().getType().getDimSize(1),
                               op.getK().getType().getDimSize(2),
                               "query heads")))
    return failure();
  if (op.getRing() && !op.getContextParallelAttr())
    return op.emitOpError("ring needs context_parallel (the group whose "
                          "ranks pass their keys and values around)");
  if (ContextSplitAttr context = op.getContextParallelAttr()) {
    int64_t queries = op.getQ().getType().getDimSize(2),
            keys = op.getK().getType().getDimSize(2);
    int64_t gathered = 0;
    if (op.getRing() && keys != queries)
      return op.emitOpError("a ring's rank attends with its ")
             << queries << " queries to blocks of as many keys (its own, "
             << "then its peers'), got " << keys;
    if (!op.getRing() &&
        (llvm::MulOverflow(queries, context.getParts(), gathered) ||
         keys != gathered))
      return op.emitOpError("a context-parallel rank's ")
             << queries << " queries need the group's " << context.getParts()
             << " x " << queries << " keys, got " << keys;
    if (context.isBalanced() && queries % 2 != 0)
      return op.emitOpError("balanced context needs an even number of a "
                            "rank's queries (two chunks), got ")
             << queries;
    if (op.getAlibiSlopes())
      return op.emitOpError("ALiBi's bias is not placed by a context split");
  }
  // A rank's heads draw their part of the whole [B, H, S, S'] mask.
  if (failed(verifyDrawSplit(op, op.getSplitAttr(), op.getDrawnType())))
    return failure();
  return verifyDropoutCounters(op, op.getOffsetAttr().getInt(),
                               op.getFirstAttr().getInt(), op.getPart(),
                               op.getPartElementsAttr().getInt(),
                               op.getRankElementsAttr().getInt());
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionCommon(*this)))
    return failure();
  auto q = getQ().getType(), v = getV().getType();
  RankedTensorType output = attentionOutputType(q, v, getTransposeOutput());
  if (getOutput().getType() != output)
    return emitOpError("output must be ") << output;
  if (getLse().getType() != attentionLseType(q))
    return emitOpError("lse must be ") << attentionLseType(q);
  return success();
}

/// The queries of the whole sequence an attention's dropout is drawn for:
/// a context-parallel rank's rows are a part of them.
static int64_t wholeQueries(RankedTensorType q, ContextSplitAttr context) {
  return q.getDimSize(2) * (context ? context.getParts() : 1);
}

/// The keys an attention's queries see, S': a ring's rank sees the
/// group's, `parts` blocks of its own size.
int64_t mlir::train::attentionKeys(RankedTensorType k, ContextSplitAttr context,
                                   bool ring) {
  int64_t keys = k.getDimSize(2);
  if (!ring || !context)
    return keys;
  int64_t whole = 0;
  return llvm::MulOverflow(keys, context.getParts(), whole)
             ? std::numeric_limits<int64_t>::max()
             : whole;
}

/// The scores an attention draws its dropout for, B · H · S · S'
/// (saturated: a count past int64 is refused by the analyses).
static int64_t attentionScores(RankedTensorType q, int64_t keys,
                               ContextSplitAttr context) {
  uint64_t scores =
      mulCount(mulCount(static_cast<uint64_t>(q.getDimSize(0)),
                        static_cast<uint64_t>(q.getDimSize(1))),
               mulCount(static_cast<uint64_t>(wholeQueries(q, context)),
                        static_cast<uint64_t>(keys)));
  return static_cast<int64_t>(
      std::min<uint64_t>(scores, std::numeric_limits<int64_t>::max()));
}

/// The probabilities an attention draws its dropout for, [B, H, S, S'].
static RankedTensorType attentionDrawnType(RankedTensorType q, int64_t keys,
                                           ContextSplitAttr context) {
  return RankedTensorType::get(
      {q.getDimSize(0), q.getDimSize(1), wholeQueries(q, context), keys},
      IntegerType::get(q.getContext(), 1));
}

int64_t AttentionOp::getDrawnElements() {
  return attentionScores(
      getQ().getType(),
      attentionKeys(getK().getType(), getContextParallelAttr(), getRing()),
      getContextParallelAttr());
}

RankedTensorType AttentionOp::getDrawnType() {
  return attentionDrawnType(
      getQ().getType(),
      attentionKeys(getK().getType(), getContextParallelAttr(), getRing()),
      getContextParallelAttr());
}

/// A ring attention's exchanges (trainmem/Support/RingAttention.h): K and
/// V `parts - 1` times, and in the backward their gradients' f32 sums
/// `parts` times. Elements and bytes one rank sends per execution.
template <typename OpT>
static std::pair<uint64_t, uint64_t> ringTraffic(OpT op, bool backward) {
  ContextSplitAttr context = op.getContextParallelAttr();
  if (!op.getRing() || !context || context.getParts() <= 1)
    return {0, 0};
  uint64_t kv = addCount(getNumElements(op.getK().getType()),
                         getNumElements(op.getV().getType()));
  uint64_t steps = static_cast<uint64_t>(context.getParts()) - 1;
  uint64_t elements = mulCount(kv, steps);
  uint64_t bytes = mulCount(
      elements, (op.getK().getType().getElementTypeBitWidth() + 7) / 8);
  if (backward) {
    uint64_t sums = mulCount(kv, steps + 1);
    elements = addCount(elements, sums);
    bytes = addCount(bytes, mulCount(sums, 4));
  }
  return {elements, bytes};
}

/// The workspace of a ring attention (RingAttention.h's layout).
template <typename OpT> static uint64_t ringWorkspace(OpT op, bool backward) {
  if (!op.getRing())
    return 0;
  RankedTensorType q = op.getQ().getType(), k = op.getK().getType(),
                   v = op.getV().getType();
  // Sizes whose f32 copies do not fit 64 bits are overflows to report.
  uint64_t bound =
      addCount(mulCount(getNumElements(q), 8),
               mulCount(addCount(getNumElements(k), getNumElements(v)), 16));
  if (bound == kCountOverflow)
    return kCountOverflow;
  return trainmem::RingAttentionWorkspace::of(
             backward, q.getDimSize(0), q.getDimSize(1), k.getDimSize(1),
             q.getDimSize(2), k.getDimSize(2), q.getDimSize(3), v.getDimSize(3),
             (k.getElementTypeBitWidth() + 7) / 8)
      .bytes;
}

LogicalResult PipelineExchangeOp::verify() {
  if (getSendPeers().size() != getSends().size() ||
      getSendTags().size() != getSends().size())
    return emitOpError("has ")
           << getSends().size() << " sends but " << getSendPeers().size()
           << " send_peers and " << getSendTags().size() << " send_tags";
  if (getRecvPeers().size() != getReceived().size() ||
      getRecvTags().size() != getReceived().size())
    return emitOpError("has ")
           << getReceived().size() << " results but " << getRecvPeers().size()
           << " recv_peers and " << getRecvTags().size() << " recv_tags";
  auto stage = (*this)
                   ->getParentOfType<FunctionOpInterface>()
                   ->getAttrOfType<PipelineStageAttr>(kPipelineStageAttrName);
  for (ArrayRef<int64_t> peers : {getSendPeers(), getRecvPeers()})
    for (int64_t peer : peers) {
      if (peer < 0 || (stage && peer >= stage.getStages()))
        return emitOpError("peer stage ")
               << peer << " is not a stage of the pipeline"
               << (stage ? " (" + std::to_string(stage.getStages()) + " stages)"
                         : std::string());
      if (stage && peer == stage.getStage())
        return emitOpError("stage ")
               << peer
               << " exchanges with itself: a value stays in its "
                  "stage's function";
    }
  llvm::SmallDenseSet<int64_t> tags;
  for (ArrayRef<int64_t> all : {getSendTags(), getRecvTags()})
    for (int64_t tag : all)
      if (tag < 0 || !tags.insert(tag).second)
        return emitOpError("tag ")
               << tag
               << " is negative or repeated: each crossing tensor has "
                  "a tag of its own";
  return success();
}

StringRef PipelineExchangeOp::getCollectiveKind() {
  return getSends().empty() ? "" : "send_recv";
}
int64_t PipelineExchangeOp::getGroupSize() { return 2; }
uint64_t PipelineExchangeOp::getElementsSent() {
  uint64_t elements = 0;
  for (Value value : getSends())
    elements = addCount(elements, getNumElements(value.getType()));
  return elements;
}
uint64_t PipelineExchangeOp::getBytesSent() {
  uint64_t bytes = 0;
  for (Value value : getSends())
    bytes = addCount(bytes, getTensorBytes(value.getType()));
  return bytes;
}

StringRef AttentionOp::getCollectiveKind() {
  return getRing() ? "send_recv" : "";
}
int64_t AttentionOp::getGroupSize() {
  return getRing() ? getContextParallelAttr().getParts() : 1;
}
uint64_t AttentionOp::getElementsSent() {
  return ringTraffic(*this, false).first;
}
uint64_t AttentionOp::getBytesSent() {
  return ringTraffic(*this, false).second;
}
uint64_t AttentionOp::getWorkspaceBytes() {
  return ringWorkspace(*this, false);
}
StringRef AttentionGradOp::getCollectiveKind() {
  return getRing() ? "send_recv" : "";
}
int64_t AttentionGradOp::getGroupSize() {
  return getRing() ? getContextParallelAttr().getParts() : 1;
}
uint64_t AttentionGradOp::getElementsSent() {
  return ringTraffic(*this, true).first;
}
uint64_t AttentionGradOp::getBytesSent() {
  return ringTraffic(*this, true).second;
}
uint64_t AttentionGradOp::getWorkspaceBytes() {
  return ringWorkspace(*this, true);
}

bool AttentionOp::drawsRandom() { return getRate().convertToDouble() > 0.0; }

LogicalResult AttentionGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  inferred.push_back(adaptor.getQ().getType());
  inferred.push_back(adaptor.getK().getType());
  inferred.push_back(adaptor.getV().getType());
  return success();
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionCommon(*this)))
    return failure();
  auto q = getQ().getType(), v = getV().getType();
  RankedTensorType output = attentionOutputType(q, v, getTransposeOutput());
  if (getOutput().getType() != output || getGrad().getType() != output)
    return emitOpError("output and its gradient must be ") << output;
  if (getLse().getType() != attentionLseType(q))
    return emitOpError("lse must be ") << attentionLseType(q);
  if (getQGrad().getType() != q || getKGrad().getType() != getK().getType() ||
      getVGrad().getType() != v)
    return emitOpError("gradients must have the types of q, k and v");
  return success();
}

int64_t AttentionGradOp::getDrawnElements() {
  return attentionScores(
      getQ().getType(),
      attentionKeys(getK().getType(), getContextParallelAttr(), getRing()),
      getContextParallelAttr());
}

RankedTensorType AttentionGradOp::getDrawnType() {
  return attentionDrawnType(
      getQ().getType(),
      attentionKeys(getK().getType(), getContextParallelAttr(), getRing()),
      getContextParallelAttr());
}

bool AttentionGradOp::drawsRandom() {
  return getRate().convertToDouble() > 0.0;
}

int64_t DropoutOp::getDrawnElements() {
  return getInput().getType().getNumElements();
}

RankedTensorType DropoutOp::getDrawnType() { return getMask().getType(); }

int64_t DropoutMaskOp::getDrawnElements() {
  return getMask().getType().getNumElements();
}

RankedTensorType DropoutMaskOp::getDrawnType() { return getMask().getType(); }

LogicalResult ContextSliceOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  auto in = dyn_cast<RankedTensorType>(adaptor.getInput().getType());
  int64_t dim = adaptor.getDim();
  if (!in || dim < 0 || dim >= in.getRank() || in.isDynamicDim(dim))
    return emitOptionalError(location, "train.context_slice: dim ", dim,
                             " is not a static dimension of its input");
  ContextSplitAttr context = adaptor.getContextParallel();
  int64_t rows = context.rowsOf(in.getDimSize(dim));
  if (rows == 0)
    return emitOptionalError(
        location, "train.context_slice: ", context.getParts(), " ranks",
        context.isBalanced() ? " (2 chunks each)" : "", " do not divide the ",
        in.getDimSize(dim), " rows of dim ", dim);
  SmallVector<int64_t> shape(in.getShape());
  shape[dim] = rows;
  inferred.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

LogicalResult ContextSliceOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  int64_t dim = getDim();
  if (dim < 0 || dim >= in.getRank() || in.getRank() != out.getRank())
    return emitOpError("dim ")
           << dim << " is not a dimension of " << in << " (and of the result)";
  ContextSplitAttr context = getContextParallel();
  int64_t rows = context.rowsOf(in.getDimSize(dim));
  if (rows == 0)
    return emitOpError("") << context.getParts() << " ranks"
                           << (context.isBalanced()
                                   ? " (balanced: 2 chunks each)"
                                   : "")
                           << " do not divide the " << in.getDimSize(dim)
                           << " rows of dim " << dim;
  for (int64_t d = 0; d < in.getRank(); ++d)
    if (out.getDimSize(d) != (d == dim ? rows : in.getDimSize(d)))
      return emitOpError("result must be ")
             << in << " with " << rows << " rows of dim " << dim;
  if (in.getElementType() != out.getElementType())
    return emitOpError("element type must not change");
  return success();
}

LogicalResult RopeOp::verify() {
  RankedTensorType type = getInput().getType();
  if (type.getRank() < 2)
    return emitOpError("input must have rank >= 2 ([..., position, dim])");
  if (type.getShape().back() % 2 != 0)
    return emitOpError("last dimension must be even, got ")
           << type.getShape().back();
  if (!(getTheta().convertToDouble() > 0.0))
    return emitOpError("theta must be > 0");
  return success();
}

LogicalResult ReshapeOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("element type must not change");
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("element count must not change (")
           << in.getNumElements() << " vs " << out.getNumElements() << ")";
  return success();
}

Value ReshapeOp::getViewSource() { return getInput(); }

std::optional<SmallVector<int64_t>>
ReshapeOp::getViewStrides(ArrayRef<int64_t> sourceStrides) {
  if (!isRowMajor(getInput().getType().getShape(), sourceStrides))
    return std::nullopt;
  return computeSuffixProduct(getResult().getType().getShape());
}

LogicalResult GradAllReduceOp::verify() {
  ArrayRef<int16_t> axes = getGridAxes();
  if (axes.empty())
    return emitOpError("sums the gradient over at least one grid axis");
  for (auto [i, axis] : llvm::enumerate(axes))
    if (axis < 0 || (i > 0 && axis <= axes[i - 1]))
      return emitOpError("grid axes must be increasing and non-negative");
  return success();
}

Value GradAllReduceOp::getViewSource() { return getInput(); }

std::optional<SmallVector<int64_t>>
GradAllReduceOp::getViewStrides(ArrayRef<int64_t> sourceStrides) {
  return SmallVector<int64_t>(sourceStrides);
}

/// The shape of `type` with dimension `dim` of size `size`; failure when
/// `dim` is not one of its dimensions.
static FailureOr<RankedTensorType> withDimSize(RankedTensorType type,
                                               int64_t dim, int64_t size) {
  if (!type || dim < 0 || dim >= type.getRank())
    return failure();
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  return RankedTensorType::get(shape, type.getElementType());
}

/// `operand`'s type with dimension `dim` of size `size`, as the slice
/// ops infer their results; an error naming `what` otherwise.
static LogicalResult inferWithDimSize(std::optional<Location> location,
                                      Value operand, int64_t dim, int64_t size,
                                      StringRef what,
                                      SmallVectorImpl<Type> &inferred) {
  FailureOr<RankedTensorType> type =
      withDimSize(dyn_cast<RankedTensorType>(operand.getType()), dim, size);
  if (failed(type))
    return emitOptionalError(location, "'dim' must be a dimension of the ",
                             what);
  inferred.push_back(*type);
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  return inferWithDimSize(location, adaptor.getInput(), adaptor.getDim(),
                          adaptor.getSize(), "input", inferred);
}

/// A block [offset, offset + size) of a dimension of `whole` indices.
static LogicalResult verifyBlock(Operation *op, RankedTensorType part,
                                 RankedTensorType whole, int64_t dim,
                                 int64_t offset, int64_t size,
                                 int64_t wholeSize) {
  if (dim < 0 || dim >= whole.getRank())
    return op->emitOpError("'dim' ")
           << dim << " is not a dimension of the rank-" << whole.getRank()
           << " tensor";
  if (offset < 0 || size < 1 || offset + size > wholeSize)
    return op->emitOpError("indices [")
           << offset << ", " << offset + size << ") are not inside the "
           << wholeSize << " of dimension " << dim;
  FailureOr<RankedTensorType> expected = withDimSize(whole, dim, size);
  if (part != *expected)
    return op->emitOpError("the part must be ")
           << *expected << ", got " << part;
  return success();
}

LogicalResult SliceOp::verify() {
  return verifyBlock(*this, getResult().getType(), getInput().getType(),
                     getDim(), getOffset(), getSize(),
                     getDim() >= 0 && getDim() < getInput().getType().getRank()
                         ? getInput().getType().getDimSize(getDim())
                         : 0);
}

LogicalResult SliceGradOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  return inferWithDimSize(location, adaptor.getGrad(), adaptor.getDim(),
                          adaptor.getWhole(), "gradient", inferred);
}

LogicalResult SliceGradOp::verify() {
  RankedTensorType grad = getGrad().getType();
  if (getDim() < 0 || getDim() >= grad.getRank())
    return emitOpError("'dim' ")
           << getDim() << " is not a dimension of the rank-" << grad.getRank()
           << " gradient";
  return verifyBlock(*this, grad, getResult().getType(), getDim(), getOffset(),
                     grad.getDimSize(getDim()), getWhole());
}

LogicalResult TransposeOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  ArrayRef<int64_t> perm = getPermutation();
  if (static_cast<int64_t>(perm.size()) != in.getRank())
    return emitOpError("permutation must have one entry per dimension (")
           << in.getRank() << "), got " << perm.size();
  SmallVector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || seen[p])
      return emitOpError("permutation must hold each of 0..")
             << in.getRank() - 1 << " once";
    seen[p] = true;
  }
  SmallVector<int64_t> expected;
  for (int64_t p : perm)
    expected.push_back(in.getDimSize(p));
  if (out.getShape() != ArrayRef<int64_t>(expected) ||
      out.getElementType() != in.getElementType())
    return emitOpError("result shape must be ")
           << shapeString(expected) << ", got " << shapeString(out.getShape());
  return success();
}

Value TransposeOp::getViewSource() { return getInput(); }

std::optional<SmallVector<int64_t>>
TransposeOp::getViewStrides(ArrayRef<int64_t> sourceStrides) {
  SmallVector<int64_t> strides;
  for (int64_t p : getPermutation())
    strides.push_back(sourceStrides[p]);
  return strides;
}

static LogicalResult verifyLogitsTargets(Operation *op,
                                         RankedTensorType logits,
                                         RankedTensorType targets) {
  if (logits.getRank() != targets.getRank() + 1 ||
      logits.getShape().drop_back() != targets.getShape())
    return op->emitOpError("targets shape ")
           << shapeString(targets.getShape())
           << " must equal the logits shape without its last dimension "
           << shapeString(logits.getShape());
  return success();
}

/// A label smoothing is a probability mass: from 0 to 1.
static LogicalResult verifyLabelSmoothing(Operation *op, double smoothing) {
  if (!(smoothing >= 0.0 && smoothing <= 1.0))
    return op->emitOpError("'label_smoothing' must be from 0 to 1, got ")
           << smoothing;
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  if (failed(verifyLabelSmoothing(
          *this, getLabelSmoothingAttr().getValueAsDouble())))
    return failure();
  return verifyLogitsTargets(*this, getLogits().getType(),
                             getTargets().getType());
}

/// A vocabulary split of logits: along their last dimension, on a grid axis
/// of its parts.
static LogicalResult verifyVocabularySplit(Operation *op, TensorSplitAttr split,
                                           RankedTensorType logits) {
  if (!split)
    return success();
  if (split.getDim() != logits.getRank() - 1)
    return op->emitOpError("'split' must split the logits' last dimension "
                           "(the vocabulary, ")
           << logits.getRank() - 1 << "), got dimension " << split.getDim();
  return verifySplitGrid(op, split, "split");
}

/// Per-row f32 values of a cross-entropy (`name`): the targets' shape.
static LogicalResult verifyPerRow(Operation *op, StringRef name, Type type,
                                  RankedTensorType targets) {
  auto ranked = cast<RankedTensorType>(type);
  if (ranked.getShape() != targets.getShape())
    return op->emitOpError()
           << name << " shape " << shapeString(ranked.getShape())
           << " must equal the targets shape "
           << shapeString(targets.getShape());
  return success();
}

LogicalResult CrossEntropyPartOp::verify() {
  RankedTensorType targets = getTargets().getType();
  if (failed(verifyLogitsTargets(*this, getLogits().getType(), targets)) ||
      failed(verifyPerRow(*this, "max", getMax().getType(), targets)))
    return failure();
  return verifyVocabularySplit(*this, getSplitAttr(), getLogits().getType());
}

LogicalResult CrossEntropyMergeOp::verify() {
  RankedTensorType targets = getTargets().getType();
  if (failed(verifyPerRow(*this, "sum_exp", getSumExp().getType(), targets)) ||
      failed(verifyPerRow(*this, "target_logit", getTargetLogit().getType(),
                          targets)))
    return failure();
  return verifyPerRow(*this, "max", getMax().getType(), targets);
}

LogicalResult DropoutMaskOp::verify() {
  if (failed(verifyDropoutRate(*this, getRate().convertToDouble())) ||
      failed(verifyDrawSplit(*this, getSplitAttr(), getMask().getType())))
    return failure();
  return verifyDropoutCounters(*this, getOffsetAttr().getInt(),
                               getFirstAttr().getInt(), getPart(),
                               getPartElementsAttr().getInt(),
                               getRankElementsAttr().getInt());
}

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingGradOp::verify() {
  RankedTensorType grad = getGrad().getType(), ids = getIds().getType();
  RankedTensorType result = getResult().getType();
  if (result.getRank() != 2)
    return emitOpError("result must have rank 2 ([vocab, hidden])");
  SmallVector<int64_t> expected(ids.getShape());
  expected.push_back(result.getDimSize(1));
  if (grad.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("grad shape must be ")
           << shapeString(expected) << " (ids shape, then hidden), got "
           << shapeString(grad.getShape());
  return verifyTableSplit(*this, getSplitAttr());
}

LogicalResult CrossEntropyPartGradOp::verify() {
  RankedTensorType targets = getTargets().getType();
  if (failed(verifyLogitsTargets(*this, getLogits().getType(), targets)) ||
      failed(
          verifyPerRow(*this, "d_sum_exp", getDSumExp().getType(), targets)) ||
      failed(verifyPerRow(*this, "d_target_logit", getDTargetLogit().getType(),
                          targets)) ||
      failed(verifyPerRow(*this, "max", getMax().getType(), targets)))
    return failure();
  return verifyVocabularySplit(*this, getSplitAttr(), getLogits().getType());
}

LogicalResult CrossEntropyMergeGradOp::verify() {
  RankedTensorType targets = getTargets().getType();
  if (failed(verifyPerRow(*this, "sum_exp", getSumExp().getType(), targets)) ||
      failed(verifyPerRow(*this, "d_sum_exp", getDSumExp().getType(), targets)))
    return failure();
  return verifyPerRow(*this, "d_target_logit", getDTargetLogit().getType(),
                      targets);
}

LogicalResult SumToOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (!isBroadcastableTo(out.getShape(), in.getShape()))
    return emitOpError("result shape ")
           << shapeString(out.getShape())
           << " must broadcast to the input shape "
           << shapeString(in.getShape());
  return success();
}

/// The checks shared by the two norm gradients.
template <typename NormGradOp>
static LogicalResult verifyNormGrad(NormGradOp op) {
  if (op.getGrad().getType().getShape() != op.getInput().getType().getShape())
    return op.emitOpError("grad and input shapes must match");
  if (op.getInputGrad().getType().getShape() !=
      op.getInput().getType().getShape())
    return op.emitOpError("input_grad shape must equal the input shape");
  if (op.getGammaGrad().getType().getShape() !=
      op.getGamma().getType().getShape())
    return op.emitOpError("gamma_grad shape must equal the gamma shape");
  if (failed(verifyFeatureVector(op, "gamma", op.getGamma(), op.getInput())) ||
      failed(verifyEpsilon(op, op.getEpsilon().convertToDouble())))
    return failure();
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  if (failed(verifyNormGrad(*this)))
    return failure();
  if (getBetaGrad().getType().getShape() != getGamma().getType().getShape())
    return emitOpError("beta_grad shape must equal the gamma shape");
  return success();
}

LogicalResult RMSNormGradOp::verify() {
  if (failed(verifyNormGrad(*this)) ||
      failed(verifyGainOffset(*this, getGainOffset().convertToDouble())))
    return failure();
  return success();
}

/// The shape of `value`, a ranked tensor.
static ShapedTypeComponents shapeOf(Value value) {
  return ShapedTypeComponents(cast<ShapedType>(value.getType()).getShape());
}

// The gradients' shapes follow the operands they are gradients of (their
// element types are the step's choice: a 16-bit step may keep some in f32).
LogicalResult LayerNormGradOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &shapes) {
  shapes.append({shapeOf(adaptor.getGrad()), shapeOf(adaptor.getGamma()),
                 shapeOf(adaptor.getGamma())});
  return success();
}

LogicalResult RMSNormGradOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &shapes) {
  shapes.append({shapeOf(adaptor.getGrad()), shapeOf(adaptor.getGamma())});
  return success();
}

LogicalResult CrossEntropyGradOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &shapes) {
  shapes.push_back(shapeOf(adaptor.getLogits()));
  return success();
}

LogicalResult DropoutOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &shapes) {
  shapes.append({shapeOf(adaptor.getInput()), shapeOf(adaptor.getInput())});
  return success();
}

LogicalResult DropoutGradOp::verify() {
  if (failed(verifyDropoutRate(*this, getRate().convertToDouble())))
    return failure();
  if (getMask().getType().getShape() != getGrad().getType().getShape())
    return emitOpError("mask shape must equal the grad shape");
  return success();
}

LogicalResult CrossEntropyGradOp::verify() {
  if (getResult().getType().getShape() != getLogits().getType().getShape())
    return emitOpError("result shape must equal the logits shape");
  if (failed(verifyLabelSmoothing(
          *this, getLabelSmoothingAttr().getValueAsDouble())))
    return failure();
  return verifyLogitsTargets(*this, getLogits().getType(),
                             getTargets().getType());
}

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

LogicalResult BlockOp::verify() {
  std::optional<int64_t> layer;
  if (IntegerAttr layerAttr = getLayerAttr())
    layer = layerAttr.getInt();
  BlockKind kind = getKind();
  if ((kind == BlockKind::attention || kind == BlockKind::mlp) && !layer)
    return emitOpError("block of kind '")
           << stringifyBlockKind(kind) << "' needs a layer index";
  if (layer && *layer < 0)
    return emitOpError("layer index must be >= 0, got ") << *layer;
  // Blocks partition the step: the passes (autodiff's per-block backward,
  // remat's policies, ZeRO's gathers, the report's attribution) take each
  // as one part of the model.
  if (auto outer = (*this)->getParentOfType<BlockOp>())
    return emitOpError("is nested in another train.block (")
           << stringifyBlockKind(outer.getKind())
           << "); blocks partition the step: put them side by side";
  Block &body = getBody().front();
  auto yield = body.empty() ? YieldOp() : dyn_cast<YieldOp>(body.back());
  if (!yield)
    return emitOpError("body must end with train.yield");
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yielded types must equal the block's result types");
  return success();
}

LogicalResult RematOp::verify() {
  Block &body = getBody().front();
  auto yield = body.empty() ? YieldOp() : dyn_cast<YieldOp>(body.back());
  if (!yield)
    return emitOpError("body must end with train.yield");
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yielded types must equal the region's result types");
  // Recompute repeats the region: only ops without side effects repeat
  // without changing the program.
  WalkResult result = getBody().walk([&](Operation *op) {
    if (isa<YieldOp, TransparentRegionOpInterface>(op) ||
        isMemoryEffectFree(op))
      return WalkResult::advance();
    emitOpError("cannot recompute '")
        << op->getName() << "': it has side effects";
    return WalkResult::interrupt();
  });
  return failure(result.wasInterrupted());
}

/// Control flow of a transparent region (RegionBranchOpInterface): the parent
/// enters the body once, and the body's yield gives the parent's results.
static void getTransparentSuccessors(Operation *op, Region &body,
                                     RegionBranchPoint point,
                                     SmallVectorImpl<RegionSuccessor> &regions) {
  if (point.isParent())
    regions.emplace_back(&body);
  else
    regions.emplace_back(op, op->getResults());
}

void BlockOp::getSuccessorRegions(RegionBranchPoint point,
                                  SmallVectorImpl<RegionSuccessor> &regions) {
  getTransparentSuccessors(*this, getBody(), point, regions);
}

void RematOp::getSuccessorRegions(RegionBranchPoint point,
                                  SmallVectorImpl<RegionSuccessor> &regions) {
  getTransparentSuccessors(*this, getBody(), point, regions);
}

LogicalResult SliceRowsOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getRank() < 1 || in.getRank() != out.getRank() ||
      in.getShape().drop_front() != out.getShape().drop_front() ||
      in.getElementType() != out.getElementType())
    return emitOpError("result must be input rows: same rank, element type "
                       "and dimensions after the first");
  // Rows past the end are padding (a micro-batch may be all padding when
  // the batch splits unevenly).
  if (getOffsetAttr().getInt() < 0)
    return emitOpError("offset must be >= 0");
  return success();
}

int64_t AccumulateOp::getMicroBatchRows() {
  auto type = cast<RankedTensorType>(getInputs().front().getType());
  int64_t steps = getStepsAttr().getInt();
  return (type.getDimSize(0) + steps - 1) / steps;
}

double AccumulateOp::getShare(int64_t step) {
  int64_t rows = cast<RankedTensorType>(getInputs().front().getType())
                     .getDimSize(0);
  int64_t micro = getMicroBatchRows();
  int64_t real = std::max<int64_t>(
      0, std::min<int64_t>(micro, rows - step * micro));
  return static_cast<double>(real) / static_cast<double>(rows);
}

BlockArgument AccumulateOp::getIndexArgument() {
  if (!getIndexed())
    return BlockArgument();
  return getBody().front().getArgument(getInputs().size());
}

BlockArgument AccumulateOp::getShareArgument() {
  if (!getWeighted())
    return BlockArgument();
  return getBody().front().getArguments().back();
}

SmallVector<std::pair<int64_t, bool>> AccumulateOp::getSumOrder() {
  int64_t steps = getStepsAttr().getInt();
  int64_t groups = getGroups().value_or(1);
  if (groups < 1 || steps % groups != 0)
    groups = 1; // the verifier refuses it
  int64_t members = steps / groups;
  SmallVector<std::pair<int64_t, bool>> order;
  for (int64_t j = 0; j < groups; ++j)
    for (int64_t k = 0; k < members; ++k)
      order.push_back(
          {getInterleaved() ? j + k * groups : j * members + k, k == 0});
  return order;
}

LogicalResult AccumulateOp::verify() {
  int64_t steps = getStepsAttr().getInt();
  if (getInputs().empty())
    return emitOpError("needs at least one input to split");
  int64_t rows = cast<RankedTensorType>(getInputs().front().getType())
                     .getDimSize(0);
  if (steps < 1)
    return emitOpError("steps must be >= 1, got ") << steps;
  if (steps > rows)
    return emitOpError("steps (")
           << steps << ") must not exceed the batch (" << rows << " rows)";
  if (getPadding().size() != getInputs().size())
    return emitOpError("needs one padding value per input");
  if (std::optional<int64_t> groups = getGroups()) {
    if (*groups < 1 || steps % *groups != 0)
      return emitOpError("groups (")
             << *groups << ") must divide steps (" << steps << ")";
  } else if (getInterleaved()) {
    return emitOpError("interleaved needs groups");
  }
  if (std::optional<ArrayRef<bool>> host = getHostSums();
      host && host->size() != getNumResults())
    return emitOpError("host_sums needs one flag per result (")
           << getNumResults() << "), got " << host->size();
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size() + (getIndexed() ? 1 : 0) +
                                    (getWeighted() ? 1 : 0))
    return emitOpError("body must take one micro-batch per input")
           << (getIndexed() ? ", then the micro-batch's index" : "")
           << (getWeighted() ? ", then the micro-batch's share" : "");
  if (getIndexed() &&
      getIndexArgument().getType() !=
          RankedTensorType::get({}, IntegerType::get(getContext(), 64)))
    return emitOpError("the index argument must be a tensor<i64>");
  if (getWeighted() &&
      getShareArgument().getType() !=
          RankedTensorType::get({}, Float32Type::get(getContext())))
    return emitOpError("the share argument must be a tensor<f32>");
  int64_t micro = getMicroBatchRows();
  for (auto [input, arg] : llvm::zip(getInputs(), body.getArguments())) {
    auto type = cast<RankedTensorType>(input.getType());
    if (type.getRank() < 1 || type.getDimSize(0) != rows)
      return emitOpError("inputs must share their first dimension");
    SmallVector<int64_t> shape(type.getShape());
    shape[0] = micro;
    if (arg.getType() != RankedTensorType::get(shape, type.getElementType()))
      return emitOpError("body argument must be a micro-batch of ")
             << micro << " rows of its input";
  }
  auto yield = body.empty() ? YieldOp() : dyn_cast<YieldOp>(body.back());
  if (!yield)
    return emitOpError("body must end with train.yield");
  if (yield.getValues().size() != getNumResults())
    return emitOpError("must have one result per yielded value");
  for (auto [value, result] : llvm::zip(yield.getValues(), getResults())) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    auto resultType = cast<RankedTensorType>(result.getType());
    if (!type || !isa<FloatType>(type.getElementType()) ||
        resultType.getShape() != type.getShape() ||
        !(resultType.getElementType().isF32() ||
          resultType.getElementType() == type.getElementType()))
      return emitOpError("results must be sums of the yielded float tensors, "
                         "in f32 or in the yielded value's own type");
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Optimizer side
//===----------------------------------------------------------------------===//

static LogicalResult verifyBeta(Operation *op, StringRef name, double beta) {
  if (!(beta >= 0.0 && beta < 1.0))
    return op->emitOpError() << name << " must be in [0, 1), got " << beta;
  return success();
}

/// beta1, beta2, epsilon and weight_decay of train.adamw and
/// train.adamw_8bit.
template <typename Op> static LogicalResult verifyAdamWAttrs(Op op) {
  if (failed(verifyBeta(op, "beta1", op.getBeta1().convertToDouble())) ||
      failed(verifyBeta(op, "beta2", op.getBeta2().convertToDouble())) ||
      failed(verifyEpsilon(op, op.getEpsilon().convertToDouble())))
    return failure();
  if (!(op.getWeightDecay().convertToDouble() >= 0.0))
    return op.emitOpError("weight_decay must be >= 0");
  return success();
}

//===----------------------------------------------------------------------===//
// `<operands> attr-dict : <operand types>`, results typed as tied operands
//===----------------------------------------------------------------------===//

/// Prints the attribute dictionary as `printOptionalAttrDict` does, with
/// numbers from the dialect's cache of printed attributes: the optimizer
/// updates repeat the same hyperparameters once per parameter.
static void printCachedAttrDict(OpAsmPrinter &p, Operation *op) {
  DictionaryAttr attrs = op->getAttrDictionary();
  if (attrs.empty())
    return;
  auto *dialect = cast<TrainDialect>(op->getDialect());
  p << " {";
  llvm::interleaveComma(attrs, p, [&](NamedAttribute attr) {
    p.printKeywordOrString(attr.getName().getValue());
    if (isa<UnitAttr>(attr.getValue()))
      return;
    p << " = ";
    if (isa<FloatAttr, IntegerAttr>(attr.getValue()))
      dialect->printCachedAttribute(attr.getValue(), p.getStream());
    else
      p.printAttribute(attr.getValue());
  });
  p << "}";
}

static void printOperandsAndTypes(OpAsmPrinter &p, Operation *op) {
  p << ' ';
  p.printOperands(op->getOperands());
  printCachedAttrDict(p, op);
  p << " : ";
  llvm::interleaveComma(op->getOperandTypes(), p);
}

/// Parses `numOperands` operands, an attribute dictionary and their types;
/// result i has the type of operand `tiedOperands[i]`.
static ParseResult parseOperandsAndTypes(OpAsmParser &parser,
                                         OperationState &result,
                                         unsigned numOperands,
                                         ArrayRef<unsigned> tiedOperands) {
  SmallVector<OpAsmParser::UnresolvedOperand> operands;
  SmallVector<Type> types;
  SMLoc operandsLoc = parser.getCurrentLocation();
  if (parser.parseOperandList(operands, numOperands) ||
      parser.parseOptionalAttrDict(result.attributes) ||
      parser.parseColonTypeList(types))
    return failure();
  if (types.size() != numOperands)
    return parser.emitError(operandsLoc)
           << "expected " << numOperands << " operand types, got "
           << types.size();
  if (parser.resolveOperands(operands, types, operandsLoc, result.operands))
    return failure();
  for (unsigned index : tiedOperands)
    result.addTypes(types[index]);
  return success();
}

ParseResult AdamWOp::parse(OpAsmParser &parser, OperationState &result) {
  // param, grad, m, v, lr, step -> new_param, new_m, new_v
  return parseOperandsAndTypes(parser, result, 6, {0, 2, 3});
}

void AdamWOp::print(OpAsmPrinter &p) { printOperandsAndTypes(p, *this); }

ParseResult AdamW8bitOp::parse(OpAsmParser &parser, OperationState &result) {
  // param, grad, m codes, m absmax, v codes, v absmax, lr, step
  //   -> new param, m codes, m absmax, v codes, v absmax
  return parseOperandsAndTypes(parser, result, 8, {0, 2, 3, 4, 5});
}

void AdamW8bitOp::print(OpAsmPrinter &p) { printOperandsAndTypes(p, *this); }

ParseResult SophiaOp::parse(OpAsmParser &parser, OperationState &result) {
  // param, grad, m, h, lr -> new_param, new_m, new_h
  return parseOperandsAndTypes(parser, result, 5, {0, 2, 3});
}

void SophiaOp::print(OpAsmPrinter &p) { printOperandsAndTypes(p, *this); }

ParseResult Sophia8bitOp::parse(OpAsmParser &parser, OperationState &result) {
  // param, grad, m codes, m absmax, h codes, h absmax, lr
  //   -> new param, m codes, m absmax, h codes, h absmax
  return parseOperandsAndTypes(parser, result, 7, {0, 2, 3, 4, 5});
}

void Sophia8bitOp::print(OpAsmPrinter &p) { printOperandsAndTypes(p, *this); }

LogicalResult AdamWOp::verify() {
  ArrayRef<int64_t> shape = getParam().getType().getShape();
  for (Value state : {getGrad(), getM(), getV()})
    if (rankedType(state).getShape() != shape)
      return emitOpError("grad, m and v must have the parameter's shape ")
             << shapeString(shape);
  if (!getM().getType().getElementType().isF32() ||
      !getV().getType().getElementType().isF32())
    return emitOpError("m and v must be f32");
  return verifyAdamWAttrs(*this);
}

/// The hyperparameters of a Train_OneStateOptimizer op, checked by name:
/// betas in [0, 1), weight_decay >= 0 (an optimizer with another kind adds
/// its rule here, with its test).
static LogicalResult verifyHyperparameters(Operation *op) {
  for (NamedAttribute attr : op->getAttrs()) {
    auto value = dyn_cast<FloatAttr>(attr.getValue());
    if (!value)
      continue;
    StringRef name = attr.getName().getValue();
    double v = value.getValueAsDouble();
    if (name.starts_with("beta") && failed(verifyBeta(op, name, v)))
      return failure();
    if (name == "weight_decay" && !(v >= 0.0))
      return op->emitOpError("weight_decay must be >= 0");
  }
  return success();
}

template <typename Op> static LogicalResult verifySophiaAttrs(Op op) {
  if (failed(verifyBeta(op, "beta1", op.getBeta1().convertToDouble())) ||
      failed(verifyEpsilon(op, op.getEpsilon().convertToDouble())))
    return failure();
  double rho = op.getRho().convertToDouble();
  if (!(rho > 0.0 && std::isfinite(rho)))
    return op.emitOpError("rho must be a finite value > 0, got ") << rho;
  if (op.getBatchAttr().getInt() < 1)
    return op.emitOpError("batch (the tokens of a step) must be >= 1, got ")
           << op.getBatchAttr().getInt();
  if (!(op.getWeightDecay().convertToDouble() >= 0.0))
    return op.emitOpError("weight_decay must be >= 0");
  return success();
}

LogicalResult SophiaOp::verify() {
  ArrayRef<int64_t> shape = getParam().getType().getShape();
  for (Value state : {getGrad(), getM(), getH()})
    if (rankedType(state).getShape() != shape)
      return emitOpError("grad, m and h must have the parameter's shape ")
             << shapeString(shape);
  if (!getM().getType().getElementType().isF32() ||
      !getH().getType().getElementType().isF32())
    return emitOpError("m and h must be f32");
  return verifySophiaAttrs(*this);
}

LogicalResult HessianEMAOp::verify() {
  if (getGrad().getType().getShape() != getH().getType().getShape())
    return emitOpError("grad must have h's shape ")
           << shapeString(getH().getType().getShape());
  return verifyBeta(*this, "beta2", getBeta2().convertToDouble());
}

LogicalResult SampleOp::verify() {
  ArrayRef<int64_t> logits = getLogits().getType().getShape();
  if (logits.empty() || logits.back() < 1)
    return emitOpError("logits must have a class dimension of at least 1");
  if (getLabels().getType().getShape() != logits.drop_back())
    return emitOpError("labels must have the logits' shape without the "
                       "class dimension ")
           << shapeString(logits.drop_back());
  if (getOffsetAttr().getInt() < 0)
    return emitOpError("offset must be >= 0");
  return success();
}

LogicalResult SGDOp::verify() {
  ArrayRef<int64_t> shape = getParam().getType().getShape();
  if (getGrad().getType().getShape() != shape)
    return emitOpError("grad must have the parameter's shape");
  if (getNewParam().getType() != getParam().getType())
    return emitOpError("new_param type must equal the parameter type");
  double momentum = getMomentum().convertToDouble();
  if (!(momentum >= 0.0 && momentum < 1.0))
    return emitOpError("momentum must be in [0, 1), got ") << momentum;
  if (!(getWeightDecay().convertToDouble() >= 0.0))
    return emitOpError("weight_decay must be >= 0");
  bool hasBuffer = static_cast<bool>(getMomentumBuffer());
  if (hasBuffer != (momentum > 0.0))
    return emitOpError("a momentum buffer is needed exactly when momentum > 0");
  if (static_cast<bool>(getNewMomentumBuffer()) != hasBuffer)
    return emitOpError("new_momentum_buffer must be present exactly when the "
                       "momentum buffer is");
  if (hasBuffer &&
      (getMomentumBuffer().getType() != getNewMomentumBuffer().getType() ||
       getMomentumBuffer().getType().getShape() != shape))
    return emitOpError(
        "momentum buffer must have the parameter's shape in and out");
  if (getNesterov() && !hasBuffer)
    return emitOpError("nesterov needs momentum > 0");
  return success();
}

/// An exact sum of squares (ExactSum.h) is tensor<kExactSumWords x i64>.
static LogicalResult verifyExactSum(Operation *op, Type type, StringRef what) {
  auto tensor = cast<RankedTensorType>(type);
  if (tensor.getRank() == 1 &&
      tensor.getDimSize(0) == trainmem::kExactSumWords &&
      tensor.getElementType().isInteger(64))
    return success();
  return op->emitOpError(what)
         << " must be tensor<" << trainmem::kExactSumWords
         << "xi64> (an exact sum of squares: " << trainmem::kExactSumLimbs
         << " limbs, the infinite and NaN counts), not " << type;
}

LogicalResult ClipGradNormOp::verify() {
  if (getClipped().size() != getGrads().size())
    return emitOpError("must return one clipped gradient per gradient and "
                       "the norm");
  for (auto [in, out] : llvm::zip(getGrads(), getClipped()))
    if (in.getType() != out.getType())
      return emitOpError("clipped gradient types must equal the gradients'");
  if (!(getMaxNorm().convertToDouble() > 0.0))
    return emitOpError("max_norm must be > 0");
  for (Value squared : getSquaredNorms())
    if (failed(
            verifyExactSum(getOperation(), squared.getType(), "squared_norm")))
      return failure();
  return success();
}

LogicalResult SquaredNormOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one tensor to take the norm of");
  return verifyExactSum(getOperation(), getResult().getType(), "result");
}

/// The loss-scale state: [log2(scale / initial), clean steps, skipped].
static LogicalResult verifyLossScale(Operation *op, Value state,
                                     double initial) {
  auto type = cast<RankedTensorType>(state.getType());
  if (type.getRank() != 1 || type.getDimSize(0) != 3)
    return op->emitOpError("loss-scale state must be tensor<3xi64> (log2 of "
                           "the scale over the initial one, clean steps, "
                           "skipped steps), got ")
           << type;
  if (!trainmem::isUsableLossScale(initial))
    return op->emitOpError("initial loss scale must be a positive normal f32 "
                           "(from 2^-126 to below 2^128), got ")
           << initial;
  return success();
}

LogicalResult LossScaleOp::verify() {
  return verifyLossScale(*this, getState(), getInitial().convertToDouble());
}

LogicalResult UnscaleGradientsOp::verify() {
  if (failed(verifyLossScale(*this, getState(),
                             getInitial().convertToDouble())))
    return failure();
  if (getNewState().getType() != getState().getType())
    return emitOpError("new state must have the state's type");
  if (getGrads().empty())
    return emitOpError("needs at least one gradient");
  if (getUnscaled().size() != getGrads().size())
    return emitOpError("must return one unscaled gradient per gradient");
  for (auto [grad, out] : llvm::zip(getGrads(), getUnscaled())) {
    auto in = cast<RankedTensorType>(grad.getType());
    auto result = cast<RankedTensorType>(out.getType());
    if (in.getShape() != result.getShape() || !result.getElementType().isF32())
      return emitOpError("an unscaled gradient is f32 of its gradient's "
                         "shape, got ")
             << result << " for " << in;
  }
  if (getGrowthInterval() < 1)
    return emitOpError("growth_interval must be >= 1, got ")
           << getGrowthInterval();
  for (Value squared : getSquaredNorms())
    if (failed(
            verifyExactSum(getOperation(), squared.getType(), "squared_norm")))
      return failure();
  return success();
}

/// A block size that is a power of two, and absmax with one entry per
/// block of `elements`.
static LogicalResult verifyBlocks(Operation *op, int64_t block,
                                  int64_t elements, Value absmax) {
  if (block < 1 || (block & (block - 1)) != 0)
    return op->emitOpError("block must be a power of two, got ") << block;
  int64_t blocks = (elements + block - 1) / block;
  auto type = cast<RankedTensorType>(absmax.getType());
  if (type.getRank() != 1 || type.getDimSize(0) != blocks)
    return op->emitOpError("absmax must hold one value per block (")
           << blocks << "), got " << shapeString(type.getShape());
  return success();
}

LogicalResult QuantizeOp::verify() {
  if (getCodes().getType().getShape() != getInput().getType().getShape())
    return emitOpError("codes must have the input's shape");
  return verifyBlocks(*this, getBlockAttr().getInt(),
                      getInput().getType().getNumElements(), getAbsmax());
}

LogicalResult DequantizeOp::verify() {
  if (getResult().getType().getShape() != getCodes().getType().getShape())
    return emitOpError("result must have the codes' shape");
  return verifyBlocks(*this, getBlockAttr().getInt(),
                      getCodes().getType().getNumElements(), getAbsmax());
}

LogicalResult AdamW8bitOp::verify() {
  ArrayRef<int64_t> shape = getParam().getType().getShape();
  if (getGrad().getType().getShape() != shape ||
      getMCodes().getType().getShape() != shape)
    return emitOpError("grad and state codes must have the parameter's shape ")
           << shapeString(shape);
  if (failed(verifyAdamWAttrs(*this)))
    return failure();
  return verifyBlocks(*this, getBlockAttr().getInt(),
                      getParam().getType().getNumElements(), getMAbsmax());
}

LogicalResult Sophia8bitOp::verify() {
  ArrayRef<int64_t> shape = getParam().getType().getShape();
  if (getGrad().getType().getShape() != shape ||
      getMCodes().getType().getShape() != shape)
    return emitOpError("grad and state codes must have the parameter's shape ")
           << shapeString(shape);
  if (failed(verifySophiaAttrs(*this)))
    return failure();
  return verifyBlocks(*this, getBlockAttr().getInt(),
                      getParam().getType().getNumElements(), getMAbsmax());
}

LogicalResult SGD8bitOp::verify() {
  ArrayRef<int64_t> shape = getParam().getType().getShape();
  if (getGrad().getType().getShape() != shape ||
      getCodes().getType().getShape() != shape)
    return emitOpError("grad and buffer codes must have the parameter's "
                       "shape ")
           << shapeString(shape);
  double momentum = getMomentum().convertToDouble();
  if (!(momentum > 0.0 && momentum < 1.0))
    return emitOpError("momentum must be in (0, 1), got ") << momentum;
  if (!(getWeightDecay().convertToDouble() >= 0.0))
    return emitOpError("weight_decay must be >= 0");
  return verifyBlocks(*this, getBlockAttr().getInt(),
                      getParam().getType().getNumElements(), getAbsmax());
}

LogicalResult LRScheduleOp::verify() {
  double peak = getPeakLr().convertToDouble();
  double minLr = getMinLr().convertToDouble();
  if (!(peak > 0.0))
    return emitOpError("peak_lr must be > 0");
  if (!(minLr >= 0.0 && minLr <= peak))
    return emitOpError("min_lr must be in [0, peak_lr]");
  int64_t warmup = getWarmupStepsAttr().getInt();
  if (warmup < 0)
    return emitOpError("warmup_steps must be >= 0");
  if (getTotalStepsAttr().getInt() <= warmup)
    return emitOpError("total_steps must be > warmup_steps");
  return success();
}

//===----------------------------------------------------------------------===//
// Tied results and optimizer updates
//===----------------------------------------------------------------------===//

/// Result i of an update reuses the operand of its parameter or state.
static std::optional<unsigned>
tiedOfUpdate(OptimizerUpdateOpInterface update, unsigned resultIndex) {
  if (resultIndex == 0)
    return 0u; // the parameter
  for (const OptimizerStateUse &use : update.getStateUses())
    if (use.resultIndex == resultIndex)
      return use.operandIndex;
  return std::nullopt;
}

/// train.<optimizer> of a Train_OneStateOptimizer: grad and state shaped as
/// the parameter, the state f32, the hyperparameters in range.
static LogicalResult verifyOneStateUpdate(Operation *op, Value param,
                                          Value grad, Value state) {
  ArrayRef<int64_t> shape = rankedType(param).getShape();
  for (Value value : {grad, state})
    if (rankedType(value).getShape() != shape)
      return op->emitOpError("grad and m must have the parameter's shape ")
             << shapeString(shape);
  if (!rankedType(state).getElementType().isF32())
    return op->emitOpError("m must be f32");
  return verifyHyperparameters(op);
}

/// Its 8-bit form: codes shaped as the parameter, one absmax per block.
static LogicalResult verifyOneState8bitUpdate(Operation *op, Value param,
                                              Value grad, Value codes,
                                              Value absmax, int64_t block) {
  ArrayRef<int64_t> shape = rankedType(param).getShape();
  if (rankedType(grad).getShape() != shape ||
      rankedType(codes).getShape() != shape)
    return op->emitOpError("grad and m codes must have the parameter's shape ")
           << shapeString(shape);
  if (failed(verifyHyperparameters(op)))
    return failure();
  return verifyBlocks(op, block, rankedType(param).getNumElements(), absmax);
}

/// The 8-bit form's attributes: the update's hyperparameters and `block`.
template <typename OpT>
static SmallVector<NamedAttribute>
hyperparametersWithBlock(OpT op, OpBuilder &builder, int64_t block) {
  SmallVector<NamedAttribute> attrs;
  for (StringRef name : OpT::getAttributeNames())
    if (Attribute value = op->getAttr(name))
      attrs.push_back(builder.getNamedAttr(name, value));
  attrs.push_back(
      builder.getNamedAttr("block", builder.getI64IntegerAttr(block)));
  return attrs;
}

std::optional<unsigned> AddOp::getTiedResultOperandIndex(unsigned) {
  // train-unroll-accum's running sum: written over, as the rolled loop's
  // accumulator is.
  if ((*this)->hasAttr(kMicroBatchSumAttrName))
    return 0u;
  return std::nullopt;
}

std::optional<unsigned> ClipGradNormOp::getTiedResultOperandIndex(
    unsigned resultIndex) {
  if (resultIndex < getGrads().size())
    return resultIndex;
  return std::nullopt; // the norm
}

// AdamW: param, grad, m, v, lr, step -> new param, m, v.
SmallVector<OptimizerStateUse> AdamWOp::getStateUses() {
  return {{StateKind::m, StatePart::value, 2, 1},
          {StateKind::v, StatePart::value, 3, 2}};
}
std::optional<unsigned> AdamWOp::getTiedResultOperandIndex(unsigned result) {
  return tiedOfUpdate(*this, result);
}
Operation *AdamWOp::buildBlockwise8bit(OpBuilder &builder, ValueRange codes,
                                       ValueRange absmax, int64_t block) {
  return AdamW8bitOp::create(
      builder, getLoc(), getParam().getType(), codes[0].getType(),
      absmax[0].getType(), codes[1].getType(), absmax[1].getType(),
      getParam(), getGrad(), codes[0], absmax[0], codes[1], absmax[1],
      getLr(), getStep(), getBeta1Attr(), getBeta2Attr(), getEpsilonAttr(),
      getWeightDecayAttr(), builder.getI64IntegerAttr(block));
}

// AdamW on 8-bit state: param, grad, m codes, m absmax, v codes, v absmax,
// lr, step -> new param and the four state tensors.
SmallVector<OptimizerStateUse> AdamW8bitOp::getStateUses() {
  return {{StateKind::m, StatePart::codes, 2, 1},
          {StateKind::m, StatePart::absmax, 3, 2},
          {StateKind::v, StatePart::codes, 4, 3},
          {StateKind::v, StatePart::absmax, 5, 4}};
}
std::optional<unsigned>
AdamW8bitOp::getTiedResultOperandIndex(unsigned result) {
  return tiedOfUpdate(*this, result);
}

// Sophia: param, grad, m, h, lr -> new param, m, h (h as it was).
SmallVector<OptimizerStateUse> SophiaOp::getStateUses() {
  return {{StateKind::m, StatePart::value, 2, 1},
          {StateKind::h, StatePart::value, 3, 2}};
}
std::optional<unsigned> SophiaOp::getTiedResultOperandIndex(unsigned result) {
  return tiedOfUpdate(*this, result);
}
Operation *SophiaOp::buildBlockwise8bit(OpBuilder &builder, ValueRange codes,
                                        ValueRange absmax, int64_t block) {
  return Sophia8bitOp::create(
      builder, getLoc(), getParam().getType(), codes[0].getType(),
      absmax[0].getType(), codes[1].getType(), absmax[1].getType(), getParam(),
      getGrad(), codes[0], absmax[0], codes[1], absmax[1], getLr(),
      getBeta1Attr(), getRhoAttr(), getEpsilonAttr(), getWeightDecayAttr(),
      getBatchAttr(), builder.getI64IntegerAttr(block));
}

// Sophia on 8-bit state: param, grad, m codes, m absmax, h codes, h absmax,
// lr -> new param and the four state tensors.
SmallVector<OptimizerStateUse> Sophia8bitOp::getStateUses() {
  return {{StateKind::m, StatePart::codes, 2, 1},
          {StateKind::m, StatePart::absmax, 3, 2},
          {StateKind::h, StatePart::codes, 4, 3},
          {StateKind::h, StatePart::absmax, 5, 4}};
}
std::optional<unsigned>
Sophia8bitOp::getTiedResultOperandIndex(unsigned result) {
  return tiedOfUpdate(*this, result);
}

// The Hessian step's update: h, grad -> new h. What it updates is h; it
// has no other state.
Value HessianEMAOp::getUpdatedParam() { return getH(); }
Value HessianEMAOp::getNewParamValue() { return getNewH(); }
SmallVector<OptimizerStateUse> HessianEMAOp::getStateUses() { return {}; }
std::optional<unsigned>
HessianEMAOp::getTiedResultOperandIndex(unsigned result) {
  return tiedOfUpdate(*this, result);
}

// SGD: param, grad, lr[, momentum buffer] -> new param[, buffer].
SmallVector<OptimizerStateUse> SGDOp::getStateUses() {
  if (!getMomentumBuffer())
    return {};
  return {{StateKind::momentum, StatePart::value, 3, 1}};
}
std::optional<unsigned> SGDOp::getTiedResultOperandIndex(unsigned result) {
  return tiedOfUpdate(*this, result);
}
Operation *SGDOp::buildBlockwise8bit(OpBuilder &builder, ValueRange codes,
                                     ValueRange absmax, int64_t block) {
  if (!getMomentumBuffer())
    return nullptr;
  return SGD8bitOp::create(
      builder, getLoc(), getParam().getType(), codes[0].getType(),
      absmax[0].getType(), getParam(), getGrad(), codes[0], absmax[0],
      getLr(), getMomentumAttr(), getWeightDecayAttr(), getNesterovAttr(),
      builder.getI64IntegerAttr(block));
}

// SGD on an 8-bit buffer: param, grad, codes, absmax, lr -> new param,
// codes, absmax.
SmallVector<OptimizerStateUse> SGD8bitOp::getStateUses() {
  return {{StateKind::momentum, StatePart::codes, 2, 1},
          {StateKind::momentum, StatePart::absmax, 3, 2}};
}
std::optional<unsigned> SGD8bitOp::getTiedResultOperandIndex(unsigned result) {
  return tiedOfUpdate(*this, result);
}

//===----------------------------------------------------------------------===//
// Result types that follow from the operands
//===----------------------------------------------------------------------===//

static RankedTensorType scalarOf(Type element) {
  return RankedTensorType::get({}, element);
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *context,
                                               std::optional<Location>, Adaptor,
                                               SmallVectorImpl<Type> &types) {
  types.push_back(scalarOf(Float32Type::get(context)));
  types.push_back(scalarOf(IntegerType::get(context, 64)));
  return success();
}

/// f32 tensors of `shape` without its last dimension (a row's values).
static LogicalResult inferRows(std::optional<Location> location, Type input,
                               unsigned count, SmallVectorImpl<Type> &types) {
  auto ranked = dyn_cast<RankedTensorType>(input);
  if (!ranked || ranked.getRank() < 1)
    return emitOptionalError(location, "input must be a ranked tensor of "
                                       "rank >= 1 (rows along its last "
                                       "dimension)");
  auto rows = RankedTensorType::get(ranked.getShape().drop_back(),
                                    Float32Type::get(ranked.getContext()));
  types.append(count, rows);
  return success();
}

LogicalResult RowMaxOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  return inferRows(location, adaptor.getInput().getType(), 1, types);
}

LogicalResult CrossEntropyPartOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  return inferRows(location, adaptor.getLogits().getType(), 2, types);
}

LogicalResult CrossEntropyMergeGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  types.append(2, adaptor.getSumExp().getType());
  return success();
}

LogicalResult
CrossEntropyMergeOp::inferReturnTypes(MLIRContext *context,
                                      std::optional<Location>, Adaptor,
                                      SmallVectorImpl<Type> &types) {
  types.push_back(scalarOf(Float32Type::get(context)));
  types.push_back(scalarOf(IntegerType::get(context, 64)));
  return success();
}

LogicalResult CountValidOp::inferReturnTypes(MLIRContext *context,
                                             std::optional<Location>, Adaptor,
                                             SmallVectorImpl<Type> &types) {
  types.push_back(scalarOf(IntegerType::get(context, 64)));
  return success();
}

LogicalResult LRScheduleOp::inferReturnTypes(MLIRContext *context,
                                             std::optional<Location>, Adaptor,
                                             SmallVectorImpl<Type> &types) {
  types.push_back(scalarOf(Float32Type::get(context)));
  return success();
}

LogicalResult LossScaleOp::inferReturnTypes(MLIRContext *context,
                                            std::optional<Location>, Adaptor,
                                            SmallVectorImpl<Type> &types) {
  types.push_back(scalarOf(Float32Type::get(context)));
  return success();
}

LogicalResult SquaredNormOp::inferReturnTypes(MLIRContext *context,
                                              std::optional<Location>, Adaptor,
                                              SmallVectorImpl<Type> &types) {
  types.push_back(RankedTensorType::get({trainmem::kExactSumWords},
                                        IntegerType::get(context, 64)));
  return success();
}

// Clipping scales the gradients in place; the norm is an f32 scalar.
LogicalResult ClipGradNormOp::inferReturnTypes(MLIRContext *context,
                                               std::optional<Location>,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &types) {
  llvm::append_range(types, adaptor.getGrads().getTypes());
  types.push_back(scalarOf(Float32Type::get(context)));
  return success();
}

// Unscaled gradients are f32 of the gradients' shapes; the state keeps its
// type.
LogicalResult
UnscaleGradientsOp::inferReturnTypes(MLIRContext *context,
                                     std::optional<Location>, Adaptor adaptor,
                                     SmallVectorImpl<Type> &types) {
  for (Type grad : adaptor.getGrads().getTypes())
    types.push_back(RankedTensorType::get(
        cast<RankedTensorType>(grad).getShape(), Float32Type::get(context)));
  types.push_back(adaptor.getState().getType());
  return success();
}

// The update writes the parameter and its momentum buffer in place.
LogicalResult SGDOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  types.push_back(adaptor.getParam().getType());
  if (Value buffer = adaptor.getMomentumBuffer())
    types.push_back(buffer.getType());
  return success();
}

Operation *TransferOp::getWait() {
  for (Operation *user : getResult().getUsers())
    if (isa<TransferWaitOp>(user))
      return user;
  return nullptr;
}

LogicalResult TransferWaitOp::verify() {
  TransferOp transfer = getTransfer();
  if (!transfer)
    return emitOpError("waits for a train.transfer's copy; its operand is "
                       "not one");
  Block *block = (*this)->getBlock();
  if (transfer->getBlock() != block)
    return emitOpError("must be in the block of the train.transfer it waits "
                       "for");
  for (Operation *user : getCopy().getUsers()) {
    if (user == getOperation())
      continue;
    if (isa<TransferWaitOp>(user))
      return emitOpError("is one of two waits of one copy");
    Operation *top = block->findAncestorOpInBlock(*user);
    if (!top || top == getOperation() ||
        !getOperation()->isBeforeInBlock(top)) {
      InFlightDiagnostic diag =
          emitOpError("comes after a reader of its copy, which would read "
                      "it before the copy has finished");
      diag.attachNote(user->getLoc()) << "the reader";
      return diag;
    }
  }
  return success();
}

#define GET_OP_CLASSES
#include "trainmem/Dialect/Train/IR/TrainOps.cpp.inc"

//===----------------------------------------------------------------------===//
// StridedOperandsOpInterface: the operands kernels read through strides
//===----------------------------------------------------------------------===//

bool MatmulOp::readsStridedOperand(unsigned) { return true; }
bool ReshapeOp::readsStridedOperand(unsigned) { return true; }
bool TransposeOp::readsStridedOperand(unsigned) { return true; }
bool BroadcastOp::readsStridedOperand(unsigned) { return true; }
bool SliceOp::readsStridedOperand(unsigned) { return true; }
bool RopeOp::readsStridedOperand(unsigned) { return true; }

bool AttentionOp::readsStridedOperand(unsigned index) {
  Value operand = getOperation()->getOperand(index);
  return operand == getQ() || operand == getK() || operand == getV();
}

bool AttentionGradOp::readsStridedOperand(unsigned index) {
  // The forward's output is read row-major; the output's gradient (a
  // transpose's VJP hands it over as a view) and Q, K, V through strides.
  Value operand = getOperation()->getOperand(index);
  return operand == getQ() || operand == getK() || operand == getV() ||
         operand == getGrad();
}
