// The shared counter-based generator and 16-bit float conversions, against published values.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kestrel/half.h"
#include "kestrel/philox.h"

TEST(Philox, MatchesTheRandom123KnownAnswer) {
  // Random123's kat_vectors: philox4x32 10 rounds, counter 0, key 0.
  kestrel_philox_block block = kestrel_philox4x32_10(0, 0);
  EXPECT_EQ(block.v[0], 0x6627e8d5u);
  EXPECT_EQ(block.v[1], 0xe169c58du);
  EXPECT_EQ(block.v[2], 0xbc57ac4cu);
  EXPECT_EQ(block.v[3], 0x9b00dbd8u);
}

TEST(Philox, BernoulliUsesTheTop24Bits) {
  EXPECT_TRUE(kestrel_philox_bernoulli(0x000000ffu, 1e-9));   // top bits 0 < threshold
  EXPECT_FALSE(kestrel_philox_bernoulli(0xffffffffu, 0.999));
  EXPECT_FALSE(kestrel_philox_bernoulli(0x80000000u, 0.5));  // exactly the threshold is dropped
  EXPECT_TRUE(kestrel_philox_bernoulli(0x7fffffffu, 0.5));
}

// The integer form the CPU's vector loops compare against decides every word as the shared one does: for
// probabilities on and between 2^-24 steps, at the ends and past them, and every word near each limit.
TEST(Philox, BernoulliLimitDecidesEveryWordAlike) {
  std::vector<double> probabilities = {0.0, 1.0, 0.5, 0.1, 0.9, 0.3, 0.4, 1e-9, 1 - 1e-9, 1.0 / 16777216,
                                       1 - 1.0 / 16777216, 2.0, -0.5, 1e300, -1e300, std::nan("")};
  for (int k = 1; k < 2000; ++k) probabilities.push_back(k * 0.000497);              // between steps
  for (int k = 0; k < 1000; ++k) probabilities.push_back(k * 16384.0 / 16777216.0);  // on steps
  for (double p : probabilities) {
    const uint32_t limit = kestrel_philox_bernoulli_limit(p);
    std::vector<uint32_t> tops = {0, 1, 0xffffff, 0x800000, 0x7fffff};
    for (int64_t d = -2; d <= 2; ++d)
      if (int64_t(limit) + d >= 0 && int64_t(limit) + d < (1 << 24)) tops.push_back(uint32_t(int64_t(limit) + d));
    for (uint32_t top : tops)
      for (uint32_t low : {0u, 0x7fu, 0xffu}) {
        const uint32_t word = top << 8 | low;
        ASSERT_EQ(kestrel_philox_bernoulli(word, p) != 0, (word >> 8) < limit) << "p " << p << " word " << word;
      }
  }
}

TEST(Half, RoundTripsEveryFiniteHalf) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    float f = kestrel_f16_to_f32(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(kestrel_f32_to_f16(f), bits) << std::hex << bits;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(kestrel_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // halfway, down to even
  EXPECT_EQ(kestrel_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);  // halfway, up to even
  EXPECT_EQ(kestrel_f32_to_f16(65520.0f), 0x7c00);           // overflows to infinity
  EXPECT_EQ(kestrel_f32_to_f16(5.9604645e-8f), 0x0001);      // smallest subnormal
  EXPECT_EQ(kestrel_f32_to_bf16(1.00390625f), 0x3f80);        // halfway, down to even
  EXPECT_EQ(kestrel_f32_to_bf16(1.01171875f), 0x3f82);        // halfway, up to even
  EXPECT_TRUE(std::isnan(kestrel_bf16_to_f32(kestrel_f32_to_bf16(NAN))));
}
