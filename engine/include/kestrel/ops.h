// Tensor operations, dispatched to the tensors' device through the plugin ABI.
//
// Every op checks that its tensors live on one device (DeviceMismatch names both otherwise) and
// broadcasts operands numpy-style by handing plugins stride-0 views. Results are new tensors; the
// functions ending in an underscore write into their first argument.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "kestrel/plugin_shapes.hpp"
#include "kestrel/tensor.h"

namespace kestrel::ops {

using UnaryFn = kestrel_unary_fn;
using BinaryFn = kestrel_binary_fn;
using ReduceFn = kestrel_reduce_fn;

Shape broadcast_shapes(const Shape& a, const Shape& b);  // throws InvalidArgument naming both

void fill_(Tensor& out, double value);
void copy_(Tensor& out, const Tensor& in);  // same shape and device; casts between dtypes

Tensor unary(UnaryFn fn, const Tensor& x, double alpha = 0.0, double beta = 0.0);
Tensor binary(BinaryFn fn, const Tensor& a, const Tensor& b);
void binary_(BinaryFn fn, Tensor& out, const Tensor& a, const Tensor& b);  // out may alias a or b
// Reduces over `dims` (all dims when empty); keepdim keeps them as size 1.
Tensor reduce(ReduceFn fn, const Tensor& x, std::vector<int> dims = {}, bool keepdim = false);
// The same into `out`, x's dtype and rank, extent 1 on the axes it reduces (keepdim's shape): a bias
// gradient written straight into its parameter's gradient storage. Not ARGMAX.
void reduce_into(ReduceFn fn, Tensor& out, const Tensor& x);
// A scalar on x's device, in x's dtype: 1 when some element of x is NaN or infinite, else 0. Nothing is
// read back, so it can feed later launches (f16 loss scaling) without a wait. x: floating, any shape.
Tensor nonfinite_flag(const Tensor& x);
// Whether every element is finite (true for integer tensors): nonfinite_flag read back, so it waits for
// the device.
bool all_finite(const Tensor& x);
// The sum of x's squares, a 0-d tensor in x's dtype on its device (gradient clipping's squared norm).
// One reduction where the device has SUM_SQUARES (ABI 1.17) and fused ops are on; else SQUARE then SUM
// over slices of 2^24 elements, so the squares' temporary stays at 64 MiB of f32 however large x is.
// x: f32 or f64, any shape.
Tensor sum_of_squares(const Tensor& x);
// The most sum_of_squares(x) allocates at once, a few scalars aside: 0 with the one reduction, else a
// slice's squares (and a strided x's contiguous copy).
int64_t sum_of_squares_temporary_bytes(const Tensor& x);

// a: (M, K) or (B, M, K), b: (K, N) or (B, K, N) -> (M, N) or (B, M, N). Transposed views are fine.
Tensor matmul(const Tensor& a, const Tensor& b);
// The same product with its result in out_dtype: a's, or f32 for f16/bf16 operands (mixed precision).
Tensor matmul(const Tensor& a, const Tensor& b, DType out_dtype);
// out = alpha * a @ b + beta * out. a and b share a dtype; out has it too, or is f32 for f16/bf16 a and b:
// then the product is the device's f32 accumulation where it offers that (plugin ABI 1.6), else rounded
// to the operands' dtype first.
void gemm_(Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1.0, double beta = 0.0);
// The same, rank 2, and row_sums (M) = a's rows summed over K, in out's dtype, written: a linear layer's
// bias gradient beside its weight gradient, in the product's own launch where the device offers it (ABI
// 1.14, summed in f32 or wider), else reduced after it (16-bit rows then summed in their dtype and widened,
// as before 1.14).
void gemm_with_row_sums_(Tensor& out, Tensor& row_sums, const Tensor& a, const Tensor& b, double alpha = 1.0,
                         double beta = 0.0);

Tensor gather(const Tensor& x, int axis, const Tensor& index);
void scatter_add_(Tensor& out, int axis, const Tensor& index, const Tensor& src);

// Counter-based draws (see kestrel_random_params): identical bits on every backend for one seed.
void random_(Tensor& out, kestrel_distribution distribution, uint64_t seed, uint64_t offset, double a, double b);

// While one lives on this thread, random_ on `base`'s device reads its counter base from `base` (a
// one-element i64 tensor) and passes only `offset - host_base` by value: the draws are the same as
// without it when base holds host_base, and a captured graph draws fresh numbers once the host
// writes the next base before each replay.
class CounterBaseScope {
 public:
  CounterBaseScope(const Tensor& base, uint64_t host_base);
  ~CounterBaseScope();
  CounterBaseScope(const CounterBaseScope&) = delete;
  CounterBaseScope& operator=(const CounterBaseScope&) = delete;

 private:
  const CounterBaseScope* previous_;
  const Tensor& base_;
  uint64_t host_base_;
  friend Tensor counter_base(const Device&, uint64_t&);
};

// The counter base for a draw at `offset` on `device` by an op that takes one as an input (RANDOM's
// in0, attention's with dropout): inside a CounterBaseScope on that device its tensor, with `offset`
// made relative to it; else undefined, and `offset` unchanged.
Tensor counter_base(const Device& device, uint64_t& offset);

struct Window {
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int64_t out_h(int64_t h) const {
    return plugin_shapes::window_output_extent(h, kernel_h, stride_h, pad_h, dilation_h);
  }
  int64_t out_w(int64_t w) const {
    return plugin_shapes::window_output_extent(w, kernel_w, stride_w, pad_w, dilation_w);
  }
};
// x: (N, C, H, W) -> (N, C*KH*KW, OH*OW)
Tensor im2col(const Tensor& x, const Window& window);
// cols: (N, C*KH*KW, OH*OW) -> (N, C, H, W), overlapping windows summed
Tensor col2im(const Tensor& cols, const Window& window, int64_t channels, int64_t height, int64_t width);
struct PoolResult {
  Tensor out;      // (N, C, OH, OW)
  Tensor indices;  // max pooling only: (N, C, OH, OW) i64, flat h*W+w of each maximum
};
PoolResult pool2d(const Tensor& x, const Window& window, kestrel_pool_mode mode);
// dy: (N, C, OH, OW) -> dx: (N, C, H, W)
Tensor pool2d_backward(const Tensor& dy, const Tensor& indices, const Window& window, kestrel_pool_mode mode,
                       const Shape& input_shape);

// Builds an op descriptor from tensors (for fused ops and tools); `params` is borrowed.
kestrel_op make_op(kestrel_op_kind kind, const void* params, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& outputs);
// Launches `op` when the device's plugin offers it and returns true; false (nothing done) otherwise,
// so the caller composes it from primitives.
bool launch_if_supported(const Device& device, const kestrel_op& op);
// Runs the optional op `kind` into a new tensor of `like`'s shape, dtype and device, and returns it, when
// fused ops are on and the device's plugin offers the op; nothing otherwise, so the caller composes it.
// The plugin is asked with `like` in the output's place, so nothing is allocated for a device that declines;
// `like` may be one of the inputs (an op that refuses an output overlapping an input must not use this).
std::optional<Tensor> launch_new_if_supported(kestrel_op_kind kind, const void* params,
                                              const std::vector<Tensor>& inputs, const Tensor& like);
// Fused ops can be switched off (the engine then always composes them from primitives), to compare
// the two paths or to debug a plugin's fused kernels. Initially on unless KESTREL_DISABLE_FUSED=1.
void set_fused_ops_enabled(bool enabled);
bool fused_ops_enabled();
// Fused ops on or off for a scope (a comparison of the two paths); the setting before comes back at its
// end, also when an exception leaves it.
class FusedOpsScope {
 public:
  explicit FusedOpsScope(bool enabled) : before_(fused_ops_enabled()) { set_fused_ops_enabled(enabled); }
  ~FusedOpsScope() { set_fused_ops_enabled(before_); }
  FusedOpsScope(const FusedOpsScope&) = delete;
  FusedOpsScope& operator=(const FusedOpsScope&) = delete;

 private:
  bool before_;
};
// Whether the device's plugin runs `op` (a fused op may be absent and is then composed).
bool supports(const Device& device, const kestrel_op& op);
// The bytes of `op`'s saved output, in a layout of the plugin's own (RECURRENT_LAYER's, ABI 1.15), or
// nothing where the plugin keeps no such thing.
std::optional<uint64_t> saved_bytes(const Device& device, const kestrel_op& op);
// Whether the device's plugin sizes such saved outputs at all: ops that need one are pointless to build
// for a device that does not (a cheap check before allocating their tensors).
bool keeps_saved_state(const Device& device);
// Launches a prepared op on the device's default stream (used by the ops above and by tools).
void launch(const Device& device, const kestrel_op& op);

}  // namespace kestrel::ops

namespace kestrel {
// Names of ops and their functions, as `kestrel ops` and error messages print them.
const char* op_kind_name(kestrel_op_kind kind);
const char* unary_fn_name(kestrel_unary_fn fn);
const char* binary_fn_name(kestrel_binary_fn fn);
const char* reduce_fn_name(kestrel_reduce_fn fn);
}  // namespace kestrel
