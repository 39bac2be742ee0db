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
#include <cstring>
#include <limits>
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

/// quantizeToMap in a few steps: a table over the float bits of |x|
/// (binades 2^-22..2^0, 2^7 buckets each, and one bucket below) gives, per
/// bucket, the largest code whose entry lies below the bucket; a fixed
/// number of upward steps (the most entries any bucket holds) then finds
/// the largest code whose entry lies below x, exactly as the binary search
/// does. Negative x (signed maps, symmetric around code 127) start from the
/// mirror of the next bucket.
class DynamicCodebook {
public:
  static constexpr int kMantissaBits = 7;
  static constexpr int kMinExponent = -22;
  static constexpr int kBuckets = (0 - kMinExponent + 1) * (1 << kMantissaBits) + 1;

  explicit DynamicCodebook(const DynamicMap &map) : map(map) {
    std::copy(map.begin(), map.end(), padded.begin());
    padded[256] = std::numeric_limits<float>::infinity();
    isSigned = map[0] < 0.0f;
    for (int k = 0; k <= kBuckets; ++k) {
      float start = bucketStart(k);
      int below = -1;
      while (below < 255 && map[below + 1] < start)
        ++below;
      lower[k] = below;
    }
    steps = 0;
    for (int k = 0; k < kBuckets; ++k) {
      int inside = 0;
      for (float entry : map)
        inside += entry >= bucketStart(k) && entry < bucketStart(k + 1);
      steps = std::max(steps, inside);
    }
  }

  uint8_t quantize(float x) const {
    if (!(x > map[0]))
      return 0;
    int lo;
    if (x >= 0.0f || !isSigned) {
      lo = std::max<int>(lower[bucket(x)], 0);
    } else {
      // Entries at or beyond the next bucket's start in magnitude are all
      // below x: the mirror (code 254 - j) of each positive code j.
      lo = std::max(0, 253 - lower[bucket(-x) + 1]);
    }
    for (int s = 0; s < steps; ++s)
      lo += padded[lo + 1] < x;
    if (lo >= 255)
      return 255;
    return static_cast<uint8_t>(x - map[lo] <= map[lo + 1] - x ? lo : lo + 1);
  }

  int refinementSteps() const { return steps; }

  // For vectorized kernels that follow quantize() step by step.
  const float *paddedEntries() const { return padded.data(); }
  const int32_t *lowerTable() const { return lower.data(); }
  bool hasNegatives() const { return isSigned; }
  /// The bits of the smallest magnitude of bucket 1 shifted like a key.
  static constexpr int32_t kKeyBase = (127 + kMinExponent) << kMantissaBits;

private:
  static int bucket(float magnitude) {
    uint32_t bits;
    std::memcpy(&bits, &magnitude, 4);
    bits &= 0x7fffffffu; // -0 is 0
    int64_t key =
        static_cast<int64_t>(bits >> (23 - kMantissaBits)) - kKeyBase + 1;
    return static_cast<int>(std::clamp<int64_t>(key, 0, kBuckets - 1));
  }
  /// The smallest magnitude of bucket k (0 for bucket 0; +inf past the end).
  static float bucketStart(int k) {
    if (k <= 0)
      return 0.0f;
    if (k >= kBuckets)
      return std::numeric_limits<float>::infinity();
    uint32_t bits = static_cast<uint32_t>(
        (k - 1 + kKeyBase))
                    << (23 - kMantissaBits);
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
  }

  const DynamicMap &map;
  std::array<float, 257> padded;
  std::array<int32_t, kBuckets + 1> lower;
  int steps = 0;
  bool isSigned = false;
};

/// The codebook of the signed or unsigned dynamic map; null for other maps.
inline const DynamicCodebook *codebookFor(const DynamicMap &map) {
  static const DynamicCodebook signedBook(signedDynamicMap());
  static const DynamicCodebook unsignedBook(unsignedDynamicMap());
  if (&map == &signedDynamicMap())
    return &signedBook;
  if (&map == &unsignedDynamicMap())
    return &unsignedBook;
  return nullptr;
}

/// Quantizes values[0..n) block by block: absmax[b] = max |x| of block b,
/// codes[i] = nearest map entry to x / absmax.
inline void quantizeBlockwise(const DynamicMap &map, const float *values,
                              int64_t n, int64_t block, uint8_t *codes,
                              float *absmax) {
  const DynamicCodebook *book = codebookFor(map);
  for (int64_t b = 0; b * block < n; ++b) {
    int64_t begin = b * block, end = std::min(n, begin + block);
    float scale = 0.0f;
    for (int64_t i = begin; i < end; ++i)
      scale = std::max(scale, std::abs(values[i]));
    absmax[b] = scale;
    if (!(scale > 0.0f)) {
      std::fill(codes + begin, codes + end, zeroCode(map));
      continue;
    }
    if (book)
      for (int64_t i = begin; i < end; ++i)
        codes[i] = book->quantize(values[i] / scale);
    // (x / scale, not x * (1 / scale): the block maximum must map to 1.)
    else
      for (int64_t i = begin; i < end; ++i)
        codes[i] = quantizeToMap(map, values[i] / scale);
  }
}

inline float dequantizeValue(const DynamicMap &map, uint8_t code,
                             float absmax) {
  return map[code] * absmax;
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_DYNAMICMAP_H
