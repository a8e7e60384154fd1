// The tiled product that gemm.comp and conv.comp share: a workgroup computes a TILE_MN x TILE_MN block
// of C = A @ B; each invocation keeps a BLOCK x BLOCK block of sums in registers (rows ly + THREADS i,
// columns lx + THREADS j), and the operands pass through shared memory in slices of TILE_K along K. The
// WIDE variants (8 x 8 sums on 8 x 8 invocations: 64 multiply-adds per 16 shared-memory reads) are for
// software devices such as lavapipe, where every shared access is a real memory access; there the others
// (4 x 4 sums on 16 x 16 invocations: 16 per 8) took about twice the time (bench/results/2026-11-26-vm-vulkan-
// gemm-tile-k.md). GPUs keep the latter, with 4x the threads per tile for small products, until measured;
// the LARGE variants (8 x 8 sums on 16 x 16 invocations: 128 x 128 tiles) are the
// usual shape of a fast f32 GEMM on GPUs, for large products, to be measured against them there.
// The including shader defines, before including this:
//   float load_a(uint row, uint k)   element (row, k) of A (M x K), called only inside it
//   float load_b(uint k, uint col)   element (k, col) of B (K x N), likewise
#if defined(LARGE)
#define THREADS 16
#define BLOCK 8
#elif defined(WIDE)
#define THREADS 8
#define BLOCK 8
#else
#define THREADS 16
#define BLOCK 4
#endif
#define TILE_MN (THREADS * BLOCK)
#define TILE_K 16  // 32: no faster with 8 x 8 blocks, and its 16.4 KiB of tiles pass Vulkan's 16 KiB minimum
// (LARGE's 128-row tiles take 16.6 KiB even at 16: the host picks them only where the device has room.)
layout(local_size_x = THREADS, local_size_y = THREADS) in;

// +1 keeps both ways of filling and reading a tile off one bank on real GPUs.
shared float a_tile[TILE_MN][TILE_K + 1];
shared float b_tile[TILE_K][TILE_MN + 1];

// acc[i][j] = sum over k of A(row0 + ly + THREADS i, k) B(k, col0 + lx + THREADS j), for the workgroup's
// block at (row0, col0). Neighbouring invocations fill neighbouring elements along K where a_along_k
// (b_along_n: along N), else along M (K): whichever way the operand's memory runs, so that an operand is
// not read a stride apart.
void multiply_tiles(uint M, uint N, uint K, uint row0, uint col0, bool a_along_k, bool b_along_n,
                    out float acc[BLOCK][BLOCK]) {
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y, lane = ly * THREADS + lx;
  for (int i = 0; i < BLOCK; ++i)
    for (int j = 0; j < BLOCK; ++j) acc[i][j] = 0.0;
  for (uint k0 = 0; k0 < K; k0 += TILE_K) {
    // Each invocation loads TILE_MN * TILE_K / THREADS^2 elements of each TILE_MN x 16 (A) and 16 x TILE_MN
    // (B) slice.
    for (uint e = lane; e < TILE_MN * TILE_K; e += THREADS * THREADS) {
      uint r = a_along_k ? e / TILE_K : e % TILE_MN, k = a_along_k ? e % TILE_K : e / TILE_MN;  // A: row r, column k
      uint gr = row0 + r, gk = k0 + k;
      a_tile[r][k] = (gr < M && gk < K) ? load_a(gr, gk) : 0.0;
      uint bk = b_along_n ? e / TILE_MN : e % TILE_K, c = b_along_n ? e % TILE_MN : e / TILE_K;  // B: row bk, column c
      uint gbk = k0 + bk, gc = col0 + c;
      b_tile[bk][c] = (gbk < K && gc < N) ? load_b(gbk, gc) : 0.0;
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
}
