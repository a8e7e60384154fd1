#version 450
// C = alpha * A @ B + beta * C for each batch entry, through the shared tiles of tiles.glsl.
// tensors[0] = A (batch, M, K), tensors[1] = B (batch, K, N), tensors[2] = C (batch, M, N): all rank 3
// with arbitrary strides, so transposed and broadcast (stride-0 batch) operands need no copy.
// floats[0] = alpha, floats[1] = beta; beta == 0 ignores C's old contents (NaN there stays out).
// Grid: x over 64-column blocks, y over 64-row blocks, z over the batch.
// The linear variant (KESTREL_OP_LINEAR) adds an epilogue: C = act(A @ B + bias), with alpha 1 and
// beta 0; tensors[3] = bias (rank 1, binding 4) when ints[1] != 0, ints[0] = kestrel_activation.
// STORE_T is the stored element type of every operand. The f16 variants load halves into the float
// tiles, accumulate in f32 and round once when storing C, as GPU half-precision training does.
// kestrel-variant: gemm_f32
// kestrel-variant: linear_f32 -DLINEAR=1
// kestrel-variant: gemm_f16 -DSTORE_T=float16_t
// kestrel-variant: linear_f16 -DLINEAR=1 -DSTORE_T=float16_t
// kestrel-variant: gemm_bf16 -DBF16=1
// kestrel-variant: linear_bf16 -DLINEAR=1 -DBF16=1
// kestrel-variant: gemm_f32_wide -DWIDE=1
// kestrel-variant: linear_f32_wide -DLINEAR=1 -DWIDE=1
// kestrel-variant: gemm_f16_wide -DSTORE_T=float16_t -DWIDE=1
// kestrel-variant: linear_f16_wide -DLINEAR=1 -DSTORE_T=float16_t -DWIDE=1
// kestrel-variant: gemm_bf16_wide -DBF16=1 -DWIDE=1
// kestrel-variant: linear_bf16_wide -DLINEAR=1 -DBF16=1 -DWIDE=1
#include "common.glsl"
#ifdef LINEAR
#include "math.glsl"
#endif
#define T float
#ifndef STORE_T
#define STORE_T float
#endif
layout(std430, set = 0, binding = 1) readonly buffer A { STORE_T data[]; } a_buf;
layout(std430, set = 0, binding = 2) readonly buffer B { STORE_T data[]; } b_buf;
layout(std430, set = 0, binding = 3) buffer C { STORE_T data[]; } c_buf;
#ifdef LINEAR
layout(std430, set = 0, binding = 4) readonly buffer Bias { STORE_T data[]; } bias_buf;

float activate(int activation, float v) {
  if (activation == 1) return isnan(v) ? v : max(v, 0.0);  // relu keeping NaN (see unary.comp)
  if (activation == 2) return 0.5 * v * (1.0 + c_erf(v * 0.70710678118654752));  // exact gelu
  return v;
}
#endif

// Batch entry gl_WorkGroupID.z's operands through their strides.
float load_a(uint row, uint k) {
  uint batch = gl_WorkGroupID.z;
  return LOAD(a_buf.data[P.tensors[0].offset + batch * STRIDE(0, 0) + row * STRIDE(0, 1) + k * STRIDE(0, 2)]);
}
float load_b(uint k, uint col) {
  uint batch = gl_WorkGroupID.z;
  return LOAD(b_buf.data[P.tensors[1].offset + batch * STRIDE(1, 0) + k * STRIDE(1, 1) + col * STRIDE(1, 2)]);
}
#include "tiles.glsl"

void main() {
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y, batch = gl_WorkGroupID.z;
  const uint M = SHAPE(2, 1), N = SHAPE(2, 2), K = SHAPE(0, 2);
  const uint row0 = gl_WorkGroupID.y * TILE_MN, col0 = gl_WorkGroupID.x * TILE_MN;
  // Fill along each operand's unit stride (A row-major, B transposed), else along M or N.
  const bool a_along_k = STRIDE(0, 2) == 1u || STRIDE(0, 1) != 1u;
  const bool b_along_n = STRIDE(1, 2) == 1u || STRIDE(1, 1) != 1u;
  float acc[BLOCK][BLOCK];
  multiply_tiles(M, N, K, row0, col0, a_along_k, b_along_n, acc);

  const float alpha = PFLOAT(0), beta = PFLOAT(1);
  const uint c_base = P.tensors[2].offset + batch * STRIDE(2, 0);
  for (int i = 0; i < BLOCK; ++i) {
    uint row = row0 + ly + THREADS * i;
    if (row >= M) continue;
    for (int j = 0; j < BLOCK; ++j) {
      uint col = col0 + lx + THREADS * j;
      if (col >= N) continue;
      uint c_at = c_base + row * STRIDE(2, 1) + col * STRIDE(2, 2);
#ifdef LINEAR
      float value = acc[i][j];
      if (PINT(1) != 0) value += LOAD(bias_buf.data[P.tensors[3].offset + col * STRIDE(3, 0)]);
      c_buf.data[c_at] = STORE(activate(PINT(0), value));
#else
      float value = alpha * acc[i][j];
      if (beta != 0.0) value += beta * LOAD(c_buf.data[c_at]);
      c_buf.data[c_at] = STORE(value);
#endif
    }
  }
}
