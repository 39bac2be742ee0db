//===- Quantized.cpp - the 8-bit state kernels, vectorized ----------------===//
//
// The block loops of tmrt_adamw_8bit, tmrt_quantize and tmrt_dequantize with
// AVX-512 (F, BW, DQ and VBMI), used when the CPU has them; else the AVX2
// loops of QuantizedAvx2.cpp or scalar ones (statePath). Per block of state, the fused update:
//  1. map entries for 64 codes at a time by byte permutes: each byte of the
//     256 f32 entries is a 256-byte table in four registers (two vpermt2b
//     and a blend), and four unpacks put the bytes together into 4 x 16
//     floats (lookup64);
//  2. the update in f32, the operations of AdamWStep::apply in the same
//     order (the build contracts no multiply-add), into one block of f32 m
//     and v in L1, with their maxima;
//  3. MapQuantizer::quantize in two halves: the guess on 16 lanes (binade
//     key and decade tables by in-register permutes), then T[guess] for 64
//     lanes by the byte permutes of step 1, one comparison, and the code in
//     bytes (mirrored for negative m).
// Step 2 of block b and the guesses of block b - 1 share one loop, so that
// the square root and division of the update overlap the guesses' work.
// No gathers: on this machine's cores (AMD Zen 4) a 16-lane gather takes
// about 28 cycles, as long as the rest of 16 elements' update.
//
// The results are the scalar kernels' and the reference's (AdamWStep,
// quantizeBlockwise, dequantizeValue) bit for bit: QuantizeTest, RuntimeTest
// and test/Runtime/scalar-kernels.test check that.
//
//===----------------------------------------------------------------------===//

#include "Quantized.h"

#include "CpuFeatures.h"

#include "trainmem/Support/DynamicMap.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#include <immintrin.h>
#define TMRT_HAVE_X86_VECTORS 1
#endif

namespace tmrt {

/// quantizeBlockwise of one block: with MapQuantizer (no search) for the
/// dynamic maps.
static void quantizeOneBlock(const trainmem::DynamicMap &map,
                             const float *values, int64_t count,
                             uint8_t *codes, float *absmax) {
  if (const trainmem::MapQuantizer *quantizer = trainmem::quantizerFor(map))
    *absmax = quantizer->quantizeBlock(values, count, codes);
  else
    trainmem::quantizeBlockwise(map, values, count, count, codes, absmax);
}

#ifdef TMRT_HAVE_X86_VECTORS

#define TMRT_AVX512                                                            \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vbmi")))

namespace {

/// A 256-entry table of 32-bit values as four byte planes.
struct BytePlanes {
  alignas(64) uint8_t plane[4][256];

  explicit BytePlanes(const float *values) {
    for (int i = 0; i < 256; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], 4);
      for (int k = 0; k < 4; ++k)
        plane[k][i] = static_cast<uint8_t>(bits >> (8 * k));
    }
  }
};

/// What the vector code needs of one map.
struct MapTables {
  const trainmem::MapQuantizer &quantizer;
  BytePlanes entries;
  /// T[zero + i]: guesses are never below the zero code, and on a signed
  /// map (zero 127) never above 254, so 128 entries do there.
  BytePlanes thresholds;

  explicit MapTables(const trainmem::MapQuantizer &q)
      : quantizer(q), entries(q.entries().data()),
        thresholds(fromZero(q).data()) {}

  static std::array<float, 256> fromZero(const trainmem::MapQuantizer &q) {
    std::array<float, 256> shifted;
    shifted.fill(std::numeric_limits<float>::infinity());
    std::copy(q.thresholds.begin() + q.zeroCodeOf(), q.thresholds.end(),
              shifted.begin());
    return shifted;
  }
};

const MapTables &tablesFor(const trainmem::DynamicMap &map) {
  static const MapTables signedTables(
      *trainmem::quantizerFor(trainmem::signedDynamicMap()));
  static const MapTables unsignedTables(
      *trainmem::quantizerFor(trainmem::unsignedDynamicMap()));
  return &map == &trainmem::signedDynamicMap() ? signedTables
                                               : unsignedTables;
}

/// The byte order that makes lookup64's unpacks come out in element order:
/// unpacking gives output r, position 4j + t, the byte at 16j + 4r + t; it
/// must hold element 16r + 4j + t.
TMRT_AVX512 __m512i unpackOrder() {
  alignas(64) uint8_t order[64];
  for (int j = 0; j < 4; ++j)
    for (int r = 0; r < 4; ++r)
      for (int t = 0; t < 4; ++t)
        order[16 * j + 4 * r + t] = static_cast<uint8_t>(16 * r + 4 * j + t);
  return _mm512_load_si512(order);
}

/// A BytePlanes table in 16 registers (loaded once per block and phase: as
/// memory operands, the table would cost more loads than the data).
struct TableRegs {
  __m512i part[4][4]; // plane k, entries 64q .. 64q + 63

  TMRT_AVX512 explicit TableRegs(const BytePlanes &table) {
    for (int k = 0; k < 4; ++k)
      for (int q = 0; q < 4; ++q)
        part[k][q] = _mm512_load_si512(table.plane[k] + 64 * q);
  }
};

/// Four byte planes of 64 lanes as 4 x 16 floats: out[r] lane l from byte
/// 16r + l of the planes, given indices in unpackOrder.
TMRT_AVX512 inline void joinPlanes(const __m512i bytes[4], __m512 out[4]) {
  __m512i w01lo = _mm512_unpacklo_epi8(bytes[0], bytes[1]);
  __m512i w01hi = _mm512_unpackhi_epi8(bytes[0], bytes[1]);
  __m512i w23lo = _mm512_unpacklo_epi8(bytes[2], bytes[3]);
  __m512i w23hi = _mm512_unpackhi_epi8(bytes[2], bytes[3]);
  out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(w01lo, w23lo));
  out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(w01lo, w23lo));
  out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(w01hi, w23hi));
  out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(w01hi, w23hi));
}

/// out[r] lane l = table[index byte 16r + l], for the 64 bytes of `index`.
TMRT_AVX512 inline void lookup64(const TableRegs &table, __m512i index,
                                 __m512i order, __m512 out[4]) {
  __m512i idx = _mm512_permutexvar_epi8(order, index);
  __mmask64 upper = _mm512_movepi8_mask(idx);
  __m512i bytes[4];
  for (int k = 0; k < 4; ++k) {
    __m512i lo = _mm512_permutex2var_epi8(table.part[k][0], idx,
                                          table.part[k][1]);
    __m512i hi = _mm512_permutex2var_epi8(table.part[k][2], idx,
                                          table.part[k][3]);
    bytes[k] = _mm512_mask_blend_epi8(upper, lo, hi);
  }
  joinPlanes(bytes, out);
}

/// lookup64 of a table of 128 entries (indices below 128).
TMRT_AVX512 inline void lookup64Of128(const TableRegs &table, __m512i index,
                                      __m512i order, __m512 out[4]) {
  __m512i idx = _mm512_permutexvar_epi8(order, index);
  __m512i bytes[4];
  for (int k = 0; k < 4; ++k)
    bytes[k] = _mm512_permutex2var_epi8(table.part[k][0], idx,
                                        table.part[k][1]);
  joinPlanes(bytes, out);
}

TMRT_AVX512 inline __mmask16 laneMask(int64_t lanes) {
  return lanes >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << lanes) - 1);
}

TMRT_AVX512 inline __mmask64 byteMask(int64_t lanes) {
  return lanes >= 64 ? ~static_cast<__mmask64>(0)
                     : (static_cast<__mmask64>(1) << lanes) - 1;
}

/// vrangeps: the larger magnitude, sign cleared.
constexpr int kMaxMagnitude = 0x0b;

/// Four 16-lane masks as one 64-lane mask, in mask registers (put together
/// in general registers, the compiler stores four halves and loads them as
/// one, which stalls).
TMRT_AVX512 inline __mmask64 joinMasks(const __mmask16 k[4]) {
  return _mm512_kunpackd(_mm512_kunpackw(k[3], k[2]),
                         _mm512_kunpackw(k[1], k[0]));
}

/// entries[i] = map[codes[i]] for i < count (entries padded to 64).
TMRT_AVX512 void mapEntries(const BytePlanes &map, __m512i order,
                            const uint8_t *codes, int64_t count,
                            float *entries) {
  const TableRegs table(map);
  for (int64_t j = 0; j < count; j += 64) {
    __m512 out[4];
    lookup64(table, _mm512_maskz_loadu_epi8(byteMask(count - j), codes + j),
             order, out);
    for (int r = 0; r < 4; ++r)
      _mm512_storeu_ps(entries + j + 16 * r, out[r]);
  }
}


/// The byte indices that take the low bytes of two vectors of 16 dwords
/// into bytes 0..31 (vpermt2b over their 128 bytes).
TMRT_AVX512 __m512i lowBytesOfPair() {
  alignas(64) uint8_t index[64] = {};
  for (int i = 0; i < 32; ++i)
    index[i] = static_cast<uint8_t>(i < 16 ? 4 * i : 64 + 4 * (i - 16));
  return _mm512_load_si512(index);
}

/// MapQuantizer's guess tables in registers.
struct GuessRegs {
  __m512 keyLo, keyHi;  // binadeKey
  __m512 scale, offset; // per decade (8 of 16 lanes)

  TMRT_AVX512 explicit GuessRegs(const trainmem::MapQuantizer &q) {
    keyLo = _mm512_loadu_ps(q.binadeKey.data());
    keyHi = _mm512_loadu_ps(q.binadeKey.data() + 16);
    alignas(64) float scales[16] = {}, offsets[16] = {};
    std::copy(q.scale.begin(), q.scale.end(), scales);
    std::copy(q.offset.begin(), q.offset.end(), offsets);
    scale = _mm512_load_ps(scales);
    offset = _mm512_load_ps(offsets);
  }
};

/// The first half of MapQuantizer::quantize for 64 values of a block with a
/// finite absmax: values[i] becomes y = |x| of x = values[i] * inverse,
/// guesses[i] the guess for y, *negative bit i the sign of x. With
/// |values[i]| <= absmax finite, x is neither NaN nor beyond [-1, 1] but
/// for rounding, so quantize()'s checks are not needed: y slightly above 1
/// guesses 254 as 1 does, x at or below map[0] mirrors to code 0.
template <Signs S>
TMRT_AVX512 inline void guessChunk(const GuessRegs &k, __m512 inverse,
                                   __m512i pairIndex, float *values,
                                   uint8_t *guesses, __mmask64 *negatives) {
  using trainmem::MapQuantizer;
  __m512i guess[4];
  __mmask16 negative[4];
  for (int r = 0; r < 4; ++r) {
    __m512 x = _mm512_mul_ps(_mm512_loadu_ps(values + 16 * r), inverse);
    __m512i bits = _mm512_castps_si512(x);
    if (S != Signs::None)
      negative[r] = _mm512_movepi32_mask(bits);
    __m512i magnitudeBits =
        S == Signs::None ? bits
                         : _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    __m512 y = _mm512_castsi512_ps(magnitudeBits);
    // max(exponent - bias, 0): the exponent fits the low 16 bits.
    __m512i binade = _mm512_subs_epu16(
        _mm512_srli_epi32(magnitudeBits, 23),
        _mm512_set1_epi32(127 + MapQuantizer::kMinExponent));
    __m512 key = _mm512_permutex2var_ps(k.keyLo, binade, k.keyHi);
    __m512i decade = _mm512_and_si512(
        _mm512_castps_si512(key),
        _mm512_set1_epi32(static_cast<int>(MapQuantizer::kDecadeBits)));
    decade = _mm512_mask_add_epi32(decade,
                                   _mm512_cmp_ps_mask(y, key, _CMP_GE_OQ),
                                   decade, _mm512_set1_epi32(1));
    __m512 position =
        _mm512_sub_ps(_mm512_mul_ps(y, _mm512_permutexvar_ps(decade, k.scale)),
                      _mm512_permutexvar_ps(decade, k.offset));
    guess[r] = _mm512_cvt_roundps_epi32(
        position, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    _mm512_storeu_ps(values + 16 * r, y);
  }
  __m512i low = _mm512_permutex2var_epi8(guess[0], pairIndex, guess[1]);
  __m512i high = _mm512_permutex2var_epi8(guess[2], pairIndex, guess[3]);
  _mm512_storeu_si512(guesses,
                      _mm512_inserti64x4(low, _mm512_castsi512_si256(high), 1));
  if (S != Signs::None)
    *negatives = joinMasks(negative);
}

/// The second half: code = guess + (y > T[guess]), mirrored for negative
/// values of a signed map.
template <Signs S>
TMRT_AVX512 void finishCodes(const MapTables &tables, __m512i order,
                             const float *ys, const uint8_t *guesses,
                             const __mmask64 *negatives, int64_t count,
                             uint8_t *codes) {
  const TableRegs thresholds(tables.thresholds);
  const __m512i zero =
      _mm512_set1_epi8(static_cast<char>(tables.quantizer.zeroCodeOf()));
  const __m512i mirror =
      _mm512_set1_epi8(static_cast<char>(2 * tables.quantizer.zeroCodeOf()));
  const __m512i oneByte = _mm512_set1_epi8(1);
  for (int64_t j = 0; j < count; j += 64) {
    __m512i guess = _mm512_loadu_si512(guesses + j);
    __m512 threshold[4];
    if (S == Signs::Mirror)
      lookup64Of128(thresholds, _mm512_sub_epi8(guess, zero), order,
                    threshold);
    else
      lookup64(thresholds, _mm512_sub_epi8(guess, zero), order, threshold);
    __mmask16 above[4];
    for (int r = 0; r < 4; ++r)
      above[r] = _mm512_cmp_ps_mask(_mm512_loadu_ps(ys + j + 16 * r),
                                    threshold[r], _CMP_GT_OQ);
    __m512i code =
        _mm512_mask_add_epi8(guess, joinMasks(above), guess, oneByte);
    if (S == Signs::Mirror)
      code = _mm512_mask_blend_epi8(negatives[j / 64], code,
                                    _mm512_subs_epu8(mirror, code));
    else if (S == Signs::Zero)
      code = _mm512_maskz_mov_epi8(~negatives[j / 64], code);
    _mm512_mask_storeu_epi8(codes + j, byteMask(count - j), code);
  }
}

/// One block of state in f32 and what quantizing it needs, padded to a
/// multiple of 64 lanes.
struct BlockBuffers {
  std::vector<float> values;
  std::vector<uint8_t> guesses;
  std::vector<__mmask64> negatives;
  float absmax = 0.0f;
  bool hasNaN = false; // (the maximum ignores NaN; the vector code does not)

  explicit BlockBuffers(int64_t padded)
      : values(padded, 0.0f), guesses(padded), negatives(padded / 64) {}
  bool vectorized() const {
    return absmax > 0.0f && !std::isinf(absmax) && !hasNaN;
  }
};

/// The block's maximum from the lanes of vrangeps: with a NaN among the
/// values, quantizeBlockwise's (which ignores NaN) and no vector code.
TMRT_AVX512 void setMaximum(BlockBuffers &block, __m512 largest,
                            int64_t count) {
  block.hasNaN = _mm512_cmp_ps_mask(largest, largest, _CMP_UNORD_Q) != 0;
  if (!block.hasNaN) {
    block.absmax = _mm512_reduce_max_ps(largest);
    return;
  }
  float scale = 0.0f;
  for (int64_t i = 0; i < count; ++i)
    scale = std::max(scale, std::abs(block.values[i]));
  block.absmax = scale;
}

/// The guesses of a whole block (of a finite, nonzero maximum).
template <Signs S>
TMRT_AVX512 void guessBlock(const GuessRegs &regs, __m512i pairIndex,
                            BlockBuffers &block, int64_t count) {
  __m512 inverse = _mm512_set1_ps(1.0f / block.absmax);
  for (int64_t j = 0; j < count; j += 64)
    guessChunk<S>(regs, inverse, pairIndex, block.values.data() + j,
                  block.guesses.data() + j, block.negatives.data() + j / 64);
}

/// The codes of a block whose guesses are done (or not needed).
template <Signs S>
TMRT_AVX512 void finishBlock(const MapTables &tables, __m512i order,
                             BlockBuffers &block, int64_t count,
                             uint8_t *codes) {
  if (block.vectorized()) {
    finishCodes<S>(tables, order, block.values.data(), block.guesses.data(),
                   block.negatives.data(), count, codes);
  } else if (!(block.absmax > 0.0f)) {
    std::memset(codes, tables.quantizer.zeroCodeOf(), count);
  } else {
    // A value overflowed (v from a huge gradient): the scalar reference,
    // which knows NaN.
    float absmax;
    trainmem::quantizeBlockwise(tables.quantizer.entries(),
                                block.values.data(), count, count, codes,
                                &absmax);
  }
}

} // namespace

/// Blocks [b0, b1) in a pipeline: block b's update (a square root and a
/// division per element, on the divider) shares a loop with the guesses of
/// block b - 1 (permutes and arithmetic on the other pipes), so that the
/// two overlap; block b's map entries come before, block b - 1's codes
/// after, each with its table in registers.
TMRT_AVX512 static void adamW8bitBlocksAvx512(const AdamW8bitBlock &w,
                                              int64_t b0, int64_t b1) {
  const trainmem::AdamWStep &u = *w.update;
  const __m512 beta1 = _mm512_set1_ps(u.beta1),
               oneMinusBeta1 = _mm512_set1_ps(u.oneMinusBeta1),
               beta2 = _mm512_set1_ps(u.beta2),
               oneMinusBeta2 = _mm512_set1_ps(u.oneMinusBeta2),
               stepSize = _mm512_set1_ps(u.stepSize),
               epsilonHat = _mm512_set1_ps(u.epsilonHat),
               decay = _mm512_set1_ps(u.decay);
  const MapTables &mTables = tablesFor(*w.mMap), &vTables = tablesFor(*w.vMap);
  const GuessRegs mGuess(mTables.quantizer), vGuess(vTables.quantizer);
  const __m512i order = unpackOrder(), pairIndex = lowBytesOfPair();
  int64_t padded = (w.block + 63) / 64 * 64;
  BlockBuffers m0(padded), m1(padded), v0(padded), v1(padded);
  BlockBuffers *mOf[2] = {&m0, &m1}, *vOf[2] = {&v0, &v1};
  auto countOf = [&](int64_t b) {
    return std::min(w.block, w.n - b * w.block);
  };
  for (int64_t b = b0; b <= b1; ++b) {
    bool updating = b < b1, guessing = b > b0;
    BlockBuffers &m = *mOf[b & 1], &v = *vOf[b & 1];
    BlockBuffers &mPrev = *mOf[(b + 1) & 1], &vPrev = *vOf[(b + 1) & 1];
    int64_t begin = b * w.block, count = updating ? countOf(b) : 0;
    int64_t prevCount = guessing ? countOf(b - 1) : 0;
    if (updating) {
      mapEntries(mTables.entries, order, w.mc + begin, count, m.values.data());
      mapEntries(vTables.entries, order, w.vc + begin, count, v.values.data());
    }
    const float *p = w.p + begin, *g = w.g + begin;
    float *np = w.np + begin, *mi = m.values.data(), *vi = v.values.data();
    __m512 mScale = _mm512_set1_ps(updating ? w.ma[b] : 0.0f),
           vScale = _mm512_set1_ps(updating ? w.va[b] : 0.0f);
    __m512 mLargest = _mm512_setzero_ps(), vLargest = _mm512_setzero_ps();
    bool mGuessing = guessing && mPrev.vectorized(),
         vGuessing = guessing && vPrev.vectorized();
    __m512 mInverse = _mm512_set1_ps(mGuessing ? 1.0f / mPrev.absmax : 0.0f),
           vInverse = _mm512_set1_ps(vGuessing ? 1.0f / vPrev.absmax : 0.0f);
    for (int64_t j = 0; j < std::max(count, prevCount); j += 64) {
      for (int64_t i = j; i < std::min(count, j + 64); i += 16) {
        __mmask16 live = laneMask(count - i);
        if (b + 1 < b1) {
          // The next block's lines, one of each stream per 16 elements
          // (the hardware prefetcher alone leaves 0.1-0.4 ns per element on
          // the table, the more the larger the block).
          const char *next = reinterpret_cast<const char *>(p + w.block + i);
          _mm_prefetch(next, _MM_HINT_T0);
          next = reinterpret_cast<const char *>(g + w.block + i);
          _mm_prefetch(next, _MM_HINT_T0);
          if ((i & 63) == 0) {
            next = reinterpret_cast<const char *>(w.mc + begin + w.block + i);
            _mm_prefetch(next, _MM_HINT_T0);
            next = reinterpret_cast<const char *>(w.vc + begin + w.block + i);
            _mm_prefetch(next, _MM_HINT_T0);
          }
        }
        __m512 pi = _mm512_maskz_loadu_ps(live, p + i);
        __m512 gi = _mm512_maskz_loadu_ps(live, g + i);
        __m512 mNew = _mm512_add_ps(
            _mm512_mul_ps(beta1,
                          _mm512_mul_ps(_mm512_loadu_ps(mi + i), mScale)),
            _mm512_mul_ps(oneMinusBeta1, gi));
        __m512 vNew = _mm512_add_ps(
            _mm512_mul_ps(beta2,
                          _mm512_mul_ps(_mm512_loadu_ps(vi + i), vScale)),
            _mm512_mul_ps(oneMinusBeta2, _mm512_mul_ps(gi, gi)));
        __m512 denominator = _mm512_add_ps(_mm512_sqrt_ps(vNew), epsilonHat);
        __m512 pNew = _mm512_sub_ps(
            _mm512_mul_ps(pi, decay),
            _mm512_mul_ps(stepSize, _mm512_div_ps(mNew, denominator)));
        _mm512_mask_storeu_ps(np + i, live, pNew);
        _mm512_storeu_ps(mi + i, mNew);
        _mm512_storeu_ps(vi + i, vNew);
        // max(|x|, largest) in one vrangeps, which keeps a NaN once seen
        // (v is NaN after a step whose v overflowed: infinite absmax, codes
        // 0, entries 0 * inf); such a block goes to the scalar reference.
        mLargest = _mm512_mask_range_ps(mLargest, live, mNew, mLargest,
                                        kMaxMagnitude);
        vLargest = _mm512_mask_range_ps(vLargest, live, vNew, vLargest,
                                        kMaxMagnitude);
      }
      if (j < prevCount) {
        if (mGuessing)
          guessChunk<Signs::Mirror>(mGuess, mInverse, pairIndex,
                           mPrev.values.data() + j, mPrev.guesses.data() + j,
                           mPrev.negatives.data() + j / 64);
        if (vGuessing)
          guessChunk<Signs::None>(vGuess, vInverse, pairIndex,
                            vPrev.values.data() + j, vPrev.guesses.data() + j,
                            vPrev.negatives.data() + j / 64);
      }
    }
    if (guessing) {
      int64_t prevBegin = (b - 1) * w.block;
      finishBlock<Signs::Mirror>(mTables, order, mPrev, prevCount,
                                 w.nmc + prevBegin);
      // v = beta2 v + (1 - beta2) g^2 is at least +0.
      finishBlock<Signs::None>(vTables, order, vPrev, prevCount,
                               w.nvc + prevBegin);
    }
    if (updating) {
      setMaximum(m, mLargest, count);
      setMaximum(v, vLargest, count);
      w.nma[b] = m.absmax;
      w.nva[b] = v.absmax;
    }
  }
}

/// quantizeBlockwise over blocks [b0, b1) with the vector quantizer.
TMRT_AVX512 static void quantizeBlocksAvx512(const trainmem::DynamicMap &map,
                                             const float *x, int64_t n,
                                             int64_t block, uint8_t *codes,
                                             float *absmax, int64_t b0,
                                             int64_t b1) {
  const MapTables &tables = tablesFor(map);
  const GuessRegs regs(tables.quantizer);
  const __m512i order = unpackOrder(), pairIndex = lowBytesOfPair();
  const __m512 magnitude = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  BlockBuffers buffer((block + 63) / 64 * 64);
  for (int64_t b = b0; b < b1; ++b) {
    int64_t begin = b * block, count = std::min(block, n - begin);
    __m512 largest = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (int64_t i = 0; i < count; i += 16) {
      __mmask16 live = laneMask(count - i);
      __m512 value = _mm512_maskz_loadu_ps(live, x + begin + i);
      _mm512_storeu_ps(buffer.values.data() + i, value);
      // max(x, largest) keeps `largest` in NaN lanes, as std::max does.
      largest = _mm512_mask_max_ps(largest, live,
                                   _mm512_and_ps(value, magnitude), largest);
      nan |= _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q);
    }
    buffer.absmax = absmax[b] = _mm512_reduce_max_ps(largest);
    buffer.hasNaN = nan != 0;
    if (tables.quantizer.hasNegatives()) {
      if (buffer.vectorized())
        guessBlock<Signs::Mirror>(regs, pairIndex, buffer, count);
      finishBlock<Signs::Mirror>(tables, order, buffer, count, codes + begin);
    } else {
      if (buffer.vectorized())
        guessBlock<Signs::Zero>(regs, pairIndex, buffer, count);
      finishBlock<Signs::Zero>(tables, order, buffer, count, codes + begin);
    }
  }
}

/// dequantizeValue over elements [i0, i1) with byte-plane lookups; the
/// block size is a power of two, 2^shift.
TMRT_AVX512 static void dequantizeAvx512(const trainmem::DynamicMap &map,
                                         const uint8_t *codes,
                                         const float *absmax, int shift,
                                         float *out, int64_t i0, int64_t i1) {
  const TableRegs table(tablesFor(map).entries);
  const __m512i order = unpackOrder();
  for (int64_t j = i0; j < i1; j += 64) {
    int64_t lanes = std::min<int64_t>(64, i1 - j);
    __m512 entry[4];
    lookup64(table, _mm512_maskz_loadu_epi8(byteMask(lanes), codes + j),
             order, entry);
    for (int r = 0; r < 4 && 16 * r < lanes; ++r) {
      int64_t i = j + 16 * r, count = std::min<int64_t>(16, i1 - i);
      __m512 scale;
      if (i >> shift == (i + count - 1) >> shift) {
        scale = _mm512_set1_ps(absmax[i >> shift]);
      } else { // blocks smaller than 16 lanes
        alignas(64) float scales[16] = {};
        for (int64_t l = 0; l < count; ++l)
          scales[l] = absmax[(i + l) >> shift];
        scale = _mm512_load_ps(scales);
      }
      _mm512_mask_storeu_ps(out + i, laneMask(count),
                            _mm512_mul_ps(entry[r], scale));
    }
  }
}

#endif // TMRT_HAVE_X86_VECTORS

StatePath statePath() {
  return avx512VbmiEnabled() ? StatePath::Avx512
         : avx2Enabled()     ? StatePath::Avx2
                             : StatePath::Scalar;
}

const char *statePathName(StatePath path) {
  switch (path) {
  case StatePath::Avx512:
    return "avx512-vbmi";
  case StatePath::Avx2:
    return "avx2";
  case StatePath::Scalar:
    break;
  }
  return "scalar";
}

void quantizeBlocks(const trainmem::DynamicMap &map, const float *x,
                    int64_t n, int64_t block, uint8_t *codes, float *absmax,
                    int64_t b0, int64_t b1) {
  if (trainmem::quantizerFor(map)) {
    switch (statePath()) {
#ifdef TMRT_HAVE_X86_VECTORS
    case StatePath::Avx512:
      return quantizeBlocksAvx512(map, x, n, block, codes, absmax, b0, b1);
    case StatePath::Avx2:
      return quantizeBlocksAvx2(map, x, n, block, codes, absmax, b0, b1);
#endif
    default:
      break;
    }
  }
  for (int64_t b = b0; b < b1; ++b) {
    int64_t begin = b * block;
    quantizeOneBlock(map, x + begin, std::min(block, n - begin),
                     codes + begin, absmax + b);
  }
}

void dequantizeRange(const trainmem::DynamicMap &map, const uint8_t *codes,
                     const float *absmax, int64_t block, float *out,
                     int64_t i0, int64_t i1) {
  if (trainmem::quantizerFor(map)) {
    switch (statePath()) {
#ifdef TMRT_HAVE_X86_VECTORS
    case StatePath::Avx512:
      if ((block & (block - 1)) == 0) {
        int shift = 0;
        while ((int64_t(1) << shift) < block)
          ++shift;
        return dequantizeAvx512(map, codes, absmax, shift, out, i0, i1);
      }
      [[fallthrough]];
    case StatePath::Avx2:
      return dequantizeAvx2(map, codes, absmax, block, out, i0, i1);
#endif
    default:
      break;
    }
  }
  for (int64_t i = i0; i < i1; ++i)
    out[i] = trainmem::dequantizeValue(map, codes[i], absmax[i / block]);
}

bool hasVectorAdamW8bit() {
#ifdef TMRT_HAVE_X86_VECTORS
  return statePath() != StatePath::Scalar &&
         trainmem::quantizerFor(trainmem::signedDynamicMap()) &&
         trainmem::quantizerFor(trainmem::unsignedDynamicMap());
#else
  return false;
#endif
}

void adamW8bitBlocks(const AdamW8bitBlock &w, int64_t b0, int64_t b1) {
#ifdef TMRT_HAVE_X86_VECTORS
  if (statePath() == StatePath::Avx512)
    return adamW8bitBlocksAvx512(w, b0, b1);
  adamW8bitBlocksAvx2(w, b0, b1);
#else
  (void)w, (void)b0, (void)b1;
#endif
}

} // namespace tmrt
