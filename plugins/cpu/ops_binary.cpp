// Binary element-wise ops, every function for every dtype; since ABI 1.15 also ADD of an f32 and a 16-bit
// operand (a residual stream and a mixed-precision block's output).
#include <cmath>

#include "cpu_ops.hpp"

namespace kestrel_cpu {

namespace {

template <class E>
void run_binary(kestrel_binary_fn fn, const kestrel_tensor& a, const kestrel_tensor& b, const kestrel_tensor& out) {
  using C = typename E::compute;
  const char* label = "kestrel::binary";
  auto run = [&](auto f) { map_binary<E>(a, b, out, f, label); };
  switch (fn) {
    case KESTREL_BINARY_ADD: return run([](C x, C y) { return C(x + y); });
    case KESTREL_BINARY_SUB: return run([](C x, C y) { return C(x - y); });
    case KESTREL_BINARY_MUL: return run([](C x, C y) { return C(x * y); });
    case KESTREL_BINARY_MAX: return run([](C x, C y) { return nan_max(x, y); });
    case KESTREL_BINARY_MIN: return run([](C x, C y) { return nan_min(x, y); });
    case KESTREL_BINARY_EQ: return run([](C x, C y) { return C(x == y); });
    case KESTREL_BINARY_NE: return run([](C x, C y) { return C(x != y); });
    case KESTREL_BINARY_LT: return run([](C x, C y) { return C(x < y); });
    case KESTREL_BINARY_LE: return run([](C x, C y) { return C(x <= y); });
    case KESTREL_BINARY_GT: return run([](C x, C y) { return C(x > y); });
    case KESTREL_BINARY_GE: return run([](C x, C y) { return C(x >= y); });
    default: break;
  }
  if constexpr (E::is_float) {
    switch (fn) {
      case KESTREL_BINARY_DIV: return run([](C x, C y) { return x / y; });
      case KESTREL_BINARY_POW: return run([](C x, C y) { return std::pow(x, y); });
      case KESTREL_BINARY_RELU_BACKWARD: return run([](C dy, C y) { return dy * C(y > C(0)); });
      case KESTREL_BINARY_GELU_BACKWARD:  // erf through libmvec, staged like UNARY's GELU_GRAD
        return map_scaled_staged<E>(a, b, out, [](C x) { return gelu_grad(x); }, label);
      default: break;
    }
  }
  fail("binary function not available for this dtype", KESTREL_STATUS_UNSUPPORTED);
}

}  // namespace

bool supports_binary(const kestrel_op& op) { return kestrel::plugin_shapes::binary_fits(op, /*widening_add=*/true); }

void launch_binary(const kestrel_op& op) {
  auto fn = params_of<kestrel_binary_params>(op, "binary").fn;
  const kestrel_tensor &a = op.inputs[0], &b = op.inputs[1], &out = op.outputs[0];
  if (b.dtype != out.dtype) {  // ABI 1.15: an f32 plus a 16-bit operand, widened as it is read
    auto add = [](float x, float y) { return x + y; };
    if (b.dtype == KESTREL_DTYPE_BF16) return map_binary<F32, decltype(add), BF16>(a, b, out, add, "kestrel::binary");
    return map_binary<F32, decltype(add), F16>(a, b, out, add, "kestrel::binary");
  }
  dispatch(out.dtype, [&](auto elem) { run_binary<decltype(elem)>(fn, a, b, out); });
}

}  // namespace kestrel_cpu
