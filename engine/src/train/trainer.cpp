// The training loop: the same code for every model and backend. Each part has a file of its own: the
// step (train_step), the metrics window and reporting (metrics_window, run_report), evaluation
// (evaluation) and checkpoints (checkpoint); this file decides when each runs.
#include "kestrel/trainer.h"

#include <algorithm>
#include <cmath>

#include "kestrel/loader.h"
#include "metrics_window.h"
#include "run_data.h"
#include "run_report.h"
#include "train_state.h"
#include "train_step.h"

namespace kestrel {

namespace {

RunPlan plan_for(const RunConfig& config, int64_t batches_per_epoch) {
  const int64_t all = config.epochs * batches_per_epoch;
  return {batches_per_epoch, config.max_steps ? std::min(config.max_steps, all) : all};
}

// What fit() returns when TrainOptions::interrupt_after stops it, as if the process were killed there:
// nothing more is evaluated or written.
TrainSummary interrupted(const Device& device, const TrainState& state, const std::string& out_dir) {
  TrainSummary summary;
  summary.device = device.str();
  summary.steps = state.step;
  summary.out_dir = out_dir;
  return summary;
}

}  // namespace

Device select_device(Engine& engine, std::vector<std::string> preferences, const std::string& fallback) {
  if (preferences.empty() || preferences.front() == "auto") return engine.best_device();
  if (fallback == "error") return engine.device(preferences.front());
  return engine.best_device(preferences);
}

Trainer::Trainer(RunConfig config, Engine& engine) : config_(std::move(config)), engine_(engine) {
  ModelSpec spec = ModelSpec::load(config_.model_path);
  if (config_.out_dir.empty()) config_.out_dir = "runs/" + spec.name();
  RunData data = load_run_data(config_, spec);
  train_ = std::make_shared<const data::Dataset>(std::move(data.train));
  test_ = std::make_shared<const data::Dataset>(std::move(data.test));
  device_ = select_device(engine_, config_.backends, config_.fallback);
  model_ = std::make_unique<Model>(std::move(spec), device_, config_.seed);
  optimizer_ = std::make_unique<Optimizer>(config_.optimizer, model_->flat_parameters(), model_->flat_gradients());
}

Trainer::~Trainer() = default;

RunIdentity Trainer::identity() const {
  const DeviceInfo info = engine_.properties(device_);
  const ModelSpec& spec = model_->spec();
  return {spec.name(), spec.source(), device_.str(), info.name, info.runtime, spec.parameter_count()};
}

// A step per batch, a report after each (RunReport decides what to write), a checkpoint every
// checkpoint_every steps and at each epoch's end, an evaluation per epoch.
TrainSummary Trainer::fit(const TrainOptions& options) {
  const bool resuming = options.resume || !options.resume_from.empty();
  TrainState state;
  if (resuming) state = restore_checkpoint(options.resume_from.empty() ? config_.out_dir : options.resume_from);
  data::DataLoader loader(train_, {config_.batch_size, true, config_.drop_last, config_.seed, config_.data.workers, 4},
                          device_);
  const RunPlan plan = plan_for(config_, loader.batches_per_epoch());
  RunReport report(config_, plan, identity(), state, resuming, options);
  MetricsWindow metrics(device_, train_->is_classification(), state.window);
  TrainStep step(config_, *model_, *optimizer_, metrics, [&](const std::string& note) { report.message(note); });

  EvalResult test{NAN, NAN, 0};
  while (state.epoch < config_.epochs && state.step < plan.total_steps) {
    loader.start_epoch(state.epoch, state.batch);
    data::Batch batch;
    while (state.step < plan.total_steps && loader.next(batch)) {
      double lr = scheduled_lr(config_.schedule, config_.optimizer.lr, state.step, plan.total_steps, state.epoch);
      step.run(batch, lr, state.rng_offset);
      ++state.step;
      state.batch = batch.index + 1;
      metrics.count(batch.size);
      report.stepped(state, lr, batch.size, metrics);
      if (config_.checkpoint_every && state.step % config_.checkpoint_every == 0) save_checkpoint(state, metrics);
      if (options.interrupt_after && state.step >= options.interrupt_after)
        return interrupted(device_, state, config_.out_dir);
    }
    const bool epoch_done = state.batch >= plan.batches;
    test = evaluate();
    report.evaluated(state, test);
    if (epoch_done) {
      ++state.epoch;
      state.batch = 0;
    }
    save_checkpoint(state, metrics);
    report.epoch_closed();
    if (!epoch_done) break;  // max_steps reached mid-epoch
  }
  if (!test.samples) test = evaluate();
  return report.finish(state, test, step.replayed());
}

}  // namespace kestrel
