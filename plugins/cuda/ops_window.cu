// Sliding-window ops on (N, C, H, W) tensors: im2col/col2im (convolution as GEMM) and 2-D pooling.
// Inputs may have any strides; outputs are contiguous (as on the CPU backend).
//
// Every kernel has one thread per output element and gathers what it needs, so nothing is written by
// two threads: col2im and the pooling backward pass walk the windows that cover an input pixel instead
// of scattering with atomics. That keeps them deterministic and available for f16/bf16 too.
#include <algorithm>
#include <cmath>
#include <cstdint>

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

// The kernels decode flat indices with division, which is what they spend their time on: I is int where
// every index of both tensors is below 2^31 (32-bit division costs a fraction of 64-bit), else int64_t.
// Strided addresses (Strides4::at) stay 64-bit.

// out (N, C*KH*KW, OH*OW), or with batch_inner (C*KH*KW, N, OH*OW); one thread per element.
template <class E, class I>
__global__ void im2col_kernel(Geometry g, const typename E::storage* x, Strides4 xs, typename E::storage* cols,
                              int64_t total, bool batch_inner) {
  const I ow = I(g.ow), spatial = I(g.oh) * ow, taps = I(g.kh) * g.kw, rows = I(g.c) * taps, images = I(g.n);
  KESTREL_GRID_STRIDE_LOOP(k, total) {
    const I i = I(k), pos = i % spatial, outer = i / spatial;  // outer: n * rows + row, or row * N + n
    const I row = batch_inner ? outer / images : outer % rows, n = batch_inner ? outer % images : outer / rows;
    const I c = row / taps, tap = row - c * taps, ky = tap / g.kw, kx = tap - ky * g.kw;
    const I y = (pos / ow) * g.sh - g.ph + ky * g.dh;
    const I xx = (pos % ow) * g.sw - g.pw + kx * g.dw;
    const bool inside = y >= 0 && y < g.h && xx >= 0 && xx < g.w;
    cols[k] = inside ? x[xs.at(n, c, y, xx)] : E::store(typename E::compute(0));
  }
}

// out (N, C, H, W): each pixel sums the column entries that read it (overlaps summed).
template <class E, class I>
__global__ void col2im_kernel(Geometry g, const typename E::storage* cols, int64_t cs0, int64_t cs1, int64_t cs2,
                              typename E::storage* x, int64_t total) {
  using C = typename E::compute;
  const I w = I(g.w), h = I(g.h), channels = I(g.c), oh = I(g.oh), ow = I(g.ow);
  KESTREL_GRID_STRIDE_LOOP(k, total) {
    const I i = I(k), xx = i % w, y = (i / w) % h, c = (i / (w * h)) % channels, n = i / (w * h * channels);
    C sum = 0;  // accumulate in the compute type so f16/bf16 do not round at every step
    for (int ky = 0; ky < g.kh; ++ky) {
      const I ty = y + g.ph - I(ky) * g.dh;
      if (ty < 0 || ty % g.sh) continue;
      const I oy = ty / g.sh;
      if (oy >= oh) continue;
      for (int kx = 0; kx < g.kw; ++kx) {
        const I tx = xx + g.pw - I(kx) * g.dw;
        if (tx < 0 || tx % g.sw) continue;
        const I ox = tx / g.sw;
        if (ox >= ow) continue;
        const int64_t row = (int64_t(c) * g.kh + ky) * g.kw + kx;
        sum += E::load(cols[n * cs0 + row * cs1 + (int64_t(oy) * ow + ox) * cs2]);
      }
    }
    x[k] = E::store(sum);
  }
}

// out (N, C, OH, OW) [+ argmax (i64) as h * W + w of the input plane]. The first maximum wins, and a NaN
// beats everything (as the CPU backend and torch).
template <class E, class I>
__global__ void pool_kernel(Geometry g, bool max_mode, const typename E::storage* x, Strides4 xs,
                            typename E::storage* y, long long* argmax, int64_t total) {
  using C = typename E::compute;
  const I ow = I(g.ow), oh = I(g.oh), channels = I(g.c);
  KESTREL_GRID_STRIDE_LOOP(k, total) {
    const I i = I(k), ox = i % ow, oy = (i / ow) % oh, c = (i / (ow * oh)) % channels, n = i / (ow * oh * channels);
    C best = C(-INFINITY), sum = 0;
    long long best_at = -1;
    for (int ky = 0; ky < g.kh; ++ky) {
      const I yy = oy * g.sh - g.ph + I(ky) * g.dh;
      if (yy < 0 || yy >= g.h) continue;
      for (int kx = 0; kx < g.kw; ++kx) {
        const I xx = ox * g.sw - g.pw + I(kx) * g.dw;
        if (xx < 0 || xx >= g.w) continue;
        C v = E::load(x[xs.at(n, c, yy, xx)]);
        sum += v;
        if (best_at < 0 || v > best || (v != v && best == best)) {
          best = v;
          best_at = (long long)yy * g.w + xx;
        }
      }
    }
    if (max_mode) {
      y[k] = E::store(best);
      argmax[k] = best_at;
    } else {
      y[k] = E::store(sum / C(g.kh * g.kw));  // padding counts, as torch's count_include_pad=True
    }
  }
}

// dx (N, C, H, W): each pixel sums the gradients of the windows that cover it — for max pooling only
// those whose recorded argmax is this pixel.
template <class E, class I>
__global__ void pool_backward_kernel(Geometry g, bool max_mode, const typename E::storage* dy, Strides4 dys,
                                     const long long* argmax, Strides4 as, typename E::storage* dx, int64_t total) {
  using C = typename E::compute;
  const I w = I(g.w), h = I(g.h), channels = I(g.c), oh = I(g.oh), ow = I(g.ow);
  KESTREL_GRID_STRIDE_LOOP(k, total) {
    const I i = I(k), xx = i % w, y = (i / w) % h, c = (i / (w * h)) % channels, n = i / (w * h * channels);
    const long long here = (long long)y * g.w + xx;
    C sum = 0;
    for (int ky = 0; ky < g.kh; ++ky) {
      const I ty = y + g.ph - I(ky) * g.dh;
      if (ty < 0 || ty % g.sh) continue;
      const I oy = ty / g.sh;
      if (oy >= oh) continue;
      for (int kx = 0; kx < g.kw; ++kx) {
        const I tx = xx + g.pw - I(kx) * g.dw;
        if (tx < 0 || tx % g.sw) continue;
        const I ox = tx / g.sw;
        if (ox >= ow) continue;
        if (max_mode) {
          // A pixel inside several windows that chose it receives each of their gradients; a window with
          // dilation can reach the pixel through only one (ky, kx), so nothing is counted twice.
          if (argmax[as.at(n, c, oy, ox)] == here) sum += E::load(dy[dys.at(n, c, oy, ox)]);
        } else {
          sum += E::load(dy[dys.at(n, c, oy, ox)]) / C(g.kh * g.kw);
        }
      }
    }
    dx[k] = E::store(sum);
  }
}

// dx (N, C, H, W) of max pooling whose windows do not overlap: a pixel lies in at most one window, so at
// most one argmax names it, and one thread per window can store its gradient there, into dx zeroed
// first. No element is written twice, so this stays deterministic; it runs a thread per window instead
// of per pixel, without the gather's per-pixel divisions.
template <class E, class I>
__global__ void max_pool_backward_scatter_kernel(Geometry g, const typename E::storage* dy, Strides4 dys,
                                                 const long long* argmax, Strides4 as, typename E::storage* dx,
                                                 int64_t windows) {
  const I ow = I(g.ow), oh = I(g.oh), channels = I(g.c);
  KESTREL_GRID_STRIDE_LOOP(k, windows) {
    const I i = I(k), ox = i % ow, oy = (i / ow) % oh, c = (i / (ow * oh)) % channels, n = i / (ow * oh * channels);
    const long long at = argmax[as.at(n, c, oy, ox)];  // h * W + w in the plane; -1 for a window of padding only
    if (at >= 0 && at < g.h * g.w) dx[(int64_t(n) * g.c + c) * (g.h * g.w) + at] = dy[dys.at(n, c, oy, ox)];
  }
}

// Whether the kernels may index in int (I): every flat index of the two tensors, and every row or column
// a window reaches in the padded image, below 2^31.
bool narrow_indices(const Geometry& g, int64_t largest_numel) {
  return largest_numel <= INT32_MAX && g.h + 2 * int64_t(g.ph) <= INT32_MAX && g.w + 2 * int64_t(g.pw) <= INT32_MAX;
}

// Whether no two windows share a pixel: each window's extent along an axis fits within its stride.
bool windows_disjoint(const Geometry& g) {
  return g.sh >= g.dh * (g.kh - 1) + 1 && g.sw >= g.dw * (g.kw - 1) + 1;
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
  // The geometry of the image side: the input of im2col and pool2d, the output of the others.
  const bool image_in = op.kind == KESTREL_OP_IM2COL || op.kind == KESTREL_OP_POOL2D;
  const bool narrow = narrow_indices(geometry(p, image_in ? op.inputs[0] : op.outputs[0]), std::max(total, in.numel()));
  dispatch_float(out.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    const S* x = reinterpret_cast<const S*>(in.base);
    S* y = reinterpret_cast<S*>(out.base);
    const unsigned grid = grid_for(total);
    auto launch = [&](auto index) {
      using I = decltype(index);
      switch (op.kind) {
        case KESTREL_OP_IM2COL:
          im2col_kernel<E, I><<<grid, kBlock, 0, s.cuda>>>(geometry(p, op.inputs[0]), x, strides4(in), y, total,
                                                           false);
          break;
        case KESTREL_OP_COL2IM:
          col2im_kernel<E, I><<<grid, kBlock, 0, s.cuda>>>(geometry(p, op.outputs[0]), x, in.strides[0],
                                                           in.strides[1], in.strides[2], y, total);
          break;
        case KESTREL_OP_POOL2D: {
          long long* argmax = max_mode ? reinterpret_cast<long long*>(ref(op.outputs[1]).base) : nullptr;
          pool_kernel<E, I><<<grid, kBlock, 0, s.cuda>>>(geometry(p, op.inputs[0]), max_mode, x, strides4(in), y,
                                                         argmax, total);
          break;
        }
        default: {
          const TensorRef idx = max_mode ? ref(op.inputs[1]) : in;
          const Geometry g = geometry(p, op.outputs[0]);
          if (max_mode && windows_disjoint(g)) {
            check_cuda(cudaMemsetAsync(y, 0, uint64_t(total) * sizeof(S), s.cuda), "zeroing a pooling gradient");
            max_pool_backward_scatter_kernel<E, I><<<grid_for(in.numel()), kBlock, 0, s.cuda>>>(
                g, x, strides4(in), reinterpret_cast<const long long*>(idx.base), strides4(idx), y, in.numel());
            break;
          }
          pool_backward_kernel<E, I><<<grid, kBlock, 0, s.cuda>>>(
              g, max_mode, x, strides4(in),
              max_mode ? reinterpret_cast<const long long*>(idx.base) : nullptr, strides4(idx), y, total);
          break;
        }
      }
    };
    if (narrow) launch(int32_t{});
    else launch(int64_t{});
  });
  check_launch("window op");
}

void im2col_batch_inner(kestrel_stream& s, const kestrel::plugin_shapes::WindowGeometry& g, const TensorRef& x,
                        void* cols) {
  const int64_t total = g.c * g.kh * g.kw * g.n * g.oh * g.ow;
  if (total == 0) return;
  dispatch_float(x.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    auto launch = [&](auto index) {
      im2col_kernel<E, decltype(index)><<<grid_for(total), kBlock, 0, s.cuda>>>(
          g, reinterpret_cast<const S*>(x.base), strides4(x), static_cast<S*>(cols), total, true);
    };
    if (narrow_indices(g, std::max(total, x.numel()))) launch(int32_t{});
    else launch(int64_t{});
  });
  check_launch("im2col");
}

}  // namespace kestrel_cuda
