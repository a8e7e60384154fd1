#version 450
// C = alpha * A @ B + beta * C for each batch entry (the operands and the LINEAR epilogue: gemm_io.glsl),
// through the shared tiles of tiles.glsl. Grid: x over column blocks, y over row blocks (64 wide, 128
// for LARGE), z over the batch. The f16 variants load halves into the float tiles, accumulate in f32 and round once when
// storing C, as GPU half-precision training does; gemm_coop.comp is their tensor-core form.
// kestrel-variant: gemm_f32
// kestrel-variant: linear_f32 -DLINEAR=1
// kestrel-variant: gemm_f16 -DSTORE_T=float16_t
// kestrel-variant: linear_f16 -DLINEAR=1 -DSTORE_T=float16_t
// kestrel-variant: gemm_bf16 -DBF16=1
// kestrel-variant: linear_bf16 -DLINEAR=1 -DBF16=1
// kestrel-variant: gemm_f16_f32 -DSTORE_T=float16_t -DC_F32=1
// kestrel-variant: gemm_bf16_f32 -DBF16=1 -DC_F32=1
// kestrel-variant: gemm_f32_wide -DWIDE=1
// kestrel-variant: linear_f32_wide -DLINEAR=1 -DWIDE=1
// kestrel-variant: gemm_f16_wide -DSTORE_T=float16_t -DWIDE=1
// kestrel-variant: linear_f16_wide -DLINEAR=1 -DSTORE_T=float16_t -DWIDE=1
// kestrel-variant: gemm_bf16_wide -DBF16=1 -DWIDE=1
// kestrel-variant: linear_bf16_wide -DLINEAR=1 -DBF16=1 -DWIDE=1
// kestrel-variant: gemm_f16_f32_wide -DSTORE_T=float16_t -DC_F32=1 -DWIDE=1
// kestrel-variant: gemm_bf16_f32_wide -DBF16=1 -DC_F32=1 -DWIDE=1
// kestrel-variant: gemm_f32_large -DLARGE=1
// kestrel-variant: linear_f32_large -DLINEAR=1 -DLARGE=1
// kestrel-variant: gemm_f16_large -DSTORE_T=float16_t -DLARGE=1
// kestrel-variant: linear_f16_large -DLINEAR=1 -DSTORE_T=float16_t -DLARGE=1
// kestrel-variant: gemm_bf16_large -DBF16=1 -DLARGE=1
// kestrel-variant: linear_bf16_large -DLINEAR=1 -DBF16=1 -DLARGE=1
// kestrel-variant: gemm_f16_f32_large -DSTORE_T=float16_t -DC_F32=1 -DLARGE=1
// kestrel-variant: gemm_bf16_f32_large -DBF16=1 -DC_F32=1 -DLARGE=1
#include "common.glsl"
#include "gemm_io.glsl"
#include "tiles.glsl"

void main() {
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  const uint M = SHAPE(2, 1), N = SHAPE(2, 2), K = SHAPE(0, 2);
  const uint row0 = gl_WorkGroupID.y * TILE_MN, col0 = gl_WorkGroupID.x * TILE_MN;
  float acc[BLOCK][BLOCK];
  multiply_tiles(M, N, K, row0, col0, a_along_k(), b_along_n(), acc);
  for (int i = 0; i < BLOCK; ++i) {
    const uint row = row0 + ly + THREADS * i;
    if (row >= M) continue;
    for (int j = 0; j < BLOCK; ++j) {
      const uint col = col0 + lx + THREADS * j;
      if (col < N) store_c(row, col, acc[i][j]);
    }
  }
}
