// Optimizers over a model's flat parameter buffer (one fused launch per step where the backend offers
// it) and learning-rate schedules, with torch.optim's update rules.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kestrel/plugin.h"
#include "kestrel/tensor.h"

namespace kestrel {

// Kinds are read from a run config's names once (RunConfig::parse), so a step compares no strings.
enum class OptimizerKind { sgd, adam, adamw };
inline constexpr const char* optimizer_kind_names[] = {"sgd", "adam", "adamw"};  // in OptimizerKind's order

struct OptimizerConfig {
  OptimizerKind type = OptimizerKind::adam;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
  double weight_decay = 0.0;                      // L2 for sgd/adam, decoupled for adamw
  double momentum = 0.0, dampening = 0.0;         // sgd
  bool nesterov = false;                          // sgd
  // > 0: before each update the gradients' global L2 norm is clipped to this, as
  // torch.nn.utils.clip_grad_norm_(parameters, max_norm) does (the trainer's step; 0: no clipping).
  double clip_grad_norm = 0.0;
};

class Optimizer {
 public:
  Optimizer(OptimizerConfig config, Tensor parameters, Tensor gradients);
  // One update with learning rate `lr`; gradients are multiplied by grad_scale first (1 / loss scale,
  // or 1 / accumulation steps). The gradients are left as they are: zeroing them is the model's rule
  // (Model::zero_grad).
  void step(double lr, double grad_scale = 1.0);
  // f16 loss scaling without a wait: the update reads the scaler's state on the device, an f32 (4,)
  // tensor [scale, clean_steps, skipped_steps, found_inf] (plugin.h), divides the gradients by the scale
  // and changes nothing when found_inf is set. steps() then counts skipped updates too, and Adam's bias
  // corrections use steps() - skipped_steps. Backends without the fused update read the state instead.
  void step(double lr, const Tensor& scaler);
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  const OptimizerConfig& config() const { return config_; }
  // Whether the last step ran as the backend's one fused update (false: composed from primitives, when
  // the backend lacks the fused op or fused ops are switched off).
  bool last_step_fused() const { return last_step_fused_; }
  // Whether step(lr, scaler) runs as the backend's fused update, which reads the scaler's state on the
  // device; otherwise the composed update reads it on the host (a wait). Asked once.
  bool fuses_scaled_update() const;
  // State tensors for checkpoints, named like torch's state_dict entries.
  std::vector<std::pair<std::string, Tensor>> state() const;

 private:
  // One update's scalars: made is the updates made so far, this one included (Adam's bias corrections,
  // SGD's first momentum step).
  struct Update {
    double lr, grad_scale;
    int64_t made;
  };
  void update(double lr, double grad_scale, const Tensor* scaler);
  // The fused update's descriptor, its parameters in `p` (which must outlive it).
  struct FusedParams {
    kestrel_adam_params adam;
    kestrel_sgd_params sgd;
  };
  kestrel_op fused_op(double lr, double grad_scale, const Tensor* scaler, FusedParams& p) const;
  void adam_composed(const Update& u);
  void sgd_composed(const Update& u);
  OptimizerConfig config_;
  Tensor params_, grads_;
  Tensor exp_avg_, exp_avg_sq_, momentum_;
  int64_t steps_ = 0;
  bool last_step_fused_ = false;
  mutable std::optional<bool> fuses_scaled_update_;
};

enum class ScheduleKind { constant, step, cosine };
inline constexpr const char* schedule_kind_names[] = {"constant", "step", "cosine"};  // in ScheduleKind's order

struct ScheduleConfig {
  ScheduleKind type = ScheduleKind::constant;
  int64_t step_size = 1;          // step: epochs between decays
  double gamma = 0.1;             // step: decay factor
  int64_t warmup_steps = 0;       // cosine: linear warm-up from 0
  double min_lr = 0.0;            // cosine: the floor reached at the last step
};

// The learning rate for optimizer step `step` (0-based) of `total_steps`, epoch `epoch` (0-based).
double scheduled_lr(const ScheduleConfig& schedule, double base_lr, int64_t step, int64_t total_steps, int64_t epoch);

}  // namespace kestrel
