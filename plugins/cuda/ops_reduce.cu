// Reductions over any set of axes: out has in's rank, with extent 1 on each reduced axis.
//
// One block per output element (grid-stride over outputs), each thread folding a strided slice of the
// reduced elements, then a shared-memory tree. Floats accumulate in double (the H100 has the FP64
// throughput, and it keeps sums over long axes within the CPU backend's tolerances); integers in int64.
#include "kestrel/plugin_shapes.hpp"
#include "cuda_kernels.cuh"

namespace kestrel_cuda {

namespace {

constexpr int kMaxReduceBlock = 256;

// Splits the input's axes into kept ones (matching out) and reduced ones. Passed to kernels by value.
struct ReducePlan {
  int kept_rank = 0, reduced_rank = 0;
  int64_t kept_shape[KESTREL_MAX_RANK], kept_in_strides[KESTREL_MAX_RANK], kept_out_strides[KESTREL_MAX_RANK];
  int64_t reduced_shape[KESTREL_MAX_RANK], reduced_strides[KESTREL_MAX_RANK];
  int64_t reduced_count = 1;

  __device__ void kept_offsets(int64_t linear, int64_t& in_offset, int64_t& out_offset) const {
    in_offset = out_offset = 0;
    for (int d = kept_rank - 1; d >= 0; --d) {
      int64_t idx = linear % kept_shape[d];
      linear /= kept_shape[d];
      in_offset += idx * kept_in_strides[d];
      out_offset += idx * kept_out_strides[d];
    }
  }
  __device__ int64_t reduced_offset(int64_t linear) const {
    if (reduced_rank == 1) return linear * reduced_strides[0];  // the common case: one axis
    int64_t off = 0;
    for (int d = reduced_rank - 1; d >= 0; --d) {
      off += (linear % reduced_shape[d]) * reduced_strides[d];
      linear /= reduced_shape[d];
    }
    return off;
  }
};

ReducePlan make_plan(const TensorRef& in, const TensorRef& out) {
  ReducePlan p;
  for (int d = 0; d < in.rank; ++d) {
    if (out.shape[d] == 1 && in.shape[d] != 1) {
      p.reduced_shape[p.reduced_rank] = in.shape[d];
      p.reduced_strides[p.reduced_rank++] = in.strides[d];
      p.reduced_count *= in.shape[d];
    } else if (in.shape[d] != 1) {  // extent-1 axes contribute nothing to any offset
      p.kept_shape[p.kept_rank] = in.shape[d];
      p.kept_in_strides[p.kept_rank] = in.strides[d];
      p.kept_out_strides[p.kept_rank++] = out.strides[d];
    }
  }
  return p;
}

template <class E>
__global__ void reduce_kernel(ReducePlan plan, const typename E::storage* x, typename E::storage* y, int64_t outputs,
                              int fn) {
  using C = typename E::compute;
  using Acc = std::conditional_t<E::is_float, double, long long>;
  __shared__ Acc partial[kMaxReduceBlock];
  const int64_t count = plan.reduced_count;
  const bool summing = fn == KESTREL_REDUCE_SUM || fn == KESTREL_REDUCE_MEAN;
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    int64_t base, out_at;
    plan.kept_offsets(o, base, out_at);
    if (!summing && count == 0) {  // max/min of nothing: only reachable with an empty input
      if (threadIdx.x == 0) {
        if constexpr (E::is_float) y[out_at] = E::store(C(NAN));
        else y[out_at] = E::store(C(0));
      }
      continue;
    }
    // Threads without elements start from element 0, which is neutral for max/min.
    Acc acc = summing ? Acc(0) : Acc(E::load(x[base]));
    for (int64_t r = threadIdx.x; r < count; r += blockDim.x) {
      Acc v = Acc(E::load(x[base + plan.reduced_offset(r)]));
      if (summing) acc += v;
      else if (fn == KESTREL_REDUCE_MAX) acc = nan_max(acc, v);
      else acc = nan_min(acc, v);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
      if (threadIdx.x < stride) {
        Acc a = partial[threadIdx.x], b = partial[threadIdx.x + stride];
        partial[threadIdx.x] = summing ? a + b : fn == KESTREL_REDUCE_MAX ? nan_max(a, b) : nan_min(a, b);
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      Acc result = partial[0];
      if constexpr (E::is_float)  // mean is declined for integers
        if (fn == KESTREL_REDUCE_MEAN) result = count ? result / Acc(count) : Acc(NAN);
      y[out_at] = E::store(static_cast<C>(result));
    }
    __syncthreads();  // partial is reused by the next output
  }
}

// Argmax over one axis: first index wins ties; the first NaN wins outright (as torch.argmax).
template <class E>
__global__ void argmax_kernel(ReducePlan plan, const typename E::storage* x, long long* y, int64_t outputs) {
  using C = typename E::compute;
  __shared__ C best_value[kMaxReduceBlock];
  __shared__ long long best_index[kMaxReduceBlock];
  const long long none = INT64_MAX;
  const int64_t count = plan.reduced_count;
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    int64_t base, out_at;
    plan.kept_offsets(o, base, out_at);
    C best = C(0);
    long long at = none;
    for (int64_t r = threadIdx.x; r < count; r += blockDim.x) {
      C v = E::load(x[base + plan.reduced_offset(r)]);
      if (at == none || v > best || (v != v && best == best)) {
        best = v;
        at = r;
      }
      if (best != best) break;  // this thread's first NaN: later ones cannot win
    }
    best_value[threadIdx.x] = best;
    best_index[threadIdx.x] = at;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
      if (threadIdx.x < stride) {
        C av = best_value[threadIdx.x], bv = best_value[threadIdx.x + stride];
        long long ai = best_index[threadIdx.x], bi = best_index[threadIdx.x + stride];
        bool take_b;
        if (bi == none) take_b = false;
        else if (ai == none) take_b = true;
        else if (av != av || bv != bv) take_b = (bv != bv) && (av == av || bi < ai);
        else take_b = bv > av || (bv == av && bi < ai);
        if (take_b) {
          best_value[threadIdx.x] = bv;
          best_index[threadIdx.x] = bi;
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) y[out_at] = best_index[0] == none ? 0 : best_index[0];
    __syncthreads();
  }
}

int block_for(int64_t count) {
  int block = 32;
  while (block < kMaxReduceBlock && block < count) block *= 2;
  return block;
}

}  // namespace

bool supports_reduce(const kestrel_op& op) { return kestrel::plugin_shapes::reduce_fits(op); }

void launch_reduce(kestrel_stream& s, const kestrel_op& op) {
  const int fn = params_of<kestrel_reduce_params>(op, "reduce").fn;
  const TensorRef in = ref(op.inputs[0]), out = ref(op.outputs[0]);
  const int64_t outputs = out.numel();
  if (outputs == 0) return;
  const ReducePlan plan = make_plan(in, out);
  const unsigned grid = unsigned(std::min<int64_t>(outputs, 1 << 20));
  const int block = block_for(plan.reduced_count);
  dispatch(in.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    if (fn == KESTREL_REDUCE_ARGMAX)
      argmax_kernel<E><<<grid, block, 0, s.cuda>>>(plan, reinterpret_cast<const S*>(in.base),
                                                   reinterpret_cast<long long*>(out.base), outputs);
    else
      reduce_kernel<E><<<grid, block, 0, s.cuda>>>(plan, reinterpret_cast<const S*>(in.base),
                                                   reinterpret_cast<S*>(out.base), outputs, fn);
  });
  check_launch("reduce");
}

}  // namespace kestrel_cuda
