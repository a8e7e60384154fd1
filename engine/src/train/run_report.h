// Everything a training run tells the world. Engine-internal.
#pragma once
#include <cstdint>
#include <string>

#include "kestrel/config.h"
#include "kestrel/trainer.h"
#include "metrics_window.h"
#include "run_log.h"
#include "stopwatch.h"
#include "train_state.h"

namespace kestrel {

// Who trains what where: named in the first message and in summary.json.
struct RunIdentity {
  std::string model, model_file, device, device_name, device_runtime;
  int64_t parameters = 0;
};

struct RunPlan {
  int64_t batches = 0;      // per epoch
  int64_t total_steps = 0;  // the epochs' batches, or max_steps when fewer
};

// Messages, metrics.jsonl records, the progress bar, plot.svg and summary.json: all output of a run
// goes through here, so that with data parallelism only rank 0 would make one.
class RunReport {
 public:
  // Opens the log (when resuming, dropping records after the checkpoint's step) and announces the run.
  // root: whether this process speaks for the run (rank 0 of a data-parallel run); the others only keep
  // the metrics window's rhythm, since reading it is a collective.
  RunReport(const RunConfig& config, const RunPlan& plan, RunIdentity identity, const TrainState& start,
            bool resuming, const TrainOptions& options, bool root = true);

  void message(const std::string& text) { log_.message(text); }
  // Whether stepped() will close the metrics window at this state.
  bool due(const TrainState& state) const;
  // After each optimizer step: every log_every steps, at an epoch's last batch and at the last step, a
  // record and a progress line with the figures of the window it closes; between them a live bar is
  // redrawn with the last figures, at most 10 times a second.
  void stepped(const TrainState& state, double lr, int64_t samples, MetricsWindow& metrics);
  // After each epoch's evaluation.
  void evaluated(const TrainState& state, const EvalResult& result);
  void epoch_closed() const { log_.write_plot(); }
  double last_loss() const { return last_loss_; }
  double last_accuracy() const { return last_accuracy_; }
  // The final figures, also written to summary.json.
  TrainSummary finish(const TrainState& state, const EvalResult& test, int64_t replayed_steps, int world_size = 1,
                      double gradient_wait_seconds = 0, double gradient_sync_seconds = 0);

 private:
  void show_progress(const TrainState& state, double loss, double accuracy, double samples_per_second);
  void write_summary(const TrainSummary& summary) const;
  double run_rate() const;  // samples per second since the run (or its resumption) started

  const RunConfig& config_;
  const RunPlan plan_;
  const RunIdentity identity_;
  const int64_t start_step_;
  const bool root_;
  RunLog log_;
  Stopwatch run_clock_, redraw_clock_;
  int64_t run_samples_ = 0;
  double last_loss_, last_accuracy_;  // as last reported: NaN before the first report
};

}  // namespace kestrel
