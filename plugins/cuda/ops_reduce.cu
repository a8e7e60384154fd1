// Reductions over any set of axes: out has in's rank, with extent 1 on each reduced axis.
//
// Two kernels share the work so that every warp reads neighbouring elements (reduce_along_kernel and
// reduce_across_kernel, below), and when there are too few outputs to fill the GPU (a full reduction, a
// bias gradient of a few hundred features) the reduced elements are cut into splits folded by separate
// blocks and then combined in a fixed order. Floats accumulate in double (the H100 has the FP64
// throughput, and it keeps sums over long axes within the CPU backend's tolerances); integers in int64.
#include <optional>

#include "kestrel/plugin_shapes.hpp"
#include "cuda_kernels.cuh"
#include "elementwise_packed.cuh"

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
using Acc = std::conditional_t<E::is_float, double, long long>;

template <class A>
__device__ __forceinline__ A magnitude(A v) { return v < A(0) ? -v : v; }  // a NaN stays NaN

// Whether fn adds: sums, means and SUM_SQUARES (ABI 1.17), whose folds start from 0.
__device__ __forceinline__ bool additive(int fn) {
  return fn == KESTREL_REDUCE_SUM || fn == KESTREL_REDUCE_MEAN || fn == KESTREL_REDUCE_SUM_SQUARES;
}

// An element as the folds below take it: its square for SUM_SQUARES, whose partial sums then add as a
// sum's do; itself otherwise.
template <class A>
__device__ __forceinline__ A term(int fn, A v) { return fn == KESTREL_REDUCE_SUM_SQUARES ? v * v : v; }

// MAX_ABS (ABI 1.11) folds magnitudes: taking them of a and b alike makes the same fold combine elements,
// a block's threads and the splits' partials, which are magnitudes already.
template <class A>
__device__ __forceinline__ A fold(int fn, A a, A b) {
  return additive(fn)                 ? a + b
         : fn == KESTREL_REDUCE_MAX ? nan_max(a, b)
         : fn == KESTREL_REDUCE_MIN ? nan_min(a, b)
                                    : nan_max(magnitude(a), magnitude(b));
}

// Stores an output's folded value; mean divides by the whole reduced count, whatever the split.
template <class E>
__device__ void finish(typename E::storage* y, int64_t out_at, Acc<E> acc, int fn, int64_t count) {
  using C = typename E::compute;
  if constexpr (E::is_float) {  // mean is declined for integers; max/min of nothing only has an empty input
    if (fn == KESTREL_REDUCE_MEAN) acc = count ? acc / Acc<E>(count) : Acc<E>(NAN);
    if (count == 0 && fn != KESTREL_REDUCE_SUM && fn != KESTREL_REDUCE_SUM_SQUARES) acc = Acc<E>(NAN);
  }
  y[out_at] = E::store(static_cast<C>(acc));
}

// The reduced elements of output o that split `split` of `splits` folds: a contiguous range of them.
struct SplitRange {
  int64_t begin, end;
  __device__ SplitRange(int64_t count, int splits, int split) {
    const int64_t chunk = (count + splits - 1) / splits;
    begin = min(count, split * chunk);
    end = min(count, begin + chunk);
  }
};

// "Along": a block folds its split of one output's reduced elements, neighbouring threads reading
// neighbouring elements (row sums, full reductions). With one split it writes y; otherwise its partial,
// partials[split * outputs + o] (blockIdx.y is the split).
template <class E>
__global__ void reduce_along_kernel(ReducePlan plan, const typename E::storage* x, typename E::storage* y,
                                    Acc<E>* partials, int64_t outputs, int fn) {
  __shared__ Acc<E> partial[kMaxReduceBlock];
  const bool summing = additive(fn);
  const SplitRange range(plan.reduced_count, gridDim.y, blockIdx.y);
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    int64_t base, out_at;
    plan.kept_offsets(o, base, out_at);
    // Threads without elements start from the range's first, which is neutral for max/min.
    Acc<E> acc = summing || range.begin == range.end ? Acc<E>(0)
                                                     : Acc<E>(E::load(x[base + plan.reduced_offset(range.begin)]));
    for (int64_t r = range.begin + threadIdx.x; r < range.end; r += blockDim.x)
      acc = fold(fn, acc, term(fn, Acc<E>(E::load(x[base + plan.reduced_offset(r)]))));
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
      if (threadIdx.x < stride) partial[threadIdx.x] = fold(fn, partial[threadIdx.x], partial[threadIdx.x + stride]);
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if (gridDim.y == 1) finish<E>(y, out_at, partial[0], fn, plan.reduced_count);
      else partials[blockIdx.y * outputs + o] = partial[0];
    }
    __syncthreads();  // partial is reused by the next output
  }
}

// "Across": the innermost input axis is kept (column sums, such as a bias gradient over the batch), so
// each thread folds one output and neighbouring threads read neighbouring elements. Splits as above.
template <class E>
__global__ void reduce_across_kernel(ReducePlan plan, const typename E::storage* x, typename E::storage* y,
                                     Acc<E>* partials, int64_t outputs, int fn) {
  const bool summing = additive(fn);
  const SplitRange range(plan.reduced_count, gridDim.y, blockIdx.y);
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < outputs; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t base, out_at;
    plan.kept_offsets(o, base, out_at);
    Acc<E> acc = summing || range.begin == range.end ? Acc<E>(0)
                                                     : Acc<E>(E::load(x[base + plan.reduced_offset(range.begin)]));
    for (int64_t r = range.begin; r < range.end; ++r)
      acc = fold(fn, acc, term(fn, Acc<E>(E::load(x[base + plan.reduced_offset(r)]))));
    if (gridDim.y == 1) finish<E>(y, out_at, acc, fn, plan.reduced_count);
    else partials[blockIdx.y * outputs + o] = acc;
  }
}

// Column sums (and the other folds) of a matrix x (rows, C) whose rows are ld apart, as reduce_across_kernel
// folds them, but with each thread reading K neighbouring columns as one 16-byte pack and four rows' packs
// in flight: a bias gradient's 2-byte loads, one at a time, ran at about 0.65 TB/s on an H200 (the
// 8192-wide MLP's, 2026-11-27). Each column folds its split's rows in order, as there. Needs ld a multiple
// of K and x on a 16-byte boundary. C need not be: the last pack of a row that ends inside one (GPT-2's
// 50257 logits, rows padded to 50264) is read element by element, never past the row's end.
template <class E>
__global__ void reduce_columns_packed(const typename E::storage* x, int64_t ld, int64_t rows, int64_t columns,
                                      typename E::storage* y, int64_t y_stride, Acc<E>* partials, int fn) {
  using S = typename E::storage;
  using A = Acc<E>;
  constexpr int K = pack_elements<S>();
  const bool summing = additive(fn);
  const SplitRange range(rows, gridDim.y, blockIdx.y);
  auto row_pack = [&](int64_t p, int64_t r) {
    const S* at = x + r * ld + p * K;
    if (p * K + K <= columns) return *reinterpret_cast<const Pack<S, K>*>(at);
    Pack<S, K> tail{};  // lanes past the row's end are never stored
    for (int j = 0; j < K && p * K + j < columns; ++j) tail.v[j] = at[j];
    return tail;
  };
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < (columns + K - 1) / K;
       p += int64_t(gridDim.x) * blockDim.x) {
    A acc[K];
    const Pack<S, K> first = summing || range.begin == range.end ? Pack<S, K>{} : row_pack(p, range.begin);
#pragma unroll
    for (int j = 0; j < K; ++j) acc[j] = summing || range.begin == range.end ? A(0) : A(E::load(first.v[j]));
    int64_t r = range.begin;
    for (; r + 4 <= range.end; r += 4) {
      const Pack<S, K> a = row_pack(p, r), b = row_pack(p, r + 1), c = row_pack(p, r + 2), d = row_pack(p, r + 3);
#pragma unroll
      for (int j = 0; j < K; ++j)
        acc[j] = fold(fn, fold(fn, fold(fn, fold(fn, acc[j], term(fn, A(E::load(a.v[j])))), term(fn, A(E::load(b.v[j])))),
                                term(fn, A(E::load(c.v[j])))),
                      term(fn, A(E::load(d.v[j]))));
    }
    for (; r < range.end; ++r) {
      const Pack<S, K> a = row_pack(p, r);
#pragma unroll
      for (int j = 0; j < K; ++j) acc[j] = fold(fn, acc[j], term(fn, A(E::load(a.v[j]))));
    }
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int64_t o = p * K + j;
      if (o >= columns) break;
      if (gridDim.y == 1) finish<E>(y, o * y_stride, acc[j], fn, rows);
      else partials[blockIdx.y * columns + o] = acc[j];
    }
  }
}

// The rows of a (M,K) summed, 16-bit elements into f32 sums accumulated in double as the other folds: a
// thread per row, neighbouring threads on neighbouring rows where a is a transposed view (a weight
// gradient's dz^T), as reduce_across_kernel reads; K cut into gridDim.y splits, each split's sums in
// partials (split, M), folded in split order by widening_row_sums_finish.
template <class E>
__global__ void widening_row_sums(const typename E::storage* a, int64_t m, int64_t k, int64_t row_stride,
                                  int64_t column_stride, double* partials) {
  const SplitRange range(k, gridDim.y, blockIdx.y);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < m; i += int64_t(gridDim.x) * blockDim.x) {
    double acc = 0;
    for (int64_t r = range.begin; r < range.end; ++r) acc += double(E::load(a[i * row_stride + r * column_stride]));
    partials[blockIdx.y * m + i] = acc;
  }
}

__global__ void widening_row_sums_finish(const double* partials, int splits, int64_t m, float* out, int64_t out_stride) {
  KESTREL_GRID_STRIDE_LOOP(i, m) {
    double acc = 0;
    for (int split = 0; split < splits; ++split) acc += partials[split * m + i];
    out[i * out_stride] = float(acc);
  }
}

// Folds each output's partials in split order (so results do not depend on scheduling) and stores it.
template <class E>
__global__ void reduce_partials_kernel(ReducePlan plan, const Acc<E>* partials, int splits, typename E::storage* y,
                                       int64_t outputs, int fn) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < outputs; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t base, out_at;
    plan.kept_offsets(o, base, out_at);
    Acc<E> acc = partials[o];
    for (int split = 1; split < splits; ++split) acc = fold(fn, acc, partials[split * outputs + o]);
    finish<E>(y, out_at, acc, fn, plan.reduced_count);
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
    // Whether element r (value v) is this thread's best so far; true once a NaN is: later ones cannot win.
    auto consider = [&](int64_t r, C v) {
      if (at == none || v > best || (v != v && best == best)) {
        best = v;
        at = r;
      }
      return best != best;
    };
    if (plan.reduced_rank == 1 && plan.reduced_strides[0] == 1) {
      // A contiguous row (a padded product's logits, for the train accuracy): in packs where it starts on
      // one. Each thread meets its elements in increasing order, so its first maximum and first NaN stay its
      // best without the early stop (consider keeps a NaN).
      visit_row(x + base, count, [&](int64_t r, typename E::storage v) { consider(r, E::load(v)); });
    } else {
      for (int64_t r = threadIdx.x; r < count; r += blockDim.x)
        if (consider(r, E::load(x[base + plan.reduced_offset(r)]))) break;
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

struct MinOp {
  template <class T>
  __device__ T operator()(T a, T b) const { return nan_min(a, b); }
};

template <int Fn>
__device__ __forceinline__ float extreme_fold(float acc, float v) {
  if (Fn == KESTREL_REDUCE_MIN) return nan_min(acc, v);
  return nan_max(acc, Fn == KESTREL_REDUCE_MAX_ABS ? magnitude(v) : v);
}

// Max, min or max_abs of a contiguous f32 run x[0, n) (16-byte aligned) into out[blockIdx.x]: each block
// folds a grid-stride share four floats a load. f16 loss scaling's overflow check over the flat gradients
// is this with max_abs, hundreds of millions of elements for one output: the general kernels' element
// loads and double folds left bandwidth unused. Exact in f32 and in any order, so the result is theirs.
template <int Fn>
__global__ void extreme_run_kernel(const float* x, int64_t n, float* out, float identity) {
  float acc = identity;
  const int64_t quads = n / 4, stride = int64_t(gridDim.x) * blockDim.x;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < quads; i += stride) {
    const float4 v = x4[i];
    acc = extreme_fold<Fn>(extreme_fold<Fn>(extreme_fold<Fn>(extreme_fold<Fn>(acc, v.x), v.y), v.z), v.w);
  }
  for (int64_t i = quads * 4 + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    acc = extreme_fold<Fn>(acc, x[i]);
  acc = Fn == KESTREL_REDUCE_MIN ? block_all_reduce(acc, identity, MinOp{}) : block_all_reduce(acc, identity, MaxOp{});
  if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

// The run's blocks' results in scratch, then one block folding them into y.
template <int Fn>
void fold_f32_run(kestrel_stream& s, const float* x, int64_t n, float* y, float identity) {
  const int blocks = int(std::clamp<int64_t>((n / 4 + kBlock - 1) / kBlock, 1, 1024));
  Scratch partials(s, uint64_t(blocks) * sizeof(float));
  auto* folded = static_cast<float*>(partials.get());
  extreme_run_kernel<Fn><<<blocks, kBlock, 0, s.cuda>>>(x, n, folded, identity);
  extreme_run_kernel<Fn><<<1, kBlock, 0, s.cuda>>>(folded, blocks, y, identity);
  check_launch("reduce (one f32 run)");
}

int block_for(int64_t count) {
  int block = 32;
  while (block < kMaxReduceBlock && block < count) block *= 2;
  return block;
}

}  // namespace

bool supports_reduce(const kestrel_op& op) { return kestrel::plugin_shapes::reduce_fits(op); }

void launch_reduce(kestrel_stream& s, const kestrel_op& op) {
  reduce_into(s, ref(op.inputs[0]), ref(op.outputs[0]), params_of<kestrel_reduce_params>(op, "reduce").fn);
}

void reduce_into(kestrel_stream& s, const TensorRef& in, const TensorRef& out, int fn) {
  const int64_t outputs = out.numel();
  if (outputs == 0) return;
  const ReducePlan plan = make_plan(in, out);
  const int64_t count = plan.reduced_count;
  const bool extreme = fn == KESTREL_REDUCE_MAX || fn == KESTREL_REDUCE_MIN || fn == KESTREL_REDUCE_MAX_ABS;
  if (extreme && in.dtype == KESTREL_DTYPE_F32 && outputs == 1 && plan.reduced_rank == 1 &&
      plan.reduced_strides[0] == 1 && count >= (int64_t(1) << 16) && reinterpret_cast<uintptr_t>(in.base) % 16 == 0) {
    const auto* x = reinterpret_cast<const float*>(in.base);
    auto* y = reinterpret_cast<float*>(out.base);
    if (fn == KESTREL_REDUCE_MAX) fold_f32_run<KESTREL_REDUCE_MAX>(s, x, count, y, -INFINITY);
    else if (fn == KESTREL_REDUCE_MIN) fold_f32_run<KESTREL_REDUCE_MIN>(s, x, count, y, INFINITY);
    else fold_f32_run<KESTREL_REDUCE_MAX_ABS>(s, x, count, y, 0.0f);
    return;
  }
  if (fn == KESTREL_REDUCE_ARGMAX) {
    dispatch(in.dtype, [&](auto elem) {
      using E = decltype(elem);
      argmax_kernel<E><<<unsigned(std::min<int64_t>(outputs, 1 << 20)), block_for(count), 0, s.cuda>>>(
          plan, reinterpret_cast<const typename E::storage*>(in.base), reinterpret_cast<long long*>(out.base), outputs);
    });
    check_launch("reduce");
    return;
  }
  // Across when the innermost input axis is kept, else along. Either way the reduced elements are cut
  // into splits when the outputs alone would give the GPU fewer than kTargetBlocks blocks, each split
  // long enough (min_split elements) to be worth a block or a thread.
  const bool across = plan.kept_rank > 0 && plan.kept_in_strides[plan.kept_rank - 1] == 1 && outputs >= 32;
  // A matrix's columns in 16-byte packs (bias gradients): one kept and one reduced axis, rows starting on
  // pack boundaries.
  const int64_t pack = 16 / int64_t(dtype_bytes(in.dtype));
  const bool columns = across && plan.kept_rank == 1 && plan.reduced_rank == 1 &&
                       plan.reduced_strides[0] % pack == 0 && reinterpret_cast<uintptr_t>(in.base) % 16 == 0 &&
                       !generic_elementwise();
  constexpr int64_t kTargetBlocks = 1024;
  const int block = across ? 256 : block_for(count);
  const int64_t blocks = columns ? ((outputs + pack - 1) / pack + block - 1) / block : across ? (outputs + block - 1) / block : outputs;
  const int64_t min_split = across ? 64 : 4096;
  int splits = int(std::clamp<int64_t>(std::min((kTargetBlocks + blocks - 1) / blocks, count / min_split), 1, 1024));
  // As many splits as SplitRange's chunks reach: an empty one would fold its max/min partial from 0 (4225
  // rows in 66 splits of 65 left the last empty, and a column of negative values came out 0).
  if (count > 0) {
    const int64_t chunk = (count + splits - 1) / splits;  // SplitRange's
    splits = int((count + chunk - 1) / chunk);
  }
  const dim3 grid(unsigned(std::min<int64_t>(blocks, 1 << 20)), unsigned(splits));
  dispatch(in.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    const S* x = reinterpret_cast<const S*>(in.base);
    S* y = reinterpret_cast<S*>(out.base);
    std::optional<Scratch> scratch;
    Acc<E>* partials = nullptr;
    if (splits > 1) {  // stream-ordered pool memory: freed after the second kernel, captured with it
      scratch.emplace(s, uint64_t(splits) * uint64_t(outputs) * sizeof(Acc<E>));
      partials = static_cast<Acc<E>*>(scratch->get());
    }
    if (columns)
      reduce_columns_packed<E><<<grid, block, 0, s.cuda>>>(x, plan.reduced_strides[0], count, outputs, y,
                                                           plan.kept_out_strides[0], partials, fn);
    else if (across) reduce_across_kernel<E><<<grid, block, 0, s.cuda>>>(plan, x, y, partials, outputs, fn);
    else reduce_along_kernel<E><<<grid, block, 0, s.cuda>>>(plan, x, y, partials, outputs, fn);
    check_launch("reduce");
    if (splits > 1)
      reduce_partials_kernel<E><<<unsigned(std::min<int64_t>((outputs + 255) / 256, 1 << 20)), 256, 0, s.cuda>>>(
          plan, partials, splits, y, outputs, fn);
  });
  check_launch("reduce");
}

void row_sums_into(kestrel_stream& s, const TensorRef& in, const TensorRef& out) {
  const int64_t m = in.shape[0], k = in.shape[1];
  if (m == 0) return;
  if (in.dtype == out.dtype) {  // the reduction over K, its column folds in packs where they apply
    TensorRef kept = out;
    kept.rank = 2;
    kept.shape[0] = m, kept.shape[1] = 1;
    kept.strides[0] = out.strides[0], kept.strides[1] = 1;
    return reduce_into(s, in, kept, KESTREL_REDUCE_SUM);
  }
  // Splits of at least 64 of K's columns, as many as fill about 1024 blocks with the rows' blocks (as reduce_into).
  const int64_t blocks = (m + kBlock - 1) / kBlock;
  int splits = int(std::clamp<int64_t>(std::min<int64_t>((1024 + blocks - 1) / blocks, k / 64), 1, 1024));
  if (k > 0) {  // as many splits as SplitRange's chunks reach
    const int64_t chunk = (k + splits - 1) / splits;
    splits = int((k + chunk - 1) / chunk);
  }
  Scratch partials(s, uint64_t(splits) * uint64_t(m) * sizeof(double));  // stream-ordered, freed after both kernels
  auto* sums = static_cast<double*>(partials.get());
  dispatch(in.dtype, [&](auto elem) {
    using E = decltype(elem);
    if constexpr (std::is_same_v<E, F16> || std::is_same_v<E, BF16>)
      widening_row_sums<E><<<dim3(unsigned(std::min<int64_t>(blocks, 1 << 20)), unsigned(splits)), kBlock, 0, s.cuda>>>(
          reinterpret_cast<const typename E::storage*>(in.base), m, k, in.strides[0], in.strides[1], sums);
    else
      fail("row sums: a widening sum takes f16 or bf16 rows");
  });
  check_launch("row sums");
  widening_row_sums_finish<<<grid_for(m), kBlock, 0, s.cuda>>>(sums, splits, m, reinterpret_cast<float*>(out.base),
                                                              out.strides[0]);
  check_launch("row sums");
}

}  // namespace kestrel_cuda
