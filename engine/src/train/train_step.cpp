#include "train_step.h"

#include <fmt/format.h>

#include "kestrel/graph.h"
#include "scoring.h"

namespace kestrel {

namespace {
// Dropout draws from its own key, so its masks never repeat the initial weights' random stream.
uint64_t dropout_seed(uint64_t seed) { return seed ^ 0x9e3779b97f4a7c15ULL; }
}  // namespace

TrainStep::TrainStep(const RunConfig& config, Model& model, Optimizer& optimizer, MetricsWindow& metrics, Note note)
    : config_(config), model_(model), optimizer_(optimizer), metrics_(metrics), note_(std::move(note)) {
  if (config_.capture && CapturedGraph::supported(model_.device()))
    captured_ = std::make_unique<CapturedStep>(
        model_.device(), [this](const Tensor& inputs, const Tensor& targets, uint64_t& rng_offset) {
          body(inputs, targets, rng_offset);
        });
}

void TrainStep::run(const data::Batch& batch, double lr, uint64_t& rng_offset) {
  forward_backward(batch, rng_offset);
  optimizer_.step(lr);
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

// Metrics accumulate on the device: no sync per step.
void TrainStep::body(const Tensor& inputs, const Tensor& targets, uint64_t& rng_offset) {
  model_.zero_grad(/*lazy=*/true);  // backward overwrites the gradients: no zeroing pass
  Var out = model_.forward(inputs, true, dropout_seed(config_.seed), rng_offset);
  Var loss = batch_loss(config_.loss, out, targets);
  backward(loss);
  model_.settle_gradients();
  metrics_.add(loss.value(), out.value(), targets);
}

}  // namespace kestrel
