// Transcendental functions (exp, log, tanh, erf) vectorised through glibc's vector math library, libmvec.
// Scalar libm calls cost 5-10 ns an element on this plugin's hot paths (GELU and its gradient, softmax,
// the LSTM gates); libmvec computes 4, 8 or 16 at once. glibc's math.h declares its functions callable
// from vector code only under -ffast-math, which would also drop the NaN and infinity rules the kernels
// keep, so they are declared here; GCC then calls the vector versions in loops marked `omp simd`
// (-fopenmp-simd, no OpenMP runtime), the width of each KESTREL_VECTOR_CLONES clone.
//
// A vector version may round differently from the scalar one, and a loop the compiler vectorises leaves
// its first and last few elements to scalar calls, so which version an element met would depend on
// where a thread's piece started. map_staged therefore copies elements into an aligned block padded to a
// multiple of kVectorPad and runs f over the whole block with a count only known at run time: every
// element goes through the vector loop, so on one machine it gets the same bits whatever the thread
// count. (A block of constant size was unrolled completely by GCC 12 and left to scalar calls in part.)
// Machines of different vector widths (AVX2, AVX-512) may differ in the last bits of these functions.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define KESTREL_SIMD_MATH __attribute__((simd("notinbranch")))
extern "C" {
KESTREL_SIMD_MATH float expf(float) noexcept;
KESTREL_SIMD_MATH double exp(double) noexcept;
KESTREL_SIMD_MATH float logf(float) noexcept;
KESTREL_SIMD_MATH double log(double) noexcept;
KESTREL_SIMD_MATH float tanhf(float) noexcept;
KESTREL_SIMD_MATH double tanh(double) noexcept;
KESTREL_SIMD_MATH float erff(float) noexcept;
KESTREL_SIMD_MATH double erf(double) noexcept;
}
#endif

namespace kestrel_cpu {

// Elements staged at once, and the multiple blocks are padded to: a whole number of AVX-512 registers,
// four times over, so no clone's vector loop leaves a remainder.
constexpr int64_t kVectorStage = 256;
constexpr int64_t kVectorPad = 64;

// values[j] = f(values[j]) for j < count, a multiple of kVectorPad; values 64-byte aligned.
template <class T, class F>
[[gnu::always_inline]] inline void map_block(T* values, int64_t count, const F& f) {
#pragma omp simd aligned(values : 64)
  for (int64_t j = 0; j < count; ++j) values[j] = f(values[j]);
}

// store(i, f(load(i))) for i in [begin, end), computed in T a block at a time. Call it from a function
// built with KESTREL_VECTOR_CLONES (it is always inlined there), or the blocks run 4 lanes wide whatever
// the CPU. f should be branch-free (clamp in load instead).
template <class T, class Load, class Store, class F>
[[gnu::always_inline]] inline void map_staged(int64_t begin, int64_t end, const Load& load, const Store& store,
                                              const F& f) {
  alignas(64) T block[kVectorStage];
  for (int64_t i = begin; i < end; i += kVectorStage) {
    const int64_t m = std::min(kVectorStage, end - i), padded = (m + kVectorPad - 1) / kVectorPad * kVectorPad;
    for (int64_t j = 0; j < m; ++j) block[j] = load(i + j);
    std::fill(block + m, block + padded, T(0));
    map_block(block, padded, f);
    for (int64_t j = 0; j < m; ++j) store(i + j, block[j]);
  }
}

}  // namespace kestrel_cpu
