//===- DynamicMap.h - 8-bit dynamic quantization maps ------------*- C++ -*-===//
//
// The 256-entry dynamic data type of Dettmers et al., "8-bit Optimizers via
// Block-wise Quantization" (2022), as bitsandbytes builds it
// (create_dynamic_map, 7 exponent bits): for exponent e = 0..6, the
// midpoints of 2^e (signed) or 2^(e+1) (unsigned) equal steps of [0.1, 1],
// scaled by 10^(e-6) (and negated too, when signed); plus 0 and 1; sorted.
// Header-only and free of LLVM: the reference evaluator, the runtime's
// kernels and the tests share it.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_DYNAMICMAP_H
#define TRAINMEM_SUPPORT_DYNAMICMAP_H

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace trainmem {

using DynamicMap = std::array<float, 256>;

inline DynamicMap buildDynamicMap(bool isSigned) {
  const int maxExponentBits = 7, nonSignBits = 7;
  std::vector<double> values;
  for (int e = 0; e < maxExponentBits; ++e) {
    int items = isSigned ? (1 << (e + nonSignBits - maxExponentBits)) + 1
                         : (1 << (e + nonSignBits - maxExponentBits + 1)) + 1;
    double scale = std::pow(10.0, -(maxExponentBits - 1) + e);
    for (int k = 0; k + 1 < items; ++k) {
      // Midpoint of two neighbours of linspace(0.1, 1, items).
      double lo = 0.1 + 0.9 * k / (items - 1);
      double hi = 0.1 + 0.9 * (k + 1) / (items - 1);
      double mean = (lo + hi) / 2.0;
      values.push_back(scale * mean);
      if (isSigned)
        values.push_back(-scale * mean);
    }
  }
  values.push_back(0.0);
  values.push_back(1.0);
  while (values.size() < 256)
    values.push_back(0.0);
  std::sort(values.begin(), values.end());
  DynamicMap map;
  for (size_t i = 0; i < 256; ++i)
    map[i] = static_cast<float>(values[i]);
  return map;
}

inline const DynamicMap &signedDynamicMap() {
  static const DynamicMap map = buildDynamicMap(true);
  return map;
}
inline const DynamicMap &unsignedDynamicMap() {
  static const DynamicMap map = buildDynamicMap(false);
  return map;
}

/// The code of the map entry nearest `normalized` (ties to the lower code;
/// NaN and values at or below the first entry give 0). A branch-free binary
/// search: the largest index whose entry is below the value, then the
/// nearer of it and the next.
inline uint8_t quantizeToMap(const DynamicMap &map, float normalized) {
  if (!(normalized > map[0]))
    return 0;
  unsigned base = 0;
  for (unsigned half = 128; half >= 1; half /= 2) // unrolled: no branches
    base += static_cast<unsigned>(map[base + half] < normalized) * half;
  if (base == 255)
    return 255;
  return static_cast<uint8_t>(
      normalized - map[base] <= map[base + 1] - normalized ? base : base + 1);
}

/// The code of 0 in a map (what all-zero state quantizes to).
inline uint8_t zeroCode(const DynamicMap &map) {
  return quantizeToMap(map, 0.0f);
}

/// Quantizes values[0..n) block by block: absmax[b] = max |x| of block b,
/// codes[i] = nearest map entry to x / absmax.
inline void quantizeBlockwise(const DynamicMap &map, const float *values,
                              int64_t n, int64_t block, uint8_t *codes,
                              float *absmax) {
  for (int64_t b = 0; b * block < n; ++b) {
    int64_t begin = b * block, end = std::min(n, begin + block);
    float scale = 0.0f;
    for (int64_t i = begin; i < end; ++i)
      scale = std::max(scale, std::abs(values[i]));
    absmax[b] = scale;
    for (int64_t i = begin; i < end; ++i)
      codes[i] = scale > 0.0f ? quantizeToMap(map, values[i] / scale)
                              : zeroCode(map);
  }
}

inline float dequantizeValue(const DynamicMap &map, uint8_t code,
                             float absmax) {
  return map[code] * absmax;
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_DYNAMICMAP_H
