// Standard normal draws with the Box-Muller mapping that plugin.h specifies for KESTREL_OP_RANDOM.
#include "philox_draws.h"

#include <cmath>

namespace kestrel::data::detail {

void fill_normal(float* out, int64_t count, uint64_t seed, uint64_t offset) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  constexpr double kWordUnit = 1.0 / 16777216.0;  // 2^-24, also the shift that keeps log finite
  for (int64_t i = 0; i < count; i += 2) {
    const kestrel_philox_block block = kestrel_philox4x32_10(seed, offset + static_cast<uint64_t>(i) / 2);
    for (int lane = 0; lane < 2 && i + lane < count; ++lane) {
      const double u1 = kestrel_philox_unit(block.v[2 * lane]) + kWordUnit;
      const double u2 = kestrel_philox_unit(block.v[2 * lane + 1]);
      out[i + lane] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
    }
  }
}

}  // namespace kestrel::data::detail
