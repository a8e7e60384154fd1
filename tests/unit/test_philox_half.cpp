// The shared counter-based generator and 16-bit float conversions, against published values.
#include <gtest/gtest.h>

#include <cmath>

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
