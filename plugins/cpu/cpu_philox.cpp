// Sixteen Philox4x32-10 blocks at once (cpu_philox.hpp), chosen once for the CPU: AVX-512 or AVX2
// intrinsics where it has them, else loops the compiler vectorises. GCC vectorised the loops' 32 x 32 ->
// 64-bit products with a permute per lane pair, 18 cycles a block on a Zen 4; the intrinsics multiply the
// even and the odd lanes in place and blend the halves back, 2.8x faster there (dropout masks are drawn
// for every activation they fall on, every step). All give kestrel_philox4x32_10's words, which the
// random and attention conformance cases check against; KESTREL_CPU_PHILOX=loops or =avx2 picks those
// paths on a CPU that has better (ctest's conformance_cpu_philox_* runs).
#include "cpu_philox.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KESTREL_PHILOX_LOOP_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KESTREL_PHILOX_LOOP_CLONES
#endif

namespace kestrel_cpu {

namespace {

KESTREL_PHILOX_LOOP_CLONES void lanes_in_loops(uint64_t seed, uint64_t first, uint32_t* words) {
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

#if defined(__x86_64__) && defined(__GNUC__)
// c0..c3 as sixteen 32-bit lanes each. _mm512_mul_epu32 multiplies the low 32 bits of each 64-bit lane:
// the even lanes as they are, the odd ones shifted down; each product's high word goes to its lane by a
// shift and a blend, its low word likewise.
__attribute__((target("avx512f"))) void lanes_avx512(uint64_t seed, uint64_t first, uint32_t* words) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i low = _mm512_set1_epi32(int(uint32_t(first))), high = _mm512_set1_epi32(int(uint32_t(first >> 32)));
  __m512i c0 = _mm512_add_epi32(low, lane);
  const __mmask16 carried = _mm512_cmplt_epu32_mask(c0, low);  // blocks past a 2^32 boundary
  __m512i c1 = _mm512_mask_add_epi32(high, carried, high, _mm512_set1_epi32(1));
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  const __m512i m0 = _mm512_set1_epi32(int(0xD2511F53u)), m2 = _mm512_set1_epi32(int(0xCD9E8D57u));
  const __mmask16 odd = 0xAAAA;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m512i p0_even = _mm512_mul_epu32(c0, m0), p0_odd = _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), m0);
    const __m512i p2_even = _mm512_mul_epu32(c2, m2), p2_odd = _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), m2);
    const __m512i high0 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(p0_even, 32), p0_odd);
    const __m512i high2 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(p2_even, 32), p2_odd);
    const __m512i low0 = _mm512_mask_blend_epi32(odd, p0_even, _mm512_slli_epi64(p0_odd, 32));
    const __m512i low2 = _mm512_mask_blend_epi32(odd, p2_even, _mm512_slli_epi64(p2_odd, 32));
    const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(high2, c1), _mm512_set1_epi32(int(k0)));
    const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(high0, c3), _mm512_set1_epi32(int(k1)));
    c1 = low2, c3 = low0, c0 = n0, c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  alignas(64) uint32_t w0[kPhiloxLanes], w1[kPhiloxLanes], w2[kPhiloxLanes], w3[kPhiloxLanes];
  _mm512_store_si512(w0, c0), _mm512_store_si512(w1, c1), _mm512_store_si512(w2, c2), _mm512_store_si512(w3, c3);
  for (int64_t l = 0; l < kPhiloxLanes; ++l)
    words[4 * l] = w0[l], words[4 * l + 1] = w1[l], words[4 * l + 2] = w2[l], words[4 * l + 3] = w3[l];
}

// Eight blocks a time in 256-bit registers, as lanes_avx512 does sixteen.
__attribute__((target("avx2"))) void lanes_avx2(uint64_t seed, uint64_t first, uint32_t* words) {
  for (int64_t half = 0; half < kPhiloxLanes; half += 8) {
    alignas(32) uint32_t w0[8], w1[8], w2[8], w3[8];
    for (int64_t l = 0; l < 8; ++l) {
      const uint64_t block = first + uint64_t(half + l);
      w0[l] = uint32_t(block), w1[l] = uint32_t(block >> 32);
    }
    __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w0));
    __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w1));
    __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
    const __m256i m0 = _mm256_set1_epi32(int(0xD2511F53u)), m2 = _mm256_set1_epi32(int(0xCD9E8D57u));
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const __m256i p0_even = _mm256_mul_epu32(c0, m0), p0_odd = _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), m0);
      const __m256i p2_even = _mm256_mul_epu32(c2, m2), p2_odd = _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), m2);
      const __m256i high0 = _mm256_blend_epi32(_mm256_srli_epi64(p0_even, 32), p0_odd, 0xAA);
      const __m256i high2 = _mm256_blend_epi32(_mm256_srli_epi64(p2_even, 32), p2_odd, 0xAA);
      const __m256i low0 = _mm256_blend_epi32(p0_even, _mm256_slli_epi64(p0_odd, 32), 0xAA);
      const __m256i low2 = _mm256_blend_epi32(p2_even, _mm256_slli_epi64(p2_odd, 32), 0xAA);
      const __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(high2, c1), _mm256_set1_epi32(int(k0)));
      const __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(high0, c3), _mm256_set1_epi32(int(k1)));
      c1 = low2, c3 = low0, c0 = n0, c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(w0), c0), _mm256_store_si256(reinterpret_cast<__m256i*>(w1), c1);
    _mm256_store_si256(reinterpret_cast<__m256i*>(w2), c2), _mm256_store_si256(reinterpret_cast<__m256i*>(w3), c3);
    for (int64_t l = 0; l < 8; ++l) {
      uint32_t* out = words + 4 * (half + l);
      out[0] = w0[l], out[1] = w1[l], out[2] = w2[l], out[3] = w3[l];
    }
  }
}

using Lanes = void (*)(uint64_t, uint64_t, uint32_t*);
Lanes choose() {
  __builtin_cpu_init();  // a static initialiser may run before libgcc's own
  const char* asked = std::getenv("KESTREL_CPU_PHILOX");
  const bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
  if (asked && std::strcmp(asked, "loops") == 0) return lanes_in_loops;
  if (asked && std::strcmp(asked, "avx2") == 0 && avx2) return lanes_avx2;
  return avx512 ? lanes_avx512 : avx2 ? lanes_avx2 : lanes_in_loops;
}
const Lanes chosen = choose();
#else
const auto chosen = lanes_in_loops;
#endif

}  // namespace

void philox_lanes(uint64_t seed, uint64_t first, uint32_t* words) { chosen(seed, first, words); }

}  // namespace kestrel_cpu
