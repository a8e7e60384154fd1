// Counter-based random draws (Philox4x32-10): element i depends only on (seed, offset, i), so the
// result is the same in any order, on any thread count and on every backend (see plugin.h).
#include <cmath>

#include "cpu_ops.hpp"
#include "kestrel/plugin_shapes.hpp"
#include "kestrel/philox.h"

namespace kestrel_cpu {

bool supports_random(const kestrel_op& op) {
  if (!valid_tensors(op) || !kestrel::plugin_shapes::random_fits(op)) return false;
  auto dist = static_cast<const kestrel_random_params*>(op.params)->distribution;
  kestrel_dtype d = op.outputs[0].dtype;
  if (dist == KESTREL_DISTRIBUTION_BERNOULLI) return is_float_dtype(d) || d == KESTREL_DTYPE_U8;
  return (dist == KESTREL_DISTRIBUTION_UNIFORM || dist == KESTREL_DISTRIBUTION_NORMAL) && is_float_dtype(d);
}

void launch_random(const kestrel_op& op) {
  const auto p = params_of<kestrel_random_params>(op, "random");
  dispatch(op.outputs[0].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using C = typename E::compute;
    View<S> y = view_of<S>(op.outputs[0]);
    const uint64_t seed = p.seed;
    const uint64_t offset = p.offset + (op.num_inputs ? uint64_t(view_of<int64_t>(op.inputs[0]).base[0]) : 0);
    const double a = p.a, b = p.b;
    switch (p.distribution) {
      case KESTREL_DISTRIBUTION_UNIFORM:
        Kokkos::parallel_for("kestrel::random_uniform", Range(0, y.numel), [=](int64_t i) {
          kestrel_philox_block block = kestrel_philox4x32_10(seed, offset + uint64_t(i) / 4);
          y.base[y.at(i)] = E::store(C(a + (b - a) * kestrel_philox_unit(block.v[i % 4])));
        });
        break;
      case KESTREL_DISTRIBUTION_BERNOULLI:
        Kokkos::parallel_for("kestrel::random_bernoulli", Range(0, y.numel), [=](int64_t i) {
          kestrel_philox_block block = kestrel_philox4x32_10(seed, offset + uint64_t(i) / 4);
          y.base[y.at(i)] = E::store(C(kestrel_philox_bernoulli(block.v[i % 4], a)));
        });
        break;
      case KESTREL_DISTRIBUTION_NORMAL:
        Kokkos::parallel_for("kestrel::random_normal", Range(0, y.numel), [=](int64_t i) {
          kestrel_philox_block block = kestrel_philox4x32_10(seed, offset + uint64_t(i) / 2);
          int lane = 2 * int(i % 2);
          // Box-Muller; u1 is shifted into (0, 1] so the logarithm stays finite.
          double u1 = kestrel_philox_unit(block.v[lane]) + 1.0 / 16777216.0;
          double u2 = kestrel_philox_unit(block.v[lane + 1]);
          double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
          y.base[y.at(i)] = E::store(C(a + b * z));
        });
        break;
      default: fail("unknown distribution");
    }
  });
}

}  // namespace kestrel_cpu
