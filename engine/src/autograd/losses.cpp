// Losses: forward and backward side by side. Both return the mean over the batch (or its positions) as a scalar.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "autocast.h"
#include "kestrel/functional.h"
#include "tensor_math.h"

namespace kestrel::fn {

namespace {

struct PerRow {
  Tensor losses;   // (n): -log softmax(x)[label]
  Tensor dlogits;  // (n, C): softmax(x) - onehot(label), only when asked for
};

// `gradient`: also the rows' gradients (training); without, the fused op writes none (evaluation).
PerRow softmax_cross_entropy(const Tensor& in, const Tensor& labels, bool gradient) {  // in: (n, C) contiguous, labels: (n)
  const int64_t n = in.size(0);
  PerRow r{Tensor::empty({n}, in.dtype(), in.device()), Tensor()};
  if (gradient) r.dlogits = Tensor::empty(in.shape(), in.dtype(), in.device());
  std::vector<Tensor> outputs{r.losses};
  if (gradient) outputs.push_back(r.dlogits);
  if (ops::launch_if_supported(in.device(), ops::make_op(KESTREL_OP_SOFTMAX_CROSS_ENTROPY, nullptr, {in, labels}, outputs)))
    return r;
  // loss_i = logsumexp(x_i) - x_i[label_i]; gradient softmax(x_i) - onehot(label_i)
  Tensor shifted = math::sub(in, ops::reduce(KESTREL_REDUCE_MAX, in, {1}, true));
  Tensor exp = math::unary(KESTREL_UNARY_EXP, shifted);
  Tensor total = math::sum(exp, {1}, true);
  Tensor log_probs = math::sub(shifted, math::unary(KESTREL_UNARY_LOG, total));
  Tensor index = labels.dtype() == DType::i64 ? labels.view({n, 1}) : labels.to(DType::i64).view({n, 1});
  r.losses = math::scale(ops::gather(log_probs, 1, index), -1.0).view({n});
  if (!gradient) return r;
  r.dlogits = math::div(exp, total);
  ops::scatter_add_(r.dlogits, 1, index, Tensor::full({n, 1}, -1.0, in.dtype(), in.device()));
  return r;
}

}  // namespace

Var cross_entropy(const Var& logits_in, const Tensor& labels, std::optional<int64_t> ignore_index) {
  const Var logits = widened(logits_in);
  const Tensor& x = logits.value();  // (N, C) or (N, T, C)
  const bool fits = (x.rank() == 2 || x.rank() == 3) && labels.rank() == x.rank() - 1 &&
                    std::equal(labels.shape().begin(), labels.shape().end(), x.shape().begin());
  if (!fits)
    throw InvalidArgument(fmt::format("cross_entropy: logits {} and labels {} must be (N, C) and (N), or (N, T, C) and "
                                      "(N, T)",
                                      x.describe(), labels.describe()));
  // Positions fold into rows: one row per sample or per sequence position.
  const int64_t rows = x.numel() / x.shape().back();
  Tensor in = x.contiguous().view({rows, x.shape().back()});
  Tensor flat_labels = labels.contiguous().view({rows});
  // The rows' gradients are scaled once, in backward, by each row's share of the loss times dy: one pass
  // over the (rows, C) gradients, where scaling them in forward and multiplying by dy took two.
  const bool gradient = grad_enabled() && logits.requires_grad();
  Tensor loss, dlogits, share;  // scalar; (rows, C) softmax - onehot; each row's weight in the mean, scalar or (rows, 1)
  if (!ignore_index) {
    PerRow r = softmax_cross_entropy(in, flat_labels, gradient);
    loss = math::mean(r.losses, {}, false);
    dlogits = r.dlogits;
    share = Tensor::full({}, 1.0 / static_cast<double>(rows), x.dtype(), x.device());
  } else {
    // torch's ignore_index: those positions add nothing, and the mean is over the others. Their labels
    // become 0 so that the kernels index inside the classes.
    Tensor ignored = Tensor::full({}, double(*ignore_index), flat_labels.dtype(), flat_labels.device());
    Tensor keep = ops::binary(KESTREL_BINARY_NE, flat_labels, ignored);  // (rows) 1 or 0
    PerRow r = softmax_cross_entropy(in, math::mul(flat_labels, keep), gradient);
    Tensor weight = keep.to(x.dtype());                                    // (rows)
    Tensor count = math::sum(weight, {}, false);                           // scalar, on the device
    loss = math::div(math::sum(math::mul(r.losses, weight), {}, false), count);
    dlogits = r.dlogits;
    share = math::div(weight, count).view({rows, 1});
  }
  if (!gradient) return Var(loss);
  return make_var(loss, {logits}, "cross_entropy", [logits = logits.node(), dlogits, share](const Tensor& dy) {
    accumulate_grad(*logits, math::mul(dlogits, math::mul(share, dy)).view(logits->value.shape()));
  });
}

Var mse_loss(const Var& prediction_in, const Tensor& target) {
  const Var prediction = widened(prediction_in);
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
