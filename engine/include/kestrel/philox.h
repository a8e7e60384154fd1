/*
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
 * generator, so element i of a random tensor depends only on (seed, counter) and every backend can
 * produce the same bits in any order. Plain C, header-only, usable from C, C++, CUDA and as a model for
 * GLSL. The mapping from elements to counters is specified with kestrel_random_params in plugin.h.
 */
#ifndef KESTREL_PHILOX_H
#define KESTREL_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define KESTREL_PHILOX_FN static inline __host__ __device__
#else
#define KESTREL_PHILOX_FN static inline
#endif

typedef struct kestrel_philox_block { uint32_t v[4]; } kestrel_philox_block;

/* The 128-bit counter is (block, 0); the 64-bit key is the seed. */
KESTREL_PHILOX_FN kestrel_philox_block kestrel_philox4x32_10(uint64_t seed, uint64_t block) {
  uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  kestrel_philox_block out = {{c0, c1, c2, c3}};
  return out;
}

/* The top 24 bits of a word as a float in [0, 1): exact in f32, f64 and on every device. */
KESTREL_PHILOX_FN double kestrel_philox_unit(uint32_t word) { return (double)(word >> 8) * (1.0 / 16777216.0); }

/* Bernoulli keep-decision shared by all backends: integer compare, so masks are bit-identical. */
KESTREL_PHILOX_FN int kestrel_philox_bernoulli(uint32_t word, double p) {
  double threshold = p * 16777216.0;
  return (double)(word >> 8) < threshold;
}

/* The same decision as an integer compare, for loops that draw many with one p (a vector compare of
 * words): kestrel_philox_bernoulli(word, p) == ((word >> 8) < kestrel_philox_bernoulli_limit(p)) for
 * every word, since an integer x is below a real t exactly when it is below ceil(t). 0 for a p <= 0 or
 * NaN, 2^24 (every word) for a p above 1 - 2^-24. */
KESTREL_PHILOX_FN uint32_t kestrel_philox_bernoulli_limit(double p) {
  double threshold = p * 16777216.0;
  if (!(threshold > 0)) return 0;
  if (threshold >= 16777216.0) return 16777216u;
  uint32_t floor = (uint32_t)threshold;
  return (double)floor < threshold ? floor + 1 : floor;
}

#endif /* KESTREL_PHILOX_H */
