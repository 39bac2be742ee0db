//===- ExactSumTest.cpp - the clip's exact sum of squares -----------------===//

#include "trainmem/Support/ExactSum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

using trainmem::ExactSquareSum;
using trainmem::kExactSumWords;

struct Sum {
  std::vector<int64_t> words = std::vector<int64_t>(kExactSumWords, 0);
  ExactSquareSum sum{words.data()};
};

double sumOf(const std::vector<float> &values) {
  Sum s;
  s.sum.addSquares(values.data(), static_cast<int64_t>(values.size()));
  return s.sum.value();
}

// Values k · 2^j with k < 2^12 and j in [-20, 8]: their squares are whole
// multiples of 2^-40 below 2^40, so 10000 of them sum exactly in a 128-bit
// integer counting 2^-40s, which converts to double rounded once, to
// nearest even. The exact sum must give that double.
TEST(ExactSumTest, IsTheExactSumRoundedOnce) {
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> values;
    unsigned __int128 exact = 0;
    for (int i = 0; i < 10000; ++i) {
      uint64_t k = random() % 4096;
      int j = static_cast<int>(random() % 29) - 20;
      float x = std::ldexp(static_cast<float>(k), j);
      if (random() & 1)
        x = -x;
      values.push_back(x);
      exact += static_cast<unsigned __int128>(k * k) << (2 * j + 40);
    }
    double expected = std::ldexp(static_cast<double>(exact), -40);
    EXPECT_EQ(sumOf(values), expected) << "trial " << trial;
  }
}

// The same bits whatever the order, and when the values are cut into
// shards summed apart and merged (ranks), for values spread over the f32
// range gradients take.
TEST(ExactSumTest, OrderAndShardsDoNotMatter) {
  std::mt19937 random(11);
  std::vector<float> values(100003);
  for (float &v : values)
    v = std::ldexp(std::uniform_real_distribution<float>(-1.0f, 1.0f)(random),
                   static_cast<int>(random() % 140) - 120);
  Sum whole;
  whole.sum.addSquares(values.data(), static_cast<int64_t>(values.size()));
  double expected = whole.sum.value();
  // A double sum in order and reversed differ in their last bits here;
  // the exact sum does not.
  std::vector<float> reversed(values.rbegin(), values.rend());
  EXPECT_EQ(sumOf(reversed), expected);
  std::vector<float> shuffled = values;
  std::shuffle(shuffled.begin(), shuffled.end(), random);
  EXPECT_EQ(sumOf(shuffled), expected);
  for (int shards : {2, 3, 4, 7}) {
    Sum merged;
    merged.sum.clear();
    size_t size = (values.size() + shards - 1) / shards;
    for (int s = shards - 1; s >= 0; --s) {
      size_t begin = std::min(values.size(), s * size);
      size_t end = std::min(values.size(), begin + size);
      Sum part;
      part.sum.addSquares(values.data() + begin,
                          static_cast<int64_t>(end - begin));
      merged.sum.merge(part.words.data());
    }
    EXPECT_EQ(merged.words, whole.words) << shards << " shards";
    EXPECT_EQ(merged.sum.value(), expected) << shards << " shards";
  }
}

// Rounding at the last bit: 1 + 2^-53 lies halfway between 1 and the next
// double and goes to the even one, 1; anything above the halfway point,
// however small (the smallest f32 squared, 2^-298), goes up.
TEST(ExactSumTest, RoundsToNearestEvenWithEveryBitCounted) {
  float half = std::ldexp(1.0f, -27); // squared: 2^-54; twice: 2^-53
  EXPECT_EQ(sumOf({1.0f, half, half}), 1.0);
  float smallest = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(sumOf({1.0f, half, half, smallest}), 1.0 + std::ldexp(1.0, -52));
  EXPECT_EQ(sumOf({smallest}), std::ldexp(1.0, -298));
  EXPECT_EQ(sumOf({}), 0.0);
  EXPECT_EQ(sumOf({0.0f, -0.0f}), 0.0);
}

// The largest squares sum without overflow; infinite and NaN terms make
// the sum infinite and NaN, as a rounded sum would be.
TEST(ExactSumTest, LargestSquaresAndNonFiniteTerms) {
  float largest = std::numeric_limits<float>::max();
  std::vector<float> many(1000, largest);
  double square = static_cast<double>(largest) * largest;
  EXPECT_EQ(sumOf(many), 1000.0 * square);
  float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sumOf({1.0f, -inf}), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(
      std::isnan(sumOf({1.0f, inf, std::numeric_limits<float>::quiet_NaN()})));
  // A NaN with its sign bit set squares to a NaN that may keep it.
  float negativeNaN = -std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::signbit(negativeNaN));
  EXPECT_TRUE(std::isnan(sumOf({negativeNaN, 2.0f})));
  std::vector<int64_t> words(kExactSumWords, 0);
  ExactSquareSum one(words.data());
  one.addSquare(negativeNaN);
  one.addSquare(-inf);
  EXPECT_EQ(words[trainmem::kExactSumLimbs], 1);
  EXPECT_EQ(words[trainmem::kExactSumLimbs + 1], 1);
}

// Words no sum of squares makes (a squared_norm operand of hand-written IR
// holding a negative total): NaN, not a number read from the bits.
TEST(ExactSumTest, WordsOfANegativeTotalAreNotANumber) {
  Sum s;
  s.sum.addSquares(std::vector<float>{3.0f}.data(), 1);
  std::vector<int64_t> negative(kExactSumWords, 0);
  negative[12] = -5;
  s.sum.merge(negative.data());
  EXPECT_TRUE(std::isnan(s.sum.value()));
  std::vector<int64_t> negativeCount(kExactSumWords, 0);
  negativeCount[trainmem::kExactSumLimbs] = -1;
  Sum t;
  t.sum.merge(negativeCount.data());
  EXPECT_TRUE(std::isnan(t.sum.value()));
}

} // namespace
