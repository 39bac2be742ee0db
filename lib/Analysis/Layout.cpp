//===- Layout.cpp - where a tensor's elements lie in its buffer -----------===//

#include "trainmem/Analysis/Layout.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"

using namespace mlir;
using namespace mlir::train;

SmallVector<int64_t> mlir::train::getRowMajorStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// Row-major means: strides equal the row-major ones, ignoring dims of size
/// 1 (their stride never matters).
static bool isRowMajor(ArrayRef<int64_t> shape, ArrayRef<int64_t> strides) {
  SmallVector<int64_t> expected = getRowMajorStrides(shape);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1 && strides[i] != expected[i])
      return false;
  return true;
}

SmallVector<int64_t> mlir::train::getStrides(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  Operation *def = value.getDefiningOp();
  if (auto transpose = dyn_cast_or_null<TransposeOp>(def)) {
    SmallVector<int64_t> source = getStrides(transpose.getInput());
    SmallVector<int64_t> strides;
    for (int64_t p : transpose.getPermutation())
      strides.push_back(source[p]);
    return strides;
  }
  if (isTransparentRegionOp(def))
    return getStrides(resolveRegionResult(value));
  // Everything else, reshapes included (a view of a row-major value, or a
  // copy), is row-major.
  return getRowMajorStrides(type.getShape());
}

bool mlir::train::isContiguous(Value value) {
  return isRowMajor(cast<RankedTensorType>(value.getType()).getShape(),
                    getStrides(value));
}

bool mlir::train::isAliasingView(Operation *viewOp) {
  if (isa<TransposeOp>(viewOp))
    return true;
  if (auto reshape = dyn_cast<ReshapeOp>(viewOp))
    return isContiguous(reshape.getInput());
  return false;
}
