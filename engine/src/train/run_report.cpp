#include "run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "kestrel/io.h"

namespace kestrel {

RunReport::RunReport(const RunConfig& config, const RunPlan& plan, RunIdentity identity, const TrainState& start,
                     bool resuming, const TrainOptions& options, bool root)
    : config_(config),
      plan_(plan),
      identity_(std::move(identity)),
      start_step_(start.step),
      root_(root),
      log_(root ? config.out_dir : "", resuming ? start.step : -1, options.quiet || !root, options.progress),
      last_loss_(NAN),
      last_accuracy_(NAN) {
  log_.message(fmt::format("kestrel: training {} ({} parameters) on {} ({}, {})", identity_.model, identity_.parameters,
                           identity_.device, identity_.device_name, identity_.device_runtime));
  log_.set_plot_subtitle(fmt::format("{} on {} ({})", identity_.model, identity_.device, identity_.device_name));
  if (config.precision != DType::f32)
    log_.message(fmt::format("kestrel: mixed precision: products and the activations between them in {}; master "
                             "weights, gradients, softmax, norms and losses in f32",
                             dtype_name(config.precision)));
  if (config.accumulate_steps > 1)
    log_.message(fmt::format("kestrel: {} micro-batches of {} samples per optimizer step (batch size {})",
                             config.accumulate_steps, config.micro_batch_size(), config.batch_size));
  // max_steps only ever shortens a run; one that asks for more steps than its epochs hold is told so.
  if (config.max_steps > plan.total_steps)
    log_.message(fmt::format("kestrel: max_steps {} is more than the {} steps of {} epoch(s) of {} batches, so the run "
                             "stops after {}; raise epochs (--epochs) to run them all",
                             config.max_steps, plan.total_steps, config.epochs, plan.batches, plan.total_steps));
  if (start.step > 0) log_.message(fmt::format("kestrel: resumed at epoch {}, step {}", start.epoch + 1, start.step));
  try {
    log_.config_text(io::read_file(config.source, io::kMaxTextFileBytes));
  } catch (const InvalidArgument&) {
    // a config given as text (the C API) has no file to show
  }
}

bool RunReport::due(const TrainState& state) const {
  return state.step % config_.log_every == 0 || state.batch == plan_.batches || state.step == plan_.total_steps;
}

void RunReport::stepped(const TrainState& state, double lr, int64_t samples, MetricsWindow& metrics) {
  run_samples_ += samples;
  if (due(state)) {
    MetricsWindow::Figures figures = metrics.close();
    last_loss_ = figures.loss;
    last_accuracy_ = figures.accuracy;
    log_.record({"train", state.epoch, state.step, figures.loss, figures.accuracy, lr, figures.samples_per_second,
                 run_clock_.seconds(), state.loss_scale.scale, figures.gradient_norm});
    show_progress(state, figures.loss, figures.accuracy, figures.samples_per_second);
  } else if (log_.live() && redraw_clock_.seconds() > 0.1) {
    show_progress(state, last_loss_, last_accuracy_, run_rate());
    redraw_clock_.restart();
  }
}

double RunReport::run_rate() const { return run_samples_ / std::max(run_clock_.seconds(), 1e-9); }

void RunReport::show_progress(const TrainState& state, double loss, double accuracy, double samples_per_second) {
  double eta = double(plan_.total_steps - state.step) * config_.batch_size / std::max(run_rate(), 1e-9);
  log_.progress(state.epoch, config_.epochs, state.batch, plan_.batches, loss, accuracy, samples_per_second, eta);
}

void RunReport::evaluated(const TrainState& state, const EvalResult& result) {
  log_.record({"eval", state.epoch, state.step, result.loss, result.accuracy, 0, 0, run_clock_.seconds()});
  std::string accuracy = std::isnan(result.accuracy) ? "" : fmt::format(", accuracy {:.2f}%", result.accuracy * 100);
  log_.message(fmt::format("epoch {}/{}: train loss {:.4f}, test loss {:.4f}{}", state.epoch + 1, config_.epochs,
                           last_loss_, result.loss, accuracy));
}

TrainSummary RunReport::finish(const TrainState& state, const EvalResult& test, int64_t replayed_steps, int world_size,
                              double gradient_wait_seconds, double gradient_sync_seconds) {
  TrainSummary summary;
  summary.device = identity_.device;
  summary.steps = state.step;
  summary.epochs = state.epoch;
  summary.train_loss = last_loss_;
  summary.test = test;
  summary.seconds = run_clock_.seconds();
  summary.samples_per_second = (state.step - start_step_) > 0 ? run_samples_ / std::max(summary.seconds, 1e-9) : 0;
  summary.out_dir = config_.out_dir;
  summary.replayed_steps = replayed_steps;
  summary.world_size = world_size;
  summary.loss_scale = state.loss_scale.scale;
  summary.skipped_steps = state.loss_scale.skipped_steps;
  summary.gradient_wait_seconds = gradient_wait_seconds;
  summary.gradient_sync_seconds = gradient_sync_seconds;
  write_summary(summary);
  log_.set_plot_subtitle(
      run_subtitle(identity_.model, identity_.device, identity_.device_name, summary.steps, test.loss, test.accuracy));
  log_.write_plot();
  return summary;
}

void RunReport::write_summary(const TrainSummary& summary) const {
  if (!root_) return;
  nlohmann::json json{{"model", identity_.model},
                      {"model_file", identity_.model_file},
                      {"config", config_.source},
                      {"device", summary.device},
                      {"device_name", identity_.device_name},
                      {"parameters", identity_.parameters},
                      {"batch_size", config_.batch_size},
                      {"accumulate_steps", config_.accumulate_steps},
                      {"precision", dtype_name(config_.precision)},
                      {"epochs", summary.epochs},
                      {"steps", summary.steps},
                      {"train_loss", std::isnan(summary.train_loss) ? nlohmann::json() : nlohmann::json(summary.train_loss)},
                      {"test_loss", summary.test.loss},
                      {"test_samples", summary.test.samples},
                      {"samples_per_second", summary.samples_per_second},
                      {"replayed_steps", summary.replayed_steps},
                      {"world_size", summary.world_size},
                      {"gradient_wait_seconds", summary.gradient_wait_seconds},
                      {"gradient_sync_seconds", summary.gradient_sync_seconds},
                      {"seconds", summary.seconds}};
  if (!std::isnan(summary.test.accuracy)) json["test_accuracy"] = summary.test.accuracy;
  if (summary.loss_scale > 0) {  // f16
    json["loss_scale"] = summary.loss_scale;
    json["skipped_steps"] = summary.skipped_steps;
  }
  io::write_file_atomically(config_.out_dir + "/summary.json", json.dump(2) + "\n");
}

}  // namespace kestrel
