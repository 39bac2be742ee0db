//===- QuantizeTest.cpp - 8-bit dynamic maps and the fused 8-bit AdamW ----===//
//
// The maps follow Dettmers et al., "8-bit Optimizers via Block-wise
// Quantization" (2022), and bitsandbytes' create_dynamic_map(signed,
// max_exponent_bits=7, total_bits=8):
//   for e in 0..6:
//     items = 2^e + 1 (signed) or 2^(e+1) + 1 (unsigned)
//     boundaries = linspace(0.1, 1, items)
//     means = midpoints of neighbouring boundaries
//     entries += 10^(e-6) * means   (and their negatives, signed)
//   entries += [0, 1]; pad with 0 to 256; sort.
// So the signed map holds 127 negative values, 0, 126 positive values below
// 1, and 1; the unsigned map 0, 254 values in (0, 1), and 1. The values
// below are worked out by hand from those lines.
//
//===----------------------------------------------------------------------===//

#include "trainmem/Support/AdamW.h"
#include "trainmem/Support/DynamicMap.h"
#include "trainmem-runtime/Runtime.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>

using trainmem::DynamicMap;

namespace {

const DynamicMap &signedMap() { return trainmem::signedDynamicMap(); }
const DynamicMap &unsignedMap() { return trainmem::unsignedDynamicMap(); }

TEST(DynamicMapTest, MonotoneAndInRange) {
  for (const DynamicMap *map : {&signedMap(), &unsignedMap()})
    for (int i = 1; i < 256; ++i)
      EXPECT_LT((*map)[i - 1], (*map)[i]) << "entry " << i;
  EXPECT_GE(signedMap().front(), -1.0f);
  EXPECT_EQ(signedMap().back(), 1.0f);
  EXPECT_EQ(unsignedMap().front(), 0.0f);
  EXPECT_EQ(unsignedMap().back(), 1.0f);
}

TEST(DynamicMapTest, HoldsZeroAndOneExactly) {
  EXPECT_EQ(signedMap()[127], 0.0f);
  EXPECT_EQ(trainmem::zeroCode(signedMap()), 127);
  EXPECT_EQ(unsignedMap()[0], 0.0f);
  EXPECT_EQ(trainmem::zeroCode(unsignedMap()), 0);
  EXPECT_EQ(signedMap()[255], 1.0f);
  EXPECT_EQ(unsignedMap()[255], 1.0f);
}

TEST(DynamicMapTest, FollowsTheConstruction) {
  // Signed: negatives mirror the positives below 1 (code 126-k vs 128+k).
  for (int k = 0; k < 127; ++k)
    EXPECT_EQ(signedMap()[126 - k], -signedMap()[128 + k]) << k;
  // Smallest magnitudes: e = 0, 10^-6 times the midpoint of linspace(0.1, 1,
  // 2) (signed: 0.55) or the first of linspace(0.1, 1, 3) (unsigned: 0.325).
  EXPECT_FLOAT_EQ(signedMap()[128], 5.5e-7f);
  EXPECT_FLOAT_EQ(unsignedMap()[1], 3.25e-7f);
  // Largest below 1: e = 6, the last midpoint of linspace(0.1, 1, 65)
  // (signed: 1 - 0.9/128) or of linspace(0.1, 1, 129) (unsigned: 1 - 0.9/256).
  EXPECT_FLOAT_EQ(signedMap()[254], 1.0f - 0.9f / 128);
  EXPECT_FLOAT_EQ(signedMap()[0], -(1.0f - 0.9f / 128));
  EXPECT_FLOAT_EQ(unsignedMap()[254], 1.0f - 0.9f / 256);
  // Decade e holds 2^e (signed) or 2^(e+1) (unsigned) positive entries.
  for (int e = 0; e < 7; ++e) {
    float lo = std::pow(10.0f, e - 6) * 0.1f, hi = std::pow(10.0f, e - 6);
    int inSigned = 0, inUnsigned = 0;
    for (int i = 0; i < 256; ++i) {
      inSigned += signedMap()[i] > lo && signedMap()[i] < hi;
      inUnsigned += unsignedMap()[i] > lo && unsignedMap()[i] < hi;
    }
    EXPECT_EQ(inSigned, 1 << e) << "decade " << e;
    EXPECT_EQ(inUnsigned, 1 << (e + 1)) << "decade " << e;
  }
}

TEST(DynamicMapTest, TiesGoTowardZero) {
  // A value exactly halfway between two entries (where the float arithmetic
  // agrees it is) takes the entry nearer zero, on either side of zero.
  for (const DynamicMap *map : {&signedMap(), &unsignedMap()}) {
    int ties = 0;
    for (int c = 0; c < 255; ++c) {
      float lo = (*map)[c], hi = (*map)[c + 1];
      float mid = lo + (hi - lo) / 2;
      if (mid - lo != hi - mid)
        continue;
      ++ties;
      int nearer = std::abs(lo) <= std::abs(hi) ? c : c + 1;
      EXPECT_EQ(trainmem::quantizeToMap(*map, mid), nearer) << "code " << c;
    }
    EXPECT_GT(ties, 100);
  }
  // So a signed map's codes mirror around the zero code.
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int i = 0; i < 100000; ++i) {
    float x = unit(rng) * std::pow(10.0f, -7.0f * unit(rng));
    int code = trainmem::quantizeToMap(signedMap(), x);
    EXPECT_EQ(trainmem::quantizeToMap(signedMap(), -x),
              std::max(0, 254 - code)) << x;
  }
}

TEST(DynamicMapTest, QuantizerEqualsBinarySearch) {
  for (const DynamicMap *map : {&signedMap(), &unsignedMap()}) {
    const trainmem::MapQuantizer *quantizer = trainmem::quantizerFor(*map);
    ASSERT_NE(quantizer, nullptr);
    int zero = trainmem::zeroCode(*map);
    // T[c] is the last float of code c: it has code c, the next float c + 1.
    for (int c = zero; c < 255; ++c) {
      float t = quantizer->thresholds[c];
      ASSERT_EQ(trainmem::quantizeToMap(*map, t), c);
      ASSERT_EQ(trainmem::quantizeToMap(*map, std::nextafter(t, 2.0f)), c + 1);
    }
    // Every float in [0, 1] in order: its code q is the number of
    // thresholds below it (from the zero code on), and the guess must be q
    // or q - 1.
    int q = zero;
    int64_t wrong = 0;
    uint32_t firstWrong = 0;
    for (uint32_t bits = 0; bits <= 0x3f800000u; ++bits) {
      float y;
      std::memcpy(&y, &bits, 4);
      while (y > quantizer->thresholds[q])
        ++q;
      int guess = quantizer->guess(y);
      if (guess != q && guess != q - 1) {
        if (wrong++ == 0)
          firstWrong = bits;
      }
    }
    EXPECT_EQ(wrong, 0) << "first at bits " << std::hex << firstWrong;
    EXPECT_EQ(q, 255);
    // And quantize() equals the search, negative values, NaN and values
    // beyond [-1, 1] included.
    std::vector<float> probes = {0.0f, -0.0f, 1.0f, -1.0f, 1.5f, -1.5f,
                                 1e-30f, -1e-30f,
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN()};
    for (int c = 0; c < 256; ++c)
      for (float x : {(*map)[c], quantizer->thresholds[c]})
        for (float sign : {1.0f, -1.0f}) {
          probes.push_back(sign * x);
          probes.push_back(std::nextafter(sign * x, 2.0f));
          probes.push_back(std::nextafter(sign * x, -2.0f));
        }
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::uniform_real_distribution<float> exponent(-9.0f, 0.0f);
    for (int i = 0; i < 200000; ++i) {
      probes.push_back(unit(rng));
      probes.push_back(unit(rng) * std::pow(10.0f, exponent(rng)));
    }
    for (float x : probes)
      ASSERT_EQ(quantizer->quantize(x), trainmem::quantizeToMap(*map, x))
          << "x = " << x;
  }
}

/// Quantizes, dequantizes and checks each element against the block's
/// bound: the nearest entry is at most half the widest gap of the map
/// (times absmax) away.
void checkRoundTrip(const DynamicMap &map, const std::vector<float> &x,
                    int64_t block, double bound) {
  int64_t n = static_cast<int64_t>(x.size()), blocks = (n + block - 1) / block;
  std::vector<uint8_t> codes(n);
  std::vector<float> absmax(blocks);
  trainmem::quantizeBlockwise(map, x.data(), n, block, codes.data(),
                              absmax.data());
  for (int64_t b = 0; b < blocks; ++b) {
    float expectedMax = 0.0f;
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
      expectedMax = std::max(expectedMax, std::abs(x[i]));
    EXPECT_EQ(absmax[b], expectedMax) << "block " << b;
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
      float y = trainmem::dequantizeValue(map, codes[i], absmax[b]);
      ASSERT_LE(std::abs(y - x[i]), bound * absmax[b] * (1 + 1e-5))
          << "element " << i;
      // And no other entry is nearer.
      for (int c = 0; c < 256; ++c)
        ASSERT_LE(std::abs(x[i] / absmax[b] - map[codes[i]]),
                  std::abs(x[i] / absmax[b] - map[c]) + 1e-7f);
    }
  }
}

TEST(DynamicMapTest, RoundTripErrorPerBlock) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> signedValues(5000), positive(5000);
  for (size_t i = 0; i < signedValues.size(); ++i) {
    signedValues[i] = normal(rng) * std::pow(10.0f, (i / 256) % 5 - 3.0f);
    positive[i] = signedValues[i] * signedValues[i];
  }
  // Widest gaps: the top decade, 0.9/64 (signed) and 0.9/128 (unsigned),
  // and from the largest negative entry to -1, 0.9/128.
  checkRoundTrip(signedMap(), signedValues, 256, 0.9 / 64 / 2);
  checkRoundTrip(unsignedMap(), positive, 256, 0.9 / 128 / 2);
  checkRoundTrip(signedMap(), signedValues, 2048, 0.9 / 64 / 2);
  // Each block's largest positive value comes back exactly (code of 1).
  std::vector<uint8_t> codes(positive.size());
  std::vector<float> absmax((positive.size() + 255) / 256);
  trainmem::quantizeBlockwise(unsignedMap(), positive.data(),
                              positive.size(), 256, codes.data(),
                              absmax.data());
  for (size_t i = 0; i < positive.size(); ++i)
    if (positive[i] == absmax[i / 256])
      EXPECT_EQ(codes[i], 255);
  // An all-zero block: absmax 0 and the zero code.
  std::vector<float> zeros(300, 0.0f);
  trainmem::quantizeBlockwise(signedMap(), zeros.data(), 300, 256,
                              codes.data(), absmax.data());
  EXPECT_EQ(absmax[0], 0.0f);
  EXPECT_EQ(codes[0], 127);
  EXPECT_EQ(codes[299], 127);
}

//===----------------------------------------------------------------------===//
// The runtime's quantize and dequantize kernels against the reference
//===----------------------------------------------------------------------===//

/// Values around everything the vector quantizer decides on: each entry,
/// each threshold, each power of ten and each binade boundary, 8 floats
/// either side, both signs; then random values of every magnitude.
std::vector<float> hardValues(const trainmem::MapQuantizer &quantizer) {
  std::vector<float> centers = {0.0f, 1e-30f, 1e-9f};
  for (int c = 0; c < 256; ++c) {
    centers.push_back(quantizer.entries()[c]);
    if (std::isfinite(quantizer.thresholds[c]))
      centers.push_back(quantizer.thresholds[c]);
  }
  for (int e = -8; e <= 0; ++e)
    centers.push_back(std::pow(10.0f, static_cast<float>(e)));
  for (int e = -30; e <= 0; ++e)
    centers.push_back(std::ldexp(1.0f, e));
  std::vector<float> values;
  for (float center : centers)
    for (float sign : {1.0f, -1.0f}) {
      float x = sign * center;
      for (int k = 0; k < 8; ++k)
        x = std::nextafter(x, -2.0f);
      for (int k = 0; k <= 16; ++k, x = std::nextafter(x, 2.0f))
        if (std::abs(x) <= 1.0f)
          values.push_back(x);
    }
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-9.0f, 0.0f);
  for (int i = 0; i < 100000; ++i)
    values.push_back(unit(rng) * std::pow(10.0f, exponent(rng)));
  // NaN (ignored by the maximum, code 0) and an infinite maximum.
  values.push_back(std::numeric_limits<float>::quiet_NaN());
  values.push_back(-std::numeric_limits<float>::quiet_NaN());
  for (int i = 0; i < 3000; ++i)
    values.push_back(unit(rng));
  values.push_back(std::numeric_limits<float>::infinity());
  return values;
}

TEST(QuantizeKernelTest, EqualsReference) {
  const char *error = nullptr;
  tmrt_context *ctx = tmrt_context_create("cpu", 2, &error);
  ASSERT_TRUE(ctx) << error;
  ASSERT_EQ(tmrt_arena_alloc(ctx, 32 << 20), 0);
  uint8_t *arena = tmrt_arena_base(ctx);
  for (bool isSigned : {true, false}) {
    const DynamicMap &map = isSigned ? signedMap() : unsignedMap();
    std::vector<float> hard = hardValues(*trainmem::quantizerFor(map));
    for (int64_t block : {8, 64, 256, 2048}) {
      SCOPED_TRACE("signed " + std::to_string(isSigned) + ", block " +
                   std::to_string(block));
      // Blocks led by 1 (the inverse is then exactly 1 and the values are
      // quantized as they are), and the same values scaled by 3e-3 (an
      // inverse that rounds); a tail block shorter than the rest.
      std::vector<float> x;
      for (float scale : {1.0f, 3e-3f})
        for (size_t i = 0; i < hard.size(); ++i) {
          if (x.size() % block == 0)
            x.push_back(scale);
          x.push_back(hard[i] * scale);
        }
      x.resize(x.size() - 5);
      int64_t n = static_cast<int64_t>(x.size()),
              blocks = (n + block - 1) / block;
      const int64_t in = 0, codes = 4 * n, absmax = codes + n,
                    out = absmax + 4 * blocks;
      ASSERT_LE(out + 4 * n, 32 << 20);
      std::memcpy(arena + in, x.data(), 4 * n);
      tmrt_quantize(ctx, in, codes, absmax, n, block, isSigned);
      std::vector<uint8_t> expectedCodes(n);
      std::vector<float> expectedMax(blocks);
      trainmem::quantizeBlockwise(map, x.data(), n, block,
                                  expectedCodes.data(), expectedMax.data());
      ASSERT_EQ(std::memcmp(arena + absmax, expectedMax.data(), 4 * blocks), 0);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(arena[codes + i], expectedCodes[i])
            << "signed " << isSigned << ", block " << block << ", x = "
            << x[i] << " of block maximum " << expectedMax[i / block];
      tmrt_dequantize(ctx, codes, absmax, out, n, block, isSigned);
      for (int64_t i = 0; i < n; ++i) {
        float expected = trainmem::dequantizeValue(map, expectedCodes[i],
                                                   expectedMax[i / block]);
        ASSERT_EQ(std::memcmp(arena + out + 4 * i, &expected, 4), 0)
            << "element " << i;
      }
    }
  }
  ASSERT_EQ(tmrt_context_error(ctx), nullptr);
  tmrt_context_destroy(ctx);
}

//===----------------------------------------------------------------------===//
// The runtime's fused update against its separate kernels
//===----------------------------------------------------------------------===//

class FusedAdamW8bitTest : public ::testing::TestWithParam<int64_t> {
protected:
  void SetUp() override {
    const char *error = nullptr;
    ctx = tmrt_context_create("cpu", 2, &error);
    ASSERT_TRUE(ctx) << error;
    ASSERT_EQ(tmrt_arena_alloc(ctx, 1 << 20), 0);
  }
  void TearDown() override { tmrt_context_destroy(ctx); }

  template <typename T> T *at(int64_t offset) {
    return reinterpret_cast<T *>(tmrt_arena_base(ctx) + offset);
  }

  tmrt_context *ctx = nullptr;
};

TEST_P(FusedAdamW8bitTest, EqualsDequantizeAdamWQuantize) {
  const int64_t n = 1000, block = GetParam();
  const int64_t blocks = (n + block - 1) / block;
  // Arena offsets: inputs, the fused outputs, the unfused path's buffers.
  const int64_t p = 0, g = 4096, mc = 8192, ma = 9216, vc = 10240,
                va = 11264, lr = 12288, step = 12352;
  const int64_t fp = 16384, fmc = 20480, fma = 21504, fvc = 22528,
                fva = 23552;
  const int64_t m32 = 32768, v32 = 36864, up = 40960, um = 45056,
                uv = 49152, umc = 53248, uma = 54272, uvc = 55296,
                uva = 56320;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> code(0, 255);
  for (int64_t i = 0; i < n; ++i) {
    at<float>(p)[i] = normal(rng);
    at<float>(g)[i] = 0.1f * normal(rng);
    at<uint8_t>(mc)[i] = static_cast<uint8_t>(code(rng));
    at<uint8_t>(vc)[i] = static_cast<uint8_t>(code(rng) / 2 + 128);
  }
  for (int64_t b = 0; b < blocks; ++b) {
    at<float>(ma)[b] = 0.01f * (b + 1);
    at<float>(va)[b] = 1e-4f * (b + 1);
  }
  *at<float>(lr) = 1e-3f;
  *at<int64_t>(step) = 7;
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.01;

  // The unfused path from a parameter and its state: dequantize, f32
  // AdamW, quantize, into up, umc, uma, uvc and uva.
  auto unfused = [&](int64_t param, int64_t mCodes, int64_t mMax,
                     int64_t vCodes, int64_t vMax) {
    tmrt_dequantize(ctx, mCodes, mMax, m32, n, block, /*is_signed=*/1);
    tmrt_dequantize(ctx, vCodes, vMax, v32, n, block, /*is_signed=*/0);
    tmrt_adamw(ctx, param, g, m32, v32, lr, step, up, um, uv, n, beta1, beta2,
               eps, wd);
    tmrt_quantize(ctx, um, umc, uma, n, block, 1);
    tmrt_quantize(ctx, uv, uvc, uva, n, block, 0);
  };
  auto expectFusedEqualsUnfused = [&] {
    EXPECT_EQ(std::memcmp(at<float>(fp), at<float>(up), n * 4), 0);
    EXPECT_EQ(std::memcmp(at<uint8_t>(fmc), at<uint8_t>(umc), n), 0);
    EXPECT_EQ(std::memcmp(at<uint8_t>(fvc), at<uint8_t>(uvc), n), 0);
    EXPECT_EQ(std::memcmp(at<float>(fma), at<float>(uma), blocks * 4), 0);
    EXPECT_EQ(std::memcmp(at<float>(fva), at<float>(uva), blocks * 4), 0);
  };

  tmrt_adamw_8bit(ctx, p, g, mc, ma, vc, va, lr, step, fp, fmc, fma, fvc, fva,
                  n, block, beta1, beta2, eps, wd);
  unfused(p, mc, ma, vc, va);
  ASSERT_EQ(tmrt_context_error(ctx), nullptr);
  expectFusedEqualsUnfused();
  // The update did something: parameters and state moved.
  EXPECT_NE(std::memcmp(at<float>(fp), at<float>(p), n * 4), 0);
  EXPECT_NE(std::memcmp(at<uint8_t>(fmc), at<uint8_t>(mc), n), 0);

  // In place (outputs over inputs) gives the same bytes.
  tmrt_adamw_8bit(ctx, p, g, mc, ma, vc, va, lr, step, p, mc, ma, vc, va, n,
                  block, beta1, beta2, eps, wd);
  EXPECT_EQ(std::memcmp(at<float>(fp), at<float>(p), n * 4), 0);
  EXPECT_EQ(std::memcmp(at<uint8_t>(fmc), at<uint8_t>(mc), n), 0);
  EXPECT_EQ(std::memcmp(at<float>(fva), at<float>(va), blocks * 4), 0);

  // A gradient whose square overflows: v and its block maximum become
  // infinite; the fused update still equals the unfused one.
  at<float>(g)[5] = 3e19f;
  tmrt_adamw_8bit(ctx, p, g, mc, ma, vc, va, lr, step, fp, fmc, fma, fvc, fva,
                  n, block, beta1, beta2, eps, wd);
  unfused(p, mc, ma, vc, va);
  EXPECT_TRUE(std::isinf(at<float>(fva)[0]));
  expectFusedEqualsUnfused();

  // The step after: that block's v dequantizes to 0 * inf = NaN. The fused
  // update still equals the unfused one, NaN for NaN.
  at<float>(g)[5] = 0.01f;
  tmrt_adamw_8bit(ctx, fp, g, fmc, fma, fvc, fva, lr, step, fp, fmc, fma, fvc,
                  fva, n, block, beta1, beta2, eps, wd);
  unfused(up, umc, uma, uvc, uva);
  EXPECT_TRUE(std::isnan(at<float>(uv)[5]));
  expectFusedEqualsUnfused();
}

TEST_P(FusedAdamW8bitTest, NonFiniteGradientSkipsTheTensor) {
  const int64_t n = 600, block = GetParam(), blocks = (n + block - 1) / block;
  const int64_t p = 0, g = 4096, mc = 8192, ma = 9216, vc = 10240,
                va = 11264, lr = 12288, step = 12352;
  for (int64_t i = 0; i < n; ++i) {
    at<float>(p)[i] = 0.5f;
    at<float>(g)[i] = 0.25f;
    at<uint8_t>(mc)[i] = 200;
    at<uint8_t>(vc)[i] = 100;
  }
  for (int64_t b = 0; b < blocks; ++b)
    at<float>(ma)[b] = at<float>(va)[b] = 0.5f;
  *at<float>(lr) = 1e-2f;
  *at<int64_t>(step) = 3;
  std::vector<uint8_t> before(tmrt_arena_base(ctx), tmrt_arena_base(ctx) + 12288);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    at<float>(g)[n - 1] = bad;
    before.assign(tmrt_arena_base(ctx), tmrt_arena_base(ctx) + 12288);
    tmrt_adamw_8bit(ctx, p, g, mc, ma, vc, va, lr, step, p, mc, ma, vc, va, n,
                    block, 0.9, 0.999, 1e-8, 0.0);
    EXPECT_EQ(std::memcmp(before.data(), tmrt_arena_base(ctx), 12288), 0)
        << "gradient " << bad;
  }
}

TEST_P(FusedAdamW8bitTest, SGDMomentumEqualsDequantizeSGDQuantize) {
  const int64_t n = 1000, block = GetParam();
  const int64_t blocks = (n + block - 1) / block;
  const int64_t p = 0, g = 4096, c = 8192, a = 9216, lr = 12288;
  const int64_t fp = 16384, fc = 20480, fa = 21504;
  const int64_t b32 = 32768, up = 40960, ub = 45056, uc = 53248, ua = 54272;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> code(0, 255);
  for (int64_t i = 0; i < n; ++i) {
    at<float>(p)[i] = normal(rng);
    at<float>(g)[i] = 0.1f * normal(rng);
    at<uint8_t>(c)[i] = static_cast<uint8_t>(code(rng));
  }
  for (int64_t b = 0; b < blocks; ++b)
    at<float>(a)[b] = 0.05f * (b + 1);
  *at<float>(lr) = 1e-2f;
  for (int64_t nesterov : {0, 1}) {
    tmrt_sgd_8bit(ctx, p, g, c, a, lr, fp, fc, fa, n, block, 0.9, 1e-4,
                  nesterov);
    tmrt_dequantize(ctx, c, a, b32, n, block, /*is_signed=*/1);
    tmrt_sgd(ctx, p, g, lr, b32, up, ub, n, 0.9, 1e-4, nesterov);
    tmrt_quantize(ctx, ub, uc, ua, n, block, 1);
    ASSERT_EQ(tmrt_context_error(ctx), nullptr);
    EXPECT_EQ(std::memcmp(at<float>(fp), at<float>(up), n * 4), 0) << nesterov;
    EXPECT_EQ(std::memcmp(at<uint8_t>(fc), at<uint8_t>(uc), n), 0) << nesterov;
    EXPECT_EQ(std::memcmp(at<float>(fa), at<float>(ua), blocks * 4), 0)
        << nesterov;
    EXPECT_NE(std::memcmp(at<uint8_t>(fc), at<uint8_t>(c), n), 0);
  }
  // A non-finite gradient leaves everything as it was.
  at<float>(g)[3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> before(tmrt_arena_base(ctx), tmrt_arena_base(ctx) + 12288);
  tmrt_sgd_8bit(ctx, p, g, c, a, lr, p, c, a, n, block, 0.9, 0.0, 0);
  EXPECT_EQ(std::memcmp(before.data(), tmrt_arena_base(ctx), 12288), 0);
}

INSTANTIATE_TEST_SUITE_P(Blocks, FusedAdamW8bitTest,
                         ::testing::Values(64, 256, 2048));

} // namespace
