//===- FastExpTest.cpp - the kernels' f32 exponential ---------------------===//

#include "trainmem/Support/FastExp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

uint32_t bitsOf(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return bits;
}

float floatOf(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

/// Distance in units in the last place between two positive floats.
uint32_t ulps(float a, float b) {
  uint32_t x = bitsOf(a), y = bitsOf(b);
  return x > y ? x - y : y - x;
}

// Every 61st float of both signs up to the overflow and underflow limits
// (and each limit): within 1 ulp of e^x rounded from double (the whole
// range was measured once: 1 ulp at worst). Results below the smallest
// normal float are 0 or that close to it.
TEST(FastExpTest, WithinOneUlp) {
  const float limits[2] = {88.72283f, 87.33654f};
  uint32_t worst = 0;
  float worstAt = 0.0f;
  for (int negative = 0; negative < 2; ++negative) {
    uint32_t last = bitsOf(limits[negative]);
    for (uint32_t bits = 0; bits <= last + 61; bits += 61) {
      float x = floatOf(std::min(bits, last) | (negative ? 0x80000000u : 0u));
      float want = static_cast<float>(std::exp(static_cast<double>(x)));
      float got = trainmem::fastExp(x);
      if (want < std::numeric_limits<float>::min()) {
        EXPECT_LE(got, std::numeric_limits<float>::min()) << x;
        continue;
      }
      if (ulps(got, want) > worst) {
        worst = ulps(got, want);
        worstAt = x;
      }
    }
  }
  EXPECT_LE(worst, 1u) << "at x = " << worstAt;
}

TEST(FastExpTest, EdgesAndTheVectorLoop) {
  EXPECT_EQ(trainmem::fastExp(0.0f), 1.0f);
  EXPECT_EQ(trainmem::fastExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(trainmem::fastExp(-100.0f), 0.0f);
  EXPECT_TRUE(std::isnan(trainmem::fastExp(std::nanf(""))));
  EXPECT_TRUE(std::isfinite(trainmem::fastExp(88.72283f)));
  // The vectorized loop gives what the scalar function gives, bit for bit,
  // including the lanes past the last whole vector.
  std::vector<float> x(1003);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = -90.0f + 0.17891f * static_cast<float>(i);
  std::vector<float> y = x;
  trainmem::fastExpInPlace(y.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(bitsOf(y[i]), bitsOf(trainmem::fastExp(x[i]))) << x[i];
}

} // namespace
