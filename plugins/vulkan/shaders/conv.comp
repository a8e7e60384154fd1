#version 450
// The fused convolution family (KESTREL_OP_CONV2D, _BACKWARD_DATA, _BACKWARD_FILTER, ABI 1.10) as
// implicit GEMMs: tiles.glsl's product with operands read straight from the (N, C, H, W) tensors, so the
// (C*KH*KW, N*OH*OW) column matrix of the composed path is never written. With L = OH*OW:
//   FORWARD  y (O x N*L)  = w (O x C*KH*KW) @ columns of x, + bias, ReLU; stored as (N, O, OH, OW).
//   DATA     dx (C x N*H*W) = w^T (C x O*KH*KW) @ dy' (each input pixel's windows); stored as (N, C, H, W).
//   FILTER   dw (O x C*KH*KW) = dy' (O x N*L) @ columns of x transposed.
//   BIAS     db (O) = dy' summed over images and pixels: one workgroup per channel (workgroup_fold.glsl).
// dy' is dy, or with ReLU dy where y > 0 and 0 elsewhere (plugin.h). Tensors are contiguous; tensors[t]
// gives each one's offset: FORWARD 0 x, 1 w, 2 y, 3 bias; DATA 0 dy, 1 w, 2 dx, 3 y; FILTER and BIAS 0 dy,
// 1 x, 2 dw or db, 3 y; bindings 1-4 in the same order. Geometry in ints: 0 N, 1 C, 2 H, 3 W, 4 O, 5 KH,
// 6 KW, 7 OH, 8 OW, 9 SH, 10 SW, 11 PH, 12 PW, 13 DH, 14 DW, 15 ReLU; uints[0] = bias (FORWARD).
// FILTER split over the batch (uints[1] = 1): the grid's z is a slice of uints[2] images, whose sum goes
// to f32 partials (binding 5) at z * O*C*KH*KW + the weight's element; the host then adds the slices
// (reduce.comp's PARTIALS). That fills a GPU when the weight is a tile or two (a first layer's) and keeps
// each invocation's walk within a software device's loop budget.
// STORE_T is the stored element type of every tensor: f16 and bf16 are loaded into floats, the products
// and sums run in f32, and each result is rounded once when stored.
// kestrel-variant: conv_forward_f32 -DFORWARD=1 -DSTORE_T=float
// kestrel-variant: conv_forward_f32_wide -DFORWARD=1 -DSTORE_T=float -DWIDE=1
// kestrel-variant: conv_data_f32 -DDATA=1 -DSTORE_T=float
// kestrel-variant: conv_data_f32_wide -DDATA=1 -DSTORE_T=float -DWIDE=1
// kestrel-variant: conv_filter_f32 -DFILTER=1 -DSTORE_T=float
// kestrel-variant: conv_filter_f32_wide -DFILTER=1 -DSTORE_T=float -DWIDE=1
// kestrel-variant: conv_bias_f32 -DBIAS=1 -DSTORE_T=float
// kestrel-variant: conv_forward_f16 -DFORWARD=1 -DSTORE_T=float16_t
// kestrel-variant: conv_forward_f16_wide -DFORWARD=1 -DSTORE_T=float16_t -DWIDE=1
// kestrel-variant: conv_data_f16 -DDATA=1 -DSTORE_T=float16_t
// kestrel-variant: conv_data_f16_wide -DDATA=1 -DSTORE_T=float16_t -DWIDE=1
// kestrel-variant: conv_filter_f16 -DFILTER=1 -DSTORE_T=float16_t
// kestrel-variant: conv_filter_f16_wide -DFILTER=1 -DSTORE_T=float16_t -DWIDE=1
// kestrel-variant: conv_bias_f16 -DBIAS=1 -DSTORE_T=float16_t
// kestrel-variant: conv_forward_bf16 -DFORWARD=1 -DBF16=1
// kestrel-variant: conv_forward_bf16_wide -DFORWARD=1 -DBF16=1 -DWIDE=1
// kestrel-variant: conv_data_bf16 -DDATA=1 -DBF16=1
// kestrel-variant: conv_data_bf16_wide -DDATA=1 -DBF16=1 -DWIDE=1
// kestrel-variant: conv_filter_bf16 -DFILTER=1 -DBF16=1
// kestrel-variant: conv_filter_bf16_wide -DFILTER=1 -DBF16=1 -DWIDE=1
// kestrel-variant: conv_bias_bf16 -DBIAS=1 -DBF16=1
// kestrel-variant: conv_bias_f32_subgroups -DBIAS=1 -DSTORE_T=float -DSUBGROUPS=1
// kestrel-variant: conv_bias_f16_subgroups -DBIAS=1 -DSTORE_T=float16_t -DSUBGROUPS=1
// kestrel-variant: conv_bias_bf16_subgroups -DBIAS=1 -DBF16=1 -DSUBGROUPS=1
// kestrel-variant: conv_forward_f32_large -DFORWARD=1 -DSTORE_T=float -DLARGE=1
// kestrel-variant: conv_data_f32_large -DDATA=1 -DSTORE_T=float -DLARGE=1
// kestrel-variant: conv_filter_f32_large -DFILTER=1 -DSTORE_T=float -DLARGE=1
// kestrel-variant: conv_forward_f16_large -DFORWARD=1 -DSTORE_T=float16_t -DLARGE=1
// kestrel-variant: conv_data_f16_large -DDATA=1 -DSTORE_T=float16_t -DLARGE=1
// kestrel-variant: conv_filter_f16_large -DFILTER=1 -DSTORE_T=float16_t -DLARGE=1
// kestrel-variant: conv_forward_bf16_large -DFORWARD=1 -DBF16=1 -DLARGE=1
// kestrel-variant: conv_data_bf16_large -DDATA=1 -DBF16=1 -DLARGE=1
// kestrel-variant: conv_filter_bf16_large -DFILTER=1 -DBF16=1 -DLARGE=1
#define T float
#include "common.glsl"
layout(std430, set = 0, binding = 1) readonly buffer T0 { STORE_T data[]; } t0;
layout(std430, set = 0, binding = 2) readonly buffer T1 { STORE_T data[]; } t1;
layout(std430, set = 0, binding = 3) writeonly buffer T2 { STORE_T data[]; } t2;
layout(std430, set = 0, binding = 4) readonly buffer T3 { STORE_T data[]; } t3;
#ifdef FILTER
layout(std430, set = 0, binding = 5) writeonly buffer T4 { float data[]; } t4;
uint image0 = 0u;  // the first image of this workgroup's slice of the batch
#endif

#define G_N uint(PINT(0))
#define G_C uint(PINT(1))
#define G_H int(PINT(2))
#define G_W int(PINT(3))
#define G_O uint(PINT(4))
#define G_KH uint(PINT(5))
#define G_KW uint(PINT(6))
#define G_OH uint(PINT(7))
#define G_OW uint(PINT(8))
#define G_SH int(PINT(9))
#define G_SW int(PINT(10))
#define G_PH int(PINT(11))
#define G_PW int(PINT(12))
#define G_DH int(PINT(13))
#define G_DW int(PINT(14))
#define RELU (PINT(15) != 0)
#define AT(t) P.tensors[t].offset

#ifdef FORWARD
#define X_DATA t0.data  // x is tensor 0 forward, 1 for FILTER
#define X_AT AT(0)
#else
#define X_DATA t1.data
#define X_AT AT(1)
#endif

// x (n, c) at row iy, column ix of the image, 0 in the padding.
float image(uint n, uint c, int iy, int ix) {
  if (iy < 0 || iy >= G_H || ix < 0 || ix >= G_W) return 0.0;
  return LOAD(X_DATA[X_AT + ((n * G_C + c) * uint(G_H) + uint(iy)) * uint(G_W) + uint(ix)]);
}

// dy' at (n, o, pixel l of the output plane): dy (tensor 0), masked by y (tensor 3) with ReLU.
float output_grad(uint n, uint o, uint l) {
  uint at = (n * G_O + o) * G_OH * G_OW + l;
  float g = LOAD(t0.data[AT(0) + at]);
  return RELU && !(LOAD(t3.data[AT(3) + at]) > 0.0) ? 0.0 : g;
}

// The window tap of row k of a column matrix: input channel c, kernel row ky, column kx.
void tap(uint k, out uint c, out int ky, out int kx) {
  uint taps = G_KH * G_KW;
  c = k / taps;
  uint t = k - c * taps;
  ky = int(t / G_KW);
  kx = int(t - uint(ky) * G_KW);
}

#if defined(FORWARD)
float load_a(uint o, uint k) { return LOAD(t1.data[AT(1) + o * G_C * G_KH * G_KW + k]); }
float load_b(uint k, uint col) {  // column col = n * L + l of x's column matrix
  uint c;
  int ky, kx;
  tap(k, c, ky, kx);
  uint spatial = G_OH * G_OW, n = col / spatial, l = col - n * spatial, oy = l / G_OW, ox = l - oy * G_OW;
  return image(n, c, int(oy) * G_SH - G_PH + ky * G_DH, int(ox) * G_SW - G_PW + kx * G_DW);
}
#elif defined(DATA)
float load_a(uint c, uint k) {  // w^T: row c, column k = o * KH*KW + tap
  uint taps = G_KH * G_KW, o = k / taps;
  return LOAD(t1.data[AT(1) + (o * G_C + c) * taps + (k - o * taps)]);
}
float load_b(uint k, uint col) {  // the output gradient input pixel col = (n, h, w) receives through tap k
  uint taps = G_KH * G_KW, o = k / taps, t = k - o * taps;
  int ky = int(t / G_KW), kx = int(t - uint(ky) * G_KW);
  uint plane = uint(G_H * G_W), n = col / plane, p = col - n * plane;
  int h = int(p) / G_W, w = int(p) - h * G_W;
  int ty = h + G_PH - ky * G_DH, tx = w + G_PW - kx * G_DW;
  if (ty < 0 || tx < 0 || ty % G_SH != 0 || tx % G_SW != 0) return 0.0;
  uint oy = uint(ty / G_SH), ox = uint(tx / G_SW);
  if (oy >= G_OH || ox >= G_OW) return 0.0;
  return output_grad(n, o, oy * G_OW + ox);
}
#elif defined(FILTER)
float load_a(uint o, uint k) {  // dy': row o, column k = n * L + l (n within the slice)
  uint spatial = G_OH * G_OW, n = k / spatial;
  return output_grad(image0 + n, o, k - n * spatial);
}
float load_b(uint k, uint j) {  // x's column matrix transposed: row k = n * L + l, column j = tap
  uint c;
  int ky, kx;
  tap(j, c, ky, kx);
  uint spatial = G_OH * G_OW, n = k / spatial, l = k - n * spatial, oy = l / G_OW, ox = l - oy * G_OW;
  return image(image0 + n, c, int(oy) * G_SH - G_PH + ky * G_DH, int(ox) * G_SW - G_PW + kx * G_DW);
}
#endif

#ifndef BIAS
#include "tiles.glsl"

void main() {
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  const uint row0 = gl_WorkGroupID.y * TILE_MN, col0 = gl_WorkGroupID.x * TILE_MN;
  const uint taps = G_KH * G_KW, spatial = G_OH * G_OW;
#if defined(FORWARD)
  const uint M = G_O, N = G_N * spatial, K = G_C * taps;
  const bool a_along_k = true, b_along_n = true;  // w's rows; neighbouring output pixels
#elif defined(DATA)
  const uint M = G_C, N = G_N * uint(G_H * G_W), K = G_O * taps;
  const bool a_along_k = true, b_along_n = true;  // w's taps; neighbouring input pixels
#else
  const bool split = PUINT(1) != 0u;
  if (split) image0 = gl_WorkGroupID.z * PUINT(2);
  const uint M = G_O, N = G_C * taps, K = (split ? min(PUINT(2), G_N - image0) : G_N) * spatial;
  const bool a_along_k = true, b_along_n = false;  // neighbouring output pixels, for both operands
#endif
  float acc[BLOCK][BLOCK];
  multiply_tiles(M, N, K, row0, col0, a_along_k, b_along_n, acc);
  for (int i = 0; i < BLOCK; ++i) {
    uint row = row0 + ly + THREADS * i;
    if (row >= M) continue;
    for (int j = 0; j < BLOCK; ++j) {
      uint col = col0 + lx + THREADS * j;
      if (col >= N) continue;
#if defined(FORWARD)
      uint n = col / spatial;
      float v = acc[i][j];
      if (PUINT(0) != 0u) v += LOAD(t3.data[AT(3) + row]);
      if (RELU) v = isnan(v) ? v : max(v, 0.0);  // NaN stays NaN, as torch's relu (see unary.comp)
      t2.data[AT(2) + (n * G_O + row) * spatial + (col - n * spatial)] = STORE(v);
#elif defined(DATA)
      uint plane = uint(G_H * G_W), n = col / plane;
      t2.data[AT(2) + (n * G_C + row) * plane + (col - n * plane)] = STORE(acc[i][j]);
#else
      if (split) t4.data[gl_WorkGroupID.z * M * N + row * N + col] = acc[i][j];
      else t2.data[AT(2) + row * N + col] = STORE(acc[i][j]);
#endif
    }
  }
}
#else
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
#include "math.glsl"
#include "workgroup_fold.glsl"

// One workgroup per channel o (gl_WorkGroupID.x): its invocations fold strided shares of the N*L
// gradients in a fixed order, then meet through workgroup_fold.glsl.
void main() {
  const uint o = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x, spatial = G_OH * G_OW;
  float sum = 0.0;
  for (uint e = lid; e < G_N * spatial; e += KESTREL_LOCAL_SIZE) {
    uint n = e / spatial;
    sum += output_grad(n, o, e - n * spatial);
  }
  sum = workgroup_fold(FOLD_SUM, sum);
  if (lid == 0u) t2.data[AT(2) + o] = STORE(sum);
}
#endif
