// Linear and 2-D convolution layers: forward and backward side by side.
#include <fmt/format.h>

#include <optional>

#include "../runtime/device_runtime.h"
#include "autocast.h"
#include "padded_rows.h"
#include "weight_grad.h"
#include "kestrel/functional.h"
#include "tensor_math.h"

namespace kestrel::fn {

// Under autocast a and b are 16-bit and the weight f32: the product lands in f32 unrounded where the
// device can (ops::gemm_).
void accumulate_product(VarNode& weight, const Tensor& a, const Tensor& b) {
  if (!weight.requires_grad) return;
  if (weight.grad_buffer)
    weight.grad_buffer->add_product(a, b);
  else
    accumulate_grad(weight, ops::matmul(a, b, weight.value.dtype()).view(weight.value.shape()));
}

void accumulate_row_sum(VarNode& bias, const Tensor& dz) {
  if (!bias.requires_grad) return;
  const GradDestination db = grad_destination(bias, dz.dtype());
  Tensor row = db.tensor.view({1, dz.size(1)});  // (1, out)
  ops::reduce_into(KESTREL_REDUCE_SUM, row, dz);
  land_grad(bias, db);
}

void accumulate_product_and_row_sum(VarNode& weight, VarNode& bias, const Tensor& a, const Tensor& b) {
  if (!weight.requires_grad || !weight.grad_buffer || !bias.requires_grad) {
    accumulate_product(weight, a, b);
    accumulate_row_sum(bias, a.transpose(0, 1));
    return;
  }
  const GradDestination db = grad_destination(bias, weight.grad_buffer->storage().dtype());
  Tensor sums = db.tensor.view({a.size(0)});  // (out)
  weight.grad_buffer->add_product(a, b, &sums);
  land_grad(bias, db);
}

namespace {

Tensor activation_grad(kestrel_activation activation, const Tensor& dy, const Tensor& y, const Tensor& pre) {
  switch (activation) {
    case KESTREL_ACTIVATION_RELU: return math::activation_backward(KESTREL_BINARY_RELU_BACKWARD, dy, y);
    case KESTREL_ACTIVATION_GELU: return math::activation_backward(KESTREL_BINARY_GELU_BACKWARD, dy, pre);
    default: return dy;
  }
}

Var linear_same_dtype(const Var& x, const Var& weight, const Var& bias, kestrel_activation activation);
Var linear_autocast(const Var& x, const Var& weight, const Var& bias, kestrel_activation activation);
Var conv2d_same_dtype(const Var& x, const Var& weight, const Var& bias, const ops::Window& window,
                      kestrel_activation activation);

}  // namespace

Var linear(const Var& x, const Var& weight, const Var& bias, kestrel_activation activation) {
  if (!autocasts(x)) return linear_same_dtype(x, weight, bias, activation);
  return linear_autocast(x, weight, bias, activation);
}

Var conv2d(const Var& x, const Var& weight, const Var& bias, const ops::Window& window, kestrel_activation activation) {
  if (!autocasts(x)) return conv2d_same_dtype(x, weight, bias, window, activation);
  // The weight's gradient reaches it through the cast, rounded to 16 bits on the way.
  return conv2d_same_dtype(lowered(x), lowered(weight), lowered(bias), window, activation);
}

namespace {

// The number of output features a 16-bit product is computed over: `out` rounded up so that rows of
// that many elements meet the device's preferred GEMM alignment (cuBLAS's fastest kernels need 16-byte
// aligned rows and extents; a 50257-wide layer of logits misses them and runs about 5x slower), or
// `out` itself where the device has no preference. The extra features have zero weights and bias.
int64_t aligned_features(int64_t out, DType dtype, const Device& device) {
  const int64_t per_row = int64_t(device.runtime().gemm_row_alignment() / dtype_size(dtype));
  return per_row <= 1 ? out : (out + per_row - 1) / per_row * per_row;
}

// m (R, ...) in `dtype`, followed by zero rows up to `rows` in all.
Tensor zero_padded(const Tensor& m, int64_t rows, DType dtype) {
  if (rows == m.size(0)) return m.to(dtype);
  Shape shape = m.shape();
  shape[0] = rows;
  Tensor out = Tensor::zeros(shape, dtype, m.device());
  Tensor head = out.slice(0, 0, m.size(0));
  ops::copy_(head, m);
  return out;
}

struct LinearOutputs {
  Tensor y;    // (N, out): act(pre)
  Tensor pre;  // (N, out): x @ w^T + bias, kept for GELU's gradient (undefined otherwise when fused)
};

// The fused LINEAR op where the device has it, else its composition. input: (N, in), w: (out, in),
// bias: (out) or undefined; one dtype.
LinearOutputs linear_forward(const Tensor& input, const Tensor& w, const Tensor& bias, kestrel_activation activation) {
  if (input.rank() != 2 || w.rank() != 2 || input.size(1) != w.size(1))
    throw InvalidArgument(fmt::format("linear: input {} does not fit weight {}", input.describe(), w.describe()));
  Tensor wt = w.transpose(0, 1);  // (in, out) as a strided view: the GEMM reads it transposed
  Tensor y = Tensor::empty({input.size(0), w.size(0)}, input.dtype(), input.device());
  Tensor pre = activation == KESTREL_ACTIVATION_GELU ? Tensor::empty(y.shape(), y.dtype(), y.device()) : Tensor();
  kestrel_linear_params params{abi_size<kestrel_linear_params>, activation};
  kestrel_op op = bias.defined() ? ops::make_op(KESTREL_OP_LINEAR, &params, {input, wt, bias}, {y})
                                 : ops::make_op(KESTREL_OP_LINEAR, &params, {input, wt}, {y});
  if (pre.defined()) op.outputs[op.num_outputs++] = pre.descriptor();
  if (!ops::launch_if_supported(input.device(), op)) {
    Tensor z = ops::matmul(input, wt);
    if (bias.defined()) z = math::add(z, bias);
    pre = z;
    y = activation == KESTREL_ACTIVATION_RELU   ? math::unary(KESTREL_UNARY_RELU, z)
        : activation == KESTREL_ACTIVATION_GELU ? math::unary(KESTREL_UNARY_GELU, z)
                                                : z;
  }
  return {y, pre};
}

Var linear_same_dtype(const Var& x, const Var& weight, const Var& bias, kestrel_activation activation) {
  auto [y, pre] = linear_forward(x.value(), weight.value(), bias.defined() ? bias.value() : Tensor(), activation);
  std::vector<Var> parents{x, weight};
  if (bias.defined()) parents.push_back(bias);
  return make_var(y, parents, "linear",
                  [x = x.node(), weight = weight.node(), bias = bias.node(), activation, y = y, pre = pre](const Tensor& dy) {
                    Tensor dz = activation_grad(activation, dy, y, pre);                  // (N, out)
                    if (x->requires_grad) accumulate_grad(*x, ops::matmul(dz, weight->value));  // (N, in)
                    if (bias)  // (out, in) and (out)
                      accumulate_product_and_row_sum(*weight, *bias, dz.transpose(0, 1), x->value);
                    else
                      accumulate_product(*weight, dz.transpose(0, 1), x->value);  // (out, in)
                  });
}

// Mixed precision's linear layer: x f32 or 16-bit, weight and bias f32 (master weights). The product and
// its activation run in the scope's 16-bit dtype, and so does the result. Backward multiplies in 16 bits
// too; the weight gradient, and the input gradient of an f32 x, come out of the GEMMs as f32, straight
// into their f32 gradients (on devices with ABI 1.6's mixed GEMM), with no 16-bit gradient, cast or
// separate addition in between.
Var linear_autocast(const Var& x, const Var& weight, const Var& bias, kestrel_activation activation) {
  const DType low = autocast_dtype();
  const int64_t out = weight.value().size(0), features = aligned_features(out, low, x.value().device());
  // The products run over `features` outputs, the padding's weights and bias zero (activations keep 0 at 0).
  const Tensor x16 = x.value().to(low), w16 = zero_padded(weight.value(), features, low);  // (N, in), (features, in)
  const Tensor b16 = bias.defined() ? zero_padded(bias.value(), features, low) : Tensor();   // (features)
  auto [y16, pre16] = linear_forward(x16, w16, b16, activation);                           // (N, features)
  std::vector<Var> parents{x, weight};
  if (bias.defined()) parents.push_back(bias);
  // (N, out): the padded rows' first `out` columns, left where the product wrote them. Cross-entropy reads
  // such rows in place (and writes its gradient so, which backward below takes without a copy); an op that
  // needs contiguous rows copies them. GPT-2 small's logits are 823 MB, about 2 ms a copy on an H200.
  const Tensor y = features == out ? y16 : y16.slice(1, 0, out);
  return make_var(y, parents, "linear",
                  [x = x.node(), weight = weight.node(), bias = bias.node(), activation, x16, w16, y16 = y16,
                   pre16 = pre16, out](const Tensor& dy) {
                    // dy (N, out) in the padded width, its padding 0 so that it adds nothing below: where
                    // dy already lies in such rows of a buffer of its own (cross-entropy writes the
                    // logits' gradient so), only the padding is written; else dy is copied into new rows.
                    const int64_t features = y16.size(1);
                    std::optional<Tensor> in_place;
                    if (features > out && dy.dtype() == y16.dtype()) in_place = sole_padded_rows(dy, features);
                    Tensor dy16 = in_place ? *in_place : dy.to(y16.dtype());  // (N, features)
                    if (features > out) {
                      if (!in_place) {
                        dy16 = Tensor::empty(y16.shape(), y16.dtype(), y16.device());
                        Tensor head = dy16.slice(1, 0, out);
                        ops::copy_(head, dy);
                      }
                      Tensor padding = dy16.slice(1, out, features);
                      ops::fill_(padding, 0.0);
                    }
                    Tensor dz = activation_grad(activation, dy16, y16, pre16);  // (N, features) 16-bit
                    if (x->requires_grad) accumulate_grad(*x, ops::matmul(dz, w16, x->value.dtype()));  // (N, in)
                    const Tensor dz_out = dz.slice(1, 0, out);                                  // (N, out)
                    if (dz.size(1) == out) {
                      if (bias)  // (out, in) and (out)
                        accumulate_product_and_row_sum(*weight, *bias, dz_out.transpose(0, 1), x16);
                      else
                        accumulate_product(*weight, dz_out.transpose(0, 1), x16);  // (out, in)
                      return;
                    }
                    if (!weight->requires_grad) {
                      if (bias) accumulate_row_sum(*bias, dz_out);
                      return;
                    }
                    // Over the padded features too, their rows then dropped: the features are the extent
                    // this product's kernels vectorise along, and cuBLAS takes its slow align1 kernels for
                    // an unaligned one (GPT-2's 50257 logits, 2026-11-25-h100-mfu.md). The bias gradient
                    // comes out of the same product, as it does unpadded.
                    const Tensor dzt = dz.transpose(0, 1);                                              // (features, N)
                    Tensor padded = Tensor::empty({features, x16.size(1)}, DType::f32, x16.device());  // (features, in)
                    if (bias && bias->requires_grad) {
                      Tensor sums = Tensor::empty({features}, DType::f32, x16.device());  // (features)
                      ops::gemm_with_row_sums_(padded, sums, dzt, x16);
                      accumulate_grad(*bias, sums.slice(0, 0, out));  // (out)
                    } else {
                      ops::gemm_(padded, dzt, x16);
                    }
                    accumulate_grad(*weight, padded.slice(0, 0, out));  // (out, in)
                  });
}

kestrel_conv_params conv_params(const ops::Window& w, kestrel_activation activation) {
  return {abi_size<kestrel_conv_params>, w.stride_h, w.stride_w, w.pad_h, w.pad_w, w.dilation_h, w.dilation_w, activation};
}

// The fused CONV2D op (plugin ABI 1.10) where the device runs it and both its gradients; nothing
// otherwise, and the caller composes. It keeps x for backward, not the column matrix.
std::optional<Var> fused_conv2d(const Var& x, const Var& weight, const Var& bias, const ops::Window& window,
                                kestrel_activation activation, const Shape& out_shape) {
  if (!ops::fused_ops_enabled()) return std::nullopt;
  const Tensor input = x.value().contiguous();                                          // (N, C, H, W)
  const Tensor w = weight.value().contiguous();                                         // (O, C, KH, KW)
  const Tensor b = bias.defined() ? bias.value().contiguous() : Tensor();               // (O)
  Tensor y = Tensor::empty(out_shape, input.dtype(), input.device());                  // (N, O, OH, OW)
  const kestrel_conv_params params = conv_params(window, activation);
  kestrel_op forward = ops::make_op(KESTREL_OP_CONV2D, &params, {input, w}, {y});
  // Backward's descriptors, forward's tensors standing in for the gradients (same shapes and dtypes);
  // with ReLU they read y too, and apply its derivative themselves.
  const std::vector<Tensor> relu_output = activation == KESTREL_ACTIVATION_RELU ? std::vector<Tensor>{y} : std::vector<Tensor>{};
  // Copied into backward's closure: the ops it makes point at its params.
  auto backward_op = [params, relu_output](kestrel_op_kind kind, const Tensor& dy, const Tensor& other, const Tensor& grad) {
    std::vector<Tensor> inputs{dy, other};
    inputs.insert(inputs.end(), relu_output.begin(), relu_output.end());
    return ops::make_op(kind, &params, inputs, {grad});
  };
  const kestrel_op data = backward_op(KESTREL_OP_CONV2D_BACKWARD_DATA, y, w, input);
  kestrel_op filter = backward_op(KESTREL_OP_CONV2D_BACKWARD_FILTER, y, input, w);
  if (b.defined()) {
    forward.inputs[forward.num_inputs++] = b.descriptor();
    filter.outputs[filter.num_outputs++] = b.descriptor();
  }
  const Device& device = input.device();
  if (!ops::supports(device, data) || !ops::supports(device, filter) || !ops::launch_if_supported(device, forward))
    return std::nullopt;
  std::vector<Var> parents{x, weight};
  if (bias.defined()) parents.push_back(bias);
  return make_var(y, parents, "conv2d",
                  [x = x.node(), weight = weight.node(), bias = bias.node(), input, w, b, backward_op](const Tensor& dy) {
                    const Tensor dz = dy.contiguous();  // (N, O, OH, OW), the gradient of y
                    const bool bias_grad = bias && bias->requires_grad;
                    if (weight->requires_grad || bias_grad) {
                      // Into the parameters' gradient storage where nothing is there yet to add to.
                      const GradDestination dw = grad_destination(*weight, w.dtype());  // (O, C, KH, KW)
                      const GradDestination db = bias_grad ? grad_destination(*bias, b.dtype()) : GradDestination{};  // (O)
                      kestrel_op op = backward_op(KESTREL_OP_CONV2D_BACKWARD_FILTER, dz, input, dw.tensor);
                      if (bias_grad) op.outputs[op.num_outputs++] = db.tensor.view(b.shape()).descriptor();
                      ops::launch(dz.device(), op);
                      if (weight->requires_grad) land_grad(*weight, dw);
                      if (bias_grad) land_grad(*bias, db);
                    }
                    if (x->requires_grad) {
                      Tensor dx = Tensor::empty(input.shape(), input.dtype(), input.device());  // (N, C, H, W)
                      ops::launch(dz.device(), backward_op(KESTREL_OP_CONV2D_BACKWARD_DATA, dz, w, dx));
                      accumulate_grad(*x, dx);
                    }
                  });
}

// The composed convolution: im2col, one GEMM, the bias and the activation as primitives.
Var composed_conv2d(const Var& x, const Var& weight, const Var& bias, const ops::Window& window,
                    kestrel_activation activation, const Shape& out_shape) {
  const Tensor& input = x.value();   // (N, C, H, W)
  const Tensor& w = weight.value();  // (O, C, KH, KW)
  const int64_t n = out_shape[0], channels = input.size(1), out_channels = out_shape[1];
  const int64_t spatial = out_shape[2] * out_shape[3];
  // The batch is folded into one GEMM: (O, C*KH*KW) @ (C*KH*KW, N*L). One large product keeps the BLAS
  // busy where N small ones would each pay its start-up cost.
  Tensor cols = ops::im2col(input, window);                                       // (N, C*KH*KW, L)
  Tensor cols2 = cols.permute({1, 0, 2}).contiguous().view({cols.size(1), n * spatial});  // (C*KH*KW, N*L)
  Tensor w2 = w.reshape({out_channels, -1});                                      // (O, C*KH*KW)
  Tensor y = ops::matmul(w2, cols2).view({out_channels, n, spatial}).permute({1, 0, 2});  // (N, O, L) view
  y = bias.defined() ? math::add(y, bias.value().view({1, out_channels, 1})) : y.contiguous();
  if (activation == KESTREL_ACTIVATION_RELU) y = math::unary(KESTREL_UNARY_RELU, y);
  std::vector<Var> parents{x, weight};
  if (bias.defined()) parents.push_back(bias);
  return make_var(
      y.view(out_shape), parents, "conv2d",
      [x = x.node(), weight = weight.node(), bias = bias.node(), window, cols2, n, channels, out_channels, spatial,
       activation, y](const Tensor& dy) {
        const int64_t h = x->value.size(2), wd = x->value.size(3), taps = cols2.size(0);
        Tensor dy3 = activation_grad(activation, dy.reshape(y.shape()), y, Tensor());  // (N, O, L)
        if (bias && bias->requires_grad) accumulate_grad(*bias, math::sum(dy3, {0, 2}, false));
        Tensor dy2 = dy3.permute({1, 0, 2}).contiguous().view({out_channels, n * spatial});  // (O, N*L)
        // dW = dy2 @ cols2^T: the sum over the batch happens inside the GEMM (K = N * L).
        accumulate_product(*weight, dy2, cols2.transpose(0, 1));
        if (x->requires_grad) {
          Tensor w2t = weight->value.reshape({out_channels, -1}).transpose(0, 1);  // (C*KH*KW, O)
          Tensor dcols = ops::matmul(w2t, dy2).view({taps, n, spatial});            // (C*KH*KW, N, L)
          // col2im reads the (N, C*KH*KW, L) arrangement through a strided view: no copy.
          accumulate_grad(*x, ops::col2im(dcols.permute({1, 0, 2}), window, channels, h, wd));
        }
      });
}

Var conv2d_same_dtype(const Var& x, const Var& weight, const Var& bias, const ops::Window& window,
                      kestrel_activation activation) {
  const Tensor& input = x.value();   // (N, C, H, W)
  const Tensor& w = weight.value();  // (O, C, KH, KW)
  if (input.rank() != 4 || w.rank() != 4 || input.size(1) != w.size(1))
    throw InvalidArgument(fmt::format("conv2d: input {} does not fit weight {}", input.describe(), w.describe()));
  if (activation != KESTREL_ACTIVATION_NONE && activation != KESTREL_ACTIVATION_RELU)
    throw InvalidArgument("conv2d: the fused activation is none or relu");
  const Shape out_shape{input.size(0), w.size(0), window.out_h(input.size(2)), window.out_w(input.size(3))};
  if (auto y = fused_conv2d(x, weight, bias, window, activation, out_shape)) return *y;
  return composed_conv2d(x, weight, bias, window, activation, out_shape);
}

}  // namespace

}  // namespace kestrel::fn
