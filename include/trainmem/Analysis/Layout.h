//===- Layout.h - where a tensor's elements lie in its buffer ----*- C++ -*-===//
//
// Views share their source's buffer: a transpose permutes strides, a reshape
// of a row-major (contiguous) value renames its shape. A reshape of a
// strided view cannot be expressed as strides over the same buffer; it
// copies into a buffer of its own, exactly as frameworks do. The memory
// analysis, the memory plan and the runtime lowering all decide this here.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_ANALYSIS_LAYOUT_H
#define TRAINMEM_ANALYSIS_LAYOUT_H

#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

namespace mlir {
namespace train {

/// Strides (in elements) of `value`'s elements in the buffer that holds it.
SmallVector<int64_t> getStrides(Value value);

/// True when `value` lies row-major in its buffer.
bool isContiguous(Value value);

/// True when the result of `viewOp` (a StridedViewOpInterface op: reshape,
/// transpose) shares its source's buffer; false for a reshape of a strided
/// view, which copies.
bool isAliasingView(Operation *viewOp);

} // namespace train
} // namespace mlir

#endif // TRAINMEM_ANALYSIS_LAYOUT_H
