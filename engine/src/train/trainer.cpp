// The training loop: the same code for every model and backend.
#include "kestrel/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kestrel/functional.h"
#include "kestrel/io.h"
#include "kestrel/loader.h"
#include "captured_step.h"
#include "run_data.h"
#include "run_log.h"

namespace kestrel {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Dropout draws from its own key, so its masks never repeat the initial weights' random stream.
uint64_t dropout_seed(uint64_t seed) { return seed ^ 0x9e3779b97f4a7c15ULL; }

// The number of correct predictions in a batch, as an i64 scalar on the device.
Tensor correct_count(const Tensor& logits, const Tensor& labels) {
  Tensor predicted = ops::reduce(KESTREL_REDUCE_ARGMAX, logits, {1});
  return ops::reduce(KESTREL_REDUCE_SUM, ops::binary(KESTREL_BINARY_EQ, predicted, labels));
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

std::string Trainer::class_name(int64_t label) const {
  static const char* fashion[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                  "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  if (config_.data.dataset == "fashion-mnist" && label >= 0 && label < 10) return fashion[label];
  return fmt::format("class {}", label);
}

Var Trainer::loss_of(const Var& output, const Tensor& targets) {
  return config_.loss == LossKind::mse ? fn::mse_loss(output, targets) : fn::cross_entropy(output, targets);
}

EvalResult Trainer::evaluate() { return evaluate_on(test_); }

EvalResult Trainer::evaluate_on(const std::shared_ptr<const data::Dataset>& dataset) {
  NoGradGuard no_grad;
  data::DataLoader loader(dataset, {config_.eval_batch_size, false, false, 0, 1, 2}, device_);
  loader.start_epoch(0);
  const bool classify = dataset->is_classification();
  Tensor loss_sum = Tensor::zeros({}, DType::f32, device_), correct = Tensor::zeros({}, DType::i64, device_);
  uint64_t unused_offset = 0;
  data::Batch batch;
  while (loader.next(batch)) {
    Var out = model_->forward(batch.inputs, false, 0, unused_offset);
    Tensor weighted = ops::unary(KESTREL_UNARY_AFFINE, loss_of(out, batch.targets).value(), double(batch.size), 0.0);
    ops::binary_(KESTREL_BINARY_ADD, loss_sum, loss_sum, weighted);
    if (classify) ops::binary_(KESTREL_BINARY_ADD, correct, correct, correct_count(out.value(), batch.targets));
  }
  EvalResult result;
  result.samples = dataset->size;
  result.loss = loss_sum.to_doubles()[0] / double(dataset->size);
  result.accuracy = classify ? correct.to_doubles()[0] / double(dataset->size) : NAN;
  return result;
}

TrainSummary Trainer::fit(const TrainOptions& options) {
  State state;
  if (options.resume || !options.resume_from.empty())
    state = restore_checkpoint(options.resume_from.empty() ? config_.out_dir : options.resume_from);
  RunLog log(config_.out_dir, options.resume || !options.resume_from.empty() ? state.step : -1, options.quiet,
             options.progress);
  const DeviceInfo info = engine_.properties(device_);
  log.message(fmt::format("kestrel: training {} ({} parameters) on {} ({}, {})", model_->spec().name(),
                          model_->spec().parameter_count(), device_.str(), info.name, info.runtime));
  if (state.step > 0) log.message(fmt::format("kestrel: resumed at epoch {}, step {}", state.epoch + 1, state.step));

  data::DataLoader loader(train_, {config_.batch_size, true, config_.drop_last, config_.seed, config_.data.workers, 4},
                          device_);
  const int64_t batches = loader.batches_per_epoch();
  const int64_t planned = config_.epochs * batches;
  const int64_t total_steps = config_.max_steps ? std::min(config_.max_steps, planned) : planned;
  const bool classify = train_->is_classification();
  Tensor loss_sum = Tensor::full({}, state.window_loss, DType::f32, device_);
  Tensor correct = Tensor::full({}, state.window_correct, DType::i64, device_);
  int64_t& window_steps = state.window_steps;
  int64_t& window_samples = state.window_samples;
  auto window_start = Clock::now(), run_start = Clock::now();
  int64_t run_samples = 0, start_step = state.step;
  double last_train_loss = NAN, last_train_accuracy = NAN;
  EvalResult last_eval{NAN, NAN, 0};
  auto last_redraw = Clock::now();

  // Forward, loss, backward and metrics on one batch. Metrics accumulate on the device and are read only
  // when reported: no sync per step.
  auto step = [&](const Tensor& inputs, const Tensor& targets, uint64_t& rng_offset) {
    model_->zero_grad(/*lazy=*/true);  // backward overwrites the gradients: no zeroing pass
    Var out = model_->forward(inputs, true, dropout_seed(config_.seed), rng_offset);
    Var loss = loss_of(out, targets);
    backward(loss);
    model_->settle_gradients();
    ops::binary_(KESTREL_BINARY_ADD, loss_sum, loss_sum, loss.value());
    if (classify) ops::binary_(KESTREL_BINARY_ADD, correct, correct, correct_count(out.value(), targets));
  };
  // Replays the step from the third step on when the backend can capture (the optimizer update, whose
  // learning rate and step count change, runs after it as one launch).
  std::unique_ptr<CapturedStep> captured;
  if (config_.capture && CapturedGraph::supported(device_)) captured = std::make_unique<CapturedStep>(device_, step);
  bool capture_note_shown = false;
  int64_t replayed_steps = 0;

  while (state.epoch < config_.epochs && state.step < total_steps) {
    loader.start_epoch(state.epoch, state.batch);
    data::Batch batch;
    while (state.step < total_steps && loader.next(batch)) {
      double lr = scheduled_lr(config_.schedule, config_.optimizer.lr, state.step, total_steps, state.epoch);
      if (captured && captured->run(batch, state.rng_offset)) {
        if (replayed_steps++ == 0)
          log.message(fmt::format("kestrel: training step captured on {}; replaying it for every full batch",
                                  device_.str()));
      } else {
        step(batch.inputs, batch.targets, state.rng_offset);
        if (captured && !captured->disabled().empty() && !capture_note_shown) {
          log.message("kestrel: launching every op (the step could not be captured: " + captured->disabled() + ")");
          capture_note_shown = true;
        }
      }
      optimizer_->step(lr);
      ++state.step;
      state.batch = batch.index + 1;
      ++window_steps;
      window_samples += batch.size;
      run_samples += batch.size;
      bool report = state.step % config_.log_every == 0 || state.batch == batches || state.step == total_steps;
      if (report) {
        double seconds = since(window_start), rate = window_samples / std::max(seconds, 1e-9);
        double mean_loss = loss_sum.to_doubles()[0] / window_steps;
        double accuracy = classify ? correct.to_doubles()[0] / double(window_samples) : NAN;
        last_train_loss = mean_loss;
        last_train_accuracy = accuracy;
        double run_rate = run_samples / std::max(since(run_start), 1e-9);
        double eta = double(total_steps - state.step) * config_.batch_size / std::max(run_rate, 1e-9);
        log.record({"train", state.epoch, state.step, mean_loss, accuracy, lr, rate, since(run_start)});
        log.progress(state.epoch, config_.epochs, state.batch, batches, mean_loss, accuracy, rate, eta);
        ops::fill_(loss_sum, 0.0);
        ops::fill_(correct, 0.0);
        window_steps = window_samples = 0;
        window_start = Clock::now();
      } else if (log.live() && since(last_redraw) > 0.1) {
        double run_rate = run_samples / std::max(since(run_start), 1e-9);
        double eta = double(total_steps - state.step) * config_.batch_size / std::max(run_rate, 1e-9);
        log.progress(state.epoch, config_.epochs, state.batch, batches, last_train_loss, last_train_accuracy, run_rate, eta);
        last_redraw = Clock::now();
      }
      if (config_.checkpoint_every && state.step % config_.checkpoint_every == 0)
        save_checkpoint(state, loss_sum, correct);
      if (options.interrupt_after && state.step >= options.interrupt_after) {
        TrainSummary interrupted;
        interrupted.device = device_.str();
        interrupted.steps = state.step;
        interrupted.out_dir = config_.out_dir;
        return interrupted;
      }
    }
    bool epoch_done = state.batch >= batches;
    last_eval = evaluate();
    log.record({"eval", state.epoch, state.step, last_eval.loss, last_eval.accuracy, 0, 0, since(run_start)});
    std::string accuracy = std::isnan(last_eval.accuracy) ? "" : fmt::format(", accuracy {:.2f}%", last_eval.accuracy * 100);
    log.message(fmt::format("epoch {}/{}: train loss {:.4f}, test loss {:.4f}{}", state.epoch + 1, config_.epochs,
                            last_train_loss, last_eval.loss, accuracy));
    if (epoch_done) {
      ++state.epoch;
      state.batch = 0;
    }
    save_checkpoint(state, loss_sum, correct);
    log.write_plot();
    if (!epoch_done) break;  // max_steps reached mid-epoch
  }
  if (!last_eval.samples) last_eval = evaluate();

  TrainSummary summary;
  summary.device = device_.str();
  summary.steps = state.step;
  summary.epochs = state.epoch;
  summary.train_loss = last_train_loss;
  summary.test = last_eval;
  summary.seconds = since(run_start);
  summary.samples_per_second = (state.step - start_step) > 0 ? run_samples / std::max(summary.seconds, 1e-9) : 0;
  summary.out_dir = config_.out_dir;
  summary.replayed_steps = replayed_steps;
  nlohmann::json json{{"model", model_->spec().name()},
                      {"model_file", model_->spec().source()},
                      {"config", config_.source},
                      {"device", summary.device},
                      {"device_name", info.name},
                      {"parameters", model_->spec().parameter_count()},
                      {"epochs", summary.epochs},
                      {"steps", summary.steps},
                      {"train_loss", std::isnan(summary.train_loss) ? nlohmann::json() : nlohmann::json(summary.train_loss)},
                      {"test_loss", summary.test.loss},
                      {"test_samples", summary.test.samples},
                      {"samples_per_second", summary.samples_per_second},
                      {"replayed_steps", summary.replayed_steps},
                      {"seconds", summary.seconds}};
  if (!std::isnan(summary.test.accuracy)) json["test_accuracy"] = summary.test.accuracy;
  io::write_file_atomically(config_.out_dir + "/summary.json", json.dump(2) + "\n");
  log.write_plot();
  return summary;
}

std::vector<Prediction> Trainer::predict(int64_t count, int64_t top_k) {
  NoGradGuard no_grad;
  count = std::min(count, test_->size);
  auto subset = std::make_shared<const data::Dataset>(test_->subset(count));
  data::DataLoader loader(subset, {count, false, false, 0, 1, 2}, device_);
  loader.start_epoch(0);
  data::Batch batch;
  loader.next(batch);
  uint64_t unused_offset = 0;
  Var out = fn::softmax(model_->forward(batch.inputs, false, 0, unused_offset));
  std::vector<double> probabilities = out.value().to_doubles();
  const int64_t classes = out.value().size(1);
  std::vector<Prediction> predictions;
  for (int64_t i = 0; i < count; ++i) {
    Prediction p;
    p.label = subset->is_classification() ? subset->labels[i] : -1;
    std::vector<std::pair<int64_t, double>> row;
    for (int64_t c = 0; c < classes; ++c) row.push_back({c, probabilities[i * classes + c]});
    std::sort(row.begin(), row.end(), [](auto& a, auto& b) { return a.second > b.second; });
    row.resize(std::min<int64_t>(top_k, classes));
    p.top = row;
    predictions.push_back(p);
  }
  return predictions;
}

}  // namespace kestrel
