// The per-epoch sample order: Fisher-Yates over unbiased Philox draws, one counter range per epoch,
// so epoch e's order can be recomputed alone (resuming a run needs no generator state).
#include <fmt/format.h>

#include <numeric>
#include <utility>

#include "kestrel/data.h"
#include "kestrel/error.h"
#include "philox_draws.h"

namespace kestrel::data {

std::vector<int64_t> epoch_permutation(int64_t size, uint64_t seed, int64_t epoch) {
  // The epoch sits in counter bits 32..62 (detail::epoch_offset); draws use the low 32 bits of blocks.
  if (epoch < 0 || epoch >= (int64_t{1} << 31))
    throw InvalidArgument(fmt::format("epoch_permutation: epoch {} is outside [0, 2^31)", epoch));
  if (size < 0 || size > (int64_t{1} << 32))
    throw InvalidArgument(fmt::format("epoch_permutation: size {} is outside [0, 2^32]", size));
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  detail::PhiloxWords words(seed, detail::epoch_offset(static_cast<uint64_t>(epoch)));
  for (int64_t i = size - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(words.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace kestrel::data
