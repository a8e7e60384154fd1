#version 450
// out = cast(in): any strides (broadcasts and transposes included), any pair of supported dtypes.
// Float -> integer truncates toward zero, as C++'s static_cast in the CPU plugin.
// IN_T/OUT_T are the stored types; IN_C/OUT_C the types the value passes through on the way (float
// for f16, whose storage type only converts to and from float; else the stored type itself), so the
// cast is OUT_T(OUT_C(IN_C(x))) and integer-to-integer copies never round through a float.
// kestrel-variant: copy_f32_f32 -DIN_T=float -DOUT_T=float
// kestrel-variant: copy_f32_i32 -DIN_T=float -DOUT_T=int
// kestrel-variant: copy_f32_i64 -DIN_T=float -DOUT_T=int64_t
// kestrel-variant: copy_i32_f32 -DIN_T=int -DOUT_T=float
// kestrel-variant: copy_i32_i32 -DIN_T=int -DOUT_T=int
// kestrel-variant: copy_i32_i64 -DIN_T=int -DOUT_T=int64_t
// kestrel-variant: copy_i64_f32 -DIN_T=int64_t -DOUT_T=float
// kestrel-variant: copy_i64_i32 -DIN_T=int64_t -DOUT_T=int
// kestrel-variant: copy_i64_i64 -DIN_T=int64_t -DOUT_T=int64_t
// kestrel-variant: copy_f16_f16 -DIN_T=float16_t -DIN_C=float -DOUT_T=float16_t -DOUT_C=float
// kestrel-variant: copy_f16_f32 -DIN_T=float16_t -DIN_C=float -DOUT_T=float
// kestrel-variant: copy_f16_i32 -DIN_T=float16_t -DIN_C=float -DOUT_T=int
// kestrel-variant: copy_f16_i64 -DIN_T=float16_t -DIN_C=float -DOUT_T=int64_t
// kestrel-variant: copy_f32_f16 -DIN_T=float -DOUT_T=float16_t -DOUT_C=float
// kestrel-variant: copy_i32_f16 -DIN_T=int -DOUT_T=float16_t -DOUT_C=float
// kestrel-variant: copy_i64_f16 -DIN_T=int64_t -DOUT_T=float16_t -DOUT_C=float
// bf16 is held as uint16_t bits (common.glsl): a bf16 -> bf16 copy moves the bits; other casts widen
// (IN_BF16) or round (OUT_BF16) through float.
// kestrel-variant: copy_bf16_bf16 -DIN_T=uint16_t -DIN_C=uint -DOUT_T=uint16_t -DOUT_C=uint
// kestrel-variant: copy_bf16_f32 -DIN_T=uint16_t -DIN_BF16=1 -DOUT_T=float
// kestrel-variant: copy_bf16_f16 -DIN_T=uint16_t -DIN_BF16=1 -DOUT_T=float16_t -DOUT_C=float
// kestrel-variant: copy_bf16_i32 -DIN_T=uint16_t -DIN_BF16=1 -DOUT_T=int
// kestrel-variant: copy_bf16_i64 -DIN_T=uint16_t -DIN_BF16=1 -DOUT_T=int64_t
// kestrel-variant: copy_f32_bf16 -DIN_T=float -DOUT_T=uint16_t -DOUT_BF16=1
// kestrel-variant: copy_f16_bf16 -DIN_T=float16_t -DIN_C=float -DOUT_T=uint16_t -DOUT_BF16=1
// kestrel-variant: copy_i32_bf16 -DIN_T=int -DOUT_T=uint16_t -DOUT_BF16=1
// kestrel-variant: copy_i64_bf16 -DIN_T=int64_t -DOUT_T=uint16_t -DOUT_BF16=1
#include "common.glsl"
#ifndef IN_C
#define IN_C IN_T
#endif
#ifndef OUT_C
#define OUT_C OUT_T
#endif
#ifdef IN_BF16
#define IN_LOAD(x) BF16_LOAD(x)
#else
#define IN_LOAD(x) IN_C(x)
#endif
#ifdef OUT_BF16
#define OUT_STORE(v) BF16_STORE(v)
#else
#define OUT_STORE(v) OUT_T(OUT_C(v))
#endif
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) readonly buffer In { IN_T data[]; } in_buf;
layout(std430, set = 0, binding = 2) writeonly buffer Out { OUT_T data[]; } out_buf;

void element(uint i) {
  out_buf.data[element_offset(1, i)] = OUT_STORE(IN_LOAD(in_buf.data[element_offset(0, i)]));
}

void main() {
  for (uint i = flat_index(); i < P.tensors[1].numel; i += flat_stride()) element(i);
}
