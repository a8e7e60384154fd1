/*
 * Conversions between f32 and the 16-bit float formats (IEEE binary16 and bfloat16), round to nearest
 * even, NaN and Inf preserved. Plain C and header-only so plugins and tests share one definition.
 */
#ifndef KESTREL_HALF_H
#define KESTREL_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t kestrel_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float kestrel_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline uint16_t kestrel_f32_to_bf16(float f) {
  uint32_t u = kestrel_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float kestrel_bf16_to_f32(uint16_t h) { return kestrel_bits_f32((uint32_t)h << 16); }

static inline uint16_t kestrel_f32_to_f16(float f) {
  uint32_t u = kestrel_f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);            /* NaN */
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);           /* overflow rounds to Inf */
  if (abs < 0x38800000u) {                                              /* subnormal or zero */
    /* add 0.5 so the hardware rounds the mantissa into place: 2^-24 is the f16 subnormal step */
    float scaled = kestrel_bits_f32(abs) + 0.5f;
    return (uint16_t)(sign | (kestrel_f32_bits(scaled) - 0x3f000000u));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round to nearest even */
  return (uint16_t)(sign | (abs >> 13));
}

static inline float kestrel_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return kestrel_bits_f32(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) { /* subnormal: mant * 2^-24 */
    float v = (float)mant * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return kestrel_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

#endif /* KESTREL_HALF_H */
