// Sliding-window ops on (N, C, H, W) tensors: im2col/col2im (convolution as GEMM) and 2-D pooling.
// Inputs may have any strides; outputs are contiguous (as on the CPU backend).
//
// Every kernel has one thread per output element and gathers what it needs, so nothing is written by
// two threads: col2im and the pooling backward pass walk the windows that cover an input pixel instead
// of scattering with atomics. That keeps them deterministic and available for f16/bf16 too.
#include <cmath>

#include "kestrel/plugin_shapes.hpp"
#include "cuda_kernels.cuh"

namespace kestrel_cuda {

namespace {

using Geometry = kestrel::plugin_shapes::WindowGeometry;
constexpr auto geometry = kestrel::plugin_shapes::window_geometry;

struct Strides4 {
  int64_t s[4];
  __device__ int64_t at(int64_t n, int64_t c, int64_t h, int64_t w) const { return n * s[0] + c * s[1] + h * s[2] + w * s[3]; }
};
Strides4 strides4(const TensorRef& t) { return Strides4{{t.strides[0], t.strides[1], t.strides[2], t.strides[3]}}; }

// out (N, C*KH*KW, OH*OW), one thread per element.
template <class E>
__global__ void im2col_kernel(Geometry g, const typename E::storage* x, Strides4 xs, typename E::storage* cols,
                              int64_t total) {
  KESTREL_GRID_STRIDE_LOOP(i, total) {
    const int64_t spatial = g.oh * g.ow, rows = g.c * g.kh * g.kw;
    int64_t pos = i % spatial, row = (i / spatial) % rows, n = i / (spatial * rows);
    int64_t c = row / (g.kh * g.kw);
    int ky = int((row / g.kw) % g.kh), kx = int(row % g.kw);
    int64_t y = (pos / g.ow) * g.sh - g.ph + int64_t(ky) * g.dh;
    int64_t xx = (pos % g.ow) * g.sw - g.pw + int64_t(kx) * g.dw;
    bool inside = y >= 0 && y < g.h && xx >= 0 && xx < g.w;
    cols[i] = inside ? x[xs.at(n, c, y, xx)] : E::store(typename E::compute(0));
  }
}

// out (N, C, H, W): each pixel sums the column entries that read it (overlaps summed).
template <class E>
__global__ void col2im_kernel(Geometry g, const typename E::storage* cols, int64_t cs0, int64_t cs1, int64_t cs2,
                              typename E::storage* x, int64_t total) {
  using C = typename E::compute;
  KESTREL_GRID_STRIDE_LOOP(i, total) {
    int64_t xx = i % g.w, y = (i / g.w) % g.h, c = (i / (g.w * g.h)) % g.c, n = i / (g.w * g.h * g.c);
    C sum = 0;  // accumulate in the compute type so f16/bf16 do not round at every step
    for (int ky = 0; ky < g.kh; ++ky) {
      int64_t ty = y + g.ph - int64_t(ky) * g.dh;
      if (ty < 0 || ty % g.sh) continue;
      int64_t oy = ty / g.sh;
      if (oy >= g.oh) continue;
      for (int kx = 0; kx < g.kw; ++kx) {
        int64_t tx = xx + g.pw - int64_t(kx) * g.dw;
        if (tx < 0 || tx % g.sw) continue;
        int64_t ox = tx / g.sw;
        if (ox >= g.ow) continue;
        int64_t row = (c * g.kh + ky) * g.kw + kx;
        sum += E::load(cols[n * cs0 + row * cs1 + (oy * g.ow + ox) * cs2]);
      }
    }
    x[i] = E::store(sum);
  }
}

// out (N, C, OH, OW) [+ argmax (i64) as h * W + w of the input plane]. The first maximum wins, and a NaN
// beats everything (as the CPU backend and torch).
template <class E>
__global__ void pool_kernel(Geometry g, bool max_mode, const typename E::storage* x, Strides4 xs,
                            typename E::storage* y, long long* argmax, int64_t total) {
  using C = typename E::compute;
  KESTREL_GRID_STRIDE_LOOP(i, total) {
    int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, c = (i / (g.ow * g.oh)) % g.c, n = i / (g.ow * g.oh * g.c);
    C best = C(-INFINITY), sum = 0;
    long long best_at = -1;
    for (int ky = 0; ky < g.kh; ++ky) {
      int64_t yy = oy * g.sh - g.ph + int64_t(ky) * g.dh;
      if (yy < 0 || yy >= g.h) continue;
      for (int kx = 0; kx < g.kw; ++kx) {
        int64_t xx = ox * g.sw - g.pw + int64_t(kx) * g.dw;
        if (xx < 0 || xx >= g.w) continue;
        C v = E::load(x[xs.at(n, c, yy, xx)]);
        sum += v;
        if (best_at < 0 || v > best || (v != v && best == best)) {
          best = v;
          best_at = yy * g.w + xx;
        }
      }
    }
    if (max_mode) {
      y[i] = E::store(best);
      argmax[i] = best_at;
    } else {
      y[i] = E::store(sum / C(g.kh * g.kw));  // padding counts, as torch's count_include_pad=True
    }
  }
}

// dx (N, C, H, W): each pixel sums the gradients of the windows that cover it — for max pooling only
// those whose recorded argmax is this pixel.
template <class E>
__global__ void pool_backward_kernel(Geometry g, bool max_mode, const typename E::storage* dy, Strides4 dys,
                                     const long long* argmax, Strides4 as, typename E::storage* dx, int64_t total) {
  using C = typename E::compute;
  KESTREL_GRID_STRIDE_LOOP(i, total) {
    int64_t xx = i % g.w, y = (i / g.w) % g.h, c = (i / (g.w * g.h)) % g.c, n = i / (g.w * g.h * g.c);
    const long long here = y * g.w + xx;
    C sum = 0;
    for (int ky = 0; ky < g.kh; ++ky) {
      int64_t ty = y + g.ph - int64_t(ky) * g.dh;
      if (ty < 0 || ty % g.sh) continue;
      int64_t oy = ty / g.sh;
      if (oy >= g.oh) continue;
      for (int kx = 0; kx < g.kw; ++kx) {
        int64_t tx = xx + g.pw - int64_t(kx) * g.dw;
        if (tx < 0 || tx % g.sw) continue;
        int64_t ox = tx / g.sw;
        if (ox >= g.ow) continue;
        if (max_mode) {
          // A pixel inside several windows that chose it receives each of their gradients; a window with
          // dilation can reach the pixel through only one (ky, kx), so nothing is counted twice.
          if (argmax[as.at(n, c, oy, ox)] == here) sum += E::load(dy[dys.at(n, c, oy, ox)]);
        } else {
          sum += E::load(dy[dys.at(n, c, oy, ox)]) / C(g.kh * g.kw);
        }
      }
    }
    dx[i] = E::store(sum);
  }
}

}  // namespace

bool supports_window(const kestrel_op& op) {
  // Outputs contiguous: the pooled values and max pooling's argmax alike.
  return kestrel::plugin_shapes::window_fits(op) && is_float_dtype(op.outputs[0].dtype) &&
         kestrel::plugin_shapes::outputs_contiguous(op);
}

void launch_window(kestrel_stream& s, const kestrel_op& op) {
  const auto& p = params_of<kestrel_window_params>(op, "window op");
  const TensorRef in = ref(op.inputs[0]), out = ref(op.outputs[0]);
  const int64_t total = out.numel();
  if (total == 0) return;
  const bool max_mode = p.mode == KESTREL_POOL_MAX;
  dispatch_float(out.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    const S* x = reinterpret_cast<const S*>(in.base);
    S* y = reinterpret_cast<S*>(out.base);
    const unsigned grid = grid_for(total);
    switch (op.kind) {
      case KESTREL_OP_IM2COL:
        im2col_kernel<E><<<grid, kBlock, 0, s.cuda>>>(geometry(p, op.inputs[0]), x, strides4(in), y, total);
        break;
      case KESTREL_OP_COL2IM:
        col2im_kernel<E><<<grid, kBlock, 0, s.cuda>>>(geometry(p, op.outputs[0]), x, in.strides[0], in.strides[1],
                                                      in.strides[2], y, total);
        break;
      case KESTREL_OP_POOL2D: {
        long long* argmax = max_mode ? reinterpret_cast<long long*>(ref(op.outputs[1]).base) : nullptr;
        pool_kernel<E><<<grid, kBlock, 0, s.cuda>>>(geometry(p, op.inputs[0]), max_mode, x, strides4(in), y, argmax,
                                                    total);
        break;
      }
      default: {
        const TensorRef idx = max_mode ? ref(op.inputs[1]) : in;
        pool_backward_kernel<E><<<grid, kBlock, 0, s.cuda>>>(
            geometry(p, op.outputs[0]), max_mode, x, strides4(in),
            max_mode ? reinterpret_cast<const long long*>(idx.base) : nullptr, strides4(idx), y, total);
        break;
      }
    }
  });
  check_launch("window op");
}

}  // namespace kestrel_cuda
