// Element-wise kernels over contiguous operands: each thread moves whole 16-byte packs and does no index
// arithmetic per element. Contiguous operands are the common case (the casts at autocast's edges,
// activations and their gradients, residual sums, zero fills), and there the strided kernels'
// division per element keeps them well below the memory's bandwidth (the 8192-wide MLP's f32-to-bf16
// casts ran at about 1.6 TB/s on an H100, 2026-11-25-h100-mfu.md). The strided kernels stay for
// everything else; KESTREL_CUDA_GENERIC_ELEMENTWISE=1 uses them everywhere (and column folds and the Adam update unpacked), to compare.
#pragma once
#include <algorithm>
#include <cstdint>

#include "cuda_kernels.cuh"
#include "kestrel/plugin_env.hpp"

namespace kestrel_cuda {

// KESTREL_CUDA_GENERIC_ELEMENTWISE=1 (read once): the strided kernels everywhere, to compare.
inline bool generic_elementwise() {
  static const bool generic = kestrel::plugin_env::flag("KESTREL_CUDA_GENERIC_ELEMENTWISE");
  return generic;
}

template <class S, int K>
struct alignas(sizeof(S) * K) Pack {
  S v[K];
};

// Elements per pack: one 16-byte load or store of the widest operand.
template <class... S>
constexpr int pack_elements() {
  return int(16 / std::max({sizeof(S)...}));
}

// y[i] = f(x[i]) for i < n: whole packs first, then the n % K elements left one at a time.
template <class X, class Y, class F>
__global__ void map_packed(const X* x, Y* y, int64_t n, F f) {
  constexpr int K = pack_elements<X, Y>();
  const int64_t packs = n / K;
  KESTREL_GRID_STRIDE_LOOP(p, packs) {
    const Pack<X, K> in = reinterpret_cast<const Pack<X, K>*>(x)[p];
    Pack<Y, K> out;
#pragma unroll
    for (int j = 0; j < K; ++j) out.v[j] = f(in.v[j]);
    reinterpret_cast<Pack<Y, K>*>(y)[p] = out;
  }
  KESTREL_GRID_STRIDE_LOOP(i, n - packs * K) y[packs * K + i] = f(x[packs * K + i]);
}

// y[i] = f(a[i], b[i]) for i < n, as map_packed; b's elements may be narrower than a's (ABI 1.15's
// widening add), each operand then moving packs of K of its own.
template <class X, class Z, class Y, class F>
__global__ void zip_packed(const X* a, const Z* b, Y* y, int64_t n, F f) {
  constexpr int K = pack_elements<X, Z, Y>();
  const int64_t packs = n / K;
  KESTREL_GRID_STRIDE_LOOP(p, packs) {
    const Pack<X, K> left = reinterpret_cast<const Pack<X, K>*>(a)[p];
    const Pack<Z, K> right = reinterpret_cast<const Pack<Z, K>*>(b)[p];
    Pack<Y, K> out;
#pragma unroll
    for (int j = 0; j < K; ++j) out.v[j] = f(left.v[j], right.v[j]);
    reinterpret_cast<Pack<Y, K>*>(y)[p] = out;
  }
  KESTREL_GRID_STRIDE_LOOP(i, n - packs * K) y[packs * K + i] = f(a[packs * K + i], b[packs * K + i]);
}

// y[i] = value for i < n, as map_packed.
template <class Y>
__global__ void fill_packed(Y* y, int64_t n, Y value) {
  constexpr int K = pack_elements<Y>();
  const int64_t packs = n / K;
  Pack<Y, K> out;
#pragma unroll
  for (int j = 0; j < K; ++j) out.v[j] = value;
  KESTREL_GRID_STRIDE_LOOP(p, packs) reinterpret_cast<Pack<Y, K>*>(y)[p] = out;
  KESTREL_GRID_STRIDE_LOOP(i, n - packs * K) y[packs * K + i] = value;
}

// Calls visit(j, xr[j]) for the elements of a row of cols that this thread of the block takes, each thread
// meeting its elements in increasing j: in 16-byte packs where the row starts on a 16-byte boundary (a
// padded product's rows do; 2-byte loads one at a time ran GPT-2's 50257-wide cross-entropy at a third of
// the memory's bandwidth on an H200, 2026-11-27), the rest one at a time. Row-wise kernels (softmax,
// cross-entropy, argmax) read their rows through it.
template <class S, class Visit>
__device__ __forceinline__ void visit_row(const S* xr, int64_t cols, Visit visit) {
  constexpr int K = pack_elements<S>();
  const int64_t packs = reinterpret_cast<uintptr_t>(xr) % 16 == 0 ? cols / K : 0;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<S, K> v = reinterpret_cast<const Pack<S, K>*>(xr)[p];
#pragma unroll
    for (int k = 0; k < K; ++k) visit(p * K + k, v.v[k]);
  }
  for (int64_t j = packs * K + threadIdx.x; j < cols; j += blockDim.x) visit(j, xr[j]);
}

// Whether an element-wise op over `ix` (its operands' strides merged) may take the packed kernels: every
// operand contiguous over the whole index space and starting on a whole pack of its element type.
template <int N>
bool packable(const Indexer<N>& ix, const char* const (&bases)[N], const int (&pack_bytes)[N]) {
  if (ix.rank > 1) return false;
  for (int k = 0; k < N; ++k) {
    if (ix.rank == 1 && ix.strides[k][0] != 1) return false;
    if (reinterpret_cast<uintptr_t>(bases[k]) % uintptr_t(pack_bytes[k]) != 0) return false;
  }
  return true;
}

}  // namespace kestrel_cuda
