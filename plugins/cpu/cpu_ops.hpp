// The CPU plugin's op families. Each has `supports_*` (checks dtypes, ranks and shapes; never throws)
// and `launch_*` (runs it; called only after supports_* said yes; throws Failure on bad data).
#pragma once
#include "cpu_common.hpp"

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

// Shared checks.
bool arity(const kestrel_op& op, int inputs, int outputs);
bool valid_tensors(const kestrel_op& op);  // dtypes known, ranks in range, extents non-negative

// Elementwise helpers used by several families: out[i] = f(in[i]) over equal shapes, any strides.
template <class E, class F>
void map_unary(const kestrel_tensor& in, const kestrel_tensor& out, F f, const char* label) {
  using S = typename E::storage;
  View<S> x = view_of<S>(in), y = view_of<S>(out);
  if (x.contiguous && y.contiguous) {
    Kokkos::parallel_for(label, Range(0, y.numel), [=](int64_t i) { y.base[i] = E::store(f(E::load(x.base[i]))); });
  } else {
    Kokkos::parallel_for(label, Range(0, y.numel),
                         [=](int64_t i) { y.base[y.at(i)] = E::store(f(E::load(x.base[x.at(i)]))); });
  }
}

template <class E, class F>
void map_binary(const kestrel_tensor& in0, const kestrel_tensor& in1, const kestrel_tensor& out, F f,
                const char* label) {
  using S = typename E::storage;
  View<S> a = view_of<S>(in0), b = view_of<S>(in1), y = view_of<S>(out);
  if (a.contiguous && b.contiguous && y.contiguous) {
    Kokkos::parallel_for(label, Range(0, y.numel),
                         [=](int64_t i) { y.base[i] = E::store(f(E::load(a.base[i]), E::load(b.base[i]))); });
  } else {
    Kokkos::parallel_for(label, Range(0, y.numel), [=](int64_t i) {
      y.base[y.at(i)] = E::store(f(E::load(a.base[a.at(i)]), E::load(b.base[b.at(i)])));
    });
  }
}

}  // namespace kestrel_cpu
