// What a training run reports: OUT/metrics.jsonl, TensorBoard events beside it, a progress bar (or plain
// lines when not on a terminal) and OUT/plot.svg of loss and accuracy per epoch. Engine-internal.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/plot.h"
#include "tensorboard_events.h"

namespace kestrel {

struct MetricRecord {
  std::string kind;  // "train" (every log_every steps) or "eval" (every epoch)
  int64_t epoch = 0, step = 0;
  double loss = 0, accuracy = 0, lr = 0, samples_per_second = 0, seconds = 0;
  double loss_scale = 0;  // f16's loss scale after the step (0: none)
  std::optional<double> grad_norm;  // with clipping: the logged step's gradient norm before it (may be NaN)
};

// One line of a metrics.jsonl (`path` names it in messages); nullopt for a line that is not a record (cut
// short when its run was killed).
std::optional<MetricRecord> parse_metric_line(const std::string& line, const std::string& path);
// What plot.svg draws of a run's records.
RunCurves run_curves(std::string name, std::string subtitle, const std::vector<MetricRecord>& records);
// A run's caption in plots: "model on device (device name): N steps, test loss L, test accuracy A%".
std::string run_subtitle(const std::string& model, const std::string& device, const std::string& device_name,
                         int64_t steps, double test_loss, double test_accuracy);

class RunLog {
 public:
  // Reopens OUT/metrics.jsonl; when resuming, records after `resume_step` (written by the run that was
  // interrupted, and about to be redone) are dropped first. An empty out_dir writes no files (a
  // data-parallel rank other than 0).
  RunLog(std::string out_dir, int64_t resume_step, bool quiet, int progress);
  void record(const MetricRecord& record);  // to metrics.jsonl and TensorBoard
  // The run config's text, for TensorBoard's text dashboard.
  void config_text(const std::string& text);
  void progress(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, double loss, double accuracy,
                double samples_per_second, double eta_seconds);
  void message(const std::string& text);
  // A progress bar is redrawn between reports too (with the last figures read), at most 10 times a second.
  bool live() const { return bar_ && !quiet_; }
  void write_plot() const;  // plot.svg (kestrel/plot.h)
  void set_plot_subtitle(std::string text) { plot_subtitle_ = std::move(text); }
  const std::vector<MetricRecord>& records() const { return records_; }

 private:
  std::string out_dir_;
  bool quiet_, bar_;
  bool bar_open_ = false;
  bool reported_ = false;  // a record written by this process (before it, the bar has no loss to show)
  std::vector<MetricRecord> records_;
  std::unique_ptr<TensorBoardEvents> events_;  // null without files
  std::string plot_subtitle_;
};

}  // namespace kestrel
