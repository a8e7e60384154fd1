#version 450
// Fused layer normalisation over the last axis (KESTREL_OP_LAYER_NORM and _BACKWARD, ABI 1.7), the CPU
// plugin's arithmetic (plugins/cpu/ops_layer_norm.cpp) in f32: one invocation per row for y and dx, one
// per column for the weight and bias gradients, each sum in a fixed order (no atomics).
//   forward:            bindings 1 x (R,C), 2 weight (C), 3 bias (C), 4 y (R,C), 5 mean (R), 6 rstd (R) f32;
//                       mean first, then the centred squares (two passes, as the CPU).
//   ROWS (backward):    1 dy, 2 x, 3 mean, 4 rstd, 5 weight, 6 dx, 7 the gradient dx adds to (ABI 1.16;
//                       its offset in ints[8], ints[9] != 0 when it is there). With xhat = (x - mean) rstd
//                       and g = dy weight: dx = rstd (g - mean(g) - xhat mean(g xhat)), rounded to x's
//                       dtype [+ the added gradient, rounded again]. Both `precise`: the driver may not
//                       fuse dx's last product into the addition, which would change the sum's bits.
//   COLUMNS (backward): 1 dy, 2 x, 3 mean, 4 rstd, 5 dweight = sum over rows of dy xhat, 6 dbias = sum of dy.
// ints[n - 1] is the element offset of binding n's tensor; ints[6] and ints[7] say whether the weight
// (forward, ROWS: read; COLUMNS: its gradient written) and the bias (its gradient) are there; uints[0] = R,
// uints[1] = C; floats[0] = eps.
// kestrel-variant: layer_norm_f32 -DSTORE_T=float
// kestrel-variant: layer_norm_f16 -DSTORE_T=float16_t
// kestrel-variant: layer_norm_bf16 -DBF16=1
// kestrel-variant: layer_norm_rows_f32 -DSTORE_T=float -DROWS=1
// kestrel-variant: layer_norm_rows_f16 -DSTORE_T=float16_t -DROWS=1
// kestrel-variant: layer_norm_rows_bf16 -DBF16=1 -DROWS=1
// kestrel-variant: layer_norm_columns_f32 -DSTORE_T=float -DCOLUMNS=1
// kestrel-variant: layer_norm_columns_f16 -DSTORE_T=float16_t -DCOLUMNS=1
// kestrel-variant: layer_norm_columns_bf16 -DBF16=1 -DCOLUMNS=1
// ABI 1.15: an f32 layer norm whose y (forward) or dy (backward) rows are 16-bit (R_*).
// kestrel-variant: layer_norm_f32_lowered_f16 -DSTORE_T=float -DR_STORE_T=float16_t
// kestrel-variant: layer_norm_f32_lowered_bf16 -DSTORE_T=float -DR_BF16=1
// kestrel-variant: layer_norm_rows_f32_lowered_f16 -DSTORE_T=float -DR_STORE_T=float16_t -DROWS=1
// kestrel-variant: layer_norm_rows_f32_lowered_bf16 -DSTORE_T=float -DR_BF16=1 -DROWS=1
// kestrel-variant: layer_norm_columns_f32_lowered_f16 -DSTORE_T=float -DR_STORE_T=float16_t -DCOLUMNS=1
// kestrel-variant: layer_norm_columns_f32_lowered_bf16 -DSTORE_T=float -DR_BF16=1 -DCOLUMNS=1
#define T float
#include "common.glsl"
// y's and dy's elements: x's dtype, or 16-bit beside an f32 x (rounded once from the f32 value, as a cast).
#if defined(R_BF16)
#define R_STORE_T uint16_t
#define R_LOAD(x) T(BF16_LOAD(x))
#define R_STORE(v) BF16_STORE(v)
#elif defined(R_STORE_T)
#define R_LOAD(x) T(x)
#define R_STORE(v) R_STORE_T(v)
#else
#define R_STORE_T STORE_T
#define R_LOAD(x) LOAD(x)
#define R_STORE(v) STORE(v)
#endif
layout(local_size_x = KESTREL_LOCAL_SIZE) in;

#if !defined(ROWS) && !defined(COLUMNS)
layout(std430, set = 0, binding = 1) readonly buffer X { STORE_T data[]; } x_buf;
layout(std430, set = 0, binding = 2) readonly buffer Weight { STORE_T data[]; } weight_buf;
layout(std430, set = 0, binding = 3) readonly buffer Bias { STORE_T data[]; } bias_buf;
layout(std430, set = 0, binding = 4) writeonly buffer Y { R_STORE_T data[]; } y_buf;
layout(std430, set = 0, binding = 5) writeonly buffer Mean { float data[]; } mean_buf;
layout(std430, set = 0, binding = 6) writeonly buffer Rstd { float data[]; } rstd_buf;
#else
layout(std430, set = 0, binding = 1) readonly buffer Dy { R_STORE_T data[]; } dy_buf;
layout(std430, set = 0, binding = 2) readonly buffer X { STORE_T data[]; } x_buf;
layout(std430, set = 0, binding = 3) readonly buffer Mean { float data[]; } mean_buf;
layout(std430, set = 0, binding = 4) readonly buffer Rstd { float data[]; } rstd_buf;
#ifdef ROWS
layout(std430, set = 0, binding = 5) readonly buffer Weight { STORE_T data[]; } weight_buf;
layout(std430, set = 0, binding = 6) writeonly buffer Dx { STORE_T data[]; } dx_buf;
layout(std430, set = 0, binding = 7) readonly buffer Added { STORE_T data[]; } added_buf;
#else
layout(std430, set = 0, binding = 5) writeonly buffer Dweight { STORE_T data[]; } dweight_buf;
layout(std430, set = 0, binding = 6) writeonly buffer Dbias { STORE_T data[]; } dbias_buf;
#endif
#endif

uint offset_of(int binding) { return uint(PINT(binding - 1)); }

void main() {
  uint rows = PUINT(0), cols = PUINT(1);
  bool weighted = PINT(6) != 0, biased = PINT(7) != 0;
#ifndef COLUMNS
  for (uint r = flat_index(); r < rows; r += flat_stride()) {
#ifndef ROWS
    uint x_at = offset_of(1) + r * cols;
    float sum = 0.0;
    for (uint c = 0u; c < cols; ++c) sum += LOAD(x_buf.data[x_at + c]);
    float mu = sum / float(cols);
    float squares = 0.0;
    for (uint c = 0u; c < cols; ++c) {
      float centred = LOAD(x_buf.data[x_at + c]) - mu;
      squares += centred * centred;
    }
    float inv = 1.0 / sqrt(squares / float(cols) + PFLOAT(0));
    uint y_at = offset_of(4) + r * cols;
    for (uint c = 0u; c < cols; ++c) {
      float v = (LOAD(x_buf.data[x_at + c]) - mu) * inv;
      if (weighted) v *= LOAD(weight_buf.data[offset_of(2) + c]);
      if (biased) v += LOAD(bias_buf.data[offset_of(3) + c]);
      y_buf.data[y_at + c] = R_STORE(v);
    }
    mean_buf.data[offset_of(5) + r] = mu;
    rstd_buf.data[offset_of(6) + r] = inv;
#else
    uint dy_at = offset_of(1) + r * cols, x_at = offset_of(2) + r * cols;
    float mu = mean_buf.data[offset_of(3) + r], inv = rstd_buf.data[offset_of(4) + r];
    float g_sum = 0.0, gx_sum = 0.0;  // sums of g and of g * xhat over the row
    for (uint c = 0u; c < cols; ++c) {
      float g = R_LOAD(dy_buf.data[dy_at + c]);
      if (weighted) g *= LOAD(weight_buf.data[offset_of(5) + c]);
      g_sum += g;
      gx_sum += g * (LOAD(x_buf.data[x_at + c]) - mu) * inv;
    }
    float g_mean = g_sum / float(cols), gx_mean = gx_sum / float(cols);
    uint dx_at = offset_of(6) + r * cols, added_at = uint(PINT(8)) + r * cols;
    bool adding = PINT(9) != 0;
    for (uint c = 0u; c < cols; ++c) {
      float g = R_LOAD(dy_buf.data[dy_at + c]);
      if (weighted) g *= LOAD(weight_buf.data[offset_of(5) + c]);
      float xhat = (LOAD(x_buf.data[x_at + c]) - mu) * inv;
      precise float own = inv * (g - g_mean - xhat * gx_mean);
      if (adding) {
        precise float total = LOAD(STORE(own)) + LOAD(added_buf.data[added_at + c]);
        dx_buf.data[dx_at + c] = STORE(total);
      } else {
        dx_buf.data[dx_at + c] = STORE(own);
      }
    }
#endif
  }
#else
  for (uint c = flat_index(); c < cols; c += flat_stride()) {
    float dw = 0.0, db = 0.0;
    for (uint r = 0u; r < rows; ++r) {
      float g = R_LOAD(dy_buf.data[offset_of(1) + r * cols + c]);
      dw += g * (LOAD(x_buf.data[offset_of(2) + r * cols + c]) - mean_buf.data[offset_of(3) + r]) *
            rstd_buf.data[offset_of(4) + r];
      db += g;
    }
    if (weighted) dweight_buf.data[offset_of(5) + c] = STORE(dw);
    if (biased) dbias_buf.data[offset_of(6) + c] = STORE(db);
  }
#endif
}
