// The training loop: the same code for every model and backend. Each part has a file of its own: the
// step (train_step), the metrics window and reporting (metrics_window, run_report), evaluation
// (evaluation) and checkpoints (checkpoint); this file decides when each runs.
#include "kestrel/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "kestrel/io.h"
#include "kestrel/loader.h"
#include "kestrel/ops.h"
#include "busy_guard.h"
#include "checkpoint_state.h"
#include "data_parallel.h"
#include "metrics_window.h"
#include "optimizer_shards.h"
#include "run_data.h"
#include "run_report.h"
#include "train_state.h"
#include "train_step.h"

namespace kestrel {

namespace {

RunPlan plan_for(const RunConfig& config, int64_t batches_per_epoch) {
  int64_t all = 0;
  if (__builtin_mul_overflow(config.epochs, batches_per_epoch, &all))
    throw InvalidArgument(fmt::format("{}: epochs ({}) x {} batches per epoch is more steps than a run can count; "
                                      "give fewer epochs (or --epochs)",
                                      config.source, config.epochs, batches_per_epoch));
  return {batches_per_epoch, config.max_steps ? std::min(config.max_steps, all) : all};
}

// A loss that became NaN or infinite stops the run before that state is reported as progress or
// saved, unless the config says to continue; then it is said once.
class NonFiniteGuard {
 public:
  NonFiniteGuard(const RunConfig& config, int64_t batches) : config_(config), batches_(batches) {}

  // A checkpoint written by a run told to continue may hold a non-finite window: said then already.
  void resumed(const TrainState& state) {
    if (std::isfinite(state.window.loss)) return;
    if (config_.nonfinite_loss == NonFiniteLoss::stop)
      throw NonFiniteLossError(fmt::format(
          "{}: the checkpoint resumed from was written at step {} after the training loss had become NaN or infinite "
          "(by a run told to continue); resume from an earlier checkpoint, or set \"nonfinite_loss\": \"continue\"",
          config_.source, state.step));
    said_ = true;
  }

  void check(const MetricsWindow& metrics, RunReport& report) {
    const int64_t step = metrics.first_nonfinite_step();
    if (!step || said_) return;
    const std::string what = fmt::format("the training loss became NaN or infinite at step {} (epoch {})", step,
                                         (step - 1) / batches_ + 1);
    if (config_.nonfinite_loss == NonFiniteLoss::stop)
      throw NonFiniteLossError(fmt::format(
          "{}: {}; stopped there, the last checkpoint is from before it. Lower the learning rate, check the data, "
          "or set \"nonfinite_loss\": \"continue\" in the run config to go on regardless",
          config_.source, what));
    report.message(fmt::format("kestrel: {}; continuing as the run config says (nonfinite_loss: continue)", what));
    said_ = true;
  }

 private:
  const RunConfig& config_;
  int64_t batches_;
  bool said_ = false;
};

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

namespace {

// A device that cannot multiply in the run's precision is refused before training, by name.
void check_precision(const RunConfig& config, const Device& device) {
  if (config.precision == DType::f32) return;
  try {
    const Tensor probe = Tensor::zeros({2, 2}, config.precision, device);
    ops::matmul(probe, probe);
  } catch (const Error& e) {
    throw ConfigError(fmt::format("{}: /precision: {} cannot multiply in {} ({}); train there in f32, or pick a backend "
                                  "that can (--backend)",
                                  config.source, device.str(), dtype_name(config.precision), e.what()));
  }
}

}  // namespace

Trainer::Trainer(RunConfig config, Engine& engine) : Trainer(std::move(config), engine, World::get()) {}

Trainer::Trainer(RunConfig config, Engine& engine, World& world, std::shared_ptr<SharedRunData> shared)
    : config_(std::move(config)), engine_(engine), world_(world) {
  config_.check();  // flags and API settings may have changed it since the file was read
  check_batch_split(world_, config_);
  ModelSpec spec = ModelSpec::load(config_.model_path);
  const std::vector<std::string> unmatched = spec.checkpoint_layers(config_.activation_checkpointing);
  if (!unmatched.empty())
    throw ConfigError(fmt::format("{}: /activation_checkpointing: '{}' is neither the name nor the type of a layer of "
                                  "{}; name layers it has (kestrel check {} lists them)",
                                  config_.source, unmatched.front(), spec.source(), spec.source()));
  if (config_.out_dir.empty()) config_.out_dir = "runs/" + spec.name();
  const std::shared_ptr<const RunData> data =
      shared ? shared->get(config_, spec) : std::make_shared<const RunData>(load_run_data(config_, spec));
  train_ = std::shared_ptr<const data::Dataset>(data, &data->train);  // sharing `data`'s lifetime
  test_ = std::shared_ptr<const data::Dataset>(data, &data->test);
  vocabulary_ = data->vocabulary;
  // Ranks of one process take the devices the config names, one each; processes, theirs by local rank.
  try {
    device_ = world_.rendezvous() ? engine_.device(config_.distributed.devices.at(size_t(world_.rank())))
                                  : rank_device(engine_, select_device(engine_, config_.backends, config_.fallback),
                                                world_, config_);
  } catch (const BackendUnavailable& e) {  // say where the choice came from
    throw BackendUnavailable(fmt::format("{}: {}: {}", config_.source,
                                         world_.rendezvous() ? "/distributed/devices (or --devices)"
                                                             : "/backend/preference (or --backend, KESTREL_BACKEND)",
                                         e.what()));
  }
  model_ = std::make_unique<Model>(std::move(spec), device_, config_.seed);
  check_precision(config_, device_);
  if (world_.distributed()) {
    check_same_run(world_, config_, *model_, train_->size);
    group_ = std::make_unique<ProcessGroup>(device_, world_, config_.distributed.timeout_seconds);
  }
  if (group_ && config_.distributed.shard_optimizer) {
    shards_ = std::make_unique<OptimizerShards>(*model_, *group_);
    optimizer_ = std::make_unique<Optimizer>(config_.optimizer, shards_->parameters(), shards_->gradients());
  } else {
    optimizer_ = std::make_unique<Optimizer>(config_.optimizer, model_->flat_parameters(), model_->flat_gradients());
  }
}

Trainer::~Trainer() = default;  // the shards before the group they use: declared after it

std::string Trainer::fit_to_memory() {
  config_.accumulate_steps = 1;
  const MemoryPlan plan = plan_memory();
  if (!plan.suggested_accumulate_steps)
    throw OutOfMemory(fmt::format("{}: no micro-batch dividing the batch size ({}) fits on {}: the largest that "
                                  "fits has {} samples. Lower the batch size, checkpoint activations, or free memory; "
                                  "the memory plan:\n{}",
                                  config_.source, plan.batch_size, plan.device, plan.largest_micro_batch, plan.report()));
  config_.accumulate_steps = plan.suggested_accumulate_steps;
  check_batch_split(world_, config_);  // the micro-batches divide each rank's share
  return fmt::format("kestrel: fitted to memory: the step of {} samples fits on {} (largest micro-batch {}), so "
                     "accumulate_steps is {}",
                     config_.micro_batch_size(), plan.device, plan.largest_micro_batch, config_.accumulate_steps);
}

RunIdentity Trainer::identity() const {
  const DeviceInfo info = engine_.properties(device_);
  const ModelSpec& spec = model_->spec();
  return {spec.name(), spec.source(), device_.str(), info.name, info.runtime, spec.parameter_count()};
}

// A trainer built on a run's vocabulary alone (data.vocabulary_file, for generation) has no samples.
void Trainer::refuse_without_samples(const char* what) const {
  if (!config_.data.vocabulary_file.empty())
    throw InvalidArgument(fmt::format("{}: {} needs the text corpus: /data/vocabulary_file ({}) gives the "
                                      "vocabulary alone, for generation; leave it unset to train or evaluate",
                                      config_.source, what, config_.data.vocabulary_file));
}

// Processes under a launcher ask their own callbacks: the run stops at a step when any rank's says so,
// agreed through a collective (the checkpoint that follows is one). Ranks of one process agree in
// MultiDeviceTrainer, which asks rank 0's callback for all of them.
bool Trainer::ranks_go_on(bool mine, int64_t step) {
  if (!group_ || world_.rendezvous()) return mine;
  Tensor stops = Tensor::full({}, mine ? 0.0 : 1.0, DType::f32, device_);
  group_->all_reduce_sum(stops, "the ranks' word on stopping");
  group_->wait(fmt::format("step {}: the ranks' word on stopping", step));
  return stops.to_doubles()[0] == 0;
}

// A step per batch, a report after each (RunReport decides what to write), a checkpoint every
// checkpoint_every steps and at each epoch's end, an evaluation per epoch.
TrainSummary Trainer::fit(const TrainOptions& options) {
  const BusyGuard fitting(fitting_, "fit: this trainer is already training (fit was called again from its progress "
                                   "callback); return false from the callback to stop the run instead");
  refuse_without_samples("fit");
  if (config_.drop_last && train_->size < config_.batch_size)
    throw ConfigError(fmt::format("{}: /drop_last: the training data has {} samples, fewer than /batch_size ({}), so "
                                  "every batch would be dropped and nothing trained; lower batch_size or set drop_last "
                                  "to false",
                                  config_.source, train_->size, config_.batch_size));
  const bool resuming = options.resume || !options.resume_from.empty();
  std::string fitted;
  if (config_.fit_memory) fitted = fit_to_memory();
  const bool root = world_.is_root();  // rank 0 writes the run's files and speaks for it
  std::string replaced;
  if (root) {
    io::remove_stale_temporaries(config_.out_dir);
    io::remove_stale_temporaries(config_.out_dir + "/checkpoints");
    if (!resuming) replaced = clear_previous_run(config_.out_dir);
  }
  data::DataLoader loader(train_, {config_.batch_size, true, config_.drop_last, config_.seed, config_.data.workers, 4,
                                   world_.rank(), world_.size()},
                          device_);
  const RunPlan plan = plan_for(config_, loader.batches_per_epoch());
  TrainState state;
  if (resuming)
    state = restore_checkpoint(options.resume_from.empty() ? config_.out_dir : options.resume_from, plan.batches);
  if (group_) broadcast_model(*group_, *model_);  // the ranks start from the same weights, whatever they loaded
  RunReport report(config_, plan, identity(), state, resuming, options, root);
  if (!replaced.empty()) report.message(replaced);
  if (!fitted.empty()) report.message(fitted);
  if (group_ && world_.rendezvous())
    report.message(fmt::format("kestrel: data-parallel over {} devices of this process ({}): {} samples per device and "
                               "step, gradients summed on the host in {:g} MiB buckets during backward",
                               world_.size(), fmt::join(config_.distributed.devices, ", "),
                               config_.batch_size / world_.size(), config_.distributed.bucket_cap_mb));
  else if (group_)
    report.message(fmt::format("kestrel: data-parallel over {} ranks started by {}: {} samples per rank and step, "
                               "gradients summed in {:g} MiB buckets during backward",
                               world_.size(), world_.launcher(), config_.batch_size / world_.size(),
                               config_.distributed.bucket_cap_mb));
  if (shards_) {
    int64_t state_bytes = 0;
    for (const auto& [name, tensor] : optimizer_->state()) state_bytes += tensor.numel() * int64_t(sizeof(float));
    report.message(fmt::format("kestrel: optimizer state sharded (ZeRO-1): {:.3f} MiB on each rank, for its {} of the {} "
                               "parameters",
                               double(state_bytes) / (1 << 20), shards_->end() - shards_->begin(),
                               model_->flat_parameters().numel()));
  }
  // What the ids mean, beside the weights (whose files carry its fingerprint, which loading checks).
  if (vocabulary_ && root) io::write_file_atomically(config_.out_dir + "/vocabulary.json", vocabulary_->to_json());
  MetricsWindow metrics(device_, train_->is_classification() ? train_->target_numel() : 0, state.window, state.step,
                        group_.get());
  NonFiniteGuard nonfinite(config_, plan.batches);
  nonfinite.resumed(state);
  TrainStep step(config_, *model_, *optimizer_, metrics, [&](const std::string& note) { report.message(note); },
                 state.loss_scale,
                 group_.get(), shards_.get());

  EvalResult test{NAN, NAN, 0};
  while (state.epoch < config_.epochs && state.step < plan.total_steps) {
    loader.start_epoch(state.epoch, state.batch);
    data::Batch batch;
    while (state.step < plan.total_steps && loader.next(batch)) {
      double lr = scheduled_lr(config_.schedule, config_.optimizer.lr, state.step, plan.total_steps, state.epoch);
      try {
        step.run(batch, lr, state.rng_offset, state.step + 1);
      } catch (const AnomalyError& e) {
        throw AnomalyError(fmt::format("{}: anomaly detection: step {} (epoch {}, batch {}): {}; stopped there, nothing "
                                       "of this step was saved",
                                       config_.source, state.step + 1, state.epoch + 1, batch.index + 1, e.what()));
      }
      ++state.step;
      state.batch = batch.index + 1;
      metrics.count(batch.global_size);
      // Reports and checkpoints read the device anyway: the loss is checked there.
      const bool checkpoint_due = config_.checkpoint_every && state.step % config_.checkpoint_every == 0;
      if (checkpoint_due || report.due(state)) {
        nonfinite.check(metrics, report);
        step.read_loss_scale();
      }
      report.stepped(state, lr, batch.global_size, metrics);
      if (checkpoint_due) save_checkpoint(state, metrics);
      if (options.interrupt_after && state.step >= options.interrupt_after)
        return interrupted(device_, state, config_.out_dir);
      if (options.on_step && !ranks_go_on(options.on_step({state.step, plan.total_steps, state.epoch,
                                                            report.last_loss(), report.last_accuracy()}),
                                          state.step)) {
        step.read_loss_scale();
        if (!checkpoint_due) save_checkpoint(state, metrics);
        TrainSummary summary = report.finish(state, {NAN, NAN, 0}, step.replayed(), world_.size(),
                                             step.gradient_wait_seconds(), step.gradient_sync_seconds());
        summary.cancelled = true;
        return summary;
      }
    }
    nonfinite.check(metrics, report);
    step.read_loss_scale();
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
  return report.finish(state, test, step.replayed(), world_.size(), step.gradient_wait_seconds(),
                       step.gradient_sync_seconds());
}

}  // namespace kestrel
