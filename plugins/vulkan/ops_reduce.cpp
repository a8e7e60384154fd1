// Reductions over any set of axes (out has in's rank, extent 1 on each reduced axis) and argmax over
// one axis (shaders/reduce.comp). One workgroup per output element, folding its reduced elements through
// its subgroups where they can (shaders/workgroup_fold.glsl), else a shared-memory tree. f16 inputs are
// summed in an f32 accumulator. Float reductions longer than kSplitLength take two passes: workgroups
// fold splits of each output into f32 partials, then one workgroup per output folds its partials. A
// full reduction of a flat gradient (f16 loss scaling's overflow check) thus spreads over the device
// instead of running in one workgroup, at any length.
#include "kestrel/plugin_shapes.hpp"
#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

constexpr int64_t kSplitLength = int64_t{1} << 16;  // 256 elements per invocation, in the first of two passes

// Lavapipe ends an invocation's loops after 65535 iterations in all, nested ones included. In one pass an
// invocation folds count / 256 elements, each an iteration plus one per reduced axis (element_offset's
// walk), and the workgroup's fold adds a few hundred; longer one-pass reductions (integers, argmax) are
// declined rather than computed wrong.
bool one_pass_fits(int64_t count, int reduced_axes) {
  return (count + kLocalSize - 1) / kLocalSize * (1 + reduced_axes) + 512 <= kMaxLoopIterations;
}

bool two_passes(kestrel_reduce_fn fn, kestrel_dtype dtype, int64_t count) {
  return fn != KESTREL_REDUCE_ARGMAX && float_dtype(dtype) && count > kSplitLength;
}

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

// Splits of kSplitLength elements folded into (splits, outputs) f32 partials, then each output's column.
void launch_two_passes(kestrel_stream* stream, const kestrel_op& op, const ReduceViews& views, kestrel_reduce_fn fn) {
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  const int64_t outputs = numel(out), count = views.reduced.numel;
  const int64_t splits = (count + kSplitLength - 1) / kSplitLength;
  std::unique_ptr<kestrel_buffer, ReleasedInOrder> partials(
      allocate_buffer(stream->context, uint64_t(outputs * splits) * sizeof(float)));
  Dispatch fold;
  fold.shader = std::string("reduce_split_") + dtype_suffix(in.dtype) + subgroup_variant(stream->context);
  fold.params.ints[0] = fn;
  fold.params.ints[1] = static_cast<int32_t>(kSplitLength);
  fold.params.ints[2] = static_cast<int32_t>(splits);
  fold.params.tensors[0] = views.kept_in;
  fold.params.tensors[1] = views.kept_out;
  fold.params.tensors[2] = views.reduced;
  fold.buffers[0] = in.buffer;
  fold.buffers[1] = partials.get();
  set_workgroup_grid(stream->context, fold, uint64_t(outputs * splits));
  // The partials of a sum of squares are sums already.
  const kestrel_reduce_fn partials_fn = fn == KESTREL_REDUCE_SUM_SQUARES ? KESTREL_REDUCE_SUM : fn;
  run(stream, {fold, fold_slices(stream, partials.get(), views.kept_out, splits, out, partials_fn, count)});
}

}  // namespace

const char* subgroup_variant(const kestrel_context* context) {
  return context->physical->subgroup_folds ? "_subgroups" : "";
}

bool supports_reduce(const kestrel_op& op, uint32_t dtypes) {
  if (!kestrel::plugin_shapes::reduce_fits(op)) return false;
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  if (!in_mask(dtypes, in.dtype) || !in_mask(dtypes, out.dtype)) return false;
  const auto shape = kestrel::plugin_shapes::reduce_shape(in, out);
  return two_passes(params_of<kestrel_reduce_params>(op, "reduce").fn, in.dtype, shape.count) ||
         one_pass_fits(shape.count, shape.reduced);
}

Dispatch fold_slices(kestrel_stream* stream, kestrel_buffer* partials, const TensorDesc& result, int64_t slices,
                     const kestrel_tensor& out, kestrel_reduce_fn fn, int64_t count) {
  const auto outputs = static_cast<uint32_t>(result.numel);
  Dispatch d;
  d.shader = std::string("reduce_partials_") + dtype_suffix(out.dtype);
  d.params.ints[0] = fn;
  d.params.ints[3] = static_cast<int32_t>(count);
  TensorDesc &rows = d.params.tensors[0], &row = d.params.tensors[2];
  rows.rank = row.rank = 1;
  rows.numel = rows.shape[0] = outputs;
  rows.strides[0] = 1;
  rows.contiguous = 1;
  d.params.tensors[1] = result;
  row.numel = row.shape[0] = static_cast<uint32_t>(slices);
  row.strides[0] = outputs;  // slice s of output o at s * outputs + o
  d.buffers[0] = partials;
  d.buffers[1] = out.buffer;
  set_workgroup_grid(stream->context, d, outputs);
  return d;
}

void launch_reduce(kestrel_stream* stream, const kestrel_op& op) {
  const auto fn = params_of<kestrel_reduce_params>(op, "reduce").fn;
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  const int64_t outputs = numel(out);
  if (outputs == 0) return;
  const ReduceViews views = split_axes(in, out);
  if (two_passes(fn, in.dtype, views.reduced.numel)) return launch_two_passes(stream, op, views, fn);
  Dispatch d;
  d.shader = std::string(fn == KESTREL_REDUCE_ARGMAX ? "argmax_" : "reduce_") + dtype_suffix(in.dtype);
  if (fn != KESTREL_REDUCE_ARGMAX && float_dtype(in.dtype)) d.shader += subgroup_variant(stream->context);
  d.params.tensors[0] = views.kept_in;
  d.params.tensors[1] = views.kept_out;
  d.params.tensors[2] = views.reduced;
  d.params.ints[0] = fn;
  d.buffers[0] = in.buffer;
  d.buffers[1] = out.buffer;
  set_workgroup_grid(stream->context, d, uint64_t(outputs));  // one workgroup per output
  run(stream, {d});
}

}  // namespace kestrel_vk
