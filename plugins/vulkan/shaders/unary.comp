#version 450
// out = f(in), f = ints[0] (kestrel_unary_fn), alpha = floats[0], beta = floats[1]. Integer variants
// implement only the functions the host accepts for integers (neg, abs, relu, step, square, sign).
// T is the type computed in, STORE_T the stored one: f16 tensors are loaded into floats, computed in
// f32 and rounded once when stored (half-precision storage, single-precision arithmetic).
// kestrel-variant: unary_f32 -DT=float -DIS_FLOAT=1
// kestrel-variant: unary_f16 -DT=float -DSTORE_T=float16_t -DIS_FLOAT=1
// kestrel-variant: unary_bf16 -DT=float -DBF16=1 -DIS_FLOAT=1
// kestrel-variant: unary_i32 -DT=int
// kestrel-variant: unary_i64 -DT=int64_t
#include "common.glsl"
#include "math.glsl"
#ifndef STORE_T
#define STORE_T T
#endif
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) readonly buffer In { STORE_T data[]; } in_buf;
layout(std430, set = 0, binding = 2) writeonly buffer Out { STORE_T data[]; } out_buf;

T apply(int fn, T x) {
  switch (fn) {
    case 0: return -x;
    case 1: return x < T(0) ? -x : x;
#ifdef IS_FLOAT
    // NVIDIA's shader compiler turns `x < 0 ? 0 : x` into a max() that drops NaN: ask for NaN explicitly.
    case 8: return isnan(x) ? x : max(x, T(0));
#else
    case 8: return x < T(0) ? T(0) : x;
#endif
    case 11: return x > T(0) ? T(1) : T(0);
    case 12: return x * x;
#ifdef IS_FLOAT
    case 14: return isnan(x) ? x : sign(x);
    case 2: return exp(x);
    case 3: return safe_log(x);
    case 4: return x < 0.0 ? K_NAN : sqrt(x);
    case 5: return x < 0.0 ? K_NAN : 1.0 / sqrt(x);  // inversesqrt is allowed 2 ulp; this is exact-ish
    case 6: return c_tanh(x);
    case 7: return 1.0 / (1.0 + exp(-x));
    case 9: return 0.5 * x * (1.0 + c_erf(x * 0.70710678118654752));
    case 10: return gelu_grad(x);
    case 13: return 1.0 / x;
    case 15: return PFLOAT(0) * x + PFLOAT(1);
    case 16: return c_pow(x, PFLOAT(0));
#else
    case 14: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
#endif
  }
  return x;
}

void element(uint i) {
  out_buf.data[element_offset(1, i)] = STORE(apply(PINT(0), LOAD(in_buf.data[element_offset(0, i)])));
}

void main() {
  for (uint i = flat_index(); i < P.tensors[1].numel; i += flat_stride()) element(i);
}
