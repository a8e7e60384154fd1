// Clipping the gradients' global L2 norm before an update (torch.nn.utils.clip_grad_norm_). Engine-internal.
#pragma once
#include "kestrel/tensor.h"

namespace kestrel {

// torch's clip_grad_norm_ scales the gradients by min(1, max_norm / (norm + 1e-6)), norm their L2 norm.
// Here the optimizer applies that coefficient as it reads them: `update_state` takes the place of a loss
// scaler's state in the update (plugin.h, 1.5: [divisor, clean_steps, skipped_steps, found_inf], the
// gradient divided by the divisor), the divisor being 1 / the coefficient, times the loss scale under
// f16, whose other entries it copies. So clipping costs the norm's pass over the gradients and no other,
// and no wait (captured steps and data-parallel ranks alike: their gradients are the same sums). Under
// f16 the norm is the unscaled one, as after torch's GradScaler.unscale_. `norm`: that norm before
// clipping, a device scalar. A non-finite norm (an overflow, which the scaler's skip handles) leaves the
// gradients unclipped.
struct GradientClipping {
  Tensor norm;          // f32 scalar
  Tensor update_state;  // f32 (4)
};
GradientClipping clip_gradient_norm(const Tensor& gradients, double max_norm, const Tensor* scaler_state);

}  // namespace kestrel
