// Sliding-window ops on (N, C, H, W) tensors: im2col/col2im (convolution as GEMM) and 2-D pooling.
// Inputs may have any strides; outputs are contiguous. Work is split by (n, c) plane (im2col: by row of
// the column matrix) so no two threads write the same element.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kestrel/plugin_shapes.hpp"
#include "cpu_columns.hpp"
#include "cpu_ops.hpp"

namespace kestrel_cpu {

namespace {

constexpr auto geometry = kestrel::plugin_shapes::window_geometry;

// For each output position along one axis, the span of window taps inside the image (computed once per
// launch, not once per plane).
std::vector<Span> tap_spans(int64_t outputs, int taps, int dilation, int64_t extent, int64_t stride, int pad) {
  std::vector<Span> spans(static_cast<size_t>(outputs));
  for (int64_t o = 0; o < outputs; ++o) spans[size_t(o)] = inside(taps, dilation, o * stride - pad, extent);
  return spans;
}

// Stride-aware element offset in an (N, C, H, W) descriptor.
struct Image4 {
  int64_t s[4];
  explicit Image4(const kestrel_tensor& t) : s{t.strides[0], t.strides[1], t.strides[2], t.strides[3]} {}
  int64_t at(int64_t n, int64_t c, int64_t h, int64_t w) const { return n * s[0] + c * s[1] + h * s[2] + w * s[3]; }
};

template <class E>
void im2col(const Geometry g, const kestrel_tensor& in, const kestrel_tensor& out) {
  using S = typename E::storage;
  const S* x = static_cast<const S*>(in.buffer->data) + in.offset;
  S* cols = static_cast<S*>(out.buffer->data) + out.offset;
  const Image4 xi(in);
  const S zero = E::store(0);
  const int64_t rows_per_image = g.c * g.kh * g.kw, spatial = g.oh * g.ow;
  const int64_t strides[3] = {xi.s[1], xi.s[2], xi.s[3]};
  parallel_for_split("kestrel::im2col", g.n * rows_per_image, g.n * rows_per_image * spatial, [=](int64_t row) {
    columns_row(g, x + (row / rows_per_image) * xi.s[0], strides, row % rows_per_image, 0, g.oh, cols + row * spatial,
                zero);
  });
}

// Each (n, c) plane gathers its columns' contributions tap by tap; every pixel adds its taps in (ky, kx)
// order. f32/f64 sum straight into the output plane; f16/bf16 into planes of the compute type, so their
// sums do not round at every step.
//
// Windows that slide one pixel at a time across rows as wide as the image's (ow == w: the usual padded
// 3x3 convolution, with any dilation or vertical padding) take a faster route with the same sums: all
// of a tap's columns land on the plane at one offset, so each tap is one pass over the plane instead of
// a short loop per row (14 elements in the Fashion ConvNet). The columns whose pixel would fall off
// either end of its row are masked: they add +0.0, which leaves a sum as it was, since sums start at
// +0.0 and round-to-nearest never turns them into -0.0.
template <class E>
void col2im(const Geometry g, const kestrel_tensor& in, const kestrel_tensor& out) {
  using S = typename E::storage;
  using C = typename E::compute;
  const S* cols = static_cast<const S*>(in.buffer->data) + in.offset;
  S* x = static_cast<S*>(out.buffer->data) + out.offset;
  const int64_t cs0 = in.strides[0], cs1 = in.strides[1], cs2 = in.strides[2];
  const int64_t spatial = g.oh * g.ow;
  const bool whole_plane = g.sh == 1 && g.sw == 1 && cs2 == 1 && g.ow == g.w;
  std::vector<C> keep;  // keep[kx * spatial + column]: 1 where tap kx of that column lands inside its row
  if (whole_plane) {
    keep.assign(size_t(g.kw * spatial), C(0));
    for (int kx = 0; kx < g.kw; ++kx) {
      const Span across = inside(g.ow, g.sw, g.w_at(0, kx), g.w);
      for (int64_t oy = 0; oy < g.oh; ++oy)
        std::fill(keep.data() + kx * spatial + oy * g.ow + across.lo, keep.data() + kx * spatial + oy * g.ow + across.hi,
                  C(1));
    }
  }
  const C* keep_at = keep.data();
  constexpr bool in_place = std::is_same_v<S, C>;
  // Allocated here, where a failure reaches the caller, not inside the threads' loop.
  std::vector<C> sums(in_place ? 0 : size_t(g.n * g.c * g.h * g.w));
  C* sums_at = sums.data();
  parallel_for_split("kestrel::col2im", g.n * g.c, g.n * g.c * g.kh * g.kw * spatial, [=](int64_t plane) {
    const int64_t n = plane / g.c, c = plane % g.c;
    S* dst = x + plane * g.h * g.w;
    C* sum = in_place ? reinterpret_cast<C*>(dst) : sums_at + plane * g.h * g.w;
    std::fill(sum, sum + g.h * g.w, C(0));
    for (int ky = 0; ky < g.kh; ++ky) {
      const Span down = inside(g.oh, g.sh, g.h_at(0, ky), g.h);
      for (int kx = 0; kx < g.kw; ++kx) {
        const Span across = inside(g.ow, g.sw, g.w_at(0, kx), g.w);
        const S* src = cols + n * cs0 + ((c * g.kh + ky) * g.kw + kx) * cs1;
        if (whole_plane) {
          const int64_t shift = g.h_at(0, ky) * g.w + g.w_at(0, kx);  // column i lands on pixel i + shift
          C* __restrict to = sum;
          const S* __restrict from = src;
          const C* __restrict mask = keep_at + kx * spatial;
          // Masked columns of the first and last rows would land outside this plane (on another
          // thread's): the range stops at the plane's ends, which only drops masked columns.
          const int64_t first = std::max(down.lo * g.ow, -shift), last = std::min(down.hi * g.ow, g.h * g.w - shift);
          for (int64_t i = first; i < last; ++i) {
            const C column = E::load(from[i]);  // read unconditionally, so the select vectorises
            to[i + shift] += mask[i] != C(0) ? column : C(0);
          }
          continue;
        }
        for (int64_t oy = down.lo; oy < down.hi; ++oy) {
          C* row = sum + g.h_at(oy, ky) * g.w;
          for (int64_t ox = across.lo; ox < across.hi; ++ox) row[g.w_at(ox, kx)] += E::load(src[(oy * g.ow + ox) * cs2]);
        }
      }
    }
    if constexpr (!in_place)
      for (int64_t i = 0; i < g.h * g.w; ++i) dst[i] = E::store(sum[i]);
  });
}

// Windows of 2x2 at stride 2 without padding or dilation (the ConvNets' pooling) tile the image: each
// pixel belongs to one window at most.
bool is_max_2x2(const Geometry& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 && g.dh == 1 && g.dw == 1;
}

template <class E>
void pool_forward(const Geometry g, kestrel_pool_mode mode, const kestrel_op& op) {
  using S = typename E::storage;
  using C = typename E::compute;
  const kestrel_tensor& in = op.inputs[0];
  const S* x = static_cast<const S*>(in.buffer->data) + in.offset;
  S* y = static_cast<S*>(op.outputs[0].buffer->data) + op.outputs[0].offset;
  int64_t* argmax = mode == KESTREL_POOL_MAX ? static_cast<int64_t*>(op.outputs[1].buffer->data) + op.outputs[1].offset
                                             : nullptr;
  const Image4 xi(in);
  const C window_size = C(g.kh * g.kw);
  const std::vector<Span> rows = tap_spans(g.oh, g.kh, g.dh, g.h, g.sh, g.ph);
  const std::vector<Span> cols = tap_spans(g.ow, g.kw, g.dw, g.w, g.sw, g.pw);
  const Span *row_taps = rows.data(), *col_taps = cols.data();
  // Max pooling over 2x2 windows at stride 2 without padding, on rows stored contiguously (the ConvNets'
  // pooling): four loads per output and no tap loops.
  const bool max_2x2 = argmax && is_max_2x2(g) && xi.s[3] == 1;
  parallel_for_split("kestrel::pool2d", g.n * g.c, g.n * g.c * g.h * g.w, [=](int64_t plane) {
    // Locals, not the captured structs: the int64 argmax stores could alias those, forcing a reload of
    // every geometry field after each store.
    const int64_t oh = g.oh, ow = g.ow, width = g.w, row_stride = xi.s[2], col_stride = xi.s[3];
    const int64_t sh = g.sh, sw = g.sw, ph = g.ph, pw = g.pw, dh = g.dh, dw = g.dw;
    const S* image = x + xi.at(plane / g.c, plane % g.c, 0, 0);
    S* out = y + plane * oh * ow;
    int64_t* out_at = argmax ? argmax + plane * oh * ow : nullptr;
    if (max_2x2) {
      for (int64_t oy = 0; oy < oh; ++oy) {
        const S* top = image + 2 * oy * row_stride;
        const S* bottom = top + row_stride;
        S* out_row = out + oy * ow;
        int64_t* at_row = out_at + oy * ow;
        const int64_t row_at = 2 * oy * width;
        // The same rule as the general loop, in the same tap order: a larger value wins, or the first NaN.
        // Written without data-dependent branches (the winning tap as arithmetic on the comparisons):
        // which tap wins is data, and with branches this loop took ~4.3 ms a launch in the ConvNet step,
        // ~1.5 ms without (bench/results/2026-11-23-vm-cpu-convnet-before-after.md).
        for (int64_t ox = 0; ox < ow; ++ox) {
          const C a = E::load(top[2 * ox]), b = E::load(top[2 * ox + 1]);
          const C c = E::load(bottom[2 * ox]), d = E::load(bottom[2 * ox + 1]);
          const int32_t b_wins = b > a;
          const C m1 = b_wins ? b : a;
          const int32_t c_wins = c > m1;
          const C m2 = c_wins ? c : m1;
          const int32_t d_wins = d > m2;
          C best = d_wins ? d : m2;
          int32_t tap = d_wins * 3 + (1 - d_wins) * (c_wins * 2 + (1 - c_wins) * b_wins);
          if ((a != a) | (b != b) | (c != c) | (d != d)) {  // rare: the first NaN wins
            tap = a != a ? 0 : b != b ? 1 : c != c ? 2 : 3;
            best = tap == 0 ? a : tap == 1 ? b : tap == 2 ? c : d;
          }
          out_row[ox] = E::store(best);
          at_row[ox] = row_at + 2 * ox + (tap & 1) + (tap >> 1) * width;
        }
      }
      return;
    }
    for (int64_t oy = 0; oy < oh; ++oy) {
      const Span taps_y = row_taps[oy];
      for (int64_t ox = 0; ox < ow; ++ox) {
        const Span taps_x = col_taps[ox];
        C best = -std::numeric_limits<C>::infinity(), sum = 0;
        int64_t best_at = -1;
        for (int64_t ky = taps_y.lo; ky < taps_y.hi; ++ky) {
          const int64_t yy = oy * sh - ph + ky * dh;
          for (int64_t kx = taps_x.lo; kx < taps_x.hi; ++kx) {
            const int64_t xx = ox * sw - pw + kx * dw;
            const C v = E::load(image[yy * row_stride + xx * col_stride]);
            sum += v;
            if (best_at < 0 || v > best || (v != v && best == best)) {
              best = v;
              best_at = yy * width + xx;
            }
          }
        }
        if (out_at) {
          out[oy * ow + ox] = E::store(best);
          out_at[oy * ow + ox] = best_at;
        } else {
          out[oy * ow + ox] = E::store(sum / window_size);  // padding counts, as torch's count_include_pad=True
        }
      }
    }
  });
}

// `value` where `on`, else +0.0 (all bits clear in every float format), as bit arithmetic: which tap
// holds a window's maximum is data, and as a branch (or a select GCC turns into one) the loop below took
// 2.8x the time of a zeroing pass and a scatter.
template <class S>
S value_if(S value, bool on) {
  using U = std::conditional_t<sizeof(S) == 2, uint16_t, std::conditional_t<sizeof(S) == 4, uint32_t, uint64_t>>;
  static_assert(sizeof(U) == sizeof(S));
  U bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits &= U(U(0) - U(on));
  std::memcpy(&value, &bits, sizeof bits);
  return value;
}

// Max pooling's backward over one (n, c) plane of tiling 2x2 windows: every pixel of dx (h, w) written
// once, in order, the gradient where its window's argmax points and zero elsewhere, instead of a zeroing
// pass and then a scatter. dy (oh, ow) and argmax (oh, ow) have unit column stride and the given row
// strides. The same values as the general loop (0 + dy at the argmax, so -0.0 arrives as +0.0). Returns
// false, leaving the plane to the general loop, where an argmax points outside its own window (never
// from this plugin's forward; the general loop then puts it where it points).
template <class E>
bool max_2x2_backward_plane(const Geometry& g, const typename E::storage* dy, int64_t dy_row_stride,
                            const int64_t* argmax, int64_t argmax_row_stride, typename E::storage* dx) {
  using S = typename E::storage;
  using C = typename E::compute;
  const int64_t oh = g.oh, ow = g.ow, width = g.w;
  const S zero = E::store(0);
  bool stray = false;
  for (int64_t oy = 0; oy < oh; ++oy) {
    const S* grad_row = dy + oy * dy_row_stride;
    const int64_t* at_row = argmax + oy * argmax_row_stride;
    S* top = dx + 2 * oy * width;
    S* bottom = top + width;
    for (int64_t ox = 0; ox < ow; ++ox) {
      const S grad = E::store(C(0) + E::load(grad_row[ox]));
      const int64_t tap = at_row[ox] - (2 * oy * width + 2 * ox);  // 0, 1, width or width + 1
      top[2 * ox] = value_if(grad, tap == 0);
      top[2 * ox + 1] = value_if(grad, tap == 1);
      bottom[2 * ox] = value_if(grad, tap == width);
      bottom[2 * ox + 1] = value_if(grad, tap == width + 1);
      stray |= (tap != 0) & (tap != 1) & (tap != width) & (tap != width + 1);
    }
    // An odd width leaves the last column outside every window.
    for (int64_t x = 2 * ow; x < width; ++x) top[x] = bottom[x] = zero;
  }
  // And an odd height the last row.
  std::fill(dx + 2 * oh * width, dx + g.h * width, zero);
  return !stray;
}

template <class E>
void pool_backward(const Geometry g, kestrel_pool_mode mode, const kestrel_op& op) {
  using S = typename E::storage;
  using C = typename E::compute;
  const kestrel_tensor& dy_desc = op.inputs[0];
  const S* dy = static_cast<const S*>(dy_desc.buffer->data) + dy_desc.offset;
  const Image4 dyi(dy_desc);
  const int64_t* argmax = mode == KESTREL_POOL_MAX
                              ? static_cast<const int64_t*>(op.inputs[1].buffer->data) + op.inputs[1].offset
                              : nullptr;
  const Image4 ai = mode == KESTREL_POOL_MAX ? Image4(op.inputs[1]) : dyi;
  S* dx = static_cast<S*>(op.outputs[0].buffer->data) + op.outputs[0].offset;
  const C window_size = C(g.kh * g.kw);
  const S zero = E::store(0);
  const std::vector<Span> rows = tap_spans(g.oh, g.kh, g.dh, g.h, g.sh, g.ph);
  const std::vector<Span> cols = tap_spans(g.ow, g.kw, g.dw, g.w, g.sw, g.pw);
  const Span *row_taps = rows.data(), *col_taps = cols.data();
  const bool max_2x2 = argmax && is_max_2x2(g) && dyi.s[3] == 1 && ai.s[3] == 1;
  parallel_for_split("kestrel::pool2d_backward", g.n * g.c, g.n * g.c * (g.h * g.w + g.oh * g.ow), [=](int64_t plane) {
    const int64_t n = plane / g.c, c = plane % g.c;
    S* plane_dx = dx + plane * g.h * g.w;
    if (max_2x2 && max_2x2_backward_plane<E>(g, dy + dyi.at(n, c, 0, 0), dyi.s[2], argmax + ai.at(n, c, 0, 0), ai.s[2],
                                             plane_dx))
      return;
    std::fill(plane_dx, plane_dx + g.h * g.w, zero);
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      const Span taps_y = row_taps[oy];
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const C grad = E::load(dy[dyi.at(n, c, oy, ox)]);
        if (argmax) {
          const int64_t at = argmax[ai.at(n, c, oy, ox)];
          if (at >= 0 && at < g.h * g.w) plane_dx[at] = E::store(E::load(plane_dx[at]) + grad);
          continue;
        }
        const Span taps_x = col_taps[ox];
        for (int64_t ky = taps_y.lo; ky < taps_y.hi; ++ky) {
          S* dx_row = plane_dx + g.h_at(oy, int(ky)) * g.w;
          for (int64_t kx = taps_x.lo; kx < taps_x.hi; ++kx) {
            S& target = dx_row[g.w_at(ox, int(kx))];
            target = E::store(E::load(target) + grad / window_size);
          }
        }
      }
    }
  });
}

}  // namespace

bool supports_window(const kestrel_op& op) {
  // Outputs contiguous: the pooled values and max pooling's argmax alike.
  return kestrel::plugin_shapes::window_fits(op) && is_float_dtype(op.outputs[0].dtype) &&
         kestrel::plugin_shapes::outputs_contiguous(op);
}

void launch_window(const kestrel_op& op) {
  const auto& p = params_of<kestrel_window_params>(op, "window op");
  dispatch_float(op.outputs[0].dtype, [&](auto elem) {
    using E = decltype(elem);
    switch (op.kind) {
      case KESTREL_OP_IM2COL: return im2col<E>(geometry(p, op.inputs[0]), op.inputs[0], op.outputs[0]);
      case KESTREL_OP_COL2IM: return col2im<E>(geometry(p, op.outputs[0]), op.inputs[0], op.outputs[0]);
      case KESTREL_OP_POOL2D: return pool_forward<E>(geometry(p, op.inputs[0]), p.mode, op);
      default: return pool_backward<E>(geometry(p, op.outputs[0]), p.mode, op);
    }
  });
}

}  // namespace kestrel_cpu
