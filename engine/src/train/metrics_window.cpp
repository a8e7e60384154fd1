#include "metrics_window.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kestrel/ops.h"
#include "scoring.h"

namespace kestrel {

MetricsWindow::MetricsWindow(const Device& device, int64_t labels_per_sample, const WindowTotals& resumed, int64_t step,
                             ProcessGroup* group)
    : labels_per_sample_(labels_per_sample),
      group_(group),
      // The ranks' sums are added when read: a resumed window's totals start on rank 0 only.
      loss_sum_(Tensor::full({}, group && group->rank() ? 0.0 : resumed.loss, DType::f32, device)),
      correct_(Tensor::full({}, group && group->rank() ? 0.0 : resumed.correct, DType::i64, device)),
      finite_steps_(Tensor::full({}, std::isfinite(resumed.loss) ? double(resumed.steps) : 0.0, DType::f32, device)),
      zero_(Tensor::full({}, 0.0, DType::f32, device)),
      finite_scratch_(Tensor::empty({}, DType::f32, device)),
      window_start_(step - resumed.steps),
      steps_(resumed.steps),
      samples_(resumed.samples) {}

void MetricsWindow::add(const Tensor& loss, const Tensor& logits, const Tensor& targets) {
  ops::binary_(KESTREL_BINARY_ADD, loss_sum_, loss_sum_, loss);
  // 0 * sum is 0 exactly when the sum is finite (0 * inf and 0 * NaN are NaN). In place in a scratch
  // scalar: no allocation per step.
  ops::binary_(KESTREL_BINARY_MUL, finite_scratch_, loss_sum_, zero_);
  ops::binary_(KESTREL_BINARY_EQ, finite_scratch_, finite_scratch_, zero_);
  ops::binary_(KESTREL_BINARY_ADD, finite_steps_, finite_steps_, finite_scratch_);
  if (labels_per_sample_ > 0) ops::binary_(KESTREL_BINARY_ADD, correct_, correct_, correct_count(logits, targets));
}

double MetricsWindow::read(const Tensor& scalar) const {
  if (!group_) return scalar.to_doubles()[0];
  // Each rank keeps its own sums (a resumed window's are rank 0's alone); their total is the window's.
  Tensor total = scalar.clone();
  group_->all_reduce_sum(total, "the training metrics");
  group_->wait(fmt::format("step {}: summing the training metrics over {} ranks", window_start_ + steps_, group_->size()));
  return total.to_doubles()[0];
}

MetricsWindow::Figures MetricsWindow::close() {
  Figures figures;
  figures.samples_per_second = samples_ / std::max(clock_.seconds(), 1e-9);
  figures.loss = read(loss_sum_) / steps_;
  figures.accuracy =
      labels_per_sample_ > 0 ? read(correct_) / (double(samples_) * double(labels_per_sample_)) : NAN;
  if (gradient_norm_.defined()) figures.gradient_norm = gradient_norm_.to_doubles()[0];  // every rank's alike
  ops::fill_(loss_sum_, 0.0);
  ops::fill_(correct_, 0.0);
  ops::fill_(finite_steps_, 0.0);
  window_start_ += steps_;
  steps_ = samples_ = 0;
  clock_.restart();
  return figures;
}

WindowTotals MetricsWindow::totals() const {
  return {read(loss_sum_), read(correct_), steps_, samples_};
}

int64_t MetricsWindow::first_nonfinite_step() const {
  if (std::isfinite(read(loss_sum_))) return 0;
  // Within the window whatever the device counted (a backend failing conformance's finite-test could
  // count every step as finite).
  // With data parallelism the first rank whose loss was non-finite names the step: every rank's count.
  std::vector<double> counts = finite_steps_.to_doubles();
  if (group_) {
    Tensor all = Tensor::empty({group_->size()}, finite_steps_.dtype(), finite_steps_.device());
    group_->all_gather(finite_steps_.view({1}), all, "the ranks' finite steps");
    group_->wait("gathering where each rank's loss stopped being finite");
    counts = all.to_doubles();
  }
  const auto finite = static_cast<int64_t>(*std::min_element(counts.begin(), counts.end()));
  return window_start_ + std::clamp<int64_t>(finite + 1, 1, std::max<int64_t>(steps_, 1));
}

}  // namespace kestrel
