// Trainer::plan_memory: what a run will hold on its device, from the model's own forward and backward
// on two small batches of the run's data (kestrel/memory_plan.h says what each figure is).
#include "kestrel/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "kestrel/functional.h"
#include "kestrel/graph.h"
#include "kestrel/loader.h"
#include "kestrel/ops.h"
#include "kestrel/trainer.h"
#include "gradient_clipping.h"
#include "scoring.h"

namespace kestrel {

namespace {

// One pass at one batch size, in bytes above what was allocated when it began.
struct Measured {
  int64_t kept = 0;  // allocated when the forward was done (what it keeps for backward)
  int64_t peak = 0;  // the pass's high-water mark
  std::vector<int64_t> per_layer;
};

class PassMeter {
 public:
  PassMeter(Engine& engine, const Device& device) : engine_(engine), device_(device) {
    engine_.synchronize(device_);
    start_ = allocated();
    engine_.reset_peak_memory_stats(device_);
  }
  int64_t allocated() const { return static_cast<int64_t>(engine_.memory_stats(device_).allocated); }
  int64_t since_start() const { return allocated() - start_; }
  int64_t peak() {
    engine_.synchronize(device_);
    return static_cast<int64_t>(engine_.memory_stats(device_).peak_allocated) - start_;
  }

 private:
  Engine& engine_;
  Device device_;
  int64_t start_ = 0;
};

// Bytes one sample of `batch` takes on the device: its inputs and targets.
int64_t sample_bytes(const data::Batch& batch) {
  return (batch.inputs.numel() * static_cast<int64_t>(dtype_size(batch.inputs.dtype())) +
          batch.targets.numel() * static_cast<int64_t>(dtype_size(batch.targets.dtype()))) /
         std::max<int64_t>(batch.size, 1);
}

// The line through (x1, y1) and (x2, y2) at x: what grows with the batch, and what does not. Held in
// [0, 2^56]: past that no device has the memory, and the few such terms summed below stay inside int64.
constexpr int64_t kMostBytes = int64_t(1) << 56;
int64_t extend(int64_t x1, int64_t y1, int64_t x2, int64_t y2, int64_t x) {
  const double slope = double(y2 - y1) / double(x2 - x1);
  return static_cast<int64_t>(std::clamp(double(y1) + slope * double(x - x1) + 0.5, 0.0, double(kMostBytes)));
}

// a * b bytes, at most kMostBytes (a, b >= 0).
int64_t bytes_times(int64_t a, int64_t b) {
  int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) || product > kMostBytes ? kMostBytes : product;
}

// The fewest micro-batches k dividing `batch` with batch / k <= largest (0 if none): divisors come in
// pairs (d, batch / d), so looking at d up to sqrt(batch) finds them all.
int64_t fewest_micro_batches(int64_t batch, int64_t largest) {
  int64_t best = 0;
  auto consider = [&](int64_t k) {
    if (batch / k <= largest && (best == 0 || k < best)) best = k;
  };
  for (int64_t d = 1; d <= batch / d; ++d)
    if (batch % d == 0) {
      consider(d);
      consider(batch / d);
    }
  return best;
}

data::Batch first_batch(const std::shared_ptr<const data::Dataset>& dataset, int64_t samples, const Device& device) {
  data::DataLoader loader(dataset, {samples, false, false, 0, 1, 1}, device);
  loader.start_epoch(0);
  data::Batch batch;
  loader.next(batch);
  return batch;
}

// Clears the model's layer observer however the measured pass ends: it refers to the pass's locals.
class ObserverScope {
 public:
  ObserverScope(Model& model, std::function<void(int)> observer) : model_(model) {
    model_.set_layer_observer(std::move(observer));
  }
  ~ObserverScope() { model_.set_layer_observer({}); }
  ObserverScope(const ObserverScope&) = delete;
  ObserverScope& operator=(const ObserverScope&) = delete;

 private:
  Model& model_;
};

std::string mib(int64_t bytes) {
  if (bytes < (1 << 20)) return fmt::format("{:.1f} KiB", double(bytes) / 1024);
  if (bytes < (int64_t(1) << 30)) return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
  return fmt::format("{:.2f} GiB", double(bytes) / (int64_t(1) << 30));
}

}  // namespace

MemoryPlan Trainer::plan_memory(int64_t batch_size) {
  // Growth per sample is measured between batches of one size and twice it: each split needs two samples.
  if (train_->size < 2 || test_->size < 2)
    throw InvalidArgument(fmt::format("{}: the memory plan measures batches of 1 and 2 samples or more, but the "
                                      "training data has {} and the test data {}; give both at least 2 "
                                      "(--train-subset, --test-subset)",
                                      config_.source, train_->size, test_->size));
  if (batch_size > kMaxBatchSize)
    throw InvalidArgument(fmt::format("--batch-size {}: give at most {} samples", batch_size, kMaxBatchSize));
  MemoryPlan plan;
  plan.device = device_.str();
  plan.batch_size = batch_size > 0 ? batch_size : config_.batch_size;
  RunConfig sized = config_;
  sized.batch_size = plan.batch_size;
  // With data parallelism each device holds its share: batch_size / ranks samples, in micro-batches.
  const int64_t ranks = group_ ? group_->size() : 1;
  plan.micro_batch = sized.micro_batch_size() / ranks;
  plan.accumulate_steps = config_.accumulate_steps;
  plan.eval_batch = std::min(config_.eval_batch_size, test_->size);

  const int64_t param_bytes = model_->flat_parameters().numel() * int64_t(dtype_size(model_->flat_parameters().dtype()));
  plan.parameters = param_bytes;
  plan.gradients = param_bytes;
  const OptimizerConfig& opt = optimizer_->config();
  const int64_t state_tensors = opt.type == OptimizerKind::sgd ? (opt.momentum > 0 ? 1 : 0) : 2;
  int64_t state_allocated = 0;
  for (const auto& [name, tensor] : optimizer_->state())
    if (tensor.defined()) state_allocated += tensor.numel() * int64_t(dtype_size(tensor.dtype()));
  plan.optimizer_state = state_tensors * param_bytes;
  plan.update_temporary = opt.clip_grad_norm > 0 ? clipping_temporary_bytes(model_->flat_gradients()) : 0;
  // Training mode moves batch norm's running statistics: they are put back afterwards.
  std::vector<Tensor> statistics;
  int64_t statistics_bytes = 0;  // the copies: held by the plan only
  for (auto& [name, buffer] : model_->buffers()) {
    statistics.push_back(buffer.clone());
    statistics_bytes += buffer.numel() * int64_t(dtype_size(buffer.dtype()));
  }

  // Batches of 16 and 32 samples: an f32 or i64 tensor's size is then a multiple of 64 bytes, the
  // allocator's rounding, so the measured growth per sample is exact and extends linearly.
  const int64_t small = std::max<int64_t>(1, std::min<int64_t>({16, train_->size / 2, test_->size / 2}));
  const int64_t sizes[3] = {small, small, 2 * small};
  Measured step[3], eval[3];
  int64_t train_sample_bytes = 0, eval_sample_bytes = 0;
  const size_t layers = model_->spec().layers().size();
  // Pass 0 warms up: what layers keep once made (causal masks, position tables) and library workspaces
  // come into being there, and count as held; passes 1 and 2 measure.
  for (int k = 0; k < 3; ++k) {
    if (k == 1) {
      engine_.synchronize(device_);
      plan.other_held = std::max<int64_t>(
          0, int64_t(engine_.memory_stats(device_).allocated) - plan.parameters - plan.gradients - state_allocated -
                 statistics_bytes);
    }
    {
      data::Batch batch = first_batch(train_, sizes[k], device_);
      train_sample_bytes = sample_bytes(batch);
      PassMeter meter(engine_, device_);
      Measured& m = step[k];
      m.per_layer.assign(layers, 0);
      int64_t last = 0;
      uint64_t offset = 0;
      model_->zero_grad(/*lazy=*/true);
      fn::AutocastScope autocast(config_.precision);  // measured as the run computes
      {
        Var out;
        {
          ObserverScope observe(*model_, [&](int layer) {
            m.per_layer[layer] = meter.since_start() - last;
            last = meter.since_start();
          });
          out = model_->forward(batch.inputs, true, config_.seed, offset);
        }
        m.kept = meter.since_start();
        backward(batch_loss(config_.loss, out, batch.targets));
      }
      model_->settle_gradients();
      m.peak = meter.peak();
    }
    {
      NoGradGuard no_grad;
      fn::AutocastScope autocast(config_.precision);
      data::Batch batch = first_batch(test_, sizes[k], device_);
      eval_sample_bytes = sample_bytes(batch);
      PassMeter meter(engine_, device_);
      uint64_t offset = 0;
      Var out = model_->forward(batch.inputs, false, 0, offset);
      Tensor loss = batch_loss(config_.loss, out, batch.targets).value();
      eval[k].peak = meter.peak();
    }
  }
  for (size_t i = 0; i < statistics.size(); ++i) ops::copy_(model_->buffers()[i].second, statistics[i]);

  const auto& spec = model_->spec();
  for (size_t i = 0; i < layers; ++i) {
    const LayerInfo& info = spec.layers()[i];
    plan.layers.push_back({fmt::format("{} ({})", info.json_path, info.type),
                           info.parameters * int64_t(dtype_size(model_->flat_parameters().dtype())),
                           extend(sizes[1], step[1].per_layer[i], sizes[2], step[2].per_layer[i], plan.micro_batch)});
  }
  plan.activations = extend(sizes[1], step[1].kept, sizes[2], step[2].kept, plan.micro_batch);
  const int64_t step_peak = extend(sizes[1], step[1].peak, sizes[2], step[2].peak, plan.micro_batch);
  plan.step_temporary = std::max<int64_t>(0, step_peak - plan.activations);
  plan.per_sample = std::max<int64_t>(0, (step[2].peak - step[1].peak) / (sizes[2] - sizes[1]));
  plan.step_fixed = std::max<int64_t>(0, step_peak - plan.per_sample * plan.micro_batch);
  plan.eval_peak = extend(sizes[1], eval[1].peak, sizes[2], eval[2].peak, plan.eval_batch);

  // Batches on the device: the one a step or an evaluation pass reads, and (a captured step's copy of
  // the training batch aside) the next one only once that pass's activations are gone, since the loader
  // copies it in when asked for it. The last training batch stays while the model is evaluated.
  const bool captured = config_.capture && !config_.detect_anomaly && CapturedGraph::supported(device_);
  const int64_t whole_batch = bytes_times(train_sample_bytes, plan.batch_size / ranks),
                eval_batch_bytes = bytes_times(eval_sample_bytes, plan.eval_batch);
  const int64_t kept_copy = captured ? whole_batch : 0;
  const int64_t training =
      kept_copy + std::max({step_peak + whole_batch, 2 * whole_batch, plan.update_temporary + whole_batch});
  const int64_t evaluating = kept_copy + whole_batch + std::max(plan.eval_peak + eval_batch_bytes, 2 * eval_batch_bytes);
  plan.data_in_flight = kept_copy + 2 * whole_batch;
  const int64_t held = plan.parameters + plan.gradients + plan.optimizer_state + plan.other_held;
  plan.predicted_peak = held + std::max(training, evaluating);

  const DeviceInfo info = engine_.properties(device_);
  plan.device_free = static_cast<int64_t>(info.memory_free);
  plan.device_total = static_cast<int64_t>(info.memory_total);
  // Free memory excludes what this process holds already.
  const int64_t available = plan.device_free + int64_t(engine_.memory_stats(device_).allocated);
  plan.fits = plan.predicted_peak <= available;
  // The largest micro-batch whose step fits beside everything that does not depend on it.
  const int64_t room = available - held - kept_copy - whole_batch - plan.step_fixed;
  plan.largest_micro_batch = plan.per_sample > 0 ? std::max<int64_t>(0, room / plan.per_sample) : plan.batch_size;
  plan.suggested_accumulate_steps = fewest_micro_batches(plan.batch_size / ranks, plan.largest_micro_batch);
  return plan;
}

std::string MemoryPlan::report() const {
  std::string out = fmt::format("{:<36} {:>14} {:>16}\n", "Layer", "Parameters", "Kept for backward");
  for (const LayerMemory& layer : layers)
    out += fmt::format("{:<36} {:>14} {:>16}\n", layer.label, mib(layer.parameters), mib(layer.activations));
  out += fmt::format("\nOn {} with batch {} ({} x {}), evaluation batch {}:\n", device, batch_size, accumulate_steps,
                     micro_batch, eval_batch);
  out += fmt::format("  parameters         {:>12}\n  gradients          {:>12}\n  optimizer state    {:>12}\n",
                     mib(parameters), mib(gradients), mib(optimizer_state));
  out += fmt::format("  kept for backward  {:>12}  (one micro-batch)\n  step temporaries   {:>12}\n", mib(activations),
                     mib(step_temporary));
  if (update_temporary > 0) out += fmt::format("  update temporaries {:>12}  (clipping)\n", mib(update_temporary));
  out += fmt::format("  evaluation         {:>12}\n  batches on device  {:>12}\n  other              {:>12}\n",
                     mib(eval_peak), mib(data_in_flight), mib(other_held));
  out += fmt::format("  predicted peak     {:>12}  (free on the device: {} of {})\n", mib(predicted_peak),
                     mib(device_free), mib(device_total));
  out += fits ? "fits\n" : "does not fit\n";
  out += fmt::format("largest micro-batch that fits: {}\n", largest_micro_batch);
  if (suggested_accumulate_steps > 0)
    out += fmt::format("batch {} as {} micro-batch(es) of {}: \"accumulate_steps\": {}\n", batch_size,
                       suggested_accumulate_steps, batch_size / suggested_accumulate_steps, suggested_accumulate_steps);
  else
    out += "no micro-batch dividing the batch size fits: lower the batch size, checkpoint activations, or free memory\n";
  return out;
}

}  // namespace kestrel
