// Arithmetic and shape ops on Vars.
#include <fmt/format.h>

#include <optional>
#include <utility>

#include "autocast.h"
#include "padded_rows.h"
#include "kestrel/functional.h"
#include "kestrel/ops.h"
#include "kestrel/plugin_struct_size.hpp"
#include "tensor_math.h"

namespace kestrel::fn {

namespace {
// a and b in the dtype they promote to (an autocast product's 16-bit result and an f32 residual meet in f32).
std::pair<Var, Var> promoted(const Var& a, const Var& b) {
  const DType dtype = promoted_dtype(a.value().dtype(), b.value().dtype());
  return {cast(a, dtype), cast(b, dtype)};
}
}  // namespace

namespace {
// An f32 operand plus a 16-bit one of its shape (a residual stream and a mixed-precision block's output):
// one BINARY ADD that widens the 16-bit operand as it reads it (ABI 1.15) where the device has it, instead
// of a widened copy and an f32 addition. The 16-bit operand's gradient is cast where it lands.
std::optional<Var> widening_add(const Var& a, const Var& b) {
  const bool a_wide = a.value().dtype() == DType::f32;
  const Var& wide = a_wide ? a : b;
  const Var& narrow = a_wide ? b : a;
  const DType low = narrow.value().dtype();
  if (wide.value().dtype() != DType::f32 || (low != DType::bf16 && low != DType::f16) ||
      wide.value().shape() != narrow.value().shape() || wide.value().device() != narrow.value().device())
    return std::nullopt;
  auto params = abi_init<kestrel_binary_params>();
  params.fn = KESTREL_BINARY_ADD;
  // The sum is f32, of the f32 operand's shape.
  const std::optional<Tensor> sum =
      ops::launch_new_if_supported(KESTREL_OP_BINARY, &params, {wide.value(), narrow.value()}, wide.value());
  if (!sum) return std::nullopt;
  return make_var(*sum, {a, b}, "add", [a = a.node(), b = b.node()](const Tensor& dy) {
    accumulate_grad(*a, dy);
    accumulate_grad(*b, dy);
  });
}
}  // namespace

Var add(const Var& a_in, const Var& b_in) {
  if (a_in.value().dtype() != b_in.value().dtype())
    if (std::optional<Var> sum = widening_add(a_in, b_in)) return *sum;
  const auto [a, b] = promoted(a_in, b_in);
  return make_var(math::add(a.value(), b.value()), {a, b}, "add", [a = a.node(), b = b.node()](const Tensor& dy) {
    accumulate_broadcast_grad(*a, dy);
    accumulate_broadcast_grad(*b, dy);
  });
}

Var sub(const Var& a_in, const Var& b_in) {
  const auto [a, b] = promoted(a_in, b_in);
  return make_var(math::sub(a.value(), b.value()), {a, b}, "sub", [a = a.node(), b = b.node()](const Tensor& dy) {
    accumulate_broadcast_grad(*a, dy);
    if (b->requires_grad) accumulate_broadcast_grad(*b, math::scale(dy, -1.0));
  });
}

Var mul(const Var& a_in, const Var& b_in) {
  const auto [a, b] = promoted(a_in, b_in);
  return make_var(math::mul(a.value(), b.value()), {a, b}, "mul", [a = a.node(), b = b.node()](const Tensor& dy) {
    if (a->requires_grad) accumulate_broadcast_grad(*a, math::mul(dy, b->value));
    if (b->requires_grad) accumulate_broadcast_grad(*b, math::mul(dy, a->value));
  });
}

Var reshape(const Var& x, const Shape& shape) {
  // Rows a stride apart (a linear layer's padded product) keep their layout both ways: see padded_rows.h.
  return make_var(rows_reshaped(x.value(), shape), {x}, "reshape",
                  [x = x.node()](const Tensor& dy) { accumulate_grad(*x, rows_reshaped(dy, x->value.shape())); });
}

Var permute(const Var& x, const std::vector<int>& dims) {
  std::vector<int> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[static_cast<size_t>(dims[i])] = static_cast<int>(i);
  return make_var(x.value().permute(dims), {x}, "permute",
                  [x = x.node(), inverse](const Tensor& dy) { accumulate_grad(*x, dy.permute(inverse).contiguous()); });
}

namespace {
// Mixed precision's product of a and b (f32 or 16-bit): both in the scope's dtype and multiplied there,
// the result in it too; an f32 operand's gradient comes out of its GEMM as f32 (unrounded on devices with
// ABI 1.6's mixed GEMM). a: (B, M, K), b: (B, K, N).
Var matmul_autocast(const Var& a, const Var& b) {
  const DType low = autocast_dtype();
  const Tensor a16 = a.value().to(low), b16 = b.value().to(low);
  return make_var(ops::matmul(a16, b16), {a, b}, "matmul", [a = a.node(), b = b.node(), a16, b16](const Tensor& dy) {
    const Tensor dy16 = dy.to(a16.dtype());  // (B, M, N)
    if (a->requires_grad) accumulate_grad(*a, ops::matmul(dy16, b16.transpose(1, 2), a->value.dtype()));
    if (b->requires_grad) accumulate_grad(*b, ops::matmul(a16.transpose(1, 2), dy16, b->value.dtype()));
  });
}
}  // namespace

Var matmul(const Var& a, const Var& b) {
  if (autocasts(a) && autocasts(b)) return matmul_autocast(a, b);
  return make_var(ops::matmul(a.value(), b.value()), {a, b}, "matmul", [a = a.node(), b = b.node()](const Tensor& dy) {
    // dy: (B, M, N). da = dy b^T, db = a^T dy, each a batched GEMM on transposed views.
    if (a->requires_grad) accumulate_grad(*a, ops::matmul(dy, b->value.transpose(1, 2)));
    if (b->requires_grad) accumulate_grad(*b, ops::matmul(a->value.transpose(1, 2), dy));
  });
}

Var flatten(const Var& x) {
  if (x.value().rank() < 1) throw InvalidArgument("flatten: needs a batch dimension");
  return reshape(x, {x.value().size(0), -1});
}

Var sum(const Var& x_in) {
  const Var x = widened(x_in);
  return make_var(math::sum(x.value(), {}, false), {x}, "sum", [x = x.node()](const Tensor& dy) {
    accumulate_grad(*x, dy.expand(x->value.shape()).contiguous());
  });
}

Var mean(const Var& x_in) {
  const Var x = widened(x_in);
  return make_var(math::mean(x.value(), {}, false), {x}, "mean", [x = x.node()](const Tensor& dy) {
    double n = static_cast<double>(x->value.numel());
    accumulate_grad(*x, math::scale(dy, 1.0 / n).expand(x->value.shape()).contiguous());
  });
}

}  // namespace kestrel::fn
