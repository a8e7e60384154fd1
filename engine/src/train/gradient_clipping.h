// Clipping the gradients' global L2 norm before an update (torch.nn.utils.clip_grad_norm_). Engine-internal.
#pragma once
#include "kestrel/tensor.h"

namespace kestrel {

// Scales `gradients` (the flat f32 gradients) in place by min(1, max_norm / (norm + 1e-6)), norm their L2
// norm, as clip_grad_norm_ does, on the device and without a wait (captured steps and data-parallel ranks
// alike). With f16 loss scaling the gradients still carry the scale, state[0] of the scaler's state
// (plugin.h): the norm compared is the unscaled one, as after torch's GradScaler.unscale_. A non-finite
// norm (an overflow, which the scaler's skip handles) gives a coefficient of 0 or NaN. Returns the
// unscaled norm before clipping, a device scalar.
Tensor clip_gradient_norm(Tensor& gradients, double max_norm, const Tensor* scaler_state);

}  // namespace kestrel
