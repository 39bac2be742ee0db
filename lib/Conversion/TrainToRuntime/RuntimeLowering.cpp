//===- RuntimeLowering.cpp - the train ops' runtime calls -----------------===//
//
// One function per op: the runtime calls that compute it, with arena
// offsets from the RuntimeCallBuilder. registerRuntimeLoweringExternalModels
// attaches them to the ops as RuntimeLoweringOpInterface models; this file
// is the table convert-train-to-runtime lowers with.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Conversion/RuntimeLowering.h"
#include "trainmem-runtime/ForEach.h"
#include "trainmem/Analysis/Layout.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainAttrNames.h"
#include "trainmem/Dialect/Train/IR/TrainDialect.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/xxhash.h"

using namespace mlir;
using namespace mlir::train;

#include "trainmem/Conversion/RuntimeLoweringInterface.cpp.inc"

//===----------------------------------------------------------------------===//
// RuntimeCallBuilder
//===----------------------------------------------------------------------===//

#ifndef NDEBUG
/// The runtime functions: name -> ABI letters (generated from Kernels.def).
static const llvm::StringMap<StringRef> &runtimeSignatures() {
  static const llvm::StringMap<StringRef> signatures = [] {
    llvm::StringMap<StringRef> map;
    for (const RuntimeFunctionInfo &function : kRuntimeFunctions)
      map[function.name] = function.signature;
    return map;
  }();
  return signatures;
}
#endif

void RuntimeCallBuilder::call(StringRef name, ArrayRef<RuntimeArg> args,
                              Location loc) {
  assert(runtimeSignatures().count(name) && "not a kernel of Kernels.def");
  assert(runtimeSignatures().lookup(name).size() == args.size() + 1 &&
         "argument count differs from Kernels.def");
  SmallVector<Value> operands{context};
  for (auto [index, arg] : llvm::enumerate(args)) {
    if (arg.dynamic) {
#ifndef NDEBUG
      bool real = runtimeSignatures().lookup(name)[index + 1] == 'f';
      assert(arg.dynamic.getType() == (real ? Type(builder.getF64Type())
                                            : Type(builder.getI64Type())) &&
             "a computed argument of another type than its parameter");
#endif
      operands.push_back(arg.dynamic);
    } else if (arg.isArray)
      operands.push_back(constantArray(arg.array, loc));
    else if (arg.isIntArray)
      operands.push_back(constantIntArray(arg.ints, loc));
    else if (arg.isFloat)
      operands.push_back(arith::ConstantOp::create(
          builder, loc, builder.getF64FloatAttr(arg.real)));
    else
      operands.push_back(arith::ConstantOp::create(
          builder, loc, builder.getI64IntegerAttr(arg.integer)));
  }
  func::CallOp::create(builder, loc, name, TypeRange{}, operands);
  ++numCalls;
}

/// A constant global array of `values` (elements of `elementType`) in the
/// module, named by its contents so that equal arrays share one, and its
/// address; null for none.
template <typename T>
static Value constantGlobal(OpBuilder &builder, ArrayRef<T> values,
                            Type elementType, StringRef prefix, Location loc) {
  auto ptrType = LLVM::LLVMPointerType::get(builder.getContext());
  if (values.empty())
    return LLVM::ZeroOp::create(builder, loc, ptrType);
  Operation *parent = builder.getInsertionBlock()->getParentOp();
  auto module = isa<ModuleOp>(parent) ? cast<ModuleOp>(parent)
                                      : parent->getParentOfType<ModuleOp>();
  uint64_t hash = llvm::xxh3_64bits(
      ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(values.data()),
                        values.size() * sizeof(T)));
  std::string name =
      (prefix + Twine(values.size()) + "_" + llvm::utohexstr(hash)).str();
  if (!module.lookupSymbol(name)) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(module.getBody());
    auto tensorType = RankedTensorType::get(
        {static_cast<int64_t>(values.size())}, elementType);
    LLVM::GlobalOp::create(builder, loc,
                           LLVM::LLVMArrayType::get(elementType, values.size()),
                           /*isConstant=*/true, LLVM::Linkage::Internal, name,
                           DenseElementsAttr::get(tensorType, values));
  }
  return LLVM::AddressOfOp::create(builder, loc, ptrType, name);
}

Value RuntimeCallBuilder::constantArray(ArrayRef<double> values, Location loc) {
  return constantGlobal(builder, values, builder.getF64Type(), "__tmrt_f64_",
                        loc);
}

Value RuntimeCallBuilder::constantIntArray(ArrayRef<int64_t> values,
                                           Location loc) {
  return constantGlobal(builder, values, builder.getI64Type(), "__tmrt_i64_",
                        loc);
}

LogicalResult RuntimeCallBuilder::requireContiguous(Operation *op) {
  for (Value operand : op->getOperands())
    if (isa<RankedTensorType>(operand.getType()) && !isContiguous(operand))
      return op->emitOpError("reads a strided view; the runtime kernel of "
                             "this op needs a row-major operand");
  return success();
}

int64_t RuntimeCallBuilder::dtypeCode(Type type) {
  Type element = getElementTypeOrSelf(type);
  if (element.isBF16())
    return 1;
  if (element.isF16())
    return 2;
  return 0;
}

bool RuntimeCallBuilder::isRuntimeElementType(Type elementType) {
  return elementType.isF32() || elementType.isBF16() || elementType.isF16() ||
         isa<IntegerType, IndexType>(elementType);
}

LogicalResult RuntimeCallBuilder::requireF32(Operation *op, ValueRange values,
                                             StringRef what) {
  for (Value value : values)
    if (dtypeCode(value.getType()) != 0)
      return op->emitOpError("has a ")
             << getElementTypeOrSelf(value.getType()) << " operand; " << what
             << " f32 only (cast it with train.cast)";
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
  builder.emit(rt::matmul{.a = builder.offset(a), .b = builder.offset(b), .c = builder.offset(c), .m = m, .n = n, .k = k, .a_rs = aRs, .a_cs = aCs, .b_rs = bRs, .b_cs = bCs, .c0 = cBatch[0], .c1 = cBatch[1], .c2 = cBatch[2], .c3 = cBatch[3], .a0 = aBatch[0], .a1 = aBatch[1], .a2 = aBatch[2], .a3 = aBatch[3], .b0 = bBatch[0], .b1 = bBatch[1], .b2 = bBatch[2], .b3 = bBatch[3]}, op.getLoc());
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
  SmallVector<int64_t> rowMajor = computeSuffixProduct(out);
  for (size_t i = 0; i < in.size(); ++i)
    dims[6 - in.size() + i] = in[i];
  for (size_t i = 0; i < out.size(); ++i) {
    size_t slot = 6 - out.size() + i;
    outStrides[slot] = out[i] == 1 ? 0 : rowMajor[i];
  }
  b.emit(rt::sum_to{.in = b.offset(op.getInput()), .out = b.offset(op.getResult()), .out_n = b.elements(op.getResult()), .d0 = dims[0], .d1 = dims[1], .d2 = dims[2], .d3 = dims[3], .d4 = dims[4], .d5 = dims[5], .o0 = outStrides[0], .o1 = outStrides[1], .o2 = outStrides[2], .o3 = outStrides[3], .o4 = outStrides[4], .o5 = outStrides[5]}, op.getLoc());
  return success();
}

/// The extents of `shape` and `strides`, right-aligned in six dimensions
/// (size 1, stride 0 before them), as copy_strided and place_strided take
/// them.
static std::pair<SmallVector<int64_t>, SmallVector<int64_t>>
padTo6(ArrayRef<int64_t> shape, ArrayRef<int64_t> strides) {
  SmallVector<int64_t> dims(6, 1), padded(6, 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    dims[6 - shape.size() + i] = shape[i];
    padded[6 - shape.size() + i] = strides[i];
  }
  return {dims, padded};
}

/// A copy_strided or place_strided call from `in` to `out` on the extents
/// `d` and strides `s` (padTo6's).
template <typename Call>
static Call strided6(int64_t in, int64_t out, ArrayRef<int64_t> d,
                     ArrayRef<int64_t> s) {
  return Call{.in = in,
              .out = out,
              .d0 = d[0],
              .d1 = d[1],
              .d2 = d[2],
              .d3 = d[3],
              .d4 = d[4],
              .d5 = d[5],
              .s0 = s[0],
              .s1 = s[1],
              .s2 = s[2],
              .s3 = s[3],
              .s4 = s[4],
              .s5 = s[5]};
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
  auto [d, s] = padTo6(inShape, getStrides(in));
  b.emit(
      strided6<rt::copy_strided>(b.offset(in), b.offset(op.getResult()), d, s),
      op.getLoc());
  return success();
}

static LogicalResult lowerBroadcast(BroadcastOp op, RuntimeCallBuilder &b) {
  // A strided copy whose repeated dimensions have stride 0.
  Value in = op.getInput();
  ArrayRef<int64_t> outShape = b.shape(op.getResult());
  if (outShape.size() > 6)
    return op.emitOpError("broadcasts a rank-")
           << outShape.size() << " tensor; the runtime supports up to 6";
  ArrayRef<int64_t> inShape = b.shape(in);
  SmallVector<int64_t> strides = getStrides(in);
  for (size_t i = 0; i < outShape.size(); ++i)
    if (inShape[i] == 1)
      strides[i] = 0;
  auto [d, s] = padTo6(outShape, strides);
  b.emit(
      strided6<rt::copy_strided>(b.offset(in), b.offset(op.getResult()), d, s),
      op.getLoc());
  return success();
}

/// The byte offset of index `index` along `dim` of `value`'s layout.
static int64_t blockStart(Value value, ArrayRef<int64_t> strides, int64_t dim,
                          int64_t index) {
  auto type = cast<RankedTensorType>(value.getType());
  return index * strides[dim] * (type.getElementTypeBitWidth() / 8);
}

static LogicalResult lowerSlice(SliceOp op, RuntimeCallBuilder &b) {
  // A strided copy of the input's view from the block's first element.
  Value in = op.getInput();
  ArrayRef<int64_t> shape = b.shape(op.getResult());
  if (shape.size() > 6)
    return op.emitOpError("slices a rank-")
           << shape.size() << " tensor; the runtime supports up to 6";
  SmallVector<int64_t> strides = getStrides(in);
  auto [d, s] = padTo6(shape, strides);
  b.emit(
      strided6<rt::copy_strided>(
          b.offset(in) + blockStart(in, strides, op.getDim(), op.getOffset()),
          b.offset(op.getResult()), d, s),
      op.getLoc());
  return success();
}

static LogicalResult lowerSliceGrad(SliceGradOp op, RuntimeCallBuilder &b) {
  // Zeros, then the gradient placed at its block of the row-major result.
  Value result = op.getResult();
  ArrayRef<int64_t> shape = b.shape(op.getGrad());
  if (shape.size() > 6)
    return op.emitOpError("places a rank-")
           << shape.size() << " gradient; the runtime supports up to 6";
  if (failed(b.requireContiguous(op)))
    return failure();
  SmallVector<int64_t> strides = getStrides(result);
  auto [d, s] = padTo6(shape, strides);
  b.emit(
      rt::fill{.out = b.offset(result), .n = b.elements(result), .value = 0.0},
      op.getLoc());
  b.emit(strided6<rt::place_strided>(
             b.offset(op.getGrad()),
             b.offset(result) +
                 blockStart(result, strides, op.getDim(), op.getOffset()),
             d, s),
         op.getLoc());
  return success();
}

/// The runtime's view of a context split: its parts, the stride of its
/// group's ranks and its order; one part (the whole sequence) without one.
struct ContextPlacement {
  int64_t parts = 1, stride = 1, balanced = 0;
};
static FailureOr<ContextPlacement> contextPlacementOf(Operation *op,
                                                      ContextSplitAttr split) {
  if (!split)
    return ContextPlacement{};
  FailureOr<ProcessGroup> group = getContextGroup(op, split);
  if (failed(group))
    return failure();
  return ContextPlacement{split.getParts(), group->stride,
                          split.isBalanced() ? 1 : 0};
}

static LogicalResult lowerRope(RopeOp op, RuntimeCallBuilder &b) {
  FailureOr<ContextPlacement> context =
      contextPlacementOf(op, op.getContextParallelAttr());
  if (failed(context))
    return failure();
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
  b.emit(rt::rope{.in = b.offset(in),
                  .out = b.offset(op.getResult()),
                  .n0 = dims[0],
                  .n1 = dims[1],
                  .s = dims[2],
                  .d = dims[3],
                  .s0 = padded[0],
                  .s1 = padded[1],
                  .ss = padded[2],
                  .sd = padded[3],
                  .theta = op.getTheta().convertToDouble(),
                  .inverse = static_cast<int64_t>(op.getInverse()),
                  .halves = static_cast<int64_t>(op.getHalves()),
                  .context_parts = context->parts,
                  .context_stride = context->stride,
                  .context_balanced = context->balanced},
         op.getLoc());
  return success();
}

static LogicalResult lowerConstant(arith::ConstantOp op, RuntimeCallBuilder &b) {
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  auto type = dyn_cast<RankedTensorType>(op.getType());
  if (!dense || !type || !dense.isSplat())
    return op.emitOpError("only splat tensor constants can be lowered");
  Type elementType = type.getElementType();
  if (isa<FloatType>(elementType) && b.isRuntimeElementType(elementType))
    b.emit(rt::fill{.out = b.offset(op), .n = b.elements(op), .value = dense.getSplatValue<APFloat>().convertToDouble()}, op.getLoc());
  else if (elementType.isInteger(64))
    b.emit(rt::fill_i64{.out = b.offset(op), .n = b.elements(op), .value = dense.getSplatValue<APInt>().getSExtValue()}, op.getLoc());
  else
    return op.emitOpError("constant of type ")
           << type << " cannot be lowered (f32, bf16, f16 or i64 only)";
  return success();
}

static LogicalResult lowerClip(ClipGradNormOp op, RuntimeCallBuilder &b) {
  if (failed(b.requireContiguous(op)))
    return failure();
  if (!op.getSquaredNorms().empty()) {
    b.emit(rt::clip_load_sum{.sum = b.offset(op.getSquaredNorms().front())},
           op.getLoc());
    for (Value squared : op.getSquaredNorms().drop_front())
      b.emit(rt::clip_merge_sum{.sum = b.offset(squared)}, op.getLoc());
  } else {
    b.emit(rt::clip_begin{}, op.getLoc());
    for (Value grad : op.getGrads())
      b.emit(rt::clip_accumulate{.grad = b.offset(grad), .n = b.elements(grad)}, op.getLoc());
  }
  b.emit(rt::clip_finish{.norm = b.offset(op.getNorm()), .max_norm = op.getMaxNorm().convertToDouble()}, op.getLoc());
  for (auto [grad, clipped] : llvm::zip(op.getGrads(), op.getClipped()))
    b.emit(rt::clip_apply{.grad = b.offset(grad), .out = b.offset(clipped), .n = b.elements(grad)}, op.getLoc());
  return success();
}

static LogicalResult lowerSquaredNorm(SquaredNormOp op, RuntimeCallBuilder &b) {
  if (failed(b.requireContiguous(op)))
    return failure();
  b.emit(rt::clip_begin{}, op.getLoc());
  for (Value input : op.getInputs())
    b.emit(rt::clip_accumulate{.grad = b.offset(input), .n = b.elements(input)}, op.getLoc());
  b.emit(rt::clip_store_sum{.out = b.offset(op.getResult())}, op.getLoc());
  return success();
}

/// The runtime's split_parts and split_stride of an op on one rank's part
/// of a vocabulary (a table's rows, the logits' columns): its split's
/// parts and the stride of its grid axis's process group; 1 and 1 when it
/// is whole.
struct VocabularySplit {
  int64_t parts = 1, stride = 1;
};
static FailureOr<VocabularySplit> vocabularySplitOf(Operation *op,
                                                    TensorSplitAttr split) {
  if (!split)
    return VocabularySplit{};
  FailureOr<ProcessGroup> group = getSplitGroup(op, split);
  if (failed(group))
    return failure();
  return VocabularySplit{split.getParts(), group->stride};
}

static LogicalResult lowerEmbedding(EmbeddingOp o, RuntimeCallBuilder &b) {
  FailureOr<VocabularySplit> split = vocabularySplitOf(o, o.getSplitAttr());
  if (failed(split))
    return failure();
  return b.emitContiguous(o, rt::embedding{.table = b.offset(o.getTable()),
                                           .ids = b.offset(o.getIds()),
                                           .out = b.offset(o.getResult()),
                                           .num_ids = b.elements(o.getIds()),
                                           .hidden = b.lastDim(o.getTable()),
                                           .vocab = b.shape(o.getTable())[0],
                                           .id_bits = b.idBits(o.getIds()),
                                           .split_parts = split->parts,
                                           .split_stride = split->stride});
}

static LogicalResult lowerIota(IotaOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::iota{.out = b.offset(o.getResult()), .n = b.elements(o.getResult()), .id_bits = b.idBits(o.getResult())});
}

static LogicalResult lowerContextSlice(ContextSliceOp o,
                                       RuntimeCallBuilder &b) {
  FailureOr<ContextPlacement> context =
      contextPlacementOf(o, o.getContextParallel());
  if (failed(context))
    return failure();
  ArrayRef<int64_t> shape = b.shape(o.getInput());
  int64_t dim = o.getDim(), outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d)
    inner *= shape[d];
  return b.emitContiguous(o,
                          rt::context_slice{.in = b.offset(o.getInput()),
                                            .out = b.offset(o.getResult()),
                                            .outer = outer,
                                            .rows = shape[dim],
                                            .inner = inner,
                                            .id_bits = b.idBits(o.getInput()),
                                            .parts = context->parts,
                                            .stride = context->stride,
                                            .balanced = context->balanced});
}

static LogicalResult lowerAdd(AddOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::add{.a = b.offset(o.getLhs()), .b = b.offset(o.getRhs()), .out = b.offset(o.getResult()), .n = b.elements(o.getResult())});
}

static LogicalResult lowerMul(MulOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::mul{.a = b.offset(o.getLhs()), .b = b.offset(o.getRhs()), .out = b.offset(o.getResult()), .n = b.elements(o.getResult())});
}

static LogicalResult lowerScale(ScaleOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::scale{.in = b.offset(o.getInput()), .out = b.offset(o.getResult()), .n = b.elements(o.getResult()), .factor = o.getFactor().convertToDouble()});
}

static LogicalResult lowerBiasAdd(BiasAddOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::bias_add{.in = b.offset(o.getInput()), .bias = b.offset(o.getBias()), .out = b.offset(o.getResult()), .n = b.elements(o.getResult()), .bias_n = b.elements(o.getBias())});
}

static LogicalResult lowerLayerNorm(LayerNormOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::layer_norm{.in = b.offset(o.getInput()), .gamma = b.offset(o.getGamma()), .beta = b.offset(o.getBeta()), .out = b.offset(o.getResult()), .rows = b.rows(o.getInput()), .cols = b.lastDim(o.getInput()), .eps = o.getEpsilon().convertToDouble()});
}

static LogicalResult lowerRMSNorm(RMSNormOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::rms_norm{.in = b.offset(o.getInput()), .gamma = b.offset(o.getGamma()), .out = b.offset(o.getResult()), .rows = b.rows(o.getInput()), .cols = b.lastDim(o.getInput()), .eps = o.getEpsilon().convertToDouble(), .gain_offset = o.getGainOffset().convertToDouble()});
}

static LogicalResult lowerGelu(GeluOp o, RuntimeCallBuilder &b) {
  if (o.getExact())
    return b.emitContiguous(o, rt::gelu_exact{.in = b.offset(o.getInput()),
                                              .out = b.offset(o.getResult()),
                                              .n = b.elements(o.getResult())});
  return b.emitContiguous(o, rt::gelu{.in = b.offset(o.getInput()), .out = b.offset(o.getResult()), .n = b.elements(o.getResult())});
}

static LogicalResult lowerBiasGelu(BiasGeluOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::bias_gelu{.in = b.offset(o.getInput()), .bias = b.offset(o.getBias()), .out = b.offset(o.getResult()), .n = b.elements(o.getResult()), .bias_n = b.elements(o.getBias())});
}

/// An activation of Activations.def onto its kernel (Call: rt::<kernel>).
template <typename OpT, typename Call>
static LogicalResult lowerActivation(OpT o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, Call{.in = b.offset(o.getInput()),
                                  .out = b.offset(o.getResult()),
                                  .n = b.elements(o.getResult())});
}

/// Its gradient onto rt::<kernel>_grad.
template <typename OpT, typename Call>
static LogicalResult lowerActivationGrad(OpT o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, Call{.dy = b.offset(o.getGrad()),
                                  .x = b.offset(o.getInput()),
                                  .out = b.offset(o.getResult()),
                                  .n = b.elements(o.getResult())});
}

static LogicalResult lowerSoftmax(SoftmaxOp o, RuntimeCallBuilder &b) {
  ArrayRef<int64_t> s = b.shape(o.getInput());
  int64_t queries = s.size() >= 2 ? s[s.size() - 2] : 1;
  int64_t heads =
      o.getAlibiSlopes() ? static_cast<int64_t>(o.getAlibiSlopes()->size()) : 1;
  return b.emitContiguous(o, rt::softmax{.in = b.offset(o.getInput()), .out = b.offset(o.getResult()), .rows = b.rows(o.getInput()), .cols = b.lastDim(o.getInput()), .queries = queries, .causal = static_cast<int64_t>(o.getCausal()), .heads = heads, .alibi_slopes = o.getAlibiSlopes().value_or(ArrayRef<double>())});
}

static LogicalResult lowerDropout(DropoutOp o, RuntimeCallBuilder &b) {
  FailureOr<SplitDrawPlacement> split = getSplitDrawPlacement(o);
  if (failed(split))
    return failure();
  return b.emitContiguous(
      o, rt::dropout{.in = b.offset(o.getInput()),
                     .out = b.offset(o.getResult()),
                     .mask = b.offset(o.getMask()),
                     .n = b.elements(o.getInput()),
                     .rate = o.getRate().convertToDouble(),
                     .seed = o.getSeedAttr().getInt(),
                     .offset = o.getOffsetAttr().getInt(),
                     .key = o.getKey() ? b.offset(o.getKey()) : int64_t(-1),
                     .first = o.getFirstAttr().getInt(),
                     .part = o.getPart() ? b.offset(o.getPart()) : int64_t(-1),
                     .part_elements = o.getPartElementsAttr().getInt(),
                     .rank_elements = o.getRankElementsAttr().getInt(),
                     .rank_stride = o.getRankStrideAttr().getInt(),
                     .split_block = split->block,
                     .split_parts = split->parts,
                     .split_stride = split->stride,
                     .split_balanced = split->balanced ? 1 : 0});
}

static LogicalResult lowerDropoutMask(DropoutMaskOp o, RuntimeCallBuilder &b) {
  FailureOr<SplitDrawPlacement> split = getSplitDrawPlacement(o);
  if (failed(split))
    return failure();
  return b.emitContiguous(
      o, rt::dropout_mask{
             .mask = b.offset(o.getMask()),
             .n = b.elements(o.getMask()),
             .rate = o.getRate().convertToDouble(),
             .seed = o.getSeedAttr().getInt(),
             .offset = o.getOffsetAttr().getInt(),
             .key = o.getKey() ? b.offset(o.getKey()) : int64_t(-1),
             .first = o.getFirstAttr().getInt(),
             .part = o.getPart() ? b.offset(o.getPart()) : int64_t(-1),
             .part_elements = o.getPartElementsAttr().getInt(),
             .rank_elements = o.getRankElementsAttr().getInt(),
             .rank_stride = o.getRankStrideAttr().getInt(),
             .split_block = split->block,
             .split_parts = split->parts,
             .split_stride = split->stride,
             .split_balanced = split->balanced ? 1 : 0});
}

static LogicalResult lowerCrossEntropy(CrossEntropyOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::cross_entropy{.logits = b.offset(o.getLogits()), .targets = b.offset(o.getTargets()), .loss_sum = b.offset(o.getLossSum()), .count = b.offset(o.getCount()), .rows = b.rows(o.getLogits()), .vocab = b.lastDim(o.getLogits()), .ignore_index = o.getIgnoreIndexAttr().getInt(), .id_bits = b.idBits(o.getTargets()), .label_smoothing = o.getLabelSmoothingAttr().getValueAsDouble()});
}

static LogicalResult lowerMeanLoss(MeanLossOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::mean_loss{.loss_sum = b.offset(o.getLossSum()), .count = b.offset(o.getCount()), .out = b.offset(o.getResult()), .weight = o.getWeight() ? b.offset(o.getWeight()) : int64_t(-1), .scale = o.getScale().convertToDouble()});
}

static LogicalResult lowerCountValid(CountValidOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::count_valid{.targets = b.offset(o.getTargets()), .out = b.offset(o.getCount()), .n = b.elements(o.getTargets()), .ignore_index = o.getIgnoreIndexAttr().getInt(), .id_bits = b.idBits(o.getTargets())});
}

static LogicalResult lowerSliceRows(SliceRowsOp o, RuntimeCallBuilder &b) {
  auto type = cast<RankedTensorType>(o.getResult().getType());
  int64_t kind = isa<FloatType>(type.getElementType())
                     ? 0
                     : type.getElementTypeBitWidth();
  int64_t rows = type.getDimSize(0);
  return b.emitContiguous(o, rt::slice_rows{.in = b.offset(o.getInput()), .out = b.offset(o.getResult()), .offset = o.getOffsetAttr().getInt(), .rows = rows, .available = b.shape(o.getInput())[0], .row_elems = rows ? b.elements(o.getResult()) / rows : int64_t(0), .kind = kind, .padding = o.getPaddingAttr().getInt()});
}


static LogicalResult lowerCast(CastOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::convert{.in = b.offset(o.getInput()), .out = b.offset(o.getResult()), .n = b.elements(o.getResult())});
}

/// A copy between the arenas (the result's location names the host arena
/// where the memory plan put it there); started here and finished at its
/// wait where it has one.
static LogicalResult lowerTransfer(TransferOp o, RuntimeCallBuilder &b) {
  int64_t from = b.offset(o.getInput()), to = b.offset(o.getResult());
  auto bytes = static_cast<int64_t>(getTensorBytes(o.getResult().getType()));
  if (o.getWait())
    return b.emitContiguous(
        o, rt::transfer_start{.from = from, .to = to, .bytes = bytes});
  return b.emitContiguous(o,
                          rt::transfer{.from = from, .to = to, .bytes = bytes});
}

/// The wait of an asynchronous copy names its destination.
// A pipeline stage's exchange: its messages noted, then started together.
// A peer stage is the rank (peer - stage) x the stages' rank stride away
// (getPipelineRankStride: a tensor group's size between stages on a
// tensor-parallel step's grid, else 1).
static LogicalResult lowerPipelineExchange(PipelineExchangeOp o,
                                           RuntimeCallBuilder &b) {
  auto func = o->getParentOfType<FunctionOpInterface>();
  auto stage = func->getAttrOfType<PipelineStageAttr>(kPipelineStageAttrName);
  int64_t stride = getPipelineRankStride(func);
  if (!stage)
    return o.emitOpError("is outside a pipeline stage's function (one "
                         "train-pipeline made): its peers have no ranks");
  b.emit(rt::exchange_begin{}, o.getLoc());
  for (auto [value, peer, tag] :
       llvm::zip(o.getSends(), o.getSendPeers(), o.getSendTags()))
    b.emit(rt::exchange_send{.in = b.offset(value),
                             .bytes = static_cast<int64_t>(
                                 getTensorBytes(value.getType())),
                             .peer = (peer - stage.getStage()) * stride,
                             .tag = tag},
           o.getLoc());
  for (auto [value, peer, tag] :
       llvm::zip(o.getReceived(), o.getRecvPeers(), o.getRecvTags()))
    b.emit(rt::exchange_recv{.out = b.offset(value),
                             .bytes = static_cast<int64_t>(
                                 getTensorBytes(value.getType())),
                             .peer = (peer - stage.getStage()) * stride,
                             .tag = tag},
           o.getLoc());
  b.emit(rt::exchange_end{}, o.getLoc());
  return success();
}

static LogicalResult lowerTransferWait(TransferWaitOp o,
                                       RuntimeCallBuilder &b) {
  b.emit(rt::transfer_wait{.to = b.offset(o.getCopy())}, o.getLoc());
  return success();
}

static LogicalResult lowerEmbeddingGrad(EmbeddingGradOp o, RuntimeCallBuilder &b) {
  FailureOr<VocabularySplit> split = vocabularySplitOf(o, o.getSplitAttr());
  if (failed(split))
    return failure();
  return b.emitContiguous(o,
                          rt::embedding_grad{.dy = b.offset(o.getGrad()),
                                             .ids = b.offset(o.getIds()),
                                             .out = b.offset(o.getResult()),
                                             .num_ids = b.elements(o.getIds()),
                                             .hidden = b.lastDim(o.getResult()),
                                             .vocab = b.shape(o.getResult())[0],
                                             .id_bits = b.idBits(o.getIds()),
                                             .split_parts = split->parts,
                                             .split_stride = split->stride});
}

static LogicalResult lowerLayerNormGrad(LayerNormGradOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::layer_norm_grad{.dy = b.offset(o.getGrad()), .x = b.offset(o.getInput()), .gamma = b.offset(o.getGamma()), .dx = b.offset(o.getInputGrad()), .dgamma = b.offset(o.getGammaGrad()), .dbeta = b.offset(o.getBetaGrad()), .rows = b.rows(o.getInput()), .cols = b.lastDim(o.getInput()), .eps = o.getEpsilon().convertToDouble()});
}

static LogicalResult lowerRMSNormGrad(RMSNormGradOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::rms_norm_grad{.dy = b.offset(o.getGrad()), .x = b.offset(o.getInput()), .gamma = b.offset(o.getGamma()), .dx = b.offset(o.getInputGrad()), .dgamma = b.offset(o.getGammaGrad()), .rows = b.rows(o.getInput()), .cols = b.lastDim(o.getInput()), .eps = o.getEpsilon().convertToDouble(), .gain_offset = o.getGainOffset().convertToDouble()});
}

static LogicalResult lowerGeluGrad(GeluGradOp o, RuntimeCallBuilder &b) {
  if (o.getExact())
    return b.emitContiguous(
        o, rt::gelu_exact_grad{.dy = b.offset(o.getGrad()),
                               .x = b.offset(o.getInput()),
                               .out = b.offset(o.getResult()),
                               .n = b.elements(o.getResult())});
  return b.emitContiguous(o, rt::gelu_grad{.dy = b.offset(o.getGrad()), .x = b.offset(o.getInput()), .out = b.offset(o.getResult()), .n = b.elements(o.getResult())});
}

static LogicalResult lowerBiasGeluGrad(BiasGeluGradOp o,
                                       RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::bias_gelu_grad{.dy = b.offset(o.getGrad()), .x = b.offset(o.getInput()), .bias = b.offset(o.getBias()), .out = b.offset(o.getResult()), .n = b.elements(o.getResult()), .bias_n = b.elements(o.getBias())});
}

static LogicalResult lowerSoftmaxGrad(SoftmaxGradOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::softmax_grad{.dy = b.offset(o.getGrad()), .y = b.offset(o.getOutput()), .out = b.offset(o.getResult()), .rows = b.rows(o.getOutput()), .cols = b.lastDim(o.getOutput())});
}

static LogicalResult lowerDropoutGrad(DropoutGradOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::dropout_grad{.dy = b.offset(o.getGrad()), .mask = b.offset(o.getMask()), .out = b.offset(o.getResult()), .n = b.elements(o.getResult()), .rate = o.getRate().convertToDouble()});
}

static LogicalResult lowerRowMax(RowMaxOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::row_max{.in = b.offset(o.getInput()),
                                         .out = b.offset(o.getResult()),
                                         .rows = b.rows(o.getInput()),
                                         .cols = b.lastDim(o.getInput())});
}

static LogicalResult lowerCrossEntropyPart(CrossEntropyPartOp o,
                                           RuntimeCallBuilder &b) {
  FailureOr<VocabularySplit> split = vocabularySplitOf(o, o.getSplitAttr());
  if (failed(split))
    return failure();
  return b.emitContiguous(
      o, rt::cross_entropy_part{.logits = b.offset(o.getLogits()),
                                .targets = b.offset(o.getTargets()),
                                .max = b.offset(o.getMax()),
                                .sum_exp = b.offset(o.getSumExp()),
                                .target_logit = b.offset(o.getTargetLogit()),
                                .rows = b.rows(o.getLogits()),
                                .vocab = b.lastDim(o.getLogits()),
                                .ignore_index = o.getIgnoreIndexAttr().getInt(),
                                .id_bits = b.idBits(o.getTargets()),
                                .split_parts = split->parts,
                                .split_stride = split->stride});
}

static LogicalResult lowerCrossEntropyPartGrad(CrossEntropyPartGradOp o,
                                               RuntimeCallBuilder &b) {
  FailureOr<VocabularySplit> split = vocabularySplitOf(o, o.getSplitAttr());
  if (failed(split))
    return failure();
  return b.emitContiguous(o,
                          rt::cross_entropy_part_grad{
                              .d_sum_exp = b.offset(o.getDSumExp()),
                              .d_target_logit = b.offset(o.getDTargetLogit()),
                              .logits = b.offset(o.getLogits()),
                              .max = b.offset(o.getMax()),
                              .targets = b.offset(o.getTargets()),
                              .out = b.offset(o.getResult()),
                              .rows = b.rows(o.getLogits()),
                              .vocab = b.lastDim(o.getLogits()),
                              .ignore_index = o.getIgnoreIndexAttr().getInt(),
                              .id_bits = b.idBits(o.getTargets()),
                              .split_parts = split->parts,
                              .split_stride = split->stride});
}

static LogicalResult lowerCrossEntropyMerge(CrossEntropyMergeOp o,
                                            RuntimeCallBuilder &b) {
  return b.emitContiguous(
      o,
      rt::cross_entropy_merge{.sum_exp = b.offset(o.getSumExp()),
                              .target_logit = b.offset(o.getTargetLogit()),
                              .max = b.offset(o.getMax()),
                              .targets = b.offset(o.getTargets()),
                              .loss_sum = b.offset(o.getLossSum()),
                              .count = b.offset(o.getCount()),
                              .rows = b.elements(o.getTargets()),
                              .ignore_index = o.getIgnoreIndexAttr().getInt(),
                              .id_bits = b.idBits(o.getTargets())});
}

static LogicalResult lowerCrossEntropyMergeGrad(CrossEntropyMergeGradOp o,
                                                RuntimeCallBuilder &b) {
  return b.emitContiguous(o,
                          rt::cross_entropy_merge_grad{
                              .dloss = b.offset(o.getGrad()),
                              .sum_exp = b.offset(o.getSumExp()),
                              .targets = b.offset(o.getTargets()),
                              .d_sum_exp = b.offset(o.getDSumExp()),
                              .d_target_logit = b.offset(o.getDTargetLogit()),
                              .rows = b.elements(o.getTargets()),
                              .ignore_index = o.getIgnoreIndexAttr().getInt(),
                              .id_bits = b.idBits(o.getTargets())});
}

static LogicalResult lowerCrossEntropyGrad(CrossEntropyGradOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::cross_entropy_grad{.dloss = b.offset(o.getGrad()), .logits = b.offset(o.getLogits()), .targets = b.offset(o.getTargets()), .out = b.offset(o.getResult()), .rows = b.rows(o.getLogits()), .vocab = b.lastDim(o.getLogits()), .ignore_index = o.getIgnoreIndexAttr().getInt(), .id_bits = b.idBits(o.getTargets()), .label_smoothing = o.getLabelSmoothingAttr().getValueAsDouble()});
}

static LogicalResult lowerAdamW(AdamWOp o, RuntimeCallBuilder &b) {
  if (failed(b.requireF32(o, {o.getParam(), o.getM(), o.getV()}, "the runtime's AdamW keeps its weight and state in")))
    return failure();
  return b.emitContiguous(o, rt::adamw{.param = b.offset(o.getParam()), .grad = b.offset(o.getGrad()), .m = b.offset(o.getM()), .v = b.offset(o.getV()), .lr = b.offset(o.getLr()), .step = b.offset(o.getStep()), .new_param = b.offset(o.getNewParam()), .new_m = b.offset(o.getNewM()), .new_v = b.offset(o.getNewV()), .n = b.elements(o.getParam()), .beta1 = o.getBeta1().convertToDouble(), .beta2 = o.getBeta2().convertToDouble(), .eps = o.getEpsilon().convertToDouble(), .weight_decay = o.getWeightDecay().convertToDouble()});
}

static LogicalResult lowerQuantize(QuantizeOp o, RuntimeCallBuilder &b) {
  if (failed(b.requireF32(o, o.getInput(), "the runtime quantizes")))
    return failure();
  return b.emitContiguous(o, rt::quantize{.in = b.offset(o.getInput()), .codes = b.offset(o.getCodes()), .absmax = b.offset(o.getAbsmax()), .n = b.elements(o.getInput()), .block = o.getBlockAttr().getInt(), .is_signed = static_cast<int64_t>(o.getIsSigned())});
}

static LogicalResult lowerDequantize(DequantizeOp o, RuntimeCallBuilder &b) {
  if (failed(b.requireF32(o, o.getResult(), "the runtime dequantizes to")))
    return failure();
  return b.emitContiguous(o, rt::dequantize{.codes = b.offset(o.getCodes()), .absmax = b.offset(o.getAbsmax()), .out = b.offset(o.getResult()), .n = b.elements(o.getResult()), .block = o.getBlockAttr().getInt(), .is_signed = static_cast<int64_t>(o.getIsSigned())});
}

static LogicalResult lowerAdamW8bit(AdamW8bitOp o, RuntimeCallBuilder &b) {
  if (failed(b.requireF32(o, o.getParam(), "the runtime's AdamW keeps its weight in")))
    return failure();
  return b.emitContiguous(o, rt::adamw_8bit{.param = b.offset(o.getParam()), .grad = b.offset(o.getGrad()), .m_codes = b.offset(o.getMCodes()), .m_absmax = b.offset(o.getMAbsmax()), .v_codes = b.offset(o.getVCodes()), .v_absmax = b.offset(o.getVAbsmax()), .lr = b.offset(o.getLr()), .step = b.offset(o.getStep()), .new_param = b.offset(o.getNewParam()), .new_m_codes = b.offset(o.getNewMCodes()), .new_m_absmax = b.offset(o.getNewMAbsmax()), .new_v_codes = b.offset(o.getNewVCodes()), .new_v_absmax = b.offset(o.getNewVAbsmax()), .n = b.elements(o.getParam()), .block = o.getBlockAttr().getInt(), .beta1 = o.getBeta1().convertToDouble(), .beta2 = o.getBeta2().convertToDouble(), .eps = o.getEpsilon().convertToDouble(), .weight_decay = o.getWeightDecay().convertToDouble()});
}

static LogicalResult lowerSGD8bit(SGD8bitOp o, RuntimeCallBuilder &b) {
  if (failed(b.requireF32(o, o.getParam(), "the runtime's SGD keeps its weight in")))
    return failure();
  return b.emitContiguous(o, rt::sgd_8bit{.param = b.offset(o.getParam()), .grad = b.offset(o.getGrad()), .codes = b.offset(o.getCodes()), .absmax = b.offset(o.getAbsmax()), .lr = b.offset(o.getLr()), .new_param = b.offset(o.getNewParam()), .new_codes = b.offset(o.getNewCodes()), .new_absmax = b.offset(o.getNewAbsmax()), .n = b.elements(o.getParam()), .block = o.getBlockAttr().getInt(), .momentum = o.getMomentum().convertToDouble(), .weight_decay = o.getWeightDecay().convertToDouble(), .nesterov = static_cast<int64_t>(o.getNesterov())});
}

// The optimizers of Optimizers.def onto their kernels, each hyperparameter
// from the op's attribute of its name.
#define TRAINMEM_HYPERPARAMETER(name)                                          \
  , .name = o->getAttrOfType<FloatAttr>(#name).getValueAsDouble()
#define TMRT_ONE_STATE_OPTIMIZER(kernel, Name, Step, parameters, arguments)    \
  static LogicalResult lower##Name(Name##Op o, RuntimeCallBuilder &b) {        \
    if (failed(b.requireF32(o, {o.getParam(), o.getM()},                       \
                            "the runtime's " #kernel                           \
                            " keeps its weight and state in")))                \
      return failure();                                                        \
    return b.emitContiguous(                                                   \
        o, rt::kernel{.param = b.offset(o.getParam()),                         \
                      .grad = b.offset(o.getGrad()),                           \
                      .m = b.offset(o.getM()),                                 \
                      .lr = b.offset(o.getLr()),                               \
                      .new_param = b.offset(o.getNewParam()),                  \
                      .new_m = b.offset(o.getNewM()),                          \
                      .n = b.elements(o.getParam()) TMRT_FOR_EACH(             \
                          TRAINMEM_HYPERPARAMETER, TMRT_UNPAREN(arguments))}); \
  }                                                                            \
  static LogicalResult lower##Name##8bit(Name##8bitOp o,                       \
                                         RuntimeCallBuilder & b) {             \
    if (failed(b.requireF32(o, o.getParam(),                                   \
                            "the runtime's " #kernel " keeps its weight in"))) \
      return failure();                                                        \
    return b.emitContiguous(                                                   \
        o, rt::kernel##_8bit{                                                  \
               .param = b.offset(o.getParam()),                                \
               .grad = b.offset(o.getGrad()),                                  \
               .m_codes = b.offset(o.getMCodes()),                             \
               .m_absmax = b.offset(o.getMAbsmax()),                           \
               .lr = b.offset(o.getLr()),                                      \
               .new_param = b.offset(o.getNewParam()),                         \
               .new_m_codes = b.offset(o.getNewMCodes()),                      \
               .new_m_absmax = b.offset(o.getNewMAbsmax()),                    \
               .n = b.elements(o.getParam()),                                  \
               .block = o.getBlockAttr().getInt() TMRT_FOR_EACH(               \
                   TRAINMEM_HYPERPARAMETER, TMRT_UNPAREN(arguments))});        \
  }
#include "trainmem-runtime/Optimizers.def"
#undef TRAINMEM_HYPERPARAMETER

static LogicalResult lowerSophia(SophiaOp o, RuntimeCallBuilder &b) {
  if (failed(
          b.requireF32(o, {o.getParam(), o.getM(), o.getH()},
                       "the runtime's Sophia keeps its weight and state in")))
    return failure();
  return b.emitContiguous(
      o, rt::sophia{.param = b.offset(o.getParam()),
                    .grad = b.offset(o.getGrad()),
                    .m = b.offset(o.getM()),
                    .h = b.offset(o.getH()),
                    .lr = b.offset(o.getLr()),
                    .new_param = b.offset(o.getNewParam()),
                    .new_m = b.offset(o.getNewM()),
                    .new_h = b.offset(o.getNewH()),
                    .n = b.elements(o.getParam()),
                    .batch = o.getBatch(),
                    .beta1 = o.getBeta1().convertToDouble(),
                    .rho = o.getRho().convertToDouble(),
                    .eps = o.getEpsilon().convertToDouble(),
                    .weight_decay = o.getWeightDecay().convertToDouble()});
}

static LogicalResult lowerSophia8bit(Sophia8bitOp o, RuntimeCallBuilder &b) {
  if (failed(b.requireF32(o, o.getParam(),
                          "the runtime's Sophia keeps its weight in")))
    return failure();
  return b.emitContiguous(
      o, rt::sophia_8bit{.param = b.offset(o.getParam()),
                         .grad = b.offset(o.getGrad()),
                         .m_codes = b.offset(o.getMCodes()),
                         .m_absmax = b.offset(o.getMAbsmax()),
                         .h_codes = b.offset(o.getHCodes()),
                         .h_absmax = b.offset(o.getHAbsmax()),
                         .lr = b.offset(o.getLr()),
                         .new_param = b.offset(o.getNewParam()),
                         .new_m_codes = b.offset(o.getNewMCodes()),
                         .new_m_absmax = b.offset(o.getNewMAbsmax()),
                         .new_h_codes = b.offset(o.getNewHCodes()),
                         .new_h_absmax = b.offset(o.getNewHAbsmax()),
                         .n = b.elements(o.getParam()),
                         .block = o.getBlockAttr().getInt(),
                         .batch = o.getBatch(),
                         .beta1 = o.getBeta1().convertToDouble(),
                         .rho = o.getRho().convertToDouble(),
                         .eps = o.getEpsilon().convertToDouble(),
                         .weight_decay = o.getWeightDecay().convertToDouble()});
}

static LogicalResult lowerHessianEMA(HessianEMAOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(
      o, rt::hessian_ema{.h = b.offset(o.getH()),
                         .grad = b.offset(o.getGrad()),
                         .new_h = b.offset(o.getNewH()),
                         .n = b.elements(o.getH()),
                         .beta2 = o.getBeta2().convertToDouble()});
}

static LogicalResult lowerSample(SampleOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(
      o, rt::sample{.logits = b.offset(o.getLogits()),
                    .key = o.getKey() ? b.offset(o.getKey()) : int64_t(-1),
                    .labels = b.offset(o.getLabels()),
                    .rows = b.rows(o.getLogits()),
                    .classes = b.lastDim(o.getLogits()),
                    .seed = o.getSeed(),
                    .offset = o.getOffset(),
                    .id_bits = b.idBits(o.getLabels())});
}

static LogicalResult lowerSGD(SGDOp o, RuntimeCallBuilder &b) {
  if (failed(b.requireF32(o, o.getParam(), "the runtime's SGD keeps its weight and momentum in")))
    return failure();
  Value buffer = o.getMomentumBuffer();
  return b.emitContiguous(o, rt::sgd{.param = b.offset(o.getParam()), .grad = b.offset(o.getGrad()), .lr = b.offset(o.getLr()), .buffer = buffer ? b.offset(buffer) : int64_t(-1), .new_param = b.offset(o.getNewParam()), .new_buffer = buffer ? b.offset(o.getNewMomentumBuffer()) : int64_t(-1), .n = b.elements(o.getParam()), .momentum = o.getMomentum().convertToDouble(), .weight_decay = o.getWeightDecay().convertToDouble(), .nesterov = static_cast<int64_t>(o.getNesterov())});
}

static LogicalResult lowerLRSchedule(LRScheduleOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::lr_schedule{.step = b.offset(o.getStep()), .out = b.offset(o.getResult()), .peak_lr = o.getPeakLr().convertToDouble(), .min_lr = o.getMinLr().convertToDouble(), .warmup_steps = o.getWarmupStepsAttr().getInt(), .total_steps = o.getTotalStepsAttr().getInt()});
}

static LogicalResult lowerLossScale(LossScaleOp o, RuntimeCallBuilder &b) {
  return b.emitContiguous(o, rt::loss_scale{.state = b.offset(o.getState()), .out = b.offset(o.getScale()), .initial = o.getInitial().convertToDouble()});
}

static LogicalResult lowerUnscaleGradients(UnscaleGradientsOp o,
                                           RuntimeCallBuilder &b) {
  if (failed(b.requireContiguous(o)))
    return failure();
  // Every gradient checked before any is written: an overflow in the last
  // one makes every result NaN. The state is updated last, after the
  // divisions that read the old scale.
  double initial = o.getInitial().convertToDouble();
  b.emit(rt::finite_begin{}, o.getLoc());
  for (Value grad : o.getGrads())
    b.emit(rt::finite_check{.grad = b.offset(grad), .n = b.elements(grad)}, o.getLoc());
  for (Value squared : o.getSquaredNorms())
    b.emit(rt::finite_check_sum{.sum = b.offset(squared)}, o.getLoc());
  for (auto [grad, out] : llvm::zip(o.getGrads(), o.getUnscaled()))
    b.emit(rt::unscale{.grad = b.offset(grad), .out = b.offset(out), .n = b.elements(grad), .state = b.offset(o.getState()), .initial = initial}, o.getLoc());
  b.emit(rt::loss_scale_update{.state = b.offset(o.getState()), .new_state = b.offset(o.getNewState()), .growth_interval = o.getGrowthInterval()}, o.getLoc());
  return success();
}

static LogicalResult lowerGradAllReduce(GradAllReduceOp, RuntimeCallBuilder &) {
  // The identity forward, a view of its operand: no data moves.
  return success();
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
//===----------------------------------------------------------------------===//
// Collectives: upstream shard ops on a one-axis grid, as the runtime's rings
//===----------------------------------------------------------------------===//

/// A collective the runtime runs: in a process group of its grid's ranks
/// (ShardModels.h: consecutive axes of a static grid, ranks a stride
/// apart), on contiguous buffers (f32, bf16 or f16), split along any one
/// dimension (the runtime's `outer`: the elements before it).
template <typename OpT>
static FailureOr<ProcessGroup> checkCollective(OpT op, RuntimeCallBuilder &b) {
  std::optional<ProcessGroup> group = getProcessGroup(op);
  if (!group)
    return op.emitOpError("runs over consecutive axes of a static grid (the "
                          "runtime's groups are ranks a stride apart)");
  if (failed(b.requireContiguous(op)))
    return failure();
  return *group;
}

/// The runtime's `outer` of a collective split along `axis` of `shard`
/// (one rank's part): the elements of the dimensions before it.
static FailureOr<int64_t> outerOf(Operation *op, Value shard, int64_t axis) {
  auto type = cast<RankedTensorType>(shard.getType());
  if (axis < 0 || axis >= type.getRank())
    return op->emitOpError("splits along dimension ")
           << axis << " of a rank-" << type.getRank() << " tensor";
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= type.getDimSize(d);
  return outer;
}

static bool averages(shard::ReductionKind kind) {
  return kind == shard::ReductionKind::Average;
}
/// The reductions the runtime's collectives do: sums and averages, and an
/// all-reduce's maximum (`withMax`).
static LogicalResult checkReduction(Operation *op, shard::ReductionKind kind,
                                    bool withMax = false) {
  if (kind == shard::ReductionKind::Sum ||
      kind == shard::ReductionKind::Average ||
      (withMax && kind == shard::ReductionKind::Max))
    return success();
  return op->emitOpError("reduces by ")
         << shard::stringifyReductionKind(kind)
         << (withMax ? "; the runtime's all-reduce sums, averages or takes "
                       "the maximum"
                     : "; the runtime's rings sum or average");
}

/// The runtime's `reduction` of an all-reduce (TMRT_REDUCE_*).
static int64_t runtimeReduction(shard::ReductionKind kind) {
  switch (kind) {
  case shard::ReductionKind::Average:
    return 1;
  case shard::ReductionKind::Max:
    return 2;
  default:
    return 0;
  }
}

static LogicalResult lowerAllReduce(shard::AllReduceOp op,
                                    RuntimeCallBuilder &b) {
  FailureOr<ProcessGroup> group = checkCollective(op, b);
  if (failed(group) ||
      failed(checkReduction(op, op.getReduction(), /*withMax=*/true)))
    return failure();
  Type element = getElementTypeOrSelf(op.getInput().getType());
  if (element.isInteger(64)) {
    // Integers (the exact sums of train.squared_norm) add exactly.
    if (op.getReduction() != shard::ReductionKind::Sum)
      return op.emitOpError("reduces i64 values by ")
             << shard::stringifyReductionKind(op.getReduction())
             << "; the runtime sums them (average or take the maximum of "
                "floats)";
    b.emit(rt::all_reduce_i64{.in = b.offset(op.getInput()),
                              .out = b.offset(op.getResult()),
                              .n = b.elements(op.getResult()),
                              .group_size = group->size,
                              .group_stride = group->stride},
           op.getLoc());
    return success();
  }
  if (isa<IntegerType, IndexType>(element))
    return op.emitOpError("reduces ")
           << element << " values; the runtime reduces f32, bf16, f16 and "
                         "i64";
  b.emit(rt::all_reduce{.in = b.offset(op.getInput()),
                        .out = b.offset(op.getResult()),
                        .n = b.elements(op.getResult()),
                        .reduction = runtimeReduction(op.getReduction()),
                        .group_size = group->size,
                        .group_stride = group->stride},
         op.getLoc());
  return success();
}

static LogicalResult lowerReduceScatter(shard::ReduceScatterOp op,
                                        RuntimeCallBuilder &b) {
  FailureOr<ProcessGroup> group = checkCollective(op, b);
  FailureOr<int64_t> outer =
      outerOf(op, op.getResult(), op.getScatterAxis().getSExtValue());
  if (failed(group) || failed(outer) ||
      failed(checkReduction(op, op.getReduction())))
    return failure();
  b.emit(rt::reduce_scatter{.in = b.offset(op.getInput()),
                            .out = b.offset(op.getResult()),
                            .n = b.elements(op.getResult()),
                            .average = averages(op.getReduction()),
                            .outer = *outer,
                            .group_size = group->size,
                            .group_stride = group->stride},
         op.getLoc());
  return success();
}

static LogicalResult lowerAllGather(shard::AllGatherOp op,
                                    RuntimeCallBuilder &b) {
  FailureOr<ProcessGroup> group = checkCollective(op, b);
  FailureOr<int64_t> outer =
      outerOf(op, op.getInput(), op.getGatherAxis().getSExtValue());
  if (failed(group) || failed(outer))
    return failure();
  b.emit(rt::all_gather{.in = b.offset(op.getInput()),
                        .out = b.offset(op.getResult()),
                        .n = b.elements(op.getInput()),
                        .outer = *outer,
                        .group_size = group->size,
                        .group_stride = group->stride},
         op.getLoc());
  return success();
}

static LogicalResult lowerAllSlice(shard::AllSliceOp op,
                                   RuntimeCallBuilder &b) {
  FailureOr<ProcessGroup> group = checkCollective(op, b);
  FailureOr<int64_t> outer =
      outerOf(op, op.getResult(), op.getSliceAxis().getSExtValue());
  if (failed(group) || failed(outer))
    return failure();
  Type element = getElementTypeOrSelf(op.getInput().getType());
  if (!isa<FloatType>(element) && !element.isInteger(32))
    return op.emitOpError("slices ")
           << element << " values; the runtime slices floats and i32";
  b.emit(rt::all_slice{.in = b.offset(op.getInput()),
                       .out = b.offset(op.getResult()),
                       .n = b.elements(op.getResult()),
                       .outer = *outer,
                       .group_size = group->size,
                       .group_stride = group->stride},
         op.getLoc());
  return success();
}

/// q, k and v are read through their strides (the heads of a projection
/// are a transposed view).
template <typename OpT>
static SmallVector<int64_t> attentionOperandStrides(OpT op) {
  SmallVector<int64_t> strides;
  for (Value value : {op.getQ(), op.getK(), op.getV()}) {
    SmallVector<int64_t> s = getStrides(value);
    strides.append(s.begin(), s.end());
  }
  return strides;
}

/// The descriptor of a train.attention or train.attention_grad: its
/// extents, the strides of q, k, v (and of the output's gradient `g`: zeros
/// for the forward), its flags and its dropout stream.
template <typename OpT>
static FailureOr<tmrt_attention_shape>
attentionShape(OpT op, RuntimeCallBuilder &b, ArrayRef<int64_t> g) {
  FailureOr<SplitDrawPlacement> split = getSplitDrawPlacement(op);
  FailureOr<ContextPlacement> context =
      contextPlacementOf(op, op.getContextParallelAttr());
  if (failed(split) || failed(context))
    return failure();
  // A ring's blocks in flight live in its planned workspace.
  if (op.getRing() && b.workspace() < 0)
    return op.emitOpError("is a ring attention without a planned workspace");
  SmallVector<int64_t> s = attentionOperandStrides(op);
  ArrayRef<int64_t> q = b.shape(op.getQ()), k = b.shape(op.getK()),
                    v = b.shape(op.getV());
  return tmrt_attention_shape{
      .batch = q[0],
      .heads = q[1],
      .kv_heads = k[1],
      .queries = q[2],
      .keys = k[2],
      .dim = q[3],
      .value_dim = v[3],
      .q0 = s[0],
      .q1 = s[1],
      .q2 = s[2],
      .q3 = s[3],
      .k0 = s[4],
      .k1 = s[5],
      .k2 = s[6],
      .k3 = s[7],
      .v0 = s[8],
      .v1 = s[9],
      .v2 = s[10],
      .v3 = s[11],
      .g0 = g[0],
      .g1 = g[1],
      .g2 = g[2],
      .g3 = g[3],
      .transpose_output = op.getTransposeOutput() ? 1 : 0,
      .causal = op.getCausal() ? 1 : 0,
      .seed = op.getSeedAttr().getInt(),
      .offset = op.getOffsetAttr().getInt(),
      .first = op.getFirstAttr().getInt(),
      .part_elements = op.getPartElementsAttr().getInt(),
      .rank_elements = op.getRankElementsAttr().getInt(),
      .rank_stride = op.getRankStrideAttr().getInt(),
      .split_block = split->block,
      .split_parts = split->parts,
      .split_stride = split->stride,
      .context_parts = context->parts,
      .context_stride = context->stride,
      .context_balanced = context->balanced,
      .context_ring = op.getRing() ? 1 : 0,
      .workspace = op.getRing() ? b.workspace() : 0};
}

static LogicalResult lowerAttention(AttentionOp op, RuntimeCallBuilder &b) {
  FailureOr<tmrt_attention_shape> shape = attentionShape(op, b, {0, 0, 0, 0});
  if (failed(shape))
    return failure();
  b.emit(rt::attention{.q = b.offset(op.getQ()),
                       .k = b.offset(op.getK()),
                       .v = b.offset(op.getV()),
                       .out = b.offset(op.getOutput()),
                       .lse = b.offset(op.getLse()),
                       .key = op.getKey() ? b.offset(op.getKey()) : -1,
                       .part = op.getPart() ? b.offset(op.getPart()) : -1,
                       .scale = op.getScale().convertToDouble(),
                       .rate = op.getRate().convertToDouble(),
                       .shape = *shape,
                       .alibi_slopes =
                           op.getAlibiSlopes().value_or(ArrayRef<double>())},
         op.getLoc());
  return success();
}

static LogicalResult lowerAttentionGrad(AttentionGradOp op,
                                        RuntimeCallBuilder &b) {
  // The output's gradient through its strides, in (batch, head, query,
  // value) order: a transpose's VJP hands it over as a view. The output
  // itself is the forward's result, row-major.
  SmallVector<int64_t> g = getStrides(op.getGrad());
  if (op.getTransposeOutput())
    std::swap(g[1], g[2]);
  if (!isContiguous(op.getOutput()))
    return op.emitOpError("reads its forward's output as a strided view; "
                          "the runtime kernel needs it row-major");
  FailureOr<tmrt_attention_shape> shape = attentionShape(op, b, g);
  if (failed(shape))
    return failure();
  b.emit(rt::attention_grad{.dout = b.offset(op.getGrad()),
                            .q = b.offset(op.getQ()),
                            .k = b.offset(op.getK()),
                            .v = b.offset(op.getV()),
                            .out = b.offset(op.getOutput()),
                            .lse = b.offset(op.getLse()),
                            .dq = b.offset(op.getQGrad()),
                            .dk = b.offset(op.getKGrad()),
                            .dv = b.offset(op.getVGrad()),
                            .key = op.getKey() ? b.offset(op.getKey()) : -1,
                            .part = op.getPart() ? b.offset(op.getPart()) : -1,
                            .scale = op.getScale().convertToDouble(),
                            .rate = op.getRate().convertToDouble(),
                            .shape = *shape,
                            .alibi_slopes = op.getAlibiSlopes().value_or(
                                ArrayRef<double>())},
         op.getLoc());
  return success();
}

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
    attach<ContextSliceOp, lowerContextSlice>(ctx);
    attach<AddOp, lowerAdd>(ctx);
    attach<MulOp, lowerMul>(ctx);
    attach<ScaleOp, lowerScale>(ctx);
    attach<BiasAddOp, lowerBiasAdd>(ctx);
    attach<LayerNormOp, lowerLayerNorm>(ctx);
    attach<RMSNormOp, lowerRMSNorm>(ctx);
    attach<GeluOp, lowerGelu>(ctx);
    attach<BiasGeluOp, lowerBiasGelu>(ctx);
    attach<SoftmaxOp, lowerSoftmax>(ctx);
    attach<DropoutOp, lowerDropout>(ctx);
    attach<DropoutMaskOp, lowerDropoutMask>(ctx);
    attach<CrossEntropyOp, lowerCrossEntropy>(ctx);
    attach<MeanLossOp, lowerMeanLoss>(ctx);
    attach<CountValidOp, lowerCountValid>(ctx);
    attach<SliceRowsOp, lowerSliceRows>(ctx);
    attach<SliceOp, lowerSlice>(ctx);
    attach<SliceGradOp, lowerSliceGrad>(ctx);
    attach<CastOp, lowerCast>(ctx);
    attach<TransferOp, lowerTransfer>(ctx);
    attach<TransferWaitOp, lowerTransferWait>(ctx);
    attach<PipelineExchangeOp, lowerPipelineExchange>(ctx);
    attach<EmbeddingGradOp, lowerEmbeddingGrad>(ctx);
    attach<LayerNormGradOp, lowerLayerNormGrad>(ctx);
    attach<RMSNormGradOp, lowerRMSNormGrad>(ctx);
    attach<GeluGradOp, lowerGeluGrad>(ctx);
    attach<BiasGeluGradOp, lowerBiasGeluGrad>(ctx);
#define TMRT_ACTIVATION(kernel, Name)                                          \
  attach<Name##Op, lowerActivation<Name##Op, rt::kernel>>(ctx);                \
  attach<Name##GradOp, lowerActivationGrad<Name##GradOp, rt::kernel##_grad>>(  \
      ctx);
#include "trainmem-runtime/Activations.def"
    attach<SoftmaxGradOp, lowerSoftmaxGrad>(ctx);
    attach<DropoutGradOp, lowerDropoutGrad>(ctx);
    attach<CrossEntropyGradOp, lowerCrossEntropyGrad>(ctx);
    attach<RowMaxOp, lowerRowMax>(ctx);
    attach<CrossEntropyPartOp, lowerCrossEntropyPart>(ctx);
    attach<CrossEntropyPartGradOp, lowerCrossEntropyPartGrad>(ctx);
    attach<CrossEntropyMergeOp, lowerCrossEntropyMerge>(ctx);
    attach<CrossEntropyMergeGradOp, lowerCrossEntropyMergeGrad>(ctx);
    attach<AdamWOp, lowerAdamW>(ctx);
    attach<QuantizeOp, lowerQuantize>(ctx);
    attach<DequantizeOp, lowerDequantize>(ctx);
    attach<AdamW8bitOp, lowerAdamW8bit>(ctx);
    attach<SGD8bitOp, lowerSGD8bit>(ctx);
    attach<SGDOp, lowerSGD>(ctx);
#define TMRT_ONE_STATE_OPTIMIZER(kernel, Name, Step, parameters, arguments)    \
  attach<Name##Op, lower##Name>(ctx);                                          \
  attach<Name##8bitOp, lower##Name##8bit>(ctx);
#include "trainmem-runtime/Optimizers.def"
    attach<SophiaOp, lowerSophia>(ctx);
    attach<Sophia8bitOp, lowerSophia8bit>(ctx);
    attach<HessianEMAOp, lowerHessianEMA>(ctx);
    attach<SampleOp, lowerSample>(ctx);
    attach<LRScheduleOp, lowerLRSchedule>(ctx);
    attach<LossScaleOp, lowerLossScale>(ctx);
    attach<UnscaleGradientsOp, lowerUnscaleGradients>(ctx);
    attach<MatmulOp, lowerMatmul>(ctx);
    attach<SumToOp, lowerSumTo>(ctx);
    attach<ReshapeOp, lowerReshape>(ctx);
    attach<GradAllReduceOp, lowerGradAllReduce>(ctx);
    attach<RopeOp, lowerRope>(ctx);
    attach<TransposeOp, lowerTranspose>(ctx);
    attach<BroadcastOp, lowerBroadcast>(ctx);
    attach<ClipGradNormOp, lowerClip>(ctx);
    attach<SquaredNormOp, lowerSquaredNorm>(ctx);
    attach<AttentionOp, lowerAttention>(ctx);
    attach<AttentionGradOp, lowerAttentionGrad>(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, arith::ArithDialect *) {
    attach<arith::ConstantOp, lowerConstant>(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, shard::ShardDialect *) {
    attach<shard::AllReduceOp, lowerAllReduce>(ctx);
    attach<shard::ReduceScatterOp, lowerReduceScatter>(ctx);
    attach<shard::AllGatherOp, lowerAllGather>(ctx);
    attach<shard::AllSliceOp, lowerAllSlice>(ctx);
  });
}
