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
#include "common.glsl"
#ifndef IN_C
#define IN_C IN_T
#endif
#ifndef OUT_C
#define OUT_C OUT_T
#endif
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) readonly buffer In { IN_T data[]; } in_buf;
layout(std430, set = 0, binding = 2) writeonly buffer Out { OUT_T data[]; } out_buf;

void element(uint i) {
  out_buf.data[element_offset(1, i)] = OUT_T(OUT_C(IN_C(in_buf.data[element_offset(0, i)])));
}

void main() {
  for (uint i = flat_index(); i < P.tensors[1].numel; i += flat_stride()) element(i);
}
