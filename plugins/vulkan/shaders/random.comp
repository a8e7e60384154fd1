#version 450
// Philox4x32-10 draws with the element -> counter mapping of plugin.h (see kestrel/philox.h):
// element i uses block (offset + i / 4), word i % 4 for uniform and bernoulli, and block
// (offset + i / 2), words 2*(i % 2) and 2*(i % 2) + 1 for normal (Box-Muller).
// ints[0] = distribution; uints[0..1] = seed, uints[2..3] = offset (low, high words);
// floats[0] = a, floats[1] = (b - a) for uniform or b for normal;
// uints[4] = bernoulli threshold ceil(a * 2^24), so (w >> 8) < a * 2^24 becomes an exact integer test.
// random_f32_based (ABI 1.1): binding 2 holds a one-element i64 counter base (tensors[1].offset), read
// when the dispatch runs and added to the offset, so a captured graph draws new numbers at each replay.
// It is read as two 32-bit words, so the shader needs no 64-bit integer support.
// kestrel-variant: random_f32
// kestrel-variant: random_f32_based -DCOUNTER_BASE=1
#include "common.glsl"
#include "philox.glsl"
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) writeonly buffer Out { float data[]; } out_buf;
#ifdef COUNTER_BASE
layout(std430, set = 0, binding = 2) readonly buffer Base { uint data[]; } base_buf;
#endif

// The first counter: the offset, plus the device-side base when there is one (64-bit, as two words).
uvec2 first_counter() {
  uvec2 start = uvec2(PUINT(2), PUINT(3));
#ifdef COUNTER_BASE
  uint at = 2u * P.tensors[1].offset, carry;
  start.x = uaddCarry(start.x, base_buf.data[at], carry);
  start.y += base_buf.data[at + 1u] + carry;
#endif
  return start;
}

uvec4 block_at(uvec2 start, uint block_index) {
  uint carry;
  uint low = uaddCarry(start.x, block_index, carry);
  return philox4x32_10(uvec2(PUINT(0), PUINT(1)), uvec2(low, start.y + carry));
}

// The top 24 bits as a float in [0, 1): exact.
float unit(uint word) { return float(word >> 8) * (1.0 / 16777216.0); }

void element(uvec2 start, uint i) {
  int distribution = PINT(0);
  float value;
  if (distribution == 1) {
    uvec4 block = block_at(start, i / 2u);
    uint lane = 2u * (i % 2u);
    float u1 = unit(block[lane]) + 1.0 / 16777216.0;  // in (0, 1], so the log stays finite
    float u2 = unit(block[lane + 1u]);
    // cos(2 pi u2) == cos(2 pi (1 - u2)): keeps the argument in [0, pi], where cos is most accurate.
    float turn = u2 > 0.5 ? 1.0 - u2 : u2;
    float z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * turn);
    value = PFLOAT(0) + PFLOAT(1) * z;
  } else {
    uint word = block_at(start, i / 4u)[i % 4u];
    value = distribution == 2 ? ((word >> 8) < PUINT(4) ? 1.0 : 0.0) : PFLOAT(0) + PFLOAT(1) * unit(word);
  }
  out_buf.data[element_offset(0, i)] = value;
}

void main() {
  uvec2 start = first_counter();
  for (uint i = flat_index(); i < P.tensors[0].numel; i += flat_stride()) element(start, i);
}
