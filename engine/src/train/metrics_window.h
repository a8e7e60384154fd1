// The training metrics since the last report. Engine-internal.
#pragma once
#include <cmath>
#include <optional>

#include "kestrel/distributed.h"
#include "kestrel/tensor.h"
#include "stopwatch.h"
#include "train_state.h"

namespace kestrel {

// Loss and correct predictions are summed on the device by the step itself, so a replayed step sums
// them too and nothing is read back per step; the host counts steps and samples. The figures are read
// only when a report closes the window.
class MetricsWindow {
 public:
  // labels_per_sample: class labels per sample (1, or a sequence's positions), 0 for regression. step:
  // optimizer steps done when the window (or, resumed, the rest of it) opens.
  // group: with data parallelism, the ranks whose sums are added when read (every rank reads at the same
  // steps, since each read is a collective); null for one process.
  MetricsWindow(const Device& device, int64_t labels_per_sample, const WindowTotals& resumed, int64_t step,
                ProcessGroup* group = nullptr);

  // Inside the step, eager or captured. loss: scalar; logits: (N, classes) or (N, T, classes); targets:
  // (N,) or (N, T) labels when classifying.
  void add(const Tensor& loss, const Tensor& logits, const Tensor& targets);
  // On the host, once per optimizer step, with the samples of the step over all ranks.
  void count(int64_t samples) {
    ++steps_;
    samples_ += samples;
  }

  // After the update, with clipping on: the gradients' norm before clipping (a device scalar, the same on
  // every rank), kept until the window closes.
  void note_gradient_norm(const Tensor& norm) { gradient_norm_ = norm; }

  struct Figures {
    double loss = 0, accuracy = 0, samples_per_second = 0;  // accuracy over labels: NaN without them
    std::optional<double> gradient_norm;  // the last step's norm before clipping; none without clipping
  };
  // The window's mean loss, accuracy and rate; then a new window opens.
  Figures close();
  // The running sums, for a checkpoint (reads the device).
  WindowTotals totals() const;
  // The first step (counted from 1 over the run) whose loss made the window's sum NaN or infinite, or
  // 0 when it is finite (reads the device). A non-finite sum stays so until close(), and the steps
  // before it are counted on the device, so this is exact without a read per step.
  int64_t first_nonfinite_step() const;

 private:
  // The sum over the ranks of a device scalar of this window (the scalar itself when alone), read.
  double read(const Tensor& scalar) const;

  int64_t labels_per_sample_;  // 0: no class labels
  ProcessGroup* group_;
  Tensor loss_sum_, correct_;  // scalars on the device: f32, i64
  Tensor finite_steps_;        // f32 scalar: steps of the window after which the sum was still finite
  Tensor zero_;                // f32 scalar 0, to multiply and compare with
  Tensor finite_scratch_;      // f32 scalar: this step's 1 (sum finite) or 0
  Tensor gradient_norm_;       // the last noted norm (undefined: none)
  int64_t window_start_;       // steps done before the window opened
  int64_t steps_, samples_;
  Stopwatch clock_;
};

}  // namespace kestrel
