#include "train_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "kestrel/functional.h"
#include "kestrel/graph.h"
#include "kestrel/ops.h"
#include "data_parallel.h"
#include "gradient_clipping.h"
#include "scoring.h"

namespace kestrel {

namespace {
// Philox blocks a deterministic step may draw: each step's dropout counters start at step x this.
constexpr uint64_t kDeterministicStepDraws = uint64_t(1) << 32;

// Dropout draws from its own key, so its masks never repeat the initial weights' random stream; each
// data-parallel rank from a key of its own, so that the ranks' masks differ (rank 0's is a single
// process's).
uint64_t dropout_seed(uint64_t seed, int rank) { return (seed ^ 0x9e3779b97f4a7c15ULL) + uint64_t(rank) * 0xd1b54a32d192ed03ULL; }
}  // namespace

TrainStep::TrainStep(const RunConfig& config, Model& model, Optimizer& optimizer, MetricsWindow& metrics, Note note,
                     LossScaleState& loss_scale, ProcessGroup* group, OptimizerShards* shards)
    : config_(config),
      model_(model),
      optimizer_(optimizer),
      metrics_(metrics),
      note_(std::move(note)),
      group_(group),
      shards_(shards),
      loss_scale_(loss_scale),
      micro_batch_(config.micro_batch_size() / (group ? group->size() : 1)),
      dropout_seed_(dropout_seed(config.seed, group ? group->rank() : 0)) {
  if (config_.precision == DType::f16) scaler_.emplace(config_.loss_scale, loss_scale, model_.device());
  if (config_.distributed.deterministic) {
    const int64_t world = group_ ? group_->size() : 1, shards = config_.distributed.shards;
    const int64_t parameters = model_.flat_gradients().numel();
    shard_grads_ = Tensor::empty({shards / world, parameters}, DType::f32, model_.device());
    all_shard_grads_ = world == 1 ? shard_grads_ : Tensor::empty({shards, parameters}, DType::f32, model_.device());
    return;  // steps run eagerly
  }
  if (group_) {
    buckets_ = std::make_unique<GradientBuckets>(model_, *group_, config_.distributed.bucket_cap_mb * 1024 * 1024);
    return;  // collectives are not captured (yet): every step runs eagerly
  }
  if (config_.capture && !config_.detect_anomaly && CapturedGraph::supported(model_.device()))
    captured_ = std::make_unique<CapturedStep>(
        model_.device(), [this](const Tensor& inputs, const Tensor& targets, uint64_t& rng_offset) {
          body(inputs, targets, inputs.size(0), rng_offset);
        });
}

void TrainStep::run(const data::Batch& batch, double lr, uint64_t& rng_offset, int64_t step) {
  step_ = step;
  if (group_) broadcast_buffers(*group_, model_, fmt::format("step {}: sharing rank 0's buffers", step));
  if (!config_.detect_anomaly) {
    forward_backward(batch, rng_offset);
    update(lr);
    return;
  }
  AnomalyModeGuard check_every_op;
  if (config_.distributed.deterministic)
    deterministic_body(batch.inputs, batch.targets, batch.global_size, rng_offset);
  else
    body(batch.inputs, batch.targets, batch.global_size, rng_offset);
  update(lr);
  if (!ops::all_finite(model_.flat_parameters()))
    throw AnomalyError(fmt::format("the optimizer's update gave NaN or infinite parameters from finite gradients "
                                   "(learning rate {}); check the learning rate and the optimizer's eps",
                                   lr));
}

// With loss scaling the overflow check, the update (skipped on overflow) and the scale's change follow
// each other on the device; every rank has the same summed gradients, so every rank decides alike. With
// clipping the update reads clip_gradient_norm's state, which carries the loss scale's too; without a
// scaler, on a backend whose update cannot read such a state on the device, the gradients are scaled.
void TrainStep::update(double lr) {
  const double clip = config_.optimizer.clip_grad_norm;
  if (scaler_) scaler_->check(model_.flat_gradients());
  if (clip > 0 && !scaler_ && !optimizer_.fuses_scaled_update()) {
    metrics_.note_gradient_norm(clip_gradient_norm_in_place(model_.flat_gradients(), clip).norm);
    optimizer_.step(lr);
  } else if (clip > 0) {
    const GradientClipping clipping =
        clip_gradient_norm(model_.flat_gradients(), clip, scaler_ ? &scaler_->state() : nullptr);
    metrics_.note_gradient_norm(clipping.norm);
    optimizer_.step(lr, clipping.update_state);
  } else {
    scaler_ ? optimizer_.step(lr, scaler_->state()) : optimizer_.step(lr);
  }
  if (scaler_) scaler_->update();
  if (shards_) shards_->gather_parameters(step_);
}

void TrainStep::read_loss_scale() {
  if (scaler_) loss_scale_ = scaler_->read();
}

Tensor TrainStep::backward_seed(const Var& loss, double share) const {
  if (scaler_) return scaler_->seed(share);
  return Tensor::full({}, share, loss.value().dtype(), loss.value().device());
}

void TrainStep::forward_backward(const data::Batch& batch, uint64_t& rng_offset) {
  if (config_.distributed.deterministic) return deterministic_body(batch.inputs, batch.targets, batch.global_size, rng_offset);
  // Only full batches are captured and replayed: captured from an epoch's short last batch (the second
  // step after a resume near an epoch's end), the graph would leave every full batch after it eager.
  if (captured_ && batch.size == config_.batch_size && captured_->run(batch, rng_offset)) {
    if (replayed_++ == 0)
      note_(fmt::format("kestrel: training step captured on {}; replaying it for every full batch",
                        model_.device().str()));
    return;
  }
  body(batch.inputs, batch.targets, batch.global_size, rng_offset);
  if (captured_ && !captured_->disabled().empty() && !told_eager_) {
    note_("kestrel: launching every op (the step could not be captured: " + captured_->disabled() + ")");
    told_eager_ = true;
  }
}

// Metrics accumulate on the device: no sync per step. With accumulate_steps = k the batch is cut into
// micro-batches of batch_size / k samples (the last batch of an epoch into fewer); each one's mean loss
// is weighted by its share of the batch, so the gradients and the reported loss are those of the whole
// batch (up to rounding), while only one micro-batch's activations are alive at a time. A data-parallel
// rank weights by the share of the global batch, and the ranks' gradients are summed.
void TrainStep::body(const Tensor& inputs, const Tensor& targets, int64_t global_samples, uint64_t& rng_offset) {
  fn::AutocastScope autocast(config_.precision);  // forward and backward (a checkpointed segment reruns in it)
  std::optional<LeafGradientScope> observed;
  if (buckets_) observed.emplace(*buckets_);
  model_.zero_grad(/*lazy=*/true);  // the first backward overwrites the gradients, later ones add
  const int64_t samples = inputs.size(0);
  for (int64_t start = 0; start < samples; start += micro_batch_) {
    const int64_t end = std::min(samples, start + micro_batch_);
    const bool whole = start == 0 && end == global_samples;
    const Tensor x = whole ? inputs : inputs.slice(0, start, end), y = whole ? targets : targets.slice(0, start, end);
    Var out = model_.forward(x, true, dropout_seed_, rng_offset);
    Var loss = batch_loss(config_.loss, out, y);
    if (buckets_ && end == samples) buckets_->arm(step_);  // the last pass completes each gradient
    if (whole) {
      scaler_ ? backward(loss, backward_seed(loss, 1.0)) : backward(loss);
      metrics_.add(loss.value(), out.value(), y);
      continue;
    }
    const double fraction = double(end - start) / double(global_samples);
    const Tensor share = Tensor::full({}, fraction, loss.value().dtype(), loss.value().device());
    backward(loss, scaler_ ? backward_seed(loss, fraction) : share);
    metrics_.add(ops::binary(KESTREL_BINARY_MUL, loss.value(), share), out.value(), y);
  }
  model_.settle_gradients();  // a rank with no samples this step (a short last batch) sends zeros
  if (buckets_) buckets_->finish(step_);
}

// Shard s of the global batch of L samples is rows [L s / S, L (s + 1) / S); rank r of N holds shards
// [r S / N, (r + 1) S / N), exactly its loader share. Each shard runs as its own forward and backward,
// the same on one process as on any rank: its dropout masks come from a key of its own (not the rank's)
// at the step's counter base, and its gradient, weighted by its share of the batch, is copied out of the
// model's buffer. The ranks then gather every shard's gradient and each adds them in shard order: the
// same additions in the same order as one process makes, so the same bits.
void TrainStep::deterministic_body(const Tensor& inputs, const Tensor& targets, int64_t global_samples,
                                   uint64_t& rng_offset) {
  fn::AutocastScope autocast(config_.precision);
  const int64_t shards = config_.distributed.shards, world = group_ ? group_->size() : 1;
  const int64_t rank = group_ ? group_->rank() : 0, mine = shards / world;
  const int64_t first_row = global_samples * rank / world;
  // The step's counter base comes from the step alone. Carried over from the last step it would depend on
  // the ranks' shards: at a short last batch their largest shards differ (1 sample on one rank, 2 on
  // another), and so would every later step's masks.
  const uint64_t base = uint64_t(step_ - 1) * kDeterministicStepDraws;
  for (int64_t j = 0; j < mine; ++j) {
    const int64_t s = rank * mine + j;
    const int64_t begin = global_samples * s / shards - first_row, end = global_samples * (s + 1) / shards - first_row;
    model_.zero_grad(/*lazy=*/true);  // each shard's backward writes a gradient of its own
    if (end > begin) {
      const Tensor x = inputs.slice(0, begin, end), y = targets.slice(0, begin, end);
      uint64_t offset = base;
      Var out = model_.forward(x, true, dropout_seed(config_.seed, 0) + uint64_t(s) * 0x9e3779b97f4a7c15ULL, offset);
      if (offset - base > kDeterministicStepDraws)
        throw Error(fmt::format("deterministic mode: a shard of step {} drew {} Philox blocks for dropout, more than the "
                                "2^32 each step may; use more /distributed/shards (smaller shards) or less dropout",
                                step_, offset - base));
      Var loss = batch_loss(config_.loss, out, y);
      const double fraction = double(end - begin) / double(global_samples);
      const Tensor share = Tensor::full({}, fraction, loss.value().dtype(), loss.value().device());
      backward(loss, scaler_ ? backward_seed(loss, fraction) : share);
      metrics_.add(ops::binary(KESTREL_BINARY_MUL, loss.value(), share), out.value(), y);
    }
    model_.settle_gradients();  // a shard without samples (a short last batch) has a zero gradient
    shard_grads_.select(0, j).copy_from(model_.flat_gradients());
  }
  rng_offset = base + kDeterministicStepDraws;
  if (group_) {
    group_->all_gather(shard_grads_.view({-1}), all_shard_grads_.view({-1}), "every shard's gradient");
    group_->wait(fmt::format("step {}: gathering every shard's gradient from {} ranks", step_, world));
  }
  Tensor& sum = model_.flat_gradients();
  sum.copy_from(all_shard_grads_.select(0, 0));
  for (int64_t s = 1; s < shards; ++s) ops::binary_(KESTREL_BINARY_ADD, sum, sum, all_shard_grads_.select(0, s));
}

}  // namespace kestrel
