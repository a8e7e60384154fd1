// Fused layer normalisation over the last axis (ABI 1.7), forward and backward side by side: a warp per
// row of up to 1024 columns (a block per row beyond) for the normalisation and for the input gradient;
// the weight and bias gradients sum over rows in column tiles, split over row ranges whose partial sums
// a second kernel adds in a fixed order (the same bits every run). f32 and f64 rows are accumulated in double, f16/bf16 in f32. Since ABI 1.15 an f32
// layer norm may write 16-bit rows (y) and read a 16-bit gradient (dy): E is x's dtype, R the rows'. Since
// 1.16 backward may add dx (rounded to E) to a gradient already there, in E's compute type, as an ADD would.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cuda_kernels.cuh"
#include "kestrel/plugin_env.hpp"

namespace kestrel_cuda {

namespace {

constexpr int kRowThreads = 256;
constexpr int kTileColumns = 32, kTileRows = 8;  // the weight gradient's block: 32 columns x 8 row lanes

template <class E>
using Acc = std::conditional_t<std::is_same<typename E::storage, uint16_t>::value, float, double>;

// Every thread of the block gets the block's sum.
template <class T>
__device__ T block_sum(T v) {
  return block_all_reduce(v, T(0), SumOp{});
}

// x, y: (R, C); weight, bias: (C) or null; mean, rstd: (R).
template <class E, class R>
__global__ void layer_norm_rows(const typename E::storage* x, const typename E::storage* weight,
                                const typename E::storage* bias, typename R::storage* y, float* mean, float* rstd,
                                int64_t cols, double eps) {
  using A = Acc<E>;
  const int64_t row = blockIdx.x;
  const typename E::storage* xr = x + row * cols;
  A sum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += A(E::load(xr[c]));
  const A mu = cols ? block_sum(sum) / A(cols) : A(0);  // an empty row: mean 0, rstd 1/sqrt(eps), as the CPU's
  A squares = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const A d = A(E::load(xr[c])) - mu;
    squares += d * d;
  }
  const A inv = A(1) / sqrt((cols ? block_sum(squares) / A(cols) : A(0)) + A(eps));
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    A v = (A(E::load(xr[c])) - mu) * inv;
    if (weight) v *= A(E::load(weight[c]));
    if (bias) v += A(E::load(bias[c]));
    y[row * cols + c] = R::store(typename R::compute(typename E::compute(v)));  // as a cast of E's y would round
  }
  if (threadIdx.x == 0) {
    mean[row] = float(mu);
    rstd[row] = float(inv);
  }
}

// dx element i: `value` rounded to E, plus added[i] where there is an added gradient (ABI 1.16).
template <class E, class A>
__device__ __forceinline__ typename E::storage dx_element(A value, const typename E::storage* added, int64_t i) {
  const typename E::storage own = E::store(typename E::compute(value));
  return added ? E::store(E::load(own) + E::load(added[i])) : own;
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight (dy without one) [+ added].
template <class E, class R>
__global__ void layer_norm_grad_rows(const typename R::storage* dy, const typename E::storage* x, const float* mean,
                                     const float* rstd, const typename E::storage* weight,
                                     const typename E::storage* added, typename E::storage* dx, int64_t cols) {
  using A = Acc<E>;
  const int64_t row = blockIdx.x;
  const A mu = mean[row], inv = rstd[row];
  auto g = [&](int64_t c) { return A(R::load(dy[row * cols + c])) * (weight ? A(E::load(weight[c])) : A(1)); };
  auto xhat = [&](int64_t c) { return (A(E::load(x[row * cols + c])) - mu) * inv; };
  A sum_g = 0, sum_gx = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    sum_g += g(c);
    sum_gx += g(c) * xhat(c);
  }
  const A mean_g = block_sum(sum_g) / A(cols), mean_gx = block_sum(sum_gx) / A(cols);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    dx[row * cols + c] = dx_element<E>(inv * (g(c) - mean_g - xhat(c) * mean_gx), added, row * cols + c);
}

// ---- rows of at most 32 * K columns: a warp each ----
// Launch bounds of two 256-thread blocks an SM cap registers at 128: ptxas (CUDA 13, sm_90) fits the f32
// backward at K = 24 (GPT-2's 768) without spilling, and spills some 20 bytes at K = 32; without the
// bound it took 159-168 registers, one block an SM.
// One block per row (above) leaves most of a GPU's memory bandwidth unused on rows of a few hundred
// columns, such as GPT-2's 768: each thread meets three elements per pass, one after another, and the
// block syncs twice per sum. Here a warp holds its row in registers (K elements per lane, all loads in
// flight at once), sums with shuffles only, and reads the row from memory once per pass's need.

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

constexpr int kWarpRowsPerBlock = kRowThreads / 32;

// As layer_norm_rows, a row per warp; cols <= 32 * K.
template <class E, class R, int K>
__global__ void __launch_bounds__(kRowThreads, 2) layer_norm_warp_rows(const typename E::storage* x, const typename E::storage* weight,
                                     const typename E::storage* bias, typename R::storage* y, float* mean, float* rstd,
                                     int64_t rows, int64_t cols, double eps) {
  using A = Acc<E>;
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const typename E::storage* xr = x + row * cols;
  typename E::compute v[K];  // the row as loaded (exact in the compute type); sums in A
  A sum = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = lane + 32 * k;
    v[k] = c < cols ? E::load(xr[c]) : typename E::compute(0);
    sum += A(v[k]);
  }
  const A mu = cols ? warp_sum(sum) / A(cols) : A(0);  // an empty row: mean 0, rstd 1/sqrt(eps), as above
  A squares = 0;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (lane + 32 * k < cols) squares += (A(v[k]) - mu) * (A(v[k]) - mu);
  const A inv = A(1) / sqrt((cols ? warp_sum(squares) / A(cols) : A(0)) + A(eps));
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = lane + 32 * k;
    if (c >= cols) continue;
    A out = (A(v[k]) - mu) * inv;
    if (weight) out *= A(E::load(weight[c]));
    if (bias) out += A(E::load(bias[c]));
    y[row * cols + c] = R::store(typename R::compute(typename E::compute(out)));
  }
  if (lane == 0) {
    mean[row] = float(mu);
    rstd[row] = float(inv);
  }
}

// As layer_norm_grad_rows, a row per warp; cols <= 32 * K. The row's dy and x stay in registers between
// the sums and the write.
template <class E, class R, int K>
__global__ void __launch_bounds__(kRowThreads, 2) layer_norm_warp_grad_rows(const typename R::storage* dy, const typename E::storage* x, const float* mean,
                                          const float* rstd, const typename E::storage* weight,
                                          const typename E::storage* added, typename E::storage* dx, int64_t rows,
                                          int64_t cols) {
  using A = Acc<E>;
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const A mu = mean[row], inv = rstd[row];
  // dy and x as loaded (exact in the compute types); g and xhat in A from them in both passes.
  typename R::compute d[K];
  typename E::compute xv[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = lane + 32 * k;
    const bool in = c < cols;
    d[k] = in ? R::load(dy[row * cols + c]) : typename R::compute(0);
    xv[k] = in ? E::load(x[row * cols + c]) : typename E::compute(0);
  }
  // The weight is read again in the second pass (from cache) rather than kept: registers bound how many
  // warps an SM runs.
  auto g = [&](int k, int64_t c) { return A(d[k]) * (weight ? A(E::load(weight[c])) : A(1)); };
  auto xhat = [&](int k) { return (A(xv[k]) - mu) * inv; };
  A sum_g = 0, sum_gx = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = lane + 32 * k;
    if (c >= cols) continue;
    sum_g += g(k, c);
    sum_gx += g(k, c) * xhat(k);
  }
  const A mean_g = warp_sum(sum_g) / A(cols), mean_gx = warp_sum(sum_gx) / A(cols);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = lane + 32 * k;
    if (c < cols) dx[row * cols + c] = dx_element<E>(inv * (g(k, c) - mean_g - xhat(k) * mean_gx), added, row * cols + c);
  }
}

// Runs body(std::integral_constant<int, K>) with the fewest elements per lane K (4, 8, 16, 24 or 32)
// that holds `cols` (24: GPT-2's 768 exactly); false (nothing run) for wider rows, which take the
// block-per-row kernels.
template <class Body>
bool with_warp_width(int64_t cols, Body body) {
  if (cols <= 32 * 4) return body(std::integral_constant<int, 4>{}), true;
  if (cols <= 32 * 8) return body(std::integral_constant<int, 8>{}), true;
  if (cols <= 32 * 16) return body(std::integral_constant<int, 16>{}), true;
  if (cols <= 32 * 24) return body(std::integral_constant<int, 24>{}), true;
  if (cols <= 32 * 32) return body(std::integral_constant<int, 32>{}), true;
  return false;
}

// Partial column sums of dy * xhat and dy over rows [split * span, (split + 1) * span): partials (splits, 2, C).
template <class E, class R>
__global__ void layer_norm_weight_partials(const typename R::storage* dy, const typename E::storage* x,
                                           const float* mean, const float* rstd, Acc<E>* partials, int64_t rows,
                                           int64_t cols, int64_t span) {
  using A = Acc<E>;
  __shared__ A dw_lanes[kTileRows][kTileColumns], db_lanes[kTileRows][kTileColumns];
  const int64_t c = int64_t(blockIdx.x) * kTileColumns + threadIdx.x, split = blockIdx.y;
  const int64_t end = (split + 1) * span < rows ? (split + 1) * span : rows;
  A dw = 0, db = 0;
  if (c < cols)
    for (int64_t r = split * span + threadIdx.y; r < end; r += kTileRows) {
      const A d = A(R::load(dy[r * cols + c]));
      dw += d * (A(E::load(x[r * cols + c])) - A(mean[r])) * A(rstd[r]);
      db += d;
    }
  dw_lanes[threadIdx.y][threadIdx.x] = dw;
  db_lanes[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int lane = 1; lane < kTileRows; ++lane) {
    dw += dw_lanes[lane][threadIdx.x];
    db += db_lanes[lane][threadIdx.x];
  }
  partials[(split * 2) * cols + c] = dw;
  partials[(split * 2 + 1) * cols + c] = db;
}

template <class E>
__global__ void layer_norm_weight_sums(const Acc<E>* partials, typename E::storage* dweight,
                                       typename E::storage* dbias, int64_t splits, int64_t cols) {
  KESTREL_GRID_STRIDE_LOOP(c, cols) {
    Acc<E> dw = 0, db = 0;
    for (int64_t s = 0; s < splits; ++s) {
      dw += partials[(s * 2) * cols + c];
      db += partials[(s * 2 + 1) * cols + c];
    }
    dweight[c] = E::store(typename E::compute(dw));
    if (dbias) dbias[c] = E::store(typename E::compute(db));
  }
}

template <class S>
const S* input(const kestrel_op& op, int i) { return i < op.num_inputs ? reinterpret_cast<const S*>(ref(op.inputs[i]).base) : nullptr; }
template <class S>
S* output(const kestrel_op& op, int i) { return i < op.num_outputs ? reinterpret_cast<S*>(ref(op.outputs[i]).base) : nullptr; }

// KESTREL_CUDA_LAYER_NORM_BLOCKS=1 (read once): every row on a block of its own, as before the warp
// kernels, to compare.
bool block_rows() {
  static const bool blocks = kestrel::plugin_env::flag("KESTREL_CUDA_LAYER_NORM_BLOCKS");
  return blocks;
}

// Runs body(E{}, R{}) for x's dtype E and the rows' dtype R (y's or dy's): E's own, or f16/bf16 beside f32.
// f64, whose statistics would be f64, is composed (supports_layer_norm declines it): no kernel is built for it.
template <class Body>
void with_row_dtypes(kestrel_dtype x, kestrel_dtype rows, Body body) {
  if (x == KESTREL_DTYPE_F32 && rows == KESTREL_DTYPE_F16) return body(F32{}, F16{});
  if (x == KESTREL_DTYPE_F32 && rows == KESTREL_DTYPE_BF16) return body(F32{}, BF16{});
  if (x == KESTREL_DTYPE_F32) return body(F32{}, F32{});
  if (x == KESTREL_DTYPE_F16) return body(F16{}, F16{});
  if (x == KESTREL_DTYPE_BF16) return body(BF16{}, BF16{});
  fail("layer_norm: the cuda backend normalises f32, f16 and bf16 rows", KESTREL_STATUS_UNSUPPORTED);
}

// in0 x (R,C) [, in1 weight [, in2 bias]] -> out0 y, out1 mean, out2 rstd.
void layer_norm_forward(kestrel_stream& s, const kestrel_op& op) {
  const int64_t rows = op.inputs[0].shape[0], cols = op.inputs[0].shape[1];
  const double eps = params_of<kestrel_layer_norm_params>(op, "layer_norm").eps;
  if (rows == 0) return;
  with_row_dtypes(op.inputs[0].dtype, op.outputs[0].dtype, [&](auto elem, auto row) {
    using E = decltype(elem);
    using R = decltype(row);
    using S = typename E::storage;
    const S *x = input<S>(op, 0), *weight = input<S>(op, 1), *bias = input<S>(op, 2);
    auto* y = output<typename R::storage>(op, 0);
    float *mean = output<float>(op, 1), *rstd = output<float>(op, 2);
    const bool warps = !block_rows() && with_warp_width(cols, [&](auto width) {
      const unsigned blocks = unsigned((rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
      layer_norm_warp_rows<E, R, decltype(width)::value>
          <<<blocks, kRowThreads, 0, s.cuda>>>(x, weight, bias, y, mean, rstd, rows, cols, eps);
    });
    if (!warps) layer_norm_rows<E, R><<<unsigned(rows), kRowThreads, 0, s.cuda>>>(x, weight, bias, y, mean, rstd, cols, eps);
  });
  check_launch("layer_norm");
}

// in0 dy, in1 x, in2 mean, in3 rstd [, in4 weight] [, the gradient dx adds to] -> out0 dx [, out1 dweight
// [, out2 dbias]].
void layer_norm_backward(kestrel_stream& s, const kestrel_op& op) {
  const int64_t rows = op.inputs[1].shape[0], cols = op.inputs[1].shape[1];
  with_row_dtypes(op.inputs[1].dtype, op.inputs[0].dtype, [&](auto elem, auto row) {
    using E = decltype(elem);
    using R = decltype(row);
    using S = typename E::storage;
    const typename R::storage* dy = input<typename R::storage>(op, 0);
    const S* x = input<S>(op, 1);
    const float *mean = input<float>(op, 2), *rstd = input<float>(op, 3);
    if (rows > 0) {
      const S* weight = op.num_outputs > 1 ? input<S>(op, 4) : nullptr;  // (C), with dweight
      // (R, C), the last input where there is one
      const S* added = kestrel::plugin_shapes::layer_norm_added_gradient(op) ? input<S>(op, op.num_inputs - 1) : nullptr;
      S* dx = output<S>(op, 0);
      const bool warps = !block_rows() && with_warp_width(cols, [&](auto width) {
        const unsigned blocks = unsigned((rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
        layer_norm_warp_grad_rows<E, R, decltype(width)::value>
            <<<blocks, kRowThreads, 0, s.cuda>>>(dy, x, mean, rstd, weight, added, dx, rows, cols);
      });
      if (!warps)
        layer_norm_grad_rows<E, R><<<unsigned(rows), kRowThreads, 0, s.cuda>>>(dy, x, mean, rstd, weight, added, dx, cols);
      check_launch("layer_norm_backward");
    }
    if (op.num_outputs < 2 || cols == 0) return;
    // Enough row ranges to fill the GPU with 32-column tiles; each range at least 64 rows.
    const int64_t tiles = (cols + kTileColumns - 1) / kTileColumns;
    const int64_t splits = std::max<int64_t>(1, std::min<int64_t>({(rows + 63) / 64, 1024 / tiles + 1, 65535}));
    const int64_t span = (rows + splits - 1) / splits;
    Scratch partials(s, uint64_t(splits * 2 * cols) * sizeof(Acc<E>));
    auto* sums = static_cast<Acc<E>*>(partials.get());
    layer_norm_weight_partials<E, R><<<dim3(unsigned(tiles), unsigned(splits)), dim3(kTileColumns, kTileRows), 0, s.cuda>>>(
        dy, x, mean, rstd, sums, rows, cols, span);
    layer_norm_weight_sums<E><<<grid_for(cols), kBlock, 0, s.cuda>>>(sums, output<S>(op, 1), output<S>(op, 2), splits, cols);
    check_launch("layer_norm_backward (weight and bias)");
  });
}

}  // namespace

// Rows are blocks of the grid (at most 2^31 - 1 of them).
// f32, f16 and bf16 (f64, whose statistics are f64, is composed).
bool supports_layer_norm(const kestrel_op& op) {
  if (!kestrel::plugin_shapes::layer_norm_fits(op, /*lowered=*/true, /*adds=*/true)) return false;
  const kestrel_tensor& x = op.inputs[op.kind == KESTREL_OP_LAYER_NORM_BACKWARD ? 1 : 0];
  return x.dtype != KESTREL_DTYPE_F64 && x.shape[0] <= INT32_MAX;
}

void launch_layer_norm(kestrel_stream& s, const kestrel_op& op) {
  if (op.kind == KESTREL_OP_LAYER_NORM_BACKWARD)
    layer_norm_backward(s, op);
  else
    layer_norm_forward(s, op);
}

}  // namespace kestrel_cuda
