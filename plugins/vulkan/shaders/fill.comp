#version 450
// out = value. The value arrives as floats[0] (float dtypes, rounded to f16 by the store for f16) or
// ints[0..1] (a 64-bit integer).
// kestrel-variant: fill_f32 -DOUT_T=float -DOUT_FLOAT=1
// kestrel-variant: fill_f16 -DOUT_T=float16_t -DOUT_FLOAT=1
// kestrel-variant: fill_bf16 -DOUT_T=uint16_t -DOUT_FLOAT=1 -DOUT_BF16=1
// kestrel-variant: fill_i32 -DOUT_T=int
// kestrel-variant: fill_i64 -DOUT_T=int64_t
#include "common.glsl"
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) writeonly buffer Out { OUT_T data[]; } out_buf;

void element(uint i) {
#if defined(OUT_BF16)
  out_buf.data[element_offset(0, i)] = BF16_STORE(PFLOAT(0));
#elif defined(OUT_FLOAT)
  out_buf.data[element_offset(0, i)] = OUT_T(PFLOAT(0));
#else
  out_buf.data[element_offset(0, i)] = OUT_T(param_int64(0));
#endif
}

void main() {
  for (uint i = flat_index(); i < P.tensors[0].numel; i += flat_stride()) element(i);
}
