#include "grad_scaler.h"

#include "kestrel/ops.h"

namespace kestrel {

GradScaler::GradScaler(const LossScaleConfig& config, LossScaleState& state) : config_(config), state_(state) {
  if (state_.scale <= 0) state_.scale = config_.init_scale;
}

bool GradScaler::step_allowed(const Tensor& gradients) {
  const bool finite = ops::all_finite(gradients);
  if (!finite) {
    state_.scale *= config_.backoff_factor;
    state_.clean_steps = 0;
    ++state_.skipped_steps;
  } else if (++state_.clean_steps == config_.growth_interval) {
    state_.scale *= config_.growth_factor;
    state_.clean_steps = 0;
  }
  return finite;
}

}  // namespace kestrel
