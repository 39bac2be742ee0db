//===- ExactSum.h - the exact sum of squares of float values ----*- C++ -*-===//
//
// The squared global gradient norm, summed without rounding, so that its
// value does not depend on the order of the terms: not on how the
// gradients are cut into shards (ZeRO), on the number of ranks, or on the
// order in which ranks or tensors are visited. Gradient clipping by that
// norm then scales by the same factor on one rank and on N.
//
// The square of a float (f32, bf16, f16) is exact in double: 24 bits of
// significand squared are at most 48. Each square is added, exactly, to a
// fixed-point number of kExactSumLimbs limbs of 32 bits (held in 64-bit
// words, so that limbs can take 2^31 additions before carries must move
// on), whose lowest bit weighs 2^kExactSumLowestExponent: squares of f32
// lie in [2^-298, 2^256], so the number covers every such square and sums
// of up to 2^64 of the largest. Two sums merge by adding their limbs, also
// exactly (a shard.all_reduce of i64 limbs); only the final conversion to
// double rounds, once, to nearest.
//
// Infinite and NaN squares are counted apart: the sum is then infinite or
// NaN, as the rounded sum would be.
//
// Plain C++ with no LLVM dependency: the runtime and the reference
// evaluator include it.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINMEM_SUPPORT_EXACTSUM_H
#define TRAINMEM_SUPPORT_EXACTSUM_H

#include "trainmem/Support/HostDevice.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace trainmem {

/// Limbs of the exact sum: two more words carry the counts of infinite and
/// NaN terms. A `train.squared_norm` result is tensor<kExactSumWords x i64>.
constexpr int kExactSumLimbs = 22;
constexpr int kExactSumWords = kExactSumLimbs + 2;
constexpr int kExactSumLowestExponent = -352;

/// An exact sum of squares in `words` (kExactSumWords int64 words: limbs
/// from the lowest, then the infinite and NaN counts). The words are plain
/// integers: two sums add word by word.
class ExactSquareSum {
public:
  TRAINMEM_HD explicit ExactSquareSum(int64_t *words) : words(words) {}

  void clear() { std::memset(words, 0, sizeof(int64_t) * kExactSumWords); }

  /// Adds the squares of `n` values (float, or a type that converts to it
  /// exactly: bf16, f16). Leaves the words normalized.
  ///
  /// Fast path: squares are binned by their exponent, their 53-bit
  /// significands added into 64-bit bins (four sets of bins, by element
  /// index mod 4, so that the additions do not wait on each other), and
  /// every 4096 elements the bins touched are folded into the limbs: at
  /// most 1024 significands per bin, below 2^63. Integer additions, so the
  /// result is the same exact sum as one addSquare per element.
  template <typename T> void addSquares(const T *values, int64_t n) {
    constexpr int kLanes = 4, kChunk = 4096;
    uint64_t bins[kLanes][2048] = {};
    int64_t done = 0;
    while (done < n) {
      int64_t end = n - done < kChunk ? n : done + kChunk;
      uint32_t low = 2047, high = 0;
      for (int64_t i = done; i < end; ++i) {
        double x = static_cast<double>(static_cast<float>(values[i]));
        double square = x * x;
        uint64_t bits;
        std::memcpy(&bits, &square, sizeof bits);
        uint32_t biased =
            static_cast<uint32_t>(bits >> 52) & 0x7ff; // NaN may carry a sign
        if (biased == 0x7ff) { // infinite or NaN: counted, not binned
          ++words[square != square ? kExactSumLimbs + 1 : kExactSumLimbs];
          continue;
        }
        uint64_t mantissa = (bits & ((uint64_t(1) << 52) - 1)) |
                            (biased != 0 ? uint64_t(1) << 52 : 0);
        bins[i & (kLanes - 1)][biased] += mantissa;
        low = biased < low ? biased : low;
        high = biased > high ? biased : high;
      }
      for (uint32_t e = low; e <= high; ++e)
        for (int lane = 0; lane < kLanes; ++lane) {
          uint64_t sum = bins[lane][e];
          if (sum == 0)
            continue;
          bins[lane][e] = 0;
          addBin(e, sum);
        }
      done = end;
    }
    normalize();
  }

  /// Adds x² for a float x; each limb grows by less than 2^32, so at most
  /// 2^31 of these may come between two normalize() calls.
  TRAINMEM_HD void addSquare(float x) {
    double square = static_cast<double>(x) * static_cast<double>(x);
    uint64_t bits = bitCast<uint64_t>(square);
    uint64_t biased = (bits >> 52) & 0x7ff; // a NaN may carry a sign
    if (biased == 0x7ff) {                  // infinite or NaN
      ++words[(bits & ((uint64_t(1) << 52) - 1)) ? kExactSumLimbs + 1
                                                 : kExactSumLimbs];
      return;
    }
    if (square == 0.0)
      return;
    // square = mantissa · 2^(biased - 1075), mantissa of 53 bits (a square
    // of a float is a normal double: at least 2^-298).
    addBin(static_cast<uint32_t>(biased),
           (bits & ((uint64_t(1) << 52) - 1)) | (uint64_t(1) << 52));
  }

  /// Adds `sum` · 2^(biased - 1075): a bin of significands of finite
  /// squares whose biased double exponent is `biased`. Each limb grows by
  /// less than 2^32.
  TRAINMEM_HD void addBin(uint32_t biased, uint64_t sum) {
    if (biased == 0) // zeros (squares of floats are never subnormal)
      return;
    int position = static_cast<int>(biased) - 1075 - kExactSumLowestExponent;
    if (position < 0) // not a square of a float: keep what the limbs hold
      sum >>= -position, position = 0;
    int limb = position / 32, shift = position % 32;
    unsigned __int128 shifted = static_cast<unsigned __int128>(sum) << shift;
    for (int k = limb; shifted != 0 && k < kExactSumLimbs; ++k) {
      words[k] +=
          static_cast<int64_t>(static_cast<uint64_t>(shifted) & 0xffffffffu);
      shifted >>= 32;
    }
  }

  /// Moves carries up so that every limb but the top is below 2^32 (the
  /// value is unchanged).
  TRAINMEM_HD void normalize() {
    for (int k = 0; k + 1 < kExactSumLimbs; ++k) {
      words[k + 1] += words[k] >> 32;
      words[k] &= 0xffffffff;
    }
  }

  /// Adds another sum's words (a rank's, a tensor's).
  TRAINMEM_HD void merge(const int64_t *other) {
    normalize();
    for (int k = 0; k < kExactSumWords; ++k)
      words[k] += other[k];
    normalize();
  }

  /// Whether the sum is a finite number: no infinite or NaN term, and
  /// words a sum of squares makes (normalizes them first). An overflowed
  /// gradient on any rank makes the ranks' summed words not finite.
  TRAINMEM_HD bool isFinite() {
    normalize();
    return words[kExactSumLimbs] == 0 && words[kExactSumLimbs + 1] == 0 &&
           words[kExactSumLimbs - 1] >= 0;
  }

  /// The sum rounded to the nearest double: a function of the exact value
  /// alone (the words are normalized first).
  double value() {
    // Words no sum of squares makes (a negative count, a negative limb
    // left after the carries, from hand-written IR): not a number.
    normalize();
    if (words[kExactSumLimbs] < 0 || words[kExactSumLimbs - 1] < 0)
      return std::numeric_limits<double>::quiet_NaN();
    if (words[kExactSumLimbs + 1] != 0)
      return std::numeric_limits<double>::quiet_NaN();
    if (words[kExactSumLimbs] != 0)
      return std::numeric_limits<double>::infinity();
    int top = kExactSumLimbs - 1;
    while (top >= 0 && words[top] == 0)
      --top;
    if (top < 0)
      return 0.0;
    // The 64 bits from the highest set bit down, the bits below them
    // folded into the lowest (a sticky bit: 11 places below the rounding
    // position, so the conversion rounds as the whole number would).
    uint64_t high = static_cast<uint64_t>(words[top]);
    int bits = 0;
    while ((high >> bits) != 0)
      ++bits;
    // The number's bits from position 32·top + bits - 1 down.
    int lowest = 32 * top + bits - 64; // position of the window's bit 0
    uint64_t window = 0;
    bool sticky = false;
    for (int k = 0; k <= top; ++k) {
      uint64_t limb = static_cast<uint64_t>(words[k]);
      int at = 32 * k - lowest; // where limb k's bit 0 lands in the window
      if (at >= 64)
        continue;
      if (at >= 0) {
        window |= limb << at;
      } else if (at > -32) {
        window |= limb >> -at;
        sticky |= (limb & ((uint64_t(1) << -at) - 1)) != 0;
      } else {
        sticky |= limb != 0;
      }
    }
    if (sticky)
      window |= 1;
    return std::ldexp(static_cast<double>(window),
                      lowest + kExactSumLowestExponent);
  }

private:
  int64_t *words;
};

} // namespace trainmem

#endif // TRAINMEM_SUPPORT_EXACTSUM_H
