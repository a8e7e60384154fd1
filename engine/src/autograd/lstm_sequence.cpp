// An LSTM layer's whole sequence as one autograd node over ops the device runs: forward, per step, one
// GEMM for the hidden product and the fused cell (LSTM_CELL, ABI 1.7); backward, per step in reverse,
// the cell's backward and one GEMM adding the step's share into the previous step's output gradient.
// Composed step by step (recurrent.cpp) the same layer is a dozen autograd nodes per step, and its
// backward adds zero-filled buffers, copies and additions around every step's two real ops: on
// lstm_generator's CPU step they cost more than the cell itself. Each step reads and writes its slice
// of sequence-wide tensors in place (rows strided by T), so nothing is stacked or copied per step.
#include <utility>

#include "autocast.h"
#include "kestrel/ops.h"
#include "recurrent_steps.h"
#include "weight_grad.h"

namespace kestrel::fn {

std::optional<Var> fused_lstm_sequence(const Var& projected, const Var& weight_hh, const Tensor& h0, const Tensor& c0,
                                       bool reverse, RecurrentState* state) {
  const Tensor& input = projected.value();  // (N, T, 4H)
  const Tensor& weight = weight_hh.value();  // (4H, H)
  const DType dtype = input.dtype();
  if (!ops::fused_ops_enabled() || autocasts(Var(h0)) || weight.dtype() != dtype || h0.dtype() != dtype ||
      c0.dtype() != dtype || input.size(1) == 0)
    return std::nullopt;
  const Device device = input.device();
  const int64_t batch = input.size(0), steps = input.size(1), hidden = weight.size(1);
  Tensor outputs = Tensor::empty({batch, steps, hidden}, dtype, device);  // h after each step
  Tensor cells = Tensor::empty({batch, steps, hidden}, dtype, device);    // c after each step
  Tensor gates = Tensor::empty({batch, steps, 4 * hidden}, dtype, device);
  Tensor recurrent = Tensor::empty({batch, 4 * hidden}, dtype, device);  // this step's h W_hh^T
  auto time = [steps, reverse](int64_t k) { return reverse ? steps - 1 - k : k; };  // step k's position
  auto cell_before = [=](int64_t k) { return k == 0 ? c0 : cells.select(1, time(k - 1)); };
  auto cell_op = [&](int64_t k) {
    const int64_t t = time(k);
    return ops::make_op(KESTREL_OP_LSTM_CELL, nullptr, {input.select(1, t), recurrent, cell_before(k)},
                        {outputs.select(1, t), cells.select(1, t), gates.select(1, t)});
  };
  // Backward's descriptor, forward's tensors standing in for the gradients (same shapes and dtypes).
  const kestrel_op backward_shape = ops::make_op(
      KESTREL_OP_LSTM_CELL_BACKWARD, nullptr,
      {outputs.select(1, 0), c0, gates.select(1, 0), c0, cells.select(1, 0)}, {gates.select(1, 0), c0});
  if (!ops::supports(device, backward_shape) || !ops::supports(device, cell_op(0))) return std::nullopt;

  const Tensor weight_t = weight.transpose(0, 1);  // (H, 4H)
  for (int64_t k = 0; k < steps; ++k) {
    const Tensor h = k == 0 ? h0 : outputs.select(1, time(k - 1));  // (N, H)
    ops::gemm_(recurrent, h, weight_t);
    ops::launch(device, cell_op(k));
  }
  if (state) *state = {outputs.select(1, time(steps - 1)).contiguous(), cells.select(1, time(steps - 1)).contiguous()};

  return make_var(outputs, {projected, weight_hh}, "lstm",
                  [input = projected.node(), w = weight_hh.node(), outputs, cells, gates, h0, time, cell_before,
                   reverse](const Tensor& dy) {  // (N, T, H)
                    const int64_t steps = outputs.size(1), hidden = outputs.size(2);
                    const Device device = outputs.device();
                    // Every step's output gradient, the later steps' shares added in as they come.
                    Tensor dh = Tensor::empty(outputs.shape(), outputs.dtype(), device);
                    ops::copy_(dh, dy);
                    Tensor dgates = Tensor::empty(gates.shape(), gates.dtype(), device);  // (N, T, 4H)
                    // The cell's gradient into the step being undone, and out of it (no aliasing in ops).
                    Tensor dc_in = Tensor::zeros({outputs.size(0), hidden}, outputs.dtype(), device);
                    Tensor dc_out = Tensor::empty(dc_in.shape(), dc_in.dtype(), device);
                    for (int64_t k = steps - 1; k >= 0; --k) {
                      const int64_t t = time(k);
                      ops::launch(device, ops::make_op(KESTREL_OP_LSTM_CELL_BACKWARD, nullptr,
                                                       {dh.select(1, t), dc_in, gates.select(1, t), cell_before(k),
                                                        cells.select(1, t)},
                                                       {dgates.select(1, t), dc_out}));
                      std::swap(dc_in, dc_out);
                      if (k == 0) break;
                      Tensor earlier = dh.select(1, time(k - 1));
                      ops::gemm_(earlier, dgates.select(1, t), w->value, 1.0, 1.0);  // += dgates W_hh
                    }
                    if (input->requires_grad) accumulate_grad(*input, dgates);
                    if (!w->requires_grad) return;
                    // dW_hh = dgates^T H_start over all N*T rows: one GEMM with K = N*T.
                    const Tensor starts = start_states(outputs, h0, reverse).reshape({-1, hidden});  // (N*T, H)
                    accumulate_product(*w, dgates.reshape({-1, 4 * hidden}).transpose(0, 1), starts);
                  });
}

}  // namespace kestrel::fn
