// Losses: forward and backward side by side. Both return the mean over the batch (or its positions) as a scalar.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "autocast.h"
#include "padded_rows.h"
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

namespace {

// How rows weigh in the mean: the labels the kernels index with (ignored rows' set to 0), each row's share
// of the loss (a scalar 1 / rows, or (rows, 1) weight / count with torch's ignore_index), and the mean of
// per-row losses (rows) under those shares. Shares and the loss are in `dtype`.
struct RowWeights {
  Tensor labels;  // (rows)
  Tensor share;   // () or (rows, 1)
  Tensor weight;  // (rows) 1 or 0, with ignore_index only
  Tensor count;   // (), with ignore_index only

  RowWeights(const Tensor& flat_labels, std::optional<int64_t> ignore_index, DType dtype) {
    const int64_t rows = flat_labels.size(0);
    if (!ignore_index) {
      labels = flat_labels;
      share = Tensor::full({}, 1.0 / static_cast<double>(rows), dtype, flat_labels.device());
      return;
    }
    // torch's ignore_index: those positions add nothing, and the mean is over the others. Their labels
    // become 0 so that the kernels index inside the classes.
    Tensor ignored = Tensor::full({}, double(*ignore_index), flat_labels.dtype(), flat_labels.device());
    Tensor keep = ops::binary(KESTREL_BINARY_NE, flat_labels, ignored);  // (rows) 1 or 0
    labels = math::mul(flat_labels, keep);
    weight = keep.to(dtype);
    count = math::sum(weight, {}, false);  // scalar, on the device
    // Every target ignored: the mean is 0 / 0 (NaN, as torch's), but no row takes a share of the gradient
    // (torch's backward writes zeros there): weight / max(count, 1) is 0 for every row then.
    const Tensor at_least_one = ops::binary(KESTREL_BINARY_MAX, count, math::scalar_like(count, 1.0));
    share = math::div(weight, at_least_one).view({rows, 1});
  }
  Tensor mean(const Tensor& losses) const {  // losses (rows) -> ()
    if (!weight.defined()) return math::mean(losses, {}, false);
    return math::div(math::sum(math::mul(losses, weight), {}, false), count);
  }
};

// Cross-entropy through the fused ops of plugin ABI 1.12 where the device has them for these logits (16-bit
// ones read as they are, their losses in f32): forward writes only the losses, and backward the logits'
// gradient from the logits, already scaled by each row's share times dy. Nothing where the device lacks
// either op (then the logits are widened and forward's gradient is scaled in a pass of its own).
std::optional<Var> fused_cross_entropy(const Var& logits, const Tensor& flat_labels,
                                       std::optional<int64_t> ignore_index, bool gradient) {
  if (!ops::fused_ops_enabled()) return std::nullopt;
  const int64_t rows = flat_labels.size(0);
  const Device& device = logits.value().device();
  const DType statistic = math::statistics_dtype(logits.value().dtype());
  Tensor losses = Tensor::empty({rows}, statistic, device);  // (rows); also stands in for backward's scales
  auto supported = [&](const Tensor& x) {  // x: (rows, C)
    const kestrel_op forward = ops::make_op(KESTREL_OP_SOFTMAX_CROSS_ENTROPY, nullptr, {x, flat_labels}, {losses});
    const kestrel_op backward =
        ops::make_op(KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD, nullptr, {x, flat_labels, losses}, {x});
    return ops::supports(device, forward) && (!gradient || ops::supports(device, backward));
  };
  // The logits' rows where they lie when the device reads rows a stride apart (a linear layer's logits
  // cut out of its padded product, 823 MB for GPT-2 small's bf16 batch of 8 x 1024), else a contiguous copy.
  const Shape matrix{rows, logits.value().shape().back()};
  Tensor x = rows_view(logits.value(), matrix).value_or(Tensor());  // (rows, C)
  if (!x.defined() || !supported(x)) {
    x = logits.value().contiguous().view(matrix);
    if (!supported(x)) return std::nullopt;
  }
  const RowWeights weights(flat_labels, ignore_index, statistic);
  ops::launch(device, ops::make_op(KESTREL_OP_SOFTMAX_CROSS_ENTROPY, nullptr, {x, weights.labels}, {losses}));
  const Tensor loss = weights.mean(losses);
  if (!gradient) return Var(loss);
  return make_var(loss, {logits}, "cross_entropy",
                  [logits = logits.node(), x, labels = weights.labels, share = weights.share, rows,
                   losses](const Tensor& dy) {
                    const Tensor product = math::mul(share, dy);  // () or (rows, 1)
                    const Tensor scales = product.rank() == 0 ? product.reshape({1}).expand({rows}) : product.view({rows});
                    // (rows, C) in the logits' rows: a linear layer's padded product takes it as it is.
                    Tensor grad = empty_like_rows(x);
                    // With forward's losses where the device takes them (ABI 1.14): each row's log-sum-exp
                    // follows from its loss, and the logits are read once instead of three times.
                    const kestrel_op from_losses = ops::make_op(KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD, nullptr,
                                                                {x, labels, scales, losses}, {grad});
                    if (!ops::launch_if_supported(x.device(), from_losses))
                      ops::launch(x.device(), ops::make_op(KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD, nullptr,
                                                           {x, labels, scales}, {grad}));
                    accumulate_grad(*logits, rows_reshaped(grad, logits->value.shape()));
                  });
}

}  // namespace

Var cross_entropy(const Var& logits_in, const Tensor& labels, std::optional<int64_t> ignore_index) {
  const Tensor& given = logits_in.value();  // (N, C) or (N, T, C)
  const bool fits = (given.rank() == 2 || given.rank() == 3) && labels.rank() == given.rank() - 1 &&
                    std::equal(labels.shape().begin(), labels.shape().end(), given.shape().begin());
  if (!fits)
    throw InvalidArgument(fmt::format("cross_entropy: logits {} and labels {} must be (N, C) and (N), or (N, T, C) and "
                                      "(N, T)",
                                      given.describe(), labels.describe()));
  // Positions fold into rows: one row per sample or per sequence position.
  const int64_t rows = given.numel() / given.shape().back();
  const Tensor flat_labels = labels.contiguous().view({rows});
  const bool gradient = grad_enabled() && logits_in.requires_grad();
  if (std::optional<Var> fused = fused_cross_entropy(logits_in, flat_labels, ignore_index, gradient)) return *fused;
  const Var logits = widened(logits_in);
  const Tensor& x = logits.value();
  const Tensor in = x.contiguous().view({rows, x.shape().back()});
  // The rows' gradients are scaled once, in backward, by each row's share of the loss times dy: one pass
  // over the (rows, C) gradients, where scaling them in forward and multiplying by dy took two.
  const RowWeights weights(flat_labels, ignore_index, x.dtype());
  PerRow r = softmax_cross_entropy(in, weights.labels, gradient);
  const Tensor loss = weights.mean(r.losses);
  if (!gradient) return Var(loss);
  return make_var(loss, {logits}, "cross_entropy",
                  [logits = logits.node(), dlogits = r.dlogits, share = weights.share](const Tensor& dy) {
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
