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

// in0 logits (N, C) f32, in1 labels (N) i32/i64 -> out0 loss (N) [, out1 dlogits (N, C)]
bool supports_softmax_cross_entropy(const kestrel_op& op, uint32_t dtypes) {
  if (!kestrel::plugin_shapes::softmax_cross_entropy_fits(op) || !all_contiguous(op)) return false;
  const kestrel_tensor &logits = op.inputs[0], &labels = op.inputs[1];
  return logits.dtype == KESTREL_DTYPE_F32 && in_mask(dtypes, logits.dtype) && in_mask(dtypes, labels.dtype) &&
         logits.shape[1] <= kMaxColumns;
}

void launch_softmax_cross_entropy(kestrel_stream* stream, const kestrel_op& op) {
  const kestrel_tensor &logits = op.inputs[0], &labels = op.inputs[1];
  const int64_t rows = logits.shape[0], cols = logits.shape[1];
  if (rows == 0) return;
  // Labels are checked on the device without waiting (words 4..7 of the stream's flags): a bad one is
  // reported at the stream's next sync point, and its rows come out NaN instead of reading astray.
  record_index_check(stream, labels, cols, 4);
  Dispatch d;
  d.shader = std::string("softmax_cross_entropy_f32_") + dtype_suffix(labels.dtype) + subgroup_variant(stream->context);
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
