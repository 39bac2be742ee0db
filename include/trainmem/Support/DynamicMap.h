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

#include "trainmem/Support/HostDevice.h"

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

/// The code of the map entry nearest x. A tie goes to the entry nearer
/// zero (the lower code for x > 0, the upper one for x < 0), so that on a
/// map whose negative entries mirror its positive ones, -x gets the mirror
/// of x's code. NaN and values at or below the first entry give 0. A
/// branch-free binary search: the largest index whose entry is below x,
/// then the nearer of it and the next.
/// quantizeToMap over any 256 entries that index like a DynamicMap (the
/// CUDA kernels pass a copy of the map in their parameters).
template <typename Map>
TRAINMEM_HD inline uint8_t quantizeToEntries(const Map &map, float x) {
  if (!(x > map[0]))
    return 0;
  unsigned base = 0;
  for (unsigned half = 128; half >= 1; half /= 2) // unrolled: no branches
    base += static_cast<unsigned>(map[base + half] < x) * half;
  if (base == 255)
    return 255;
  float below = x - map[base], above = map[base + 1] - x;
  bool lower = x > 0.0f ? below <= above : below < above;
  return static_cast<uint8_t>(lower ? base : base + 1);
}

inline uint8_t quantizeToMap(const DynamicMap &map, float x) {
  return quantizeToEntries(map, x);
}

/// The code of 0 in a map (what all-zero state quantizes to).
inline uint8_t zeroCode(const DynamicMap &map) {
  return quantizeToMap(map, 0.0f);
}

/// One block of block-wise quantization: returns the block's absmax (max
/// |x|, NaN ignored) and sets codes[i] = codeOf(x * (1 / absmax)), a
/// reciprocal once per block as bitsandbytes does (the block's maximum
/// still gets the code of 1), or `zero` everywhere where absmax is 0.
template <typename CodeOf>
float quantizeBlockWith(const float *values, int64_t count, uint8_t zero,
                        CodeOf codeOf, uint8_t *codes) {
  float scale = 0.0f;
  for (int64_t i = 0; i < count; ++i)
    scale = std::max(scale, std::abs(values[i]));
  if (!(scale > 0.0f)) {
    std::fill(codes, codes + count, zero);
    return scale;
  }
  float inverse = 1.0f / scale;
  for (int64_t i = 0; i < count; ++i)
    codes[i] = codeOf(values[i] * inverse);
  return scale;
}

/// quantizeToMap for a dynamic map without a search. For y = |x| >= 0:
///  - the decade d of y (d = 0 below 1e-6, d = 7 from 1 on) comes from the
///    binade of y, which holds at most one power of ten P: d = D + (y >= P).
///    One float per binade holds both: P with D in its three lowest
///    mantissa bits (a value within 7 ulps of P may land in the decade
///    below, where the guess below is the same);
///  - within a decade the map's entries are equally spaced: y's position
///    among them, less a quarter of a spacing, floored, is a guess c that
///    is y's code q or q - 1 (the quarter covers the float error and the
///    step between decades, where the midpoint lies a fifth of a spacing
///    into the upper decade); c = floor(y * scale[d] - offset[d]);
///  - q = c + (y > T[c]), where T[c] is the largest float whose code is c.
/// Negative x on a signed map get the mirror 2 * zero - q of |x|'s code
/// (quantizeToMap breaks ties toward zero on both sides). The tables are
/// worked out from the map; DynamicMapTest checks every float in [0, 1].
class MapQuantizer {
public:
  /// Binade b holds [2^(b + kMinExponent), 2^(b + 1 + kMinExponent)); b = 0
  /// also everything below.
  static constexpr int kMinExponent = -24;
  static constexpr int kBinades = 32, kDecades = 8;

  explicit MapQuantizer(const DynamicMap &map) : map(map) {
    isSigned = map[0] < 0.0f;
    zero = zeroCode(map);
    // T[c]: the largest float in [map[c], map[c + 1]] whose code is c (the
    // code is monotone in the value, so bisect over the float bits).
    for (int c = 0; c < 256; ++c)
      thresholds[c] = std::numeric_limits<float>::infinity();
    for (int c = zero; c < 255; ++c) {
      uint32_t lo = bitsOf(map[c]), hi = bitsOf(map[c + 1]);
      while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        (quantizeToMap(map, floatOf(mid)) <= c ? lo : hi) = mid;
      }
      thresholds[c] = floatOf(lo);
    }
    // Decades [10^(d-7), 10^(d-6)): their entries and first code.
    std::array<float, kDecades> decadeStart;
    for (int d = 0; d < kDecades; ++d) {
      decadeStart[d] = d == 0 ? 0.0f : static_cast<float>(std::pow(10.0, d - 7));
      double lo = std::pow(10.0, d - 7), hi = std::pow(10.0, d - 6);
      int first = 256, count = 0;
      for (int c = zero + 1; c < 256; ++c)
        if (map[c] >= lo && map[c] < hi) {
          first = std::min(first, c);
          ++count;
        }
      if (count == 0) {
        // From 1 on: a guess one below the code of 1.
        scale[d] = 0.0f;
        offset[d] = 1.0f - quantizeToMap(map, 1.0f);
        continue;
      }
      // Entry k of the decade sits at lo + (k + 1/2) * spacing.
      double spacing = (hi - lo) / count;
      scale[d] = static_cast<float>(1.0 / spacing);
      offset[d] = static_cast<float>(lo / spacing + 0.25 - first);
    }
    for (int b = 0; b < kBinades; ++b) {
      double lo = std::ldexp(1.0, b + kMinExponent),
             hi = std::ldexp(1.0, b + 1 + kMinExponent);
      uint32_t below = 0;
      float power = 4.0f; // above every y: no power of ten in the binade
      for (int d = 1; d < kDecades; ++d) {
        if (decadeStart[d] <= lo)
          below = static_cast<uint32_t>(d);
        else if (decadeStart[d] < hi)
          power = decadeStart[d];
      }
      binadeKey[b] = floatOf((bitsOf(power) & ~kDecadeBits) | below);
    }
  }

  /// The guess c (y's code or one less) for y = |x| in [0, 1].
  int guess(float y) const {
    int b = std::clamp(static_cast<int>(bitsOf(y) >> 23) - (127 + kMinExponent),
                       0, kBinades - 1);
    float key = binadeKey[b];
    int d = static_cast<int>(bitsOf(key) & kDecadeBits) + (y >= key);
    return static_cast<int>(std::floor(y * scale[d] - offset[d]));
  }

  uint8_t quantize(float x) const {
    if (!(x > map[0]))
      return 0;
    float y = std::min(std::fabs(x), 1.0f); // all of [1, inf] is code 255
    int c = guess(y);
    int q = c + (y > thresholds[c]);
    if (x < 0.0f)
      return static_cast<uint8_t>(std::max(0, 2 * zero - q));
    return static_cast<uint8_t>(q);
  }

  /// quantizeBlockwise of one block (count values) with quantize(): the
  /// same codes; returns the block's absmax.
  float quantizeBlock(const float *values, int64_t count,
                      uint8_t *codes) const {
    return quantizeBlockWith(values, count, static_cast<uint8_t>(zero),
                             [this](float x) { return quantize(x); }, codes);
  }

  const DynamicMap &entries() const { return map; }
  bool hasNegatives() const { return isSigned; }
  int zeroCodeOf() const { return zero; }

  // The tables, for vectorized kernels that follow quantize().
  std::array<float, 256> thresholds;
  std::array<float, kBinades> binadeKey;
  static constexpr uint32_t kDecadeBits = 7;
  std::array<float, kDecades> scale, offset;

private:
  static uint32_t bitsOf(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    return bits;
  }
  static float floatOf(uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
  }

  const DynamicMap &map;
  bool isSigned = false;
  int zero = 0;
};

/// The quantizer of the signed or unsigned dynamic map; null for other maps.
inline const MapQuantizer *quantizerFor(const DynamicMap &map) {
  static const MapQuantizer signedQuantizer(signedDynamicMap());
  static const MapQuantizer unsignedQuantizer(unsignedDynamicMap());
  if (&map == &signedDynamicMap())
    return &signedQuantizer;
  if (&map == &unsignedDynamicMap())
    return &unsignedQuantizer;
  return nullptr;
}

/// Quantizes values[0..n) block by block (quantizeBlockWith) with
/// quantizeToMap. The reference: the evaluator uses it, the runtime's
/// kernels must equal it.
inline void quantizeBlockwise(const DynamicMap &map, const float *values,
                              int64_t n, int64_t block, uint8_t *codes,
                              float *absmax) {
  uint8_t zero = zeroCode(map);
  auto nearest = [&map](float x) { return quantizeToMap(map, x); };
  for (int64_t b = 0; b * block < n; ++b) {
    int64_t begin = b * block, count = std::min(n - begin, block);
    absmax[b] =
        quantizeBlockWith(values + begin, count, zero, nearest, codes + begin);
  }
}

template <typename Map>
TRAINMEM_HD inline float dequantizeValue(const Map &map, uint8_t code,
                                         float absmax) {
  return map[code] * absmax;
}

/// The block a tensor of n elements is quantized in: `block`, or the
/// smallest power of two covering n where that is smaller (the same codes
/// and absmax as one block of the whole tensor; per-block buffers stay the
/// tensor's size however large the compiler's block).
inline int64_t effectiveStateBlock(int64_t block, int64_t n) {
  int64_t cover = 1;
  while (cover < n)
    cover <<= 1;
  return std::min(block, cover);
}

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_DYNAMICMAP_H
