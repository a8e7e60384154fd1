// gather and scatter_add along one axis (torch.gather / Tensor.scatter_add_ semantics), and the
// counter-based random draws (Philox4x32-10, bit-identical with every other backend; see plugin.h).
//
// Index checks: a launch cannot fail on data it has not read yet, so kernels skip an out-of-range index
// (gather writes 0 there) and record it in the stream's error slot; the next stream_synchronize returns
// INVALID_ARGUMENT naming the index. No out-of-bounds access ever happens.
#include <cmath>

#include "cuda_kernels.cuh"
#include "kestrel/philox.h"

namespace kestrel_cuda {

namespace {

template <int Bytes> struct Word;
template <> struct Word<1> { using type = uint8_t; };
template <> struct Word<2> { using type = uint16_t; };
template <> struct Word<4> { using type = uint32_t; };
template <> struct Word<8> { using type = unsigned long long; };

// Gather moves elements without computing on them, so it is instantiated per element size, not dtype.
// Operands of the indexer: 0 index, 1 out, 2 data with the axis stride zeroed (added from the index).
template <class W, class I>
__global__ void gather_kernel(Indexer<3> ix, const I* index, W* out, const W* data, int64_t n, int64_t axis_stride,
                              int64_t extent, DeviceErrorSlot* error) {
  KESTREL_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    long long v = static_cast<long long>(index[off[0]]);
    if (v < 0 || v >= extent) {
      report_error(error, DEVICE_ERROR_GATHER, v, extent);
      out[off[1]] = W(0);
      continue;
    }
    out[off[1]] = data[off[2] + v * axis_stride];
  }
}

__device__ __forceinline__ void atomic_accumulate(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_accumulate(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_accumulate(int32_t* p, int32_t v) { atomicAdd(reinterpret_cast<int*>(p), int(v)); }
// Two's-complement addition is the same operation signed or unsigned.
__device__ __forceinline__ void atomic_accumulate(long long* p, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// Operands: 0 index, 1 src, 2 out with the axis stride zeroed.
template <class S, class I>
__global__ void scatter_add_kernel(Indexer<3> ix, const I* index, const S* src, S* out, int64_t n, int64_t axis_stride,
                                   int64_t extent, DeviceErrorSlot* error) {
  KESTREL_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    long long v = static_cast<long long>(index[off[0]]);
    if (v < 0 || v >= extent) {
      report_error(error, DEVICE_ERROR_SCATTER, v, extent);
      continue;
    }
    atomic_accumulate(&out[off[2] + v * axis_stride], src[off[1]]);
  }
}


// Indexer over the index tensor's shape: index strides, `other` strides, target strides without the axis.
Indexer<3> index_indexer(const TensorRef& index, const TensorRef& other, const TensorRef& target, int axis) {
  int64_t target_strides[KESTREL_MAX_RANK];
  for (int d = 0; d < target.rank; ++d) target_strides[d] = d == axis ? 0 : target.strides[d];
  const int64_t* strides[3] = {index.strides, other.strides, target_strides};
  return make_indexer<3>(index.rank, index.shape, strides);
}

// ---- random ----
// Thread t computes Philox block `offset + t` once and writes the 4 (uniform, bernoulli) or 2 (normal)
// elements that use it.
template <class E>
__global__ void random_kernel(Indexer<1> ix, typename E::storage* y, int64_t n, int dist, unsigned long long seed,
                              unsigned long long offset, const int64_t* counter_base, double a, double b) {
  using C = typename E::compute;
  if (counter_base) offset += static_cast<unsigned long long>(*counter_base);  // read at run time (replays)
  const int per_block = dist == KESTREL_DISTRIBUTION_NORMAL ? 2 : 4;
  const int64_t groups = (n + per_block - 1) / per_block;
  KESTREL_GRID_STRIDE_LOOP(g, groups) {
    const kestrel_philox_block block = kestrel_philox4x32_10(seed, offset + uint64_t(g));
    for (int lane = 0; lane < per_block; ++lane) {
      const int64_t i = g * per_block + lane;
      if (i >= n) break;
      int64_t off[1];
      ix.offsets(i, off);
      double value;
      if (dist == KESTREL_DISTRIBUTION_UNIFORM) {
        value = a + (b - a) * kestrel_philox_unit(block.v[lane]);
      } else if (dist == KESTREL_DISTRIBUTION_BERNOULLI) {
        value = kestrel_philox_bernoulli(block.v[lane], a);
      } else {
        // Box-Muller in double, as the reference; u1 is shifted into (0, 1] so the logarithm stays finite.
        double u1 = kestrel_philox_unit(block.v[2 * lane]) + 1.0 / 16777216.0;
        double u2 = kestrel_philox_unit(block.v[2 * lane + 1]);
        value = a + b * (sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2));
      }
      y[off[0]] = E::store(static_cast<C>(value));
    }
  }
}

}  // namespace

// in0 data, in1 index -> out (index's shape): out[.., i, ..] = data[.., index[.., i, ..], ..]
bool supports_gather(const kestrel_op& op) { return kestrel::plugin_shapes::gather_fits(op); }

void launch_gather(kestrel_stream& s, const kestrel_op& op) {
  const int axis = params_of<kestrel_index_params>(op, "gather").axis;
  const TensorRef data = ref(op.inputs[0]), index = ref(op.inputs[1]), out = ref(op.outputs[0]);
  const int64_t n = index.numel();
  if (n == 0) return;
  const Indexer<3> ix = index_indexer(index, out, data, axis);
  const int64_t axis_stride = data.strides[axis], extent = data.shape[axis];
  dispatch_index(index.dtype, [&](auto index_type) {
    using I = decltype(index_type);
    auto go = [&](auto word) {
      using W = decltype(word);
      gather_kernel<W, I><<<grid_for(n), kBlock, 0, s.cuda>>>(ix, reinterpret_cast<const I*>(index.base),
                                                              reinterpret_cast<W*>(out.base),
                                                              reinterpret_cast<const W*>(data.base), n, axis_stride,
                                                              extent, s.error_device);
    };
    switch (dtype_bytes(data.dtype)) {
      case 1: go(Word<1>::type{}); break;
      case 2: go(Word<2>::type{}); break;
      case 4: go(Word<4>::type{}); break;
      default: go(Word<8>::type{}); break;
    }
  });
  check_launch("gather");
}

// in0 src, in1 index (same shape) -> out updated in place: out[.., index[.., i, ..], ..] += src[.., i, ..]
bool supports_scatter_add(const kestrel_op& op) {
  // Accumulation uses hardware atomics; 16-bit floats and u8 are declined (the engine composes them).
  const kestrel_dtype d = op.outputs[0].dtype;
  const bool atomic_ok = d == KESTREL_DTYPE_F32 || d == KESTREL_DTYPE_F64 || d == KESTREL_DTYPE_I32 || d == KESTREL_DTYPE_I64;
  return kestrel::plugin_shapes::scatter_add_fits(op) && atomic_ok;
}

void launch_scatter_add(kestrel_stream& s, const kestrel_op& op) {
  const int axis = params_of<kestrel_index_params>(op, "scatter_add").axis;
  const TensorRef src = ref(op.inputs[0]), index = ref(op.inputs[1]), out = ref(op.outputs[0]);
  const int64_t n = index.numel();
  if (n == 0) return;
  const Indexer<3> ix = index_indexer(index, src, out, axis);
  const int64_t axis_stride = out.strides[axis], extent = out.shape[axis];
  dispatch_index(index.dtype, [&](auto index_type) {
    using I = decltype(index_type);
    auto go = [&](auto value) {
      using S = decltype(value);
      scatter_add_kernel<S, I><<<grid_for(n), kBlock, 0, s.cuda>>>(
          ix, reinterpret_cast<const I*>(index.base), reinterpret_cast<const S*>(src.base),
          reinterpret_cast<S*>(out.base), n, axis_stride, extent, s.error_device);
    };
    switch (out.dtype) {
      case KESTREL_DTYPE_F32: go(float{}); break;
      case KESTREL_DTYPE_F64: go(double{}); break;
      case KESTREL_DTYPE_I32: go(int32_t{}); break;
      default: go((long long)0); break;
    }
  });
  check_launch("scatter_add");
}

bool supports_random(const kestrel_op& op) { return kestrel::plugin_shapes::random_fits(op); }

void launch_random(kestrel_stream& s, const kestrel_op& op) {
  const auto& p = params_of<kestrel_random_params>(op, "random");
  const TensorRef out = ref(op.outputs[0]);
  const int64_t n = out.numel();
  if (n == 0) return;
  if (p.distribution < KESTREL_DISTRIBUTION_UNIFORM || p.distribution > KESTREL_DISTRIBUTION_BERNOULLI)
    fail("random: unknown distribution");
  const int64_t* strides[1] = {out.strides};
  const Indexer<1> ix = make_indexer<1>(out.rank, out.shape, strides);
  const int per_block = p.distribution == KESTREL_DISTRIBUTION_NORMAL ? 2 : 4;
  const int64_t groups = (n + per_block - 1) / per_block;
  const int64_t* counter_base = op.num_inputs ? reinterpret_cast<const int64_t*>(ref(op.inputs[0]).base) : nullptr;
  auto go = [&](auto elem) {
    using E = decltype(elem);
    random_kernel<E><<<grid_for(groups), kBlock, 0, s.cuda>>>(ix, reinterpret_cast<typename E::storage*>(out.base), n,
                                                              int(p.distribution), p.seed, p.offset, counter_base,
                                                              p.a, p.b);
  };
  if (out.dtype == KESTREL_DTYPE_U8)
    go(U8{});
  else
    dispatch_float(out.dtype, go);
  check_launch("random");
}

}  // namespace kestrel_cuda
