// Unary element-wise ops (one translation unit of its own: it instantiates every function for every dtype,
// the transcendental ones once per vector width).
#include <cmath>

#include "cpu_ops.hpp"

namespace kestrel_cpu {

namespace {

template <class E>
void run_unary(kestrel_unary_fn fn, double alpha_in, double beta_in, const kestrel_tensor& in,
               const kestrel_tensor& out) {
  using C = typename E::compute;
  const C alpha = static_cast<C>(alpha_in), beta = static_cast<C>(beta_in);
  const char* label = "kestrel::unary";
  auto run = [&](auto f) { map_unary<E>(in, out, f, label); };
  auto run_staged = [&](auto f) { map_unary_staged<E>(in, out, f, label); };
  switch (fn) {
    case KESTREL_UNARY_NEG: return run([](C x) { return C(-x); });
    case KESTREL_UNARY_ABS: return run([](C x) { return C(x < 0 ? -x : x); });
    case KESTREL_UNARY_RELU: return run([](C x) { return C(x < 0 ? 0 : x); });  // keeps NaN
    case KESTREL_UNARY_STEP: return run([](C x) { return C(x > 0 ? 1 : 0); });
    case KESTREL_UNARY_SQUARE: return run([](C x) { return C(x * x); });
    case KESTREL_UNARY_SIGN: return run([](C x) { return C(x != x ? x : (x > 0) - (x < 0)); });
    default: break;
  }
  if constexpr (E::is_float) {
    switch (fn) {
      case KESTREL_UNARY_EXP: return run_staged([](C x) { return std::exp(x); });
      case KESTREL_UNARY_LOG: return run_staged([](C x) { return std::log(x); });
      case KESTREL_UNARY_SQRT: return run([](C x) { return std::sqrt(x); });
      case KESTREL_UNARY_RSQRT: return run([](C x) { return C(1) / std::sqrt(x); });
      case KESTREL_UNARY_TANH: return run_staged([](C x) { return std::tanh(x); });
      case KESTREL_UNARY_SIGMOID: return run_staged([](C x) { return C(1) / (C(1) + std::exp(-x)); });
      case KESTREL_UNARY_GELU:
        return run_staged([](C x) { return C(0.5) * x * (C(1) + std::erf(x * C(M_SQRT1_2))); });
      case KESTREL_UNARY_GELU_GRAD: return run_staged([](C x) { return gelu_grad(x); });
      case KESTREL_UNARY_RECIPROCAL: return run([](C x) { return C(1) / x; });
      case KESTREL_UNARY_AFFINE: return run([=](C x) { return alpha * x + beta; });
      case KESTREL_UNARY_POW: return run([=](C x) { return std::pow(x, alpha); });
      default: break;
    }
  }
  fail("unary function not available for this dtype", KESTREL_STATUS_UNSUPPORTED);
}

}  // namespace

bool supports_unary(const kestrel_op& op) { return kestrel::plugin_shapes::unary_fits(op); }

void launch_unary(const kestrel_op& op) {
  const auto& p = params_of<kestrel_unary_params>(op, "unary");
  dispatch(op.inputs[0].dtype,
           [&](auto elem) { run_unary<decltype(elem)>(p.fn, p.alpha, p.beta, op.inputs[0], op.outputs[0]); });
}

}  // namespace kestrel_cpu
