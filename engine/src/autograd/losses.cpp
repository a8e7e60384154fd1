// Losses: forward and backward side by side. Both return the mean over the batch as a scalar.
#include <fmt/format.h>

#include "kestrel/functional.h"
#include "tensor_math.h"

namespace kestrel::fn {

Var cross_entropy(const Var& logits, const Tensor& labels) {
  const Tensor& x = logits.value();  // (N, C)
  if (x.rank() != 2 || labels.rank() != 1 || labels.size(0) != x.size(0))
    throw InvalidArgument(fmt::format("cross_entropy: logits {} and labels {} must be (N, C) and (N)", x.describe(),
                                      labels.describe()));
  const int64_t n = x.size(0);
  Tensor in = x.contiguous();
  Tensor losses = Tensor::empty({n}, x.dtype(), x.device());
  Tensor dlogits = Tensor::empty(x.shape(), x.dtype(), x.device());  // softmax - onehot, per sample
  if (!ops::launch_if_supported(x.device(),
                                ops::make_op(KESTREL_OP_SOFTMAX_CROSS_ENTROPY, nullptr, {in, labels}, {losses, dlogits}))) {
    // loss_i = logsumexp(x_i) - x_i[label_i]; gradient softmax(x_i) - onehot(label_i)
    Tensor shifted = math::sub(in, ops::reduce(KESTREL_REDUCE_MAX, in, {1}, true));
    Tensor exp = math::unary(KESTREL_UNARY_EXP, shifted);
    Tensor total = math::sum(exp, {1}, true);
    Tensor log_probs = math::sub(shifted, math::unary(KESTREL_UNARY_LOG, total));
    Tensor index = labels.dtype() == DType::i64 ? labels.view({n, 1}) : labels.to(DType::i64).view({n, 1});
    losses = math::scale(ops::gather(log_probs, 1, index), -1.0).view({n});
    dlogits = math::div(exp, total);
    ops::scatter_add_(dlogits, 1, index, Tensor::full({n, 1}, -1.0, x.dtype(), x.device()));
  }
  Tensor loss = math::mean(losses, {}, false);
  return make_var(loss, {logits}, "cross_entropy", [logits = logits.node(), dlogits, n](const Tensor& dy) {
    // d mean / d logits = dlogits / N, times the incoming scalar gradient
    accumulate_grad(*logits, math::mul(dlogits, math::scale(dy, 1.0 / static_cast<double>(n))));
  });
}

Var mse_loss(const Var& prediction, const Tensor& target) {
  const Tensor& p = prediction.value();
  if (p.shape() != target.shape())
    throw InvalidArgument(fmt::format("mse_loss: prediction {} and target {} differ in shape", p.describe(), target.describe()));
  Tensor diff = math::sub(p, target);
  Tensor loss = math::mean(math::unary(KESTREL_UNARY_SQUARE, diff), {}, false);
  return make_var(loss, {prediction}, "mse_loss", [prediction = prediction.node(), diff](const Tensor& dy) {
    double n = static_cast<double>(diff.numel());
    accumulate_grad(*prediction, math::mul(math::scale(diff, 2.0 / n), dy));
  });
}

}  // namespace kestrel::fn
