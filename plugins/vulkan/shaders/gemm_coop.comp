#version 450
// The f16 GEMM and linear on tensor cores, through VK_NV_cooperative_matrix (Debian's glslang has the
// NV extension, not yet the KHR one): the same operands, grid and epilogue as gemm.comp (gemm_io.glsl),
// f16 products summed in f32 and C rounded once (or kept in f32: C_F32). Picked by the host only on devices that advertise
// f16 x f16 + f32 matrices of the variant's shape at subgroup scope, and full subgroups of 32 (the
// pipeline requires them: vk_pipelines.cpp). NVIDIA's driver lists 16x8x16 for f16 (the 16x8 variants).
//
// A workgroup is 4 subgroups of 32 and computes a 64 x 64 block of C (kTile, as gemm.comp); subgroup
// s computes the 32 x 32 quarter (s / 2, s % 2) of it as 2 x (32 / CM_N) accumulators of 16 x CM_N.
// K goes in slices of 32: the workgroup copies A's 64 x 32 and B's 32 x 64 slice into shared memory
// (any strides, zeros past the edges), then each subgroup multiplies its rows of A by its columns of
// B in two steps of 16. Results leave through a 16 x CM_N scratch per subgroup, so that store_c can
// bound and convert them. Checked on lavapipe by replacing the matrix operations with per-lane loops
// over the same tiles (the f16 gemm and fused conformance passed; a shifted B tile failed them).
// kestrel-variant: gemm_f16_coop16x16 -DSTORE_T=float16_t -DCM_N=16
// kestrel-variant: linear_f16_coop16x16 -DLINEAR=1 -DSTORE_T=float16_t -DCM_N=16
// kestrel-variant: gemm_f16_f32_coop16x16 -DSTORE_T=float16_t -DC_F32=1 -DCM_N=16
// kestrel-variant: gemm_f16_coop16x8 -DSTORE_T=float16_t -DCM_N=8
// kestrel-variant: gemm_f16_f32_coop16x8 -DSTORE_T=float16_t -DC_F32=1 -DCM_N=8
// kestrel-variant: linear_f16_coop16x8 -DLINEAR=1 -DSTORE_T=float16_t -DCM_N=8
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "gemm_io.glsl"

#define TILE_MN 64
#define SLICE_K 32
#define CM_M 16
#define CM_K 16
#define ROWS_PER_SUBGROUP 32
#define ACC_I (ROWS_PER_SUBGROUP / CM_M)
#define ACC_J (ROWS_PER_SUBGROUP / CM_N)
// The tiles hold 8 halves per uvec4: cooperative-matrix loads want rows that start on 16 bytes, which
// only a 16-byte element type promises in shared memory (as NVIDIA's sample does), and a whole uvec4 is
// stored at once. Offsets and strides below count uvec4s. Rows are padded by one uvec4, so that rows
// start on different banks.
#define A_STRIDE (SLICE_K / 8 + 1)
#define B_STRIDE (TILE_MN / 8 + 1)
layout(local_size_x = 128) in;

shared uvec4 a_tile[TILE_MN * A_STRIDE];   // A's slice, row-major: (row, k) in a_tile[row * A_STRIDE + k / 8]
shared uvec4 b_tile[SLICE_K * B_STRIDE];   // B's slice, row-major: (k, col) in b_tile[k * B_STRIDE + col / 8]
shared float c_scratch[4][CM_M * CM_N];    // one accumulator of each subgroup on its way out

// Elements (row, k) .. (row, k + 7) of A, zeros past M and K, packed; likewise (k, col) .. (k, col + 7) of B.
uvec4 a_eight(uint row, uint k, uint M, uint K) {
  uvec4 packed;
  [[unroll]] for (uint q = 0; q < 4; ++q) {
    const uint k1 = k + 2 * q, k2 = k1 + 1;
    const float16_t lo = row < M && k1 < K ? a_buf.data[a_index(row, k1)] : float16_t(0.0);
    const float16_t hi = row < M && k2 < K ? a_buf.data[a_index(row, k2)] : float16_t(0.0);
    packed[q] = packFloat2x16(f16vec2(lo, hi));
  }
  return packed;
}
uvec4 b_eight(uint k, uint col, uint K, uint N) {
  uvec4 packed;
  [[unroll]] for (uint q = 0; q < 4; ++q) {
    const uint c1 = col + 2 * q, c2 = c1 + 1;
    const float16_t lo = k < K && c1 < N ? b_buf.data[b_index(k, c1)] : float16_t(0.0);
    const float16_t hi = k < K && c2 < N ? b_buf.data[b_index(k, c2)] : float16_t(0.0);
    packed[q] = packFloat2x16(f16vec2(lo, hi));
  }
  return packed;
}

void main() {
  const uint M = SHAPE(2, 1), N = SHAPE(2, 2), K = SHAPE(0, 2);
  const uint row0 = gl_WorkGroupID.y * TILE_MN, col0 = gl_WorkGroupID.x * TILE_MN;
  const uint lane = gl_LocalInvocationID.x, s = gl_SubgroupID, sub_lane = gl_SubgroupInvocationID;
  const uint sub_row = (s / 2) * ROWS_PER_SUBGROUP, sub_col = (s % 2) * ROWS_PER_SUBGROUP;
  const bool a_k = a_along_k(), b_n = b_along_n();

  fcoopmatNV<32, gl_ScopeSubgroup, CM_M, CM_N> acc[ACC_I][ACC_J];
  [[unroll]] for (int i = 0; i < ACC_I; ++i)
    [[unroll]] for (int j = 0; j < ACC_J; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, CM_M, CM_N>(0.0);

  for (uint k0 = 0; k0 < K; k0 += SLICE_K) {
    // 256 uvec4s of each operand, 2 per invocation. Neighbouring invocations take neighbouring groups of 8
    // along the operand's unit stride (A along K, B along N), else neighbouring rows (A) or k (B).
    for (uint e = lane; e < TILE_MN * SLICE_K / 8; e += 128) {
      const uint groups_k = SLICE_K / 8, groups_n = TILE_MN / 8;
      const uint r = a_k ? e / groups_k : e % TILE_MN, g = a_k ? e % groups_k : e / TILE_MN;
      a_tile[r * A_STRIDE + g] = a_eight(row0 + r, k0 + 8 * g, M, K);
      const uint bk = b_n ? e / groups_n : e % SLICE_K, h = b_n ? e % groups_n : e / SLICE_K;
      b_tile[bk * B_STRIDE + h] = b_eight(k0 + bk, col0 + 8 * h, K, N);
    }
    barrier();
    // Unrolled, so that the accumulators stay in registers (indexed by constants).
    [[unroll]] for (uint kk = 0; kk < SLICE_K; kk += CM_K) {
      fcoopmatNV<16, gl_ScopeSubgroup, CM_M, CM_K> a[ACC_I];
      [[unroll]] for (int i = 0; i < ACC_I; ++i)
        coopMatLoadNV(a[i], a_tile, (sub_row + i * CM_M) * A_STRIDE + kk / 8, A_STRIDE, false);
      [[unroll]] for (int j = 0; j < ACC_J; ++j) {
        fcoopmatNV<16, gl_ScopeSubgroup, CM_K, CM_N> b;
        coopMatLoadNV(b, b_tile, kk * B_STRIDE + (sub_col + j * CM_N) / 8, B_STRIDE, false);
        [[unroll]] for (int i = 0; i < ACC_I; ++i) acc[i][j] = coopMatMulAddNV(a[i], b, acc[i][j]);
      }
    }
    barrier();
  }

  [[unroll]] for (int i = 0; i < ACC_I; ++i)
    [[unroll]] for (int j = 0; j < ACC_J; ++j) {
      coopMatStoreNV(acc[i][j], c_scratch[s], 0, CM_N, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = sub_lane; e < CM_M * CM_N; e += 32) {
        const uint row = row0 + sub_row + i * CM_M + e / CM_N, col = col0 + sub_col + j * CM_N + e % CM_N;
        if (row < M && col < N) store_c(row, col, c_scratch[s][e]);
      }
      subgroupBarrier();  // every lane has read the scratch before the next accumulator overwrites it
    }
}
