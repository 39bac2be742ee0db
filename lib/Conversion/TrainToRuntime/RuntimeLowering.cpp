//===- RuntimeLowering.cpp - the train ops' runtime calls -----------------===//
//
// One function per op: the runtime calls that compute it, with arena
// offsets from the RuntimeCallBuilder. registerRuntimeLoweringExternalModels
// attaches them to the ops as RuntimeLoweringOpInterface models; this file
// is the table convert-train-to-runtime lowers with.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Conversion/RuntimeLowering.h"
#include "trainmem/Analysis/Layout.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace mlir::train;

#include "trainmem/Conversion/RuntimeLoweringInterface.cpp.inc"

//===----------------------------------------------------------------------===//
// RuntimeCallBuilder
//===----------------------------------------------------------------------===//

/// The runtime functions: name -> parameter letters (RuntimeFunctions.def).
static const llvm::StringMap<StringRef> &runtimeSignatures() {
  static const llvm::StringMap<StringRef> signatures = [] {
    llvm::StringMap<StringRef> map;
#define TMRT_FUNCTION(name, signature) map[#name] = signature;
#include "trainmem/Conversion/RuntimeFunctions.def"
    return map;
  }();
  return signatures;
}

void RuntimeCallBuilder::call(StringRef name, ArrayRef<RuntimeArg> args,
                              Location loc) {
  assert(runtimeSignatures().count(name) && "not in RuntimeFunctions.def");
  assert(runtimeSignatures().lookup(name).size() == args.size() + 1 &&
         "argument count differs from RuntimeFunctions.def");
  SmallVector<Value> operands{context};
  for (const RuntimeArg &arg : args) {
    if (arg.isFloat)
      operands.push_back(arith::ConstantOp::create(
          builder, loc, builder.getF64FloatAttr(arg.real)));
    else
      operands.push_back(arith::ConstantOp::create(
          builder, loc, builder.getI64IntegerAttr(arg.integer)));
  }
  func::CallOp::create(builder, loc, name, TypeRange{}, operands);
  ++numCalls;
}

LogicalResult RuntimeCallBuilder::requireContiguous(Operation *op) {
  for (Value operand : op->getOperands())
    if (isa<RankedTensorType>(operand.getType()) && !isContiguous(operand))
      return op->emitOpError("reads a strided view; the runtime kernel of "
                             "this op needs a row-major operand");
  return success();
}

LogicalResult RuntimeCallBuilder::callContiguous(Operation *op,
                                                 StringRef name,
                                                 ArrayRef<RuntimeArg> args) {
  if (failed(requireContiguous(op)))
    return failure();
  call(name, args, op->getLoc());
  return success();
}

int64_t RuntimeCallBuilder::elements(Value value) {
  return static_cast<int64_t>(getNumElements(value.getType()));
}

ArrayRef<int64_t> RuntimeCallBuilder::shape(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

int64_t RuntimeCallBuilder::lastDim(Value value) {
  ArrayRef<int64_t> s = shape(value);
  return s.empty() ? 1 : s.back();
}

int64_t RuntimeCallBuilder::rows(Value value) {
  int64_t cols = lastDim(value);
  return cols ? elements(value) / cols : 0;
}

int64_t RuntimeCallBuilder::idBits(Value ids) {
  return cast<RankedTensorType>(ids.getType()).getElementTypeBitWidth();
}

//===----------------------------------------------------------------------===//
// The ops
//===----------------------------------------------------------------------===//

static LogicalResult lowerMatmul(MatmulOp op, RuntimeCallBuilder &builder) {
  Value a = op.getLhs(), b = op.getRhs(), c = op.getResult();
  ArrayRef<int64_t> cShape = builder.shape(c);
  int64_t batchRank = static_cast<int64_t>(cShape.size()) - 2;
  if (batchRank > 4)
    return op.emitOpError("has ")
           << batchRank << " batch dimensions; the runtime supports up to 4";
  int64_t m = cShape[cShape.size() - 2], n = cShape.back();
  int64_t k = op.getTransposeLhs() ? builder.shape(a)[builder.shape(a).size() - 2]
                                   : builder.shape(a).back();
  // op(X) as a matrix: strides of its rows and columns.
  auto matrixStrides = [](Value x, bool transposed) {
    SmallVector<int64_t> s = getStrides(x);
    int64_t rs = s[s.size() - 2], cs = s.back();
    return transposed ? std::make_pair(cs, rs) : std::make_pair(rs, cs);
  };
  auto [aRs, aCs] = matrixStrides(a, op.getTransposeLhs());
  auto [bRs, bCs] = matrixStrides(b, op.getTransposeRhs());
  // Batch strides aligned from the right; broadcast dims get stride 0.
  auto batchStrides = [&](Value x) {
    SmallVector<int64_t> strides(4, 0);
    ArrayRef<int64_t> xShape = builder.shape(x);
    SmallVector<int64_t> xStrides = getStrides(x);
    int64_t xBatch = static_cast<int64_t>(xShape.size()) - 2;
    for (int64_t i = 0; i < xBatch; ++i) {
      int64_t slot = 4 - xBatch + i;
      strides[slot] = xShape[i] == 1 ? 0 : xStrides[i];
    }
    return strides;
  };
  SmallVector<int64_t> cBatch(4, 1);
  for (int64_t i = 0; i < batchRank; ++i)
    cBatch[4 - batchRank + i] = cShape[i];
  SmallVector<int64_t> aBatch = batchStrides(a), bBatch = batchStrides(b);
  builder.call("tmrt_matmul",
       {builder.offset(a), builder.offset(b), builder.offset(c), m, n, k, aRs, aCs, bRs, bCs,
        cBatch[0], cBatch[1], cBatch[2], cBatch[3], aBatch[0], aBatch[1],
        aBatch[2], aBatch[3], bBatch[0], bBatch[1], bBatch[2], bBatch[3]},
       op.getLoc());
  return success();
}

static LogicalResult lowerSumTo(SumToOp op, RuntimeCallBuilder &b) {
  if (failed(b.requireContiguous(op)))
    return failure();
  ArrayRef<int64_t> in = b.shape(op.getInput()), out = b.shape(op.getResult());
  if (in.size() > 6)
    return op.emitOpError("has rank ") << in.size()
                                       << "; the runtime supports up to 6";
  SmallVector<int64_t> dims(6, 1), outStrides(6, 0);
  SmallVector<int64_t> rowMajor = getRowMajorStrides(out);
  for (size_t i = 0; i < in.size(); ++i)
    dims[6 - in.size() + i] = in[i];
  for (size_t i = 0; i < out.size(); ++i) {
    size_t slot = 6 - out.size() + i;
    outStrides[slot] = out[i] == 1 ? 0 : rowMajor[i];
  }
  b.call("tmrt_sum_to",
       {b.offset(op.getInput()), b.offset(op.getResult()), b.elements(op.getResult()),
        dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], outStrides[0],
        outStrides[1], outStrides[2], outStrides[3], outStrides[4],
        outStrides[5]},
       op.getLoc());
  return success();
}

static LogicalResult lowerReshape(ReshapeOp op, RuntimeCallBuilder &b) {
  // A reshape of a row-major value only renames it; of a strided view it
  // copies.
  if (isAliasingView(op))
    return success();
  Value in = op.getInput();
  ArrayRef<int64_t> inShape = b.shape(in);
  if (inShape.size() > 6)
    return op.emitOpError("copies a rank-")
           << inShape.size() << " view; the runtime supports up to 6";
  SmallVector<int64_t> strides = getStrides(in);
  SmallVector<int64_t> dims(6, 1), padded(6, 0);
  for (size_t i = 0; i < inShape.size(); ++i) {
    dims[6 - inShape.size() + i] = inShape[i];
    padded[6 - inShape.size() + i] = strides[i];
  }
  b.call("tmrt_copy_strided",
       {b.offset(in), b.offset(op.getResult()), dims[0], dims[1], dims[2],
        dims[3], dims[4], dims[5], padded[0], padded[1], padded[2], padded[3],
        padded[4], padded[5]},
       op.getLoc());
  return success();
}

static LogicalResult lowerRope(RopeOp op, RuntimeCallBuilder &b) {
  Value in = op.getInput();
  ArrayRef<int64_t> inShape = b.shape(in);
  if (inShape.size() > 4)
    return op.emitOpError("has rank ") << inShape.size()
                                       << "; the runtime supports up to 4";
  SmallVector<int64_t> strides = getStrides(in);
  SmallVector<int64_t> dims(4, 1), padded(4, 0);
  for (size_t i = 0; i < inShape.size(); ++i) {
    dims[4 - inShape.size() + i] = inShape[i];
    padded[4 - inShape.size() + i] = strides[i];
  }
  b.call("tmrt_rope",
       {b.offset(in), b.offset(op.getResult()), dims[0], dims[1], dims[2], dims[3],
        padded[0], padded[1], padded[2], padded[3],
        op.getTheta().convertToDouble(),
        static_cast<int64_t>(op.getInverse())},
       op.getLoc());
  return success();
}

static LogicalResult lowerConstant(arith::ConstantOp op, RuntimeCallBuilder &b) {
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  auto type = dyn_cast<RankedTensorType>(op.getType());
  if (!dense || !type || !dense.isSplat())
    return op.emitOpError("only splat tensor constants can be lowered");
  Type elementType = type.getElementType();
  if (elementType.isF32())
    b.call("tmrt_fill_f32",
         {b.offset(op), b.elements(op),
          dense.getSplatValue<APFloat>().convertToDouble()},
         op.getLoc());
  else if (elementType.isInteger(64))
    b.call("tmrt_fill_i64",
         {b.offset(op), b.elements(op),
          dense.getSplatValue<APInt>().getSExtValue()},
         op.getLoc());
  else
    return op.emitOpError("constant of type ")
           << type << " cannot be lowered (f32 or i64 only)";
  return success();
}

static LogicalResult lowerClip(ClipGradNormOp op, RuntimeCallBuilder &b) {
  if (failed(b.requireContiguous(op)))
    return failure();
  b.call("tmrt_clip_begin", {}, op.getLoc());
  for (Value grad : op.getGrads())
    b.call("tmrt_clip_accumulate", {b.offset(grad), b.elements(grad)}, op.getLoc());
  b.call("tmrt_clip_finish",
       {b.offset(op.getNorm()), op.getMaxNorm().convertToDouble()},
       op.getLoc());
  for (auto [grad, clipped] : llvm::zip(op.getGrads(), op.getClipped()))
    b.call("tmrt_clip_apply", {b.offset(grad), b.offset(clipped), b.elements(grad)},
         op.getLoc());
  return success();
}


static LogicalResult lowerEmbedding(EmbeddingOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_embedding",
                {b.offset(o.getTable()), b.offset(o.getIds()),
                 b.offset(o.getResult()), b.elements(o.getIds()),
                 b.lastDim(o.getTable()), b.shape(o.getTable())[0],
                 b.idBits(o.getIds())});
}

static LogicalResult lowerIota(IotaOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_iota", {b.offset(o.getResult()),
                              b.elements(o.getResult()),
                              b.idBits(o.getResult())});
}

static LogicalResult lowerAdd(AddOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_add", {b.offset(o.getLhs()), b.offset(o.getRhs()),
                             b.offset(o.getResult()),
                             b.elements(o.getResult())});
}

static LogicalResult lowerMul(MulOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_mul", {b.offset(o.getLhs()), b.offset(o.getRhs()),
                             b.offset(o.getResult()),
                             b.elements(o.getResult())});
}

static LogicalResult lowerScale(ScaleOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_scale",
                {b.offset(o.getInput()), b.offset(o.getResult()),
                 b.elements(o.getResult()),
                 o.getFactor().convertToDouble()});
}

static LogicalResult lowerBiasAdd(BiasAddOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_bias_add",
                {b.offset(o.getInput()), b.offset(o.getBias()),
                 b.offset(o.getResult()), b.elements(o.getResult()),
                 b.elements(o.getBias())});
}

static LogicalResult lowerLayerNorm(LayerNormOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_layer_norm",
                {b.offset(o.getInput()), b.offset(o.getGamma()),
                 b.offset(o.getBeta()), b.offset(o.getResult()),
                 b.rows(o.getInput()), b.lastDim(o.getInput()),
                 o.getEpsilon().convertToDouble()});
}

static LogicalResult lowerRMSNorm(RMSNormOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_rms_norm",
                {b.offset(o.getInput()), b.offset(o.getGamma()),
                 b.offset(o.getResult()), b.rows(o.getInput()),
                 b.lastDim(o.getInput()),
                 o.getEpsilon().convertToDouble()});
}

static LogicalResult lowerGelu(GeluOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_gelu", {b.offset(o.getInput()),
                              b.offset(o.getResult()),
                              b.elements(o.getResult())});
}

static LogicalResult lowerSilu(SiluOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_silu", {b.offset(o.getInput()),
                              b.offset(o.getResult()),
                              b.elements(o.getResult())});
}

static LogicalResult lowerSoftmax(SoftmaxOp o, RuntimeCallBuilder &b) {
  ArrayRef<int64_t> s = b.shape(o.getInput());
  int64_t queries = s.size() >= 2 ? s[s.size() - 2] : 1;
  return b.callContiguous(o, "tmrt_softmax",
                {b.offset(o.getInput()), b.offset(o.getResult()),
                 b.rows(o.getInput()), b.lastDim(o.getInput()), queries,
                 static_cast<int64_t>(o.getCausal())});
}

static LogicalResult lowerDropout(DropoutOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_dropout",
                {b.offset(o.getInput()), b.offset(o.getResult()),
                 b.offset(o.getMask()), b.elements(o.getInput()),
                 o.getRate().convertToDouble(),
                 o.getSeedAttr().getInt(), o.getOffsetAttr().getInt(),
                 o.getKey() ? b.offset(o.getKey()) : int64_t(-1),
                 o.getFirstAttr().getInt(),
                 o.getPart() ? b.offset(o.getPart()) : int64_t(-1),
                 o.getPartElementsAttr().getInt()});
}

static LogicalResult lowerDropoutMask(DropoutMaskOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_dropout_mask",
                {b.offset(o.getMask()), b.elements(o.getMask()),
                 o.getRate().convertToDouble(),
                 o.getSeedAttr().getInt(), o.getOffsetAttr().getInt(),
                 o.getKey() ? b.offset(o.getKey()) : int64_t(-1),
                 o.getFirstAttr().getInt(),
                 o.getPart() ? b.offset(o.getPart()) : int64_t(-1),
                 o.getPartElementsAttr().getInt()});
}

static LogicalResult lowerCrossEntropy(CrossEntropyOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_cross_entropy",
                {b.offset(o.getLogits()), b.offset(o.getTargets()),
                 b.offset(o.getLossSum()), b.offset(o.getCount()),
                 b.rows(o.getLogits()), b.lastDim(o.getLogits()),
                 o.getIgnoreIndexAttr().getInt(),
                 b.idBits(o.getTargets())});
}

static LogicalResult lowerMeanLoss(MeanLossOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_mean_loss",
                {b.offset(o.getLossSum()), b.offset(o.getCount()),
                 b.offset(o.getResult()),
                 o.getWeight() ? b.offset(o.getWeight()) : int64_t(-1),
                 o.getScale().convertToDouble()});
}

static LogicalResult lowerCountValid(CountValidOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_count_valid",
                {b.offset(o.getTargets()), b.offset(o.getCount()),
                 b.elements(o.getTargets()),
                 o.getIgnoreIndexAttr().getInt(),
                 b.idBits(o.getTargets())});
}

static LogicalResult lowerSliceRows(SliceRowsOp o, RuntimeCallBuilder &b) {
  auto type = cast<RankedTensorType>(o.getResult().getType());
  int64_t kind = isa<FloatType>(type.getElementType())
                     ? 0
                     : type.getElementTypeBitWidth();
  int64_t rows = type.getDimSize(0);
  return b.callContiguous(o, "tmrt_slice_rows",
                {b.offset(o.getInput()), b.offset(o.getResult()),
                 o.getOffsetAttr().getInt(), rows,
                 b.shape(o.getInput())[0],
                 rows ? b.elements(o.getResult()) / rows : int64_t(0),
                 kind, o.getPaddingAttr().getInt()});
}


static LogicalResult lowerCast(CastOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_copy_f32", {b.offset(o.getInput()),
                                  b.offset(o.getResult()),
                                  b.elements(o.getResult())});
}

static LogicalResult lowerEmbeddingGrad(EmbeddingGradOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_embedding_grad",
                {b.offset(o.getGrad()), b.offset(o.getIds()),
                 b.offset(o.getResult()), b.elements(o.getIds()),
                 b.lastDim(o.getResult()), b.shape(o.getResult())[0],
                 b.idBits(o.getIds())});
}

static LogicalResult lowerLayerNormGrad(LayerNormGradOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_layer_norm_grad",
                {b.offset(o.getGrad()), b.offset(o.getInput()),
                 b.offset(o.getGamma()), b.offset(o.getInputGrad()),
                 b.offset(o.getGammaGrad()), b.offset(o.getBetaGrad()),
                 b.rows(o.getInput()), b.lastDim(o.getInput()),
                 o.getEpsilon().convertToDouble()});
}

static LogicalResult lowerRMSNormGrad(RMSNormGradOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_rms_norm_grad",
                {b.offset(o.getGrad()), b.offset(o.getInput()),
                 b.offset(o.getGamma()), b.offset(o.getInputGrad()),
                 b.offset(o.getGammaGrad()), b.rows(o.getInput()),
                 b.lastDim(o.getInput()),
                 o.getEpsilon().convertToDouble()});
}

static LogicalResult lowerGeluGrad(GeluGradOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_gelu_grad",
                {b.offset(o.getGrad()), b.offset(o.getInput()),
                 b.offset(o.getResult()), b.elements(o.getResult())});
}

static LogicalResult lowerSiluGrad(SiluGradOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_silu_grad",
                {b.offset(o.getGrad()), b.offset(o.getInput()),
                 b.offset(o.getResult()), b.elements(o.getResult())});
}

static LogicalResult lowerSoftmaxGrad(SoftmaxGradOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_softmax_grad",
                {b.offset(o.getGrad()), b.offset(o.getOutput()),
                 b.offset(o.getResult()), b.rows(o.getOutput()),
                 b.lastDim(o.getOutput())});
}

static LogicalResult lowerDropoutGrad(DropoutGradOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_dropout_grad",
                {b.offset(o.getGrad()), b.offset(o.getMask()),
                 b.offset(o.getResult()), b.elements(o.getResult()),
                 o.getRate().convertToDouble()});
}

static LogicalResult lowerCrossEntropyGrad(CrossEntropyGradOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_cross_entropy_grad",
                {b.offset(o.getGrad()), b.offset(o.getLogits()),
                 b.offset(o.getTargets()), b.offset(o.getResult()),
                 b.rows(o.getLogits()), b.lastDim(o.getLogits()),
                 o.getIgnoreIndexAttr().getInt(),
                 b.idBits(o.getTargets())});
}

static LogicalResult lowerAdamW(AdamWOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_adamw",
                {b.offset(o.getParam()), b.offset(o.getGrad()),
                 b.offset(o.getM()), b.offset(o.getV()), b.offset(o.getLr()),
                 b.offset(o.getStep()), b.offset(o.getNewParam()),
                 b.offset(o.getNewM()), b.offset(o.getNewV()),
                 b.elements(o.getParam()), o.getBeta1().convertToDouble(),
                 o.getBeta2().convertToDouble(),
                 o.getEpsilon().convertToDouble(),
                 o.getWeightDecay().convertToDouble()});
}

static LogicalResult lowerQuantize(QuantizeOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_quantize",
                {b.offset(o.getInput()), b.offset(o.getCodes()),
                 b.offset(o.getAbsmax()), b.elements(o.getInput()),
                 o.getBlockAttr().getInt(),
                 static_cast<int64_t>(o.getIsSigned())});
}

static LogicalResult lowerDequantize(DequantizeOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_dequantize",
                {b.offset(o.getCodes()), b.offset(o.getAbsmax()),
                 b.offset(o.getResult()), b.elements(o.getResult()),
                 o.getBlockAttr().getInt(),
                 static_cast<int64_t>(o.getIsSigned())});
}

static LogicalResult lowerAdamW8bit(AdamW8bitOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, 
      "tmrt_adamw_8bit",
      {b.offset(o.getParam()), b.offset(o.getGrad()), b.offset(o.getMCodes()),
       b.offset(o.getMAbsmax()), b.offset(o.getVCodes()),
       b.offset(o.getVAbsmax()), b.offset(o.getLr()), b.offset(o.getStep()),
       b.offset(o.getNewParam()), b.offset(o.getNewMCodes()),
       b.offset(o.getNewMAbsmax()), b.offset(o.getNewVCodes()),
       b.offset(o.getNewVAbsmax()), b.elements(o.getParam()),
       o.getBlockAttr().getInt(), o.getBeta1().convertToDouble(),
       o.getBeta2().convertToDouble(), o.getEpsilon().convertToDouble(),
       o.getWeightDecay().convertToDouble()});
}

static LogicalResult lowerSGD8bit(SGD8bitOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, 
      "tmrt_sgd_8bit",
      {b.offset(o.getParam()), b.offset(o.getGrad()), b.offset(o.getCodes()),
       b.offset(o.getAbsmax()), b.offset(o.getLr()), b.offset(o.getNewParam()),
       b.offset(o.getNewCodes()), b.offset(o.getNewAbsmax()),
       b.elements(o.getParam()), o.getBlockAttr().getInt(),
       o.getMomentum().convertToDouble(),
       o.getWeightDecay().convertToDouble(),
       static_cast<int64_t>(o.getNesterov())});
}

static LogicalResult lowerSGD(SGDOp o, RuntimeCallBuilder &b) {
  Value buffer = o.getMomentumBuffer();
  return b.callContiguous(o, "tmrt_sgd",
                {b.offset(o.getParam()), b.offset(o.getGrad()),
                 b.offset(o.getLr()),
                 buffer ? b.offset(buffer) : int64_t(-1),
                 b.offset(o.getNewParam()),
                 buffer ? b.offset(o.getNewMomentumBuffer()) : int64_t(-1),
                 b.elements(o.getParam()),
                 o.getMomentum().convertToDouble(),
                 o.getWeightDecay().convertToDouble(),
                 static_cast<int64_t>(o.getNesterov())});
}

static LogicalResult lowerLRSchedule(LRScheduleOp o, RuntimeCallBuilder &b) {
  return b.callContiguous(o, "tmrt_lr_schedule",
                {b.offset(o.getStep()), b.offset(o.getResult()),
                 o.getPeakLr().convertToDouble(),
                 o.getMinLr().convertToDouble(),
                 o.getWarmupStepsAttr().getInt(),
                 o.getTotalStepsAttr().getInt()});
}

static LogicalResult lowerTranspose(TransposeOp, RuntimeCallBuilder &) {
  // A transpose is a strided view of its operand: no data moves.
  return success();
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

namespace {
/// The model of OpT: calls `Lower`.
template <typename OpT, LogicalResult (*Lower)(OpT, RuntimeCallBuilder &)>
struct LoweringModel
    : public RuntimeLoweringOpInterface::ExternalModel<
          LoweringModel<OpT, Lower>, OpT> {
  LogicalResult lowerToRuntime(Operation *op,
                               RuntimeCallBuilder &builder) const {
    return Lower(cast<OpT>(op), builder);
  }
};

template <typename OpT, LogicalResult (*Lower)(OpT, RuntimeCallBuilder &)>
void attach(MLIRContext *ctx) {
  OpT::template attachInterface<LoweringModel<OpT, Lower>>(*ctx);
}
} // namespace

void mlir::train::registerRuntimeLoweringExternalModels(
    DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, TrainDialect *) {
    attach<EmbeddingOp, lowerEmbedding>(ctx);
    attach<IotaOp, lowerIota>(ctx);
    attach<AddOp, lowerAdd>(ctx);
    attach<MulOp, lowerMul>(ctx);
    attach<ScaleOp, lowerScale>(ctx);
    attach<BiasAddOp, lowerBiasAdd>(ctx);
    attach<LayerNormOp, lowerLayerNorm>(ctx);
    attach<RMSNormOp, lowerRMSNorm>(ctx);
    attach<GeluOp, lowerGelu>(ctx);
    attach<SiluOp, lowerSilu>(ctx);
    attach<SoftmaxOp, lowerSoftmax>(ctx);
    attach<DropoutOp, lowerDropout>(ctx);
    attach<DropoutMaskOp, lowerDropoutMask>(ctx);
    attach<CrossEntropyOp, lowerCrossEntropy>(ctx);
    attach<MeanLossOp, lowerMeanLoss>(ctx);
    attach<CountValidOp, lowerCountValid>(ctx);
    attach<SliceRowsOp, lowerSliceRows>(ctx);
    attach<CastOp, lowerCast>(ctx);
    attach<EmbeddingGradOp, lowerEmbeddingGrad>(ctx);
    attach<LayerNormGradOp, lowerLayerNormGrad>(ctx);
    attach<RMSNormGradOp, lowerRMSNormGrad>(ctx);
    attach<GeluGradOp, lowerGeluGrad>(ctx);
    attach<SiluGradOp, lowerSiluGrad>(ctx);
    attach<SoftmaxGradOp, lowerSoftmaxGrad>(ctx);
    attach<DropoutGradOp, lowerDropoutGrad>(ctx);
    attach<CrossEntropyGradOp, lowerCrossEntropyGrad>(ctx);
    attach<AdamWOp, lowerAdamW>(ctx);
    attach<QuantizeOp, lowerQuantize>(ctx);
    attach<DequantizeOp, lowerDequantize>(ctx);
    attach<AdamW8bitOp, lowerAdamW8bit>(ctx);
    attach<SGD8bitOp, lowerSGD8bit>(ctx);
    attach<SGDOp, lowerSGD>(ctx);
    attach<LRScheduleOp, lowerLRSchedule>(ctx);
    attach<MatmulOp, lowerMatmul>(ctx);
    attach<SumToOp, lowerSumTo>(ctx);
    attach<ReshapeOp, lowerReshape>(ctx);
    attach<RopeOp, lowerRope>(ctx);
    attach<TransposeOp, lowerTranspose>(ctx);
    attach<ClipGradNormOp, lowerClip>(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, arith::ArithDialect *) {
    attach<arith::ConstantOp, lowerConstant>(ctx);
  });
}
