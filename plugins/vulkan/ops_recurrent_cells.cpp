// The fused recurrent cells, forward and backward: the LSTM's (shaders/lstm_cell.comp, ABI 1.7) and the
// GRU's (shaders/gru_cell.comp, 1.9). One dispatch per step of a layer instead of a dozen element-wise
// ones, so an LSTM layer's steps run as one node in the engine (engine/src/autograd/lstm_sequence.cpp).
// Rows may be strided: a step's slice of a whole sequence.
#include "vk_ops.hpp"

namespace kestrel_vk {

namespace {

// One dispatch of `shader` over the (N, H) cells of `state`: tensor k (inputs, then outputs) gets its
// offset and row stride in ints[2k], ints[2k + 1] and its buffer in binding k + 1 (launch checked that
// each lies inside one binding).
void run_cells(kestrel_stream* stream, const kestrel_op& op, const std::string& shader, const kestrel_tensor& state) {
  const int64_t cells = state.shape[0] * state.shape[1];
  if (cells == 0) return;
  Dispatch d;
  d.shader = shader + dtype_suffix(state.dtype);
  int k = 0;
  auto bind = [&](const kestrel_tensor& t) {
    d.params.ints[2 * k] = static_cast<int32_t>(t.offset);
    d.params.ints[2 * k + 1] = static_cast<int32_t>(t.shape[0] > 1 ? t.strides[0] : 0);
    d.buffers[k++] = t.buffer;
  };
  for (int i = 0; i < op.num_inputs; ++i) bind(op.inputs[i]);
  for (int i = 0; i < op.num_outputs; ++i) bind(op.outputs[i]);
  d.params.uints[0] = static_cast<uint32_t>(cells);
  d.params.uints[1] = static_cast<uint32_t>(state.shape[1]);
  set_flat_grid(stream->context, d, static_cast<uint64_t>(cells));
  run(stream, {d});
}

}  // namespace

// LSTM_CELL: in0, in1 (N,4H), in2 c (N,H) -> out0 h', out1 c' (N,H), out2 gates (N,4H). LSTM_CELL_BACKWARD:
// in0 dh', in1 dc' (N,H), in2 gates (N,4H), in3 c, in4 c' (N,H) -> out0 dgates (N,4H), out1 dc (N,H).
bool supports_lstm_cell(const kestrel_op& op, uint32_t dtypes) {
  return kestrel::plugin_shapes::lstm_cell_fits(op) && float_dtype(op.outputs[0].dtype) &&
         in_mask(dtypes, op.outputs[0].dtype);
}

void launch_lstm_cell(kestrel_stream* stream, const kestrel_op& op) {
  const bool backward = op.kind == KESTREL_OP_LSTM_CELL_BACKWARD;
  run_cells(stream, op, backward ? "lstm_cell_backward_" : "lstm_cell_", op.inputs[backward ? 3 : 2]);
}

// GRU_CELL: in0, in1 (N,3H), in2 h (N,H) -> out0 h' (N,H), out1 gates (N,3H). GRU_CELL_BACKWARD: in0 dh'
// (N,H), in1 gates, in2 the state's product (N,3H), in3 h (N,H) -> out0, out1 (N,3H), out2 dh (N,H).
bool supports_gru_cell(const kestrel_op& op, uint32_t dtypes) {
  return kestrel::plugin_shapes::gru_cell_fits(op) && float_dtype(op.outputs[0].dtype) &&
         in_mask(dtypes, op.outputs[0].dtype);
}

void launch_gru_cell(kestrel_stream* stream, const kestrel_op& op) {
  const bool backward = op.kind == KESTREL_OP_GRU_CELL_BACKWARD;
  run_cells(stream, op, backward ? "gru_cell_backward_" : "gru_cell_", op.inputs[backward ? 3 : 2]);
}

}  // namespace kestrel_vk
