//===- FastExp.h - exp in f32 for inner loops --------------------*- C++ -*-===//
//
// e^x in float from additions, multiplications and bit operations only, so
// that the compiler vectorizes a loop of it at any width and every CPU
// (scalar, SSE2, AVX2, AVX-512) gives the same bits: the build contracts no
// multiply-add and the rounding to an integer is the 1.5 * 2^23 addition,
// not an instruction that some CPUs lack. Cody-Waite reduction
// x = n ln2 + r with ln2 in two parts, |r| <= ln2 / 2, and the degree-7
// Taylor polynomial of e^r (its truncation error is below 2^-27 · e^r);
// within 1 ulp of e^x over every float in [-87.3, 88.7] (measured once;
// FastExpTest checks every 61st). Below -87.33 (e^x under the smallest
// normal float) the result is 0, as for -inf; above 88.72 it is that
// bound's value; NaN gives NaN. Header-only and free of LLVM: the reference
// evaluator's activations and the runtime's kernels share it.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_FASTEXP_H
#define TRAINMEM_SUPPORT_FASTEXP_H

#include "trainmem/Support/HostDevice.h"

#include <cstdint>

namespace trainmem {

TRAINMEM_HD inline float fastExp(float x) {
  const float lowest = -87.33654f, highest = 88.72283f;
  float clamped = x < lowest ? lowest : (x > highest ? highest : x);
  // n = round(x / ln2) by the addition of 1.5 * 2^23 (round to nearest).
  const float shifter = 12582912.0f;
  float shifted = clamped * 1.44269504088896341f + shifter;
  float n = shifted - shifter;
  float r = clamped - n * 0.693145751953125f; // ln2, high part: n * it exact
  r = r - n * 1.42860682030941723e-6f;        // ln2 - high part
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n from n's bits: shifted's low mantissa bits hold n + 2^22 ... as an
  // integer n lies in [-126, 128]; 2^n = (n + 127) << 23 (n = 128, at
  // x = highest, splits as 2 · 2^127).
  int32_t e = static_cast<int32_t>(n);
  int32_t half = e >> 1;
  uint32_t bits1 = static_cast<uint32_t>(half + 127) << 23,
           bits2 = static_cast<uint32_t>(e - half + 127) << 23;
  float scale1 = bitCast<float>(bits1), scale2 = bitCast<float>(bits2);
  float y = p * scale1 * scale2;
  y = x < lowest ? 0.0f : y;
  return x != x ? x : y;
}

/// x[i] = fastExp(x[i]) for i < n (vectorized).
inline void fastExpInPlace(float *x, int64_t n) {
#pragma clang loop vectorize(enable)
  for (int64_t i = 0; i < n; ++i)
    x[i] = fastExp(x[i]);
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_FASTEXP_H
