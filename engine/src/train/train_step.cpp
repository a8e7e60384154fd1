#include "train_step.h"

#include <fmt/format.h>

#include <algorithm>

#include "kestrel/graph.h"
#include "kestrel/ops.h"
#include "scoring.h"

namespace kestrel {

namespace {
// Dropout draws from its own key, so its masks never repeat the initial weights' random stream.
uint64_t dropout_seed(uint64_t seed) { return seed ^ 0x9e3779b97f4a7c15ULL; }
}  // namespace

TrainStep::TrainStep(const RunConfig& config, Model& model, Optimizer& optimizer, MetricsWindow& metrics, Note note)
    : config_(config), model_(model), optimizer_(optimizer), metrics_(metrics), note_(std::move(note)) {
  if (config_.capture && !config_.detect_anomaly && CapturedGraph::supported(model_.device()))
    captured_ = std::make_unique<CapturedStep>(
        model_.device(), [this](const Tensor& inputs, const Tensor& targets, uint64_t& rng_offset) {
          body(inputs, targets, rng_offset);
        });
}

void TrainStep::run(const data::Batch& batch, double lr, uint64_t& rng_offset) {
  if (!config_.detect_anomaly) {
    forward_backward(batch, rng_offset);
    optimizer_.step(lr);
    return;
  }
  AnomalyModeGuard check_every_op;
  body(batch.inputs, batch.targets, rng_offset);
  optimizer_.step(lr);
  if (!ops::all_finite(model_.flat_parameters()))
    throw AnomalyError(fmt::format("the optimizer's update gave NaN or infinite parameters from finite gradients "
                                   "(learning rate {}); check the learning rate and the optimizer's eps",
                                   lr));
}

void TrainStep::forward_backward(const data::Batch& batch, uint64_t& rng_offset) {
  if (captured_ && captured_->run(batch, rng_offset)) {
    if (replayed_++ == 0)
      note_(fmt::format("kestrel: training step captured on {}; replaying it for every full batch",
                        model_.device().str()));
    return;
  }
  body(batch.inputs, batch.targets, rng_offset);
  if (captured_ && !captured_->disabled().empty() && !told_eager_) {
    note_("kestrel: launching every op (the step could not be captured: " + captured_->disabled() + ")");
    told_eager_ = true;
  }
}

// Metrics accumulate on the device: no sync per step. With accumulate_steps = k the batch is cut into
// micro-batches of batch_size / k samples (the last batch of an epoch into fewer); each one's mean loss
// is weighted by its share of the batch, so the gradients and the reported loss are those of the whole
// batch (up to rounding), while only one micro-batch's activations are alive at a time.
void TrainStep::body(const Tensor& inputs, const Tensor& targets, uint64_t& rng_offset) {
  model_.zero_grad(/*lazy=*/true);  // the first backward overwrites the gradients, later ones add
  const int64_t samples = inputs.size(0), micro = config_.micro_batch_size();
  for (int64_t start = 0; start < samples; start += micro) {
    const int64_t end = std::min(samples, start + micro);
    const bool whole = start == 0 && end == samples;
    const Tensor x = whole ? inputs : inputs.slice(0, start, end), y = whole ? targets : targets.slice(0, start, end);
    Var out = model_.forward(x, true, dropout_seed(config_.seed), rng_offset);
    Var loss = batch_loss(config_.loss, out, y);
    if (whole) {
      backward(loss);
      metrics_.add(loss.value(), out.value(), y);
      continue;
    }
    const Tensor share = Tensor::full({}, double(end - start) / double(samples), loss.value().dtype(), loss.value().device());
    backward(loss, share);
    metrics_.add(ops::binary(KESTREL_BINARY_MUL, loss.value(), share), out.value(), y);
  }
  model_.settle_gradients();
}

}  // namespace kestrel
