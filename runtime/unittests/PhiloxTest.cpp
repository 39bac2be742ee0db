//===- PhiloxTest.cpp - Philox-4x32-10 against published vectors ----------===//

#include "trainmem/Support/Philox.h"

#include <gtest/gtest.h>

#include <vector>

using namespace trainmem;

// The three `philox4x32 10` known-answer vectors of Random123's
// tests/kat_vectors (Salmon et al., SC'11).
TEST(Philox, KnownAnswerZero) {
  PhiloxCounter out = philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(out, (PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu,
                                0x9b00dbd8u}));
}

TEST(Philox, KnownAnswerOnes) {
  PhiloxCounter out = philox4x32_10(
      {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
      {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(out, (PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u,
                                0x6d5451fdu}));
}

TEST(Philox, KnownAnswerPi) {
  PhiloxCounter out =
      philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                    {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(out, (PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u,
                                0x24126ea1u}));
}

TEST(Philox, WordLayoutFollowsCounterBlocks) {
  // Element i is word i % 4 of block i / 4, with the offset in the high
  // counter words and the seed as the key.
  uint64_t seed = 0x0123456789abcdefull, offset = 7;
  PhiloxCounter block1 = philox4x32_10(
      {1, 0, 7, 0}, {static_cast<uint32_t>(seed),
                     static_cast<uint32_t>(seed >> 32)});
  for (int w = 0; w < 4; ++w)
    EXPECT_EQ(philoxWord(seed, offset, 4 + w), block1[w]);
  EXPECT_NE(philoxWord(seed, offset, 0), philoxWord(seed, offset + 1, 0));
}

TEST(Philox, DropoutKeepFractionMatchesRate) {
  // Rate 0 keeps everything; other rates keep 1 - rate of a large sample
  // (binomial: 1M draws, tolerance ~6 standard deviations).
  EXPECT_EQ(dropoutKeepThreshold(0.0), 1u << 24);
  for (double rate : {0.1, 0.5, 0.9}) {
    uint32_t threshold = dropoutKeepThreshold(rate);
    const int n = 1 << 20;
    int kept = 0;
    for (int i = 0; i < n; ++i)
      kept += dropoutKeep(/*seed=*/42, /*offset=*/3, i, threshold);
    double fraction = static_cast<double>(kept) / n;
    EXPECT_NEAR(fraction, 1.0 - rate, 0.003) << "rate " << rate;
  }
}

// A context-parallel rank's balanced part (chunks p and 2c - 1 - p of 2c
// along the split dimension) lies where ContextChunks puts its rows: the
// parts of the c ranks cover the whole draw once.
TEST(Philox, BalancedPartsCoverTheWholeDrawOnce) {
  const uint64_t parts = 3, chunk = 5, inner = 2, outer = 4;
  const uint64_t block = 2 * chunk * inner; // a rank's elements per outer
  std::vector<int> hits(outer * block * parts, 0);
  for (uint64_t position = 0; position < parts; ++position)
    for (uint64_t i = 0; i < outer * block; ++i) {
      uint64_t whole =
          trainmem::splitDrawIndex(i, block, parts, position, true);
      ASSERT_LT(whole, hits.size());
      ++hits[whole];
      // Row r of the rank's 2·chunk rows is row wholeRow(r) of the whole.
      uint64_t o = i / block, r = (i % block) / inner, x = i % inner;
      uint64_t row = r < chunk ? position * chunk + r
                               : (2 * parts - 1 - position) * chunk + r - chunk;
      EXPECT_EQ(whole, (o * 2 * parts * chunk + row) * inner + x);
    }
  for (int h : hits)
    EXPECT_EQ(h, 1);
  // Contiguous parts are unchanged by the flag's default.
  EXPECT_EQ(trainmem::splitDrawIndex(7, 4, 3, 2),
            trainmem::splitDrawIndex(7, 4, 3, 2, false));
}
