#include "metrics_window.h"

#include <algorithm>
#include <cmath>

#include "kestrel/ops.h"
#include "scoring.h"

namespace kestrel {

MetricsWindow::MetricsWindow(const Device& device, bool classify, const WindowTotals& resumed)
    : classify_(classify),
      loss_sum_(Tensor::full({}, resumed.loss, DType::f32, device)),
      correct_(Tensor::full({}, resumed.correct, DType::i64, device)),
      steps_(resumed.steps),
      samples_(resumed.samples) {}

void MetricsWindow::add(const Tensor& loss, const Tensor& logits, const Tensor& targets) {
  ops::binary_(KESTREL_BINARY_ADD, loss_sum_, loss_sum_, loss);
  if (classify_) ops::binary_(KESTREL_BINARY_ADD, correct_, correct_, correct_count(logits, targets));
}

MetricsWindow::Figures MetricsWindow::close() {
  Figures figures;
  figures.samples_per_second = samples_ / std::max(clock_.seconds(), 1e-9);
  figures.loss = loss_sum_.to_doubles()[0] / steps_;
  figures.accuracy = classify_ ? correct_.to_doubles()[0] / double(samples_) : NAN;
  ops::fill_(loss_sum_, 0.0);
  ops::fill_(correct_, 0.0);
  steps_ = samples_ = 0;
  clock_.restart();
  return figures;
}

WindowTotals MetricsWindow::totals() const {
  return {loss_sum_.to_doubles()[0], correct_.to_doubles()[0], steps_, samples_};
}

}  // namespace kestrel
