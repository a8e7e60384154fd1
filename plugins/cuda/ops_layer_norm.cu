// Fused layer normalisation over the last axis (ABI 1.7), forward and backward side by side: one block
// per row for the normalisation and for the input gradient; the weight and bias gradients sum over rows
// in column tiles, split over row ranges whose partial sums a second kernel adds in a fixed order (the
// same bits every run). f32 and f64 rows are accumulated in double, f16/bf16 in f32.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cuda_kernels.cuh"

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
template <class E>
__global__ void layer_norm_rows(const typename E::storage* x, const typename E::storage* weight,
                                const typename E::storage* bias, typename E::storage* y, float* mean, float* rstd,
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
    y[row * cols + c] = E::store(typename E::compute(v));
  }
  if (threadIdx.x == 0) {
    mean[row] = float(mu);
    rstd[row] = float(inv);
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight (dy without one).
template <class E>
__global__ void layer_norm_grad_rows(const typename E::storage* dy, const typename E::storage* x, const float* mean,
                                     const float* rstd, const typename E::storage* weight, typename E::storage* dx,
                                     int64_t cols) {
  using A = Acc<E>;
  const int64_t row = blockIdx.x;
  const A mu = mean[row], inv = rstd[row];
  auto g = [&](int64_t c) { return A(E::load(dy[row * cols + c])) * (weight ? A(E::load(weight[c])) : A(1)); };
  auto xhat = [&](int64_t c) { return (A(E::load(x[row * cols + c])) - mu) * inv; };
  A sum_g = 0, sum_gx = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    sum_g += g(c);
    sum_gx += g(c) * xhat(c);
  }
  const A mean_g = block_sum(sum_g) / A(cols), mean_gx = block_sum(sum_gx) / A(cols);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    dx[row * cols + c] = E::store(typename E::compute(inv * (g(c) - mean_g - xhat(c) * mean_gx)));
}

// Partial column sums of dy * xhat and dy over rows [split * span, (split + 1) * span): partials (splits, 2, C).
template <class E>
__global__ void layer_norm_weight_partials(const typename E::storage* dy, const typename E::storage* x,
                                           const float* mean, const float* rstd, Acc<E>* partials, int64_t rows,
                                           int64_t cols, int64_t span) {
  using A = Acc<E>;
  __shared__ A dw_lanes[kTileRows][kTileColumns], db_lanes[kTileRows][kTileColumns];
  const int64_t c = int64_t(blockIdx.x) * kTileColumns + threadIdx.x, split = blockIdx.y;
  const int64_t end = (split + 1) * span < rows ? (split + 1) * span : rows;
  A dw = 0, db = 0;
  if (c < cols)
    for (int64_t r = split * span + threadIdx.y; r < end; r += kTileRows) {
      const A d = A(E::load(dy[r * cols + c]));
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

// in0 x (R,C) [, in1 weight [, in2 bias]] -> out0 y, out1 mean, out2 rstd.
void layer_norm_forward(kestrel_stream& s, const kestrel_op& op) {
  const int64_t rows = op.inputs[0].shape[0], cols = op.inputs[0].shape[1];
  const double eps = params_of<kestrel_layer_norm_params>(op, "layer_norm").eps;
  if (rows == 0) return;
  dispatch_float(op.inputs[0].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    layer_norm_rows<E><<<unsigned(rows), kRowThreads, 0, s.cuda>>>(input<S>(op, 0), input<S>(op, 1), input<S>(op, 2),
                                                                   output<S>(op, 0), output<float>(op, 1),
                                                                   output<float>(op, 2), cols, eps);
  });
  check_launch("layer_norm");
}

// in0 dy, in1 x, in2 mean, in3 rstd [, in4 weight] -> out0 dx [, out1 dweight [, out2 dbias]].
void layer_norm_backward(kestrel_stream& s, const kestrel_op& op) {
  const int64_t rows = op.inputs[1].shape[0], cols = op.inputs[1].shape[1];
  dispatch_float(op.inputs[1].dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    const S *dy = input<S>(op, 0), *x = input<S>(op, 1);
    const float *mean = input<float>(op, 2), *rstd = input<float>(op, 3);
    if (rows > 0) {
      layer_norm_grad_rows<E><<<unsigned(rows), kRowThreads, 0, s.cuda>>>(dy, x, mean, rstd, input<S>(op, 4),
                                                                          output<S>(op, 0), cols);
      check_launch("layer_norm_backward");
    }
    if (op.num_outputs < 2 || cols == 0) return;
    // Enough row ranges to fill the GPU with 32-column tiles; each range at least 64 rows.
    const int64_t tiles = (cols + kTileColumns - 1) / kTileColumns;
    const int64_t splits = std::max<int64_t>(1, std::min<int64_t>({(rows + 63) / 64, 1024 / tiles + 1, 65535}));
    const int64_t span = (rows + splits - 1) / splits;
    Scratch partials(s, uint64_t(splits * 2 * cols) * sizeof(Acc<E>));
    auto* sums = static_cast<Acc<E>*>(partials.get());
    layer_norm_weight_partials<E><<<dim3(unsigned(tiles), unsigned(splits)), dim3(kTileColumns, kTileRows), 0, s.cuda>>>(
        dy, x, mean, rstd, sums, rows, cols, span);
    layer_norm_weight_sums<E><<<grid_for(cols), kBlock, 0, s.cuda>>>(sums, output<S>(op, 1), output<S>(op, 2), splits, cols);
    check_launch("layer_norm_backward (weight and bias)");
  });
}

}  // namespace

// Rows are blocks of the grid (at most 2^31 - 1 of them).
// f32, f16 and bf16 (f64, whose statistics are f64, is composed).
bool supports_layer_norm(const kestrel_op& op) {
  if (!kestrel::plugin_shapes::layer_norm_fits(op)) return false;
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
