// Matrix products through cuBLAS (cublasGemmStridedBatchedEx), plus the fused linear op (GEMM, then one
// kernel for bias and activation). Unless KESTREL_CUDA_DISABLE_LT=1, both try cuBLASLt first
// (cublaslt_products.cpp): rank-2 GEMMs, and LINEAR with the bias in the product's epilogue.
//
// cuBLAS is column-major; a row-major C = A @ B is computed as the column-major C^T = B^T @ A^T, i.e. by
// swapping the operands (and m with n). Each operand is classified from its strides: row-major (strides
// (ld, 1)) is 'N' in the swapped call, column-major (strides (1, ld)), which is how the engine hands over
// transposes, is 'T'. Operands that are neither (every-other-element slices, stride-0 rows) are packed by
// the copy kernel into stream-ordered scratch memory first. A column-major C is handled by transposing the
// whole problem; any other C is computed into scratch and copied back.
#include <optional>

#include "cublas_layout.hpp"
#include "cublaslt_products.hpp"
#include "cuda_kernels.cuh"
#include "kestrel/plugin_env.hpp"

namespace kestrel_cuda {

// KESTREL_CUDA_TF32=1 lets f32 GEMMs use TF32 tensor cores (about 8x faster on an H100, 10-bit
// mantissa products). Off by default: the conformance tolerances assume full f32 products.
bool tf32_enabled() {
  static const bool enabled = kestrel::plugin_env::flag("KESTREL_CUDA_TF32");
  return enabled;
}

namespace {

using Mat = MatrixView;  // row, column and batch strides in elements
struct Problem {
  kestrel_dtype dtype;     // C's
  kestrel_dtype operands;  // A's and B's: C's, or f16/bf16 with an f32 C (ABI 1.6)
  int64_t batch, m, n, k;
  Mat a, b, c;  // a: m x k, b: k x n, c: m x n
};

Mat transposed(Mat m) {
  std::swap(m.rs, m.cs);
  return m;
}

TensorRef matrix_ref(const Mat& m, kestrel_dtype dtype, int64_t batch, int64_t rows, int64_t cols) {
  TensorRef r;
  r.base = m.base;
  r.dtype = dtype;
  r.rank = 3;
  r.shape[0] = batch, r.shape[1] = rows, r.shape[2] = cols;
  r.strides[0] = m.bs, r.strides[1] = m.rs, r.strides[2] = m.cs;
  return r;
}

template <class E>
__global__ void scale_kernel(Indexer<1> ix, typename E::storage* c, int64_t n, double beta) {
  KESTREL_GRID_STRIDE_LOOP(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    using C = typename E::compute;
    c[off[0]] = beta == 0.0 ? E::store(C(0)) : E::store(C(beta * double(E::load(c[off[0]]))));
  }
}

// C = beta * C (beta == 0 writes zeros, ignoring NaN in C): the product of an empty k.
void scale_c(kestrel_stream& s, const Problem& p, double beta) {
  TensorRef c = matrix_ref(p.c, p.dtype, p.batch, p.m, p.n);
  const int64_t n = c.numel();
  const int64_t* strides[1] = {c.strides};
  Indexer<1> ix = make_indexer<1>(c.rank, c.shape, strides);
  dispatch_float(p.dtype, [&](auto elem) {
    using E = decltype(elem);
    scale_kernel<E><<<grid_for(n), kBlock, 0, s.cuda>>>(ix, reinterpret_cast<typename E::storage*>(c.base), n, beta);
  });
  check_launch("gemm (scaling C)");
}

// Copies a batch of rows x cols matrices into contiguous scratch; a broadcast batch is packed once.
Mat pack(kestrel_stream& s, std::optional<Scratch>& holder, const Mat& m, kestrel_dtype dtype, int64_t batch,
         int64_t rows, int64_t cols) {
  const int64_t packed_batch = m.bs == 0 ? 1 : batch;
  holder.emplace(s, uint64_t(packed_batch * rows * cols) * dtype_bytes(dtype));
  const int64_t shape[3] = {packed_batch, rows, cols};
  strided_copy(s, matrix_ref(m, dtype, packed_batch, rows, cols), contiguous_ref(holder->get(), dtype, 3, shape));
  return Mat{static_cast<char*>(holder->get()), cols, 1, packed_batch > 1 ? rows * cols : 0};
}

void run_gemm(kestrel_stream& s, Problem p, double alpha, double beta) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  Classified c = classify(p.m, p.n, p.c.rs, p.c.cs);
  if (c.order == Order::col) {  // C^T = B^T A^T has a row-major C
    Problem t = p;
    t.m = p.n, t.n = p.m;
    t.a = transposed(p.b), t.b = transposed(p.a), t.c = transposed(p.c);
    return run_gemm(s, t, alpha, beta);
  }
  if (c.order == Order::none) {
    Scratch target(s, uint64_t(p.batch * p.m * p.n) * dtype_bytes(p.dtype));
    const int64_t shape[3] = {p.batch, p.m, p.n};
    TensorRef scratch = contiguous_ref(target.get(), p.dtype, 3, shape);
    TensorRef original = matrix_ref(p.c, p.dtype, p.batch, p.m, p.n);
    if (beta != 0) strided_copy(s, original, scratch);
    Problem q = p;
    q.c = Mat{static_cast<char*>(target.get()), p.n, 1, p.m * p.n};
    run_gemm(s, q, alpha, beta);
    strided_copy(s, scratch, original);
    return;
  }
  if (p.k == 0) return scale_c(s, p, beta);

  std::optional<Scratch> a_holder, b_holder;
  Classified a = classify(p.m, p.k, p.a.rs, p.a.cs);
  if (a.order == Order::none) {
    p.a = pack(s, a_holder, p.a, p.operands, p.batch, p.m, p.k);
    a = classify(p.m, p.k, p.a.rs, p.a.cs);
  }
  Classified b = classify(p.k, p.n, p.b.rs, p.b.cs);
  if (b.order == Order::none) {
    p.b = pack(s, b_holder, p.b, p.operands, p.batch, p.k, p.n);
    b = classify(p.k, p.n, p.b.rs, p.b.cs);
  }
  // A batch of one ignores the batch strides; cuBLAS wants them valid anyway.
  if (p.batch == 1) p.a.bs = p.b.bs = p.c.bs = 0;

  const cublasOperation_t op_a = a.order == Order::row ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_b = b.order == Order::row ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cudaDataType type = cuda_type(p.operands), c_type = cuda_type(p.dtype);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // 16-bit operands too: f32 accumulation
  const float alpha32 = float(alpha), beta32 = float(beta);
  const void *alpha_ptr = &alpha32, *beta_ptr = &beta32;
  if (p.dtype == KESTREL_DTYPE_F64) {
    compute = CUBLAS_COMPUTE_64F;
    alpha_ptr = &alpha;
    beta_ptr = &beta;
  } else if (p.operands == KESTREL_DTYPE_F32 && tf32_enabled()) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  // Swapped operands: cuBLAS computes the column-major (n x m) C^T = B^T (n x k) @ A^T (k x m).
  check_cublas(cublasGemmStridedBatchedEx(s.blas, op_b, op_a, int(p.n), int(p.m), int(p.k), alpha_ptr, p.b.base, type,
                                          int(b.ld), p.b.bs, p.a.base, type, int(a.ld), p.a.bs, beta_ptr, p.c.base,
                                          c_type, int(c.ld), p.c.bs, int(p.batch), compute, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
}

}  // namespace

void batched_gemm(kestrel_stream& s, kestrel_dtype operands, kestrel_dtype result, int64_t batch, int64_t m, int64_t n,
                  int64_t k, MatrixView a, MatrixView b, MatrixView c, double alpha, double beta) {
  run_gemm(s, Problem{result, operands, batch, m, n, k, a, b, c}, alpha, beta);
}

namespace {

// What cuBLAS multiplies here: the four float dtypes (16-bit ones accumulate in f32).
bool cublas_dtype(kestrel_dtype d) {
  return d == KESTREL_DTYPE_F32 || d == KESTREL_DTYPE_F64 || d == KESTREL_DTYPE_F16 || d == KESTREL_DTYPE_BF16;
}

bool fits_int(const kestrel_tensor& t) {
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] > INT32_MAX || (d > 0 && t.strides[d] > INT32_MAX)) return false;
  return true;
}

// cuBLAS takes extents and leading dimensions as int, and cannot write every batch entry to one C.
bool cublas_shapes_ok(const kestrel_tensor& a, const kestrel_tensor& b, const kestrel_tensor& c) {
  if (!fits_int(a) || !fits_int(b) || !fits_int(c)) return false;
  return !(c.rank == 3 && c.shape[0] > 1 && c.strides[0] == 0);
}

Problem problem_of(const kestrel_tensor& a, const kestrel_tensor& b, const kestrel_tensor& c) {
  const int r = c.rank, lead = r - 2;
  Problem p{};
  p.dtype = c.dtype;
  p.operands = a.dtype;
  p.batch = r == 3 ? c.shape[0] : 1;
  p.m = c.shape[lead];
  p.n = c.shape[lead + 1];
  p.k = a.shape[lead + 1];
  TensorRef ra = ref(a), rb = ref(b), rc = ref(c);
  p.a = Mat{ra.base, a.strides[lead], a.strides[lead + 1], r == 3 ? a.strides[0] : 0};
  p.b = Mat{rb.base, b.strides[lead], b.strides[lead + 1], r == 3 ? b.strides[0] : 0};
  p.c = Mat{rc.base, c.strides[lead], c.strides[lead + 1], r == 3 ? c.strides[0] : 0};
  return p;
}

// pre and y: (rows, cols) with row stride ld (>= cols, padded rows for aligned GEMMs); y may be pre
// itself. Threads step through rows (y) and columns (x) of a 2-D grid of 2-D blocks, so no element's
// position takes a division (64-bit ones per element kept this kernel at a fraction of the memory's
// bandwidth), and narrow outputs fill their blocks with several rows.
template <class E>
__global__ void linear_epilogue(typename E::storage* pre, typename E::storage* y, const typename E::storage* bias,
                                int64_t bias_stride, int64_t rows, int64_t cols, int64_t ld, int act) {
  using C = typename E::compute;
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += int64_t(gridDim.y) * blockDim.y)
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
      const int64_t i = r * ld + c;
      C v = E::load(pre[i]);
      if (bias) v += E::load(bias[c * bias_stride]);
      if (bias && y != pre) pre[i] = E::store(v);  // the pre-activation kept for backward, with its bias
      if (act == KESTREL_ACTIVATION_RELU) v = v < C(0) ? C(0) : v;  // keeps NaN
      else if (act == KESTREL_ACTIVATION_GELU) v = C(0.5) * v * (C(1) + erf(v * C(0.70710678118654752440)));
      y[i] = E::store(v);
    }
}

}  // namespace

// 16-bit operands may give an f32 C (cuBLAS's mixed-type GEMM, tensor cores with f32 output).
bool supports_gemm(const kestrel_op& op) {
  if (!kestrel::plugin_shapes::gemm_fits(op, /*f32_of_16bit=*/true, /*row_sums=*/true)) return false;
  return cublas_dtype(op.outputs[0].dtype) && cublas_shapes_ok(op.inputs[0], op.inputs[1], op.outputs[0]);
}

// With out1 (ABI 1.14), in0's rows summed over K: cuBLASLt's BGRADB epilogue in the product's own call where
// it takes the problem, else the product alone and a reduction.
void launch_gemm(kestrel_stream& s, const kestrel_op& op) {
  const auto& p = params_of<kestrel_gemm_params>(op, "gemm");
  const kestrel_tensor &a = op.inputs[0], &b = op.inputs[1], &c = op.outputs[0];
  const kestrel_tensor* sums = op.num_outputs == 2 ? &op.outputs[1] : nullptr;
  // The epilogue's sums only where they are the ABI's for sure: alpha 1 (whether cuBLASLt scales them is not
  // documented) and operands not rounded to TF32 first (KESTREL_CUDA_TF32=1).
  const bool epilogue = sums && p.alpha == 1.0 && !(a.dtype == KESTREL_DTYPE_F32 && tf32_enabled());
  if (lt_enabled() && (!sums || epilogue) && gemm_by_lt(s, a, b, c, p.alpha, p.beta, sums)) return;
  if (!(sums && lt_enabled() && gemm_by_lt(s, a, b, c, p.alpha, p.beta))) run_gemm(s, problem_of(a, b, c), p.alpha, p.beta);
  if (sums) row_sums_into(s, ref(a), ref(*sums));
}

// in0 x (M,K), in1 w (K,N), optional in2 bias (N); out0 = act(x @ w + bias), optional out1 = x @ w + bias.
// The outputs' rows are contiguous, one row stride for both (rows may be padded for aligned GEMMs).
bool supports_linear(const kestrel_op& op) {
  if (!kestrel::plugin_shapes::linear_fits(op) || !cublas_dtype(op.outputs[0].dtype)) return false;
  if (!cublas_shapes_ok(op.inputs[0], op.inputs[1], op.outputs[0])) return false;
  const kestrel_tensor& y = op.outputs[0];
  const bool rows_ok = y.strides[1] == 1 && (y.shape[0] <= 1 || y.strides[0] >= y.shape[1]);
  return rows_ok && (op.num_outputs == 1 || (op.outputs[1].strides[0] == y.strides[0] && op.outputs[1].strides[1] == 1));
}

void launch_linear(kestrel_stream& s, const kestrel_op& op) {
  const int act = params_of<kestrel_linear_params>(op, "linear").activation;
  const bool keep_pre = op.num_outputs == 2, has_bias = op.num_inputs == 3;
  const kestrel_tensor& pre_desc = keep_pre ? op.outputs[1] : op.outputs[0];
  // cuBLASLt adds the bias in the product's epilogue; the activation (and y beside the pre-activation) is
  // the kernel's below, without the bias.
  const bool by_lt = lt_enabled() && linear_by_lt(s, op.inputs[0], op.inputs[1], has_bias ? &op.inputs[2] : nullptr, pre_desc);
  if (by_lt && act == KESTREL_ACTIVATION_NONE && !keep_pre) return;
  if (!by_lt) run_gemm(s, problem_of(op.inputs[0], op.inputs[1], pre_desc), 1.0, 0.0);
  const int64_t total = numel(op.outputs[0]), cols = op.outputs[0].shape[1];
  const int64_t ld = op.outputs[0].shape[0] > 1 ? op.outputs[0].strides[0] : cols;
  if (total == 0) return;
  const TensorRef pre = ref(pre_desc), y = ref(op.outputs[0]);
  // The activation alone left (cuBLASLt added the bias) over whole rows: the unary op's kernels, which move
  // 16-byte packs, where linear_epilogue's thread per element ran the 8192-wide MLP's bias and ReLU at
  // about 0.75 TB/s on an H200 (2026-11-27). Same formulas, ReLU keeping NaN.
  if (by_lt && act != KESTREL_ACTIVATION_NONE && ld == cols)
    return unary_into(s, pre, y, act == KESTREL_ACTIVATION_RELU ? KESTREL_UNARY_RELU : KESTREL_UNARY_GELU);
  const bool add_bias = has_bias && !by_lt;
  const TensorRef bias = add_bias ? ref(op.inputs[2]) : TensorRef{};
  const int64_t bias_stride = add_bias ? op.inputs[2].strides[0] : 0;
  if (!add_bias && act == KESTREL_ACTIVATION_NONE && pre.base == y.base) return;  // y is the product already
  const int64_t rows = total / cols;
  // Blocks of kBlock threads: a warp-rounded row's width (at most kBlock) by as many rows as fit.
  const unsigned width = unsigned(std::min<int64_t>(kBlock, (cols + 31) / 32 * 32)), height = unsigned(kBlock) / width;
  const dim3 block(width, height);
  const dim3 grid(grid_for(cols, int(width)), unsigned(std::min<int64_t>((rows + height - 1) / height, 65535)));
  dispatch_float(y.dtype, [&](auto elem) {
    using E = decltype(elem);
    using S = typename E::storage;
    linear_epilogue<E><<<grid, block, 0, s.cuda>>>(reinterpret_cast<S*>(pre.base), reinterpret_cast<S*>(y.base),
                                                    add_bias ? reinterpret_cast<const S*>(bias.base) : nullptr,
                                                    bias_stride, rows, cols, ld, act);
  });
  check_launch("linear (bias and activation)");
}

}  // namespace kestrel_cuda
