#include "gradient_clipping.h"

#include <algorithm>

#include "kestrel/ops.h"

namespace kestrel {

namespace {
// The L2 norm of the flat gradients (P), a device scalar.
Tensor l2_norm(const Tensor& gradients) { return ops::unary(KESTREL_UNARY_SQRT, ops::sum_of_squares(gradients)); }

// What the gradients are divided by: 1 / min(1, max_norm / (norm + 1e-6)) = max(1, (norm + 1e-6) / max_norm),
// torch's coefficient inverted. norm: a device scalar.
Tensor clip_divisor(const Tensor& norm, double max_norm) {
  const Device& device = norm.device();
  return ops::binary(KESTREL_BINARY_MAX,
                     ops::binary(KESTREL_BINARY_DIV, ops::unary(KESTREL_UNARY_AFFINE, norm, 1.0, 1e-6),
                                 Tensor::full({}, max_norm, DType::f32, device)),
                     Tensor::full({}, 1.0, DType::f32, device));
}
}  // namespace

int64_t clipping_temporary_bytes(const Tensor& gradients) { return ops::sum_of_squares_temporary_bytes(gradients); }

GradientClipping clip_gradient_norm_in_place(Tensor& gradients, double max_norm) {
  GradientClipping clipping{l2_norm(gradients), Tensor()};
  ops::binary_(KESTREL_BINARY_DIV, gradients, gradients, clip_divisor(clipping.norm, max_norm));
  return clipping;
}

GradientClipping clip_gradient_norm(const Tensor& gradients, double max_norm, const Tensor* scaler_state) {
  GradientClipping clipping;
  clipping.norm = l2_norm(gradients);
  const Tensor scale = scaler_state ? scaler_state->slice(0, 0, 1).view({}) : Tensor();  // f16's loss scale
  if (scaler_state) clipping.norm = ops::binary(KESTREL_BINARY_DIV, clipping.norm, scale);
  Tensor divisor = clip_divisor(clipping.norm, max_norm);
  if (scaler_state) divisor = ops::binary(KESTREL_BINARY_MUL, divisor, scale);
  clipping.update_state = scaler_state ? scaler_state->clone() : Tensor::zeros({4}, DType::f32, gradients.device());
  clipping.update_state.slice(0, 0, 1).copy_from(divisor.view({1}));
  return clipping;
}

}  // namespace kestrel
