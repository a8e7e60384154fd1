#version 450
// C = alpha * A @ B + beta * C for each batch entry. A workgroup computes a 64 x 64 block of C; each
// invocation keeps a BLOCK x BLOCK block of sums in registers (rows ly + THREADS i, columns lx +
// THREADS j) and the operands pass through shared memory in slices of TILE_K along K. The WIDE variants
// (8 x 8 sums on 8 x 8 invocations: 64 multiply-adds per 16 shared-memory reads) are for software devices
// such as lavapipe, where every shared access is a real memory access; there the others (4 x 4 sums on
// 16 x 16 invocations: 16 per 8) took 1.7x the time (bench/results/2026-11-26-vm-vulkan-gemm-tile-k.md).
// GPUs keep the latter, with 4x the threads per tile for small products, until measured (ops_gemm.cpp).
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
#ifdef WIDE
#define THREADS 8
#define BLOCK 8
#else
#define THREADS 16
#define BLOCK 4
#endif
#define TILE_MN (THREADS * BLOCK)
#define TILE_K 16  // 32: no faster with 8 x 8 blocks, and its 16.4 KiB of tiles pass Vulkan's 16 KiB minimum
layout(local_size_x = THREADS, local_size_y = THREADS) in;
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

// +1 keeps both ways of filling and reading a tile off one bank on real GPUs.
shared float a_tile[TILE_MN][TILE_K + 1];
shared float b_tile[TILE_K][TILE_MN + 1];

void main() {
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y, batch = gl_WorkGroupID.z;
  const uint lane = ly * THREADS + lx;
  const uint M = SHAPE(2, 1), N = SHAPE(2, 2), K = SHAPE(0, 2);
  const uint row0 = gl_WorkGroupID.y * TILE_MN, col0 = gl_WorkGroupID.x * TILE_MN;
  const uint a_base = P.tensors[0].offset + batch * STRIDE(0, 0);
  const uint b_base = P.tensors[1].offset + batch * STRIDE(1, 0);
  const uint as_m = STRIDE(0, 1), as_k = STRIDE(0, 2);
  const uint bs_k = STRIDE(1, 1), bs_n = STRIDE(1, 2);

  float acc[BLOCK][BLOCK];
  for (int i = 0; i < BLOCK; ++i)
    for (int j = 0; j < BLOCK; ++j) acc[i][j] = 0.0;

  // Neighbouring invocations load neighbouring elements: along K where that is an operand's unit stride
  // (A row-major, B transposed), else along M or N, so a transposed operand is not read a stride apart.
  const bool a_along_k = as_k == 1u || as_m != 1u, b_along_n = bs_n == 1u || bs_k != 1u;
  for (uint k0 = 0; k0 < K; k0 += TILE_K) {
    // Each invocation loads 1024 / THREADS^2 elements of each 64 x 16 (A) and 16 x 64 (B) slice.
    for (uint e = lane; e < TILE_MN * TILE_K; e += THREADS * THREADS) {
      uint r = a_along_k ? e / TILE_K : e % TILE_MN, k = a_along_k ? e % TILE_K : e / TILE_MN;  // A: row r, column k
      uint gr = row0 + r, gk = k0 + k;
      a_tile[r][k] = (gr < M && gk < K) ? LOAD(a_buf.data[a_base + gr * as_m + gk * as_k]) : 0.0;
      uint bk = b_along_n ? e / TILE_MN : e % TILE_K, c = b_along_n ? e % TILE_MN : e / TILE_K;  // B: row bk, column c
      uint gbk = k0 + bk, gc = col0 + c;
      b_tile[bk][c] = (gbk < K && gc < N) ? LOAD(b_buf.data[b_base + gbk * bs_k + gc * bs_n]) : 0.0;
    }
    barrier();
    for (uint kk = 0; kk < TILE_K; ++kk) {
      float a[BLOCK], b[BLOCK];
      for (int i = 0; i < BLOCK; ++i) a[i] = a_tile[ly + THREADS * i][kk];
      for (int j = 0; j < BLOCK; ++j) b[j] = b_tile[kk][lx + THREADS * j];
      for (int i = 0; i < BLOCK; ++i)
        for (int j = 0; j < BLOCK; ++j) acc[i][j] += a[i] * b[j];
    }
    barrier();
  }

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
