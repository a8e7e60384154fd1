// One optimizer step on a batch. Engine-internal.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kestrel/config.h"
#include "kestrel/loader.h"
#include "kestrel/model.h"
#include "kestrel/optim.h"
#include "captured_step.h"
#include "grad_scaler.h"
#include "gradient_buckets.h"
#include "metrics_window.h"
#include "optimizer_shards.h"

namespace kestrel {

// Forward, loss, backward and metric accumulation, launched op by op or replayed from a capture (every
// full batch after the warm-up step, when the backend can capture and the config allows), then the
// optimizer update as one launch outside the capture, since its learning rate and step count change.
// What a step will do differently lives here: gradient accumulation loops over micro-batches in body()
// (zeroing lazily before the first only), and a loss scaler scales the loss before backward and, on the
// device, skips the update when the gradients overflowed (so loss-scaled steps are captured too). With data parallelism each rank runs its share of the
// batch, weights its loss by that share of the global batch, and the gradient buckets sum the ranks'
// gradients while the last micro-batch's backward runs (such steps are not captured).
class TrainStep {
 public:
  using Note = std::function<void(const std::string&)>;  // told once when the step starts replaying, or can't
  // group: the data-parallel ranks (null for one process).
  // shards: ZeRO-1's parts (the optimizer updates this rank's), gathered after each update; or null.
  // loss_scale: the run's loss-scaling state (f16) to start from, written back by read_loss_scale();
  // unused in other precisions.
  TrainStep(const RunConfig& config, Model& model, Optimizer& optimizer, MetricsWindow& metrics, Note note,
            LossScaleState& loss_scale, ProcessGroup* group = nullptr, OptimizerShards* shards = nullptr);
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // Advances rng_offset by the counters the step's random draws (dropout) used. step: the optimizer
  // step this is, counted from 1, for messages.
  void run(const data::Batch& batch, double lr, uint64_t& rng_offset, int64_t step);
  int64_t replayed() const { return replayed_; }  // steps run as one replay
  // f16: copies the loss scaler's state from the device into the loss_scale given at construction (a
  // wait), before it is reported or checkpointed; nothing otherwise.
  void read_loss_scale();
  // Data parallelism: seconds waited after backward for gradient sums (TrainSummary's).
  double gradient_wait_seconds() const { return buckets_ ? buckets_->waited_seconds() : 0; }
  double gradient_sync_seconds() const { return buckets_ ? buckets_->span_seconds() : 0; }

 private:
  // inputs: (N, ...input_shape); targets: (N,) labels or (N, ...) regression targets. global_samples:
  // the batch's samples over all ranks (N for one process).
  void body(const Tensor& inputs, const Tensor& targets, int64_t global_samples, uint64_t& rng_offset);
  // Deterministic mode (DistributedConfig::deterministic): this rank's micro-shards, each gradient kept
  // apart, then every shard's gradient summed in shard order on every rank. Same arguments as body().
  void deterministic_body(const Tensor& inputs, const Tensor& targets, int64_t global_samples, uint64_t& rng_offset);
  void forward_backward(const data::Batch& batch, uint64_t& rng_offset);
  // The optimizer's update; with loss scaling, skipped on the device when the gradients overflowed.
  void update(double lr);
  // The seed of backward: a micro-batch's share of the batch, times the loss scale (f16).
  Tensor backward_seed(const Var& loss, double share) const;

  const RunConfig& config_;
  Model& model_;
  Optimizer& optimizer_;
  MetricsWindow& metrics_;
  Note note_;
  ProcessGroup* group_;
  OptimizerShards* shards_;
  LossScaleState& loss_scale_;                // the host's copy of the scaler's state
  std::unique_ptr<GradientBuckets> buckets_;  // with data parallelism, unless deterministic
  Tensor shard_grads_, all_shard_grads_;      // deterministic: (shards here, P) and (shards, P)
  int64_t micro_batch_;                       // samples per forward and backward on this rank
  int64_t step_ = 0;                          // the step running, for messages
  uint64_t dropout_seed_;                     // each rank draws its own masks
  std::optional<GradScaler> scaler_;          // f16 only
  std::unique_ptr<CapturedStep> captured_;  // null when capture is off or unsupported
  int64_t replayed_ = 0;
  bool told_eager_ = false;
};

}  // namespace kestrel
