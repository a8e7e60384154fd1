// im2col / col2im and 2-D pooling, forward and backward.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "harness.hpp"
#include "window_geometry.hpp"

namespace kestrel::conformance {

namespace {

const std::vector<Geometry>& pool_geometries() {
  static const std::vector<Geometry> all = {{2, 3, 8, 7, window(2, 2, 2, 2, 0, 0)},
                                            {2, 3, 8, 7, window(3, 3, 2, 2, 1, 1)},
                                            {1, 2, 6, 5, window(3, 2, 1, 1, 1, 0)},
                                            {8, 8, 32, 32, window(2, 2, 2, 2, 0, 0)},  // split over threads
                                            // A plane too long for one invocation of a software device
                                            // (lavapipe's loop budget): backward gathers per element there.
                                            {1, 2, 224, 224, window(3, 3, 2, 2, 1, 1)}};
  return all;
}

int64_t at4(const Geometry& g, int64_t n, int64_t c, int64_t y, int64_t x) { return ((n * g.c + c) * g.h + y) * g.w + x; }

}  // namespace

void window_cases(Runner& r) {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    bool required = r.required(dtype == DType::f32, {dtype});
    std::string dt(dtype_name(dtype));
    for (const Geometry& g : conv_geometries()) {
      const int64_t rows = g.c * g.win.kernel_h * g.win.kernel_w, cols = g.oh() * g.ow();
      for (Layout layout : {Layout::contiguous, Layout::strided})
        r.run(case_name({"im2col", dt, g.str(), layout_name(layout)}), required, [&] {
          auto x = r.values(g.n * g.c * g.h * g.w, -2, 2, dtype);
          Tensor out = ops::im2col(r.upload({g.n, g.c, g.h, g.w}, x, dtype, layout), g.win);
          std::vector<double> want(g.n * rows * cols, 0.0);
          g.for_each_tap([&](int64_t col, int64_t image) { want[col] = x[image]; });
          r.expect_close(out, want, Tolerance{0, 0});
        });
      auto col2im_reference = [&](const std::vector<double>& colv) {
        std::vector<double> want(g.n * g.c * g.h * g.w, 0.0);
        g.for_each_tap([&](int64_t col, int64_t image) { want[image] += colv[col]; });
        for (double& w : want) w = round_to(dtype, w);
        return want;
      };
      r.run(case_name({"col2im", dt, g.str()}), required, [&] {
        auto colv = r.values(g.n * rows * cols, -2, 2, dtype);
        Tensor out = ops::col2im(r.upload({g.n, rows, cols}, colv, dtype), g.win, g.c, g.h, g.w);
        r.expect_close(out, col2im_reference(colv), tolerance_for(dtype, 4));
        // Read through strides instead (the engine passes a permuted view): the same sums in the same
        // order, so the same bits.
        Tensor strided = ops::col2im(r.upload({g.n, rows, cols}, colv, dtype, Layout::strided), g.win, g.c, g.h, g.w);
        r.expect_close(strided, out.to_doubles(), Tolerance{0, 0}, "strided columns");
      });
      // Columns of taps that fall in the padding belong to no pixel: NaN there must not reach the image.
      r.run(case_name({"col2im", dt, g.str(), "nan-in-padding-columns"}), required, [&] {
        auto colv = r.values(g.n * rows * cols, -2, 2, dtype);
        std::vector<bool> used(colv.size(), false);
        g.for_each_tap([&](int64_t col, int64_t) { used[size_t(col)] = true; });
        for (size_t i = 0; i < colv.size(); ++i)
          if (!used[i]) colv[i] = std::numeric_limits<double>::quiet_NaN();
        Tensor out = ops::col2im(r.upload({g.n, rows, cols}, colv, dtype), g.win, g.c, g.h, g.w);
        r.expect_close(out, col2im_reference(colv), tolerance_for(dtype, 4));
      });
    }
    for (const Geometry& g : pool_geometries())
      for (kestrel_pool_mode mode : {KESTREL_POOL_MAX, KESTREL_POOL_AVG}) {
        const char* mode_name = mode == KESTREL_POOL_MAX ? "max" : "avg";
        const int kh = g.win.kernel_h, kw = g.win.kernel_w;
        const int64_t outputs = g.n * g.c * g.oh() * g.ow();
        // Reference forward: values and (for max) the flat position of the first maximum.
        auto forward = [&](const std::vector<double>& x, std::vector<double>& out, std::vector<double>& where) {
          out.assign(outputs, 0.0);
          where.assign(outputs, -1.0);
          for (int64_t n = 0; n < g.n; ++n)
            for (int64_t c = 0; c < g.c; ++c)
              for (int64_t oy = 0; oy < g.oh(); ++oy)
                for (int64_t ox = 0; ox < g.ow(); ++ox) {
                  int64_t o = ((n * g.c + c) * g.oh() + oy) * g.ow() + ox;
                  double best = -std::numeric_limits<double>::infinity(), sum = 0;
                  for (int ky = 0; ky < kh; ++ky)
                    for (int kx = 0; kx < kw; ++kx) {
                      int64_t y, xx;
                      if (!g.tap(oy, ox, ky, kx, y, xx)) continue;
                      double v = x[at4(g, n, c, y, xx)];
                      sum += v;
                      if (where[o] < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
                        best = v;
                        where[o] = static_cast<double>(y * g.w + xx);
                      }
                    }
                  out[o] = mode == KESTREL_POOL_MAX ? best : sum / (kh * kw);
                }
        };
        // Strided rows and contiguous ones (backends may have a fast path for the latter).
        for (Layout layout : {Layout::strided, Layout::contiguous})
          r.run(case_name({"pool2d", mode_name, dt, g.str(), layout_name(layout)}), required, [&] {
            auto x = r.values(g.n * g.c * g.h * g.w, -2, 2, dtype);
            x[3] = std::numeric_limits<double>::quiet_NaN();  // a NaN must win its max windows
            x[17] = x[16];                                    // a tie: the first tap wins
            auto result = ops::pool2d(r.upload({g.n, g.c, g.h, g.w}, x, dtype, layout), g.win, mode);
            std::vector<double> want, where;
            forward(x, want, where);
            for (double& w : want) w = round_to(dtype, w);
            r.expect_close(result.out, want, tolerance_for(dtype, 2), "values");
            if (mode == KESTREL_POOL_MAX) r.expect_close(result.indices, where, Tolerance{0, 0}, "indices");
          });
        r.run(case_name({"pool2d_backward", mode_name, dt, g.str()}), required, [&] {
          auto x = r.values(g.n * g.c * g.h * g.w, -2, 2, dtype);
          auto dy = r.values(outputs, -1, 1, dtype);
          Tensor tx = r.upload({g.n, g.c, g.h, g.w}, x, dtype);
          auto forward_result = ops::pool2d(tx, g.win, mode);
          Tensor dx = ops::pool2d_backward(r.upload({g.n, g.c, g.oh(), g.ow()}, dy, dtype), forward_result.indices,
                                           g.win, mode, tx.shape());
          std::vector<double> out, where, want(x.size(), 0.0);
          forward(x, out, where);
          for (int64_t n = 0; n < g.n; ++n)
            for (int64_t c = 0; c < g.c; ++c)
              for (int64_t oy = 0; oy < g.oh(); ++oy)
                for (int64_t ox = 0; ox < g.ow(); ++ox) {
                  int64_t o = ((n * g.c + c) * g.oh() + oy) * g.ow() + ox;
                  if (mode == KESTREL_POOL_MAX) {
                    want[(n * g.c + c) * g.h * g.w + static_cast<int64_t>(where[o])] += dy[o];
                    continue;
                  }
                  for (int ky = 0; ky < kh; ++ky)
                    for (int kx = 0; kx < kw; ++kx) {
                      int64_t y, xx;
                      if (g.tap(oy, ox, ky, kx, y, xx)) want[at4(g, n, c, y, xx)] += dy[o] / (kh * kw);
                    }
                }
          for (double& w : want) w = round_to(dtype, w);
          r.expect_close(dx, want, tolerance_for(dtype, 4));
        });
      }
  }
}

}  // namespace kestrel::conformance
