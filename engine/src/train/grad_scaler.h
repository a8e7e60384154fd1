// f16's dynamic loss scaling (torch.cuda.amp.GradScaler's rule), kept on the device so that a step never
// waits for the host. Engine-internal.
#pragma once
#include "kestrel/config.h"
#include "kestrel/tensor.h"
#include "train_state.h"

namespace kestrel {

// The scale, the clean steps since it last changed, the skipped steps and the overflow flag live in one
// f32 (4,) tensor on the device, [scale, clean_steps, skipped_steps, found_inf] (plugin.h's layout for
// the optimizer's scaler input). In stream order, each step: the loss's backward seed is multiplied by
// the scale (seed), check() sets the flag from the gradients, the optimizer reads both and skips the
// update on overflow (Optimizer::step(lr, state())), and update() backs off or grows the scale. The
// host reads the state only to report or checkpoint it (read()); a captured step replays all of it.
class GradScaler {
 public:
  // resumed: a resumed run's state (scale 0 starts at config.init_scale).
  GradScaler(const LossScaleConfig& config, const LossScaleState& resumed, const Device& device);
  // The backward seed of a loss that counts `share` of the batch: share * scale, an f32 scalar.
  Tensor seed(double share) const;
  // After backward: found_inf = 1 when a gradient is NaN or infinite, else 0. gradients: (P,) f32.
  void check(const Tensor& gradients);
  // After the optimizer: the scale times backoff_factor after an overflow, times growth_factor after
  // growth_interval clean steps in a row; the counts follow.
  void update();
  const Tensor& state() const { return state_; }
  LossScaleState read() const;  // a wait for the device

 private:
  LossScaleConfig config_;
  Tensor state_;     // (4,) f32 on the device
  Tensor interval_;  // growth_interval as an f32 scalar on the device
};

}  // namespace kestrel
