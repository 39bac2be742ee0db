//===- Quantized.cpp - the fused 8-bit AdamW, vectorized ------------------===//
//
// The block loop of tmrt_adamw_8bit with AVX-512F intrinsics, used when the
// CPU has them. It performs the scalar code's operations one for one, in
// the same order and precision (the element update in double, the map
// lookups as gathers, DynamicCodebook::quantize step by step), so its
// results are the scalar kernel's and the reference evaluator's, bit for
// bit; QuantizeTest and RuntimeTest check that.
//
//===----------------------------------------------------------------------===//

#include "Quantized.h"

#include "trainmem/Support/DynamicMap.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#include <immintrin.h>
#define TMRT_HAVE_AVX512 1
#endif

namespace tmrt {

/// One block [begin, end) in scalar code: the reference the vector code
/// follows (and the tail it leaves).
static void adamW8bitScalar(const AdamW8bitBlock &w, int64_t i0, int64_t i1,
                            float mScale, float vScale, float *m, float *v,
                            int64_t begin) {
  for (int64_t i = i0; i < i1; ++i)
    w.update->apply(w.p[i], w.g[i],
                    trainmem::dequantizeValue(*w.mMap, w.mc[i], mScale),
                    trainmem::dequantizeValue(*w.vMap, w.vc[i], vScale),
                    w.np[i], m[i - begin], v[i - begin]);
}

void adamW8bitBlocksGeneric(const AdamW8bitBlock &w, int64_t b0, int64_t b1) {
  std::vector<float> m(w.block), v(w.block);
  for (int64_t b = b0; b < b1; ++b) {
    int64_t begin = b * w.block, end = std::min(w.n, begin + w.block);
    adamW8bitScalar(w, begin, end, w.ma[b], w.va[b], m.data(), v.data(),
                    begin);
    trainmem::quantizeBlockwise(*w.mMap, m.data(), end - begin, w.block,
                                w.nmc + begin, w.nma + b);
    trainmem::quantizeBlockwise(*w.vMap, v.data(), end - begin, w.block,
                                w.nvc + begin, w.nva + b);
  }
}

#ifdef TMRT_HAVE_AVX512

#define TMRT_AVX512 __attribute__((target("avx512f")))

namespace {

TMRT_AVX512 inline __m512d lowHalf(__m512 x) {
  return _mm512_cvtps_pd(_mm512_castps512_ps256(x));
}
TMRT_AVX512 inline __m512d highHalf(__m512 x) {
  return _mm512_cvtps_pd(
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}
TMRT_AVX512 inline __m512 join(__m512d lo, __m512d hi) {
  __m256 l = _mm512_cvtpd_ps(lo), h = _mm512_cvtpd_ps(hi);
  return _mm512_castpd_ps(_mm512_insertf64x4(
      _mm512_castpd256_pd512(_mm256_castps_pd(l)), _mm256_castps_pd(h), 1));
}

/// AdamWStep::apply on 8 lanes, operation for operation.
struct UpdateConstants {
  __m512d beta1, oneMinusBeta1, beta2, oneMinusBeta2, c1, c2, eps, wd, lr;
};

TMRT_AVX512 inline void applyHalf(const UpdateConstants &k, __m512d p,
                                  __m512d g, __m512d m, __m512d v,
                                  __m512d &np, __m512d &nm, __m512d &nv) {
  __m512d mi = _mm512_add_pd(_mm512_mul_pd(k.beta1, m),
                             _mm512_mul_pd(k.oneMinusBeta1, g));
  __m512d vi = _mm512_add_pd(
      _mm512_mul_pd(k.beta2, v),
      _mm512_mul_pd(_mm512_mul_pd(k.oneMinusBeta2, g), g));
  __m512d update = _mm512_add_pd(
      _mm512_div_pd(_mm512_div_pd(mi, k.c1),
                    _mm512_add_pd(_mm512_sqrt_pd(_mm512_div_pd(vi, k.c2)),
                                  k.eps)),
      _mm512_mul_pd(k.wd, p));
  nm = mi;
  nv = vi;
  np = _mm512_sub_pd(p, _mm512_mul_pd(k.lr, update));
}

/// DynamicCodebook::quantize on 16 lanes.
TMRT_AVX512 inline __m512i quantize16(const trainmem::DynamicCodebook &book,
                                      __m512 x) {
  using Book = trainmem::DynamicCodebook;
  const float *padded = book.paddedEntries();
  const int32_t *lower = book.lowerTable();
  __m512i bits = _mm512_and_si512(_mm512_castps_si512(x),
                                  _mm512_set1_epi32(0x7fffffff));
  __m512i key = _mm512_add_epi32(
      _mm512_sub_epi32(_mm512_srli_epi32(bits, 23 - Book::kMantissaBits),
                       _mm512_set1_epi32(Book::kKeyBase)),
      _mm512_set1_epi32(1));
  key = _mm512_min_epi32(_mm512_max_epi32(key, _mm512_setzero_si512()),
                         _mm512_set1_epi32(Book::kBuckets - 1));
  __m512i lo = _mm512_i32gather_epi32(key, lower, 4);
  if (book.hasNegatives()) {
    __mmask16 negative =
        _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    __m512i next = _mm512_i32gather_epi32(
        _mm512_add_epi32(key, _mm512_set1_epi32(1)), lower, 4);
    lo = _mm512_mask_blend_epi32(
        negative, lo, _mm512_sub_epi32(_mm512_set1_epi32(253), next));
  }
  lo = _mm512_max_epi32(lo, _mm512_setzero_si512());
  __m512i one = _mm512_set1_epi32(1);
  for (int s = 0; s < book.refinementSteps(); ++s) {
    __m512 above = _mm512_i32gather_ps(_mm512_add_epi32(lo, one), padded, 4);
    __mmask16 below = _mm512_cmp_ps_mask(above, x, _CMP_LT_OQ);
    lo = _mm512_mask_add_epi32(lo, below, lo, one);
  }
  __m512i top = _mm512_set1_epi32(255);
  __m512i hi = _mm512_min_epi32(_mm512_add_epi32(lo, one), top);
  __m512 atLo = _mm512_i32gather_ps(lo, padded, 4);
  __m512 atHi = _mm512_i32gather_ps(hi, padded, 4);
  __mmask16 takeLo = _mm512_cmp_ps_mask(
      _mm512_sub_ps(x, atLo), _mm512_sub_ps(atHi, x), _CMP_LE_OQ);
  // (lo = 255 gives hi = 255: code 255 either way.)
  __m512i code = _mm512_mask_blend_epi32(takeLo, hi, lo);
  __mmask16 valid =
      _mm512_cmp_ps_mask(x, _mm512_set1_ps(padded[0]), _CMP_GT_OQ);
  return _mm512_maskz_mov_epi32(valid, code);
}

/// quantizeBlockwise of one block on 16 lanes, the tail in scalar code.
TMRT_AVX512 void quantizeBlock(const trainmem::DynamicMap &map,
                               const float *values, int64_t count,
                               uint8_t *codes, float *absmax) {
  const trainmem::DynamicCodebook *book = trainmem::codebookFor(map);
  __m512 largest = _mm512_setzero_ps();
  __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512 x = _mm512_castsi512_ps(_mm512_and_si512(
        _mm512_castps_si512(_mm512_loadu_ps(values + i)), magnitude));
    largest = _mm512_max_ps(x, largest); // NaN lanes keep `largest`
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, largest);
  float scale = 0.0f;
  for (float lane : lanes)
    scale = std::max(scale, lane);
  for (int64_t j = i; j < count; ++j)
    scale = std::max(scale, std::abs(values[j]));
  *absmax = scale;
  if (!(scale > 0.0f)) {
    std::fill(codes, codes + count, trainmem::zeroCode(map));
    return;
  }
  __m512 divisor = _mm512_set1_ps(scale);
  for (i = 0; i + 16 <= count; i += 16) {
    __m512 x = _mm512_div_ps(_mm512_loadu_ps(values + i), divisor);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(codes + i),
                     _mm512_cvtepi32_epi8(quantize16(*book, x)));
  }
  for (; i < count; ++i)
    codes[i] = book->quantize(values[i] / scale);
}

} // namespace

TMRT_AVX512 static void adamW8bitBlocksAvx512(const AdamW8bitBlock &w,
                                              int64_t b0, int64_t b1) {
  const trainmem::AdamWStep &u = *w.update;
  UpdateConstants k{_mm512_set1_pd(u.beta1),
                    _mm512_set1_pd(1.0 - u.beta1),
                    _mm512_set1_pd(u.beta2),
                    _mm512_set1_pd(1.0 - u.beta2),
                    _mm512_set1_pd(u.correction1),
                    _mm512_set1_pd(u.correction2),
                    _mm512_set1_pd(u.epsilon),
                    _mm512_set1_pd(u.weightDecay),
                    _mm512_set1_pd(u.lr)};
  const float *mMap = w.mMap->data(), *vMap = w.vMap->data();
  std::vector<float> m(w.block), v(w.block);
  for (int64_t b = b0; b < b1; ++b) {
    int64_t begin = b * w.block, end = std::min(w.n, begin + w.block);
    __m512 mScale = _mm512_set1_ps(w.ma[b]), vScale = _mm512_set1_ps(w.va[b]);
    int64_t i = begin;
    for (; i + 16 <= end; i += 16) {
      __m512 p = _mm512_loadu_ps(w.p + i), g = _mm512_loadu_ps(w.g + i);
      __m512i mc = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i *>(w.mc + i)));
      __m512i vc = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i *>(w.vc + i)));
      __m512 mOld = _mm512_mul_ps(_mm512_i32gather_ps(mc, mMap, 4), mScale);
      __m512 vOld = _mm512_mul_ps(_mm512_i32gather_ps(vc, vMap, 4), vScale);
      __m512d npLo, nmLo, nvLo, npHi, nmHi, nvHi;
      applyHalf(k, lowHalf(p), lowHalf(g), lowHalf(mOld), lowHalf(vOld), npLo,
                nmLo, nvLo);
      applyHalf(k, highHalf(p), highHalf(g), highHalf(mOld), highHalf(vOld),
                npHi, nmHi, nvHi);
      _mm512_storeu_ps(w.np + i, join(npLo, npHi));
      _mm512_storeu_ps(m.data() + (i - begin), join(nmLo, nmHi));
      _mm512_storeu_ps(v.data() + (i - begin), join(nvLo, nvHi));
    }
    adamW8bitScalar(w, i, end, w.ma[b], w.va[b], m.data(), v.data(), begin);
    quantizeBlock(*w.mMap, m.data(), end - begin, w.nmc + begin, w.nma + b);
    quantizeBlock(*w.vMap, v.data(), end - begin, w.nvc + begin, w.nva + b);
  }
}

#endif // TMRT_HAVE_AVX512

void adamW8bitBlocks(const AdamW8bitBlock &w, int64_t b0, int64_t b1) {
#ifdef TMRT_HAVE_AVX512
  static const bool avx512 = __builtin_cpu_supports("avx512f") &&
                             std::getenv("TMRT_NO_AVX512") == nullptr;
  if (avx512)
    return adamW8bitBlocksAvx512(w, b0, b1);
#endif
  adamW8bitBlocksGeneric(w, b0, b1);
}

} // namespace tmrt
