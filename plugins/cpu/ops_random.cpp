// Counter-based random draws (Philox4x32-10): element i depends only on (seed, offset, i), so the
// result is the same in any order, on any thread count and on every backend (see plugin.h).
// A block of Philox gives the four 32-bit words of four consecutive uniform or Bernoulli elements (or
// two normal ones). Blocks are computed 16 at a time in vector registers (cpu_philox.hpp: a dropout mask
// is drawn for every activation it falls on, every step), and pieces of blocks are spread over the host
// threads.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cpu_ops.hpp"
#include "cpu_philox.hpp"
#include "kestrel/plugin_shapes.hpp"

namespace kestrel_cpu {

namespace {

// The elements of blocks [begin, end) (from the start of a group of kPhiloxLanes blocks), `per` elements a
// block: element i is draw(its 4 / per words). Built per vector width; with Vector (draws of one word each,
// per = 4), the draws of a contiguous output run in vector lanes too (draws of integer and exact double
// arithmetic only, which give the same bits in a lane as alone: a vectorised log or cos would not).
template <bool Vector, class S, class Draw>
KESTREL_VECTOR_CLONES void draw_blocks(const View<S>& y, uint64_t seed, uint64_t offset, int64_t per, int64_t begin,
                                       int64_t end, const Draw& draw) {
  alignas(64) uint32_t words[4 * kPhiloxLanes];
  const int64_t words_each = 4 / per;
  for (int64_t first = begin; first < end; first += kPhiloxLanes) {
    philox_lanes(seed, offset + uint64_t(first), words);
    const int64_t from = first * per, count = std::min(std::min(end, first + kPhiloxLanes) * per, y.numel) - from;
    S* out = y.base + from;
    if (y.contiguous && Vector) {
#pragma omp simd
      for (int64_t e = 0; e < count; ++e) out[e] = draw(words + e);
    } else if (y.contiguous) {
      for (int64_t e = 0; e < count; ++e) out[e] = draw(words + e * words_each);
    } else {
      for (int64_t e = 0; e < count; ++e) y.base[y.at(from + e)] = draw(words + e * words_each);
    }
  }
}

}  // namespace

bool supports_random(const kestrel_op& op) { return kestrel::plugin_shapes::random_fits(op); }

void launch_random(const kestrel_op& op) {
  const auto p = params_of<kestrel_random_params>(op, "random");
  dispatch(op.outputs[0].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    using C = typename E::compute;
    const View<S> y = view_of<S>(op.outputs[0]);
    const uint64_t seed = p.seed;
    const uint64_t offset = p.offset + (op.num_inputs ? uint64_t(view_of<int64_t>(op.inputs[0]).base[0]) : 0);
    const double a = p.a, b = p.b;
    // Pieces are whole groups of kPhiloxLanes blocks; each group's words are computed once.
    auto per_block = [&](const char* label, int64_t per, auto vector, auto draw) {
      const int64_t blocks = (y.numel + per - 1) / per, groups = (blocks + kPhiloxLanes - 1) / kPhiloxLanes;
      parallel_chunks(label, groups, y.numel, [=](int64_t begin, int64_t end) {
        draw_blocks<decltype(vector)::value>(y, seed, offset, per, begin * kPhiloxLanes,
                                             std::min(blocks, end * kPhiloxLanes), draw);
      });
    };
    using InLanes = std::true_type;
    using Alone = std::false_type;
    switch (p.distribution) {
      case KESTREL_DISTRIBUTION_UNIFORM:
        per_block("kestrel::random_uniform", 4, InLanes{}, [=](const uint32_t* word) {
          return E::store(C(a + (b - a) * kestrel_philox_unit(*word)));
        });
        break;
      case KESTREL_DISTRIBUTION_BERNOULLI:
      {
        const uint32_t limit = kestrel_philox_bernoulli_limit(a);  // one integer compare a draw
        per_block("kestrel::random_bernoulli", 4, InLanes{}, [=](const uint32_t* word) {
          return E::store(C((*word >> 8) < limit ? 1 : 0));
        });
      }
        break;
      case KESTREL_DISTRIBUTION_NORMAL:
        per_block("kestrel::random_normal", 2, Alone{}, [=](const uint32_t* words) {
          // Box-Muller on a block's words (0, 1) or (2, 3); u1 is shifted into (0, 1] so the logarithm
          // stays finite.
          double u1 = kestrel_philox_unit(words[0]) + 1.0 / 16777216.0;
          double u2 = kestrel_philox_unit(words[1]);
          double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
          return E::store(C(a + b * z));
        });
        break;
      default: fail("unknown distribution");
    }
  });
}

}  // namespace kestrel_cpu
