//===- Parts.h - a tensor's equal parts along a dimension -------*- C++ -*-===//
//
// A row-major tensor cut into equal parts along one dimension: what a
// tensor-parallel rank holds of a split parameter (checkpoints join and
// cut them) and what a sequence-parallel rank holds of an activation (the
// evaluator's simulated collectives gather and slice them).
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_PARTS_H
#define TRAINMEM_SUPPORT_PARTS_H

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace trainmem {

using llvm::ArrayRef;

/// The values of a row-major tensor of `shape` before dimension `dim` (its
/// outer count) and in one index of it (`unit` per element).
inline std::pair<int64_t, int64_t> extentsAround(ArrayRef<int64_t> shape,
                                                 int64_t dim, int64_t unit) {
  int64_t outer = 1, inner = unit;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d)
    inner *= shape[d];
  return {outer, inner};
}

/// The part at `position` of `parts` equal parts of a row-major tensor of
/// `shape` cut along `dim`, each element `unit` consecutive values (a
/// tensor-parallel rank's part of a whole parameter: its floats, or its
/// bytes with `unit` the element's size).
template <typename T>
std::vector<T> partAlong(ArrayRef<T> whole, ArrayRef<int64_t> shape,
                         int64_t dim, int64_t parts, int64_t position,
                         int64_t unit = 1) {
  auto [outer, inner] = extentsAround(shape, dim, unit);
  int64_t n = shape[dim] / parts;
  std::vector<T> part;
  part.reserve(outer * n * inner);
  for (int64_t o = 0; o < outer; ++o) {
    const T *first = whole.data() + (o * shape[dim] + position * n) * inner;
    part.insert(part.end(), first, first + n * inner);
  }
  return part;
}

/// The tensor whose parts along `dim` are `parts` (partAlong's inverse):
/// each part of `partShape`, each element `unit` values.
template <typename T>
std::vector<T> joinAlong(ArrayRef<std::vector<T>> parts,
                         ArrayRef<int64_t> partShape, int64_t dim,
                         int64_t unit = 1) {
  auto [outer, inner] = extentsAround(partShape, dim, unit);
  int64_t n = partShape[dim] * inner;
  std::vector<T> whole;
  whole.reserve(outer * n * parts.size());
  for (int64_t o = 0; o < outer; ++o)
    for (const std::vector<T> &part : parts)
      whole.insert(whole.end(), part.begin() + o * n,
                   part.begin() + (o + 1) * n);
  return whole;
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_PARTS_H
