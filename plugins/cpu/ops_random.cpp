// Counter-based random draws (Philox4x32-10): element i depends only on (seed, offset, i), so the
// result is the same in any order, on any thread count and on every backend (see plugin.h).
#include <algorithm>
#include <cmath>

#include "cpu_ops.hpp"
#include "kestrel/plugin_shapes.hpp"
#include "kestrel/philox.h"

namespace kestrel_cpu {

bool supports_random(const kestrel_op& op) { return kestrel::plugin_shapes::random_fits(op); }

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
    // One Philox block gives the four 32-bit draws of four consecutive uniform or Bernoulli elements (or
    // two normal ones): each block is computed once and its lanes written, not once per element.
    auto per_block = [&](const char* label, int64_t per, auto write) {
      Kokkos::parallel_for(label, Range(0, (y.numel + per - 1) / per), [=](int64_t b) {
        const kestrel_philox_block block = kestrel_philox4x32_10(seed, offset + uint64_t(b));
        for (int64_t i = b * per; i < std::min(y.numel, (b + 1) * per); ++i) y.base[y.at(i)] = write(block, i % per);
      });
    };
    switch (p.distribution) {
      case KESTREL_DISTRIBUTION_UNIFORM:
        per_block("kestrel::random_uniform", 4, [=](const kestrel_philox_block& block, int64_t lane) {
          return E::store(C(a + (b - a) * kestrel_philox_unit(block.v[lane])));
        });
        break;
      case KESTREL_DISTRIBUTION_BERNOULLI:
        per_block("kestrel::random_bernoulli", 4, [=](const kestrel_philox_block& block, int64_t lane) {
          return E::store(C(kestrel_philox_bernoulli(block.v[lane], a)));
        });
        break;
      case KESTREL_DISTRIBUTION_NORMAL:
        per_block("kestrel::random_normal", 2, [=](const kestrel_philox_block& block, int64_t pair) {
          // Box-Muller on lanes (0, 1) or (2, 3); u1 is shifted into (0, 1] so the logarithm stays finite.
          double u1 = kestrel_philox_unit(block.v[2 * pair]) + 1.0 / 16777216.0;
          double u2 = kestrel_philox_unit(block.v[2 * pair + 1]);
          double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
          return E::store(C(a + b * z));
        });
        break;
      default: fail("unknown distribution");
    }
  });
}

}  // namespace kestrel_cpu
