// Pooling, batch normalisation and layer normalisation: forward and backward side by side.
#include <fmt/format.h>

#include <optional>

#include "../runtime/device_runtime.h"
#include "autocast.h"
#include "kestrel/functional.h"
#include "tensor_math.h"

namespace kestrel::fn {

namespace {
Var pool(const Var& x_in, const ops::Window& window, kestrel_pool_mode mode, const char* name) {
  const Var x = widened(x_in);
  if (x.value().rank() != 4) throw InvalidArgument(fmt::format("{}: expected (N, C, H, W), got {}", name, x.value().describe()));
  ops::PoolResult result = ops::pool2d(x.value(), window, mode);
  return make_var(result.out, {x}, name, [x = x.node(), window, mode, indices = result.indices](const Tensor& dy) {
    accumulate_grad(*x, ops::pool2d_backward(dy, indices, window, mode, x->value.shape()));
  });
}
}  // namespace

Var max_pool2d(const Var& x, const ops::Window& window) { return pool(x, window, KESTREL_POOL_MAX, "max_pool2d"); }
Var avg_pool2d(const Var& x, const ops::Window& window) { return pool(x, window, KESTREL_POOL_AVG, "avg_pool2d"); }

Var batch_norm2d(const Var& x_in, const Var& weight, const Var& bias, Tensor& running_mean, Tensor& running_var,
                 bool training, double momentum, double eps) {
  const Var x = widened(x_in);
  const Tensor& input = x.value();  // (N, C, H, W)
  if (input.rank() != 4) throw InvalidArgument(fmt::format("batch_norm2d: expected (N, C, H, W), got {}", input.describe()));
  const int64_t channels = input.size(1);
  const Shape per_channel{1, channels, 1, 1};
  const std::vector<int> stats_dims{0, 2, 3};
  Tensor mean, var;  // (1, C, 1, 1)
  if (training) {
    const double count = static_cast<double>(input.numel() / channels);
    // As torch refuses it: with one value per channel the normalised value is 0 whatever the input, which
    // then gets no gradient (a batch of 1 after global pooling, e.g. an epoch's last batch).
    if (count == 1)
      throw InvalidArgument(fmt::format("batch_norm2d: training needs more than one value per channel, got input {}; "
                                        "use a larger batch (or drop_last to skip a last batch of 1)",
                                        input.describe()));
    mean = math::mean(input, stats_dims, true);
    var = math::mean(math::unary(KESTREL_UNARY_SQUARE, math::sub(input, mean)), stats_dims, true);  // biased
    // running = (1 - momentum) * running + momentum * batch, with the unbiased variance as torch keeps
    NoGradGuard no_grad;
    double unbias = count > 1 ? count / (count - 1) : 1.0;
    ops::binary_(KESTREL_BINARY_ADD, running_mean, math::scale(running_mean, 1.0 - momentum),
                 math::scale(mean.view({channels}), momentum));
    ops::binary_(KESTREL_BINARY_ADD, running_var, math::scale(running_var, 1.0 - momentum),
                 math::scale(var.view({channels}), momentum * unbias));
  } else {
    mean = running_mean.view(per_channel);
    var = running_var.view(per_channel);
  }
  Tensor invstd = math::unary(KESTREL_UNARY_RSQRT, math::affine(var, 1.0, eps));  // (1, C, 1, 1)
  Tensor xhat = math::mul(math::sub(input, mean), invstd);
  Tensor gamma = weight.value().view(per_channel), beta = bias.value().view(per_channel);
  Tensor y = math::add(math::mul(xhat, gamma), beta);
  return make_var(y, {x, weight, bias},
                  "batch_norm2d", [x = x.node(), weight = weight.node(), bias = bias.node(), xhat, invstd, gamma,
                                   training, stats_dims, channels](const Tensor& dy) {
                    if (bias->requires_grad) accumulate_grad(*bias, math::sum(dy, stats_dims, false));
                    if (weight->requires_grad) accumulate_grad(*weight, math::sum(math::mul(dy, xhat), stats_dims, false));
                    if (!x->requires_grad) return;
                    Tensor dxhat = math::mul(dy, gamma);
                    if (!training) return accumulate_grad(*x, math::mul(dxhat, invstd));
                    // dx = invstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), means over (N, H, W)
                    Tensor mean_dxhat = math::mean(dxhat, stats_dims, true);
                    Tensor mean_dxhat_xhat = math::mean(math::mul(dxhat, xhat), stats_dims, true);
                    Tensor centered = math::sub(math::sub(dxhat, mean_dxhat), math::mul(xhat, mean_dxhat_xhat));
                    accumulate_grad(*x, math::mul(centered, invstd));
                  });
}

namespace {

// The fused LAYER_NORM op (plugin ABI 1.7) over x viewed as (rows, the normalised axes' product) where
// the device has it both ways; nothing otherwise (or for a bias without a weight), and the caller composes.
// y comes out in `out` (x's dtype, or since 1.15 a 16-bit one beside an f32 x), its gradient in the same.
std::optional<Var> fused_layer_norm(const Var& x, const Var& weight, const Var& bias, int normalized, double eps,
                                    DType out) {
  const Tensor& input = x.value();
  if (!ops::fused_ops_enabled() || (bias.defined() && !weight.defined())) return std::nullopt;
  if ((weight.defined() && weight.value().dtype() != input.dtype()) || (bias.defined() && bias.value().dtype() != input.dtype()))
    return std::nullopt;
  int64_t cols = 1;
  for (int d = input.rank() - normalized; d < input.rank(); ++d) cols *= input.size(d);
  const int64_t rows = cols ? input.numel() / cols : 0;
  const Tensor x2 = input.contiguous().view({rows, cols});                                // (R, C)
  const Tensor w = weight.defined() ? weight.value().contiguous().view({cols}) : Tensor();  // (C)
  const Tensor b = bias.defined() ? bias.value().contiguous().view({cols}) : Tensor();      // (C)
  Tensor y = Tensor::empty({rows, cols}, out, input.device());
  const DType statistics = math::statistics_dtype(input.dtype());
  Tensor mean = Tensor::empty({rows}, statistics, input.device()), rstd = Tensor::empty({rows}, statistics, input.device());
  const kestrel_layer_norm_params params{abi_size<kestrel_layer_norm_params>, eps};
  kestrel_op forward = ops::make_op(KESTREL_OP_LAYER_NORM, &params, {x2}, {y, mean, rstd});
  // Backward's descriptor, forward's tensors standing in for the gradients (same shapes and dtypes).
  kestrel_op backward = ops::make_op(KESTREL_OP_LAYER_NORM_BACKWARD, &params, {y, x2, mean, rstd}, {x2});
  for (const Tensor& t : {w, b}) {
    if (!t.defined()) continue;
    forward.inputs[forward.num_inputs++] = t.descriptor();
    backward.outputs[backward.num_outputs++] = t.descriptor();
  }
  if (w.defined()) backward.inputs[backward.num_inputs++] = w.descriptor();
  if (!ops::supports(input.device(), backward) || !ops::launch_if_supported(input.device(), forward)) return std::nullopt;
  std::vector<Var> parents{x};
  if (weight.defined()) parents.push_back(weight);
  if (bias.defined()) parents.push_back(bias);
  return make_var(y.view(input.shape()), parents, "layer_norm",
                  [x = x.node(), weight = weight.node(), bias = bias.node(), x2, w, b, mean, rstd, params](const Tensor& dy) {
                    const Tensor dy2 = dy.contiguous().view(x2.shape());  // (R, C)
                    Tensor dx = Tensor::empty(x2.shape(), x2.dtype(), x2.device());
                    // The weight's and bias's gradients straight into their storage where nothing is there
                    // yet to add to (the op writes both whenever it has them).
                    const GradDestination dw = w.defined() ? grad_destination(*weight, w.dtype()) : GradDestination{};
                    const GradDestination db = b.defined() ? grad_destination(*bias, b.dtype()) : GradDestination{};
                    kestrel_op op = ops::make_op(KESTREL_OP_LAYER_NORM_BACKWARD, &params, {dy2, x2, mean, rstd}, {dx});
                    if (w.defined()) {
                      op.inputs[op.num_inputs++] = w.descriptor();
                      op.outputs[op.num_outputs++] = dw.tensor.view(w.shape()).descriptor();  // (C)
                    }
                    if (b.defined()) op.outputs[op.num_outputs++] = db.tensor.view(b.shape()).descriptor();  // (C)
                    // A pre-norm block's residual stream already has its gradient from the skip connection:
                    // the op adds dx to it (ABI 1.16) where the device takes that, instead of an ADD after.
                    const Tensor so_far = x->requires_grad ? gradient_so_far(*x) : Tensor();
                    bool added = false;
                    // Only a plugin built against 1.16 or later is asked: an earlier one might read the extra
                    // input as the weight rather than refuse it.
                    if (so_far.defined() && so_far.is_contiguous() && x2.device().runtime().api().abi_minor >= 16) {
                      op.inputs[op.num_inputs++] = so_far.view(x2.shape()).descriptor();  // (R, C)
                      added = ops::supports(x2.device(), op);
                      if (!added) --op.num_inputs;
                    }
                    ops::launch(x2.device(), op);
                    if (added)
                      replace_grad(*x, dx.view(x->value.shape()));
                    else if (x->requires_grad)
                      accumulate_grad(*x, dx.view(x->value.shape()));
                    if (weight && weight->requires_grad) land_grad(*weight, dw);
                    if (bias && bias->requires_grad) land_grad(*bias, db);
                  });
}

}  // namespace

// Over the last `normalized` axes, per position: the statistics are the sample's own, so training and
// inference compute the same thing and there are no running buffers.
Var layer_norm(const Var& x_in, const Var& weight, const Var& bias, int normalized, double eps, bool feeds_product) {
  const Var x = widened(x_in);
  const Tensor& input = x.value();  // (..., *normalized_shape)
  if (normalized < 1 || normalized > input.rank())
    throw InvalidArgument(fmt::format("layer_norm: cannot normalise the last {} axes of {}", normalized, input.describe()));
  // Into products alone under autocast: the result in the scope's dtype, as the products would cast it.
  if (feeds_product && autocasts(x_in)) {
    if (input.dtype() == DType::f32)
      if (std::optional<Var> fused = fused_layer_norm(x, weight, bias, normalized, eps, autocast_dtype())) return *fused;
    return lowered(layer_norm(x, weight, bias, normalized, eps));
  }
  if (std::optional<Var> fused = fused_layer_norm(x, weight, bias, normalized, eps, input.dtype())) return *fused;
  std::vector<int> dims;  // the normalised axes
  for (int d = input.rank() - normalized; d < input.rank(); ++d) dims.push_back(d);
  Tensor mean = math::mean(input, dims, true);                                                    // (..., 1, ..)
  Tensor var = math::mean(math::unary(KESTREL_UNARY_SQUARE, math::sub(input, mean)), dims, true);  // biased, as torch
  Tensor invstd = math::unary(KESTREL_UNARY_RSQRT, math::affine(var, 1.0, eps));
  Tensor xhat = math::mul(math::sub(input, mean), invstd);
  Tensor y = xhat;
  std::vector<Var> parents{x};
  if (weight.defined()) {  // weight, bias: normalized_shape; the bias may be left out (torch's bias=False)
    y = math::mul(xhat, weight.value());
    parents.push_back(weight);
  }
  if (bias.defined()) {
    y = math::add(y, bias.value());
    parents.push_back(bias);
  }
  // The other axes, over which weight and bias gradients sum.
  std::vector<int> batch_dims;
  for (int d = 0; d < input.rank() - normalized; ++d) batch_dims.push_back(d);
  return make_var(y, parents, "layer_norm",
                  [x = x.node(), weight = weight.node(), bias = bias.node(), xhat, invstd, dims,
                   batch_dims](const Tensor& dy) {
                    auto over_batch = [&](const Tensor& t) { return batch_dims.empty() ? t : math::sum(t, batch_dims, false); };
                    if (bias && bias->requires_grad) accumulate_grad(*bias, over_batch(dy));
                    if (weight && weight->requires_grad) accumulate_grad(*weight, over_batch(math::mul(dy, xhat)));
                    if (!x->requires_grad) return;
                    Tensor dxhat = weight ? math::mul(dy, weight->value) : dy;
                    // dx = invstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), means over the normalised axes
                    Tensor mean_dxhat = math::mean(dxhat, dims, true);
                    Tensor mean_dxhat_xhat = math::mean(math::mul(dxhat, xhat), dims, true);
                    Tensor centered = math::sub(math::sub(dxhat, mean_dxhat), math::mul(xhat, mean_dxhat_xhat));
                    accumulate_grad(*x, math::mul(centered, invstd));
                  });
}

}  // namespace kestrel::fn
