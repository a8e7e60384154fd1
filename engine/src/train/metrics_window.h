// The training metrics since the last report. Engine-internal.
#pragma once
#include "kestrel/tensor.h"
#include "stopwatch.h"
#include "train_state.h"

namespace kestrel {

// Loss and correct predictions are summed on the device by the step itself, so a replayed step sums
// them too and nothing is read back per step; the host counts steps and samples. The figures are read
// only when a report closes the window.
class MetricsWindow {
 public:
  MetricsWindow(const Device& device, bool classify, const WindowTotals& resumed);

  // Inside the step, eager or captured. loss: scalar; logits: (N, classes); targets: (N,) labels when
  // classifying.
  void add(const Tensor& loss, const Tensor& logits, const Tensor& targets);
  // On the host, once per optimizer step.
  void count(int64_t samples) {
    ++steps_;
    samples_ += samples;
  }

  struct Figures {
    double loss = 0, accuracy = 0, samples_per_second = 0;  // accuracy: NaN without class labels
  };
  // The window's mean loss, accuracy and rate; then a new window opens.
  Figures close();
  // The running sums, for a checkpoint (reads the device).
  WindowTotals totals() const;

 private:
  bool classify_;
  Tensor loss_sum_, correct_;  // scalars on the device: f32, i64
  int64_t steps_, samples_;
  Stopwatch clock_;
};

}  // namespace kestrel
