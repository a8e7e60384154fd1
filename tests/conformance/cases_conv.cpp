// The fused convolution ops (plugin ABI 1.10), optional: forward with and without bias and ReLU, the
// input's gradient, and the weight's with and without the bias's, each without and with ReLU's mask, against torch.nn.functional.conv2d's
// definition in double, over the im2col cases' windows and shapes that make a backend split its work
// (bands of output rows, groups of images, threads).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "harness.hpp"
#include "window_geometry.hpp"

namespace kestrel::conformance {

namespace {

struct Reference {
  std::vector<double> y, dx, dweight, dbias;
};

// x (N,C,H,W), weight (O, C*KH*KW), bias (O) or empty, dy (N,O,OH,OW): the pre-activation output and
// the three gradients of a loss whose gradient at that output is dy.
Reference reference(const Geometry& g, int64_t out_channels, const std::vector<double>& x,
                    const std::vector<double>& weight, const std::vector<double>& bias, const std::vector<double>& dy) {
  const int64_t rows = g.c * g.win.kernel_h * g.win.kernel_w, cols = g.oh() * g.ow();
  Reference r{std::vector<double>(size_t(g.n * out_channels * cols)), std::vector<double>(x.size()),
              std::vector<double>(weight.size()), std::vector<double>(size_t(out_channels))};
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < out_channels; ++o)
      for (int64_t pixel = 0; pixel < cols; ++pixel) {
        const int64_t at = (n * out_channels + o) * cols + pixel;
        r.y[at] = bias.empty() ? 0.0 : bias[o];
        r.dbias[o] += dy[at];
      }
  g.for_each_tap([&](int64_t col, int64_t image) {
    const int64_t n = col / (rows * cols), row = col / cols % rows, pixel = col % cols;
    for (int64_t o = 0; o < out_channels; ++o) {
      const int64_t at = (n * out_channels + o) * cols + pixel;
      r.y[at] += weight[o * rows + row] * x[image];
      r.dx[image] += weight[o * rows + row] * dy[at];
      r.dweight[o * rows + row] += dy[at] * x[image];
    }
  });
  return r;
}

// The im2col cases' windows, and shapes that split the work: many output rows of many taps (bands of
// rows), enough images for several partial sums of the weight gradient, and a batch of the Fashion
// ConvNet's second layer.
std::vector<Geometry> geometries() {
  std::vector<Geometry> all = conv_geometries();
  all.push_back({1, 48, 40, 40, window(3, 3, 1, 1, 1, 1)});
  all.push_back({70, 2, 8, 8, window(3, 3, 1, 1, 1, 1)});
  all.push_back({3, 40, 30, 30, window(1, 1, 1, 1, 0, 0)});
  all.push_back({16, 32, 14, 14, window(3, 3, 1, 1, 1, 1)});
  // 130 channels in and out (out_channels below): each of the three products has more than 128 rows and
  // columns, as Vulkan's large register blocks want.
  all.push_back({1, 130, 12, 12, window(3, 3, 1, 1, 1, 1)});
  // A weight gradient summing 48 x 784 output pixels: longer than one dispatch may walk on a device that
  // budgets loops (lavapipe sums it a few images at a time).
  all.push_back({48, 1, 28, 28, window(3, 3, 1, 1, 1, 1)});
  return all;
}

}  // namespace

void conv_cases(Runner& r) {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const std::string dt(dtype_name(dtype));
    for (const Geometry& g : geometries()) {
      const int64_t out_channels = g.c > 128 ? g.c : 5, rows = g.c * g.win.kernel_h * g.win.kernel_w;
      const Shape x_shape{g.n, g.c, g.h, g.w}, w_shape{out_channels, g.c, g.win.kernel_h, g.win.kernel_w};
      const Shape y_shape{g.n, out_channels, g.oh(), g.ow()};
      const kestrel_conv_params plain{abi_size<kestrel_conv_params>, g.win.stride_h, g.win.stride_w, g.win.pad_h,
                                      g.win.pad_w, g.win.dilation_h, g.win.dilation_w, KESTREL_ACTIVATION_NONE};
      // A sum over the taps (forward, input gradient) or over every output pixel (weight gradient).
      const Tolerance taps = tolerance_for(dtype, 4 * std::sqrt(double(rows)));
      const Tolerance pixels = tolerance_for(dtype, 4 * std::sqrt(double(g.n * g.oh() * g.ow())));
      auto data = [&] {
        struct Data {
          std::vector<double> x, weight, bias, dy;
        } d{r.values(g.n * g.c * g.h * g.w, -2, 2, dtype), r.values(out_channels * rows, -1, 1, dtype),
            r.values(out_channels, -1, 1, dtype), r.values(g.n * out_channels * g.oh() * g.ow(), -1, 1, dtype)};
        return d;
      };
      for (bool bias : {false, true})
        for (kestrel_activation act : {KESTREL_ACTIVATION_NONE, KESTREL_ACTIVATION_RELU})
          r.run(case_name({"forward", dt, g.str(), bias ? "bias" : "no-bias", act == KESTREL_ACTIVATION_RELU ? "relu" : "none"}),
                false, [&] {
                  const auto d = data();
                  kestrel_conv_params p = plain;
                  p.activation = act;
                  std::vector<Tensor> inputs{r.upload(x_shape, d.x, dtype), r.upload(w_shape, d.weight, dtype)};
                  if (bias) inputs.push_back(r.upload({out_channels}, d.bias, dtype));
                  Tensor y = Tensor::empty(y_shape, dtype, r.device());
                  ops::launch(r.device(), op_of(KESTREL_OP_CONV2D, &p, inputs, {y}));
                  std::vector<double> want = reference(g, out_channels, d.x, d.weight, bias ? d.bias : std::vector<double>(), d.dy).y;
                  if (act == KESTREL_ACTIVATION_RELU)
                    for (double& v : want) v = std::max(v, 0.0);
                  r.expect_close(y, want, taps);
                });
      // The backward ops with ReLU take y and use dy only where y > 0 (y = 0 exactly included).
      auto relu_grad = [&](bool relu, std::vector<Tensor>& inputs, std::vector<double> dy) {
        if (!relu) return dy;
        std::vector<double> y = r.values(int64_t(dy.size()), -1, 1, dtype);
        y[0] = 0.0;
        inputs.push_back(r.upload(y_shape, y, dtype));
        for (size_t i = 0; i < dy.size(); ++i) dy[i] = y[i] > 0 ? dy[i] : 0.0;
        return dy;
      };
      for (bool relu : {false, true}) {
        kestrel_conv_params p = plain;
        p.activation = relu ? KESTREL_ACTIVATION_RELU : KESTREL_ACTIVATION_NONE;
        const std::string act = relu ? "relu" : "none";
        r.run(case_name({"backward_data", dt, g.str(), act}), false, [&] {
          const auto d = data();
          std::vector<Tensor> inputs{r.upload(y_shape, d.dy, dtype), r.upload(w_shape, d.weight, dtype)};
          const std::vector<double> dy = relu_grad(relu, inputs, d.dy);
          Tensor dx = Tensor::empty(x_shape, dtype, r.device());
          ops::launch(r.device(), op_of(KESTREL_OP_CONV2D_BACKWARD_DATA, &p, inputs, {dx}));
          r.expect_close(dx, reference(g, out_channels, d.x, d.weight, d.bias, dy).dx, taps);
        });
        for (bool bias : {false, true})
          r.run(case_name({"backward_filter", dt, g.str(), bias ? "bias" : "no-bias", act}), false, [&] {
            const auto d = data();
            std::vector<Tensor> inputs{r.upload(y_shape, d.dy, dtype), r.upload(x_shape, d.x, dtype)};
            const std::vector<double> dy = relu_grad(relu, inputs, d.dy);
            std::vector<Tensor> grads{Tensor::empty(w_shape, dtype, r.device())};
            if (bias) grads.push_back(Tensor::empty({out_channels}, dtype, r.device()));
            ops::launch(r.device(), op_of(KESTREL_OP_CONV2D_BACKWARD_FILTER, &p, inputs, grads));
            const Reference want = reference(g, out_channels, d.x, d.weight, d.bias, dy);
            r.expect_close(grads[0], want.dweight, pixels, "dweight");
            if (bias) r.expect_close(grads[1], want.dbias, pixels, "dbias");
          });
      }
    }
  }
}

}  // namespace kestrel::conformance
