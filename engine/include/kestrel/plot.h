// Pictures of training runs: the plot.svg a run writes, and `kestrel plot` overlaying several runs.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kestrel {

// What a run's folder records, for drawing.
struct RunCurves {
  std::string name;      // in the legend: the run folder's name
  std::string subtitle;  // model, device and final figures, when known
  std::vector<std::pair<int64_t, double>> train_loss;  // (optimizer step, loss) every log_every steps
  struct Eval {
    int64_t step = 0, epoch = 0;  // epoch counted from 1
    double loss = 0, accuracy = 0;  // accuracy as a fraction; NaN for regression
  };
  std::vector<Eval> evals;  // one per epoch
};

// Reads RUN/metrics.jsonl and, when there, RUN/summary.json. Throws InvalidArgument naming the file when
// the folder holds no metrics.
RunCurves read_run_curves(const std::string& run_dir);

// Three panels: the training loss against steps (each run's raw curve faint, an exponential moving
// average over it bold), the test loss and the test accuracy per epoch; axes with ticks and labels, one
// colour per run, a legend, and each run's subtitle. Returns the SVG text.
std::string plot_svg(const std::vector<RunCurves>& runs);

}  // namespace kestrel
