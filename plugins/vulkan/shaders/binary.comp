#version 450
// out = f(a, b), f = ints[0] (kestrel_binary_fn); comparisons give 1 or 0 in the operands' dtype;
// RELU_BACKWARD and GELU_BACKWARD (ABI 1.14) are float only.
// Broadcast operands arrive with stride 0, so every operand is addressed through its own descriptor.
// T is the type computed in, STORE_T the stored one (f16: loaded into floats, stored rounded once).
// kestrel-variant: binary_f32 -DT=float -DIS_FLOAT=1
// kestrel-variant: binary_f16 -DT=float -DSTORE_T=float16_t -DIS_FLOAT=1
// kestrel-variant: binary_bf16 -DT=float -DBF16=1 -DIS_FLOAT=1
// kestrel-variant: binary_i32 -DT=int
// kestrel-variant: binary_i64 -DT=int64_t
// ABI 1.15's widening add: f32 a and out, b f16 or bf16 widened as it is read (the host sends only ADD).
// kestrel-variant: binary_f32_widening_f16 -DT=float -DIS_FLOAT=1 -DB_STORE_T=float16_t
// kestrel-variant: binary_f32_widening_bf16 -DT=float -DIS_FLOAT=1 -DB_BF16=1
#include "common.glsl"
#include "math.glsl"
#ifndef STORE_T
#define STORE_T T
#endif
#if defined(B_BF16)
#define B_STORE_T uint16_t
#define B_LOAD(x) T(BF16_LOAD(x))
#elif defined(B_STORE_T)
#define B_LOAD(x) T(x)
#else
#define B_STORE_T STORE_T
#define B_LOAD(x) LOAD(x)
#endif
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) readonly buffer InA { STORE_T data[]; } a_buf;
layout(std430, set = 0, binding = 2) readonly buffer InB { B_STORE_T data[]; } b_buf;
layout(std430, set = 0, binding = 3) writeonly buffer Out { STORE_T data[]; } out_buf;

T apply(int fn, T a, T b) {
  switch (fn) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
#ifdef IS_FLOAT
    case 3: return a / b;
    case 4: return nan_max(a, b);
    case 5: return nan_min(a, b);
    case 6: return c_pow(a, b);
    case 13: return a * (b > T(0) ? T(1) : T(0));  // relu's gradient, b its output
    case 14: return a * gelu_grad(b);              // gelu's gradient, b its input
#else
    case 4: return a > b ? a : b;
    case 5: return a < b ? a : b;
#endif
    // NE is spelled !(a == b) so that NaN compares unequal whatever the compiler picks for '!='.
    case 7: return a == b ? T(1) : T(0);
    case 8: return a == b ? T(0) : T(1);
    case 9: return a < b ? T(1) : T(0);
    case 10: return a <= b ? T(1) : T(0);
    case 11: return a > b ? T(1) : T(0);
    case 12: return a >= b ? T(1) : T(0);
  }
  return a;
}

void element(uint i) {
  T a = LOAD(a_buf.data[element_offset(0, i)]);
  T b = B_LOAD(b_buf.data[element_offset(1, i)]);
  out_buf.data[element_offset(2, i)] = STORE(apply(PINT(0), a, b));
}

void main() {
  for (uint i = flat_index(); i < P.tensors[2].numel; i += flat_stride()) element(i);
}
