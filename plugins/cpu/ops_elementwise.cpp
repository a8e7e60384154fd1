// fill, copy (with casts), unary and binary element-wise ops.
#include <cmath>

#include "cpu_ops.hpp"

namespace kestrel_cpu {

bool supports_fill(const kestrel_op& op) {
  return kestrel::plugin_shapes::fill_fits(op);
}

void launch_fill(const kestrel_op& op) {
  double value = params_of<kestrel_fill_params>(op, "fill").value;
  const kestrel_tensor& out = op.outputs[0];
  dispatch(out.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using C = typename E::compute;
    const S stored = E::store(static_cast<C>(value));
    View<S> y = view_of<S>(out);
    if (y.contiguous)
      parallel_chunks("kestrel::fill", y.numel, y.numel, [=](int64_t begin, int64_t end) {
        std::fill(y.base + begin, y.base + end, stored);
      });
    else
      Kokkos::parallel_for("kestrel::fill", Range(0, y.numel), [=](int64_t i) { y.base[y.at(i)] = stored; });
  });
}

bool supports_copy(const kestrel_op& op) { return kestrel::plugin_shapes::copy_fits(op); }

void launch_copy(const kestrel_op& op) {
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  dispatch(in.dtype, [&](auto from) {
    dispatch(out.dtype, [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      View<typename From::storage> x = view_of<typename From::storage>(in);
      View<typename To::storage> y = view_of<typename To::storage>(out);
      // Row by row (see map_unary): transposes and broadcasts are the common strided copies.
      coalesce(y, x);
      const int64_t inner = inner_extent(y.rank, y.shape), rows = inner ? y.numel / inner : 0;
      const int64_t xs = inner_stride(x.rank, x.strides), ys = inner_stride(y.rank, y.strides);
      parallel_for_split("kestrel::copy", rows, y.numel, [=](int64_t r) {
        const auto* xr = x.base + x.at(r * inner);
        auto* yr = y.base + y.at(r * inner);
        for (int64_t j = 0; j < inner; ++j)
          yr[j * ys] = To::store(static_cast<typename To::compute>(From::load(xr[j * xs])));
      });
    });
  });
}

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
      case KESTREL_UNARY_GELU_GRAD:
        return run_staged([](C x) {
          C cdf = C(0.5) * (C(1) + std::erf(x * C(M_SQRT1_2)));
          C pdf = std::exp(C(-0.5) * x * x) * C(0.3989422804014327);  // 1/sqrt(2*pi)
          return cdf + x * pdf;
        });
      case KESTREL_UNARY_RECIPROCAL: return run([](C x) { return C(1) / x; });
      case KESTREL_UNARY_AFFINE: return run([=](C x) { return alpha * x + beta; });
      case KESTREL_UNARY_POW: return run([=](C x) { return std::pow(x, alpha); });
      default: break;
    }
  }
  fail("unary function not available for this dtype", KESTREL_STATUS_UNSUPPORTED);
}

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
      default: break;
    }
  }
  fail("binary function not available for this dtype", KESTREL_STATUS_UNSUPPORTED);
}

}  // namespace

bool supports_unary(const kestrel_op& op) { return kestrel::plugin_shapes::unary_fits(op); }

void launch_unary(const kestrel_op& op) {
  const auto& p = params_of<kestrel_unary_params>(op, "unary");
  dispatch(op.inputs[0].dtype,
           [&](auto elem) { run_unary<decltype(elem)>(p.fn, p.alpha, p.beta, op.inputs[0], op.outputs[0]); });
}

bool supports_binary(const kestrel_op& op) { return kestrel::plugin_shapes::binary_fits(op); }

void launch_binary(const kestrel_op& op) {
  auto fn = params_of<kestrel_binary_params>(op, "binary").fn;
  dispatch(op.outputs[0].dtype,
           [&](auto elem) { run_binary<decltype(elem)>(fn, op.inputs[0], op.inputs[1], op.outputs[0]); });
}

}  // namespace kestrel_cpu
