// The geometry of the sliding-window cases (im2col, col2im, pooling and the fused convolution): an
// image batch and a window, with the reference's pairing of column-matrix entries and image pixels.
#pragma once
#include <fmt/format.h>

#include <string>
#include <vector>

#include "kestrel/ops.h"

namespace kestrel::conformance {

struct Geometry {
  int64_t n, c, h, w;
  ops::Window win;
  int64_t oh() const { return win.out_h(h); }
  int64_t ow() const { return win.out_w(w); }
  std::string str() const {
    return fmt::format("{}x{}x{}x{}-k{}x{}-s{}x{}-p{}x{}-d{}x{}", n, c, h, w, win.kernel_h, win.kernel_w, win.stride_h,
                       win.stride_w, win.pad_h, win.pad_w, win.dilation_h, win.dilation_w);
  }
  // Input coordinate of tap (ky, kx) of output (oy, ox), or false when it falls in the padding.
  bool tap(int64_t oy, int64_t ox, int ky, int kx, int64_t& y, int64_t& x) const {
    y = oy * win.stride_h - win.pad_h + ky * win.dilation_h;
    x = ox * win.stride_w - win.pad_w + kx * win.dilation_w;
    return y >= 0 && y < h && x >= 0 && x < w;
  }
  // Calls f(column-matrix index, image index) for every tap that lands inside the image: the pairing
  // that im2col copies along and col2im sums back.
  template <class F>
  void for_each_tap(F f) const {
    const int64_t rows = c * win.kernel_h * win.kernel_w, cols = oh() * ow();
    for (int64_t in = 0; in < n; ++in)
      for (int64_t ic = 0; ic < c; ++ic)
        for (int ky = 0; ky < win.kernel_h; ++ky)
          for (int kx = 0; kx < win.kernel_w; ++kx)
            for (int64_t oy = 0; oy < oh(); ++oy)
              for (int64_t ox = 0; ox < ow(); ++ox) {
                int64_t y, xx;
                int64_t row = (ic * win.kernel_h + ky) * win.kernel_w + kx;
                if (tap(oy, ox, ky, kx, y, xx))
                  f((in * rows + row) * cols + oy * ow() + ox, ((in * c + ic) * h + y) * w + xx);
              }
  }
};

inline ops::Window window(int kh, int kw, int sh, int sw, int ph, int pw, int dh = 1, int dw = 1) {
  ops::Window w;
  w.kernel_h = kh, w.kernel_w = kw, w.stride_h = sh, w.stride_w = sw, w.pad_h = ph, w.pad_w = pw;
  w.dilation_h = dh, w.dilation_w = dw;
  return w;
}

// Convolution windows: padding, strides, dilation, 1x1, and cut rows.
inline const std::vector<Geometry>& conv_geometries() {
  static const std::vector<Geometry> all = {{2, 3, 7, 6, window(3, 3, 1, 1, 1, 1)},
                                            {2, 3, 7, 6, window(3, 2, 2, 1, 1, 0, 1, 2)},
                                            {1, 2, 5, 5, window(1, 1, 1, 1, 0, 0)},
                                            {1, 2, 7, 6, window(5, 5, 1, 1, 0, 0)},
                                            {1, 2, 7, 6, window(3, 3, 1, 1, 2, 2, 2, 2)},
                                            // rows cut at both ends, at a vertical stride of 2
                                            {2, 3, 7, 6, window(3, 3, 2, 1, 1, 1)},
                                            // full-width rows, fewer of them than the image has
                                            {2, 3, 7, 6, window(3, 3, 1, 1, 0, 1)},
                                            // more output rows than image rows (padding wider than the kernel)
                                            {1, 2, 5, 6, window(3, 3, 1, 1, 3, 1)},
                                            // taps wholly in a padding wider than the image
                                            {1, 2, 3, 1, window(5, 5, 1, 1, 2, 2)},
                                            // large enough to be split over threads
                                            {4, 8, 28, 28, window(3, 3, 1, 1, 1, 1)}};
  return all;
}

}  // namespace kestrel::conformance
