// Device-side helpers shared by the ops_*.cu files: element types, dtype dispatch, strided indexing and
// launch configuration. Included only by .cu files.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda_ops.hpp"

namespace kestrel_cuda {

// ---- element types: storage type, compute type, conversions (the CPU plugin's semantics) ----
using kestrel::plugin_sdk::ElemBase;
struct F32 : ElemBase<float, float, KESTREL_DTYPE_F32> {
  __device__ static float load(float s) { return s; }
  __device__ static float store(float c) { return c; }
};
struct F64 : ElemBase<double, double, KESTREL_DTYPE_F64> {
  __device__ static double load(double s) { return s; }
  __device__ static double store(double c) { return c; }
};
// 16-bit floats are stored as raw uint16_t bits (as in the ABI) and computed in f32.
struct F16 : ElemBase<uint16_t, float, KESTREL_DTYPE_F16> {
  __device__ static float load(uint16_t s) { return __half2float(__ushort_as_half(s)); }
  __device__ static uint16_t store(float c) { return __half_as_ushort(__float2half_rn(c)); }  // round to nearest even
};
struct BF16 : ElemBase<uint16_t, float, KESTREL_DTYPE_BF16> {
  __device__ static float load(uint16_t s) { return __uint_as_float(uint32_t(s) << 16); }
  // The same rounding as kestrel/half.h (round to nearest even, NaN kept quiet), written out so results
  // match the CPU backend bit for bit on every architecture.
  __device__ static uint16_t store(float c) {
    uint32_t u = __float_as_uint(c);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
};
// Integers compute in int64 and wrap when stored, like the CPU backend.
struct I32 : ElemBase<int32_t, long long, KESTREL_DTYPE_I32> {
  __device__ static long long load(int32_t s) { return s; }
  __device__ static int32_t store(long long c) { return int32_t(c); }
};
struct I64 : ElemBase<long long, long long, KESTREL_DTYPE_I64> {
  __device__ static long long load(long long s) { return s; }
  __device__ static long long store(long long c) { return c; }
};
struct U8 : ElemBase<uint8_t, long long, KESTREL_DTYPE_U8> {
  __device__ static long long load(uint8_t s) { return s; }
  __device__ static uint8_t store(long long c) { return uint8_t(c); }
};

// Calls fn(Elem{}) with the element type of a dtype (kestrel/plugin_boundary.hpp).
constexpr kestrel::plugin_sdk::Dispatch<F32, F64, F16, BF16, I32, I64, U8> dispatch{"a dtype the cuda backend knows"};
constexpr kestrel::plugin_sdk::Dispatch<F32, F64, F16, BF16> dispatch_float{"a floating-point dtype"};
// Calls fn(I{}) with the storage type of an index tensor (gather/scatter indices, labels): i64 or i32.
template <class Fn>
void dispatch_index(kestrel_dtype dtype, Fn&& fn) {
  if (dtype == KESTREL_DTYPE_I64)
    fn((long long)0);
  else
    fn(int32_t{0});
}

// NaN-propagating max/min, as torch.maximum/minimum.
template <class T>
__device__ __forceinline__ T nan_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <class T>
__device__ __forceinline__ T nan_min(T a, T b) { return (a < b || a != a) ? a : b; }

// ---- block reductions ----
struct MaxOp {
  template <class T>
  __device__ T operator()(T a, T b) const { return nan_max(a, b); }
};
struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};

// Every thread of the block gets op over the block's values v (blockDim.x a multiple of 32, at most 1024):
// within each warp by shuffles, then over the warps' results in the first warp's lanes, the lanes past
// the last warp holding `identity` (op's neutral value: 0 for sums, -infinity for maxima).
template <class T, class Op>
__device__ T block_all_reduce(T v, T identity, Op op) {
  __shared__ T partial[32];
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x / 32) ? partial[lane] : identity;
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();  // partial is reused by the next call
  return v;
}

// ---- strided indexing ----
// N operands of the same shape, each with its own strides. The host coalesces the dimensions first
// (drops extent-1 axes, merges axes that are contiguous in every operand), so contiguous tensors become
// rank 1 and transposes rank 2; the per-element cost is one division per remaining axis, done in 32 bits
// when every offset fits.
template <int N>
struct Indexer {
  int rank;
  bool narrow;  // all linear indices and offsets fit in 32 bits
  int64_t shape[KESTREL_MAX_RANK];
  int64_t strides[N][KESTREL_MAX_RANK];

  __device__ __forceinline__ void offsets(int64_t linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    if (narrow) {
      uint32_t rest = uint32_t(linear);
      for (int d = rank - 1; d >= 0; --d) {
        uint32_t extent = uint32_t(shape[d]);
        uint32_t i = rest % extent;
        rest /= extent;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += int64_t(uint32_t(i * uint32_t(strides[k][d])));
      }
    } else {
      int64_t rest = linear;
      for (int d = rank - 1; d >= 0; --d) {
        int64_t i = rest % shape[d];
        rest /= shape[d];
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
      }
    }
  }
};

// Builds an Indexer over `shape` for operands with the given strides (host side).
template <int N>
Indexer<N> make_indexer(int rank, const int64_t* shape, const int64_t* const (&strides)[N]) {
  Indexer<N> ix{};
  // Keep the axes with extent > 1, outermost first.
  int kept = 0;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 1) continue;
    ix.shape[kept] = shape[d];
    for (int k = 0; k < N; ++k) ix.strides[k][kept] = strides[k][d];
    ++kept;
  }
  // Merge an axis into the one outside it when every operand steps over it contiguously.
  int merged = 0;
  for (int d = 0; d < kept; ++d) {
    if (merged > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k)
        if (ix.strides[k][merged - 1] != ix.strides[k][d] * ix.shape[d]) mergeable = false;
      if (mergeable) {
        ix.shape[merged - 1] *= ix.shape[d];
        for (int k = 0; k < N; ++k) ix.strides[k][merged - 1] = ix.strides[k][d];
        continue;
      }
    }
    ix.shape[merged] = ix.shape[d];
    for (int k = 0; k < N; ++k) ix.strides[k][merged] = ix.strides[k][d];
    ++merged;
  }
  ix.rank = merged;
  int64_t total = 1;
  for (int d = 0; d < merged; ++d) total *= ix.shape[d];
  bool narrow = total <= INT32_MAX;
  for (int k = 0; k < N; ++k) {
    int64_t reach = 0;
    for (int d = 0; d < merged; ++d) reach += (ix.shape[d] - 1) * ix.strides[k][d];
    if (reach > INT32_MAX) narrow = false;
  }
  ix.narrow = narrow;
  return ix;
}

// Grid for a grid-stride loop over `n` items: enough blocks to fill an H100 many times over, capped so
// the block count stays well inside gridDim.x limits.
constexpr int kBlock = 256;
inline unsigned grid_for(int64_t n, int block = kBlock) {
  int64_t blocks = (n + block - 1) / block;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(blocks, 1 << 20)));
}

#define KESTREL_GRID_STRIDE_LOOP(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// Records a data error a kernel found (see DeviceErrorSlot). Plain volatile stores rather than an
// atomic: atomics on mapped host memory are not guaranteed over PCIe. If several threads race, the slot
// may mix their reports, but every value written is a real offending index of the same launch.
__device__ __forceinline__ void report_error(DeviceErrorSlot* slot, int kind, long long value, long long extent) {
  volatile DeviceErrorSlot* s = slot;
  if (!s || s->flag) return;
  s->kind = kind;
  s->value = value;
  s->extent = extent;
  __threadfence_system();
  s->flag = 1;
}

}  // namespace kestrel_cuda
