//===- QuantizedAvx2.cpp - the 8-bit state kernels with AVX2 --------------===//
//
// The block loops of tmrt_adamw_8bit, tmrt_quantize and tmrt_dequantize for
// CPUs with AVX2 but not AVX-512 VBMI (AMD Zen 1-3, Intel client cores and
// Haswell/Broadwell servers), 8 lanes at a time. AVX2 has no byte permute
// across 256 entries, so the two 256-entry tables (map entries, quantizer
// thresholds) are read by gathers; the quantizer's small tables (32 binade
// keys, 8 decade scales and offsets) live in registers and are read by
// vpermps. Per block of state:
//  1. the update: m and v entries by gathers times the block maxima, then
//     the operations of AdamWStep::apply in the same order (the build
//     contracts no multiply-add), into one block of f32 m and v (in L1),
//     with their maxima and a NaN flag;
//  2. each of m and v quantized by MapQuantizer::quantize's steps: the guess
//     from the binade key and decade tables, the threshold T[guess] by a
//     gather, one comparison, the mirror for negative m; 32 codes packed to
//     bytes at a time.
// A block with an infinite maximum or NaN takes the scalar reference as in
// Quantized.cpp. The results are the reference's bits; QuantizeTest runs
// with this path (TMRT_NO_AVX512=1) in test/Runtime/avx2-kernels.test.
//
//===----------------------------------------------------------------------===//

#include "Quantized.h"

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define TMRT_AVX2 __attribute__((target("avx2")))

namespace tmrt {
namespace {

using trainmem::MapQuantizer;

/// MapQuantizer's tables, the small ones in registers.
struct QuantizerRegs {
  /// binadeKey[skip ..], 8 entries each: the binades below `skip` have the
  /// key of binade 0 (no power of ten below 2^(skip + kMinExponent)), and
  /// y < 2 lies in binade 24 or below, so three vectors hold every key.
  __m256 key[3];
  __m256 scale, offset; // per decade
  __m256i skip;
  const float *thresholds;
  __m256i mirror; // twice the zero code

  TMRT_AVX2 explicit QuantizerRegs(const MapQuantizer &q) {
    int first = 0;
    while (first + 1 < MapQuantizer::kBinades &&
           q.binadeKey[first + 1] == q.binadeKey[0])
      ++first;
    int topBinade = 1 - MapQuantizer::kMinExponent; // of y in [1, 2)
    if (topBinade - first >= 24) {
      // Not so for the dynamic maps (first is 3): the maps changed.
      std::fprintf(stderr, "trainmem runtime: the AVX2 quantizer's binade "
                           "keys do not fit three vectors\n");
      std::abort();
    }
    alignas(32) float keys[24];
    for (int i = 0; i < 24; ++i)
      keys[i] = q.binadeKey[std::min(first + i, MapQuantizer::kBinades - 1)];
    for (int k = 0; k < 3; ++k)
      key[k] = _mm256_load_ps(keys + 8 * k);
    skip = _mm256_set1_epi32(127 + MapQuantizer::kMinExponent + first);
    scale = _mm256_loadu_ps(q.scale.data());
    offset = _mm256_loadu_ps(q.offset.data());
    thresholds = q.thresholds.data();
    mirror = _mm256_set1_epi32(2 * q.zeroCodeOf());
  }
};

/// table[index[l]] for the 8 lanes, by scalar loads: vgatherdps is
/// microcode on AMD cores, which holds up the other instructions' decoding.
TMRT_AVX2 inline __m256 lookup(const float *table, __m256i index) {
  // Two indices (each below 256) per 64-bit move to a general register.
  __m128i low = _mm256_castsi256_si128(index),
          high = _mm256_extracti128_si256(index, 1);
  uint64_t at[4] = {static_cast<uint64_t>(_mm_cvtsi128_si64(low)),
                    static_cast<uint64_t>(_mm_extract_epi64(low, 1)),
                    static_cast<uint64_t>(_mm_cvtsi128_si64(high)),
                    static_cast<uint64_t>(_mm_extract_epi64(high, 1))};
  return _mm256_setr_ps(
      table[static_cast<uint32_t>(at[0])], table[at[0] >> 32],
      table[static_cast<uint32_t>(at[1])], table[at[1] >> 32],
      table[static_cast<uint32_t>(at[2])], table[at[2] >> 32],
      table[static_cast<uint32_t>(at[3])], table[at[3] >> 32]);
}

/// MapQuantizer::quantize of 8 values x = value * inverse of a block with a
/// finite, nonzero maximum: |x| is at most 1 but for rounding, so quantize's
/// clamp and NaN check are not needed (y slightly above 1 guesses 254 as 1
/// does; x at or below map[0] mirrors to code 0 or -1, which packCodes
/// clamps to 0).
template <Signs S>
TMRT_AVX2 inline __m256i codesOf(const QuantizerRegs &k, __m256 x) {
  __m256i bits = _mm256_castps_si256(x);
  __m256i magnitudeBits =
      S == Signs::None ? bits
                       : _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  __m256 y = _mm256_castsi256_ps(magnitudeBits);
  // The binade less `skip`, at least 0 (the exponent fits the low 16
  // bits: a saturating 16-bit subtraction), and its key: three 8-entry
  // tables, chosen by index bits 3 and 4 (moved into the sign bit, which
  // vblendvps reads).
  __m256i binade = _mm256_subs_epu16(_mm256_srli_epi32(magnitudeBits, 23),
                                     k.skip);
  __m256 low = _mm256_blendv_ps(
      _mm256_permutevar8x32_ps(k.key[0], binade),
      _mm256_permutevar8x32_ps(k.key[1], binade),
      _mm256_castsi256_ps(_mm256_slli_epi32(binade, 28)));
  __m256 key = _mm256_blendv_ps(
      low, _mm256_permutevar8x32_ps(k.key[2], binade),
      _mm256_castsi256_ps(_mm256_slli_epi32(binade, 27)));
  // decade = D + (y >= key); a true comparison is -1.
  __m256i decade = _mm256_sub_epi32(
      _mm256_and_si256(_mm256_castps_si256(key),
                       _mm256_set1_epi32(
                           static_cast<int>(MapQuantizer::kDecadeBits))),
      _mm256_castps_si256(_mm256_cmp_ps(y, key, _CMP_GE_OQ)));
  __m256 position =
      _mm256_sub_ps(_mm256_mul_ps(y, _mm256_permutevar8x32_ps(k.scale, decade)),
                    _mm256_permutevar8x32_ps(k.offset, decade));
  __m256i guess = _mm256_cvttps_epi32(_mm256_floor_ps(position));
  __m256 threshold = lookup(k.thresholds, guess);
  __m256i code = _mm256_sub_epi32(
      guess, _mm256_castps_si256(_mm256_cmp_ps(y, threshold, _CMP_GT_OQ)));
  if (S == Signs::None)
    return code;
  // Lanes of negative x by their sign bit, which vblendvps reads.
  __m256 negative = x;
  if (S == Signs::Zero)
    return _mm256_castps_si256(_mm256_blendv_ps(
        _mm256_castsi256_ps(code), _mm256_setzero_ps(), negative));
  // 2 zero - q, negative (-1) for q = 255: packCodes saturates it to 0.
  return _mm256_castps_si256(_mm256_blendv_ps(
      _mm256_castsi256_ps(code),
      _mm256_castsi256_ps(_mm256_sub_epi32(k.mirror, code)), negative));
}

/// Four vectors of 8 codes as 32 bytes in element order; codes below 0
/// become 0 (unsigned saturation).
TMRT_AVX2 inline __m256i packCodes(__m256i a, __m256i b, __m256i c,
                                   __m256i d) {
  // packus works within 128-bit halves: the bytes come out as a0-3 b0-3
  // c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7; a dword permute puts them in order.
  __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(a, b),
                                      _mm256_packus_epi32(c, d));
  return _mm256_permutevar8x32_epi32(bytes,
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/// Codes of lanes [j, j + 32) of values[0..count) (padded with finite
/// values to a multiple of 32) of a block whose maximum is 1 / inverse,
/// finite and nonzero; the lanes from count on are not stored.
template <Signs S>
TMRT_AVX2 inline void codes32(const QuantizerRegs &regs, __m256 inverse,
                              const float *values, int64_t count, int64_t j,
                              uint8_t *codes) {
  __m256i part[4];
  for (int r = 0; r < 4; ++r)
    part[r] = codesOf<S>(
        regs, _mm256_mul_ps(_mm256_loadu_ps(values + j + 8 * r), inverse));
  __m256i bytes = packCodes(part[0], part[1], part[2], part[3]);
  if (count - j >= 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(codes + j), bytes);
  } else {
    alignas(32) uint8_t last[32];
    _mm256_store_si256(reinterpret_cast<__m256i *>(last), bytes);
    std::memcpy(codes + j, last, count - j);
  }
}

/// Whether a block with this maximum takes the vector quantizer: finite,
/// nonzero and without NaN among its values.
inline bool vectorQuantizes(float absmax, bool hasNaN) {
  return absmax > 0.0f && !std::isinf(absmax) && !hasNaN;
}

/// The codes of one block of f32 values (padded as for codes32) whose
/// maximum magnitude is `absmax` and which holds NaN if `hasNaN`: the vector
/// quantizer, the zero code, or the scalar reference (which knows NaN and
/// infinity), as quantizeBlockwise would give.
template <Signs S>
TMRT_AVX2 void quantizeBlock(const MapQuantizer &quantizer,
                             const QuantizerRegs &regs, const float *values,
                             int64_t count, float absmax, bool hasNaN,
                             uint8_t *codes) {
  if (vectorQuantizes(absmax, hasNaN)) {
    __m256 inverse = _mm256_set1_ps(1.0f / absmax);
    for (int64_t j = 0; j < count; j += 32)
      codes32<S>(regs, inverse, values, count, j, codes);
  } else if (!(absmax > 0.0f)) {
    std::memset(codes, quantizer.zeroCodeOf(), count);
  } else {
    float ignored;
    trainmem::quantizeBlockwise(quantizer.entries(), values, count, count,
                                codes, &ignored);
  }
}

/// The lanes below `count` (of 8) as a mask.
TMRT_AVX2 inline __m256i laneMask(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// Eight codes as 32-bit indices (fewer at the end: the rest are 0).
TMRT_AVX2 inline __m256i loadCodes(const uint8_t *codes, int64_t count) {
  uint64_t bytes = 0;
  std::memcpy(&bytes, codes, std::min<int64_t>(count, 8));
  return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(bytes)));
}

/// table[codes[0..8)] by scalar loads: on AMD Zen 4 (and Zen 2) these take
/// about 0.2 ns per lane where vgatherdps takes 0.33 (measured with the
/// codes in memory; with indices in a vector, as for the thresholds, the
/// gather is the faster).
TMRT_AVX2 inline __m256 entriesOf(const float *table, const uint8_t *codes) {
  return _mm256_setr_ps(table[codes[0]], table[codes[1]], table[codes[2]],
                        table[codes[3]], table[codes[4]], table[codes[5]],
                        table[codes[6]], table[codes[7]]);
}

/// Largest |x| so far (NaN lanes keep the old value, as std::max does with
/// NaN second) and, with TrackNaN, whether a NaN was seen.
template <bool TrackNaN> struct Maximum {
  __m256 largest, nan;

  TMRT_AVX2 Maximum()
      : largest(_mm256_setzero_ps()), nan(_mm256_setzero_ps()) {}
  TMRT_AVX2 void add(__m256 x) {
    __m256 magnitude = _mm256_and_ps(
        x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    largest = _mm256_max_ps(magnitude, largest);
    if (TrackNaN)
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  TMRT_AVX2 float value() const {
    __m128 half = _mm_max_ps(_mm256_castps256_ps128(largest),
                             _mm256_extractf128_ps(largest, 1));
    half = _mm_max_ps(half, _mm_movehl_ps(half, half));
    half = _mm_max_ss(half, _mm_movehdup_ps(half));
    return _mm_cvtss_f32(half);
  }
  TMRT_AVX2 bool sawNaN() const {
    static_assert(TrackNaN, "this maximum does not look for NaN");
    return _mm256_movemask_ps(nan) != 0;
  }
};

} // namespace

namespace {

/// The update's constants in registers.
struct UpdateRegs {
  __m256 beta1, oneMinusBeta1, beta2, oneMinusBeta2, stepSize, epsilonHat,
      decay;

  TMRT_AVX2 explicit UpdateRegs(const trainmem::AdamWStep &u)
      : beta1(_mm256_set1_ps(u.beta1)),
        oneMinusBeta1(_mm256_set1_ps(u.oneMinusBeta1)),
        beta2(_mm256_set1_ps(u.beta2)),
        oneMinusBeta2(_mm256_set1_ps(u.oneMinusBeta2)),
        stepSize(_mm256_set1_ps(u.stepSize)),
        epsilonHat(_mm256_set1_ps(u.epsilonHat)),
        decay(_mm256_set1_ps(u.decay)) {}
};

/// AdamWStep::apply on 8 lanes, from the codes' map entries and block
/// maxima; m and v go to the block buffers, p' to np.
TMRT_AVX2 inline void update8(const UpdateRegs &u, const float *mEntries,
                              const float *vEntries, __m256 mScale,
                              __m256 vScale, const float *p, const float *g,
                              const uint8_t *mc, const uint8_t *vc, float *np,
                              float *m, float *v, Maximum<false> &mMax,
                              Maximum<false> &vMax) {
  __m256 pi = _mm256_loadu_ps(p), gi = _mm256_loadu_ps(g);
  __m256 mEntry = entriesOf(mEntries, mc), vEntry = entriesOf(vEntries, vc);
  __m256 mNew =
      _mm256_add_ps(_mm256_mul_ps(u.beta1, _mm256_mul_ps(mEntry, mScale)),
                    _mm256_mul_ps(u.oneMinusBeta1, gi));
  __m256 vNew = _mm256_add_ps(
      _mm256_mul_ps(u.beta2, _mm256_mul_ps(vEntry, vScale)),
      _mm256_mul_ps(u.oneMinusBeta2, _mm256_mul_ps(gi, gi)));
  __m256 denominator = _mm256_add_ps(_mm256_sqrt_ps(vNew), u.epsilonHat);
  __m256 pNew = _mm256_sub_ps(
      _mm256_mul_ps(pi, u.decay),
      _mm256_mul_ps(u.stepSize, _mm256_div_ps(mNew, denominator)));
  _mm256_storeu_ps(np, pNew);
  _mm256_storeu_ps(m, mNew);
  _mm256_storeu_ps(v, vNew);
  mMax.add(mNew);
  vMax.add(vNew);
}

} // namespace

namespace {

/// One block of m or v in f32, padded with +0 to a multiple of 32 lanes,
/// and what quantizing it needs.
struct StateBlock {
  std::vector<float> values;
  float absmax = 0.0f;
  bool hasNaN = false;
  int64_t count = 0;

  explicit StateBlock(int64_t padded) : values(padded, 0.0f) {}
  bool vectorized() const { return vectorQuantizes(absmax, hasNaN); }
};

} // namespace

/// Blocks [b0, b1) in a pipeline, as the AVX-512 loop does: block b's
/// update (a square root and a division per element, on the divider)
/// shares a loop with the codes of block b - 1 (gathers, permutes and
/// arithmetic on the other pipes), 32 lanes of each at a time, so that the
/// two overlap.
TMRT_AVX2 void adamW8bitBlocksAvx2(const AdamW8bitBlock &work, int64_t b0,
                                   int64_t b1) {
  // A copy the stores cannot alias, so that its pointers stay in registers.
  const AdamW8bitBlock w = work;
  const UpdateRegs regs(*w.update);
  const MapQuantizer &mQuantizer = *trainmem::quantizerFor(*w.mMap),
                     &vQuantizer = *trainmem::quantizerFor(*w.vMap);
  const QuantizerRegs mRegs(mQuantizer), vRegs(vQuantizer);
  const float *mEntries = w.mMap->data(), *vEntries = w.vMap->data();
  int64_t padded = (w.block + 31) / 32 * 32;
  StateBlock m0(padded), m1(padded), v0(padded), v1(padded);
  StateBlock *mOf[2] = {&m0, &m1}, *vOf[2] = {&v0, &v1};
  for (int64_t b = b0; b <= b1; ++b) {
    bool updating = b < b1, coding = b > b0;
    StateBlock &m = *mOf[b & 1], &v = *vOf[b & 1];
    StateBlock &mPrev = *mOf[(b + 1) & 1], &vPrev = *vOf[(b + 1) & 1];
    int64_t begin = b * w.block;
    int64_t count = updating ? std::min(w.block, w.n - begin) : 0;
    int64_t whole = count / 8 * 8;
    int64_t prevBegin = (b - 1) * w.block;
    int64_t prevCount = coding ? mPrev.count : 0;
    bool mCoding = coding && mPrev.vectorized(),
         vCoding = coding && vPrev.vectorized();
    __m256 mInverse = _mm256_set1_ps(mCoding ? 1.0f / mPrev.absmax : 0.0f),
           vInverse = _mm256_set1_ps(vCoding ? 1.0f / vPrev.absmax : 0.0f);
    __m256 mScale = _mm256_set1_ps(updating ? w.ma[b] : 0.0f),
           vScale = _mm256_set1_ps(updating ? w.va[b] : 0.0f);
    // With finite block maxima and gradients (the caller checks them), m'
    // = b1 (e s) + (1 - b1) g and v' = b2 (e s) + (1 - b2) g^2 are never
    // NaN (at worst v' overflows to +inf, which the maximum shows); with
    // an infinite or NaN maximum the block may hold NaN and goes to the
    // scalar reference.
    bool mayHoldNaN = updating && !(std::isfinite(w.ma[b]) &&
                                    std::isfinite(w.va[b]));
    Maximum<false> mMax, vMax;
    const float *p = w.p + begin, *g = w.g + begin;
    const uint8_t *mc = w.mc + begin, *vc = w.vc + begin;
    float *np = w.np + begin, *mValues = m.values.data(),
          *vValues = v.values.data();
    const float *mPrevValues = mPrev.values.data(),
                *vPrevValues = vPrev.values.data();
    uint8_t *nmc = w.nmc + prevBegin, *nvc = w.nvc + prevBegin;
    for (int64_t j = 0; j < std::max(whole, prevCount); j += 32) {
      for (int64_t i = j; i < std::min(whole, j + 32); i += 8)
        update8(regs, mEntries, vEntries, mScale, vScale, p + i, g + i,
                mc + i, vc + i, np + i, mValues + i, vValues + i, mMax, vMax);
      if (j < prevCount) {
        if (mCoding)
          codes32<Signs::Mirror>(mRegs, mInverse, mPrevValues, prevCount, j,
                                 nmc);
        // v = beta2 v + (1 - beta2) g^2 is at least +0.
        if (vCoding)
          codes32<Signs::None>(vRegs, vInverse, vPrevValues, prevCount, j,
                               nvc);
      }
    }
    if (coding) {
      // Blocks the vector quantizer does not take: the zero code, or the
      // scalar reference (which knows NaN and infinity).
      if (!mCoding)
        quantizeBlock<Signs::Mirror>(mQuantizer, mRegs, mPrev.values.data(),
                                     prevCount, mPrev.absmax, mPrev.hasNaN,
                                     w.nmc + prevBegin);
      if (!vCoding)
        quantizeBlock<Signs::None>(vQuantizer, vRegs, vPrev.values.data(),
                                   prevCount, vPrev.absmax, vPrev.hasNaN,
                                   w.nvc + prevBegin);
    }
    if (!updating)
      continue;
    if (whole < count) {
      // The last lanes through zero-padded copies: +0 in m and v past the
      // block counts in no maximum and quantizes harmlessly.
      int64_t rest = count - whole;
      alignas(32) float p[8] = {}, g[8] = {}, np[8], mLast[8], vLast[8];
      alignas(8) uint8_t mc[8] = {}, vc[8] = {};
      std::memcpy(p, w.p + begin + whole, 4 * rest);
      std::memcpy(g, w.g + begin + whole, 4 * rest);
      std::memcpy(mc, w.mc + begin + whole, rest);
      std::memcpy(vc, w.vc + begin + whole, rest);
      Maximum<false> unused[2];
      update8(regs, mEntries, vEntries, mScale, vScale, p, g, mc, vc, np,
              mLast, vLast, unused[0], unused[1]);
      std::memcpy(w.np + begin + whole, np, 4 * rest);
      for (int64_t l = 0; l < 8; ++l) {
        m.values[whole + l] = l < rest ? mLast[l] : 0.0f;
        v.values[whole + l] = l < rest ? vLast[l] : 0.0f;
      }
      mMax.add(_mm256_loadu_ps(m.values.data() + whole));
      vMax.add(_mm256_loadu_ps(v.values.data() + whole));
    }
    // Lanes from the last vector to the padded end: +0.
    for (int64_t i = (count + 7) / 8 * 8; i < padded; ++i)
      m.values[i] = v.values[i] = 0.0f;
    m.count = v.count = count;
    m.absmax = w.nma[b] = mMax.value();
    v.absmax = w.nva[b] = vMax.value();
    m.hasNaN = v.hasNaN = mayHoldNaN;
  }
}

TMRT_AVX2 void quantizeBlocksAvx2(const trainmem::DynamicMap &map,
                                  const float *x, int64_t n, int64_t block,
                                  uint8_t *codes, float *absmax, int64_t b0,
                                  int64_t b1) {
  const MapQuantizer &quantizer = *trainmem::quantizerFor(map);
  const QuantizerRegs regs(quantizer);
  std::vector<float> buffer((block + 31) / 32 * 32, 0.0f);
  for (int64_t b = b0; b < b1; ++b) {
    int64_t begin = b * block, count = std::min(block, n - begin);
    Maximum<true> largest;
    for (int64_t i = 0; i < count; i += 8) {
      __m256 value = count - i >= 8
                         ? _mm256_loadu_ps(x + begin + i)
                         : _mm256_maskload_ps(x + begin + i,
                                              laneMask(count - i));
      _mm256_storeu_ps(buffer.data() + i, value);
      largest.add(value);
    }
    for (int64_t i = (count + 7) / 8 * 8; i < (count + 31) / 32 * 32; ++i)
      buffer[i] = 0.0f;
    absmax[b] = largest.value();
    if (quantizer.hasNegatives())
      quantizeBlock<Signs::Mirror>(quantizer, regs, buffer.data(), count,
                                   absmax[b], largest.sawNaN(), codes + begin);
    else
      quantizeBlock<Signs::Zero>(quantizer, regs, buffer.data(), count,
                                 absmax[b], largest.sawNaN(), codes + begin);
  }
}

TMRT_AVX2 void dequantizeAvx2(const trainmem::DynamicMap &map,
                              const uint8_t *codes, const float *absmax,
                              int64_t block, float *out, int64_t i0,
                              int64_t i1) {
  const float *entries = map.data();
  for (int64_t i = i0; i < i1; i += 8) {
    int64_t count = std::min<int64_t>(8, i1 - i);
    __m256 entry = _mm256_i32gather_ps(entries, loadCodes(codes + i, count), 4);
    __m256 scale;
    if (i / block == (i + count - 1) / block) {
      scale = _mm256_set1_ps(absmax[i / block]);
    } else { // a block boundary within the 8 lanes
      alignas(32) float scales[8] = {};
      for (int64_t l = 0; l < count; ++l)
        scales[l] = absmax[(i + l) / block];
      scale = _mm256_load_ps(scales);
    }
    __m256 value = _mm256_mul_ps(entry, scale);
    if (count == 8)
      _mm256_storeu_ps(out + i, value);
    else
      _mm256_maskstore_ps(out + i, laneMask(count), value);
  }
}

} // namespace tmrt

#endif
