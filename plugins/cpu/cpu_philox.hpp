// Philox4x32-10 (kestrel/philox.h) for 16 consecutive blocks at once, with the same integer arithmetic
// as kestrel_philox4x32_10. Used by the random op and by attention's dropout, which draw the same bits
// for the same element.
#pragma once
#include <cstdint>

#include "kestrel/philox.h"

namespace kestrel_cpu {

constexpr int64_t kPhiloxLanes = 16;

// words[4 l + w] = word w of Philox block (first + l), for l < kPhiloxLanes: the words in the order of
// the elements they make (element 4 b + w of a uniform or Bernoulli draw takes word w of block b). With
// AVX-512 the sixteen blocks' ten rounds run in one set of registers (cpu_philox.cpp).
void philox_lanes(uint64_t seed, uint64_t first, uint32_t* words);

}  // namespace kestrel_cpu
