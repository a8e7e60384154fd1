// Short names for the tensor arithmetic that backward rules are written in. Engine-internal.
#pragma once
#include "kestrel/ops.h"
#include "kestrel/plugin_struct_size.hpp"

namespace kestrel::math {

inline Tensor add(const Tensor& a, const Tensor& b) { return ops::binary(KESTREL_BINARY_ADD, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return ops::binary(KESTREL_BINARY_SUB, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return ops::binary(KESTREL_BINARY_MUL, a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return ops::binary(KESTREL_BINARY_DIV, a, b); }
inline Tensor affine(const Tensor& x, double alpha, double beta) { return ops::unary(KESTREL_UNARY_AFFINE, x, alpha, beta); }
inline Tensor scale(const Tensor& x, double alpha) { return affine(x, alpha, 0.0); }
inline Tensor unary(kestrel_unary_fn fn, const Tensor& x) { return ops::unary(fn, x); }

// An activation's gradient, dy * f'(at), fn RELU_BACKWARD (at: relu's output) or GELU_BACKWARD (at: gelu's
// input): one pass where the device has ABI 1.14's binary function for them, else the derivative's own
// pass and a product, as before 1.14.
inline Tensor activation_backward(kestrel_binary_fn fn, const Tensor& dy, const Tensor& at) {
  const kestrel_binary_params params{abi_size<kestrel_binary_params>, fn};
  if (dy.shape() == at.shape() && dy.dtype() == at.dtype())
    if (std::optional<Tensor> out = ops::launch_new_if_supported(KESTREL_OP_BINARY, &params, {dy, at}, dy)) return *out;
  return mul(dy, unary(fn == KESTREL_BINARY_RELU_BACKWARD ? KESTREL_UNARY_STEP : KESTREL_UNARY_GELU_GRAD, at));
}
inline Tensor sum(const Tensor& x, std::vector<int> dims, bool keepdim) {
  return ops::reduce(KESTREL_REDUCE_SUM, x, std::move(dims), keepdim);
}
inline Tensor mean(const Tensor& x, std::vector<int> dims, bool keepdim) {
  return ops::reduce(KESTREL_REDUCE_MEAN, x, std::move(dims), keepdim);
}
// The dtype of per-row statistics the fused ops keep beside float data of `dtype` (plugin_shapes'
// statistics_dtype: log-sum-exp, mean and rstd, cross-entropy's losses and scales): f64 for f64, else f32.
inline DType statistics_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }
// A scalar tensor holding `value`, on x's device and in its dtype.
inline Tensor scalar_like(const Tensor& x, double value) { return Tensor::full({}, value, x.dtype(), x.device()); }

}  // namespace kestrel::math
