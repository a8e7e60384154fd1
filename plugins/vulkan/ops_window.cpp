// Sliding-window ops on (N, C, H, W) tensors (shaders/window.comp): im2col/col2im (convolution as
// GEMM) and 2-D pooling forward and backward. Inputs may have any strides; outputs are contiguous.
#include "kestrel/plugin_shapes.hpp"
#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

using Geometry = kestrel::plugin_shapes::WindowGeometry;
constexpr auto geometry = kestrel::plugin_shapes::window_geometry;

void set_geometry(Params& params, const kestrel_window_params& p, const Geometry& g) {
  const int64_t values[15] = {g.n, g.c, g.h, g.w, g.oh, g.ow, p.kernel_h, p.kernel_w, p.stride_h,
                              p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.mode};
  for (int i = 0; i < 15; ++i) params.ints[i] = static_cast<int32_t>(values[i]);
}

// Loop iterations of one element of window.comp's pooling, col2im and pool2d_backward, each of which
// walks a window, for a software device's loop budget (set_flat_grid); and of one (n, c) plane of
// pool2d_backward's BY_PLANE variant, which clears the plane, then walks every output's window.
int64_t window_iterations(const kestrel_window_params& p) {
  return kFlatItemIterations + p.kernel_h * (1 + p.kernel_w);
}
int64_t plane_iterations(const kestrel_window_params& p, const Geometry& g) {
  const int64_t window = p.mode == KESTREL_POOL_MAX ? 1 : p.kernel_h * (1 + p.kernel_w);
  return kFlatItemIterations + g.h * (1 + g.w) + g.oh * (1 + g.ow * (1 + window));
}

}  // namespace

bool supports_window(const kestrel_op& op, uint32_t dtypes) {
  if (!kestrel::plugin_shapes::window_fits(op)) return false;
  const kestrel_tensor& out = op.outputs[0];
  // im2col and col2im also in 16 bits (a convolution's products under autocast); pooling in f32 only.
  const bool sixteen_bit = op.kind == KESTREL_OP_IM2COL || op.kind == KESTREL_OP_COL2IM;
  if (!(out.dtype == KESTREL_DTYPE_F32 || (sixteen_bit && float_dtype(out.dtype))) || !in_mask(dtypes, out.dtype) ||
      !is_contiguous(out))
    return false;
  // max pooling's argmax tensor is i64, which the device must offer; the pooled argmax is written contiguously
  const bool max_pool = op.kind == KESTREL_OP_POOL2D || op.kind == KESTREL_OP_POOL2D_BACKWARD
                            ? static_cast<const kestrel_window_params*>(op.params)->mode == KESTREL_POOL_MAX
                            : false;
  if (max_pool && !in_mask(dtypes, KESTREL_DTYPE_I64)) return false;
  return op.kind != KESTREL_OP_POOL2D || !max_pool || is_contiguous(op.outputs[1]);
}

void launch_window(kestrel_stream* stream, const kestrel_op& op) {
  const auto& p = params_of<kestrel_window_params>(op, "window op");
  const bool max = p.mode == KESTREL_POOL_MAX;
  const kestrel_tensor& out = op.outputs[0];
  Dispatch d;
  uint64_t invocations = static_cast<uint64_t>(numel(out));
  int64_t iterations_each = kFlatItemIterations;
  switch (op.kind) {
    case KESTREL_OP_IM2COL:
      d.shader = std::string("im2col_") + dtype_suffix(out.dtype);
      set_geometry(d.params, p, geometry(p, op.inputs[0]));
      break;
    case KESTREL_OP_COL2IM:
      d.shader = std::string("col2im_") + dtype_suffix(out.dtype);
      set_geometry(d.params, p, geometry(p, out));
      iterations_each = window_iterations(p);
      break;
    case KESTREL_OP_POOL2D:
      d.shader = "pool2d_f32";
      set_geometry(d.params, p, geometry(p, op.inputs[0]));
      iterations_each = window_iterations(p);
      if (max) {
        d.params.tensors[2] = describe(op.outputs[1]);
        d.buffers[2] = op.outputs[1].buffer;
      }
      break;
    default: {
      const Geometry g = geometry(p, out);
      set_geometry(d.params, p, g);
      // A plane per invocation on a software device while a plane fits its loop budget (the gather was
      // about 7x slower on lavapipe at the ConvNet's shapes, measured once); else one per dx element (out).
      const bool by_plane = software_device(stream->context) && plane_iterations(p, g) <= kMaxLoopIterations;
      d.shader = by_plane ? "pool2d_backward_planes_f32" : "pool2d_backward_f32";
      if (by_plane) invocations = static_cast<uint64_t>(g.n * g.c);
      iterations_each = by_plane ? plane_iterations(p, g) : window_iterations(p);
      d.params.tensors[0] = describe(op.inputs[0]);
      d.buffers[0] = op.inputs[0].buffer;
      if (max) {
        d.params.tensors[1] = describe(op.inputs[1]);
        d.buffers[1] = op.inputs[1].buffer;
      }
      d.params.tensors[2] = describe(out);
      d.buffers[2] = out.buffer;
      break;
    }
  }
  if (op.kind != KESTREL_OP_POOL2D_BACKWARD) {
    d.params.tensors[0] = describe(op.inputs[0]);
    d.params.tensors[1] = describe(out);
    d.buffers[0] = op.inputs[0].buffer;
    d.buffers[1] = out.buffer;
  }
  if (invocations == 0) return;
  set_flat_grid(stream->context, d, invocations, iterations_each);
  run(stream, {d});
}

}  // namespace kestrel_vk
