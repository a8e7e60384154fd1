#version 450
// out = cast(in): any strides (broadcasts and transposes included), any pair of supported dtypes.
// Float -> integer truncates toward zero, as C++'s static_cast in the CPU plugin.
// kestrel-variant: copy_f32_f32 -DIN_T=float -DOUT_T=float
// kestrel-variant: copy_f32_i32 -DIN_T=float -DOUT_T=int
// kestrel-variant: copy_f32_i64 -DIN_T=float -DOUT_T=int64_t
// kestrel-variant: copy_i32_f32 -DIN_T=int -DOUT_T=float
// kestrel-variant: copy_i32_i32 -DIN_T=int -DOUT_T=int
// kestrel-variant: copy_i32_i64 -DIN_T=int -DOUT_T=int64_t
// kestrel-variant: copy_i64_f32 -DIN_T=int64_t -DOUT_T=float
// kestrel-variant: copy_i64_i32 -DIN_T=int64_t -DOUT_T=int
// kestrel-variant: copy_i64_i64 -DIN_T=int64_t -DOUT_T=int64_t
#include "common.glsl"
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) readonly buffer In { IN_T data[]; } in_buf;
layout(std430, set = 0, binding = 2) writeonly buffer Out { OUT_T data[]; } out_buf;

void element(uint i) {
  out_buf.data[element_offset(1, i)] = OUT_T(in_buf.data[element_offset(0, i)]);
}

void main() {
  for (uint i = flat_index(); i < P.tensors[1].numel; i += flat_stride()) element(i);
}
