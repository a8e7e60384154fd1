// Philox4x32-10 (kestrel/philox.h) for 16 consecutive blocks at once: lane by lane with the same integer
// arithmetic as kestrel_philox4x32_10, so the compiler runs the ten rounds in vector registers. Used by
// the random op and by attention's dropout, which draw the same bits for the same element.
#pragma once
#include <cstdint>

#include "kestrel/philox.h"

namespace kestrel_cpu {

constexpr int64_t kPhiloxLanes = 16;

// words[4 l + w] = word w of Philox block (first + l), for l < kPhiloxLanes: the words in the order of
// the elements they make (element 4 b + w of a uniform or Bernoulli draw takes word w of block b).
[[gnu::always_inline]] inline void philox_lanes(uint64_t seed, uint64_t first, uint32_t* words) {
  uint32_t c0[kPhiloxLanes], c1[kPhiloxLanes], c2[kPhiloxLanes], c3[kPhiloxLanes];
  for (int64_t l = 0; l < kPhiloxLanes; ++l) {
    const uint64_t block = first + uint64_t(l);
    c0[l] = uint32_t(block), c1[l] = uint32_t(block >> 32), c2[l] = 0, c3[l] = 0;
  }
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int64_t l = 0; l < kPhiloxLanes; ++l) {
      const uint64_t p0 = uint64_t(0xD2511F53u) * c0[l], p1 = uint64_t(0xCD9E8D57u) * c2[l];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[l] ^ k0, n2 = uint32_t(p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = uint32_t(p1), c3[l] = uint32_t(p0), c0[l] = n0, c2[l] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int64_t l = 0; l < kPhiloxLanes; ++l)
    words[4 * l] = c0[l], words[4 * l + 1] = c1[l], words[4 * l + 2] = c2[l], words[4 * l + 3] = c3[l];
}

}  // namespace kestrel_cpu
