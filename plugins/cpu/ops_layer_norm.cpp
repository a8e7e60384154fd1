// Fused layer normalisation over the last axis (ABI 1.7), forward and backward side by side; since 1.15
// an f32 layer norm may write 16-bit rows and read a 16-bit gradient, since 1.16 backward may add dx to
// a gradient already there (the residual stream's). Rows are
// independent, so each is one task; the weight and bias gradients sum over rows, column block by column
// block. Statistics and sums in double, as the composed ops' reductions.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "cpu_ops.hpp"

namespace kestrel_cpu {

namespace {

// Columns per task of the weight and bias gradients: long enough rows of work, few enough tasks.
constexpr int64_t kColumnBlock = 64;

// in0 x (R,C) [, in1 weight (C) [, in2 bias (C)]] -> out0 y (R,C), out1 mean (R), out2 rstd (R); E the
// dtype of x and the parameters, Y of y (E's, or 16-bit beside an f32 x: ABI 1.15).
template <class E, class Y>
void forward_rows(const kestrel_op& op) {
  const kestrel_tensor& x_desc = op.inputs[0];
  const int64_t rows = x_desc.shape[0], cols = x_desc.shape[1];
  const double eps = params_of<kestrel_layer_norm_params>(op, "layer_norm").eps;
  using S = typename E::storage;
  const S* x = data_of<S>(x_desc);
  const S* weight = op.num_inputs > 1 ? data_of<S>(op.inputs[1]) : nullptr;  // (C)
  const S* bias = op.num_inputs > 2 ? data_of<S>(op.inputs[2]) : nullptr;    // (C)
  auto* y = mutable_data_of<typename Y::storage>(op.outputs[0]);
  Acc<E>*mean = mutable_data_of<Acc<E>>(op.outputs[1]), *rstd = mutable_data_of<Acc<E>>(op.outputs[2]);
  parallel_for_split("kestrel::layer_norm", rows, rows * cols, [=](int64_t r) {
    const S* xr = x + r * cols;
    double sum = 0, squares = 0;
    for (int64_t c = 0; c < cols; ++c) sum += double(E::load(xr[c]));
    const double mu = cols ? sum / double(cols) : 0.0;
    for (int64_t c = 0; c < cols; ++c) squares += (double(E::load(xr[c])) - mu) * (double(E::load(xr[c])) - mu);
    const double inv = 1.0 / std::sqrt((cols ? squares / double(cols) : 0.0) + eps);
    for (int64_t c = 0; c < cols; ++c) {
      double v = (double(E::load(xr[c])) - mu) * inv;
      if (weight) v *= double(E::load(weight[c]));
      if (bias) v += double(E::load(bias[c]));
      // Rounded to x's dtype first, as a y in x's dtype then cast would be (the same bits either way).
      y[r * cols + c] = Y::store(typename Y::compute(typename E::compute(v)));
    }
    mean[r] = Acc<E>(mu);
    rstd[r] = Acc<E>(inv);
  });
}

// With xhat = (x - mean) * rstd and g = dy * weight (dy without a weight):
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dweight = sum over rows of dy * xhat; dbias = sum of dy.
// E the dtype of x, dx and the parameters, D of dy (E's, or 16-bit beside an f32 x: ABI 1.15). With an
// added gradient (1.16) dx is rounded to E, then added to it, in E's compute type, as a separate ADD would.
template <class E, class D>
void backward_rows(const kestrel_op& op) {
  const kestrel_tensor& x_desc = op.inputs[1];
  const int64_t rows = x_desc.shape[0], cols = x_desc.shape[1];
  using S = typename E::storage;
  const auto* dy = data_of<typename D::storage>(op.inputs[0]);
  const S* x = data_of<S>(op.inputs[1]);
  const Acc<E>*mean = data_of<Acc<E>>(op.inputs[2]), *rstd = data_of<Acc<E>>(op.inputs[3]);
  const S* weight = op.num_outputs > 1 ? data_of<S>(op.inputs[4]) : nullptr;  // (C), with dweight
  const kestrel_tensor* added_desc = kestrel::plugin_shapes::layer_norm_added_gradient(op);
  const S* added = added_desc ? data_of<S>(*added_desc) : nullptr;  // (R, C)
  S* dx = mutable_data_of<S>(op.outputs[0]);
  S* dweight = op.num_outputs > 1 ? mutable_data_of<S>(op.outputs[1]) : nullptr;
  S* dbias = op.num_outputs > 2 ? mutable_data_of<S>(op.outputs[2]) : nullptr;
  auto xhat = [=](int64_t r, int64_t c) { return (double(E::load(x[r * cols + c])) - mean[r]) * double(rstd[r]); };
  parallel_for_split("kestrel::layer_norm_backward", rows, rows * cols, [=](int64_t r) {
    auto g = [=](int64_t c) { return double(D::load(dy[r * cols + c])) * (weight ? double(E::load(weight[c])) : 1.0); };
    double mean_g = 0, mean_gx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      mean_g += g(c);
      mean_gx += g(c) * xhat(r, c);
    }
    mean_g /= double(cols);
    mean_gx /= double(cols);
    using C = typename E::compute;
    for (int64_t c = 0; c < cols; ++c) {
      const S own = E::store(C(double(rstd[r]) * (g(c) - mean_g - xhat(r, c) * mean_gx)));
      dx[r * cols + c] = added ? E::store(C(E::load(own)) + C(E::load(added[r * cols + c]))) : own;
    }
  });
  if (!dweight) return;
  const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  parallel_for_split("kestrel::layer_norm_backward (weight)", blocks, rows * cols, [=](int64_t block) {
    const int64_t begin = block * kColumnBlock, end = std::min(cols, begin + kColumnBlock);
    std::vector<double> dw(size_t(end - begin), 0.0), db(size_t(end - begin), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = begin; c < end; ++c) {
        const double d = double(D::load(dy[r * cols + c]));
        dw[c - begin] += d * xhat(r, c);
        db[c - begin] += d;
      }
    for (int64_t c = begin; c < end; ++c) {
      dweight[c] = E::store(typename E::compute(dw[c - begin]));
      if (dbias) dbias[c] = E::store(typename E::compute(db[c - begin]));
    }
  });
}

// Runs body(E{}, R{}) for x's dtype E and the rows' dtype R (y's or dy's): E's own, or f16/bf16 beside f32.
template <class Body>
void with_row_dtypes(kestrel_dtype x, kestrel_dtype rows, Body body) {
  if (x == KESTREL_DTYPE_F32 && rows == KESTREL_DTYPE_F16) return body(F32{}, F16{});
  if (x == KESTREL_DTYPE_F32 && rows == KESTREL_DTYPE_BF16) return body(F32{}, BF16{});
  dispatch_float(x, [&](auto elem) { body(elem, elem); });
}

}  // namespace

bool supports_layer_norm(const kestrel_op& op) {
  return kestrel::plugin_shapes::layer_norm_fits(op, /*lowered=*/true, /*adds=*/true);
}

void launch_layer_norm(const kestrel_op& op) {
  if (op.kind == KESTREL_OP_LAYER_NORM_BACKWARD)
    with_row_dtypes(op.inputs[1].dtype, op.inputs[0].dtype,
                    [&](auto x, auto dy) { backward_rows<decltype(x), decltype(dy)>(op); });
  else
    with_row_dtypes(op.inputs[0].dtype, op.outputs[0].dtype,
                    [&](auto x, auto y) { forward_rows<decltype(x), decltype(y)>(op); });
}

}  // namespace kestrel_cpu
