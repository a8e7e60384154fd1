// Fused softmax / log_softmax over the last axis and softmax cross-entropy (shaders/softmax.comp):
// one workgroup per contiguous row.
#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

// Each of a row's 256 invocations walks cols / 256 elements, up to four times (maximum, sum, and the
// outputs; cross-entropy's target pass); lavapipe ends an invocation's loops after 65535 iterations in
// all, so longer rows are declined (the engine composes them from reductions).
constexpr int64_t kMaxColumns = int64_t{kLocalSize} * 16000;

}  // namespace

bool supports_softmax(const kestrel_op& op, uint32_t dtypes) {
  if (!kestrel::plugin_shapes::softmax_fits(op) || !all_contiguous(op)) return false;
  const kestrel_tensor& in = op.inputs[0];
  return in.dtype == KESTREL_DTYPE_F32 && in_mask(dtypes, in.dtype) && in.shape[in.rank - 1] <= kMaxColumns;
}

void launch_softmax(kestrel_stream* stream, const kestrel_op& op) {
  const bool log = params_of<kestrel_softmax_params>(op, "softmax").log != 0;
  const kestrel_tensor &in = op.inputs[0], &out = op.outputs[0];
  const int64_t cols = in.shape[in.rank - 1];
  if (cols == 0 || numel(in) == 0) return;
  const int64_t rows = numel(in) / cols;
  Dispatch d;
  d.shader = std::string("softmax_f32") + subgroup_variant(stream->context);
  d.params.tensors[0].offset = static_cast<uint32_t>(in.offset);
  d.params.tensors[1].offset = static_cast<uint32_t>(out.offset);
  d.params.uints[0] = static_cast<uint32_t>(cols);
  d.params.uints[1] = static_cast<uint32_t>(rows);
  d.params.ints[0] = log ? 1 : 0;
  d.buffers[0] = in.buffer;
  d.buffers[1] = out.buffer;
  set_workgroup_grid(stream->context, d, static_cast<uint64_t>(rows));  // one workgroup per row
  run(stream, {d});
}

namespace {

// SOFTMAX_CROSS_ENTROPY_BACKWARD: in0 logits (N, C), in1 labels (N), in2 scales (N) f32 -> out0 dlogits
// (N, C) = (softmax - onehot) * scale.
bool supports_cross_entropy_backward(const kestrel_op& op, uint32_t dtypes) {
  if (!kestrel::plugin_shapes::softmax_cross_entropy_backward_fits(op) ||
      !kestrel::plugin_shapes::softmax_cross_entropy_backward_dense(op))
    return false;
  const kestrel_tensor &logits = op.inputs[0], &labels = op.inputs[1];
  return float_dtype(logits.dtype) && in_mask(dtypes, logits.dtype) && in_mask(dtypes, labels.dtype) && logits.shape[1] <= kMaxColumns;
}

void launch_cross_entropy_backward(kestrel_stream* stream, const kestrel_op& op) {
  const kestrel_tensor &logits = op.inputs[0], &labels = op.inputs[1], &scales = op.inputs[2], &grad = op.outputs[0];
  const int64_t rows = logits.shape[0], cols = logits.shape[1];
  if (rows == 0) return;
  Dispatch d;
  d.shader = std::string("cross_entropy_backward_") + dtype_suffix(logits.dtype) + "_" + dtype_suffix(labels.dtype) +
             subgroup_variant(stream->context);
  const kestrel_tensor* tensors[] = {&logits, &labels, &scales, &grad};
  for (int t = 0; t < 4; ++t) {
    d.params.tensors[t].offset = static_cast<uint32_t>(tensors[t]->offset);
    d.buffers[t] = tensors[t]->buffer;
  }
  d.params.uints[0] = static_cast<uint32_t>(cols);
  d.params.uints[1] = static_cast<uint32_t>(rows);
  d.params.uints[2] = scales.strides[0] == 0 ? 0u : 1u;
  set_workgroup_grid(stream->context, d, static_cast<uint64_t>(rows));  // one workgroup per row
  run(stream, {d});
}

}  // namespace

// SOFTMAX_CROSS_ENTROPY: in0 logits (N, C) f32 (or 16-bit with an f32 loss), in1 labels (N) i32/i64 ->
// out0 loss (N) [, out1 dlogits (N, C)]; and its backward above.
bool supports_softmax_cross_entropy(const kestrel_op& op, uint32_t dtypes) {
  if (op.kind == KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD) return supports_cross_entropy_backward(op, dtypes);
  if (!kestrel::plugin_shapes::softmax_cross_entropy_fits(op) || !all_contiguous(op)) return false;
  const kestrel_tensor &logits = op.inputs[0], &labels = op.inputs[1], &loss = op.outputs[0];
  return float_dtype(logits.dtype) && in_mask(dtypes, logits.dtype) && loss.dtype == KESTREL_DTYPE_F32 && in_mask(dtypes, labels.dtype) &&
         logits.shape[1] <= kMaxColumns;
}

void launch_softmax_cross_entropy(kestrel_stream* stream, const kestrel_op& op) {
  if (op.kind == KESTREL_OP_SOFTMAX_CROSS_ENTROPY_BACKWARD) return launch_cross_entropy_backward(stream, op);
  const kestrel_tensor &logits = op.inputs[0], &labels = op.inputs[1];
  const int64_t rows = logits.shape[0], cols = logits.shape[1];
  if (rows == 0) return;
  // Labels are checked on the device without waiting (words 4..7 of the stream's flags): a bad one is
  // reported at the stream's next sync point, and its rows come out NaN instead of reading astray.
  record_index_check(stream, labels, cols, 4);
  Dispatch d;
  d.shader = std::string("softmax_cross_entropy_") + dtype_suffix(logits.dtype) + "_" + dtype_suffix(labels.dtype) +
             subgroup_variant(stream->context);
  d.params.tensors[0].offset = static_cast<uint32_t>(logits.offset);
  d.params.tensors[1].offset = static_cast<uint32_t>(labels.offset);
  d.params.tensors[2].offset = static_cast<uint32_t>(op.outputs[0].offset);
  d.params.uints[0] = static_cast<uint32_t>(cols);
  d.params.uints[1] = static_cast<uint32_t>(rows);
  d.buffers[0] = logits.buffer;
  d.buffers[1] = labels.buffer;
  d.buffers[2] = op.outputs[0].buffer;
  if (op.num_outputs == 2) {
    d.params.ints[0] = 1;
    d.params.tensors[3].offset = static_cast<uint32_t>(op.outputs[1].offset);
    d.buffers[3] = op.outputs[1].buffer;
  }
  set_workgroup_grid(stream->context, d, static_cast<uint64_t>(rows));  // one workgroup per row
  run(stream, {d});
}

}  // namespace kestrel_vk
