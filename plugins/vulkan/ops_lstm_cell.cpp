// The fused LSTM cell, forward and backward (shaders/lstm_cell.comp): one dispatch per step of a layer
// instead of a dozen element-wise ones, so an LSTM layer's steps run as one node in the engine
// (engine/src/autograd/lstm_sequence.cpp). Rows may be strided: a step's slice of a whole sequence.
#include "vk_ops.hpp"

namespace kestrel_vk {

// LSTM_CELL: in0, in1 (N,4H), in2 c (N,H) -> out0 h', out1 c' (N,H), out2 gates (N,4H). LSTM_CELL_BACKWARD:
// in0 dh', in1 dc' (N,H), in2 gates (N,4H), in3 c, in4 c' (N,H) -> out0 dgates (N,4H), out1 dc (N,H).
bool supports_lstm_cell(const kestrel_op& op, uint32_t dtypes) {
  return kestrel::plugin_shapes::lstm_cell_fits(op) && float_dtype(op.outputs[0].dtype) &&
         in_mask(dtypes, op.outputs[0].dtype);
}

void launch_lstm_cell(kestrel_stream* stream, const kestrel_op& op) {
  const bool backward = op.kind == KESTREL_OP_LSTM_CELL_BACKWARD;
  const kestrel_tensor& c = op.inputs[backward ? 3 : 2];
  const int64_t cells = c.shape[0] * c.shape[1];
  if (cells == 0) return;
  Dispatch d;
  d.shader = std::string(backward ? "lstm_cell_backward_" : "lstm_cell_") + dtype_suffix(c.dtype);
  // Tensor k (inputs, then outputs): its offset and row stride in ints[2k], ints[2k + 1], its buffer in
  // binding k + 1. (launch checked that each lies inside one binding.)
  int k = 0;
  auto bind = [&](const kestrel_tensor& t) {
    d.params.ints[2 * k] = static_cast<int32_t>(t.offset);
    d.params.ints[2 * k + 1] = static_cast<int32_t>(t.shape[0] > 1 ? t.strides[0] : 0);
    d.buffers[k++] = t.buffer;
  };
  for (int i = 0; i < op.num_inputs; ++i) bind(op.inputs[i]);
  for (int i = 0; i < op.num_outputs; ++i) bind(op.outputs[i]);
  d.params.uints[0] = static_cast<uint32_t>(cells);
  d.params.uints[1] = static_cast<uint32_t>(c.shape[1]);
  set_flat_grid(stream->context, d, static_cast<uint64_t>(cells));
  run(stream, {d});
}

}  // namespace kestrel_vk
