//===- Layout.cpp - where a tensor's elements lie in its buffer -----------===//

#include "trainmem/Analysis/Layout.h"
#include "trainmem/Dialect/Train/IR/TrainOps.h"
#include "trainmem/Dialect/Train/IR/TrainUtils.h"

#include "mlir/Dialect/Utils/IndexingUtils.h"

using namespace mlir;
using namespace mlir::train;

SmallVector<int64_t> mlir::train::getStrides(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  Operation *def = value.getDefiningOp();
  if (auto view = dyn_cast_or_null<StridedViewOpInterface>(def))
    if (std::optional<SmallVector<int64_t>> strides = view.getViewStrides(
            getStrides(cast<ViewLikeOpInterface>(def).getViewSource())))
      return *strides;
  if (isTransparentRegionOp(def))
    return getStrides(resolveRegionResult(value));
  // Everything else (a copy, a reshape of a strided view included) is
  // row-major.
  return computeSuffixProduct(type.getShape());
}

bool mlir::train::isContiguous(Value value) {
  return isRowMajor(cast<RankedTensorType>(value.getType()).getShape(),
                    getStrides(value));
}

bool mlir::train::isAliasingView(Operation *viewOp) {
  auto view = dyn_cast<StridedViewOpInterface>(viewOp);
  auto viewLike = dyn_cast<ViewLikeOpInterface>(viewOp);
  return view && viewLike &&
         view.getViewStrides(getStrides(viewLike.getViewSource())).has_value();
}
