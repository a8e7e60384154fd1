// Contiguous rows converted between f32 and f16 with the CPU's F16C instructions where it has them
// (x86-64 since 2012), else kestrel/half.h's scalar rule. Casts to and from f16 are most of what f16
// mixed precision adds to a CPU step (a third of the f16 ConvNet's, 2026-11-27); the scalar rule's
// branches do not vectorise. Both ways give the same bits: round to nearest even, overflow to infinity,
// subnormals kept, and a NaN as half.h makes it (the sign and the canonical quiet NaN).
#pragma once
#include <cstdint>
#include <type_traits>

#include "cpu_common.hpp"

namespace kestrel_cpu {

void f16_row_from_f32(const float* x, uint16_t* y, int64_t n);  // x, y: (n)
void f32_row_from_f16(const uint16_t* x, float* y, int64_t n);  // x, y: (n)

// y (n) = x (n) of a 16-bit element type E widened to f32, or rounded back: f16 through the rows above,
// bf16 (a shift each way, which the compiler vectorises) element by element.
template <class E>
void widen_row(const typename E::storage* x, float* y, int64_t n) {
  if constexpr (std::is_same_v<E, F16>) return f32_row_from_f16(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = E::load(x[i]);
}
template <class E>
void round_row(const float* x, typename E::storage* y, int64_t n) {
  if constexpr (std::is_same_v<E, F16>) return f16_row_from_f32(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = E::store(x[i]);
}

}  // namespace kestrel_cpu
