//===- Evaluator.cpp - reference evaluator for train functions ------------===//
//
// Every kernel here is the textbook formula with f64 accumulators: no
// blocking, no fusion, no vectorization, so that reading it is checking it.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Evaluator/Evaluator.h"
#include "trainmem-runtime/ForEach.h"
#include "trainmem/Dialect/Train/IR/ShardModels.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"
#include "trainmem/Support/Activations.h"
#include "trainmem/Support/AdamW.h"
#include "trainmem/Support/Attention.h"
#include "trainmem/Support/DynamicMap.h"
#include "trainmem/Support/ExactSum.h"
#include "trainmem/Support/Float16.h"
#include "trainmem/Support/LossScaleUpdate.h"
#include "trainmem/Support/Parts.h"
#include "trainmem/Support/Philox.h"
#include "trainmem/Support/RowKernels.h"
#include "trainmem/Support/Sample.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <unordered_map>

using namespace mlir;
using namespace mlir::train;

#include "trainmem/Evaluator/EvaluableOpInterface.cpp.inc"

RefTensor RefTensor::ofFloats(std::vector<int64_t> shape,
                              std::vector<float> values) {
  RefTensor t;
  t.shape = std::move(shape);
  t.floats = std::move(values);
  assert(static_cast<int64_t>(t.floats.size()) == t.numElements());
  return t;
}

RefTensor RefTensor::ofInts(std::vector<int64_t> shape,
                            std::vector<int64_t> values) {
  RefTensor t;
  t.shape = std::move(shape);
  t.ints = std::move(values);
  t.isInteger = true;
  assert(static_cast<int64_t>(t.ints.size()) == t.numElements());
  return t;
}

RefTensor RefTensor::zeros(std::vector<int64_t> shape) {
  RefTensor t;
  t.shape = std::move(shape);
  t.floats.assign(t.numElements(), 0.0f);
  return t;
}

int64_t RefTensor::numElements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

namespace {

std::vector<int64_t> shapeOf(Type type) {
  ArrayRef<int64_t> shape = cast<RankedTensorType>(type).getShape();
  return std::vector<int64_t>(shape.begin(), shape.end());
}

/// Rows of the last dimension: (number of rows, row length).
std::pair<int64_t, int64_t> rowsOf(const RefTensor &t) {
  int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  return {cols == 0 ? 0 : t.numElements() / cols, cols};
}

/// Linear index into a tensor of `shape` that broadcasts (right-aligned, size
/// 1 dims pinned to 0) to the multi-index `index` of a larger shape.
int64_t broadcastIndex(ArrayRef<int64_t> shape, ArrayRef<int64_t> index) {
  SmallVector<int64_t> strides = computeSuffixProduct(shape);
  size_t lead = index.size() - shape.size();
  int64_t linear = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1)
      linear += index[lead + d] * strides[d];
  return linear;
}

/// max and log Σ exp(x - max) of a row: the stable log-sum-exp is
/// max + log of the second.
std::pair<double, double> rowLogSumExp(const float *row, int64_t n) {
  double maxValue = -INFINITY;
  for (int64_t c = 0; c < n; ++c)
    maxValue = std::max(maxValue, static_cast<double>(row[c]));
  double z = 0.0;
  for (int64_t c = 0; c < n; ++c)
    z += std::exp(row[c] - maxValue);
  return {maxValue, std::log(z)};
}

/// Mean and biased variance of a row.
std::pair<double, double> rowMeanVariance(const float *row, int64_t n) {
  double mean = 0.0, var = 0.0;
  for (int64_t c = 0; c < n; ++c)
    mean += row[c];
  mean /= n;
  for (int64_t c = 0; c < n; ++c)
    var += (row[c] - mean) * (row[c] - mean);
  return {mean, var / n};
}

/// Mean of the squares of a row.
double rowMeanSquare(const float *row, int64_t n) {
  double sum = 0.0;
  for (int64_t c = 0; c < n; ++c)
    sum += static_cast<double>(row[c]) * row[c];
  return sum / n;
}

/// Rows [offset, offset + shape[0]) of `input` along dim 0, past its end
/// filled with `padding`.
RefTensor sliceRows(const RefTensor &input, int64_t offset,
                    std::vector<int64_t> shape, int64_t padding) {
  int64_t rowSize = 1;
  for (size_t d = 1; d < shape.size(); ++d)
    rowSize *= shape[d];
  int64_t rows = shape[0], available = input.shape[0];
  RefTensor out;
  out.shape = shape;
  out.isInteger = input.isInteger;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < rowSize; ++e) {
      bool inside = offset + r < available;
      int64_t index = (offset + r) * rowSize + e;
      if (input.isInteger)
        out.ints.push_back(inside ? input.ints[index] : padding);
      else
        out.floats.push_back(inside ? input.floats[index]
                                    : static_cast<float>(padding));
    }
  return out;
}

/// Rounds `value` to the nearest `type` value (ties to even), as the
/// hardware conversion does, and widens it back to f32.
float roundTo(float value, Type type) {
  if (type.isF32())
    return value;
  if (type.isBF16())
    return trainmem::floatFromBF16Bits(trainmem::bf16BitsFromFloat(value));
  if (type.isF16())
    return trainmem::floatFromF16Bits(trainmem::f16BitsFromFloat(value));
  llvm::APFloat wide(value);
  bool losesInfo = false;
  wide.convert(cast<FloatType>(type).getFloatSemantics(),
               llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  wide.convert(llvm::APFloat::IEEEsingle(), llvm::APFloat::rmNearestTiesToEven,
               &losesInfo);
  return wide.convertToFloat();
}

/// A float result holds values of its element type: what an op computes in
/// f32 is rounded where the IR stores it in 16 bits, as the runtime's
/// kernels store it.
void roundToElementType(RefTensor &tensor, Type type) {
  Type element = getElementTypeOrSelf(type);
  if (tensor.isInteger || element.isF32() || !isa<FloatType>(element))
    return;
  for (float &v : tensor.floats)
    v = roundTo(v, element);
}

/// The train ops' semantics, one `evaluate` per op, on the values of an
/// EvaluationState: what the ops' EvaluableOpInterface models run.
struct OpKernels {
  EvaluationState &state;

  const RefTensor &get(Value v) { return state.get(v); }
  void set(Value v, RefTensor t) { state.set(v, std::move(t)); }

  LogicalResult evaluate(EmbeddingOp o);
  LogicalResult evaluate(IotaOp o);
  LogicalResult evaluate(ContextSliceOp o);
  LogicalResult evaluate(MatmulOp o);
  LogicalResult evaluate(AddOp o);
  LogicalResult evaluate(MulOp o);
  LogicalResult evaluate(ScaleOp o);
  LogicalResult evaluate(BiasAddOp o);
  LogicalResult evaluate(LayerNormOp o);
  LogicalResult evaluate(RMSNormOp o);
  LogicalResult evaluate(GeluOp o);
  LogicalResult evaluate(BiasGeluOp o);
  LogicalResult evaluate(SoftmaxOp o);
  LogicalResult evaluate(DropoutOp o);
  LogicalResult evaluate(RopeOp o);
  LogicalResult evaluate(ReshapeOp o);
  LogicalResult evaluate(GradAllReduceOp o);
  LogicalResult evaluate(TransposeOp o);
  LogicalResult evaluate(CrossEntropyOp o);
  LogicalResult evaluate(MeanLossOp o);
  LogicalResult evaluate(CastOp o);
  LogicalResult evaluate(TransferOp o);
  LogicalResult evaluate(TransferWaitOp o);
  LogicalResult evaluate(PipelineExchangeOp o);
  LogicalResult evaluate(DropoutMaskOp o);
  LogicalResult evaluate(arith::ConstantOp o);
  LogicalResult evaluate(CountValidOp o);
  LogicalResult evaluate(SliceRowsOp o);
  LogicalResult evaluate(EmbeddingGradOp o);
  LogicalResult evaluate(SumToOp o);
  LogicalResult evaluate(LayerNormGradOp o);
  LogicalResult evaluate(RMSNormGradOp o);
  LogicalResult evaluate(GeluGradOp o);
  LogicalResult evaluate(BiasGeluGradOp o);
  LogicalResult evaluate(SoftmaxGradOp o);
  LogicalResult evaluate(DropoutGradOp o);
  LogicalResult evaluate(CrossEntropyGradOp o);
  LogicalResult evaluate(RowMaxOp o);
  LogicalResult evaluate(BroadcastOp o);
  LogicalResult evaluate(SliceOp o);
  LogicalResult evaluate(SliceGradOp o);
  LogicalResult evaluate(CrossEntropyPartOp o);
  LogicalResult evaluate(CrossEntropyMergeOp o);
  LogicalResult evaluate(CrossEntropyPartGradOp o);
  LogicalResult evaluate(CrossEntropyMergeGradOp o);
  FailureOr<int64_t> vocabularyFirst(Operation *op, TensorSplitAttr split,
                                     int64_t rows);
  LogicalResult evaluate(AdamWOp o);
  LogicalResult evaluate(QuantizeOp o);
  LogicalResult evaluate(DequantizeOp o);
  LogicalResult evaluate(AdamW8bitOp o);
  LogicalResult evaluate(SGDOp o);
  LogicalResult evaluate(SGD8bitOp o);
  LogicalResult evaluate(SophiaOp o);
  LogicalResult evaluate(Sophia8bitOp o);
  LogicalResult evaluate(HessianEMAOp o);
  LogicalResult evaluate(SampleOp o);
  LogicalResult evaluate(LossScaleOp o);
  LogicalResult evaluate(UnscaleGradientsOp o);
  LogicalResult evaluate(ClipGradNormOp o);
  LogicalResult evaluate(SquaredNormOp o);
  LogicalResult evaluate(LRScheduleOp o);
  LogicalResult evaluate(AttentionOp o);
  LogicalResult evaluate(AttentionGradOp o);

  /// A fused attention's layout and dropout (trainmem/Support/Attention.h,
  /// which the runtime's kernels use too).
  template <typename OpT>
  FailureOr<trainmem::AttentionLayout> attentionLayout(OpT op) {
    auto q = op.getQ().getType(), k = op.getK().getType(),
         v = op.getV().getType();
    trainmem::AttentionLayout a;
    a.batch = q.getDimSize(0);
    a.heads = q.getDimSize(1);
    a.queries = q.getDimSize(2);
    a.dim = q.getDimSize(3);
    a.kvHeads = k.getDimSize(1);
    a.keys = k.getDimSize(2);
    // A ring's rank attends to the group's keys (evaluateRanks gathers
    // them for it).
    if (op.getRing()) {
      if (!state.ringKeys)
        return op.emitError("reference evaluator: a ring attention runs on "
                            "the ranks evaluateRanks simulates");
      a.keys = state.ringKeys->shape[2];
    }
    a.valueDim = v.getDimSize(3);
    a.transposeOutput = op.getTransposeOutput();
    a.causal = op.getCausal();
    if (std::optional<ArrayRef<double>> slopes = op.getAlibiSlopes())
      a.alibiSlopes = slopes->data();
    FailureOr<trainmem::ContextChunks> context =
        contextOf(op, op.getContextParallelAttr());
    if (failed(context))
      return failure();
    a.context = *context;
    return a;
  }
  template <typename OpT> trainmem::AttentionDropout attentionDropout(OpT op) {
    auto seed = static_cast<uint64_t>(op.getSeedAttr().getInt());
    if (op.getKey())
      seed += static_cast<uint64_t>(get(op.getKey()).scalarInt());
    auto draw = cast<BatchDrawOpInterface>(op.getOperation());
    trainmem::AttentionDropout dropout = trainmem::AttentionDropout::make(
        op.getRate().convertToDouble(), seed,
        static_cast<uint64_t>(op.getOffsetAttr().getInt()), dropoutBase(draw));
    // A rank's heads draw their part of the whole [B, H, S, S'] mask.
    DrawIndex split = splitDrawOf(draw);
    dropout.splitBlock = split.block;
    dropout.splitParts = split.parts;
    dropout.splitPosition = split.position;
    return dropout;
  }

  LogicalResult embedding(EmbeddingOp op);
  LogicalResult matmul(MatmulOp op);
  void layerNorm(LayerNormOp op);
  void rmsNorm(RMSNormOp op);
  std::vector<float> gains(Value gamma, APFloat offset);
  void softmax(SoftmaxOp op);
  void dropout(DropoutOp op);
  /// Stream position of a dropout's element 0: first + rank·rank_elements
  /// + part·part_elements.
  uint64_t dropoutBase(BatchDrawOpInterface draw) {
    Value part = draw.getPartValue();
    uint64_t index =
        part ? static_cast<uint64_t>(get(part).scalarInt()) : uint64_t(0);
    return static_cast<uint64_t>(draw.getFirstPosition()) +
           static_cast<uint64_t>(state.getRank() / draw.getDataRankStride()) *
               static_cast<uint64_t>(draw.getElementsPerRank()) +
           index * static_cast<uint64_t>(draw.getElementsPerPart());
  }
  /// Where element i of a draw lies in the whole draw: itself, or (a
  /// rank's part of a tensor-parallel draw) its place in the whole tensor.
  struct DrawIndex {
    uint64_t block = 0, parts = 1, position = 0;
    bool balanced = false;
    uint64_t at(uint64_t i) const {
      return trainmem::splitDrawIndex(i, block, parts, position, balanced);
    }
  };
  /// This rank's part of a sequence cut by `split` (the whole one
  /// without a split); failure after an error at `op` when the split's grid
  /// axis is not a static group of its parts.
  FailureOr<trainmem::ContextChunks> contextOf(Operation *op,
                                               ContextSplitAttr split) {
    if (!split)
      return trainmem::ContextChunks{};
    FailureOr<ProcessGroup> group = getContextGroup(op, split);
    if (failed(group))
      return failure();
    return trainmem::ContextChunks{split.getParts(),
                                   group->positionOf(state.getRank()),
                                   split.isBalanced()};
  }
  DrawIndex splitDrawOf(BatchDrawOpInterface draw) {
    FailureOr<SplitDrawPlacement> placement = getSplitDrawPlacement(draw);
    if (failed(placement) || placement->block == 0)
      return {};
    return {static_cast<uint64_t>(placement->block),
            static_cast<uint64_t>(placement->parts),
            static_cast<uint64_t>((state.getRank() / placement->stride) %
                                  placement->parts),
            placement->balanced};
  }
  LogicalResult rope(RopeOp op);
  void transpose(TransposeOp op);
  LogicalResult crossEntropy(CrossEntropyOp op);
  LogicalResult embeddingGrad(EmbeddingGradOp op);
  void sumTo(SumToOp op);
  void layerNormGrad(LayerNormGradOp op);
  void rmsNormGrad(RMSNormGradOp op);
  LogicalResult crossEntropyGrad(CrossEntropyGradOp op);
  void adamw(AdamWOp op);
  void quantize(QuantizeOp op);
  void dequantize(DequantizeOp op);
  void adamw8bit(AdamW8bitOp op);
  void sgd(SGDOp op);
  void sgd8bit(SGD8bitOp op);
  template <typename Step> void oneState(Operation *op, const Step &step);
  template <typename Step>
  void blockwise8bit(Operation *op, const Step &step, int64_t block);
  void setQuantized(Value codes, Value absmax,
                    const std::vector<int64_t> &shape,
                    const std::vector<int64_t> &absmaxShape,
                    const trainmem::DynamicMap &map,
                    const std::vector<float> &values, int64_t block);
  void sophia(SophiaOp op);
  void sophia8bit(Sophia8bitOp op);
  void clip(ClipGradNormOp op);
  void unscaleGradients(UnscaleGradientsOp op);
  void lrSchedule(LRScheduleOp op);

  template <typename Fn> void unary(Operation *op, Fn fn) {
    const RefTensor &x = get(op->getOperand(0));
    RefTensor y = RefTensor::ofFloats(x.shape, x.floats);
    for (float &v : y.floats)
      v = static_cast<float>(fn(static_cast<double>(v)));
    set(op->getResult(0), std::move(y));
  }
  template <typename Fn> void binary(Operation *op, Fn fn) {
    const RefTensor &a = get(op->getOperand(0));
    const RefTensor &b = get(op->getOperand(1));
    RefTensor y = RefTensor::ofFloats(a.shape, a.floats);
    for (size_t i = 0; i < y.floats.size(); ++i)
      y.floats[i] = static_cast<float>(
          fn(static_cast<double>(a.floats[i]), static_cast<double>(b.floats[i])));
    set(op->getResult(0), std::move(y));
  }
};

/// Runs a function's blocks: values by SSA value, the regions (blocks,
/// micro-batch loops) in place, and every other op through its
/// EvaluableOpInterface model (the train ops' models are OpKernels).
class Interpreter : public EvaluationState {
public:
  LogicalResult run(Block &block);
  /// Node-based, so that a kernel's references to its operands (get())
  /// stay valid while it sets its results: a DenseMap's rehash on a set
  /// would move them (an op with several results read its operands'
  /// shapes after setting the first).
  struct ValueHash {
    size_t operator()(Value value) const { return hash_value(value); }
  };
  std::unordered_map<Value, RefTensor, ValueHash> values;
  SmallVector<RefTensor> returned;
  /// The parameters (operands) of updates skipped for a gradient that was
  /// not finite, in order.
  SmallVector<Value> skippedUpdates;

  const RefTensor &get(Value v) override { return values.find(v)->second; }
  void set(Value v, RefTensor t) override {
    roundToElementType(t, v.getType());
    values[v] = std::move(t);
  }
  void noteSkippedUpdate(Value param) override {
    skippedUpdates.push_back(param);
  }
  int64_t getRank() const override { return rank; }
  /// The rank this interpreter runs (Ranks sets each one's).
  int64_t rank = 0;
  LogicalResult exec(Operation *op);
  /// The micro-batch loop's pieces, which the ranks' lockstep run shares:
  /// micro-batch `step`'s block arguments, zero sums, the yield added.
  void bindMicroBatch(AccumulateOp op, int64_t step);
  std::vector<RefTensor> zeroSums(AccumulateOp op);
  void addYielded(AccumulateOp op, std::vector<RefTensor> &sums);

private:
  LogicalResult accumulate(AccumulateOp op);
};

using trainmem::gelu;
using trainmem::geluDerivative;
using trainmem::geluExact;
using trainmem::geluExactDerivative;

LogicalResult OpKernels::embedding(EmbeddingOp op) {
  const RefTensor &table = get(op.getTable());
  const RefTensor &ids = get(op.getIds());
  int64_t vocab = table.shape[0], hidden = table.shape[1];
  FailureOr<int64_t> first = vocabularyFirst(op, op.getSplitAttr(), vocab);
  if (failed(first))
    return failure();
  int64_t whole =
      op.getSplitAttr() ? vocab * op.getSplitAttr().getParts() : vocab;
  RefTensor y = RefTensor::zeros(shapeOf(op.getResult().getType()));
  for (int64_t i = 0; i < ids.numElements(); ++i) {
    int64_t id = ids.ints[i];
    if (id < 0 || id >= whole)
      return op.emitError("token id ")
             << id << " at position " << i << " is outside the table of "
             << whole << " rows";
    if (id < *first || id >= *first + vocab)
      continue; // another rank's row: zeros
    for (int64_t h = 0; h < hidden; ++h)
      y.floats[i * hidden + h] = table.floats[(id - *first) * hidden + h];
  }
  set(op.getResult(), std::move(y));
  return success();
}

LogicalResult OpKernels::matmul(MatmulOp op) {
  const RefTensor &a = get(op.getLhs());
  const RefTensor &b = get(op.getRhs());
  bool ta = op.getTransposeLhs(), tb = op.getTransposeRhs();
  std::vector<int64_t> outShape = shapeOf(op.getResult().getType());
  int64_t m = outShape[outShape.size() - 2], n = outShape.back();
  int64_t k = ta ? a.shape[a.shape.size() - 2] : a.shape.back();
  std::vector<int64_t> batchOut(outShape.begin(), outShape.end() - 2);
  std::vector<int64_t> batchA(a.shape.begin(), a.shape.end() - 2);
  std::vector<int64_t> batchB(b.shape.begin(), b.shape.end() - 2);
  int64_t batches = std::accumulate(batchOut.begin(), batchOut.end(),
                                    int64_t(1), std::multiplies<int64_t>());
  RefTensor y = RefTensor::zeros(outShape);
  SmallVector<int64_t> batchStrides = computeSuffixProduct(batchOut);
  for (int64_t batch = 0; batch < batches; ++batch) {
    SmallVector<int64_t> index = delinearize(batch, batchStrides);
    const float *pa = a.floats.data() + broadcastIndex(batchA, index) * m * k;
    const float *pb = b.floats.data() + broadcastIndex(batchB, index) * k * n;
    float *py = y.floats.data() + batch * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          double av = ta ? pa[p * m + i] : pa[i * k + p];
          double bv = tb ? pb[j * k + p] : pb[p * n + j];
          acc += av * bv;
        }
        py[i * n + j] = static_cast<float>(acc);
      }
  }
  set(op.getResult(), std::move(y));
  return success();
}

void OpKernels::layerNorm(LayerNormOp op) {
  const RefTensor &x = get(op.getInput());
  const RefTensor &g = get(op.getGamma());
  const RefTensor &b = get(op.getBeta());
  double eps = op.getEpsilon().convertToDouble();
  auto [rows, cols] = rowsOf(x);
  RefTensor y = RefTensor::zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = &x.floats[r * cols];
    auto [mean, var] = rowMeanVariance(xr, cols);
    double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < cols; ++c)
      y.floats[r * cols + c] =
          static_cast<float>((xr[c] - mean) * rstd * g.floats[c] + b.floats[c]);
  }
  set(op.getResult(), std::move(y));
}

/// An RMS norm's scale per column: gamma + the gain offset, added in f32
/// (as Gemma's `1.0 + weight.float()`).
std::vector<float> OpKernels::gains(Value gamma, APFloat offset) {
  const RefTensor &g = get(gamma);
  float add = static_cast<float>(offset.convertToDouble());
  std::vector<float> scale(g.floats.begin(), g.floats.end());
  for (float &s : scale)
    s += add;
  return scale;
}

void OpKernels::rmsNorm(RMSNormOp op) {
  const RefTensor &x = get(op.getInput());
  std::vector<float> g = gains(op.getGamma(), op.getGainOffset());
  double eps = op.getEpsilon().convertToDouble();
  auto [rows, cols] = rowsOf(x);
  RefTensor y = RefTensor::zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = &x.floats[r * cols];
    double rrms = 1.0 / std::sqrt(rowMeanSquare(xr, cols) + eps);
    for (int64_t c = 0; c < cols; ++c)
      y.floats[r * cols + c] = static_cast<float>(xr[c] * rrms * g[c]);
  }
  set(op.getResult(), std::move(y));
}

void OpKernels::softmax(SoftmaxOp op) {
  const RefTensor &x = get(op.getInput());
  auto [rows, cols] = rowsOf(x);
  int64_t queries = x.shape.size() >= 2 ? x.shape[x.shape.size() - 2] : 1;
  bool causal = op.getCausal();
  std::optional<ArrayRef<double>> slopes = op.getAlibiSlopes();
  int64_t heads = slopes ? static_cast<int64_t>(slopes->size()) : 1;
  RefTensor y = RefTensor::zeros(x.shape);
  std::vector<double> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    // Row r is query (r % queries) of head (r / queries) % heads; keys
    // after it are masked out.
    int64_t query = r % queries;
    int64_t visible = causal ? query + 1 : cols;
    double slope = slopes ? (*slopes)[(r / queries) % heads] : 0.0;
    const float *xr = &x.floats[r * cols];
    double maxValue = -INFINITY;
    for (int64_t c = 0; c < visible; ++c) {
      row[c] = xr[c] + (slopes ? trainmem::rows::alibiBias(slope, query, c)
                               : 0.0);
      maxValue = std::max(maxValue, row[c]);
    }
    double sum = 0.0;
    for (int64_t c = 0; c < visible; ++c)
      sum += std::exp(row[c] - maxValue);
    for (int64_t c = 0; c < visible; ++c)
      y.floats[r * cols + c] =
          static_cast<float>(std::exp(row[c] - maxValue) / sum);
  }
  set(op.getResult(), std::move(y));
}

void OpKernels::dropout(DropoutOp op) {
  const RefTensor &x = get(op.getInput());
  double rate = op.getRate().convertToDouble();
  auto seed = static_cast<uint64_t>(op.getSeedAttr().getInt());
  if (op.getKey())
    seed += static_cast<uint64_t>(get(op.getKey()).scalarInt());
  auto offset = static_cast<uint64_t>(op.getOffsetAttr().getInt());
  uint32_t threshold = trainmem::dropoutKeepThreshold(rate);
  double scale = 1.0 / (1.0 - rate);
  uint64_t base = dropoutBase(op);
  DrawIndex index = splitDrawOf(op);
  RefTensor y = RefTensor::zeros(x.shape);
  RefTensor mask = RefTensor::ofInts(x.shape,
                                     std::vector<int64_t>(x.numElements(), 0));
  for (int64_t i = 0; i < x.numElements(); ++i) {
    bool keep =
        trainmem::dropoutKeep(seed, offset, base + index.at(i), threshold);
    mask.ints[i] = keep;
    y.floats[i] = keep ? static_cast<float>(x.floats[i] * scale) : 0.0f;
  }
  set(op.getResult(), std::move(y));
  set(op.getMask(), std::move(mask));
}

LogicalResult OpKernels::rope(RopeOp op) {
  FailureOr<trainmem::ContextChunks> context =
      contextOf(op, op.getContextParallelAttr());
  if (failed(context))
    return failure();
  const RefTensor &x = get(op.getInput());
  double theta = op.getTheta().convertToDouble();
  double sign = op.getInverse() ? -1.0 : 1.0;
  auto [rows, dim] = rowsOf(x);
  int64_t positions = x.shape[x.shape.size() - 2];
  // Pair i: elements (2i, 2i + 1), or (i, i + dim/2) with halves.
  bool halves = op.getHalves();
  RefTensor y = RefTensor::zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    auto pos = static_cast<double>(context->wholeRow(r % positions, positions));
    for (int64_t i = 0; i < dim / 2; ++i) {
      double angle = sign * pos * std::pow(theta, -2.0 * i / dim);
      double c = std::cos(angle), s = std::sin(angle);
      int64_t a = r * dim + (halves ? i : 2 * i);
      int64_t b = halves ? a + dim / 2 : a + 1;
      double x0 = x.floats[a], x1 = x.floats[b];
      y.floats[a] = static_cast<float>(x0 * c - x1 * s);
      y.floats[b] = static_cast<float>(x0 * s + x1 * c);
    }
  }
  set(op.getResult(), std::move(y));
  return success();
}

void OpKernels::transpose(TransposeOp op) {
  const RefTensor &x = get(op.getInput());
  ArrayRef<int64_t> perm = op.getPermutation();
  std::vector<int64_t> outShape = shapeOf(op.getResult().getType());
  SmallVector<int64_t> inStrides = computeSuffixProduct(x.shape);
  SmallVector<int64_t> outStrides = computeSuffixProduct(outShape);
  RefTensor y = RefTensor::zeros(outShape);
  for (int64_t i = 0; i < y.numElements(); ++i) {
    SmallVector<int64_t> index = delinearize(i, outStrides);
    int64_t src = 0;
    for (size_t d = 0; d < perm.size(); ++d)
      src += index[d] * inStrides[perm[d]];
    y.floats[i] = x.floats[src];
  }
  set(op.getResult(), std::move(y));
}

LogicalResult OpKernels::crossEntropy(CrossEntropyOp op) {
  const RefTensor &logits = get(op.getLogits());
  const RefTensor &targets = get(op.getTargets());
  int64_t ignore = op.getIgnoreIndexAttr().getInt();
  double smoothing = op.getLabelSmoothingAttr().getValueAsDouble();
  auto [rows, vocab] = rowsOf(logits);
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = targets.ints[r];
    if (t == ignore)
      continue;
    if (t < 0 || t >= vocab)
      return op.emitError("target ")
             << t << " at position " << r << " is outside the vocabulary of "
             << vocab;
    const float *lr = &logits.floats[r * vocab];
    auto [maxValue, logZ] = rowLogSumExp(lr, vocab);
    // Against (1 - ε) onehot(t) + ε / vocab.
    double mean = 0.0;
    for (int64_t c = 0; c < vocab; ++c)
      mean += lr[c];
    mean /= static_cast<double>(vocab);
    sum += maxValue + logZ - (1.0 - smoothing) * lr[t] - smoothing * mean;
    ++count;
  }
  set(op.getLossSum(), RefTensor::ofFloats({}, {static_cast<float>(sum)}));
  set(op.getCount(), RefTensor::ofInts({}, {count}));
  return success();
}

LogicalResult OpKernels::embeddingGrad(EmbeddingGradOp op) {
  const RefTensor &grad = get(op.getGrad());
  const RefTensor &ids = get(op.getIds());
  std::vector<int64_t> tableShape = shapeOf(op.getResult().getType());
  int64_t vocab = tableShape[0], hidden = tableShape[1];
  FailureOr<int64_t> first = vocabularyFirst(op, op.getSplitAttr(), vocab);
  if (failed(first))
    return failure();
  int64_t whole =
      op.getSplitAttr() ? vocab * op.getSplitAttr().getParts() : vocab;
  std::vector<double> acc(vocab * hidden, 0.0);
  for (int64_t i = 0; i < ids.numElements(); ++i) {
    int64_t id = ids.ints[i];
    if (id < 0 || id >= whole)
      return op.emitError("token id ")
             << id << " at position " << i << " is outside the table of "
             << whole << " rows";
    if (id < *first || id >= *first + vocab)
      continue;
    for (int64_t h = 0; h < hidden; ++h)
      acc[(id - *first) * hidden + h] += grad.floats[i * hidden + h];
  }
  RefTensor y = RefTensor::zeros(tableShape);
  for (size_t i = 0; i < acc.size(); ++i)
    y.floats[i] = static_cast<float>(acc[i]);
  set(op.getResult(), std::move(y));
  return success();
}

void OpKernels::sumTo(SumToOp op) {
  const RefTensor &x = get(op.getInput());
  std::vector<int64_t> outShape = shapeOf(op.getResult().getType());
  RefTensor y = RefTensor::zeros(outShape);
  std::vector<double> acc(y.numElements(), 0.0);
  SmallVector<int64_t> inStrides = computeSuffixProduct(x.shape);
  for (int64_t i = 0; i < x.numElements(); ++i)
    acc[broadcastIndex(outShape, delinearize(i, inStrides))] += x.floats[i];
  for (size_t i = 0; i < acc.size(); ++i)
    y.floats[i] = static_cast<float>(acc[i]);
  set(op.getResult(), std::move(y));
}

void OpKernels::layerNormGrad(LayerNormGradOp op) {
  const RefTensor &dy = get(op.getGrad());
  const RefTensor &x = get(op.getInput());
  const RefTensor &g = get(op.getGamma());
  double eps = op.getEpsilon().convertToDouble();
  auto [rows, cols] = rowsOf(x);
  RefTensor dx = RefTensor::zeros(x.shape);
  std::vector<double> dg(cols, 0.0), db(cols, 0.0);
  std::vector<double> xhat(cols), dxhat(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = &x.floats[r * cols];
    const float *dyr = &dy.floats[r * cols];
    auto [mean, var] = rowMeanVariance(xr, cols);
    double rstd = 1.0 / std::sqrt(var + eps);
    double meanDxhat = 0.0, meanDxhatXhat = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      xhat[c] = (xr[c] - mean) * rstd;
      dxhat[c] = static_cast<double>(dyr[c]) * g.floats[c];
      meanDxhat += dxhat[c];
      meanDxhatXhat += dxhat[c] * xhat[c];
      dg[c] += dyr[c] * xhat[c];
      db[c] += dyr[c];
    }
    meanDxhat /= cols;
    meanDxhatXhat /= cols;
    for (int64_t c = 0; c < cols; ++c)
      dx.floats[r * cols + c] = static_cast<float>(
          rstd * (dxhat[c] - meanDxhat - xhat[c] * meanDxhatXhat));
  }
  RefTensor dgT = RefTensor::zeros({cols}), dbT = RefTensor::zeros({cols});
  for (int64_t c = 0; c < cols; ++c) {
    dgT.floats[c] = static_cast<float>(dg[c]);
    dbT.floats[c] = static_cast<float>(db[c]);
  }
  set(op.getInputGrad(), std::move(dx));
  set(op.getGammaGrad(), std::move(dgT));
  set(op.getBetaGrad(), std::move(dbT));
}

void OpKernels::rmsNormGrad(RMSNormGradOp op) {
  const RefTensor &dy = get(op.getGrad());
  const RefTensor &x = get(op.getInput());
  std::vector<float> g = gains(op.getGamma(), op.getGainOffset());
  double eps = op.getEpsilon().convertToDouble();
  auto [rows, cols] = rowsOf(x);
  RefTensor dx = RefTensor::zeros(x.shape);
  std::vector<double> dg(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = &x.floats[r * cols];
    const float *dyr = &dy.floats[r * cols];
    double rrms = 1.0 / std::sqrt(rowMeanSquare(xr, cols) + eps);
    double dot = 0.0; // Σ dy·g·x
    for (int64_t c = 0; c < cols; ++c) {
      dot += static_cast<double>(dyr[c]) * g[c] * xr[c];
      dg[c] += static_cast<double>(dyr[c]) * xr[c] * rrms;
    }
    for (int64_t c = 0; c < cols; ++c)
      dx.floats[r * cols + c] = static_cast<float>(
          rrms * dyr[c] * g[c] -
          xr[c] * rrms * rrms * rrms * dot / cols);
  }
  RefTensor dgT = RefTensor::zeros({cols});
  for (int64_t c = 0; c < cols; ++c)
    dgT.floats[c] = static_cast<float>(dg[c]);
  set(op.getInputGrad(), std::move(dx));
  set(op.getGammaGrad(), std::move(dgT));
}

LogicalResult OpKernels::crossEntropyGrad(CrossEntropyGradOp op) {
  double dsum = get(op.getGrad()).scalarFloat();
  const RefTensor &logits = get(op.getLogits());
  const RefTensor &targets = get(op.getTargets());
  int64_t ignore = op.getIgnoreIndexAttr().getInt();
  double smoothing = op.getLabelSmoothingAttr().getValueAsDouble();
  auto [rows, vocab] = rowsOf(logits);
  RefTensor dl = RefTensor::zeros(logits.shape);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = targets.ints[r];
    if (t == ignore)
      continue;
    if (t < 0 || t >= vocab)
      return op.emitError("target ")
             << t << " at position " << r << " is outside the vocabulary of "
             << vocab;
    const float *lr = &logits.floats[r * vocab];
    auto [maxValue, logZ] = rowLogSumExp(lr, vocab);
    for (int64_t c = 0; c < vocab; ++c) {
      double p = std::exp(lr[c] - maxValue - logZ);
      double want = (c == t ? 1.0 - smoothing : 0.0) +
                    smoothing / static_cast<double>(vocab);
      dl.floats[r * vocab + c] = static_cast<float>(dsum * (p - want));
    }
  }
  set(op.getResult(), std::move(dl));
  return success();
}

/// Whether every element is finite (updates skip their tensor otherwise).
static bool allFinite(const RefTensor &t) {
  return std::all_of(t.floats.begin(), t.floats.end(),
                     [](float x) { return std::isfinite(x); });
}

void OpKernels::adamw(AdamWOp op) {
  const RefTensor &p = get(op.getParam());
  const RefTensor &g = get(op.getGrad());
  const RefTensor &m = get(op.getM());
  const RefTensor &v = get(op.getV());
  if (!allFinite(g)) {
    state.noteSkippedUpdate(op.getParam());
    set(op.getNewParam(), p);
    set(op.getNewM(), m);
    set(op.getNewV(), v);
    return;
  }
  trainmem::AdamWStep step(get(op.getLr()).scalarFloat(),
                           op.getBeta1().convertToDouble(),
                           op.getBeta2().convertToDouble(),
                           op.getEpsilon().convertToDouble(),
                           op.getWeightDecay().convertToDouble(),
                           get(op.getStep()).scalarInt());
  RefTensor np = RefTensor::zeros(p.shape), nm = RefTensor::zeros(p.shape),
            nv = RefTensor::zeros(p.shape);
  for (int64_t i = 0; i < p.numElements(); ++i)
    step.apply(p.floats[i], g.floats[i], m.floats[i], v.floats[i],
               np.floats[i], nm.floats[i], nv.floats[i]);
  set(op.getNewParam(), std::move(np));
  set(op.getNewM(), std::move(nm));
  set(op.getNewV(), std::move(nv));
}

/// Codes (0..255) of a RefTensor of i8 codes.
uint8_t codeAt(const RefTensor &codes, int64_t i) {
  return static_cast<uint8_t>(codes.ints[i]);
}

void OpKernels::quantize(QuantizeOp op) {
  const RefTensor &x = get(op.getInput());
  const trainmem::DynamicMap &map = op.getIsSigned()
                                        ? trainmem::signedDynamicMap()
                                        : trainmem::unsignedDynamicMap();
  int64_t n = x.numElements(), block = op.getBlockAttr().getInt();
  std::vector<uint8_t> codes(n);
  std::vector<float> absmax((n + block - 1) / block);
  trainmem::quantizeBlockwise(map, x.floats.data(), n, block, codes.data(),
                              absmax.data());
  set(op.getCodes(),
      RefTensor::ofInts(x.shape, std::vector<int64_t>(codes.begin(), codes.end())));
  set(op.getAbsmax(), RefTensor::ofFloats({static_cast<int64_t>(absmax.size())},
                                          std::move(absmax)));
}

void OpKernels::dequantize(DequantizeOp op) {
  const RefTensor &codes = get(op.getCodes());
  const RefTensor &absmax = get(op.getAbsmax());
  const trainmem::DynamicMap &map = op.getIsSigned()
                                        ? trainmem::signedDynamicMap()
                                        : trainmem::unsignedDynamicMap();
  int64_t block = op.getBlockAttr().getInt();
  RefTensor y = RefTensor::zeros(codes.shape);
  for (int64_t i = 0; i < codes.numElements(); ++i)
    y.floats[i] = trainmem::dequantizeValue(map, codeAt(codes, i),
                                            absmax.floats[i / block]);
  set(op.getResult(), std::move(y));
}

void OpKernels::adamw8bit(AdamW8bitOp op) {
  trainmem::AdamWStep step(get(op.getLr()).scalarFloat(),
                           op.getBeta1().convertToDouble(),
                           op.getBeta2().convertToDouble(),
                           op.getEpsilon().convertToDouble(),
                           op.getWeightDecay().convertToDouble(),
                           get(op.getStep()).scalarInt());
  blockwise8bit(op, step, op.getBlockAttr().getInt());
}

void OpKernels::sgd8bit(SGD8bitOp op) {
  blockwise8bit(op,
                trainmem::SGDMomentumStep{get(op.getLr()).scalarFloat(),
                                          op.getMomentum().convertToDouble(),
                                          op.getWeightDecay().convertToDouble(),
                                          op.getNesterov()},
                op.getBlockAttr().getInt());
}

/// An optimizer of Optimizers.def on f32 state: param, grad, m, lr -> new
/// param, new m (the ops of Train_OneStateOptimizer).
template <typename Step>
void OpKernels::oneState(Operation *op, const Step &step) {
  const RefTensor &p = get(op->getOperand(0));
  const RefTensor &g = get(op->getOperand(1));
  const RefTensor &m = get(op->getOperand(2));
  if (!allFinite(g)) {
    state.noteSkippedUpdate(op->getOperand(0));
    set(op->getResult(0), p);
    set(op->getResult(1), m);
    return;
  }
  RefTensor np = RefTensor::zeros(p.shape), nm = RefTensor::zeros(p.shape);
  for (int64_t i = 0; i < p.numElements(); ++i)
    step.apply(p.floats[i], g.floats[i], m.floats[i], np.floats[i],
               nm.floats[i]);
  set(op->getResult(0), std::move(np));
  set(op->getResult(1), std::move(nm));
}

/// A fused 8-bit update (train.<optimizer>_8bit): param, grad, then each
/// state's codes and absmax (Step::kStateKinds, in order), ... -> new
/// param, then each state's new codes and absmax; block by block, each
/// state on its map, one the update only reads carried over as it is.
template <typename Step>
void OpKernels::blockwise8bit(Operation *op, const Step &step, int64_t block) {
  constexpr int kStates = Step::kStates;
  const RefTensor &p = get(op->getOperand(0));
  const RefTensor &g = get(op->getOperand(1));
  bool finite = allFinite(g);
  const trainmem::DynamicMap *maps[kStates];
  for (int k = 0; k < kStates; ++k) {
    const trainmem::QuantizedStateKind &kind = Step::kStateKinds[k];
    maps[k] = kind.isSigned ? &trainmem::signedDynamicMap()
                            : &trainmem::unsignedDynamicMap();
    if (!finite || !kind.written)
      for (int part : {1, 2})
        set(op->getResult(2 * k + part), get(op->getOperand(2 * k + part + 1)));
  }
  if (!finite) {
    state.noteSkippedUpdate(op->getOperand(0));
    set(op->getResult(0), p);
    return;
  }
  int64_t n = p.numElements();
  RefTensor np = RefTensor::zeros(p.shape);
  std::vector<std::vector<float>> fresh(kStates, std::vector<float>(n));
  for (int64_t i = 0; i < n; ++i) {
    float old[kStates], updated[kStates] = {};
    for (int k = 0; k < kStates; ++k)
      old[k] = trainmem::dequantizeValue(
          *maps[k], codeAt(get(op->getOperand(2 * k + 2)), i),
          get(op->getOperand(2 * k + 3)).floats[i / block]);
    step.applyStates(p.floats[i], g.floats[i], old, np.floats[i], updated);
    for (int k = 0; k < kStates; ++k)
      fresh[k][i] = updated[k];
  }
  set(op->getResult(0), std::move(np));
  for (int k = 0; k < kStates; ++k)
    if (Step::kStateKinds[k].written)
      setQuantized(op->getResult(2 * k + 1), op->getResult(2 * k + 2), p.shape,
                   get(op->getOperand(2 * k + 3)).shape, *maps[k], fresh[k],
                   block);
}

/// `values` quantized block-wise on `map` into the results `codes` (shaped
/// as the parameter) and `absmax`.
void OpKernels::setQuantized(Value codes, Value absmax,
                             const std::vector<int64_t> &shape,
                             const std::vector<int64_t> &absmaxShape,
                             const trainmem::DynamicMap &map,
                             const std::vector<float> &values, int64_t block) {
  int64_t n = static_cast<int64_t>(values.size());
  std::vector<uint8_t> newCodes(n);
  std::vector<float> newAbsmax(std::accumulate(absmaxShape.begin(),
                                               absmaxShape.end(), int64_t(1),
                                               std::multiplies<int64_t>()));
  trainmem::quantizeBlockwise(map, values.data(), n, block, newCodes.data(),
                              newAbsmax.data());
  set(codes, RefTensor::ofInts(shape, std::vector<int64_t>(newCodes.begin(),
                                                           newCodes.end())));
  set(absmax, RefTensor::ofFloats(absmaxShape, std::move(newAbsmax)));
}

void OpKernels::sophia(SophiaOp op) {
  const RefTensor &p = get(op.getParam());
  const RefTensor &g = get(op.getGrad());
  const RefTensor &m = get(op.getM()), &h = get(op.getH());
  set(op.getNewH(), h);
  if (!allFinite(g)) {
    state.noteSkippedUpdate(op.getParam());
    set(op.getNewParam(), p);
    set(op.getNewM(), m);
    return;
  }
  trainmem::SophiaStep step(
      get(op.getLr()).scalarFloat(), op.getBeta1().convertToDouble(),
      op.getRho().convertToDouble(), op.getBatch(),
      op.getEpsilon().convertToDouble(), op.getWeightDecay().convertToDouble());
  RefTensor np = RefTensor::zeros(p.shape), nm = RefTensor::zeros(p.shape);
  for (int64_t i = 0; i < p.numElements(); ++i)
    step.apply(p.floats[i], g.floats[i], m.floats[i], h.floats[i], np.floats[i],
               nm.floats[i]);
  set(op.getNewParam(), std::move(np));
  set(op.getNewM(), std::move(nm));
}

void OpKernels::sophia8bit(Sophia8bitOp op) {
  trainmem::SophiaStep step(
      get(op.getLr()).scalarFloat(), op.getBeta1().convertToDouble(),
      op.getRho().convertToDouble(), op.getBatch(),
      op.getEpsilon().convertToDouble(), op.getWeightDecay().convertToDouble());
  blockwise8bit(op, step, op.getBlockAttr().getInt());
}

void OpKernels::sgd(SGDOp op) {
  const RefTensor &p = get(op.getParam());
  const RefTensor &g = get(op.getGrad());
  double lr = get(op.getLr()).scalarFloat();
  double momentum = op.getMomentum().convertToDouble();
  double wd = op.getWeightDecay().convertToDouble();
  bool nesterov = op.getNesterov();
  const RefTensor *buf =
      op.getMomentumBuffer() ? &get(op.getMomentumBuffer()) : nullptr;
  if (!allFinite(g)) {
    state.noteSkippedUpdate(op.getParam());
    set(op.getNewParam(), p);
    if (buf)
      set(op.getNewMomentumBuffer(), *buf);
    return;
  }
  trainmem::SGDMomentumStep update{lr, momentum, wd, nesterov};
  RefTensor np = RefTensor::zeros(p.shape), nb = RefTensor::zeros(p.shape);
  for (int64_t i = 0; i < p.numElements(); ++i) {
    if (buf)
      update.apply(p.floats[i], g.floats[i], buf->floats[i], np.floats[i],
                   nb.floats[i]);
    else
      np.floats[i] = static_cast<float>(
          p.floats[i] - lr * (g.floats[i] + wd * p.floats[i]));
  }
  set(op.getNewParam(), std::move(np));
  if (buf)
    set(op.getNewMomentumBuffer(), std::move(nb));
}

/// Σ ||v||² over `values`' elements, in double.
/// The exact sum of squares of `values`' elements (ExactSum.h's words).
static std::vector<int64_t> exactSumOfSquares(EvaluationState &state,
                                              ValueRange values) {
  std::vector<int64_t> words(trainmem::kExactSumWords, 0);
  trainmem::ExactSquareSum sum(words.data());
  for (Value value : values) {
    const std::vector<float> &floats = state.get(value).floats;
    sum.addSquares(floats.data(), static_cast<int64_t>(floats.size()));
  }
  return words;
}

/// The scale of the step's loss, from its state.
static double lossScaleOf(const RefTensor &state, double initial) {
  return trainmem::lossScale(initial, state.ints.at(0));
}

void OpKernels::unscaleGradients(UnscaleGradientsOp op) {
  const RefTensor &state = get(op.getState());
  double inverse = 1.0 / lossScaleOf(state, op.getInitial().convertToDouble());
  bool finite = llvm::all_of(op.getGrads(), [&](Value grad) {
    return allFinite(get(grad));
  });
  // The ranks' summed squared norm: an overflow on any rank.
  for (Value squared : op.getSquaredNorms()) {
    std::vector<int64_t> words = get(squared).ints;
    finite = finite && trainmem::ExactSquareSum(words.data()).isFinite();
  }
  for (auto [grad, out] : llvm::zip(op.getGrads(), op.getUnscaled())) {
    RefTensor y = get(grad);
    for (float &v : y.floats)
      v = finite ? static_cast<float>(static_cast<double>(v) * inverse)
                 : std::numeric_limits<float>::quiet_NaN();
    set(out, std::move(y));
  }
  std::vector<int64_t> updated(state.ints.begin(), state.ints.end());
  trainmem::advanceLossScale(updated.data(), finite,
                             static_cast<int64_t>(op.getGrowthInterval()));
  set(op.getNewState(), RefTensor::ofInts({3}, std::move(updated)));
}

void OpKernels::clip(ClipGradNormOp op) {
  // The ranks' summed squared norms, or those of the operands.
  std::vector<int64_t> words(trainmem::kExactSumWords, 0);
  if (op.getSquaredNorms().empty())
    words = exactSumOfSquares(state, op.getGrads());
  for (Value squared : op.getSquaredNorms()) {
    std::vector<int64_t> part = get(squared).ints;
    trainmem::ExactSquareSum(words.data()).merge(part.data());
  }
  double sumSquares = trainmem::ExactSquareSum(words.data()).value();
  double norm = std::sqrt(sumSquares);
  double scale = std::min(1.0, op.getMaxNorm().convertToDouble() /
                                   (norm + 1e-6));
  for (auto [in, out] : llvm::zip(op.getGrads(), op.getClipped())) {
    RefTensor y = get(in);
    for (float &v : y.floats)
      v = static_cast<float>(v * scale);
    set(out, std::move(y));
  }
  set(op.getNorm(), RefTensor::ofFloats({}, {static_cast<float>(norm)}));
}

void OpKernels::lrSchedule(LRScheduleOp op) {
  double lr = trainmem::scheduledLearningRate(
      op.getPeakLr().convertToDouble(), op.getMinLr().convertToDouble(),
      op.getWarmupSteps(), op.getTotalSteps(), get(op.getStep()).scalarInt());
  set(op.getResult(), RefTensor::ofFloats({}, {static_cast<float>(lr)}));
}


LogicalResult constant(arith::ConstantOp op, RefTensor &out) {
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  auto type = dyn_cast<RankedTensorType>(op.getType());
  if (!dense || !type)
    return op.emitError("reference evaluator: only dense tensor constants "
                        "are supported");
  std::vector<int64_t> shape = shapeOf(type);
  if (isa<FloatType>(type.getElementType())) {
    std::vector<float> values;
    for (const llvm::APFloat &v : dense.getValues<llvm::APFloat>())
      values.push_back(static_cast<float>(v.convertToDouble()));
    out = RefTensor::ofFloats(shape, std::move(values));
    return success();
  }
  std::vector<int64_t> values;
  for (const llvm::APInt &v : dense.getValues<llvm::APInt>())
    values.push_back(v.getBitWidth() == 1 ? v.getZExtValue() : v.getSExtValue());
  out = RefTensor::ofInts(shape, std::move(values));
  return success();
}

LogicalResult OpKernels::evaluate(EmbeddingOp o) { return embedding(o); }

LogicalResult OpKernels::evaluate(IotaOp o) {
  int64_t n = o.getResult().getType().getDimSize(0);
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  set(o.getResult(), RefTensor::ofInts({n}, std::move(ids)));
  return success();
}

LogicalResult OpKernels::evaluate(ContextSliceOp o) {
  FailureOr<trainmem::ContextChunks> context =
      contextOf(o, o.getContextParallel());
  if (failed(context))
    return failure();
  const RefTensor &x = get(o.getInput());
  int64_t dim = o.getDim(), rows = x.shape[dim];
  int64_t mine = rows / context->parts, outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= x.shape[d];
  for (size_t d = dim + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  std::vector<int64_t> shape = x.shape, ids;
  shape[dim] = mine;
  ids.reserve(outer * mine * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < mine; ++r)
      for (int64_t c = 0; c < inner; ++c)
        ids.push_back(
            x.ints[(o * rows + context->wholeRow(r, mine)) * inner + c]);
  set(o.getResult(), RefTensor::ofInts(shape, std::move(ids)));
  return success();
}

LogicalResult OpKernels::evaluate(MatmulOp o) { return matmul(o); }

LogicalResult OpKernels::evaluate(AddOp o) {
  binary(o, [](double a, double b) { return a + b; });
  return success();
}

LogicalResult OpKernels::evaluate(MulOp o) {
  binary(o, [](double a, double b) { return a * b; });
  return success();
}

LogicalResult OpKernels::evaluate(ScaleOp o) {
  double factor = o.getFactor().convertToDouble();
  unary(o, [&](double x) { return x * factor; });
  return success();
}

LogicalResult OpKernels::evaluate(LayerNormOp o) {
  layerNorm(o);
  return success();
}

LogicalResult OpKernels::evaluate(RMSNormOp o) {
  rmsNorm(o);
  return success();
}

LogicalResult OpKernels::evaluate(GeluOp o) {
  if (o.getExact())
    unary(o, geluExact);
  else
    unary(o, gelu);
  return success();
}

/// input + bias broadcast over the leading dimensions, rounded to the
/// input's element type (what train.bias_add stores).
static RefTensor biasSum(const RefTensor &x, const RefTensor &b, Type type) {
  RefTensor h = RefTensor::ofFloats(x.shape, x.floats);
  int64_t n = b.numElements();
  for (int64_t i = 0; i < x.numElements(); ++i)
    h.floats[i] = x.floats[i] + b.floats[i % n];
  roundToElementType(h, type);
  return h;
}

LogicalResult OpKernels::evaluate(BiasAddOp o) {
  set(o.getResult(),
      biasSum(get(o.getInput()), get(o.getBias()), o.getInput().getType()));
  return success();
}

LogicalResult OpKernels::evaluate(BiasGeluOp o) {
  RefTensor y =
      biasSum(get(o.getInput()), get(o.getBias()), o.getInput().getType());
  for (float &v : y.floats)
    v = static_cast<float>(gelu(static_cast<double>(v)));
  set(o.getResult(), std::move(y));
  return success();
}

LogicalResult OpKernels::evaluate(SoftmaxOp o) {
  softmax(o);
  return success();
}

LogicalResult OpKernels::evaluate(DropoutOp o) {
  dropout(o);
  return success();
}

LogicalResult OpKernels::evaluate(RopeOp o) { return rope(o); }

LogicalResult OpKernels::evaluate(GradAllReduceOp o) {
  set(o.getResult(), get(o.getInput()));
  return success();
}

LogicalResult OpKernels::evaluate(ReshapeOp o) {
  RefTensor y = get(o.getInput());
  y.shape = shapeOf(o.getResult().getType());
  set(o.getResult(), std::move(y));
  return success();
}

LogicalResult OpKernels::evaluate(TransposeOp o) {
  transpose(o);
  return success();
}

LogicalResult OpKernels::evaluate(CrossEntropyOp o) { return crossEntropy(o); }

LogicalResult OpKernels::evaluate(MeanLossOp o) {
  double sum = get(o.getLossSum()).scalarFloat();
  int64_t count = get(o.getCount()).scalarInt();
  double weight = o.getWeight() ? get(o.getWeight()).scalarFloat() : 1.0;
  double mean = o.getScale().convertToDouble() * weight * sum /
                static_cast<double>(std::max<int64_t>(count, 1));
  set(o.getResult(), RefTensor::ofFloats({}, {static_cast<float>(mean)}));
  return success();
}

/// The evaluator has one memory: a copy.
LogicalResult OpKernels::evaluate(TransferOp o) {
  set(o.getResult(), get(o.getInput()));
  return success();
}

/// Its copy was made at the transfer.
LogicalResult OpKernels::evaluate(TransferWaitOp) { return success(); }

LogicalResult OpKernels::evaluate(PipelineExchangeOp o) {
  FailureOr<SmallVector<RefTensor>> received = state.exchange(o);
  if (failed(received))
    return failure();
  for (auto [result, tensor] : llvm::zip(o.getReceived(), *received))
    set(result, std::move(tensor));
  return success();
}

LogicalResult OpKernels::evaluate(CastOp o) {
  RefTensor y = get(o.getInput());
  Type elementType = o.getResult().getType().getElementType();
  for (float &v : y.floats)
    v = roundTo(v, elementType);
  set(o.getResult(), std::move(y));
  return success();
}

LogicalResult OpKernels::evaluate(DropoutMaskOp o) {
  std::vector<int64_t> shape = shapeOf(o.getMask().getType());
  RefTensor mask = RefTensor::ofInts(
      shape, std::vector<int64_t>(getNumElements(o.getMask().getType())));
  uint32_t threshold =
      trainmem::dropoutKeepThreshold(o.getRate().convertToDouble());
  auto seed = static_cast<uint64_t>(o.getSeedAttr().getInt());
  if (o.getKey())
    seed += static_cast<uint64_t>(get(o.getKey()).scalarInt());
  auto offset = static_cast<uint64_t>(o.getOffsetAttr().getInt());
  uint64_t base = dropoutBase(o);
  DrawIndex index = splitDrawOf(o);
  for (int64_t i = 0; i < mask.numElements(); ++i)
    mask.ints[i] =
        trainmem::dropoutKeep(seed, offset, base + index.at(i), threshold);
  set(o.getMask(), std::move(mask));
  return success();
}

LogicalResult OpKernels::evaluate(arith::ConstantOp o) {
  RefTensor value;
  if (failed(constant(o, value)))
    return failure();
  set(o.getResult(), std::move(value));
  return success();
}

LogicalResult OpKernels::evaluate(CountValidOp o) {
  int64_t ignore = o.getIgnoreIndexAttr().getInt();
  int64_t count = 0;
  for (int64_t id : get(o.getTargets()).ints)
    count += id != ignore;
  set(o.getCount(), RefTensor::ofInts({}, {count}));
  return success();
}

LogicalResult OpKernels::evaluate(SliceRowsOp o) {
  set(o.getResult(),
      sliceRows(get(o.getInput()), o.getOffsetAttr().getInt(),
                shapeOf(o.getResult().getType()), o.getPaddingAttr().getInt()));
  return success();
}

LogicalResult OpKernels::evaluate(EmbeddingGradOp o) {
  return embeddingGrad(o);
}

LogicalResult OpKernels::evaluate(SumToOp o) {
  sumTo(o);
  return success();
}

LogicalResult OpKernels::evaluate(LayerNormGradOp o) {
  layerNormGrad(o);
  return success();
}

LogicalResult OpKernels::evaluate(RMSNormGradOp o) {
  rmsNormGrad(o);
  return success();
}

LogicalResult OpKernels::evaluate(GeluGradOp o) {
  if (o.getExact())
    binary(o, [](double dy, double x) { return dy * geluExactDerivative(x); });
  else
    binary(o, [](double dy, double x) { return dy * geluDerivative(x); });
  return success();
}

LogicalResult OpKernels::evaluate(BiasGeluGradOp o) {
  const RefTensor &dy = get(o.getGrad());
  RefTensor y =
      biasSum(get(o.getInput()), get(o.getBias()), o.getInput().getType());
  for (size_t i = 0; i < y.floats.size(); ++i)
    y.floats[i] = static_cast<float>(static_cast<double>(dy.floats[i]) *
                                     geluDerivative(y.floats[i]));
  set(o.getResult(), std::move(y));
  return success();
}

LogicalResult OpKernels::evaluate(SoftmaxGradOp o) {
  const RefTensor &dy = get(o.getGrad());
  const RefTensor &y = get(o.getOutput());
  auto [rows, cols] = rowsOf(y);
  RefTensor dx = RefTensor::zeros(y.shape);
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0.0;
    for (int64_t c = 0; c < cols; ++c)
      dot +=
          static_cast<double>(dy.floats[r * cols + c]) * y.floats[r * cols + c];
    for (int64_t c = 0; c < cols; ++c)
      dx.floats[r * cols + c] = static_cast<float>(
          y.floats[r * cols + c] * (dy.floats[r * cols + c] - dot));
  }
  set(o.getResult(), std::move(dx));
  return success();
}

LogicalResult OpKernels::evaluate(DropoutGradOp o) {
  const RefTensor &dy = get(o.getGrad());
  const RefTensor &mask = get(o.getMask());
  double scale = 1.0 / (1.0 - o.getRate().convertToDouble());
  RefTensor dx = RefTensor::zeros(dy.shape);
  for (int64_t i = 0; i < dy.numElements(); ++i)
    dx.floats[i] =
        mask.ints[i] ? static_cast<float>(dy.floats[i] * scale) : 0.0f;
  set(o.getResult(), std::move(dx));
  return success();
}

LogicalResult OpKernels::evaluate(CrossEntropyGradOp o) {
  return crossEntropyGrad(o);
}

/// The first row (column) of this rank's part of a vocabulary split by
/// `split` into parts of `rows` (0 when whole); failure after an error at
/// `op` when the split's grid axis is not a static group of its parts.
FailureOr<int64_t>
OpKernels::vocabularyFirst(Operation *op, TensorSplitAttr split, int64_t rows) {
  if (!split)
    return 0;
  FailureOr<ProcessGroup> group = getSplitGroup(op, split);
  if (failed(group))
    return failure();
  return ((state.getRank() / group->stride) % split.getParts()) * rows;
}

LogicalResult OpKernels::evaluate(BroadcastOp o) {
  const RefTensor &x = get(o.getInput());
  std::vector<int64_t> shape = shapeOf(o.getResult().getType());
  RefTensor y = RefTensor::zeros(shape);
  int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> index(rank, 0);
  for (int64_t i = 0; i < y.numElements(); ++i) {
    // The input element: the result's index, 0 along repeated dimensions.
    int64_t source = 0;
    for (int64_t d = 0; d < rank; ++d)
      source = source * x.shape[d] + (x.shape[d] == 1 ? 0 : index[d]);
    y.floats[i] = x.floats[source];
    for (int64_t d = rank - 1; d >= 0 && ++index[d] == shape[d]; --d)
      index[d] = 0;
  }
  set(o.getResult(), std::move(y));
  return success();
}

/// Copies the block [offset, offset + n) of dimension `dim` between a
/// tensor of `whole` shape and one of `part` shape: into the part
/// (`toPart`) or back into the whole.
template <typename T>
static void copyBlock(const std::vector<int64_t> &whole, int64_t dim,
                      int64_t offset, int64_t n, std::vector<T> &wholeData,
                      std::vector<T> &partData, bool toPart) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= whole[d];
  for (size_t d = dim + 1; d < whole.size(); ++d)
    inner *= whole[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i) {
        T &w = wholeData[(o * whole[dim] + offset + j) * inner + i];
        T &p = partData[(o * n + j) * inner + i];
        if (toPart)
          p = w;
        else
          w = p;
      }
}

LogicalResult OpKernels::evaluate(SliceOp o) {
  RefTensor x = get(o.getInput());
  std::vector<int64_t> shape = shapeOf(o.getResult().getType());
  if (x.isInteger) {
    // Ids (a model's shifted labels): copied as they are.
    int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t(1),
                                std::multiplies<int64_t>());
    RefTensor y = RefTensor::ofInts(shape, std::vector<int64_t>(n));
    copyBlock(x.shape, o.getDim(), o.getOffset(), o.getSize(), x.ints, y.ints,
              /*toPart=*/true);
    set(o.getResult(), std::move(y));
    return success();
  }
  RefTensor y = RefTensor::zeros(shape);
  copyBlock(x.shape, o.getDim(), o.getOffset(), o.getSize(), x.floats, y.floats,
            /*toPart=*/true);
  set(o.getResult(), std::move(y));
  return success();
}

LogicalResult OpKernels::evaluate(SliceGradOp o) {
  RefTensor g = get(o.getGrad());
  RefTensor y = RefTensor::zeros(shapeOf(o.getResult().getType()));
  copyBlock(y.shape, o.getDim(), o.getOffset(), g.shape[o.getDim()], y.floats,
            g.floats, /*toPart=*/false);
  set(o.getResult(), std::move(y));
  return success();
}

LogicalResult OpKernels::evaluate(RowMaxOp o) {
  const RefTensor &x = get(o.getInput());
  auto [rows, cols] = rowsOf(x);
  RefTensor y = RefTensor::zeros(shapeOf(o.getResult().getType()));
  for (int64_t r = 0; r < rows; ++r)
    y.floats[r] = *std::max_element(x.floats.begin() + r * cols,
                                    x.floats.begin() + (r + 1) * cols);
  set(o.getResult(), std::move(y));
  return success();
}

LogicalResult OpKernels::evaluate(CrossEntropyPartOp o) {
  const RefTensor &logits = get(o.getLogits());
  const RefTensor &targets = get(o.getTargets());
  const RefTensor &most = get(o.getMax());
  auto [rows, vocab] = rowsOf(logits);
  FailureOr<int64_t> first = vocabularyFirst(o, o.getSplitAttr(), vocab);
  if (failed(first))
    return failure();
  int64_t whole =
      o.getSplitAttr() ? vocab * o.getSplitAttr().getParts() : vocab;
  std::vector<int64_t> shape = shapeOf(o.getSumExp().getType());
  RefTensor sumExp = RefTensor::zeros(shape), target = RefTensor::zeros(shape);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = targets.ints[r];
    if (t != o.getIgnoreIndexAttr().getInt() && (t < 0 || t >= whole))
      return o.emitError("target ")
             << t << " at position " << r << " is outside the vocabulary of "
             << whole;
    const float *lr = &logits.floats[r * vocab];
    double z = 0.0;
    for (int64_t c = 0; c < vocab; ++c)
      z += std::exp(static_cast<double>(lr[c]) - most.floats[r]);
    sumExp.floats[r] = static_cast<float>(z);
    if (t != o.getIgnoreIndexAttr().getInt() && t >= *first &&
        t < *first + vocab)
      target.floats[r] = lr[t - *first];
  }
  set(o.getSumExp(), std::move(sumExp));
  set(o.getTargetLogit(), std::move(target));
  return success();
}

LogicalResult OpKernels::evaluate(CrossEntropyMergeOp o) {
  const RefTensor &sumExp = get(o.getSumExp());
  const RefTensor &target = get(o.getTargetLogit());
  const RefTensor &most = get(o.getMax());
  const RefTensor &targets = get(o.getTargets());
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t r = 0; r < targets.numElements(); ++r) {
    if (targets.ints[r] == o.getIgnoreIndexAttr().getInt())
      continue;
    sum += static_cast<double>(most.floats[r]) +
           std::log(static_cast<double>(sumExp.floats[r])) - target.floats[r];
    ++count;
  }
  set(o.getLossSum(), RefTensor::ofFloats({}, {static_cast<float>(sum)}));
  set(o.getCount(), RefTensor::ofInts({}, {count}));
  return success();
}

LogicalResult OpKernels::evaluate(CrossEntropyPartGradOp o) {
  const RefTensor &dSumExp = get(o.getDSumExp());
  const RefTensor &dTarget = get(o.getDTargetLogit());
  const RefTensor &logits = get(o.getLogits());
  const RefTensor &most = get(o.getMax());
  const RefTensor &targets = get(o.getTargets());
  auto [rows, vocab] = rowsOf(logits);
  FailureOr<int64_t> first = vocabularyFirst(o, o.getSplitAttr(), vocab);
  if (failed(first))
    return failure();
  RefTensor dl = RefTensor::zeros(logits.shape);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = targets.ints[r];
    if (t == o.getIgnoreIndexAttr().getInt())
      continue;
    for (int64_t c = 0; c < vocab; ++c)
      dl.floats[r * vocab + c] = static_cast<float>(
          dSumExp.floats[r] *
              std::exp(static_cast<double>(logits.floats[r * vocab + c]) -
                       most.floats[r]) +
          (*first + c == t ? static_cast<double>(dTarget.floats[r]) : 0.0));
  }
  set(o.getResult(), std::move(dl));
  return success();
}

LogicalResult OpKernels::evaluate(CrossEntropyMergeGradOp o) {
  double grad = get(o.getGrad()).scalarFloat();
  const RefTensor &sumExp = get(o.getSumExp());
  const RefTensor &targets = get(o.getTargets());
  std::vector<int64_t> shape = shapeOf(o.getDSumExp().getType());
  RefTensor dSumExp = RefTensor::zeros(shape),
            dTarget = RefTensor::zeros(shape);
  for (int64_t r = 0; r < targets.numElements(); ++r) {
    if (targets.ints[r] == o.getIgnoreIndexAttr().getInt())
      continue;
    dSumExp.floats[r] =
        static_cast<float>(grad / static_cast<double>(sumExp.floats[r]));
    dTarget.floats[r] = static_cast<float>(-grad);
  }
  set(o.getDSumExp(), std::move(dSumExp));
  set(o.getDTargetLogit(), std::move(dTarget));
  return success();
}

LogicalResult OpKernels::evaluate(AdamWOp o) {
  adamw(o);
  return success();
}

LogicalResult OpKernels::evaluate(QuantizeOp o) {
  quantize(o);
  return success();
}

LogicalResult OpKernels::evaluate(DequantizeOp o) {
  dequantize(o);
  return success();
}

LogicalResult OpKernels::evaluate(AdamW8bitOp o) {
  adamw8bit(o);
  return success();
}

LogicalResult OpKernels::evaluate(SGDOp o) {
  sgd(o);
  return success();
}

LogicalResult OpKernels::evaluate(SGD8bitOp o) {
  sgd8bit(o);
  return success();
}

LogicalResult OpKernels::evaluate(SophiaOp o) {
  sophia(o);
  return success();
}

LogicalResult OpKernels::evaluate(Sophia8bitOp o) {
  sophia8bit(o);
  return success();
}

LogicalResult OpKernels::evaluate(HessianEMAOp o) {
  const RefTensor &h = get(o.getH());
  const RefTensor &g = get(o.getGrad());
  if (!allFinite(g)) {
    state.noteSkippedUpdate(o.getH());
    set(o.getNewH(), h);
    return success();
  }
  trainmem::HessianEMAStep step(o.getBeta2().convertToDouble());
  RefTensor nh = RefTensor::zeros(h.shape);
  for (int64_t i = 0; i < h.numElements(); ++i)
    nh.floats[i] = step.apply(h.floats[i], g.floats[i]);
  set(o.getNewH(), std::move(nh));
  return success();
}

LogicalResult OpKernels::evaluate(SampleOp o) {
  const RefTensor &logits = get(o.getLogits());
  uint64_t seed = static_cast<uint64_t>(o.getSeed());
  if (o.getKey())
    seed += static_cast<uint64_t>(get(o.getKey()).scalarInt());
  int64_t classes = logits.shape.back();
  int64_t rows = logits.numElements() / classes;
  std::vector<int64_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = logits.floats.data() + r * classes;
    labels[r] = trainmem::sampleClass(
        [&](int64_t j) { return row[j]; }, classes,
        trainmem::philoxWord(seed, static_cast<uint64_t>(o.getOffset()),
                             static_cast<uint64_t>(r)));
  }
  std::vector<int64_t> shape(logits.shape.begin(), logits.shape.end() - 1);
  set(o.getLabels(), RefTensor::ofInts(shape, std::move(labels)));
  return success();
}

LogicalResult OpKernels::evaluate(LossScaleOp o) {
  double scale =
      lossScaleOf(get(o.getState()), o.getInitial().convertToDouble());
  set(o.getScale(), RefTensor::ofFloats({}, {static_cast<float>(scale)}));
  return success();
}

LogicalResult OpKernels::evaluate(UnscaleGradientsOp o) {
  unscaleGradients(o);
  return success();
}

LogicalResult OpKernels::evaluate(ClipGradNormOp o) {
  clip(o);
  return success();
}

LogicalResult OpKernels::evaluate(SquaredNormOp o) {
  set(o.getResult(),
      RefTensor::ofInts({trainmem::kExactSumWords},
                        exactSumOfSquares(state, o.getInputs())));
  return success();
}

LogicalResult OpKernels::evaluate(LRScheduleOp o) {
  lrSchedule(o);
  return success();
}

/// Attention, the plain way: per query row the scaled, masked scores, their
/// log-sum-exp, the (dropped-out) probabilities and their weighted sum of
/// values, in double.
LogicalResult OpKernels::evaluate(AttentionOp o) {
  FailureOr<trainmem::AttentionLayout> layout = attentionLayout(o);
  if (failed(layout))
    return failure();
  const RefTensor &q = get(o.getQ()),
                  &k = o.getRing() ? *state.ringKeys : get(o.getK()),
                  &v = o.getRing() ? *state.ringValues : get(o.getV());
  const trainmem::AttentionLayout &a = *layout;
  trainmem::AttentionDropout dropout = attentionDropout(o);
  double scale = o.getScale().convertToDouble();
  RefTensor out = RefTensor::zeros(shapeOf(o.getOutput().getType()));
  RefTensor lse = RefTensor::zeros(shapeOf(o.getLse().getType()));
  std::vector<double> scores(a.keys), acc(a.valueDim);
  std::vector<int64_t> seen;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h) {
      int64_t kvh = a.kvHead(h);
      const float *qh = &q.floats[a.row(b, h, 0) * a.dim];
      const float *kh = &k.floats[((b * a.kvHeads + kvh) * a.keys) * a.dim];
      const float *vh =
          &v.floats[((b * a.kvHeads + kvh) * a.keys) * a.valueDim];
      for (int64_t i = 0; i < a.queries; ++i) {
        // The keys query i sees (0..i unless context-parallel).
        seen.clear();
        for (int64_t j = 0; j < a.keys; ++j)
          if (a.visible(i, j))
            seen.push_back(j);
        int64_t visible = static_cast<int64_t>(seen.size());
        for (int64_t n = 0; n < visible; ++n) {
          int64_t j = seen[n];
          double dot = 0.0;
          for (int64_t d = 0; d < a.dim; ++d)
            dot += static_cast<double>(qh[i * a.dim + d]) * kh[j * a.dim + d];
          scores[n] = dot;
        }
        double logSumExp = trainmem::scaleRowAndLogSumExp(
            scores.data(), visible, scale,
            a.alibiSlopes ? a.alibiSlopes[h] : 0.0, i);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t n = 0; n < visible; ++n) {
          int64_t j = seen[n];
          if (!dropout.keep(a.score(b, h, i, j)))
            continue;
          double p = std::exp(scores[n] - logSumExp) * dropout.keepScale;
          for (int64_t d = 0; d < a.valueDim; ++d)
            acc[d] += p * vh[j * a.valueDim + d];
        }
        float *oi = &out.floats[a.outRow(b, h, i)];
        for (int64_t d = 0; d < a.valueDim; ++d)
          oi[d] = static_cast<float>(acc[d]);
        lse.floats[a.row(b, h, i)] = static_cast<float>(logSumExp);
      }
    }
  set(o.getOutput(), std::move(out));
  set(o.getLse(), std::move(lse));
  return success();
}

/// The backward from the saved log-sum-exp: p = exp(s − lse), the mask
/// drawn again, D = Σ do·o per row, ds = p·(dp − D).
/// A ring's k_grad and v_grad are left as the gathered keys' (each rank's
/// part of every block's), which evaluateRanks sums over the group.
LogicalResult OpKernels::evaluate(AttentionGradOp o) {
  FailureOr<trainmem::AttentionLayout> layout = attentionLayout(o);
  if (failed(layout))
    return failure();
  const RefTensor &dout = get(o.getGrad()), &q = get(o.getQ()),
                  &k = o.getRing() ? *state.ringKeys : get(o.getK()),
                  &v = o.getRing() ? *state.ringValues : get(o.getV()),
                  &out = get(o.getOutput()), &lse = get(o.getLse());
  const trainmem::AttentionLayout &a = *layout;
  trainmem::AttentionDropout dropout = attentionDropout(o);
  double scale = o.getScale().convertToDouble();
  std::vector<double> dq(q.floats.size()), dk(k.floats.size()),
      dv(v.floats.size());
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h) {
      int64_t kvh = a.kvHead(h);
      int64_t qBase = a.row(b, h, 0) * a.dim;
      int64_t kBase = ((b * a.kvHeads + kvh) * a.keys) * a.dim;
      int64_t vBase = ((b * a.kvHeads + kvh) * a.keys) * a.valueDim;
      for (int64_t i = 0; i < a.queries; ++i) {
        int64_t oRow = a.outRow(b, h, i);
        double rowDot = 0.0;
        for (int64_t d = 0; d < a.valueDim; ++d)
          rowDot += static_cast<double>(dout.floats[oRow + d]) *
                    out.floats[oRow + d];
        double logSumExp = lse.floats[a.row(b, h, i)];
        for (int64_t j = 0; j < a.keys; ++j) {
          if (!a.visible(i, j))
            continue;
          double dot = 0.0;
          for (int64_t d = 0; d < a.dim; ++d)
            dot += static_cast<double>(q.floats[qBase + i * a.dim + d]) *
                   k.floats[kBase + j * a.dim + d];
          double bias = a.alibiSlopes ? trainmem::rows::alibiBias(
                                            a.alibiSlopes[h], i, j)
                                      : 0.0;
          double p = std::exp(scale * dot + bias - logSumExp);
          bool keep = dropout.keep(a.score(b, h, i, j));
          double kept = keep ? p * dropout.keepScale : 0.0;
          double dpKept = 0.0;
          for (int64_t d = 0; d < a.valueDim; ++d) {
            double g = dout.floats[oRow + d];
            dv[vBase + j * a.valueDim + d] += kept * g;
            dpKept += g * v.floats[vBase + j * a.valueDim + d];
          }
          double dp = keep ? dpKept * dropout.keepScale : 0.0;
          double ds = p * (dp - rowDot) * scale;
          for (int64_t d = 0; d < a.dim; ++d) {
            dq[qBase + i * a.dim + d] += ds * k.floats[kBase + j * a.dim + d];
            dk[kBase + j * a.dim + d] += ds * q.floats[qBase + i * a.dim + d];
          }
        }
      }
    }
  auto toTensor = [](const std::vector<int64_t> &shape,
                     const std::vector<double> &values) {
    std::vector<float> floats(values.begin(), values.end());
    return RefTensor::ofFloats(shape, std::move(floats));
  };
  set(o.getQGrad(), toTensor(q.shape, dq));
  set(o.getKGrad(), toTensor(k.shape, dk));
  set(o.getVGrad(), toTensor(v.shape, dv));
  return success();
}

LogicalResult Interpreter::exec(Operation *op) {
  if (auto region = dyn_cast<TransparentRegionOpInterface>(op)) {
    if (failed(run(region->getRegion(0).front())))
      return failure();
    for (auto [result, value] :
         llvm::zip(region->getResults(), region.getYieldedValues()))
      set(result, get(value));
    return success();
  }
  if (auto loop = dyn_cast<AccumulateOp>(op))
    return accumulate(loop);
  if (isa<YieldOp>(op))
    return success();
  if (auto ret = dyn_cast<func::ReturnOp>(op)) {
    for (Value v : ret.getOperands())
      returned.push_back(get(v));
    return success();
  }
  // Every other op says how it runs: the train ops through the models
  // attached below, ops of other dialects through their own.
  auto evaluable = dyn_cast<EvaluableOpInterface>(op);
  if (!evaluable)
    return op->emitError("reference evaluator: unsupported op '")
           << op->getName() << "'";
  if (failed(evaluable.evaluate(*this)))
    return failure();
  for (Value result : op->getResults())
    if (!values.count(result))
      return op->emitError("reference evaluator: '")
             << op->getName() << "' set no value for result "
             << cast<OpResult>(result).getResultNumber();
  return success();
}

void Interpreter::bindMicroBatch(AccumulateOp op, int64_t step) {
  Block &body = op.getBody().front();
  int64_t micro = op.getMicroBatchRows();
  for (auto [index, input] : llvm::enumerate(op.getInputs())) {
    Value arg = body.getArgument(index);
    set(arg, sliceRows(get(input), step * micro, shapeOf(arg.getType()),
                       op.getPadding()[index]));
  }
  if (op.getIndexed())
    set(op.getIndexArgument(), RefTensor::ofInts({}, {step}));
  if (op.getWeighted())
    set(op.getShareArgument(),
        RefTensor::ofFloats({}, {static_cast<float>(op.getShare(step))}));
}

std::vector<RefTensor> Interpreter::zeroSums(AccumulateOp op) {
  std::vector<RefTensor> sums;
  for (Value result : op.getResults())
    sums.push_back(RefTensor::zeros(shapeOf(result.getType())));
  return sums;
}

void Interpreter::addYielded(AccumulateOp op, std::vector<RefTensor> &sums) {
  auto yield = cast<YieldOp>(op.getBody().front().getTerminator());
  for (auto [sum, value, result] :
       llvm::zip(sums, yield.getValues(), op.getResults())) {
    const RefTensor &part = get(value);
    for (size_t i = 0; i < sum.floats.size(); ++i)
      sum.floats[i] += part.floats[i];
    // A 16-bit sum (accumulate-dtype) rounds each addition, as the
    // runtime's add stores it.
    roundToElementType(sum, result.getType());
  }
}

LogicalResult Interpreter::accumulate(AccumulateOp op) {
  // In the loop's sum order: each group summed, then added to the total.
  // The running group's sums, and the finished groups' total.
  std::vector<RefTensor> sums = zeroSums(op), total = zeroSums(op);
  auto closeGroup = [&] {
    for (auto [into, group, result] : llvm::zip(total, sums, op.getResults())) {
      for (size_t i = 0; i < into.floats.size(); ++i)
        into.floats[i] += group.floats[i];
      roundToElementType(into, result.getType());
    }
    sums = zeroSums(op);
  };
  for (auto [position, entry] : llvm::enumerate(op.getSumOrder())) {
    auto [step, startsGroup] = entry;
    if (startsGroup && position > 0)
      closeGroup();
    bindMicroBatch(op, step);
    if (failed(run(op.getBody().front())))
      return failure();
    addYielded(op, sums);
  }
  closeGroup();
  for (auto [result, sum] : llvm::zip(op.getResults(), total))
    set(result, std::move(sum));
  return success();
}

LogicalResult Interpreter::run(Block &block) {
  for (Operation &op : block)
    if (failed(exec(&op)))
      return failure();
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// The train ops' EvaluableOpInterface models
//===----------------------------------------------------------------------===//

namespace {
template <typename OpT>
struct KernelModel
    : public EvaluableOpInterface::ExternalModel<KernelModel<OpT>, OpT> {
  LogicalResult evaluate(Operation *op, EvaluationState &state) const {
    return OpKernels{state}.evaluate(cast<OpT>(op));
  }
};

template <typename... OpTs> void attachKernels(MLIRContext *context) {
  (OpTs::template attachInterface<KernelModel<OpTs>>(*context), ...);
}

/// An activation of Activations.def (A: trainmem::<Name>) and its gradient.
template <typename OpT, typename A>
struct ActivationModel
    : public EvaluableOpInterface::ExternalModel<ActivationModel<OpT, A>, OpT> {
  LogicalResult evaluate(Operation *op, EvaluationState &state) const {
    OpKernels{state}.unary(op, A::forward);
    return success();
  }
};
/// An optimizer of Optimizers.def (Steps::make builds its trainmem::Step),
/// f32 or 8-bit (an op with a `block`).
template <typename OpT, typename Steps>
struct OneStateModel
    : public EvaluableOpInterface::ExternalModel<OneStateModel<OpT, Steps>,
                                                 OpT> {
  LogicalResult evaluate(Operation *op, EvaluationState &state) const {
    OpKernels kernels{state};
    auto step = Steps::make(
        op,
        kernels.get(op->getOperand(op->getNumOperands() - 1)).scalarFloat());
    if (auto block = op->getAttrOfType<IntegerAttr>("block"))
      kernels.blockwise8bit(op, step, block.getInt());
    else
      kernels.oneState(op, step);
    return success();
  }
};

template <typename OpT, typename A>
struct ActivationGradModel
    : public EvaluableOpInterface::ExternalModel<ActivationGradModel<OpT, A>,
                                                 OpT> {
  LogicalResult evaluate(Operation *op, EvaluationState &state) const {
    OpKernels{state}.binary(
        op, [](double dy, double x) { return dy * A::derivative(x); });
    return success();
  }
};
} // namespace

void mlir::train::registerEvaluatorExternalModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, TrainDialect *) {
    attachKernels<
        EmbeddingOp, IotaOp, ContextSliceOp, MatmulOp, AddOp, MulOp, ScaleOp,
        BiasAddOp, LayerNormOp, RMSNormOp, GeluOp, BiasGeluOp, SoftmaxOp,
        DropoutOp, RopeOp, ReshapeOp, GradAllReduceOp, TransposeOp,
        CrossEntropyOp, MeanLossOp, CastOp, TransferOp, TransferWaitOp,
        PipelineExchangeOp, DropoutMaskOp, CountValidOp, SliceRowsOp,
        EmbeddingGradOp, SumToOp, LayerNormGradOp, RMSNormGradOp, GeluGradOp,
        BiasGeluGradOp, SoftmaxGradOp, DropoutGradOp, CrossEntropyGradOp,
        RowMaxOp, BroadcastOp, SliceOp, SliceGradOp, CrossEntropyPartOp,
        CrossEntropyMergeOp, CrossEntropyPartGradOp, CrossEntropyMergeGradOp,
        AdamWOp, QuantizeOp, DequantizeOp, AdamW8bitOp, SGDOp, SGD8bitOp,
        SophiaOp, Sophia8bitOp, HessianEMAOp, SampleOp, LossScaleOp,
        UnscaleGradientsOp, ClipGradNormOp, SquaredNormOp, LRScheduleOp,
        AttentionOp, AttentionGradOp>(context);
#define TMRT_ACTIVATION(kernel, Name)                                          \
  Name##Op::attachInterface<ActivationModel<Name##Op, trainmem::Name>>(        \
      *context);                                                               \
  Name##GradOp::attachInterface<                                               \
      ActivationGradModel<Name##GradOp, trainmem::Name>>(*context);
#include "trainmem-runtime/Activations.def"
    // The optimizers of Optimizers.def: their Step from the learning rate and
    // the op's hyperparameters, by name.
#define TRAINMEM_HYPERPARAMETER(name)                                          \
  , op->getAttrOfType<FloatAttr>(#name).getValueAsDouble()
#define TMRT_ONE_STATE_OPTIMIZER(kernel, Name, Step, parameters, arguments)    \
  struct Name##Steps {                                                         \
    static trainmem::Step make(Operation *op, double lr) {                     \
      return trainmem::Step(                                                   \
          lr TMRT_FOR_EACH(TRAINMEM_HYPERPARAMETER, TMRT_UNPAREN(arguments))); \
    }                                                                          \
  };                                                                           \
  Name##Op::attachInterface<OneStateModel<Name##Op, Name##Steps>>(*context);   \
  Name##8bitOp ::attachInterface<OneStateModel<Name##8bitOp, Name##Steps>>(    \
      *context);
#include "trainmem-runtime/Optimizers.def"
#undef TRAINMEM_HYPERPARAMETER
  });
  registry.addExtension(+[](MLIRContext *context, arith::ArithDialect *) {
    attachKernels<arith::ConstantOp>(context);
  });
}

/// The models, on the contexts that run the evaluator: attached once, from
/// the registry extensions above.
static void ensureKernelModels(MLIRContext *context) {
  std::optional<RegisteredOperationName> add =
      RegisteredOperationName::lookup(AddOp::getOperationName(), context);
  if (add && add->hasInterface<EvaluableOpInterface>())
    return;
  DialectRegistry registry;
  registerEvaluatorExternalModels(registry);
  context->appendDialectRegistry(registry);
}

/// Checks `args` against `func`'s arguments and binds them in `interp`.
static LogicalResult bindArguments(func::FuncOp func, ArrayRef<RefTensor> args,
                                   Interpreter &interp) {
  if (func.isExternal())
    return func.emitError("reference evaluator: function has no body");
  if (args.size() != func.getNumArguments())
    return func.emitError("reference evaluator: expected ")
           << func.getNumArguments() << " arguments, got " << args.size();
  for (auto [index, arg] : llvm::enumerate(func.getArguments())) {
    auto type = cast<RankedTensorType>(arg.getType());
    const RefTensor &value = args[index];
    bool wantsInteger = isa<IntegerType>(type.getElementType());
    if (ArrayRef<int64_t>(value.shape) != type.getShape() ||
        value.isInteger != wantsInteger ||
        static_cast<int64_t>(wantsInteger ? value.ints.size()
                                          : value.floats.size()) !=
            type.getNumElements())
      return func.emitError("reference evaluator: argument #")
             << index << " does not match its type " << type;
    interp.values[arg] = value;
  }
  return success();
}

FailureOr<SmallVector<RefTensor>>
mlir::train::evaluate(func::FuncOp func, ArrayRef<RefTensor> args,
                      SmallVectorImpl<Value> *skippedUpdates) {
  ensureKernelModels(func.getContext());
  Interpreter interp;
  if (failed(bindArguments(func, args, interp)))
    return failure();
  if (failed(interp.run(func.getBody().front())))
    return failure();
  if (skippedUpdates)
    skippedUpdates->assign(interp.skippedUpdates.begin(),
                           interp.skippedUpdates.end());
  return std::move(interp.returned);
}

//===----------------------------------------------------------------------===//
// Several ranks in lockstep
//===----------------------------------------------------------------------===//

namespace {

/// Runs one SPMD step for every rank, op by op in lockstep; the shard
/// collectives combine the ranks' values as the ring would (sums in double,
/// rounded to the element type once).
class Ranks {
public:
  explicit Ranks(size_t n) : ranks(n) {
    for (auto [index, rank] : llvm::enumerate(ranks))
      rank.rank = static_cast<int64_t>(index);
  }
  std::vector<Interpreter> ranks;

  LogicalResult run(Block &block) {
    for (Operation &op : block)
      if (failed(step(&op)))
        return failure();
    return success();
  }

private:
  static bool holdsCollective(Operation *op) {
    return op
        ->walk([](Operation *inner) {
          return isa<shard::AllReduceOp, shard::ReduceScatterOp,
                     shard::AllGatherOp, shard::AllSliceOp>(inner) ||
                         getRingContext(inner)
                     ? WalkResult::interrupt()
                     : WalkResult::advance();
        })
        .wasInterrupted();
  }

  /// The process group of a collective, on a grid of as many ranks as are
  /// simulated.
  FailureOr<ProcessGroup> groupOf(Operation *op) {
    std::optional<ProcessGroup> group = getProcessGroup(op);
    if (!group || group->gridRanks != static_cast<int64_t>(ranks.size()))
      return op->emitError("reference evaluator: the collective's grid is "
                           "not a static grid of ")
             << ranks.size()
             << " ranks (the ranks simulated) with its group on "
                "consecutive axes";
    return *group;
  }

  /// The ranks of each group of `group`, in their order in it.
  std::vector<std::vector<size_t>> membersOf(const ProcessGroup &group) {
    std::vector<std::vector<size_t>> groups;
    for (size_t rank = 0; rank < ranks.size(); ++rank) {
      int64_t r = static_cast<int64_t>(rank);
      if (group.positionOf(r) != 0)
        continue;
      std::vector<size_t> &members = groups.emplace_back();
      for (int64_t p = 0; p < group.size; ++p)
        members.push_back(static_cast<size_t>(r + p * group.stride));
    }
    return groups;
  }

  /// The values of `value` on `members`, reduced (sum, average or
  /// maximum) elementwise, in their order.
  RefTensor reduce(Value value, shard::ReductionKind kind,
                   ArrayRef<size_t> members) {
    const RefTensor &first = ranks[members.front()].get(value);
    if (!first.ints.empty() && first.floats.empty()) {
      // Integers (exact sums of squares) add exactly.
      std::vector<int64_t> sums(first.ints.size(), 0);
      for (size_t member : members) {
        const RefTensor &t = ranks[member].get(value);
        for (size_t i = 0; i < sums.size(); ++i)
          sums[i] += t.ints[i];
      }
      return RefTensor::ofInts(first.shape, std::move(sums));
    }
    if (kind == shard::ReductionKind::Max) {
      std::vector<float> most = first.floats;
      for (size_t member : members) {
        const RefTensor &t = ranks[member].get(value);
        for (size_t i = 0; i < most.size(); ++i)
          most[i] = std::max(most[i], t.floats[i]);
      }
      return RefTensor::ofFloats(first.shape, std::move(most));
    }
    std::vector<double> sums(first.floats.size(), 0.0);
    for (size_t member : members) {
      const RefTensor &t = ranks[member].get(value);
      for (size_t i = 0; i < sums.size(); ++i)
        sums[i] += static_cast<double>(t.floats[i]);
    }
    std::vector<float> out(sums.size());
    double divisor =
        kind == shard::ReductionKind::Average ? double(members.size()) : 1.0;
    for (size_t i = 0; i < sums.size(); ++i)
      out[i] = static_cast<float>(sums[i] / divisor);
    return RefTensor::ofFloats(first.shape, std::move(out));
  }

  /// Part `index` of `parts` of `t` along `dim` (floats or integers).
  static RefTensor partOf(const RefTensor &t, int64_t dim, int64_t parts,
                          int64_t index) {
    std::vector<int64_t> shape = t.shape;
    shape[dim] /= parts;
    if (t.isInteger)
      return RefTensor::ofInts(shape, trainmem::partAlong<int64_t>(
                                          t.ints, t.shape, dim, parts, index));
    return RefTensor::ofFloats(
        shape,
        trainmem::partAlong<float>(t.floats, t.shape, dim, parts, index));
  }

  static bool isSimulated(shard::ReductionKind kind) {
    return kind == shard::ReductionKind::Sum ||
           kind == shard::ReductionKind::Average;
  }

  /// The dimension a collective splits, if `value` (its whole side) has it.
  static std::optional<int64_t> splitDim(Value value, APInt axis) {
    int64_t dim = static_cast<int64_t>(axis.getZExtValue());
    if (dim >= cast<RankedTensorType>(value.getType()).getRank())
      return std::nullopt;
    return dim;
  }

  LogicalResult stepAllReduce(shard::AllReduceOp allReduce) {
    FailureOr<ProcessGroup> group = groupOf(allReduce);
    if (failed(group))
      return failure();
    if (!isSimulated(allReduce.getReduction()) &&
        allReduce.getReduction() != shard::ReductionKind::Max)
      return allReduce.emitError("reference evaluator: only sum, average "
                                 "and max all-reduces are simulated");
    if (allReduce.getReduction() != shard::ReductionKind::Sum &&
        !isa<FloatType>(getElementTypeOrSelf(allReduce.getType())))
      return allReduce.emitError("reference evaluator: integers are only "
                                 "summed");
    for (const std::vector<size_t> &members : membersOf(*group)) {
      RefTensor reduced =
          reduce(allReduce.getInput(), allReduce.getReduction(), members);
      for (size_t member : members)
        ranks[member].set(allReduce.getResult(), reduced);
    }
    return success();
  }

  LogicalResult stepReduceScatter(shard::ReduceScatterOp scatter) {
    FailureOr<ProcessGroup> group = groupOf(scatter);
    if (failed(group))
      return failure();
    std::optional<int64_t> dim =
        splitDim(scatter.getInput(), scatter.getScatterAxis());
    if (!isSimulated(scatter.getReduction()) || !dim)
      return scatter.emitError("reference evaluator: simulates sum and "
                               "average reduce-scatters along a dimension "
                               "of their operand");
    for (const std::vector<size_t> &members : membersOf(*group)) {
      RefTensor reduced =
          reduce(scatter.getInput(), scatter.getReduction(), members);
      for (auto [position, member] : llvm::enumerate(members))
        ranks[member].set(scatter.getResult(),
                          partOf(reduced, *dim, group->size, position));
    }
    return success();
  }

  LogicalResult stepAllSlice(shard::AllSliceOp slice) {
    FailureOr<ProcessGroup> group = groupOf(slice);
    if (failed(group))
      return failure();
    std::optional<int64_t> dim =
        splitDim(slice.getInput(), slice.getSliceAxis());
    if (!dim)
      return slice.emitError("reference evaluator: simulates slices along "
                             "a dimension of their operand");
    for (auto [index, rank] : llvm::enumerate(ranks))
      rank.set(slice.getResult(),
               partOf(rank.get(slice.getInput()), *dim, group->size,
                      group->positionOf(static_cast<int64_t>(index))));
    return success();
  }

  /// `value` on `members`, joined along `dim` in their order.
  RefTensor gatherAlong(Value value, ArrayRef<size_t> members, int64_t dim) {
    std::vector<std::vector<float>> parts;
    for (size_t member : members)
      parts.push_back(ranks[member].get(value).floats);
    std::vector<int64_t> shape = ranks[members.front()].get(value).shape;
    std::vector<float> all = trainmem::joinAlong<float>(parts, shape, dim);
    shape[dim] *= static_cast<int64_t>(members.size());
    return RefTensor::ofFloats(shape, std::move(all));
  }

  LogicalResult stepAllGather(shard::AllGatherOp gather) {
    FailureOr<ProcessGroup> group = groupOf(gather);
    if (failed(group))
      return failure();
    std::optional<int64_t> dim =
        splitDim(gather.getInput(), gather.getGatherAxis());
    if (!dim)
      return gather.emitError("reference evaluator: simulates gathers along "
                              "a dimension of their operand");
    for (const std::vector<size_t> &members : membersOf(*group)) {
      RefTensor gathered = gatherAlong(gather.getInput(), members, *dim);
      for (size_t member : members)
        ranks[member].set(gather.getResult(), gathered);
    }
    return success();
  }

  /// A ring attention: each rank attends to its group's keys and values
  /// (what the ring passes round, gathered here in rank order); backward,
  /// each rank's K/V gradient is its rows' of the group's sum.
  LogicalResult stepRing(Operation *op, Value keys, Value values,
                         ContextSplitAttr context, Value keyGrad,
                         Value valueGrad) {
    FailureOr<ProcessGroup> group = getContextGroup(op, context);
    if (failed(group))
      return failure();
    if (group->gridRanks != static_cast<int64_t>(ranks.size()))
      return op->emitError("reference evaluator: the ring's grid is not ")
             << ranks.size() << " ranks (the ranks simulated)";
    for (const std::vector<size_t> &members : membersOf(*group)) {
      RefTensor gatheredKeys = gatherAlong(keys, members, 2),
                gatheredValues = gatherAlong(values, members, 2);
      for (size_t member : members) {
        Interpreter &rank = ranks[member];
        rank.ringKeys = &gatheredKeys;
        rank.ringValues = &gatheredValues;
        LogicalResult result = rank.exec(op);
        rank.ringKeys = rank.ringValues = nullptr;
        if (failed(result))
          return failure();
      }
      for (Value grad : {keyGrad, valueGrad}) {
        if (!grad)
          continue;
        RefTensor sum = reduce(grad, shard::ReductionKind::Sum, members);
        for (auto [position, member] : llvm::enumerate(members))
          ranks[member].set(grad, partOf(sum, 2, group->size, position));
      }
    }
    return success();
  }

  /// A region holding collectives runs in lockstep inside.
  LogicalResult stepRegion(TransparentRegionOpInterface region) {
    Operation *op = region.getOperation();
    if (failed(run(op->getRegion(0).front())))
      return failure();
    for (Interpreter &rank : ranks)
      for (auto [result, value] :
           llvm::zip(op->getResults(), region.getYieldedValues()))
        rank.set(result, rank.get(value));
    return success();
  }

  /// A micro-batch loop holding collectives: each micro-batch in lockstep.
  LogicalResult stepAccumulate(AccumulateOp loop) {
    std::vector<std::vector<RefTensor>> sums;
    for (Interpreter &rank : ranks)
      sums.push_back(rank.zeroSums(loop));
    for (int64_t micro = 0; micro < loop.getStepsAttr().getInt(); ++micro) {
      for (Interpreter &rank : ranks)
        rank.bindMicroBatch(loop, micro);
      if (failed(run(loop.getBody().front())))
        return failure();
      for (auto [rank, rankSums] : llvm::zip(ranks, sums))
        rank.addYielded(loop, rankSums);
    }
    for (auto [rank, rankSums] : llvm::zip(ranks, sums))
      for (auto [result, sum] : llvm::zip(loop->getResults(), rankSums))
        rank.set(result, std::move(sum));
    return success();
  }

  LogicalResult step(Operation *op) {
    if (auto allReduce = dyn_cast<shard::AllReduceOp>(op))
      return stepAllReduce(allReduce);
    if (auto scatter = dyn_cast<shard::ReduceScatterOp>(op))
      return stepReduceScatter(scatter);
    if (auto slice = dyn_cast<shard::AllSliceOp>(op))
      return stepAllSlice(slice);
    if (auto gather = dyn_cast<shard::AllGatherOp>(op))
      return stepAllGather(gather);
    if (ContextSplitAttr ring = getRingContext(op)) {
      if (auto g = dyn_cast<AttentionGradOp>(op))
        return stepRing(op, g.getK(), g.getV(), ring, g.getKGrad(),
                        g.getVGrad());
      auto a = cast<AttentionOp>(op);
      return stepRing(op, a.getK(), a.getV(), ring, {}, {});
    }
    if (holdsCollective(op)) {
      if (auto region = dyn_cast<TransparentRegionOpInterface>(op))
        return stepRegion(region);
      if (auto loop = dyn_cast<AccumulateOp>(op))
        return stepAccumulate(loop);
      return op->emitError("reference evaluator: collectives inside '")
             << op->getName() << "' are not simulated";
    }
    for (Interpreter &rank : ranks)
      if (failed(rank.exec(op)))
        return failure();
    return success();
  }
};

} // namespace

FailureOr<std::vector<SmallVector<RefTensor>>>
mlir::train::evaluateRanks(func::FuncOp func,
                           ArrayRef<SmallVector<RefTensor>> argsPerRank) {
  if (argsPerRank.empty())
    return func.emitError("reference evaluator: no ranks to simulate");
  ensureKernelModels(func.getContext());
  Ranks ranks(argsPerRank.size());
  for (auto [rank, args] : llvm::zip(ranks.ranks, argsPerRank))
    if (failed(bindArguments(func, args, rank)))
      return failure();
  if (failed(ranks.run(func.getBody().front())))
    return failure();
  std::vector<SmallVector<RefTensor>> results;
  for (Interpreter &rank : ranks.ranks)
    results.push_back(std::move(rank.returned));
  return results;
}

FailureOr<SmallVector<RefTensor>> EvaluationState::exchange(Operation *op) {
  return op->emitError("reference evaluator: a train.pipeline_exchange runs "
                       "between the stages of a pipeline: evaluate the stage "
                       "functions together (evaluatePipeline)");
}

//===----------------------------------------------------------------------===//
// The stages of a pipeline
//===----------------------------------------------------------------------===//

namespace {

/// The tensors in flight between stages: (from, to, tag) to the tensor.
using Mailbox = std::map<std::tuple<int64_t, int64_t, int64_t>, RefTensor>;

/// One stage's interpreter: its exchanges post what they send to the
/// mailbox and take what they receive from it.
class StageInterpreter : public Interpreter {
public:
  StageInterpreter(int64_t stage, Mailbox &mailbox)
      : stage(stage), mailbox(mailbox) {}

  void post(PipelineExchangeOp op) {
    for (auto [value, peer, tag] :
         llvm::zip(op.getSends(), op.getSendPeers(), op.getSendTags()))
      mailbox[{stage, peer, tag}] = get(value);
  }
  bool ready(PipelineExchangeOp op) const {
    for (auto [peer, tag] : llvm::zip(op.getRecvPeers(), op.getRecvTags()))
      if (!mailbox.count({peer, stage, tag}))
        return false;
    return true;
  }
  FailureOr<SmallVector<RefTensor>> exchange(Operation *op) override {
    auto exchangeOp = cast<PipelineExchangeOp>(op);
    SmallVector<RefTensor> received;
    for (auto [peer, tag] :
         llvm::zip(exchangeOp.getRecvPeers(), exchangeOp.getRecvTags())) {
      auto it = mailbox.find({peer, stage, tag});
      if (it == mailbox.end())
        return op->emitError("reference evaluator: stage ")
               << stage << " receives tag " << tag << " from stage " << peer
               << ", which has not sent it (an exchange inside a region "
                  "cannot wait)";
      received.push_back(std::move(it->second));
      mailbox.erase(it);
    }
    return received;
  }

private:
  int64_t stage;
  Mailbox &mailbox;
};

} // namespace

FailureOr<std::vector<SmallVector<RefTensor>>>
mlir::train::evaluatePipeline(ArrayRef<func::FuncOp> stages,
                              ArrayRef<SmallVector<RefTensor>> argsPerStage) {
  if (stages.empty() || stages.size() != argsPerStage.size())
    return failure();
  ensureKernelModels(func::FuncOp(stages.front()).getContext());
  Mailbox mailbox;
  std::vector<std::unique_ptr<StageInterpreter>> interps;
  std::vector<Block::iterator> next;
  std::vector<bool> posted(stages.size(), false);
  for (auto [index, func] : llvm::enumerate(stages)) {
    interps.push_back(
        std::make_unique<StageInterpreter>(int64_t(index), mailbox));
    if (failed(bindArguments(func, argsPerStage[index], *interps.back())))
      return failure();
    next.push_back(func::FuncOp(func).getBody().front().begin());
  }
  // Each stage runs until an exchange whose tensors have not all been sent;
  // a round in which no stage moves is a deadlock.
  while (true) {
    bool moved = false, done = true;
    for (auto [index, func] : llvm::enumerate(stages)) {
      Block &body = func::FuncOp(func).getBody().front();
      StageInterpreter &interp = *interps[index];
      while (next[index] != body.end()) {
        Operation *op = &*next[index];
        if (auto exchange = dyn_cast<PipelineExchangeOp>(op)) {
          if (!posted[index]) {
            interp.post(exchange);
            posted[index] = true;
            moved = true;
          }
          if (!interp.ready(exchange))
            break;
          posted[index] = false;
        }
        if (failed(interp.exec(op)))
          return failure();
        ++next[index];
        moved = true;
      }
      done &= next[index] == body.end();
    }
    if (done)
      break;
    if (!moved) {
      for (auto [index, func] : llvm::enumerate(stages))
        if (next[index] != func::FuncOp(func).getBody().front().end())
          return next[index]->emitError("reference evaluator: stage ")
                 << index
                 << " waits here for tensors no stage sends: the "
                    "exchanges deadlock";
    }
  }
  std::vector<SmallVector<RefTensor>> results;
  for (auto &interp : interps)
    results.push_back(std::move(interp->returned));
  return results;
}
