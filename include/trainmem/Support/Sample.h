//===- Sample.h - a class drawn from the softmax of a row --------*- C++
//-*-===//
//
// Header-only and free of LLVM: train.sample's draw, which the reference
// evaluator and the runtime's kernels share, so that they pick the same
// class for the same row and word.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_SAMPLE_H
#define TRAINMEM_SUPPORT_SAMPLE_H

#include "trainmem/Support/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace trainmem {

/// The uniform number in [0, 1) of a Philox word: its top 24 bits over
/// 2^24 (exact in float and double).
TRAINMEM_HD inline double uniformOfWord(uint32_t word) {
  return static_cast<double>(word >> 8) * (1.0 / 16777216.0);
}

/// The class drawn for a row of `classes` logits with the Philox word
/// `word`: the first c with u · Σ e^(x_j - max) < Σ_{j<=c} e^(x_j - max),
/// u = uniformOfWord(word); each exponential in f32, the sums in f64 in
/// class order. `load(j)` reads logit j as a float.
template <typename Load>
TRAINMEM_HD int64_t sampleClass(Load load, int64_t classes, uint32_t word) {
  float max = load(0);
  for (int64_t j = 1; j < classes; ++j) {
    float x = load(j);
    if (x > max)
      max = x;
  }
  double total = 0.0;
  for (int64_t j = 0; j < classes; ++j)
    total += static_cast<double>(expf(load(j) - max));
  double threshold = uniformOfWord(word) * total;
  double cumulative = 0.0;
  for (int64_t j = 0; j < classes; ++j) {
    cumulative += static_cast<double>(expf(load(j) - max));
    if (threshold < cumulative)
      return j;
  }
  return classes - 1;
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_SAMPLE_H
