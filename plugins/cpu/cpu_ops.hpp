// The CPU plugin's op families. Each has `supports_*` (checks dtypes, ranks and shapes; never throws)
// and `launch_*` (runs it; called only after supports_* said yes; throws Failure on bad data).
#pragma once
#include <mutex>

#include "cpu_common.hpp"
#include "cpu_parallel.hpp"
#include "cpu_vector_math.hpp"

// Hot loops are built once per x86 vector width and the widest the CPU runs is picked when the plugin
// loads (GCC/Clang target_clones): a portable build would otherwise run them 4 floats at a time. The
// plugin is compiled with -ffp-contract=off, so every clone gives the same bits (no fused multiply-adds),
// and with -fno-math-errno, so std::sqrt vectorises.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KESTREL_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KESTREL_VECTOR_CLONES
#endif

namespace kestrel_cpu {

bool supports_fill(const kestrel_op& op);
void launch_fill(const kestrel_op& op);
bool supports_copy(const kestrel_op& op);
void launch_copy(const kestrel_op& op);
bool supports_unary(const kestrel_op& op);
void launch_unary(const kestrel_op& op);
bool supports_binary(const kestrel_op& op);
void launch_binary(const kestrel_op& op);
bool supports_reduce(const kestrel_op& op);
void launch_reduce(const kestrel_op& op);
bool supports_gemm(const kestrel_op& op);
void launch_gemm(const kestrel_op& op);
bool supports_linear(const kestrel_op& op);
void launch_linear(const kestrel_op& op);
bool supports_gather(const kestrel_op& op);
void launch_gather(const kestrel_op& op);
bool supports_scatter_add(const kestrel_op& op);
void launch_scatter_add(const kestrel_op& op);
bool supports_random(const kestrel_op& op);
void launch_random(const kestrel_op& op);
bool supports_window(const kestrel_op& op);  // im2col, col2im, pool2d, pool2d_backward
void launch_window(const kestrel_op& op);
bool supports_softmax(const kestrel_op& op);
void launch_softmax(const kestrel_op& op);
bool supports_softmax_cross_entropy(const kestrel_op& op);
void launch_softmax_cross_entropy(const kestrel_op& op);
bool supports_optimizer(const kestrel_op& op);  // adam_update, sgd_update
void launch_optimizer(const kestrel_op& op);
bool supports_attention(const kestrel_op& op);  // attention, attention_backward (ABI 1.7)
void launch_attention(const kestrel_op& op);
bool supports_layer_norm(const kestrel_op& op);  // layer_norm, layer_norm_backward (ABI 1.7)
void launch_layer_norm(const kestrel_op& op);
bool supports_lstm_cell(const kestrel_op& op);  // lstm_cell, lstm_cell_backward (ABI 1.7)
void launch_lstm_cell(const kestrel_op& op);
bool supports_gru_cell(const kestrel_op& op);  // gru_cell, gru_cell_backward (ABI 1.9)
void launch_gru_cell(const kestrel_op& op);
bool supports_conv(const kestrel_op& op);  // conv2d, conv2d_backward_data, conv2d_backward_filter (ABI 1.10)
void launch_conv(const kestrel_op& op);

// Products inside other kernels' loops (ops_gemm.cpp). A row-major (rows, cols) matrix with row stride
// ld, or, when transposed, the (cols, rows) matrix so stored read as its transpose.
template <class T>
struct MatrixBlock {
  const T* data;
  int64_t ld;
  bool transposed = false;
};
// C (m, n, row stride ldc) = alpha * A (m, k) @ B (k, n) + beta * C, one BLAS call from the calling
// thread. Its caller holds blas_turn for the loop that makes such products.
template <class T>
void gemm_block(const MatrixBlock<T>& a, const MatrixBlock<T>& b, int64_t m, int64_t n, int64_t k, T alpha, T beta,
                T* c, int64_t ldc);
// The process's turn at BLAS, held for one product or one loop of products. OpenBLAS's OpenMP build picks
// the buffers a call works in by the caller's OpenMP thread number, which is 0 on every thread outside a
// parallel region: two devices of one process (a thread each) multiplying at once shared them and
// corrupted each other's products (two-device runs that differed from run to run under load). One_thread_each:
// the loop's products, made on several of the plugin's threads at once, each run on one BLAS thread.
[[nodiscard]] std::unique_lock<std::mutex> blas_turn(bool one_thread_each = false);

// Elementwise helpers used by several families: out[i] = f(in[i]) over equal shapes, any strides.
// Strided operands are walked row by row (the last axis), so the index arithmetic is paid once per row
// rather than once per element.
// Merges neighbouring axes that every view walks as one (stride[d] == stride[d + 1] * shape[d + 1]) and
// drops axes of extent 1. The views keep their row-major element order, but strided loops then run over
// long rows: a (N, C, H, W) permutation has rows of H * W elements instead of W.
template <class First, class... Rest>
void coalesce(First& first, Rest&... rest) {
  int rank = 0;
  for (int d = 0; d < first.rank; ++d) {
    if (first.shape[d] == 1) continue;
    auto mergeable = [&](const auto& v) { return v.strides[rank - 1] == v.strides[d] * v.shape[d]; };
    const bool merge = rank > 0 && mergeable(first) && (mergeable(rest) && ...);
    auto apply = [&](auto& v) {
      if (merge) {
        v.shape[rank - 1] *= v.shape[d];
        v.strides[rank - 1] = v.strides[d];
      } else {
        v.shape[rank] = v.shape[d];
        v.strides[rank] = v.strides[d];
      }
    };
    apply(first);
    (apply(rest), ...);
    if (!merge) ++rank;
  }
  first.rank = rank;
  ((rest.rank = rank), ...);
}

inline int64_t inner_extent(int rank, const int64_t* shape) { return rank ? shape[rank - 1] : 1; }
inline int64_t inner_stride(int rank, const int64_t* strides) { return rank ? strides[rank - 1] : 0; }

template <class E, class F>
void map_unary(const kestrel_tensor& in, const kestrel_tensor& out, F f, const char* label) {
  using S = typename E::storage;
  View<S> x = view_of<S>(in), y = view_of<S>(out);
  if (x.contiguous && y.contiguous) {
    parallel_chunks(label, y.numel, y.numel, [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y.base[i] = E::store(f(E::load(x.base[i])));
    });
    return;
  }
  coalesce(y, x);
  const int64_t inner = inner_extent(y.rank, y.shape), rows = inner ? y.numel / inner : 0;
  const int64_t xs = inner_stride(x.rank, x.strides), ys = inner_stride(y.rank, y.strides);
  parallel_for_split(label, rows, y.numel, [=](int64_t r) {
    const S* xr = x.base + x.at(r * inner);
    S* yr = y.base + y.at(r * inner);
    for (int64_t j = 0; j < inner; ++j) yr[j * ys] = E::store(f(E::load(xr[j * xs])));
  });
}

// One thread's piece of map_unary_staged, built per vector width.
template <class E, class F>
KESTREL_VECTOR_CLONES void unary_piece_staged(const View<typename E::storage>& x, const View<typename E::storage>& y,
                                              int64_t begin, int64_t end, const F& f) {
  using C = typename E::compute;
  if (x.contiguous && y.contiguous)
    map_staged<C>(begin, end, [&](int64_t i) { return E::load(x.base[i]); },
                  [&](int64_t i, C v) { y.base[i] = E::store(v); }, f);
  else
    map_staged<C>(begin, end, [&](int64_t i) { return E::load(x.base[x.at(i)]); },
                  [&](int64_t i, C v) { y.base[y.at(i)] = E::store(v); }, f);
}

// map_unary for functions that call exp, log, tanh or erf: vectorised through libmvec, every element
// staged (see cpu_vector_math.hpp).
template <class E, class F>
void map_unary_staged(const kestrel_tensor& in, const kestrel_tensor& out, F f, const char* label) {
  using S = typename E::storage;
  View<S> x = view_of<S>(in), y = view_of<S>(out);
  parallel_chunks(label, y.numel, y.numel,
                  [=](int64_t begin, int64_t end) { unary_piece_staged<E>(x, y, begin, end, f); });
}

// One thread's piece of map_scaled_staged, built per vector width.
template <class E, class F>
KESTREL_VECTOR_CLONES void scaled_piece_staged(const View<typename E::storage>& a, const View<typename E::storage>& b,
                                               const View<typename E::storage>& y, int64_t begin, int64_t end,
                                               const F& f) {
  using C = typename E::compute;
  if (a.contiguous && b.contiguous && y.contiguous)  // plain indices: the staging loops vectorise
    map_staged<C>(begin, end, [&](int64_t i) { return E::load(b.base[i]); },
                  [&](int64_t i, C v) { y.base[i] = E::store(E::load(a.base[i]) * v); }, f);
  else
    map_staged<C>(begin, end, [&](int64_t i) { return E::load(b.base[b.at(i)]); },
                  [&](int64_t i, C v) { y.base[y.at(i)] = E::store(E::load(a.base[a.at(i)]) * v); }, f);
}

// y = a * f(b), f staged as map_unary_staged's (an activation's gradient, a = dy, f its derivative), so
// that the bits do not depend on where a thread's piece starts. Same shapes; any strides.
template <class E, class F>
void map_scaled_staged(const kestrel_tensor& in0, const kestrel_tensor& in1, const kestrel_tensor& out, F f,
                       const char* label) {
  using S = typename E::storage;
  View<S> a = view_of<S>(in0), b = view_of<S>(in1), y = view_of<S>(out);
  parallel_chunks(label, y.numel, y.numel,
                  [=](int64_t begin, int64_t end) { scaled_piece_staged<E>(a, b, y, begin, end, f); });
}

// B: in1's element type, E's own or (ABI 1.15's widening add) a 16-bit one whose values f gets in E's
// compute type.
template <class E, class F, class B = E>
void map_binary(const kestrel_tensor& in0, const kestrel_tensor& in1, const kestrel_tensor& out, F f,
                const char* label) {
  using S = typename E::storage;
  using SB = typename B::storage;
  using C = typename E::compute;
  View<S> a = view_of<S>(in0), y = view_of<S>(out);
  View<SB> b = view_of<SB>(in1);
  if (a.contiguous && b.contiguous && y.contiguous) {
    parallel_chunks(label, y.numel, y.numel, [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y.base[i] = E::store(f(E::load(a.base[i]), C(B::load(b.base[i]))));
    });
    return;
  }
  coalesce(y, a, b);
  const int64_t inner = inner_extent(y.rank, y.shape), rows = inner ? y.numel / inner : 0;
  const int64_t as = inner_stride(a.rank, a.strides), bs = inner_stride(b.rank, b.strides);
  const int64_t ys = inner_stride(y.rank, y.strides);
  parallel_for_split(label, rows, y.numel, [=](int64_t r) {
    const S* ar = a.base + a.at(r * inner);
    const SB* br = b.base + b.at(r * inner);
    S* yr = y.base + y.at(r * inner);
    for (int64_t j = 0; j < inner; ++j) yr[j * ys] = E::store(f(E::load(ar[j * as]), C(B::load(br[j * bs]))));
  });
}

}  // namespace kestrel_cpu
