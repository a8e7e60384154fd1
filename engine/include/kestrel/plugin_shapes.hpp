// Header-only helpers for plugin authors (C++): whether an op's descriptors are consistent with each
// other as plugin.h defines them — ranks, extents, index dtypes. They say nothing about what a backend
// can run (dtypes, strides, size limits): each plugin adds those checks itself. It also names the op
// family and the name of each op kind; the plugins' dispatch tables are indexed by family. Like philox.h and
// half.h this depends on plugin.h alone, so every backend answers these questions the same way.
#ifndef KESTREL_PLUGIN_SHAPES_HPP
#define KESTREL_PLUGIN_SHAPES_HPP

#include <cstddef>
#include <cstdint>

#include "kestrel/plugin.h"

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

inline bool same_shape(const kestrel_tensor& a, const kestrel_tensor& b) {
  if (a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
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
// argmax reduces at most one non-empty axis into i64, the others keep the input's dtype, and max/min
// need a non-empty axis.
inline bool reduce_fits(const kestrel_op& op) {
  auto* p = static_cast<const kestrel_reduce_params*>(op.params);
  if (!p || op.num_inputs != 1 || op.num_outputs != 1) return false;
  if (p->fn < KESTREL_REDUCE_SUM || p->fn > KESTREL_REDUCE_ARGMAX) return false;
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  const ReduceShape r = reduce_shape(in, out);
  if (!r.ok) return false;
  if (p->fn == KESTREL_REDUCE_ARGMAX) return out.dtype == KESTREL_DTYPE_I64 && r.reduced <= 1 && r.count > 0;
  if (out.dtype != in.dtype) return false;
  int64_t elements = 1;
  for (int d = 0; d < in.rank; ++d) elements *= in.shape[d];
  if (p->fn == KESTREL_REDUCE_MAX || p->fn == KESTREL_REDUCE_MIN) return elements == 0 || r.count > 0;
  return true;
}

// ---- op families: the kinds a plugin implements together, one supports/launch pair each ----

enum class OpFamily {
  fill, copy, unary, binary, reduce, gemm, gather, scatter_add, random, window, linear, softmax,
  softmax_cross_entropy, optimizer,
  count  // also the answer for a kind this header does not know (a newer ABI's)
};

inline OpFamily op_family(kestrel_op_kind kind) {
  switch (kind) {
    case KESTREL_OP_FILL: return OpFamily::fill;
    case KESTREL_OP_COPY: return OpFamily::copy;
    case KESTREL_OP_UNARY: return OpFamily::unary;
    case KESTREL_OP_BINARY: return OpFamily::binary;
    case KESTREL_OP_REDUCE: return OpFamily::reduce;
    case KESTREL_OP_GEMM: return OpFamily::gemm;
    case KESTREL_OP_GATHER: return OpFamily::gather;
    case KESTREL_OP_SCATTER_ADD: return OpFamily::scatter_add;
    case KESTREL_OP_RANDOM: return OpFamily::random;
    case KESTREL_OP_IM2COL: case KESTREL_OP_COL2IM: case KESTREL_OP_POOL2D: case KESTREL_OP_POOL2D_BACKWARD:
      return OpFamily::window;
    case KESTREL_OP_LINEAR: return OpFamily::linear;
    case KESTREL_OP_SOFTMAX: return OpFamily::softmax;
    case KESTREL_OP_SOFTMAX_CROSS_ENTROPY: return OpFamily::softmax_cross_entropy;
    case KESTREL_OP_ADAM_UPDATE: case KESTREL_OP_SGD_UPDATE: return OpFamily::optimizer;
  }
  return OpFamily::count;
}

// A plugin's dispatch table has one entry per OpFamily, in its order. A plugin that names its functions
// supports_<family> and launch_<family> writes it as
//   static const Entry table[] = {KESTREL_OP_FAMILY_TABLE};
// and family_entry() finds the entry for an op kind (nullptr for a kind this header does not know).
#define KESTREL_OP_FAMILY_TABLE                                                                          \
  {supports_fill, launch_fill}, {supports_copy, launch_copy}, {supports_unary, launch_unary},            \
      {supports_binary, launch_binary}, {supports_reduce, launch_reduce}, {supports_gemm, launch_gemm},  \
      {supports_gather, launch_gather}, {supports_scatter_add, launch_scatter_add},                      \
      {supports_random, launch_random}, {supports_window, launch_window},                                \
      {supports_linear, launch_linear}, {supports_softmax, launch_softmax},                              \
      {supports_softmax_cross_entropy, launch_softmax_cross_entropy}, {supports_optimizer, launch_optimizer}

template <class Entry, size_t N>
const Entry* family_entry(const Entry (&table)[N], kestrel_op_kind kind) {
  static_assert(N == size_t(OpFamily::count), "one entry per op family");
  const OpFamily family = op_family(kind);
  return family == OpFamily::count ? nullptr : &table[size_t(family)];
}

// The op kind's name as tools and messages show it (the engine's kestrel::op_kind_name returns this).
inline const char* op_kind_name(kestrel_op_kind kind) {
  switch (kind) {
    case KESTREL_OP_FILL: return "fill";
    case KESTREL_OP_COPY: return "copy";
    case KESTREL_OP_UNARY: return "unary";
    case KESTREL_OP_BINARY: return "binary";
    case KESTREL_OP_REDUCE: return "reduce";
    case KESTREL_OP_GEMM: return "gemm";
    case KESTREL_OP_GATHER: return "gather";
    case KESTREL_OP_SCATTER_ADD: return "scatter_add";
    case KESTREL_OP_RANDOM: return "random";
    case KESTREL_OP_IM2COL: return "im2col";
    case KESTREL_OP_COL2IM: return "col2im";
    case KESTREL_OP_POOL2D: return "pool2d";
    case KESTREL_OP_POOL2D_BACKWARD: return "pool2d_backward";
    case KESTREL_OP_LINEAR: return "linear";
    case KESTREL_OP_SOFTMAX: return "softmax";
    case KESTREL_OP_SOFTMAX_CROSS_ENTROPY: return "softmax_cross_entropy";
    case KESTREL_OP_ADAM_UPDATE: return "adam_update";
    case KESTREL_OP_SGD_UPDATE: return "sgd_update";
  }
  return "unknown-op";
}

// ---- random draws ----

// One output, a known distribution, and either no input or (ABI 1.1) one: the one-element i64 counter
// base read when the op runs.
inline bool random_fits(const kestrel_op& op) {
  auto* p = static_cast<const kestrel_random_params*>(op.params);
  if (!p || p->struct_size < sizeof(kestrel_random_params) || op.num_outputs != 1 || op.num_inputs > 1) return false;
  if (op.num_inputs == 1 && (op.inputs[0].dtype != KESTREL_DTYPE_I64 || numel(op.inputs[0]) != 1)) return false;
  return p->distribution >= KESTREL_DISTRIBUTION_UNIFORM && p->distribution <= KESTREL_DISTRIBUTION_BERNOULLI;
}

// ---- optimizer updates ----

// Adam: in0 param, in1 grad, in2 m, in3 v. SGD: in0 param, in1 grad [, in2 momentum buffer]. No outputs
// (updated in place); every input has the parameter's dtype and element count.
inline bool optimizer_fits(const kestrel_op& op) {
  if (!op.params || op.num_outputs != 0) return false;
  const int expected = op.kind == KESTREL_OP_ADAM_UPDATE ? 4 : (op.num_inputs == 3 ? 3 : 2);
  if (op.num_inputs != expected) return false;
  for (int i = 1; i < op.num_inputs; ++i)
    if (op.inputs[i].dtype != op.inputs[0].dtype || numel(op.inputs[i]) != numel(op.inputs[0])) return false;
  return true;
}

// ---- sliding windows: im2col, col2im, pool2d, pool2d_backward on (N, C, H, W) ----

struct WindowGeometry {
  int64_t n, c, h, w, oh, ow;
};

inline bool window_params_ok(const kestrel_window_params* p) {
  return p && p->struct_size >= sizeof(kestrel_window_params) && p->kernel_h >= 1 && p->kernel_w >= 1 &&
         p->stride_h >= 1 && p->stride_w >= 1 && p->pad_h >= 0 && p->pad_w >= 0 && p->dilation_h >= 1 &&
         p->dilation_w >= 1 && (p->mode == KESTREL_POOL_MAX || p->mode == KESTREL_POOL_AVG);
}

// The image is the (N, C, H, W) side of the op; OH and OW as plugin.h defines them.
inline WindowGeometry window_geometry(const kestrel_window_params& p, const kestrel_tensor& image) {
  WindowGeometry g{image.shape[0], image.shape[1], image.shape[2], image.shape[3], 0, 0};
  g.oh = (g.h + 2 * p.pad_h - int64_t(p.dilation_h) * (p.kernel_h - 1) - 1) / p.stride_h + 1;
  g.ow = (g.w + 2 * p.pad_w - int64_t(p.dilation_w) * (p.kernel_w - 1) - 1) / p.stride_w + 1;
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

}  // namespace kestrel::plugin_shapes

#endif  // KESTREL_PLUGIN_SHAPES_HPP
