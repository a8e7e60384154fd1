// Header-only helpers for plugin authors (C++): whether an op's descriptors are consistent with each
// other as plugin.h defines them — ranks, extents, index dtypes. They say nothing about what a backend
// can run (dtypes, strides, size limits): each plugin adds those checks itself. Like philox.h and
// half.h this depends on plugin.h alone, so every backend answers these questions the same way.
#ifndef KESTREL_PLUGIN_SHAPES_HPP
#define KESTREL_PLUGIN_SHAPES_HPP

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
