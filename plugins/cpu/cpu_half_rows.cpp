// f32 <-> f16 rows (cpu_half_rows.hpp): eight at a time through F16C, chosen once at run time.
#include "cpu_half_rows.hpp"

#include "kestrel/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KESTREL_HAVE_F16C_PATH 1
#endif

namespace kestrel_cpu {

namespace {

#ifdef KESTREL_HAVE_F16C_PATH
bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

__attribute__((target("avx,f16c"))) void f16_from_f32_f16c(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = kestrel_f32_to_f16(x[i]);
  // F16C keeps the top of a NaN's payload; half.h's rule makes every NaN the canonical quiet one.
  for (int64_t j = 0; j < n; ++j) {
    const uint16_t h = y[j];
    y[j] = (h & 0x7fffu) > 0x7c00u ? uint16_t((h & 0x8000u) | 0x7e00u) : h;
  }
}

__attribute__((target("avx,f16c"))) void f32_from_f16_f16c(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = kestrel_f16_to_f32(x[i]);
}
#endif

}  // namespace

void f16_row_from_f32(const float* x, uint16_t* y, int64_t n) {
#ifdef KESTREL_HAVE_F16C_PATH
  if (has_f16c()) return f16_from_f32_f16c(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = kestrel_f32_to_f16(x[i]);
}

void f32_row_from_f16(const uint16_t* x, float* y, int64_t n) {
#ifdef KESTREL_HAVE_F16C_PATH
  if (has_f16c()) return f32_from_f16_f16c(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = kestrel_f16_to_f32(x[i]);
}

}  // namespace kestrel_cpu
