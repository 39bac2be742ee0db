//===- LossScaleUpdate.h - dynamic loss scaling's arithmetic ----*- C++ -*-===//
//
// The scale and the update of train-loss-scale's state ([log2(scale /
// initial), clean steps, skipped steps]), header-only and free of LLVM, so
// the runtime's kernels, the reference evaluator and the run library apply
// the same rule.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_LOSSSCALEUPDATE_H
#define TRAINMEM_SUPPORT_LOSSSCALEUPDATE_H

#include "trainmem/Support/HostDevice.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace trainmem {

/// Whether `initial` is a loss scale the step can use: the f32 the scale is
/// stored and multiplied in is a positive normal number (1e-46 would be 0
/// in f32 and zero every gradient; 1e308 infinite, and skip every step).
inline bool isUsableLossScale(double initial) {
  float stored = static_cast<float>(initial);
  return initial > 0.0 && std::isnormal(stored);
}

/// initial · 2^exponent (the exponent clamped far past f32's range, so that
/// a corrupted state gives an infinite or zero scale, not undefined shifts).
TRAINMEM_HD inline double lossScale(double initial, int64_t exponent) {
  int64_t clamped = exponent < -2000  ? -2000
                    : exponent > 2000 ? 2000
                                      : exponent;
  return ldexp(initial, static_cast<int>(clamped));
}

/// The state after a step: one more clean step, and the scale doubled after
/// `growthInterval` of them; or, when a gradient was not finite, the scale
/// halved, the clean steps restarted and one more step skipped.
inline void advanceLossScale(int64_t state[3], bool finite,
                             int64_t growthInterval) {
  if (finite) {
    if (++state[1] >= growthInterval) {
      ++state[0];
      state[1] = 0;
    }
  } else {
    --state[0];
    state[1] = 0;
    ++state[2];
  }
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_LOSSSCALEUPDATE_H
