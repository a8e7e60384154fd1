// Matrix products through the BLAS library (OpenBLAS on Debian), plus the fused linear op (GEMM, bias
// and activation in one call).
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <optional>
#include <type_traits>
#include <vector>

#include "cpu_half_rows.hpp"
#include "cpu_ops.hpp"

namespace kestrel_cpu {

namespace {

// The BLAS library's Fortran entries (OpenBLAS on Debian): column-major, with leading dimensions, so
// operands whose rows are padded (a time step's slice of a whole sequence) need no packing.
extern "C" {
void sgemm_(const char* trans_a, const char* trans_b, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
            const int* ldc);
void dgemm_(const char* trans_a, const char* trans_b, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc);
}

// One logical (rows x cols) matrix of a possibly batched operand, as BLAS wants it: a row-major block
// with leading dimension `ld` (its row stride) and a transpose flag. Operands with neither unit row nor
// unit column stride get packed first.
template <class T>
struct BlasOperand {
  const T* data = nullptr;
  char trans = 'N';
  int64_t ld = 1;
  std::vector<T> packed;

  BlasOperand(const T* base, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
    if ((col_stride == 1 || cols == 1) && row_stride >= std::max<int64_t>(cols, 1)) {
      set(base, 'N', row_stride);
    } else if ((row_stride == 1 || rows == 1) && col_stride >= std::max<int64_t>(rows, 1)) {
      set(base, 'T', col_stride);
    } else {
      packed.resize(rows * cols);
      T* dst = packed.data();
      parallel_for_split("kestrel::gemm_pack", rows * cols, rows * cols, [=](int64_t i) {
        dst[i] = base[(i / cols) * row_stride + (i % cols) * col_stride];
      });
      set(packed.data(), 'N', std::max<int64_t>(cols, 1));
    }
  }
  void set(const T* d, char t, int64_t leading) {
    data = d;
    trans = t;
    ld = leading;
  }
  // The operand from column `col` on: its first `col` columns dropped.
  const T* from_column(int64_t col) const { return trans == 'N' ? data + col : data + col * ld; }
};

// Row-major C (m, n, row stride ldc) = alpha * A (m, k) @ B (k, n) + beta * C, as the column-major
// C^T = B^T A^T that BLAS computes.
template <class T>
void blas_gemm(const BlasOperand<T>& a, const BlasOperand<T>& b, int64_t m, int64_t n, int64_t k, T alpha, T beta,
               T* c, int64_t ldc, int64_t b_column = 0) {
  const int rows = int(n), cols = int(m), depth = int(k), lda = int(a.ld), ldb = int(b.ld), ld_c = int(ldc);
  if constexpr (std::is_same_v<T, float>)
    sgemm_(&b.trans, &a.trans, &rows, &cols, &depth, &alpha, b.from_column(b_column), &ldb, a.data, &lda, &beta, c,
           &ld_c);
  else
    dgemm_(&b.trans, &a.trans, &rows, &cols, &depth, &alpha, b.from_column(b_column), &ldb, a.data, &lda, &beta, c,
           &ld_c);
}

// OpenBLAS splits every product past a small size across its threads, and between calls its idle
// workers spin in sched_yield. For the thousands of small products of a recurrent step (an LSTM's
// (32, 256) x (256, 1024) per time step) that costs more than it gains: on the 2-core VM the LSTM step
// ran 1.8x faster with one OpenBLAS thread, the seeds' MLP step (products of 2^28 multiply-adds) 12%
// slower. So a product below kSmallProduct multiply-adds runs on one OpenBLAS thread, larger ones on all
// of OpenBLAS's (its own count: OPENBLAS_NUM_THREADS, else the cores).
constexpr int64_t kSmallProduct = int64_t(1) << 24;
// A small product of at least kSplitProduct multiply-adds and kSplitColumns columns is split into two
// column halves on two of the plugin's threads instead (cpu_parallel.hpp), each on one OpenBLAS thread:
// on the VM's 2 cores the LSTM's per-step (32, 256) x (256, 1024) product takes 0.58 of its time on one
// OpenBLAS thread (bench_ops gemm_lstm_step, bench/results/2026-11-25-vm-cpu-lstm-sequence-node.md;
// quarters were slower). Always halves, whatever the thread count: OpenBLAS's result for a block of
// columns may differ in the last bit from the whole product's, and results must not depend on threads.
constexpr int64_t kSplitProduct = int64_t(1) << 20;
constexpr int64_t kSplitColumns = 128;

// A split product of at most kNarrowRows rows whose B is a transposed view (an LSTM step's h W_hh^T,
// h a time step's rows of the whole sequence, far apart) multiplies a contiguous copy of A, in pieces of
// kNarrowPiece columns: OpenBLAS 0.3.21's SkylakeX kernels took the step's (32, 256) x (256, 512) half
// 1.24-1.38x faster in 32-column pieces of contiguous operands (1.27x with both cores busy), but slower
// in pieces of the strided rows, which each piece packs again; 64 rows or an untransposed B were slower
// or level (bench/results/2026-11-27-vm-cpu-lstm-step-pieces.md). Neither depends on the thread count,
// so neither do the results.
constexpr int64_t kNarrowRows = 32;
constexpr int64_t kNarrowPiece = 32;

void use_blas_threads_for(int64_t multiply_adds) {
  using SetThreads = void (*)(int);
  using GetThreads = int (*)();
  static const SetThreads set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  static const int all = [] {
    auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    return get ? get() : 1;
  }();
  static std::atomic<int> current{all};
  if (!set || all <= 1) return;  // not OpenBLAS, or one thread anyway
  const int wanted = multiply_adds < kSmallProduct || in_forked_child() ? 1 : all;
  if (current.exchange(wanted) != wanted) set(wanted);
}

// C (m, n, row stride ldc) = alpha * A @ B + beta * C on all of OpenBLAS's threads, on one, or in
// halves on two threads (see above); the first half is a multiple of 16 columns wide, whole vector registers.
template <class T>
void multiply(const BlasOperand<T>& a, const BlasOperand<T>& b, int64_t m, int64_t n, int64_t k, T alpha, T beta, T* c,
              int64_t ldc) {
  const int64_t work = m * n * k;
  const auto turn = blas_turn();
  use_blas_threads_for(work);
  if (work >= kSmallProduct || work < kSplitProduct || n < kSplitColumns)
    return blas_gemm(a, b, m, n, k, alpha, beta, c, ldc);
  const int64_t half = (n / 2 + 15) / 16 * 16;
  const bool narrow = m <= kNarrowRows && b.trans == 'T' && a.trans == 'N';
  std::optional<BlasOperand<T>> compact;  // A's rows side by side (m, k), for a narrow product
  if (narrow && a.ld != k) {
    thread_local std::vector<T> a_rows;  // kept: a recurrent layer multiplies once per time step
    a_rows.resize(size_t(m * k));
    for (int64_t i = 0; i < m; ++i) std::copy_n(a.data + i * a.ld, k, a_rows.data() + i * k);
    compact.emplace(a_rows.data(), m, k, k, 1);
  }
  const BlasOperand<T>& left = compact ? *compact : a;
  const int64_t piece_width = narrow ? kNarrowPiece : n;
  parallel_chunks("kestrel::gemm_halves", 2, work, [&](int64_t begin, int64_t end) {
    for (int64_t piece = begin; piece < end; ++piece) {
      const int64_t first = piece == 0 ? 0 : half, last = piece == 0 ? half : n;
      for (int64_t column = first; column < last; column += piece_width)
        blas_gemm(left, b, m, std::min(piece_width, last - column), k, alpha, beta, c + column, ldc, column);
    }
  });
}

}  // namespace

std::unique_lock<std::mutex> blas_turn(bool one_thread_each) {
  static std::mutex turn;
  std::unique_lock<std::mutex> mine(turn);
  if (one_thread_each) use_blas_threads_for(0);
  return mine;
}

template <class T>
void gemm_block(const MatrixBlock<T>& a, const MatrixBlock<T>& b, int64_t m, int64_t n, int64_t k, T alpha, T beta,
                T* c, int64_t ldc) {
  // A block stored transposed has unit row steps: BlasOperand reads it with BLAS's transpose flag.
  const BlasOperand<T> a_op(a.data, m, k, a.transposed ? 1 : a.ld, a.transposed ? a.ld : 1);
  const BlasOperand<T> b_op(b.data, k, n, b.transposed ? 1 : b.ld, b.transposed ? b.ld : 1);
  blas_gemm(a_op, b_op, m, n, k, alpha, beta, c, ldc);
}
template void gemm_block<float>(const MatrixBlock<float>&, const MatrixBlock<float>&, int64_t, int64_t, int64_t, float,
                                float, float*, int64_t);
template void gemm_block<double>(const MatrixBlock<double>&, const MatrixBlock<double>&, int64_t, int64_t, int64_t,
                                 double, double, double*, int64_t);

namespace {

struct GemmShape {
  int64_t batch, m, n, k;
  int64_t a_batch_stride, b_batch_stride, c_batch_stride;
  int64_t a_strides[2], b_strides[2], c_strides[2];
};

GemmShape gemm_shape(const kestrel_tensor& a, const kestrel_tensor& b, const kestrel_tensor& c) {
  const int r = c.rank, lead = r - 2;
  GemmShape s{};
  s.batch = r == 3 ? c.shape[0] : 1;
  s.a_batch_stride = r == 3 ? a.strides[0] : 0;
  s.b_batch_stride = r == 3 ? b.strides[0] : 0;
  s.c_batch_stride = r == 3 ? c.strides[0] : 0;
  s.m = c.shape[lead];
  s.n = c.shape[lead + 1];
  s.k = a.shape[lead + 1];
  for (int i = 0; i < 2; ++i) {
    s.a_strides[i] = a.strides[lead + i];
    s.b_strides[i] = b.strides[lead + i];
    s.c_strides[i] = c.strides[lead + i];
  }
  return s;
}

// C = alpha * A @ B + beta * C for every batch entry, C written in place (any strides; rows may be
// padded, other layouts go through a row-major scratch block).
template <class T>
void gemm_batched(const kestrel_tensor& a_desc, const kestrel_tensor& b_desc, const kestrel_tensor& c_desc, T alpha,
                  T beta) {
  const GemmShape s = gemm_shape(a_desc, b_desc, c_desc);
  const T* a_base = static_cast<const T*>(a_desc.buffer->data) + a_desc.offset;
  const T* b_base = static_cast<const T*>(b_desc.buffer->data) + b_desc.offset;
  T* c_base = static_cast<T*>(c_desc.buffer->data) + c_desc.offset;
  const bool c_rows = (s.c_strides[1] == 1 || s.n == 1) && (s.c_strides[0] >= s.n || s.m == 1);
  const int64_t ldc = c_rows ? std::max<int64_t>({s.c_strides[0], s.n, 1}) : std::max<int64_t>(s.n, 1);
  std::vector<T> c_scratch(c_rows ? 0 : s.m * s.n);
  for (int64_t batch = 0; batch < s.batch; ++batch) {
    T* c = c_base + batch * s.c_batch_stride;
    T* target = c_rows ? c : c_scratch.data();
    const int64_t n = s.n, rs = s.c_strides[0], cs = s.c_strides[1];
    if (!c_rows && beta != T(0))
      parallel_for_split("kestrel::gemm_gather_c", s.m * n, s.m * n,
                           [=](int64_t i) { target[i] = c[(i / n) * rs + (i % n) * cs]; });
    if (s.k == 0) {  // BLAS rejects empty operands; the product is zero
      parallel_for_split("kestrel::gemm_scale", s.m * n, s.m * n, [=](int64_t i) {
        T& out = target[(i / n) * ldc + i % n];
        out = beta == T(0) ? T(0) : beta * out;
      });
    } else if (s.m > 0 && n > 0) {
      BlasOperand<T> a(a_base + batch * s.a_batch_stride, s.m, s.k, s.a_strides[0], s.a_strides[1]);
      BlasOperand<T> b(b_base + batch * s.b_batch_stride, s.k, s.n, s.b_strides[0], s.b_strides[1]);
      multiply(a, b, s.m, n, s.k, alpha, beta, target, ldc);
    }
    if (!c_rows)
      parallel_for_split("kestrel::gemm_scatter_c", s.m * n, s.m * n,
                           [=](int64_t i) { c[(i / n) * rs + (i % n) * cs] = target[i]; });
  }
}

// 16-bit floats (mixed precision): each operand widened to a row-major f32 block, multiplied by OpenBLAS
// in f32, and the product rounded once into its 16-bit C: 16-bit storage, f32 arithmetic.
// out (rows, cols) row-major = base widened (C before a product with beta, a bias).
template <class E>
void widen(const typename E::storage* base, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
           float* out) {
  parallel_for_split("kestrel::gemm_widen", rows * cols, rows * cols,
                       [=](int64_t i) { out[i] = E::load(base[(i / cols) * row_stride + (i % cols) * col_stride]); });
}

// An operand (rows, cols) widened into out, keeping the axis its memory runs along, so a transposed weight
// stays transposed for BLAS and each run is contiguous: f16 runs through F16C where the CPU has it
// (cpu_half_rows.hpp). Returns out's (row, column) strides.
template <class E>
std::array<int64_t, 2> widen_operand(const typename E::storage* base, int64_t rows, int64_t cols, int64_t row_stride,
                                     int64_t col_stride, float* out) {
  const bool by_columns = row_stride == 1 && col_stride != 1 && cols > 1;
  const int64_t runs = by_columns ? cols : rows, length = by_columns ? rows : cols;
  const int64_t run_stride = by_columns ? col_stride : row_stride, step = by_columns ? row_stride : col_stride;
  parallel_for_split("kestrel::gemm_widen", runs, rows * cols, [=](int64_t r) {
    const typename E::storage* from = base + r * run_stride;
    float* to = out + r * length;
    if (step == 1) return widen_row<E>(from, to, length);
    for (int64_t i = 0; i < length; ++i) to[i] = E::load(from[i * step]);
  });
  return by_columns ? std::array<int64_t, 2>{1, rows} : std::array<int64_t, 2>{cols, 1};
}

// c (m, n, row-major f32) = alpha * a @ b + beta * c for 16-bit a (m, k) and b (k, n) with any strides,
// widened into the scratch blocks first. Shared by the 16-bit GEMM and linear ops.
template <class E>
void multiply_widened(const typename E::storage* a, const int64_t a_strides[2], const typename E::storage* b,
                      const int64_t b_strides[2], int64_t m, int64_t k, int64_t n, float alpha, float beta, float* c,
                      std::vector<float>& a_scratch, std::vector<float>& b_scratch) {
  if (k == 0) {  // BLAS rejects empty operands; the product is zero
    parallel_for_split("kestrel::gemm_scale", m * n, m * n,
                         [=](int64_t i) { c[i] = beta == 0.0f ? 0.0f : beta * c[i]; });
    return;
  }
  a_scratch.resize(m * k);
  b_scratch.resize(k * n);
  const auto sa = widen_operand<E>(a, m, k, a_strides[0], a_strides[1], a_scratch.data());
  const auto sb = widen_operand<E>(b, k, n, b_strides[0], b_strides[1], b_scratch.data());
  const BlasOperand<float> a_wide(a_scratch.data(), m, k, sa[0], sa[1]), b_wide(b_scratch.data(), k, n, sb[0], sb[1]);
  multiply(a_wide, b_wide, m, n, k, alpha, beta, c, n);
}

// E: the operands' 16-bit element type; O: the result's, E itself or (ABI 1.6) F32, stored unrounded.
template <class E, class O>
void gemm_widened(const kestrel_tensor& a_desc, const kestrel_tensor& b_desc, const kestrel_tensor& c_desc, float alpha,
                  float beta) {
  using S = typename E::storage;
  using T = typename O::storage;
  const GemmShape s = gemm_shape(a_desc, b_desc, c_desc);
  const S* a_base = static_cast<const S*>(a_desc.buffer->data) + a_desc.offset;
  const S* b_base = static_cast<const S*>(b_desc.buffer->data) + b_desc.offset;
  T* c_base = static_cast<T*>(c_desc.buffer->data) + c_desc.offset;
  std::vector<float> a, b, c(s.m * s.n, 0.0f);
  for (int64_t batch = 0; batch < s.batch; ++batch) {
    T* c_out = c_base + batch * s.c_batch_stride;
    const int64_t n = s.n, rs = s.c_strides[0], cs = s.c_strides[1];
    float* product = c.data();
    if (beta != 0.0f) widen<O>(c_out, s.m, n, rs, cs, product);
    multiply_widened<E>(a_base + batch * s.a_batch_stride, s.a_strides, b_base + batch * s.b_batch_stride, s.b_strides,
                        s.m, s.k, n, alpha, beta, product, a, b);
    parallel_for_split("kestrel::gemm_narrow", s.m * n, s.m * n,
                         [=](int64_t i) { c_out[(i / n) * rs + (i % n) * cs] = O::store(product[i]); });
  }
}

// A 16-bit product into its own dtype or into f32.
template <class E>
void gemm_16bit(const kestrel_op& op, float alpha, float beta) {
  if (op.outputs[0].dtype == KESTREL_DTYPE_F32)
    return gemm_widened<E, F32>(op.inputs[0], op.inputs[1], op.outputs[0], alpha, beta);
  gemm_widened<E, E>(op.inputs[0], op.inputs[1], op.outputs[0], alpha, beta);
}

// What the CPU multiplies: f32 and f64 in OpenBLAS, f16 and bf16 widened to f32 for it.
bool blas_dtype(kestrel_dtype d) {
  return d == KESTREL_DTYPE_F32 || d == KESTREL_DTYPE_F64 || d == KESTREL_DTYPE_F16 || d == KESTREL_DTYPE_BF16;
}

template <class T>
T activate(kestrel_activation act, T x) {
  switch (act) {
    case KESTREL_ACTIVATION_RELU: return x < 0 ? T(0) : x;
    case KESTREL_ACTIVATION_GELU: return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2)));
    default: return x;
  }
}

// sums (M) f32 = a (M,K) 16-bit summed over K, accumulated in double: GEMM's out1 (ABI 1.14) when it widens
// (one dtype goes through the reduction). Each thread takes a range of rows and walks K outside it, so that
// a transposed a (a weight gradient's dz^T, rows 1 apart) is read a contiguous run at a time; each row's sum
// is in K's order whatever the thread count.
template <class E>
void widening_row_sums(const kestrel_tensor& a, const kestrel_tensor& sums) {
  const View<typename E::storage> x = view_of<typename E::storage>(a);
  const View<float> y = view_of<float>(sums);
  const int64_t m = a.shape[0], k = a.shape[1], sm = a.strides[0], sk = a.strides[1];
  parallel_chunks("kestrel::gemm_row_sums", m, m * k, [=](int64_t begin, int64_t end) {
    std::vector<double> acc(size_t(end - begin), 0.0);
    for (int64_t p = 0; p < k; ++p)
      for (int64_t i = begin; i < end; ++i) acc[size_t(i - begin)] += double(E::load(x.base[i * sm + p * sk]));
    for (int64_t i = begin; i < end; ++i) y.base[y.at(i)] = float(acc[size_t(i - begin)]);
  });
}

}  // namespace

bool supports_gemm(const kestrel_op& op) {
  return kestrel::plugin_shapes::gemm_fits(op, /*f32_of_16bit=*/true, /*row_sums=*/true) && blas_dtype(op.inputs[0].dtype);
}

void launch_gemm(const kestrel_op& op) {
  const auto& p = params_of<kestrel_gemm_params>(op, "gemm");
  switch (op.inputs[0].dtype) {
    case KESTREL_DTYPE_F32:
      gemm_batched<float>(op.inputs[0], op.inputs[1], op.outputs[0], float(p.alpha), float(p.beta));
      break;
    case KESTREL_DTYPE_F16: gemm_16bit<F16>(op, float(p.alpha), float(p.beta)); break;
    case KESTREL_DTYPE_BF16: gemm_16bit<BF16>(op, float(p.alpha), float(p.beta)); break;
    default: gemm_batched<double>(op.inputs[0], op.inputs[1], op.outputs[0], p.alpha, p.beta); break;
  }
  if (op.num_outputs < 2) return;
  const kestrel_tensor &a = op.inputs[0], &sums = op.outputs[1];
  if (sums.dtype == a.dtype) {  // the reduction's own column sums (reading dz^T's rows in order), into (M, 1)
    const kestrel_reduce_params sum{KESTREL_STRUCT_SIZE(kestrel_reduce_params, fn), KESTREL_REDUCE_SUM};
    kestrel_op reduce{op.struct_size, KESTREL_OP_REDUCE, 1, 1, {a}, {sums}, &sum};
    kestrel_tensor& kept = reduce.outputs[0];
    kept.rank = 2;
    kept.shape[1] = 1, kept.strides[1] = 1;
    return launch_reduce(reduce);
  }
  dispatch(a.dtype, [&](auto elem) {
    using E = decltype(elem);
    if constexpr (std::is_same_v<E, F16> || std::is_same_v<E, BF16>) widening_row_sums<E>(a, sums);
  });
}

// in0 x (M,K), in1 w (K,N), optional in2 bias (N); out0 = act(x @ w + bias), optional out1 = x @ w + bias.
bool supports_linear(const kestrel_op& op) {
  if (!kestrel::plugin_shapes::linear_fits(op) || !blas_dtype(op.outputs[0].dtype)) return false;
  return kestrel::plugin_shapes::outputs_contiguous(op);
}

namespace {

// A thread's piece of GELU, through the vector erf (cpu_vector_math.hpp), built per vector width.
template <class T>
KESTREL_VECTOR_CLONES void gelu_piece(const T* pre, T* y, int64_t begin, int64_t end) {
  map_staged<T>(begin, end, [pre](int64_t i) { return pre[i]; }, [y](int64_t i, T v) { y[i] = v; },
                [](T x) { return activate(KESTREL_ACTIVATION_GELU, x); });
}

// y = act(pre) over contiguous memory; the activation is chosen outside the loop so the loop vectorises.
template <class T>
void activate_all(kestrel_activation act, const T* pre, T* y, int64_t count) {
  auto map = [=](auto f) {
    parallel_chunks("kestrel::linear_activation", count, count, [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = f(pre[i]);
    });
  };
  switch (act) {
    case KESTREL_ACTIVATION_RELU: return map([](T x) { return activate(KESTREL_ACTIVATION_RELU, x); });
    case KESTREL_ACTIVATION_GELU:
      return parallel_chunks("kestrel::linear_activation", count, count,
                             [=](int64_t begin, int64_t end) { gelu_piece(pre, y, begin, end); });
    default:
      if (y != pre) map([](T x) { return x; });
  }
}

// The 16-bit linear op: x and w widened, bias, product and activation in f32, each output rounded once.
template <class E>
void linear_widened(const kestrel_op& op, kestrel_activation act) {
  using S = typename E::storage;
  const kestrel_tensor &x = op.inputs[0], &w = op.inputs[1];
  const int64_t rows = x.shape[0], k = x.shape[1], n = w.shape[1];
  std::vector<float> xs, ws, pre(rows * n, 0.0f), y(rows * n);
  const bool bias = op.num_inputs == 3;
  if (bias && rows > 0) {  // into every row of the product first, as the f32 op does
    widen<E>(static_cast<const S*>(op.inputs[2].buffer->data) + op.inputs[2].offset, 1, n, 0, op.inputs[2].strides[0],
             pre.data());
    for (int64_t r = 1; r < rows; ++r) std::copy(pre.begin(), pre.begin() + n, pre.begin() + r * n);
  }
  multiply_widened<E>(static_cast<const S*>(x.buffer->data) + x.offset, x.strides,
                      static_cast<const S*>(w.buffer->data) + w.offset, w.strides, rows, k, n, 1.0f, bias ? 1.0f : 0.0f,
                      pre.data(), xs, ws);
  activate_all(act, pre.data(), y.data(), rows * n);
  auto narrow = [&](const kestrel_tensor& out, const std::vector<float>& values) {
    S* dst = static_cast<S*>(out.buffer->data) + out.offset;  // contiguous (supports_linear)
    const float* src = values.data();
    parallel_for_split("kestrel::linear_narrow", rows * n, rows * n, [=](int64_t i) { dst[i] = E::store(src[i]); });
  };
  narrow(op.outputs[0], y);
  if (op.num_outputs == 2) narrow(op.outputs[1], pre);
}

}  // namespace

void launch_linear(const kestrel_op& op) {
  const auto act = params_of<kestrel_linear_params>(op, "linear").activation;
  dispatch(op.outputs[0].dtype, [&](auto elem) {
    using E = decltype(elem);
    using T = typename E::storage;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const kestrel_tensor& pre_desc = op.num_outputs == 2 ? op.outputs[1] : op.outputs[0];
      const int64_t rows = pre_desc.shape[0], n = pre_desc.shape[1];
      T* pre = static_cast<T*>(pre_desc.buffer->data) + pre_desc.offset;
      T* y = static_cast<T*>(op.outputs[0].buffer->data) + op.outputs[0].offset;
      if (op.num_inputs == 3) {
        // The bias goes into C first and the GEMM accumulates onto it (beta = 1), which spares OpenBLAS's
        // own pass zeroing C for beta = 0 and a pass adding the bias. Where OpenBLAS splits a long K into
        // blocks, the bias now joins the sum first rather than last: the last bits may differ.
        const T* bias = static_cast<const T*>(op.inputs[2].buffer->data) + op.inputs[2].offset;
        const int64_t stride = op.inputs[2].strides[0];
        parallel_for_split("kestrel::linear_bias", rows, rows * n, [=](int64_t r) {
          for (int64_t j = 0; j < n; ++j) pre[r * n + j] = bias[j * stride];
        });
      }
      gemm_batched<T>(op.inputs[0], op.inputs[1], pre_desc, T(1), T(op.num_inputs == 3 ? 1 : 0));
      activate_all(act, pre, y, rows * n);
    } else if constexpr (std::is_same_v<E, F16> || std::is_same_v<E, BF16>) {
      linear_widened<E>(op, act);
    }
  });
}

}  // namespace kestrel_cpu
