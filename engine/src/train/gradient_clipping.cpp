#include "gradient_clipping.h"

#include <algorithm>

#include "kestrel/ops.h"

namespace kestrel {

namespace {
// The squares are summed in slices of this many elements, so the squares' temporary stays at 64 MiB
// however many parameters there are (GPT-2 small's 124M would need 500 MB at once).
constexpr int64_t kSlice = int64_t(1) << 24;
}  // namespace

Tensor clip_gradient_norm(Tensor& gradients, double max_norm, const Tensor* scaler_state) {
  const int64_t count = gradients.numel();
  Tensor sum = Tensor::zeros({}, DType::f32, gradients.device());  // sum of squares
  for (int64_t begin = 0; begin < count; begin += kSlice) {
    const Tensor slice = gradients.slice(0, begin, std::min(count, begin + kSlice));  // (slice)
    sum = ops::binary(KESTREL_BINARY_ADD, sum, ops::reduce(KESTREL_REDUCE_SUM, ops::unary(KESTREL_UNARY_SQUARE, slice)));
  }
  Tensor norm = ops::unary(KESTREL_UNARY_SQRT, sum);
  if (scaler_state) norm = ops::binary(KESTREL_BINARY_DIV, norm, scaler_state->slice(0, 0, 1).view({}));
  // max_norm / (norm + 1e-6), at most 1: torch's coefficient, one division as there.
  const Tensor limit = Tensor::full({}, max_norm, DType::f32, gradients.device());
  const Tensor coefficient =
      ops::binary(KESTREL_BINARY_MIN, ops::binary(KESTREL_BINARY_DIV, limit, ops::unary(KESTREL_UNARY_AFFINE, norm, 1.0, 1e-6)),
                  Tensor::full({}, 1.0, DType::f32, gradients.device()));
  ops::binary_(KESTREL_BINARY_MUL, gradients, gradients, coefficient);
  return norm;
}

}  // namespace kestrel
