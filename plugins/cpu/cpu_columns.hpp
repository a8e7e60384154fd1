// A convolution's column matrix, one row at a time: row r = (c, ky, kx) holds, for each output pixel,
// the input pixel that tap (ky, kx) of channel c reads there (0 in the padding). The im2col op builds
// every row of every image; the fused convolution (ops_conv.cpp) builds a band of output rows of one
// image at a time into a block that stays in cache.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kestrel/plugin_shapes.hpp"

namespace kestrel_cpu {

using Geometry = kestrel::plugin_shapes::WindowGeometry;

// The indices i in [0, count) with 0 <= i * step + offset < extent: which outputs of a row a tap
// reaches, or which taps of a window fall inside the image. Loops over the span need no bounds checks.
struct Span {
  int64_t lo, hi;
};
inline int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); }  // b > 0
inline Span inside(int64_t count, int64_t step, int64_t offset, int64_t extent) {
  // Capped at count: a tap wholly in a padding wider than the row reaches none of it.
  const int64_t lo = std::min<int64_t>(count, std::max<int64_t>(0, ceil_div(-offset, step)));
  const int64_t hi = std::min<int64_t>(count, ceil_div(extent - offset, step));
  return {lo, std::max(lo, hi)};
}

// Row r of the columns of output rows [oy0, oy1) of one image, into dst ((oy1 - oy0) * OW elements).
// image: the image's (c, 0, 0) origin is image + c * strides[0]; strides: channel, row and column steps.
template <class S>
void columns_row(const Geometry& g, const S* image, const int64_t strides[3], int64_t r, int64_t oy0, int64_t oy1,
                 S* dst, S zero) {
  const int64_t c = r / (g.kh * g.kw);
  const int ky = int((r / g.kw) % g.kh), kx = int(r % g.kw);
  const Span across = inside(g.ow, g.sw, g.w_at(0, kx), g.w);
  const bool unit_steps = g.sw == 1 && g.dw == 1 && strides[2] == 1;
  for (int64_t oy = oy0; oy < oy1; ++oy, dst += g.ow) {
    const int64_t y = g.h_at(oy, ky);
    if (y < 0 || y >= g.h) {
      std::fill(dst, dst + g.ow, zero);
      continue;
    }
    const S* src = image + c * strides[0] + y * strides[1];
    std::fill(dst, dst + across.lo, zero);
    if (unit_steps) {  // the common convolution: a run of the input row, copied as a block
      const S* from = src + g.w_at(across.lo, kx);
      std::copy(from, from + (across.hi - across.lo), dst + across.lo);
    } else {
      for (int64_t ox = across.lo; ox < across.hi; ++ox) dst[ox] = src[g.w_at(ox, kx) * strides[2]];
    }
    std::fill(dst + across.hi, dst + g.ow, zero);
  }
}

}  // namespace kestrel_cpu
