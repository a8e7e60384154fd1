#version 450
// Sliding-window ops on (N, C, H, W) images, following the CPU plugin (plugins/cpu/ops_window.cpp):
// im2col, col2im (overlaps summed), pool2d forward (max with i64 argmax h*W+w, or avg counting the
// padding) and pool2d backward. Geometry in ints: 0 N, 1 C, 2 H, 3 W, 4 OH, 5 OW, 6 KH, 7 KW,
// 8 SH, 9 SW, 10 PH, 11 PW, 12 DH, 13 DW, 14 mode (0 max, 1 avg).
// The 16-bit variants of im2col and col2im (what a convolution's products need under autocast) load
// into floats, sum col2im's taps in f32 and round once when storing; pooling runs in f32 only.
// kestrel-variant: im2col_f32 -DIM2COL=1
// kestrel-variant: im2col_f16 -DIM2COL=1 -DSTORE_T=float16_t
// kestrel-variant: im2col_bf16 -DIM2COL=1 -DBF16=1
// kestrel-variant: col2im_f32 -DCOL2IM=1
// kestrel-variant: col2im_f16 -DCOL2IM=1 -DSTORE_T=float16_t
// kestrel-variant: col2im_bf16 -DCOL2IM=1 -DBF16=1
// kestrel-variant: pool2d_f32 -DPOOL=1
// kestrel-variant: pool2d_backward_f32 -DPOOL_BACKWARD=1
// kestrel-variant: pool2d_backward_planes_f32 -DPOOL_BACKWARD=1 -DBY_PLANE=1
#include "common.glsl"
#include "math.glsl"
#define T float
#ifndef STORE_T
#define STORE_T float
#endif
layout(local_size_x = KESTREL_LOCAL_SIZE) in;

#define G_N PINT(0)
#define G_C PINT(1)
#define G_H PINT(2)
#define G_W PINT(3)
#define G_OH PINT(4)
#define G_OW PINT(5)
#define G_KH PINT(6)
#define G_KW PINT(7)
#define G_SH PINT(8)
#define G_SW PINT(9)
#define G_PH PINT(10)
#define G_PW PINT(11)
#define G_DH PINT(12)
#define G_DW PINT(13)
#define G_MODE PINT(14)

// Offset of (n, c, y, x) in the rank-4 descriptor t.
uint at4(uint t, int n, int c, int y, int x) {
  return P.tensors[t].offset + uint(n) * STRIDE(t, 0) + uint(c) * STRIDE(t, 1) +
         uint(y) * STRIDE(t, 2) + uint(x) * STRIDE(t, 3);
}

#if defined(IM2COL)
// tensors[0] image, tensors[1] columns (N, C*KH*KW, OH*OW); one invocation per column element.
layout(std430, set = 0, binding = 1) readonly buffer In { STORE_T data[]; } in_buf;
layout(std430, set = 0, binding = 2) writeonly buffer Out { STORE_T data[]; } out_buf;
void element(uint i) {
  int spatial = G_OH * G_OW, rows = G_C * G_KH * G_KW;
  int n = int(i) / (rows * spatial), r = (int(i) / spatial) % rows, s = int(i) % spatial;
  int c = r / (G_KH * G_KW), ky = (r / G_KW) % G_KH, kx = r % G_KW;
  int y = (s / G_OW) * G_SH - G_PH + ky * G_DH, x = (s % G_OW) * G_SW - G_PW + kx * G_DW;
  bool inside = y >= 0 && y < G_H && x >= 0 && x < G_W;
  out_buf.data[element_offset(1, i)] = STORE(inside ? LOAD(in_buf.data[at4(0, n, c, y, x)]) : 0.0);
}

void main() {
  for (uint i = flat_index(); i < P.tensors[1].numel; i += flat_stride()) element(i);
}
#elif defined(COL2IM)
// tensors[0] columns (rank 3, any strides), tensors[1] image; one invocation per image element,
// summing its taps in the CPU plugin's order (ky, then kx).
layout(std430, set = 0, binding = 1) readonly buffer In { STORE_T data[]; } in_buf;
layout(std430, set = 0, binding = 2) writeonly buffer Out { STORE_T data[]; } out_buf;
void element(uint i) {
  int x = int(i) % G_W, y = (int(i) / G_W) % G_H, c = (int(i) / (G_W * G_H)) % G_C, n = int(i) / (G_W * G_H * G_C);
  float sum = 0.0;
  for (int ky = 0; ky < G_KH; ++ky) {
    int ty = y + G_PH - ky * G_DH;
    if (ty < 0 || ty % G_SH != 0) continue;
    int oy = ty / G_SH;
    if (oy >= G_OH) continue;
    for (int kx = 0; kx < G_KW; ++kx) {
      int tx = x + G_PW - kx * G_DW;
      if (tx < 0 || tx % G_SW != 0) continue;
      int ox = tx / G_SW;
      if (ox >= G_OW) continue;
      int row = (c * G_KH + ky) * G_KW + kx;
      sum += LOAD(in_buf.data[P.tensors[0].offset + uint(n) * STRIDE(0, 0) + uint(row) * STRIDE(0, 1) +
                              uint(oy * G_OW + ox) * STRIDE(0, 2)]);
    }
  }
  out_buf.data[at4(1, n, c, y, x)] = STORE(sum);
}

void main() {
  for (uint i = flat_index(); i < P.tensors[1].numel; i += flat_stride()) element(i);
}
#elif defined(POOL)
// tensors[0] image, tensors[1] out (N, C, OH, OW), tensors[2] argmax (i64, max mode only).
layout(std430, set = 0, binding = 1) readonly buffer In { float data[]; } in_buf;
layout(std430, set = 0, binding = 2) writeonly buffer Out { float data[]; } out_buf;
layout(std430, set = 0, binding = 3) writeonly buffer Argmax { int64_t data[]; } argmax_buf;
void element(uint i) {
  int ox = int(i) % G_OW, oy = (int(i) / G_OW) % G_OH, c = (int(i) / (G_OW * G_OH)) % G_C, n = int(i) / (G_OW * G_OH * G_C);
  float best = -K_INF, sum = 0.0;
  int best_at = -1;
  for (int ky = 0; ky < G_KH; ++ky) {
    int y = oy * G_SH - G_PH + ky * G_DH;
    if (y < 0 || y >= G_H) continue;
    for (int kx = 0; kx < G_KW; ++kx) {
      int x = ox * G_SW - G_PW + kx * G_DW;
      if (x < 0 || x >= G_W) continue;
      float v = in_buf.data[at4(0, n, c, y, x)];
      sum += v;
      if (best_at < 0 || v > best || (isnan(v) && !isnan(best))) {
        best = v;
        best_at = y * G_W + x;
      }
    }
  }
  if (G_MODE == 0) {
    out_buf.data[at4(1, n, c, oy, ox)] = best;
    argmax_buf.data[at4(2, n, c, oy, ox)] = int64_t(best_at);
  } else {
    out_buf.data[at4(1, n, c, oy, ox)] = sum / float(G_KH * G_KW);  // padding counts (count_include_pad)
  }
}

void main() {
  for (uint i = flat_index(); i < P.tensors[1].numel; i += flat_stride()) element(i);
}
#elif defined(POOL_BACKWARD)
// tensors[0] dy (N, C, OH, OW), tensors[1] argmax (max mode), tensors[2] dx (N, C, H, W).
// Each dx element gets the terms the CPU plugin scatters into it, in its order (windows by row, then
// column), so the sums are the CPU's bit for bit and no two invocations write one element. Two ways:
// BY_PLANE, one invocation per (n, c) plane replays the CPU's loops (cheapest on a software device, whose
// integer divisions are scalar, while the plane's walk fits its loop budget); else one invocation per dx
// element gathers from the windows that cover it, as col2im does (the parallelism a GPU needs: a plane
// per invocation leaves most of its lanes idle).
layout(std430, set = 0, binding = 1) readonly buffer Dy { float data[]; } dy_buf;
layout(std430, set = 0, binding = 2) readonly buffer Argmax { int64_t data[]; } argmax_buf;
#if defined(BY_PLANE)
layout(std430, set = 0, binding = 3) buffer Dx { float data[]; } dx_buf;
void pool_plane(uint plane) {
  int n = int(plane) / G_C, c = int(plane) % G_C;
  for (int y = 0; y < G_H; ++y)
    for (int x = 0; x < G_W; ++x) dx_buf.data[at4(2, n, c, y, x)] = 0.0;
  float window_size = float(G_KH * G_KW);
  for (int oy = 0; oy < G_OH; ++oy)
    for (int ox = 0; ox < G_OW; ++ox) {
      float grad = dy_buf.data[at4(0, n, c, oy, ox)];
      if (G_MODE == 0) {
        int64_t at = argmax_buf.data[at4(1, n, c, oy, ox)];
        if (at >= 0 && at < int64_t(G_H * G_W)) {
          uint target = at4(2, n, c, int(at) / G_W, int(at) % G_W);
          dx_buf.data[target] += grad;
        }
        continue;
      }
      for (int ky = 0; ky < G_KH; ++ky) {
        int y = oy * G_SH - G_PH + ky * G_DH;
        if (y < 0 || y >= G_H) continue;
        for (int kx = 0; kx < G_KW; ++kx) {
          int x = ox * G_SW - G_PW + kx * G_DW;
          if (x < 0 || x >= G_W) continue;
          dx_buf.data[at4(2, n, c, y, x)] += grad / window_size;
        }
      }
    }
}

void main() {
  for (uint plane = flat_index(); plane < uint(G_N * G_C); plane += flat_stride()) pool_plane(plane);
}
#else
layout(std430, set = 0, binding = 3) writeonly buffer Dx { float data[]; } dx_buf;
void element(uint i) {
  int x = int(i) % G_W, y = (int(i) / G_W) % G_H, c = (int(i) / (G_W * G_H)) % G_C, n = int(i) / (G_W * G_H * G_C);
  float window_size = float(G_KH * G_KW), sum = 0.0;
  // The covering windows by row, then column: the taps from the last back.
  for (int ky = G_KH - 1; ky >= 0; --ky) {
    int ty = y + G_PH - ky * G_DH;
    if (ty < 0 || ty % G_SH != 0) continue;
    int oy = ty / G_SH;
    if (oy >= G_OH) continue;
    for (int kx = G_KW - 1; kx >= 0; --kx) {
      int tx = x + G_PW - kx * G_DW;
      if (tx < 0 || tx % G_SW != 0) continue;
      int ox = tx / G_SW;
      if (ox >= G_OW) continue;
      float grad = dy_buf.data[at4(0, n, c, oy, ox)];
      if (G_MODE == 0) {
        if (argmax_buf.data[at4(1, n, c, oy, ox)] == int64_t(y * G_W + x)) sum += grad;
      } else {
        sum += grad / window_size;
      }
    }
  }
  dx_buf.data[at4(2, n, c, y, x)] = sum;
}

void main() {
  for (uint i = flat_index(); i < P.tensors[2].numel; i += flat_stride()) element(i);
}
#endif
#endif
