//===- Tolerance.h - comparing two steps' results in the unit tests -------===//

#ifndef TRAINMEM_UNITTESTS_TOLERANCE_H
#define TRAINMEM_UNITTESTS_TOLERANCE_H

#include "trainmem/Evaluator/Evaluator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace mlir {
namespace train {

/// Largest over results of max |a - b| / max(|b|, 1e-3): each tensor's
/// difference relative to its largest magnitude (a tensor that stays
/// below 1e-3 against 1e-3).
inline double worstRelative(const std::vector<RefTensor> &a,
                            const std::vector<RefTensor> &b) {
  double worst = 0.0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size() && r < b.size(); ++r) {
    double scale = 1e-3, diff = 0.0;
    for (float v : b[r].floats)
      scale = std::max(scale, static_cast<double>(std::abs(v)));
    for (size_t i = 0; i < b[r].floats.size(); ++i)
      diff = std::max(diff, std::abs(static_cast<double>(a[r].floats[i]) -
                                     b[r].floats[i]));
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

} // namespace train
} // namespace mlir

#endif // TRAINMEM_UNITTESTS_TOLERANCE_H
