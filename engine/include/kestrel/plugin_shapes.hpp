// Plugin SDK (header-only, C++): whether an op's descriptors are consistent with each other as plugin.h
// defines them, family by family — counts, ranks, extents, dtypes that must agree, parameter blocks
// present and of a known function. They say nothing about what a backend can run (which dtypes,
// strides, size limits): a plugin's supports_<family> is `<family>_fits(op) && its own capability`.
// Like philox.h and half.h this depends on plugin.h alone, so every backend answers these questions the
// same way, and so does the engine.
#ifndef KESTREL_PLUGIN_SHAPES_HPP
#define KESTREL_PLUGIN_SHAPES_HPP

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "kestrel/plugin.h"
#include "kestrel/plugin_struct_size.hpp"

namespace kestrel::plugin_shapes {

inline int64_t numel(const kestrel_tensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.rank; ++d) n *= t.shape[d];
  return n;
}

// Dense row-major (axes of extent 1 may have any stride).
inline bool is_contiguous(const kestrel_tensor& t) {
  int64_t expected = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    if (t.shape[d] == 1) continue;
    if (t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

inline bool all_contiguous(const kestrel_op& op) {
  for (int i = 0; i < op.num_inputs; ++i)
    if (!is_contiguous(op.inputs[i])) return false;
  for (int i = 0; i < op.num_outputs; ++i)
    if (!is_contiguous(op.outputs[i])) return false;
  return true;
}

inline bool outputs_contiguous(const kestrel_op& op) {
  for (int i = 0; i < op.num_outputs; ++i)
    if (!is_contiguous(op.outputs[i])) return false;
  return true;
}

inline bool same_shape(const kestrel_tensor& a, const kestrel_tensor& b) {
  if (a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
}

// ---- dtypes ----

inline bool is_valid_dtype(kestrel_dtype d) { return d >= 0 && d < KESTREL_DTYPE_COUNT; }
inline bool is_float_dtype(kestrel_dtype d) {
  return d == KESTREL_DTYPE_F32 || d == KESTREL_DTYPE_F64 || d == KESTREL_DTYPE_F16 || d == KESTREL_DTYPE_BF16;
}
inline bool is_index_dtype(kestrel_dtype d) { return d == KESTREL_DTYPE_I64 || d == KESTREL_DTYPE_I32; }
inline bool is_16bit_float(kestrel_dtype d) { return d == KESTREL_DTYPE_F16 || d == KESTREL_DTYPE_BF16; }
inline size_t dtype_bytes(kestrel_dtype d) {
  switch (d) {
    case KESTREL_DTYPE_F32: case KESTREL_DTYPE_I32: return 4;
    case KESTREL_DTYPE_F16: case KESTREL_DTYPE_BF16: return 2;
    case KESTREL_DTYPE_U8: return 1;
    default: return 8;
  }
}

// ---- descriptors this ABI version can read ----

// The largest element offset `t` reaches, or -1 when it is empty or the offset does not fit in int64.
inline int64_t last_element(const kestrel_tensor& t) {
  if (numel(t) == 0) return -1;
  if (t.offset > uint64_t(std::numeric_limits<int64_t>::max())) return -1;
  int64_t last = int64_t(t.offset);
  for (int d = 0; d < t.rank; ++d) {
    int64_t step = 0;
    if (__builtin_mul_overflow(t.shape[d] - 1, t.strides[d], &step) || __builtin_add_overflow(last, step, &last))
      return -1;
  }
  return last;
}

// A known dtype, a rank within KESTREL_MAX_RANK, non-negative extents and strides, an element count and a
// last element that fit in int64 (so no plugin's size arithmetic overflows).
inline bool valid_tensor(const kestrel_tensor& t) {
  if (t.struct_size < abi_size<kestrel_tensor> || !is_valid_dtype(t.dtype) || t.rank < 0 || t.rank > KESTREL_MAX_RANK)
    return false;
  int64_t count = 1;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0 || t.strides[d] < 0 || __builtin_mul_overflow(count, t.shape[d], &count)) return false;
  }
  return count == 0 || last_element(t) >= 0;
}

// The op block and every tensor it names are readable; what supports_op checks before any family.
inline bool valid_op(const kestrel_op* op) {
  if (!abi_complete(op) || op->num_inputs < 0 || op->num_inputs > KESTREL_MAX_OP_TENSORS ||
      op->num_outputs < 0 || op->num_outputs > KESTREL_MAX_OP_TENSORS)
    return false;
  for (int i = 0; i < op->num_inputs; ++i)
    if (!valid_tensor(op->inputs[i])) return false;
  for (int i = 0; i < op->num_outputs; ++i)
    if (!valid_tensor(op->outputs[i])) return false;
  return true;
}

inline bool arity(const kestrel_op& op, int inputs, int outputs) {
  return op.num_inputs == inputs && op.num_outputs == outputs;
}

// The op's parameter block, when it is present and holds every field of P this side knows; else null.
template <class P>
const P* params(const kestrel_op& op) {
  const P* p = static_cast<const P*>(op.params);
  return abi_complete(p) ? p : nullptr;
}

// ---- element-wise: fill, copy, unary, binary ----

inline bool fill_fits(const kestrel_op& op) { return arity(op, 0, 1) && params<kestrel_fill_params>(op); }

// Any dtypes on either side (a cast), the same shape.
inline bool copy_fits(const kestrel_op& op) { return arity(op, 1, 1) && same_shape(op.inputs[0], op.outputs[0]); }

// Integers take only the functions that stay integers (no exp of an i32, as torch).
inline bool unary_defined_for_integers(kestrel_unary_fn fn) {
  return fn == KESTREL_UNARY_NEG || fn == KESTREL_UNARY_ABS || fn == KESTREL_UNARY_RELU || fn == KESTREL_UNARY_STEP ||
         fn == KESTREL_UNARY_SQUARE || fn == KESTREL_UNARY_SIGN;
}

inline bool unary_fits(const kestrel_op& op) {
  auto* p = params<kestrel_unary_params>(op);
  if (!p || !arity(op, 1, 1) || !same_shape(op.inputs[0], op.outputs[0])) return false;
  const kestrel_dtype dtype = op.inputs[0].dtype;
  if (dtype != op.outputs[0].dtype || p->fn < KESTREL_UNARY_NEG || p->fn > KESTREL_UNARY_POW) return false;
  return is_float_dtype(dtype) || unary_defined_for_integers(p->fn);
}

// Broadcast operands arrive expanded (stride 0), so all three share a shape and a dtype. Integer
// division and power are not defined by the ABI (torch would promote to float).
// With `widening_add` (1.15, a plugin that takes it): ADD of an f32 in0 and out with an f16/bf16 in1.
inline bool binary_fits(const kestrel_op& op, bool widening_add = false) {
  auto* p = params<kestrel_binary_params>(op);
  if (!p || !arity(op, 2, 1)) return false;
  const kestrel_tensor &a = op.inputs[0], &b = op.inputs[1], &out = op.outputs[0];
  if (!same_shape(a, out) || !same_shape(b, out) || a.dtype != out.dtype) return false;
  if (b.dtype != out.dtype)
    return widening_add && p->fn == KESTREL_BINARY_ADD && out.dtype == KESTREL_DTYPE_F32 && is_16bit_float(b.dtype);
  if (p->fn < KESTREL_BINARY_ADD || p->fn > KESTREL_BINARY_GELU_BACKWARD) return false;
  const bool float_only = p->fn == KESTREL_BINARY_DIV || p->fn == KESTREL_BINARY_POW || p->fn >= KESTREL_BINARY_RELU_BACKWARD;
  return is_float_dtype(out.dtype) || !float_only;
}

// ---- matrix products: gemm and the fused linear ----

// a (M,K) @ b (K,N) -> c (M,N), or the same with a leading batch extent shared by all three.
inline bool gemm_shapes_fit(const kestrel_tensor& a, const kestrel_tensor& b, const kestrel_tensor& c) {
  if ((c.rank != 2 && c.rank != 3) || a.rank != c.rank || b.rank != c.rank) return false;
  const int lead = c.rank - 2;
  if (c.rank == 3 && (a.shape[0] != c.shape[0] || b.shape[0] != c.shape[0])) return false;
  return a.shape[lead] == c.shape[lead] && b.shape[lead + 1] == c.shape[lead + 1] && a.shape[lead + 1] == b.shape[lead];
}

// f32_of_16bit: the plugin also takes (ABI 1.6) f16 or bf16 operands with an f32 result.
// row_sums: the plugin also takes ABI 1.14's out1, in0's rows summed over K ((M), contiguous, out0's dtype).
inline bool gemm_fits(const kestrel_op& op, bool f32_of_16bit = false, bool row_sums = false) {
  if (!params<kestrel_gemm_params>(op) || !(arity(op, 2, 1) || (row_sums && arity(op, 2, 2)))) return false;
  const kestrel_tensor &a = op.inputs[0], &b = op.inputs[1], &c = op.outputs[0];
  if (a.dtype != b.dtype || !gemm_shapes_fit(a, b, c)) return false;
  if (op.num_outputs == 2) {
    const kestrel_tensor& sums = op.outputs[1];
    if (c.rank != 2 || sums.rank != 1 || sums.shape[0] != c.shape[0] || sums.dtype != c.dtype) return false;
    if (sums.shape[0] > 1 && sums.strides[0] != 1) return false;
  }
  return a.dtype == c.dtype || (f32_of_16bit && c.dtype == KESTREL_DTYPE_F32 &&
                                (a.dtype == KESTREL_DTYPE_F16 || a.dtype == KESTREL_DTYPE_BF16));
}

// in0 x (M,K), in1 w (K,N), optional in2 bias (N); out0 y (M,N) = act(x @ w + bias), optional out1 the
// pre-activation (M,N). One dtype throughout.
inline bool linear_fits(const kestrel_op& op) {
  auto* p = params<kestrel_linear_params>(op);
  if (!p || (op.num_inputs != 2 && op.num_inputs != 3) || (op.num_outputs != 1 && op.num_outputs != 2)) return false;
  const kestrel_tensor &x = op.inputs[0], &w = op.inputs[1], &y = op.outputs[0];
  if (x.dtype != y.dtype || w.dtype != y.dtype || y.rank != 2 || !gemm_shapes_fit(x, w, y)) return false;
  if (op.num_inputs == 3) {
    const kestrel_tensor& bias = op.inputs[2];
    if (bias.dtype != y.dtype || bias.rank != 1 || bias.shape[0] != y.shape[1]) return false;
  }
  if (op.num_outputs == 2 && (!same_shape(op.outputs[1], y) || op.outputs[1].dtype != y.dtype)) return false;
  return p->activation >= KESTREL_ACTIVATION_NONE && p->activation <= KESTREL_ACTIVATION_GELU;
}

// ---- gather and scatter_add along one axis ----

// `data` is the tensor indexed along the axis, `index` (i32/i64) has its rank and `other`'s shape, and
// no other axis of `index` is longer than data's.
inline bool index_fits(const kestrel_op& op, const kestrel_tensor& data, const kestrel_tensor& index,
                       const kestrel_tensor& other) {
  auto* p = params<kestrel_index_params>(op);
  if (!p || !arity(op, 2, 1) || p->axis < 0 || p->axis >= data.rank || !is_index_dtype(index.dtype)) return false;
  if (index.rank != data.rank || !same_shape(index, other)) return false;
  for (int d = 0; d < data.rank; ++d)
    if (d != p->axis && index.shape[d] > data.shape[d]) return false;
  return true;
}

// in0 data, in1 index -> out (index's shape).
inline bool gather_fits(const kestrel_op& op) {
  return arity(op, 2, 1) && op.inputs[0].dtype == op.outputs[0].dtype &&
         index_fits(op, op.inputs[0], op.inputs[1], op.outputs[0]);
}

// in0 src (index's shape), in1 index, out the tensor added into.
inline bool scatter_add_fits(const kestrel_op& op) {
  return arity(op, 2, 1) && op.inputs[0].dtype == op.outputs[0].dtype &&
         index_fits(op, op.outputs[0], op.inputs[1], op.inputs[0]);
}

// The dtype of per-row statistics beside float data of dtype d (log-sum-exp, mean, rstd, cross-entropy's
// losses and scales beside 16-bit logits): f64 for f64, else f32.
inline kestrel_dtype statistics_dtype(kestrel_dtype d) { return d == KESTREL_DTYPE_F64 ? KESTREL_DTYPE_F64 : KESTREL_DTYPE_F32; }

// ---- softmax and softmax-cross-entropy over the last axis ----

inline bool softmax_fits(const kestrel_op& op) {
  if (!params<kestrel_softmax_params>(op) || !arity(op, 1, 1)) return false;
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  return in.rank >= 1 && is_float_dtype(in.dtype) && in.dtype == out.dtype && same_shape(in, out);
}

namespace detail {
// logits (N,C) float with C >= 1 and labels (N) i32/i64.
inline bool logits_and_labels(const kestrel_tensor& logits, const kestrel_tensor& labels) {
  return logits.rank == 2 && is_float_dtype(logits.dtype) && is_index_dtype(labels.dtype) && labels.rank == 1 &&
         labels.shape[0] == logits.shape[0] && logits.shape[1] >= 1;
}
using plugin_shapes::is_16bit_float;
}  // namespace detail

// SOFTMAX_CROSS_ENTROPY: in0 logits (N,C) float, in1 labels (N) i32/i64 -> out0 loss (N) [, out1 dlogits
// (N,C)], the loss in the logits' dtype; or (1.12) 16-bit logits with an f32 loss and no out1.
inline bool softmax_cross_entropy_fits(const kestrel_op& op) {
  if (op.num_inputs != 2 || (op.num_outputs != 1 && op.num_outputs != 2)) return false;
  const kestrel_tensor &logits = op.inputs[0], &loss = op.outputs[0];
  if (!detail::logits_and_labels(logits, op.inputs[1]) || loss.rank != 1 || loss.shape[0] != logits.shape[0])
    return false;
  if (loss.dtype != logits.dtype)
    return op.num_outputs == 1 && detail::is_16bit_float(logits.dtype) && loss.dtype == KESTREL_DTYPE_F32;
  return op.num_outputs == 1 || (same_shape(op.outputs[1], logits) && op.outputs[1].dtype == logits.dtype);
}

// The largest forward loss (nats) from which a plugin takes a row's log-sum-exp as loss + logit[label]
// (1.14's in3): the loss was rounded once as stored, and exp(x - (loss + x[label])) is off by that rounding
// times the loss, relatively; at 16 nats, f32's half ulp makes that under 1e-6. NaN and infinity fail it.
constexpr double kCrossEntropyLossShortcut = 16.0;

// SOFTMAX_CROSS_ENTROPY_BACKWARD (1.12): in0 logits (N,C), in1 labels (N), in2 scales (N) f32 (f64 for f64
// logits) -> out0 dlogits (N,C) in the logits' dtype. losses: the plugin also takes 1.14's in3, forward's
// losses (N) in the scales' dtype, contiguous.
inline bool softmax_cross_entropy_backward_fits(const kestrel_op& op, bool losses = false) {
  if (!arity(op, 3, 1) && !(losses && arity(op, 4, 1))) return false;
  const kestrel_tensor &logits = op.inputs[0], &scales = op.inputs[2], &grad = op.outputs[0];
  if (op.num_inputs == 4) {
    const kestrel_tensor& loss = op.inputs[3];
    if (loss.rank != 1 || loss.shape[0] != logits.shape[0] || loss.dtype != scales.dtype || !is_contiguous(loss))
      return false;
  }
  return detail::logits_and_labels(logits, op.inputs[1]) && scales.rank == 1 && scales.shape[0] == logits.shape[0] &&
         scales.dtype == statistics_dtype(logits.dtype) && same_shape(grad, logits) &&
         grad.dtype == logits.dtype;
}
// Its layout as the plugins take it: logits, labels and dlogits contiguous, the scales too or one broadcast.
inline bool softmax_cross_entropy_backward_dense(const kestrel_op& op) {
  const kestrel_tensor& scales = op.inputs[2];
  return is_contiguous(op.inputs[0]) && is_contiguous(op.inputs[1]) && is_contiguous(op.outputs[0]) &&
         (scales.strides[0] == 0 || is_contiguous(scales));
}

// A matrix (R, C) whose rows are contiguous and do not overlap, one row stride apart (>= C): a slice of
// wider rows, such as a layer's logits cut out of the padded width its product ran at.
inline bool contiguous_rows(const kestrel_tensor& t) {
  return t.rank == 2 && (t.shape[1] <= 1 || t.strides[1] == 1) && (t.shape[0] <= 1 || t.strides[0] >= t.shape[1]);
}
// Such a matrix's row stride: C when it has one row (any stride then reads the same elements).
inline int64_t row_stride(const kestrel_tensor& t) { return t.shape[0] > 1 ? t.strides[0] : t.shape[1]; }

// Either cross-entropy op (forward with one output, or backward) with its logits, and backward's dlogits,
// in contiguous rows; everything else as softmax_cross_entropy_backward_dense has it. The plugins that
// read a row stride take logits left in a padded product's width without a copy.
inline bool softmax_cross_entropy_in_rows(const kestrel_op& op) {
  if (!contiguous_rows(op.inputs[0]) || !is_contiguous(op.inputs[1])) return false;
  if (op.kind != KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD) return op.num_outputs == 1 && is_contiguous(op.outputs[0]);
  const kestrel_tensor& scales = op.inputs[2];
  return contiguous_rows(op.outputs[0]) && (scales.strides[0] == 0 || is_contiguous(scales));
}

// ---- reductions: out has in's rank, extent 1 on each reduced axis ----

struct ReduceShape {
  bool ok = false;    // out fits in as a reduction
  int reduced = 0;    // axes that are reduced (extent != 1 in the input, 1 in the output)
  int64_t count = 1;  // input elements folded into each output element
};

inline ReduceShape reduce_shape(const kestrel_tensor& in, const kestrel_tensor& out) {
  ReduceShape r;
  if (in.rank != out.rank) return r;
  for (int d = 0; d < in.rank; ++d) {
    if (out.shape[d] == in.shape[d]) continue;
    if (out.shape[d] != 1) return r;
    ++r.reduced;
    r.count *= in.shape[d];
  }
  r.ok = true;
  return r;
}

// A reduce op (one input, one output, known function) whose shapes and output dtype fit plugin.h:
// argmax reduces at most one non-empty axis into i64, the others keep the input's dtype, max/min need
// a non-empty axis, and there is no mean (as torch) nor sum of squares of integers.
inline bool reduce_fits(const kestrel_op& op) {
  auto* p = params<kestrel_reduce_params>(op);
  if (!p || !arity(op, 1, 1)) return false;
  if (p->fn < KESTREL_REDUCE_SUM || p->fn > KESTREL_REDUCE_SUM_SQUARES) return false;
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  const ReduceShape r = reduce_shape(in, out);
  if (!r.ok) return false;
  if (p->fn == KESTREL_REDUCE_ARGMAX) return out.dtype == KESTREL_DTYPE_I64 && r.reduced <= 1 && r.count > 0;
  if (out.dtype != in.dtype) return false;
  if (p->fn == KESTREL_REDUCE_MEAN || p->fn == KESTREL_REDUCE_SUM_SQUARES) return is_float_dtype(in.dtype);
  if (p->fn == KESTREL_REDUCE_MAX_ABS) return is_float_dtype(in.dtype) && (numel(in) == 0 || r.count > 0);
  if (p->fn == KESTREL_REDUCE_MAX || p->fn == KESTREL_REDUCE_MIN) return numel(in) == 0 || r.count > 0;
  return true;
}

// ---- random draws ----

// One output, a known distribution, and either no input or (ABI 1.1) one: the one-element i64 counter
// base read when the op runs. Uniform and normal draws fill float dtypes; Bernoulli masks also u8.
inline bool random_fits(const kestrel_op& op) {
  auto* p = params<kestrel_random_params>(op);
  if (!p || op.num_outputs != 1 || op.num_inputs > 1) return false;
  if (op.num_inputs == 1 && (op.inputs[0].dtype != KESTREL_DTYPE_I64 || numel(op.inputs[0]) != 1)) return false;
  const kestrel_dtype d = op.outputs[0].dtype;
  switch (p->distribution) {
    case KESTREL_DISTRIBUTION_UNIFORM: case KESTREL_DISTRIBUTION_NORMAL: return is_float_dtype(d);
    case KESTREL_DISTRIBUTION_BERNOULLI: return is_float_dtype(d) || d == KESTREL_DTYPE_U8;
  }
  return false;
}

// ---- optimizer updates ----

// Adam: in0 param, in1 grad, in2 m, in3 v. SGD: in0 param, in1 grad [, in2 momentum buffer]. No outputs
// (updated in place); every input has the parameter's dtype and element count.
// Whether an optimizer op's last input is loss scaling's state (plugin.h, since 1.5).
inline bool optimizer_has_scaler(const kestrel_op& op) {
  if (op.kind == KESTREL_OP_ADAM_UPDATE) return params<kestrel_adam_params>(op)->scaler != 0;
  return params<kestrel_sgd_params>(op)->scaler != 0;
}

// Adam: in0 param, in1 grad, in2 m, in3 v; SGD: in0 param, in1 grad [, in2 momentum buffer]; then the
// scaler's state (f32, 4 contiguous elements) when params.scaler says so.
inline bool optimizer_fits(const kestrel_op& op) {
  const bool adam = op.kind == KESTREL_OP_ADAM_UPDATE;
  if ((adam ? !params<kestrel_adam_params>(op) : !params<kestrel_sgd_params>(op)) || op.num_outputs != 0) return false;
  const int scaled = optimizer_has_scaler(op) ? 1 : 0, tensors = op.num_inputs - scaled;
  if (tensors != (adam ? 4 : (tensors == 3 ? 3 : 2))) return false;
  for (int i = 1; i < tensors; ++i)
    if (op.inputs[i].dtype != op.inputs[0].dtype || numel(op.inputs[i]) != numel(op.inputs[0])) return false;
  if (scaled) {
    const kestrel_tensor& state = op.inputs[tensors];
    if (state.dtype != KESTREL_DTYPE_F32 || state.rank != 1 || state.shape[0] != 4 || state.strides[0] != 1) return false;
  }
  return true;
}

// ---- attention and layer norm (1.7) ----



// Where ATTENTION's (B,T,D) operands keep their rows: contiguous rank 3, or (1.13) a rank-4 (N,H,T,D)
// view with any strides but a unit last one. Row t of batch entry b starts at at(b, t); its D elements
// follow one another.
struct HeadRows {
  int64_t batch = 0, rows = 0, depth = 0;
  int64_t heads = 1, sample_stride = 0, head_stride = 0, row_stride = 0;
  int64_t at(int64_t b, int64_t t) const { return (b / heads) * sample_stride + (b % heads) * head_stride + t * row_stride; }
  bool contiguous() const { return row_stride == depth && head_stride == rows * depth && sample_stride == heads * rows * depth; }
};
inline HeadRows head_rows(const kestrel_tensor& t) {
  HeadRows r;
  if (t.rank == 3) {
    r.batch = t.shape[0], r.rows = t.shape[1], r.depth = t.shape[2];
    r.sample_stride = r.head_stride = t.strides[0], r.row_stride = t.strides[1];
  } else if (t.rank == 4) {
    r.heads = t.shape[1], r.batch = t.shape[0] * t.shape[1], r.rows = t.shape[2], r.depth = t.shape[3];
    r.sample_stride = t.strides[0], r.head_stride = t.strides[1], r.row_stride = t.strides[2];
  }
  return r;
}

// ATTENTION: in0 q (B,Tq,D), in1 k (B,Tk,D), in2 v (B,Tk,D) -> out0 (B,Tq,D), out1 (B,Tq) f32.
// ATTENTION_BACKWARD: in0 dout, in1 q, in2 k, in3 v, in4 out, in5 lse -> out0 dq, out1 dk, out2 dv.
// With key padding (1.9) both take the (N,Tk) mask next; with dropout (1.8) the counter base, a
// one-element i64 tensor, as their last input.
// One float dtype for all but the log-sum-exp (statistics_dtype); every tensor contiguous, or (1.13) the
// (B,T,D) ones rank-4 views (HeadRows); causal needs Tk >= Tq.
inline bool attention_fits(const kestrel_op& op) {
  const auto* p = params<kestrel_attention_params>(op);
  const bool backward = op.kind == KESTREL_OP_ATTENTION_BACKWARD;
  if (!p || !(p->dropout >= 0 && p->dropout < 1)) return false;
  const int counter = p->dropout > 0 ? 1 : 0;    // 1.8: the counter base, the last input
  const int padding = p->key_padding ? 1 : 0;     // 1.9: the key-padding mask, before it
  const int given = (backward ? 6 : 3) + padding + counter;
  if (!(backward ? arity(op, given, 3) : arity(op, given, 2))) return false;
  if (counter) {
    const kestrel_tensor& base = op.inputs[op.num_inputs - 1];
    if (base.dtype != KESTREL_DTYPE_I64 || numel(base) != 1) return false;
  }
  const kestrel_tensor &q = op.inputs[backward ? 1 : 0], &k = op.inputs[backward ? 2 : 1], &v = op.inputs[backward ? 3 : 2];
  const kestrel_tensor& lse = backward ? op.inputs[5] : op.outputs[1];
  // The (B,T,D) operands: contiguous rank 3, or all rank-4 views of one (N,H) with unit last strides
  // (their other extents are checked below); every other tensor contiguous.
  const bool heads = q.rank == 4;
  auto laid_out = [&](const kestrel_tensor& t, bool operand) {
    if (!operand || !heads) return is_contiguous(t);
    return t.rank == 4 && t.strides[3] == 1 && t.shape[0] == q.shape[0] && t.shape[1] == q.shape[1];
  };
  const int operands = backward ? 5 : 3;  // inputs: [dout,] q, k, v [, out]
  for (int i = 0; i < op.num_inputs; ++i)
    if (!laid_out(op.inputs[i], i < operands)) return false;
  for (int i = 0; i < op.num_outputs; ++i)  // outputs: dq, dk, dv; or out and the log-sum-exp
    if (!laid_out(op.outputs[i], backward || i == 0)) return false;
  auto like = [](const kestrel_tensor& t, const kestrel_tensor& model) { return same_shape(t, model) && t.dtype == model.dtype; };
  if ((q.rank != 3 && !heads) || k.rank != q.rank || !is_float_dtype(q.dtype) || k.dtype != q.dtype || !like(v, k))
    return false;
  const HeadRows qr = head_rows(q), kr = head_rows(k);
  if (kr.batch != qr.batch || kr.depth != qr.depth || (p->causal && kr.rows < qr.rows)) return false;
  if (lse.dtype != statistics_dtype(q.dtype) || lse.rank != 2 || lse.shape[0] != qr.batch || lse.shape[1] != qr.rows ||
      !is_contiguous(lse))
    return false;
  if (padding) {
    const kestrel_tensor& mask = op.inputs[given - counter - 1];  // (N, Tk), N dividing B
    if (mask.rank != 2 || mask.dtype != q.dtype || mask.shape[1] != kr.rows || mask.shape[0] < 1 ||
        qr.batch % mask.shape[0] != 0)
      return false;
  }
  if (!backward) return like(op.outputs[0], q);
  return like(op.inputs[0], q) && like(op.inputs[4], q) && like(op.outputs[0], q) && like(op.outputs[1], k) &&
         like(op.outputs[2], k);
}

// LAYER_NORM: in0 x (R,C) [, in1 weight (C) [, in2 bias (C)]] -> out0 y (R,C), out1 mean (R), out2 rstd (R).
// LAYER_NORM_BACKWARD: in0 dy, in1 x, in2 mean, in3 rstd [, in4 weight] -> out0 dx [, out1 dweight [, out2
// dbias]]. One float dtype but for the statistics (statistics_dtype); every tensor contiguous. With
// `lowered` (1.15: a plugin that writes and reads 16-bit rows of an f32 layer norm) forward's y and
// backward's dy may be f16 or bf16 where x is f32. With `adds` (1.16: a plugin whose backward adds dx to a
// gradient already there) backward may take one more input after the others, that gradient (R,C) in x's
// dtype, apart from out0.
inline bool layer_norm_fits(const kestrel_op& op, bool lowered = false, bool adds = false) {
  if (!params<kestrel_layer_norm_params>(op) || !all_contiguous(op)) return false;
  const bool backward = op.kind == KESTREL_OP_LAYER_NORM_BACKWARD;
  const int affine = backward ? op.num_outputs - 1 : op.num_inputs - 1;  // 0, 1 (weight) or 2 (and bias)
  if (affine < 0 || affine > 2) return false;
  const int base_inputs = affine ? 5 : 4;  // backward's, before 1.16's added gradient
  if (backward ? op.num_inputs != base_inputs && !(adds && op.num_inputs == base_inputs + 1) : op.num_outputs != 3)
    return false;
  const kestrel_tensor& x = op.inputs[backward ? 1 : 0];
  if (x.rank != 2 || !is_float_dtype(x.dtype)) return false;
  auto like = [](const kestrel_tensor& t, const kestrel_tensor& model) { return same_shape(t, model) && t.dtype == model.dtype; };
  auto vector_of = [&](const kestrel_tensor& t, int64_t n, kestrel_dtype dtype) {
    return t.rank == 1 && t.shape[0] == n && t.dtype == dtype;
  };
  const kestrel_tensor& mean = backward ? op.inputs[2] : op.outputs[1];
  const kestrel_tensor& rstd = backward ? op.inputs[3] : op.outputs[2];
  const kestrel_dtype stats = statistics_dtype(x.dtype);
  if (!vector_of(mean, x.shape[0], stats) || !vector_of(rstd, x.shape[0], stats)) return false;
  // y (forward) or dy (backward): x's dtype, or 16-bit beside an f32 x where the plugin takes that.
  auto rows_like_x = [&](const kestrel_tensor& t) {
    return same_shape(t, x) &&
           (t.dtype == x.dtype || (lowered && x.dtype == KESTREL_DTYPE_F32 && detail::is_16bit_float(t.dtype)));
  };
  if (!backward) {
    for (int i = 1; i <= affine; ++i)
      if (!vector_of(op.inputs[i], x.shape[1], x.dtype)) return false;
    return rows_like_x(op.outputs[0]);
  }
  if (!rows_like_x(op.inputs[0]) || !like(op.outputs[0], x)) return false;
  if (affine && !vector_of(op.inputs[4], x.shape[1], x.dtype)) return false;
  for (int i = 1; i <= affine; ++i)
    if (!vector_of(op.outputs[i], x.shape[1], x.dtype)) return false;
  // 1.16: the gradient dx is added to, apart from dx itself.
  if (op.num_inputs == base_inputs + 1) {
    const kestrel_tensor& added = op.inputs[base_inputs];
    const kestrel_tensor& dx = op.outputs[0];  // both contiguous and of x's shape: element ranges of one length
    const bool overlap = added.buffer == dx.buffer && added.offset < dx.offset + numel(dx) && dx.offset < added.offset + numel(added);
    if (!like(added, x) || (numel(dx) > 0 && overlap)) return false;
  }
  return true;
}

// The gradient LAYER_NORM_BACKWARD adds dx to (ABI 1.16), or null.
inline const kestrel_tensor* layer_norm_added_gradient(const kestrel_op& op) {
  const int base_inputs = op.num_outputs > 1 ? 5 : 4;
  return op.kind == KESTREL_OP_LAYER_NORM_BACKWARD && op.num_inputs == base_inputs + 1 ? &op.inputs[base_inputs]
                                                                                       : nullptr;
}

// ---- LSTM cell (1.7) ----

// LSTM_CELL: in0, in1 (N,4H), in2 (N,H) -> out0, out1 (N,H), out2 (N,4H). LSTM_CELL_BACKWARD: in0, in1 (N,H),
// in2 (N,4H), in3, in4 (N,H) -> out0 (N,4H), out1 (N,H). One float dtype; every row contiguous.
inline bool lstm_cell_fits(const kestrel_op& op) {
  const bool backward = op.kind == KESTREL_OP_LSTM_CELL_BACKWARD;
  if (!(backward ? arity(op, 5, 2) : arity(op, 3, 3))) return false;
  const kestrel_tensor& c = op.inputs[backward ? 3 : 2];
  if (c.rank != 2 || !is_float_dtype(c.dtype)) return false;
  const int64_t n = c.shape[0], h = c.shape[1];
  auto fits = [&](const kestrel_tensor& t, int64_t width) {
    return t.rank == 2 && t.dtype == c.dtype && t.shape[0] == n && t.shape[1] == width &&
           (width <= 1 || t.strides[1] == 1) && (n <= 1 || t.strides[0] >= width);
  };
  if (backward)
    return fits(op.inputs[0], h) && fits(op.inputs[1], h) && fits(op.inputs[2], 4 * h) && fits(op.inputs[4], h) &&
           fits(op.outputs[0], 4 * h) && fits(op.outputs[1], h);
  return fits(op.inputs[0], 4 * h) && fits(op.inputs[1], 4 * h) && fits(op.outputs[0], h) && fits(op.outputs[1], h) &&
         fits(op.outputs[2], 4 * h);
}

// ---- GRU cell (1.9) ----

// GRU_CELL: in0, in1 (N,3H), in2 h (N,H) -> out0 (N,H), out1 (N,3H). GRU_CELL_BACKWARD: in0 (N,H),
// in1, in2 (N,3H), in3 (N,H) -> out0, out1 (N,3H), out2 (N,H). One float dtype; every row contiguous.
inline bool gru_cell_fits(const kestrel_op& op) {
  const bool backward = op.kind == KESTREL_OP_GRU_CELL_BACKWARD;
  if (!(backward ? arity(op, 4, 3) : arity(op, 3, 2))) return false;
  const kestrel_tensor& h = op.inputs[backward ? 3 : 2];
  if (h.rank != 2 || !is_float_dtype(h.dtype)) return false;
  const int64_t n = h.shape[0], width = h.shape[1];
  auto fits = [&](const kestrel_tensor& t, int64_t columns) {
    return t.rank == 2 && t.dtype == h.dtype && t.shape[0] == n && t.shape[1] == columns &&
           (columns <= 1 || t.strides[1] == 1) && (n <= 1 || t.strides[0] >= columns);
  };
  if (backward)
    return fits(op.inputs[0], width) && fits(op.inputs[1], 3 * width) && fits(op.inputs[2], 3 * width) &&
           fits(op.outputs[0], 3 * width) && fits(op.outputs[1], 3 * width) && fits(op.outputs[2], width);
  return fits(op.inputs[0], 3 * width) && fits(op.inputs[1], 3 * width) && fits(op.outputs[0], width) &&
         fits(op.outputs[1], 3 * width);
}

// ---- whole recurrent layers (1.15) ----

// The gates per hidden unit: 4 for the LSTM, 3 for the GRU, 1 for the plain RNNs; 0 for an unknown cell.
inline int recurrent_gates(kestrel_recurrent_cell cell) {
  switch (cell) {
    case KESTREL_RECURRENT_RNN_TANH: case KESTREL_RECURRENT_RNN_RELU: return 1;
    case KESTREL_RECURRENT_LSTM: return 4;
    case KESTREL_RECURRENT_GRU: return 3;
  }
  return 0;
}

// A RECURRENT_LAYER or its backward as extents: x (N,T,F), hidden H, G gates; `saved`: the op names a
// saved tensor (forward: its last output; backward: its last input), of `saved_bytes` bytes.
struct RecurrentShape {
  kestrel_recurrent_cell cell;
  int gates;
  int64_t n, t, f, h;
  kestrel_dtype dtype;
  bool saved;
  uint64_t saved_bytes;
};

// The op's shape when its tensors fit the contract in plugin.h (one float dtype; every float tensor
// contiguous; a saved tensor U8 and rank 1), else nothing.
inline bool recurrent_layer_fits(const kestrel_op& op, RecurrentShape* shape = nullptr) {
  auto* p = params<kestrel_recurrent_params>(op);
  const int g = p ? recurrent_gates(p->cell) : 0;
  if (!g) return false;
  const bool lstm = p->cell == KESTREL_RECURRENT_LSTM, backward = op.kind == KESTREL_OP_RECURRENT_LAYER_BACKWARD;
  const int states = lstm ? 2 : 1;  // h, and c for the LSTM
  // Forward: x, weights, biases, the initial states -> y, the last states [, saved].
  // Backward: dy, x, y, weights, the initial states, saved -> dx, the weights' and biases' gradients.
  const int inputs = backward ? 5 + states + 1 : 5 + states;
  if (op.num_inputs != inputs) return false;
  const int outputs_without_saved = backward ? 5 : 1 + states;
  if (op.num_outputs != outputs_without_saved && (backward || op.num_outputs != outputs_without_saved + 1))
    return false;
  const bool saved = backward || op.num_outputs == outputs_without_saved + 1;
  const kestrel_tensor* saved_tensor = !saved ? nullptr : backward ? &op.inputs[inputs - 1] : &op.outputs[op.num_outputs - 1];
  if (saved_tensor && (saved_tensor->dtype != KESTREL_DTYPE_U8 || saved_tensor->rank != 1 || !is_contiguous(*saved_tensor)))
    return false;
  const kestrel_tensor& x = op.inputs[backward ? 1 : 0];
  const kestrel_tensor& w_ih = op.inputs[backward ? 3 : 1];
  const kestrel_tensor& w_hh = op.inputs[backward ? 4 : 2];
  if (x.rank != 3 || w_ih.rank != 2 || w_hh.rank != 2 || !is_float_dtype(x.dtype)) return false;
  const int64_t n = x.shape[0], t = x.shape[1], f = x.shape[2], h = w_hh.shape[1];
  auto is = [&](const kestrel_tensor& v, std::initializer_list<int64_t> dims) {
    if (v.dtype != x.dtype || v.rank != int32_t(dims.size()) || !is_contiguous(v)) return false;
    int d = 0;
    for (int64_t extent : dims)
      if (v.shape[d++] != extent) return false;
    return true;
  };
  const int64_t gh = g * h;
  bool ok = h > 0 && is(x, {n, t, f}) && is(w_ih, {gh, f}) && is(w_hh, {gh, h});
  if (backward) {
    ok = ok && is(op.inputs[0], {n, t, h}) && is(op.inputs[2], {n, t, h});
    for (int i = 0; i < states; ++i) ok = ok && is(op.inputs[5 + i], {n, h});
    ok = ok && is(op.outputs[0], {n, t, f}) && is(op.outputs[1], {gh, f}) && is(op.outputs[2], {gh, h}) &&
         is(op.outputs[3], {gh}) && is(op.outputs[4], {gh});
  } else {
    ok = ok && is(op.inputs[3], {gh}) && is(op.inputs[4], {gh});
    for (int i = 0; i < states; ++i) ok = ok && is(op.inputs[5 + i], {n, h}) && is(op.outputs[1 + i], {n, h});
    ok = ok && is(op.outputs[0], {n, t, h});
  }
  if (ok && shape)
    *shape = {p->cell, g, n, t, f, h, x.dtype, saved, saved_tensor ? uint64_t(saved_tensor->shape[0]) : 0};
  return ok;
}

// ---- sliding windows: im2col, col2im, pool2d, pool2d_backward on (N, C, H, W) ----

// An (N, C, H, W) image, the window sliding over it, and the (OH, OW) positions it takes.
struct WindowGeometry {
  int64_t n, c, h, w, oh, ow;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  // The image row (column) that output row (column) o reads at tap k; outside [0, h) in the padding.
  int64_t h_at(int64_t o, int k) const { return o * sh - ph + int64_t(k) * dh; }
  int64_t w_at(int64_t o, int k) const { return o * sw - pw + int64_t(k) * dw; }
};

// One output extent of a window sliding over `size` (plugin.h's formula, its division floored); < 1 when
// no window fits. (C++'s division truncates toward zero: an input shorter than the window by less than
// the stride would otherwise get one output.)
inline int64_t window_output_extent(int64_t size, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  const int64_t room = size + 2 * pad - dilation * (kernel - 1) - 1;  // how far the window can slide
  return room < 0 ? 0 : room / stride + 1;
}

inline bool window_params_ok(const kestrel_window_params* p) {
  return abi_complete(p) && p->kernel_h >= 1 && p->kernel_w >= 1 &&
         p->stride_h >= 1 && p->stride_w >= 1 && p->pad_h >= 0 && p->pad_w >= 0 && p->dilation_h >= 1 &&
         p->dilation_w >= 1 && (p->mode == KESTREL_POOL_MAX || p->mode == KESTREL_POOL_AVG);
}

// The image is the (N, C, H, W) side of the op; OH and OW as plugin.h defines them.
inline WindowGeometry window_geometry(const kestrel_window_params& p, const kestrel_tensor& image) {
  WindowGeometry g{image.shape[0], image.shape[1], image.shape[2], image.shape[3], 0, 0,
                   p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w};
  g.oh = window_output_extent(g.h, p.kernel_h, p.stride_h, p.pad_h, p.dilation_h);
  g.ow = window_output_extent(g.w, p.kernel_w, p.stride_w, p.pad_w, p.dilation_w);
  return g;
}

inline bool shape4(const kestrel_tensor& t, int64_t n, int64_t c, int64_t h, int64_t w) {
  return t.rank == 4 && t.shape[0] == n && t.shape[1] == c && t.shape[2] == h && t.shape[3] == w;
}

// Whether a window op's tensors fit each other: counts, ranks, extents, the data dtype shared by input
// and output, and the i64 argmax tensor of max pooling (same shape as the pooled output).
inline bool window_fits(const kestrel_op& op) {
  auto* p = static_cast<const kestrel_window_params*>(op.params);
  if (!window_params_ok(p) || op.num_inputs < 1 || op.num_outputs < 1) return false;
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  if (in.dtype != out.dtype) return false;
  const bool max = p->mode == KESTREL_POOL_MAX;
  const int64_t taps = int64_t(p->kernel_h) * p->kernel_w;
  switch (op.kind) {
    case KESTREL_OP_IM2COL: {
      if (op.num_inputs != 1 || op.num_outputs != 1 || in.rank != 4 || out.rank != 3) return false;
      WindowGeometry g = window_geometry(*p, in);
      return g.oh >= 1 && g.ow >= 1 && out.shape[0] == g.n && out.shape[1] == g.c * taps && out.shape[2] == g.oh * g.ow;
    }
    case KESTREL_OP_COL2IM: {
      if (op.num_inputs != 1 || op.num_outputs != 1 || in.rank != 3 || out.rank != 4) return false;
      WindowGeometry g = window_geometry(*p, out);
      return g.oh >= 1 && g.ow >= 1 && in.shape[0] == g.n && in.shape[1] == g.c * taps && in.shape[2] == g.oh * g.ow;
    }
    case KESTREL_OP_POOL2D: {
      if (op.num_inputs != 1 || op.num_outputs != (max ? 2 : 1) || in.rank != 4) return false;
      WindowGeometry g = window_geometry(*p, in);
      if (g.oh < 1 || g.ow < 1 || !shape4(out, g.n, g.c, g.oh, g.ow)) return false;
      return !max || (op.outputs[1].dtype == KESTREL_DTYPE_I64 && same_shape(op.outputs[1], out));
    }
    case KESTREL_OP_POOL2D_BACKWARD: {
      if (op.num_inputs != (max ? 2 : 1) || op.num_outputs != 1 || out.rank != 4) return false;
      WindowGeometry g = window_geometry(*p, out);
      if (g.oh < 1 || g.ow < 1 || !shape4(in, g.n, g.c, g.oh, g.ow)) return false;
      return !max || (op.inputs[1].dtype == KESTREL_DTYPE_I64 && same_shape(op.inputs[1], in));
    }
    default: return false;
  }
}

// ---- convolution (1.10) ----

// The geometry of a convolution of x (N,C,H,W) with a weight (O,C,KH,KW): the window the weight spans
// with the op's steps (c is the input's channels; the output's are the weight's O).
inline WindowGeometry conv_geometry(const kestrel_conv_params& p, const kestrel_tensor& x, const kestrel_tensor& weight) {
  WindowGeometry g{x.shape[0], x.shape[1], x.shape[2], x.shape[3], 0, 0, int(weight.shape[2]), int(weight.shape[3]),
                   p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w};
  g.oh = window_output_extent(g.h, g.kh, g.sh, g.ph, g.dh);
  g.ow = window_output_extent(g.w, g.kw, g.sw, g.pw, g.dw);
  return g;
}

// CONV2D: in0 x (N,C,H,W), in1 weight (O,C,KH,KW) [, in2 bias (O)] -> out0 y (N,O,OH,OW).
// CONV2D_BACKWARD_DATA: in0 dy (N,O,OH,OW), in1 weight [, in2 y] -> out0 dx (N,C,H,W).
// CONV2D_BACKWARD_FILTER: in0 dy, in1 x [, in2 y] -> out0 dweight (O,C,KH,KW) [, out1 dbias (O)].
// The backward ops take y exactly when the activation is RELU. One float dtype throughout; at least one
// output pixel.
inline bool conv_fits(const kestrel_op& op) {
  auto* p = params<kestrel_conv_params>(op);
  if (!p || p->stride_h < 1 || p->stride_w < 1 || p->pad_h < 0 || p->pad_w < 0 || p->dilation_h < 1 ||
      p->dilation_w < 1 || (p->activation != KESTREL_ACTIVATION_NONE && p->activation != KESTREL_ACTIVATION_RELU))
    return false;
  if (op.num_inputs < 2 || op.num_outputs < 1) return false;
  const kestrel_dtype dtype = op.outputs[0].dtype;
  if (!is_float_dtype(dtype)) return false;
  for (int i = 0; i < op.num_inputs; ++i)
    if (op.inputs[i].dtype != dtype) return false;
  for (int i = 0; i < op.num_outputs; ++i)
    if (op.outputs[i].dtype != dtype) return false;
  // Which tensor is x, which the weight and which dy, by op kind.
  const kestrel_tensor *x = nullptr, *weight = nullptr, *y = nullptr;
  switch (op.kind) {
    case KESTREL_OP_CONV2D:
      if (op.num_inputs > 3 || op.num_outputs != 1) return false;
      x = &op.inputs[0], weight = &op.inputs[1], y = &op.outputs[0];
      break;
    case KESTREL_OP_CONV2D_BACKWARD_DATA:
      if (op.num_outputs != 1) return false;
      y = &op.inputs[0], weight = &op.inputs[1], x = &op.outputs[0];
      break;
    case KESTREL_OP_CONV2D_BACKWARD_FILTER:
      if (op.num_outputs > 2) return false;
      y = &op.inputs[0], x = &op.inputs[1], weight = &op.outputs[0];
      break;
    default: return false;
  }
  if (op.kind != KESTREL_OP_CONV2D) {
    const bool relu = p->activation == KESTREL_ACTIVATION_RELU;
    if (op.num_inputs != (relu ? 3 : 2) || (relu && !same_shape(op.inputs[2], op.inputs[0]))) return false;
  }
  if (x->rank != 4 || weight->rank != 4 || weight->shape[1] != x->shape[1] || weight->shape[2] < 1 ||
      weight->shape[3] < 1)
    return false;
  const WindowGeometry g = conv_geometry(*p, *x, *weight);
  if (g.oh < 1 || g.ow < 1 || !shape4(*y, g.n, weight->shape[0], g.oh, g.ow)) return false;
  const bool bias = (op.kind == KESTREL_OP_CONV2D && op.num_inputs == 3) ||
                    (op.kind == KESTREL_OP_CONV2D_BACKWARD_FILTER && op.num_outputs == 2);
  const kestrel_tensor* b = op.kind == KESTREL_OP_CONV2D ? &op.inputs[2] : &op.outputs[1];
  return !bias || (b->rank == 1 && b->shape[0] == weight->shape[0]);
}

}  // namespace kestrel::plugin_shapes

#endif  // KESTREL_PLUGIN_SHAPES_HPP
