// Draws from Philox4x32-10 shared by the synthetic datasets and the epoch shuffle. Only integer
// arithmetic and the Box-Muller of plugin.h, so every platform and standard library gets the same
// values (std::*_distribution differ between libstdc++, libc++ and MSVC).
#pragma once
#include <cstdint>

#include "kestrel/philox.h"

namespace kestrel::data::detail {

// Counter ranges. A synthetic stream s owns blocks [s << 48, (s + 1) << 48); stream 0 starts at offset
// 0, the same counters ops::random_ uses with offset 0. The epoch shuffles own the upper half.
inline constexpr int kStreamShift = 48;
inline constexpr uint64_t kStreamBlocks = uint64_t{1} << kStreamShift;
inline uint64_t stream_offset(uint64_t stream) { return stream << kStreamShift; }
inline uint64_t epoch_offset(uint64_t epoch) { return (uint64_t{1} << 63) | (epoch << 32); }

// Writes `count` standard normal draws exactly as KESTREL_OP_RANDOM (NORMAL, a = 0, b = 1) would at
// `offset`: element i takes words 2*(i%2), 2*(i%2)+1 of block offset + i/2.
void fill_normal(float* out, int64_t count, uint64_t seed, uint64_t offset);

// A sequence of 32-bit words: the four words of block `offset`, then of offset + 1, ...
class PhiloxWords {
 public:
  PhiloxWords(uint64_t seed, uint64_t offset) : seed_(seed), next_block_(offset) {}

  uint32_t next() {
    if (lane_ == 4) {
      block_ = kestrel_philox4x32_10(seed_, next_block_++);
      lane_ = 0;
    }
    return block_.v[lane_++];
  }

  // Uniform in [0, bound) for 1 <= bound <= 2^32, without modulo bias (Lemire's multiply-and-reject:
  // the rejected words are a pure function of the stream, so it stays deterministic).
  uint64_t below(uint64_t bound) {
    if (bound == (uint64_t{1} << 32)) return next();
    uint64_t product = uint64_t{next()} * bound;
    auto low = static_cast<uint32_t>(product);
    if (low < bound) {
      const auto threshold = static_cast<uint32_t>((uint64_t{1} << 32) % bound);
      while (low < threshold) {
        product = uint64_t{next()} * bound;
        low = static_cast<uint32_t>(product);
      }
    }
    return product >> 32;
  }

 private:
  uint64_t seed_;
  uint64_t next_block_;
  kestrel_philox_block block_{};
  int lane_ = 4;
};

}  // namespace kestrel::data::detail
