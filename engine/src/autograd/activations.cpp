// Element-wise activations, dropout and softmax: forward and backward side by side.
#include "autocast.h"
#include "kestrel/functional.h"
#include "tensor_math.h"

namespace kestrel::fn {

Var relu(const Var& x) {
  Tensor y = ops::unary(KESTREL_UNARY_RELU, x.value());
  return make_var(y, {x}, "relu", [x = x.node(), y](const Tensor& dy) {
    accumulate_grad(*x, math::activation_backward(KESTREL_BINARY_RELU_BACKWARD, dy, y));  // dy * (y > 0)
  });
}

Var gelu(const Var& x) {
  return make_var(ops::unary(KESTREL_UNARY_GELU, x.value()), {x}, "gelu", [x = x.node()](const Tensor& dy) {
    accumulate_grad(*x, math::activation_backward(KESTREL_BINARY_GELU_BACKWARD, dy, x->value));
  });
}

Var tanh(const Var& x) {
  Tensor y = ops::unary(KESTREL_UNARY_TANH, x.value());
  return make_var(y, {x}, "tanh", [x = x.node(), y](const Tensor& dy) {
    // d tanh = 1 - y^2
    accumulate_grad(*x, math::mul(dy, math::affine(math::unary(KESTREL_UNARY_SQUARE, y), -1.0, 1.0)));
  });
}

Var sigmoid(const Var& x) {
  Tensor y = ops::unary(KESTREL_UNARY_SIGMOID, x.value());
  return make_var(y, {x}, "sigmoid", [x = x.node(), y](const Tensor& dy) {
    // d sigmoid = y * (1 - y)
    accumulate_grad(*x, math::mul(dy, math::mul(y, math::affine(y, -1.0, 1.0))));
  });
}

Var dropout(const Var& x, double p, bool training, uint64_t seed, uint64_t offset) {
  if (!training || p == 0.0) return x;
  if (p < 0.0 || p >= 1.0) throw InvalidArgument("dropout: p must be in [0, 1)");
  // mask = keep / (1 - p), keep ~ Bernoulli(1 - p)
  Tensor mask = Tensor::empty(x.value().shape(), x.value().dtype(), x.value().device());
  ops::random_(mask, KESTREL_DISTRIBUTION_BERNOULLI, seed, offset, 1.0 - p, 0.0);
  mask = math::scale(mask, 1.0 / (1.0 - p));
  return make_var(math::mul(x.value(), mask), {x}, "dropout",
                  [x = x.node(), mask](const Tensor& dy) { accumulate_grad(*x, math::mul(dy, mask)); });
}

namespace {
// softmax or log_softmax over the last axis: the fused op when offered, else max-shifted primitives.
Tensor softmax_forward(const Tensor& x, bool log) {
  Tensor in = x.contiguous();
  Tensor y = Tensor::empty(in.shape(), in.dtype(), in.device());
  kestrel_softmax_params params{abi_size<kestrel_softmax_params>, log ? 1 : 0};
  if (ops::launch_if_supported(in.device(), ops::make_op(KESTREL_OP_SOFTMAX, &params, {in}, {y}))) return y;
  int last = in.rank() - 1;
  Tensor shifted = math::sub(in, ops::reduce(KESTREL_REDUCE_MAX, in, {last}, true));
  Tensor exp = math::unary(KESTREL_UNARY_EXP, shifted);
  Tensor total = math::sum(exp, {last}, true);
  return log ? math::sub(shifted, math::unary(KESTREL_UNARY_LOG, total)) : math::div(exp, total);
}
}  // namespace

Var softmax(const Var& x_in) {
  const Var x = widened(x_in);
  Tensor y = softmax_forward(x.value(), false);
  return make_var(y, {x}, "softmax", [x = x.node(), y](const Tensor& dy) {
    // dx = y * (dy - sum(dy * y, last))
    int last = y.rank() - 1;
    Tensor inner = math::sum(math::mul(dy, y), {last}, true);
    accumulate_grad(*x, math::mul(y, math::sub(dy, inner)));
  });
}

Var log_softmax(const Var& x_in) {
  const Var x = widened(x_in);
  Tensor y = softmax_forward(x.value(), true);
  return make_var(y, {x}, "log_softmax", [x = x.node(), y](const Tensor& dy) {
    // dx = dy - exp(y) * sum(dy, last)
    int last = y.rank() - 1;
    accumulate_grad(*x, math::sub(dy, math::mul(math::unary(KESTREL_UNARY_EXP, y), math::sum(dy, {last}, true))));
  });
}

}  // namespace kestrel::fn
