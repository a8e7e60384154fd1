// Clipping the gradients' global L2 norm before an update (torch.nn.utils.clip_grad_norm_). Engine-internal.
#pragma once
#include "kestrel/tensor.h"

namespace kestrel {

// torch's clip_grad_norm_ scales the gradients by min(1, max_norm / (norm + 1e-6)), norm their L2 norm.
// Both ways below compute that on the device without a wait (captured steps and data-parallel ranks
// alike: their gradients are the same sums). Under f16 the norm is the unscaled one, as after torch's
// GradScaler.unscale_. `norm` is the norm before clipping, a device scalar. As in torch without
// error_if_nonfinite, a non-finite norm gives finite gradients a coefficient of 0 (and non-finite ones
// NaN); under f16 the scaler's skip covers such a step.
struct GradientClipping {
  Tensor norm;          // f32 scalar
  Tensor update_state;  // f32 (4), or undefined when the gradients were scaled in place
};

// Where the optimizer's fused update reads a loss scaler's state on the device (plugin.h, 1.5:
// [divisor, clean_steps, skipped_steps, found_inf], the gradient divided by the divisor): the update
// applies the coefficient as it reads the gradients. `update_state` takes the scaler's place, its divisor
// 1 / the coefficient, times the loss scale under f16, whose other entries it copies. Clipping then
// costs the norm's pass over the gradients and no other.
GradientClipping clip_gradient_norm(const Tensor& gradients, double max_norm, const Tensor* scaler_state);

// Otherwise (no loss scaler; a backend whose update cannot read the state on the device): the gradients
// are scaled in place, one more pass, and the plain update follows.
GradientClipping clip_gradient_norm_in_place(Tensor& gradients, double max_norm);

// The most device memory the clipping allocates at once, a few scalars aside: the squares of a slice of
// the gradients where the device has no one-pass sum of squares (ops::sum_of_squares), else nothing.
int64_t clipping_temporary_bytes(const Tensor& gradients);

}  // namespace kestrel
