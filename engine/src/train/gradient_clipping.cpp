#include "gradient_clipping.h"

#include <algorithm>

#include "kestrel/ops.h"

namespace kestrel {

namespace {
// The squares are summed in slices of this many elements, so the squares' temporary stays at 64 MiB
// however many parameters there are (GPT-2 small's 124M would need 500 MB at once).
constexpr int64_t kSlice = int64_t(1) << 24;

// The L2 norm of the flat gradients (P), a device scalar.
Tensor l2_norm(const Tensor& gradients) {
  const int64_t count = gradients.numel();
  Tensor sum = Tensor::zeros({}, DType::f32, gradients.device());  // of the squares
  for (int64_t begin = 0; begin < count; begin += kSlice) {
    const Tensor slice = gradients.slice(0, begin, std::min(count, begin + kSlice));  // (slice)
    sum = ops::binary(KESTREL_BINARY_ADD, sum, ops::reduce(KESTREL_REDUCE_SUM, ops::unary(KESTREL_UNARY_SQUARE, slice)));
  }
  return ops::unary(KESTREL_UNARY_SQRT, sum);
}
}  // namespace

GradientClipping clip_gradient_norm_in_place(Tensor& gradients, double max_norm) {
  const Device& device = gradients.device();
  GradientClipping clipping{l2_norm(gradients), Tensor()};
  // max_norm / (norm + 1e-6), at most 1: torch's coefficient, one division as there.
  const Tensor coefficient = ops::binary(
      KESTREL_BINARY_MIN,
      ops::binary(KESTREL_BINARY_DIV, Tensor::full({}, max_norm, DType::f32, device),
                  ops::unary(KESTREL_UNARY_AFFINE, clipping.norm, 1.0, 1e-6)),
      Tensor::full({}, 1.0, DType::f32, device));
  ops::binary_(KESTREL_BINARY_MUL, gradients, gradients, coefficient);
  return clipping;
}

GradientClipping clip_gradient_norm(const Tensor& gradients, double max_norm, const Tensor* scaler_state) {
  const Device& device = gradients.device();
  GradientClipping clipping;
  clipping.norm = l2_norm(gradients);
  const Tensor scale = scaler_state ? scaler_state->slice(0, 0, 1).view({}) : Tensor();  // f16's loss scale
  if (scaler_state) clipping.norm = ops::binary(KESTREL_BINARY_DIV, clipping.norm, scale);
  // 1 / min(1, max_norm / (norm + 1e-6)) = max(1, (norm + 1e-6) / max_norm)
  Tensor divisor = ops::binary(
      KESTREL_BINARY_MAX,
      ops::binary(KESTREL_BINARY_DIV, ops::unary(KESTREL_UNARY_AFFINE, clipping.norm, 1.0, 1e-6),
                  Tensor::full({}, max_norm, DType::f32, device)),
      Tensor::full({}, 1.0, DType::f32, device));
  if (scaler_state) divisor = ops::binary(KESTREL_BINARY_MUL, divisor, scale);
  clipping.update_state = scaler_state ? scaler_state->clone() : Tensor::zeros({4}, DType::f32, device);
  clipping.update_state.slice(0, 0, 1).copy_from(divisor.view({1}));
  return clipping;
}

}  // namespace kestrel
