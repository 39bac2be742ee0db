//===- TrainToRuntime.cpp - convert-train-to-runtime ----------------------===//
//
// Walks the step in program order (the order the memory analysis measured)
// and emits one runtime call per op, with arena offsets from the static
// plan. Nothing is allocated at run time: the plan is the allocation.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Analysis/Layout.h"
#include "trainmem/Analysis/MemoryAnalysis.h"
#include "trainmem/Analysis/MemoryPlan.h"
#include "trainmem/Conversion/Passes.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir {
namespace train {
#define GEN_PASS_DEF_CONVERTTRAINTORUNTIMEPASS
#include "trainmem/Conversion/Passes.h.inc"

namespace {

/// The runtime functions: name -> parameter letters (RuntimeFunctions.def).
const llvm::StringMap<StringRef> &runtimeSignatures() {
  static const llvm::StringMap<StringRef> signatures = [] {
    llvm::StringMap<StringRef> map;
#define TMRT_FUNCTION(name, signature) map[#name] = signature;
#include "trainmem/Conversion/RuntimeFunctions.def"
    return map;
  }();
  return signatures;
}

/// A call argument: an integer or a floating-point constant.
struct Arg {
  Arg(int64_t value) : isFloat(false), integer(value) {}
  Arg(int value) : isFloat(false), integer(value) {}
  Arg(uint64_t value) : isFloat(false), integer(static_cast<int64_t>(value)) {}
  Arg(double value) : isFloat(true), real(value) {}
  bool isFloat;
  int64_t integer = 0;
  double real = 0.0;
};

class Lowering {
public:
  Lowering(func::FuncOp step, const FunctionMemory &memory,
           const MemoryPlan &plan, OpBuilder &builder, Value ctx)
      : step(step), memory(memory), plan(plan), builder(builder), ctx(ctx) {}

  LogicalResult lower(Operation *op);
  /// Emits the calls that follow into another function, whose argument is
  /// the context.
  void setContext(Value context) { ctx = context; }
  uint64_t numCalls = 0;

private:
  func::FuncOp step;
  const FunctionMemory &memory;
  const MemoryPlan &plan;
  OpBuilder &builder;
  Value ctx;

  int64_t offset(Value value) {
    const Buffer *buffer = memory.lookupBuffer(value);
    assert(buffer && "every tensor has a buffer");
    return static_cast<int64_t>(
        plan.getOffset(buffer - memory.getBuffers().data()));
  }
  static int64_t elements(Value value) {
    return static_cast<int64_t>(getNumElements(value.getType()));
  }
  static ArrayRef<int64_t> shape(Value value) {
    return cast<RankedTensorType>(value.getType()).getShape();
  }
  static int64_t lastDim(Value value) {
    ArrayRef<int64_t> s = shape(value);
    return s.empty() ? 1 : s.back();
  }
  static int64_t rows(Value value) {
    int64_t cols = lastDim(value);
    return cols ? elements(value) / cols : 0;
  }
  static int64_t idBits(Value ids) {
    return cast<RankedTensorType>(ids.getType()).getElementTypeBitWidth();
  }

  void call(StringRef name, ArrayRef<Arg> args, Location loc);
  LogicalResult requireContiguous(Operation *op);
  LogicalResult matmul(MatmulOp op);
  LogicalResult sumTo(SumToOp op);
  LogicalResult copyStrided(ReshapeOp op);
  LogicalResult rope(RopeOp op);
  LogicalResult constant(arith::ConstantOp op);
  LogicalResult clip(ClipGradNormOp op);
};

void Lowering::call(StringRef name, ArrayRef<Arg> args, Location loc) {
  assert(runtimeSignatures().count(name) && "not in RuntimeFunctions.def");
  assert(runtimeSignatures().lookup(name).size() == args.size() + 1 &&
         "argument count differs from RuntimeFunctions.def");
  SmallVector<Value> operands{ctx};
  for (const Arg &arg : args) {
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

LogicalResult Lowering::requireContiguous(Operation *op) {
  for (Value operand : op->getOperands())
    if (isa<RankedTensorType>(operand.getType()) && !isContiguous(operand))
      return op->emitOpError("reads a strided view; the runtime kernel of "
                             "this op needs a row-major operand");
  return success();
}

LogicalResult Lowering::matmul(MatmulOp op) {
  Value a = op.getLhs(), b = op.getRhs(), c = op.getResult();
  ArrayRef<int64_t> cShape = shape(c);
  int64_t batchRank = static_cast<int64_t>(cShape.size()) - 2;
  if (batchRank > 4)
    return op.emitOpError("has ")
           << batchRank << " batch dimensions; the runtime supports up to 4";
  int64_t m = cShape[cShape.size() - 2], n = cShape.back();
  int64_t k = op.getTransposeLhs() ? shape(a)[shape(a).size() - 2]
                                   : shape(a).back();
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
    ArrayRef<int64_t> xShape = shape(x);
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
  call("tmrt_matmul",
       {offset(a), offset(b), offset(c), m, n, k, aRs, aCs, bRs, bCs,
        cBatch[0], cBatch[1], cBatch[2], cBatch[3], aBatch[0], aBatch[1],
        aBatch[2], aBatch[3], bBatch[0], bBatch[1], bBatch[2], bBatch[3]},
       op.getLoc());
  return success();
}

LogicalResult Lowering::sumTo(SumToOp op) {
  if (failed(requireContiguous(op)))
    return failure();
  ArrayRef<int64_t> in = shape(op.getInput()), out = shape(op.getResult());
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
  call("tmrt_sum_to",
       {offset(op.getInput()), offset(op.getResult()), elements(op.getResult()),
        dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], outStrides[0],
        outStrides[1], outStrides[2], outStrides[3], outStrides[4],
        outStrides[5]},
       op.getLoc());
  return success();
}

LogicalResult Lowering::copyStrided(ReshapeOp op) {
  Value in = op.getInput();
  ArrayRef<int64_t> inShape = shape(in);
  if (inShape.size() > 6)
    return op.emitOpError("copies a rank-")
           << inShape.size() << " view; the runtime supports up to 6";
  SmallVector<int64_t> strides = getStrides(in);
  SmallVector<int64_t> dims(6, 1), padded(6, 0);
  for (size_t i = 0; i < inShape.size(); ++i) {
    dims[6 - inShape.size() + i] = inShape[i];
    padded[6 - inShape.size() + i] = strides[i];
  }
  call("tmrt_copy_strided",
       {offset(in), offset(op.getResult()), dims[0], dims[1], dims[2],
        dims[3], dims[4], dims[5], padded[0], padded[1], padded[2], padded[3],
        padded[4], padded[5]},
       op.getLoc());
  return success();
}

LogicalResult Lowering::rope(RopeOp op) {
  Value in = op.getInput();
  ArrayRef<int64_t> inShape = shape(in);
  if (inShape.size() > 4)
    return op.emitOpError("has rank ") << inShape.size()
                                       << "; the runtime supports up to 4";
  SmallVector<int64_t> strides = getStrides(in);
  SmallVector<int64_t> dims(4, 1), padded(4, 0);
  for (size_t i = 0; i < inShape.size(); ++i) {
    dims[4 - inShape.size() + i] = inShape[i];
    padded[4 - inShape.size() + i] = strides[i];
  }
  call("tmrt_rope",
       {offset(in), offset(op.getResult()), dims[0], dims[1], dims[2], dims[3],
        padded[0], padded[1], padded[2], padded[3],
        op.getTheta().convertToDouble(),
        static_cast<int64_t>(op.getInverse())},
       op.getLoc());
  return success();
}

LogicalResult Lowering::constant(arith::ConstantOp op) {
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  auto type = dyn_cast<RankedTensorType>(op.getType());
  if (!dense || !type || !dense.isSplat())
    return op.emitOpError("only splat tensor constants can be lowered");
  Type elementType = type.getElementType();
  if (elementType.isF32())
    call("tmrt_fill_f32",
         {offset(op), elements(op),
          dense.getSplatValue<APFloat>().convertToDouble()},
         op.getLoc());
  else if (elementType.isInteger(64))
    call("tmrt_fill_i64",
         {offset(op), elements(op),
          dense.getSplatValue<APInt>().getSExtValue()},
         op.getLoc());
  else
    return op.emitOpError("constant of type ")
           << type << " cannot be lowered (f32 or i64 only)";
  return success();
}

LogicalResult Lowering::clip(ClipGradNormOp op) {
  call("tmrt_clip_begin", {}, op.getLoc());
  for (Value grad : op.getGrads())
    call("tmrt_clip_accumulate", {offset(grad), elements(grad)}, op.getLoc());
  call("tmrt_clip_finish",
       {offset(op.getNorm()), op.getMaxNorm().convertToDouble()},
       op.getLoc());
  for (auto [grad, clipped] : llvm::zip(op.getGrads(), op.getClipped()))
    call("tmrt_clip_apply", {offset(grad), offset(clipped), elements(grad)},
         op.getLoc());
  return success();
}

LogicalResult Lowering::lower(Operation *op) {
  // Kernels are f32; ids, counts and masks are integers. Blocks only name
  // their values.
  if (!isa<BlockOp, YieldOp>(op)) {
    for (Value value : llvm::concat<Value>(op->getOperands(), op->getResults()))
      if (auto type = dyn_cast<RankedTensorType>(value.getType()))
        if (isa<FloatType>(type.getElementType()) &&
            !type.getElementType().isF32())
          return op->emitOpError("has a ")
                 << type.getElementType()
                 << " tensor; the runtime's kernels are f32 (write the model "
                    "with --dtype f32)";
  }

  Location loc = op->getLoc();
  auto simple = [&](StringRef name, ArrayRef<Arg> args) -> LogicalResult {
    if (failed(requireContiguous(op)))
      return failure();
    call(name, args, loc);
    return success();
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<BlockOp, YieldOp>([](Operation *) { return success(); })
      .Case<RematOp>([](RematOp o) {
        return o.emitOpError("must be materialized before lowering (run "
                             "train-materialize-remat)");
      })
      .Case<TransposeOp>([](Operation *) { return success(); })
      .Case<ReshapeOp>([&](ReshapeOp o) {
        return isAliasingView(o) ? success() : copyStrided(o);
      })
      .Case<arith::ConstantOp>([&](auto o) { return constant(o); })
      .Case<EmbeddingOp>([&](EmbeddingOp o) {
        return simple("tmrt_embedding",
                      {offset(o.getTable()), offset(o.getIds()),
                       offset(o.getResult()), elements(o.getIds()),
                       lastDim(o.getTable()), shape(o.getTable())[0],
                       idBits(o.getIds())});
      })
      .Case<IotaOp>([&](IotaOp o) {
        return simple("tmrt_iota", {offset(o.getResult()),
                                    elements(o.getResult()),
                                    idBits(o.getResult())});
      })
      .Case<MatmulOp>([&](auto o) { return matmul(o); })
      .Case<AddOp>([&](AddOp o) {
        return simple("tmrt_add", {offset(o.getLhs()), offset(o.getRhs()),
                                   offset(o.getResult()),
                                   elements(o.getResult())});
      })
      .Case<MulOp>([&](MulOp o) {
        return simple("tmrt_mul", {offset(o.getLhs()), offset(o.getRhs()),
                                   offset(o.getResult()),
                                   elements(o.getResult())});
      })
      .Case<ScaleOp>([&](ScaleOp o) {
        return simple("tmrt_scale",
                      {offset(o.getInput()), offset(o.getResult()),
                       elements(o.getResult()),
                       o.getFactor().convertToDouble()});
      })
      .Case<BiasAddOp>([&](BiasAddOp o) {
        return simple("tmrt_bias_add",
                      {offset(o.getInput()), offset(o.getBias()),
                       offset(o.getResult()), elements(o.getResult()),
                       elements(o.getBias())});
      })
      .Case<LayerNormOp>([&](LayerNormOp o) {
        return simple("tmrt_layer_norm",
                      {offset(o.getInput()), offset(o.getGamma()),
                       offset(o.getBeta()), offset(o.getResult()),
                       rows(o.getInput()), lastDim(o.getInput()),
                       o.getEpsilon().convertToDouble()});
      })
      .Case<RMSNormOp>([&](RMSNormOp o) {
        return simple("tmrt_rms_norm",
                      {offset(o.getInput()), offset(o.getGamma()),
                       offset(o.getResult()), rows(o.getInput()),
                       lastDim(o.getInput()),
                       o.getEpsilon().convertToDouble()});
      })
      .Case<GeluOp>([&](GeluOp o) {
        return simple("tmrt_gelu", {offset(o.getInput()),
                                    offset(o.getResult()),
                                    elements(o.getResult())});
      })
      .Case<SiluOp>([&](SiluOp o) {
        return simple("tmrt_silu", {offset(o.getInput()),
                                    offset(o.getResult()),
                                    elements(o.getResult())});
      })
      .Case<SoftmaxOp>([&](SoftmaxOp o) {
        ArrayRef<int64_t> s = shape(o.getInput());
        int64_t queries = s.size() >= 2 ? s[s.size() - 2] : 1;
        return simple("tmrt_softmax",
                      {offset(o.getInput()), offset(o.getResult()),
                       rows(o.getInput()), lastDim(o.getInput()), queries,
                       static_cast<int64_t>(o.getCausal())});
      })
      .Case<DropoutOp>([&](DropoutOp o) {
        return simple("tmrt_dropout",
                      {offset(o.getInput()), offset(o.getResult()),
                       offset(o.getMask()), elements(o.getInput()),
                       o.getRate().convertToDouble(),
                       o.getSeedAttr().getInt(), o.getOffsetAttr().getInt(),
                       o.getKey() ? offset(o.getKey()) : int64_t(-1),
                       o.getFirstAttr().getInt(),
                       o.getPart() ? offset(o.getPart()) : int64_t(-1),
                       o.getPartElementsAttr().getInt()});
      })
      .Case<DropoutMaskOp>([&](DropoutMaskOp o) {
        return simple("tmrt_dropout_mask",
                      {offset(o.getMask()), elements(o.getMask()),
                       o.getRate().convertToDouble(),
                       o.getSeedAttr().getInt(), o.getOffsetAttr().getInt(),
                       o.getKey() ? offset(o.getKey()) : int64_t(-1),
                       o.getFirstAttr().getInt(),
                       o.getPart() ? offset(o.getPart()) : int64_t(-1),
                       o.getPartElementsAttr().getInt()});
      })
      .Case<RopeOp>([&](auto o) { return rope(o); })
      .Case<CrossEntropyOp>([&](CrossEntropyOp o) {
        return simple("tmrt_cross_entropy",
                      {offset(o.getLogits()), offset(o.getTargets()),
                       offset(o.getLossSum()), offset(o.getCount()),
                       rows(o.getLogits()), lastDim(o.getLogits()),
                       o.getIgnoreIndexAttr().getInt(),
                       idBits(o.getTargets())});
      })
      .Case<MeanLossOp>([&](MeanLossOp o) {
        return simple("tmrt_mean_loss",
                      {offset(o.getLossSum()), offset(o.getCount()),
                       offset(o.getResult()),
                       o.getWeight() ? offset(o.getWeight()) : int64_t(-1),
                       o.getScale().convertToDouble()});
      })
      .Case<CountValidOp>([&](CountValidOp o) {
        return simple("tmrt_count_valid",
                      {offset(o.getTargets()), offset(o.getCount()),
                       elements(o.getTargets()),
                       o.getIgnoreIndexAttr().getInt(),
                       idBits(o.getTargets())});
      })
      .Case<SliceRowsOp>([&](SliceRowsOp o) {
        auto type = cast<RankedTensorType>(o.getResult().getType());
        int64_t kind = isa<FloatType>(type.getElementType())
                           ? 0
                           : type.getElementTypeBitWidth();
        int64_t rows = type.getDimSize(0);
        return simple("tmrt_slice_rows",
                      {offset(o.getInput()), offset(o.getResult()),
                       o.getOffsetAttr().getInt(), rows,
                       shape(o.getInput())[0],
                       rows ? elements(o.getResult()) / rows : int64_t(0),
                       kind, o.getPaddingAttr().getInt()});
      })
      .Case<AccumulateOp>([](AccumulateOp o) {
        return o.emitOpError("must be unrolled before lowering (run "
                             "train-unroll-accum)");
      })
      .Case<CastOp>([&](CastOp o) {
        return simple("tmrt_copy_f32", {offset(o.getInput()),
                                        offset(o.getResult()),
                                        elements(o.getResult())});
      })
      .Case<EmbeddingGradOp>([&](EmbeddingGradOp o) {
        return simple("tmrt_embedding_grad",
                      {offset(o.getGrad()), offset(o.getIds()),
                       offset(o.getResult()), elements(o.getIds()),
                       lastDim(o.getResult()), shape(o.getResult())[0],
                       idBits(o.getIds())});
      })
      .Case<SumToOp>([&](auto o) { return sumTo(o); })
      .Case<LayerNormGradOp>([&](LayerNormGradOp o) {
        return simple("tmrt_layer_norm_grad",
                      {offset(o.getGrad()), offset(o.getInput()),
                       offset(o.getGamma()), offset(o.getInputGrad()),
                       offset(o.getGammaGrad()), offset(o.getBetaGrad()),
                       rows(o.getInput()), lastDim(o.getInput()),
                       o.getEpsilon().convertToDouble()});
      })
      .Case<RMSNormGradOp>([&](RMSNormGradOp o) {
        return simple("tmrt_rms_norm_grad",
                      {offset(o.getGrad()), offset(o.getInput()),
                       offset(o.getGamma()), offset(o.getInputGrad()),
                       offset(o.getGammaGrad()), rows(o.getInput()),
                       lastDim(o.getInput()),
                       o.getEpsilon().convertToDouble()});
      })
      .Case<GeluGradOp>([&](GeluGradOp o) {
        return simple("tmrt_gelu_grad",
                      {offset(o.getGrad()), offset(o.getInput()),
                       offset(o.getResult()), elements(o.getResult())});
      })
      .Case<SiluGradOp>([&](SiluGradOp o) {
        return simple("tmrt_silu_grad",
                      {offset(o.getGrad()), offset(o.getInput()),
                       offset(o.getResult()), elements(o.getResult())});
      })
      .Case<SoftmaxGradOp>([&](SoftmaxGradOp o) {
        return simple("tmrt_softmax_grad",
                      {offset(o.getGrad()), offset(o.getOutput()),
                       offset(o.getResult()), rows(o.getOutput()),
                       lastDim(o.getOutput())});
      })
      .Case<DropoutGradOp>([&](DropoutGradOp o) {
        return simple("tmrt_dropout_grad",
                      {offset(o.getGrad()), offset(o.getMask()),
                       offset(o.getResult()), elements(o.getResult()),
                       o.getRate().convertToDouble()});
      })
      .Case<CrossEntropyGradOp>([&](CrossEntropyGradOp o) {
        return simple("tmrt_cross_entropy_grad",
                      {offset(o.getGrad()), offset(o.getLogits()),
                       offset(o.getTargets()), offset(o.getResult()),
                       rows(o.getLogits()), lastDim(o.getLogits()),
                       o.getIgnoreIndexAttr().getInt(),
                       idBits(o.getTargets())});
      })
      .Case<AdamWOp>([&](AdamWOp o) {
        return simple("tmrt_adamw",
                      {offset(o.getParam()), offset(o.getGrad()),
                       offset(o.getM()), offset(o.getV()), offset(o.getLr()),
                       offset(o.getStep()), offset(o.getNewParam()),
                       offset(o.getNewM()), offset(o.getNewV()),
                       elements(o.getParam()), o.getBeta1().convertToDouble(),
                       o.getBeta2().convertToDouble(),
                       o.getEpsilon().convertToDouble(),
                       o.getWeightDecay().convertToDouble()});
      })
      .Case<QuantizeOp>([&](QuantizeOp o) {
        return simple("tmrt_quantize",
                      {offset(o.getInput()), offset(o.getCodes()),
                       offset(o.getAbsmax()), elements(o.getInput()),
                       o.getBlockAttr().getInt(),
                       static_cast<int64_t>(o.getIsSigned())});
      })
      .Case<DequantizeOp>([&](DequantizeOp o) {
        return simple("tmrt_dequantize",
                      {offset(o.getCodes()), offset(o.getAbsmax()),
                       offset(o.getResult()), elements(o.getResult()),
                       o.getBlockAttr().getInt(),
                       static_cast<int64_t>(o.getIsSigned())});
      })
      .Case<AdamW8bitOp>([&](AdamW8bitOp o) {
        return simple(
            "tmrt_adamw_8bit",
            {offset(o.getParam()), offset(o.getGrad()), offset(o.getMCodes()),
             offset(o.getMAbsmax()), offset(o.getVCodes()),
             offset(o.getVAbsmax()), offset(o.getLr()), offset(o.getStep()),
             offset(o.getNewParam()), offset(o.getNewMCodes()),
             offset(o.getNewMAbsmax()), offset(o.getNewVCodes()),
             offset(o.getNewVAbsmax()), elements(o.getParam()),
             o.getBlockAttr().getInt(), o.getBeta1().convertToDouble(),
             o.getBeta2().convertToDouble(), o.getEpsilon().convertToDouble(),
             o.getWeightDecay().convertToDouble()});
      })
      .Case<SGD8bitOp>([&](SGD8bitOp o) {
        return simple(
            "tmrt_sgd_8bit",
            {offset(o.getParam()), offset(o.getGrad()), offset(o.getCodes()),
             offset(o.getAbsmax()), offset(o.getLr()), offset(o.getNewParam()),
             offset(o.getNewCodes()), offset(o.getNewAbsmax()),
             elements(o.getParam()), o.getBlockAttr().getInt(),
             o.getMomentum().convertToDouble(),
             o.getWeightDecay().convertToDouble(),
             static_cast<int64_t>(o.getNesterov())});
      })
      .Case<SGDOp>([&](SGDOp o) {
        Value buffer = o.getMomentumBuffer();
        return simple("tmrt_sgd",
                      {offset(o.getParam()), offset(o.getGrad()),
                       offset(o.getLr()),
                       buffer ? offset(buffer) : int64_t(-1),
                       offset(o.getNewParam()),
                       buffer ? offset(o.getNewMomentumBuffer()) : int64_t(-1),
                       elements(o.getParam()),
                       o.getMomentum().convertToDouble(),
                       o.getWeightDecay().convertToDouble(),
                       static_cast<int64_t>(o.getNesterov())});
      })
      .Case<ClipGradNormOp>([&](auto o) {
        return failed(requireContiguous(o)) ? failure() : clip(o);
      })
      .Case<LRScheduleOp>([&](LRScheduleOp o) {
        return simple("tmrt_lr_schedule",
                      {offset(o.getStep()), offset(o.getResult()),
                       o.getPeakLr().convertToDouble(),
                       o.getMinLr().convertToDouble(),
                       o.getWarmupStepsAttr().getInt(),
                       o.getTotalStepsAttr().getInt()});
      })
      .Default([](Operation *o) {
        return o->emitOpError("has no lowering to the trainmem runtime");
      });
}

/// The role and key of argument/result `index` from its markers.
std::pair<StringRef, std::string> roleOf(DictionaryAttr attrs) {
  if (!attrs)
    return {"", ""};
  if (auto state = attrs.getAs<StateAttr>(kOptimizerStateAttrName))
    return {"optimizer_state", state.getKey()};
  for (StringRef name : {kParamAttrName, kInputAttrName, kGradAttrName})
    if (auto value = attrs.getAs<StringAttr>(name))
      return {name.drop_front(strlen("train.")), value.getValue().str()};
  if (attrs.get(kLossAttrName))
    return {"loss", ""};
  if (attrs.get(kGradNormAttrName))
    return {"grad_norm", ""};
  return {"", ""};
}

StringRef dtypeName(Type elementType) {
  if (elementType.isF32())
    return "f32";
  if (elementType.isBF16())
    return "bf16";
  if (elementType.isF16())
    return "f16";
  if (elementType.isInteger(32))
    return "i32";
  if (elementType.isInteger(64))
    return "i64";
  if (elementType.isInteger(8))
    return "i8";
  if (elementType.isInteger(1))
    return "i1";
  return "unknown";
}

struct ConvertTrainToRuntimePass
    : public impl::ConvertTrainToRuntimePassBase<ConvertTrainToRuntimePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Operation *symbol = nullptr;
    if (function.empty()) {
      symbol = findMarkedStep(module, "convert-train-to-runtime");
      if (!symbol)
        return signalPassFailure();
    } else {
      symbol = module.lookupSymbol(function);
    }
    std::string name =
        symbol ? SymbolTable::getSymbolName(symbol).str() : function;
    if (isLoweredStep(symbol)) {
      emitError(symbol->getLoc(), "convert-train-to-runtime: @")
          << name
          << " is already lowered (it takes the runtime's arena, not "
             "tensors); run this pass once, on the tensor-level step";
      return signalPassFailure();
    }
    auto step = dyn_cast_or_null<func::FuncOp>(symbol);
    if (!step || step.isExternal()) {
      emitError(module.getLoc(), "convert-train-to-runtime: no function @")
          << name << " with a body";
      return signalPassFailure();
    }
    for (auto [what, types] :
         {std::pair{"argument", step.getArgumentTypes()},
          std::pair{"result", step.getResultTypes()}})
      for (auto [index, type] : llvm::enumerate(types))
        if (!isa<RankedTensorType>(type)) {
          emitError(step.getLoc(), "convert-train-to-runtime: ")
              << what << " " << index << " of @" << name << " is "
              << type << "; a tensor-level step takes and returns ranked "
              << "tensors";
          return signalPassFailure();
        }
    const FunctionMemory *analyzed = getAnalysis<MemoryAnalysis>().lookup(step);
    if (!analyzed) {
      emitError(step.getLoc(), "convert-train-to-runtime: no memory analysis "
                               "of @")
          << name;
      return signalPassFailure();
    }
    const FunctionMemory &memory = *analyzed;
    if (failed(memory.checkCounts("convert-train-to-runtime")))
      return signalPassFailure();
    MemoryPlan plan(memory);
    MLIRContext *context = &getContext();
    OpBuilder builder(context);

    // Where the host finds each argument and result.
    auto describe = [&](Value value, DictionaryAttr attrs) {
      auto [role, key] = roleOf(attrs);
      const Buffer *buffer = memory.lookupBuffer(value);
      auto type = cast<RankedTensorType>(value.getType());
      NamedAttrList entry;
      entry.append("role", builder.getStringAttr(role));
      entry.append("key", builder.getStringAttr(key));
      // What the runner needs to start the tensor: typed, not a name.
      if (attrs)
        for (StringRef name : {kOptimizerStateAttrName, kInitAttrName})
          if (Attribute typed = attrs.get(name))
            entry.append(name.drop_front(strlen("train.")), typed);
      entry.append("offset",
                   builder.getI64IntegerAttr(static_cast<int64_t>(plan.getOffset(
                       buffer - memory.getBuffers().data()))));
      entry.append("bytes", builder.getI64IntegerAttr(
                                static_cast<int64_t>(getTensorBytes(type))));
      entry.append("shape", builder.getDenseI64ArrayAttr(type.getShape()));
      entry.append("dtype",
                   builder.getStringAttr(dtypeName(type.getElementType())));
      return entry.getDictionary(context);
    };
    SmallVector<Attribute> arguments, results;
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      arguments.push_back(
          describe(step.getArgument(i), step.getArgAttrDict(i)));
    auto ret = cast<func::ReturnOp>(step.front().getTerminator());
    for (auto [i, value] : llvm::enumerate(ret.getOperands()))
      results.push_back(describe(value, step.getResultAttrDict(i)));

    // The lowered step, built next to the original and swapped in.
    builder.setInsertionPoint(step);
    auto ptrType = LLVM::LLVMPointerType::get(context);
    auto lowered = func::FuncOp::create(
        builder, step.getLoc(), name + ".lowered",
        builder.getFunctionType({ptrType}, {}));
    Block *entry = lowered.addEntryBlock();
    builder.setInsertionPointToEnd(entry);
    Lowering lowering(step, memory, plan, builder, lowered.getArgument(0));
    // The calls go into parts of at most kCallsPerPart calls, each a
    // function the step calls in turn: LLVM's code generation takes time
    // superlinear in the size of one function (a step of 256 unrolled
    // micro-batches took minutes to JIT-compile as one).
    constexpr uint64_t kCallsPerPart = 256;
    SmallVector<func::FuncOp> parts;
    OpBuilder stepBuilder(context);
    stepBuilder.setInsertionPointToEnd(entry);
    uint64_t partStart = 0;
    auto erasePartial = [&] {
      lowered.erase();
      for (func::FuncOp part : parts)
        part.erase();
    };
    for (Operation *op : memory.getSchedule()) {
      if (isa<func::ReturnOp>(op))
        continue;
      if (lowering.numCalls - partStart >= kCallsPerPart) {
        if (!parts.empty())
          func::ReturnOp::create(builder, step.getLoc());
        OpBuilder partBuilder(lowered);
        auto part = func::FuncOp::create(
            partBuilder, step.getLoc(),
            (name + ".part" + Twine(parts.size())).str(),
            partBuilder.getFunctionType({ptrType}, {}));
        part.setPrivate();
        parts.push_back(part);
        func::CallOp::create(stepBuilder, step.getLoc(), part,
                             ValueRange{lowered.getArgument(0)});
        Block *partEntry = part.addEntryBlock();
        builder.setInsertionPointToEnd(partEntry);
        lowering.setContext(partEntry->getArgument(0));
        partStart = lowering.numCalls;
      }
      if (failed(lowering.lower(op))) {
        erasePartial();
        return signalPassFailure();
      }
    }
    if (!parts.empty())
      func::ReturnOp::create(builder, step.getLoc());
    func::ReturnOp::create(stepBuilder, step.getLoc());
    numCalls += lowering.numCalls;

    lowered->setAttr(kArenaBytesAttrName,
                     builder.getI64IntegerAttr(
                         static_cast<int64_t>(plan.getArenaBytes())));
    lowered->setAttr(kArgumentSlotsAttrName, builder.getArrayAttr(arguments));
    lowered->setAttr(kResultSlotsAttrName, builder.getArrayAttr(results));
    step.erase();
    lowered.setSymName(name);

    // Declarations of the runtime functions the step calls.
    builder.setInsertionPointToStart(module.getBody());
    llvm::StringSet<> declared;
    auto declare = [&](func::CallOp call) {
      StringRef callee = call.getCallee();
      if (!declared.insert(callee).second || module.lookupSymbol(callee))
        return;
      auto decl = func::FuncOp::create(
          builder, module.getLoc(), callee,
          builder.getFunctionType(call.getOperandTypes(), {}));
      decl.setPrivate();
    };
    lowered.walk(declare);
    for (func::FuncOp part : parts)
      part.walk(declare);
  }
};

} // namespace
} // namespace train
} // namespace mlir
