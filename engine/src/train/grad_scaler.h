// f16's dynamic loss scaling (torch.cuda.amp.GradScaler's rule). Engine-internal.
#pragma once
#include "kestrel/config.h"
#include "kestrel/tensor.h"
#include "train_state.h"

namespace kestrel {

// The loss is multiplied by scale() before backward; the optimizer divides the gradients by it (its
// grad_scale) unless they overflowed, in which case the step is skipped and the scale backs off.
class GradScaler {
 public:
  // state: a resumed run's (scale 0 starts at config.init_scale); updated in place as steps go by.
  GradScaler(const LossScaleConfig& config, LossScaleState& state);
  double scale() const { return state_.scale; }
  // After backward: whether every gradient is finite, so the optimizer may step (a read from the device);
  // then the scale's update: backoff after an overflow, growth after growth_interval clean steps.
  bool step_allowed(const Tensor& gradients);

 private:
  LossScaleConfig config_;
  LossScaleState& state_;
};

}  // namespace kestrel
