// Reductions over any set of axes (out has in's rank, extent 1 on each reduced axis) and argmax over
// one axis (shaders/reduce.comp). One workgroup per output element, folding its reduced elements through
// its subgroups where they can (shaders/workgroup_fold.glsl), else a shared-memory tree. f16 inputs are
// summed in an f32 accumulator.
#include "kestrel/plugin_shapes.hpp"
#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

constexpr int64_t kMaxReducedElements = int64_t{1} << 22;  // 16384 iterations per invocation

// The input over its kept axes, the output over the same axes, and the input over its reduced axes
// (offset 0: the shader adds it to the kept offset).
struct ReduceViews {
  TensorDesc kept_in{}, kept_out{}, reduced{};
};

ReduceViews split_axes(const kestrel_tensor& in, const kestrel_tensor& out) {
  ReduceViews v;
  v.kept_in.offset = static_cast<uint32_t>(in.offset);
  v.kept_out.offset = static_cast<uint32_t>(out.offset);
  v.kept_in.numel = v.kept_out.numel = v.reduced.numel = 1;
  for (int d = 0; d < in.rank; ++d) {
    const auto extent = static_cast<uint32_t>(in.shape[d]);
    if (out.shape[d] == 1 && in.shape[d] != 1) {
      v.reduced.shape[v.reduced.rank] = extent;
      v.reduced.strides[v.reduced.rank++] = static_cast<uint32_t>(in.strides[d]);
      v.reduced.numel *= extent;
    } else {
      v.kept_in.shape[v.kept_in.rank] = v.kept_out.shape[v.kept_out.rank] = extent;
      v.kept_in.strides[v.kept_in.rank++] = static_cast<uint32_t>(in.strides[d]);
      v.kept_out.strides[v.kept_out.rank++] = static_cast<uint32_t>(out.strides[d]);
      v.kept_in.numel *= extent;
    }
  }
  v.kept_out.numel = v.kept_in.numel;
  return v;
}

}  // namespace

const char* subgroup_variant(const kestrel_context* context) {
  return context->physical->subgroup_folds ? "_subgroups" : "";
}

bool supports_reduce(const kestrel_op& op, uint32_t dtypes) {
  if (!kestrel::plugin_shapes::reduce_fits(op)) return false;
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  if (!in_mask(dtypes, in.dtype) || !in_mask(dtypes, out.dtype)) return false;
  // Each invocation folds count / 256 elements; lavapipe ends loops after 65535 iterations, so very long
  // reductions are declined rather than computed wrong.
  return kestrel::plugin_shapes::reduce_shape(in, out).count <= kMaxReducedElements;
}

void launch_reduce(kestrel_stream* stream, const kestrel_op& op) {
  const auto fn = params_of<kestrel_reduce_params>(op, "reduce").fn;
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  const int64_t outputs = numel(out);
  if (outputs == 0) return;
  const ReduceViews views = split_axes(in, out);
  Dispatch d;
  d.shader = std::string(fn == KESTREL_REDUCE_ARGMAX ? "argmax_" : "reduce_") + dtype_suffix(in.dtype);
  if (fn != KESTREL_REDUCE_ARGMAX && float_dtype(in.dtype)) d.shader += subgroup_variant(stream->context);
  d.params.tensors[0] = views.kept_in;
  d.params.tensors[1] = views.kept_out;
  d.params.tensors[2] = views.reduced;
  d.params.ints[0] = fn;
  d.buffers[0] = in.buffer;
  d.buffers[1] = out.buffer;
  // One workgroup per output, in rows that respect the device's grid limits.
  const uint32_t* limits = stream->context->physical->properties.limits.maxComputeWorkGroupCount;
  const uint64_t x = std::min<uint64_t>(static_cast<uint64_t>(outputs), limits[0]);
  const uint64_t y = (static_cast<uint64_t>(outputs) + x - 1) / x;
  if (y > limits[1]) fail("reduce: too many outputs for this Vulkan device's grid", KESTREL_STATUS_UNSUPPORTED);
  d.groups[0] = static_cast<uint32_t>(x);
  d.groups[1] = static_cast<uint32_t>(y);
  run(stream, {d});
}

}  // namespace kestrel_vk
