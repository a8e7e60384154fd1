// A GRU layer's whole sequence as one autograd node, as lstm_sequence.cpp is the LSTM's: forward, per
// step, one GEMM for the state's product (bias_hh preloaded) and the fused cell (GRU_CELL, ABI 1.9);
// backward, per step in reverse, the cell's backward, then the direct share z * dh' and one GEMM adding
// the step's share into the previous step's output gradient. Unlike the LSTM's, the state's product
// gets a gradient of its own (the reset gate scales its candidate block), so every step's product is
// kept, and weight_hh and bias_hh get theirs from one GEMM and one sum over all N*T rows.
#include <utility>
#include <vector>

#include "autocast.h"
#include "kestrel/ops.h"
#include "recurrent_steps.h"
#include "weight_grad.h"

namespace kestrel::fn {

std::optional<Var> fused_gru_sequence(const Var& projected, const Var& weight_hh, const Var& bias_hh, const Tensor& h0,
                                      bool reverse, RecurrentState* state) {
  const Tensor& input = projected.value();  // (N, T, 3H), bias_ih included
  const Tensor& weight = weight_hh.value();  // (3H, H)
  const DType dtype = input.dtype();
  if (!ops::fused_ops_enabled() || autocasts(Var(h0)) || weight.dtype() != dtype || h0.dtype() != dtype ||
      (bias_hh.defined() && bias_hh.value().dtype() != dtype) || input.size(1) == 0)
    return std::nullopt;
  const Device device = input.device();
  const int64_t batch = input.size(0), steps = input.size(1), hidden = weight.size(1);
  Tensor outputs = Tensor::empty({batch, steps, hidden}, dtype, device);        // h after each step
  Tensor gates = Tensor::empty({batch, steps, 3 * hidden}, dtype, device);      // r, z, n of each step
  Tensor recurrents = Tensor::empty({batch, steps, 3 * hidden}, dtype, device);  // h W_hh^T + b_hh per step
  auto time = [steps, reverse](int64_t k) { return reverse ? steps - 1 - k : k; };  // step k's position
  auto state_before = [=](int64_t k) { return k == 0 ? h0 : outputs.select(1, time(k - 1)); };
  auto cell_op = [&](int64_t k) {
    const int64_t t = time(k);
    return ops::make_op(KESTREL_OP_GRU_CELL, nullptr, {input.select(1, t), recurrents.select(1, t), state_before(k)},
                        {outputs.select(1, t), gates.select(1, t)});
  };
  // Backward's descriptor, forward's tensors standing in for the gradients (same shapes and dtypes).
  const Tensor gates0 = gates.select(1, 0), state0 = outputs.select(1, 0);
  const kestrel_op backward_shape = ops::make_op(KESTREL_OP_GRU_CELL_BACKWARD, nullptr,
                                                 {state0, gates0, recurrents.select(1, 0), h0}, {gates0, gates0, state0});
  if (!ops::supports(device, backward_shape) || !ops::supports(device, cell_op(0))) return std::nullopt;

  // Each step's product adds to bias_hh, copied into every step's slice at once.
  if (bias_hh.defined()) ops::copy_(recurrents, bias_hh.value().reshape({1, 1, 3 * hidden}).expand(recurrents.shape()));
  const double keep_bias = bias_hh.defined() ? 1.0 : 0.0;
  const Tensor weight_t = weight.transpose(0, 1);  // (H, 3H)
  for (int64_t k = 0; k < steps; ++k) {
    Tensor product = recurrents.select(1, time(k));  // (N, 3H)
    ops::gemm_(product, state_before(k), weight_t, 1.0, keep_bias);
    ops::launch(device, cell_op(k));
  }
  if (state) *state = {outputs.select(1, time(steps - 1)).contiguous(), Tensor()};

  std::vector<Var> parents = {projected, weight_hh};
  if (bias_hh.defined()) parents.push_back(bias_hh);
  return make_var(outputs, std::move(parents), "gru",
                  [input = projected.node(), w = weight_hh.node(), b = bias_hh.defined() ? bias_hh.node() : nullptr,
                   outputs, gates, recurrents, h0, time, state_before, reverse](const Tensor& dy) {  // (N, T, H)
                    const int64_t steps = outputs.size(1), hidden = outputs.size(2);
                    const Device device = outputs.device();
                    // Every step's output gradient, the later steps' shares added in as they come.
                    Tensor dh = Tensor::empty(outputs.shape(), outputs.dtype(), device);
                    ops::copy_(dh, dy);
                    Tensor dinput = Tensor::empty(gates.shape(), gates.dtype(), device);     // (N, T, 3H)
                    Tensor dproduct = Tensor::empty(gates.shape(), gates.dtype(), device);   // (N, T, 3H)
                    Tensor direct = Tensor::empty({outputs.size(0), hidden}, outputs.dtype(), device);  // z dh'
                    for (int64_t k = steps - 1; k >= 0; --k) {
                      const int64_t t = time(k);
                      ops::launch(device, ops::make_op(KESTREL_OP_GRU_CELL_BACKWARD, nullptr,
                                                       {dh.select(1, t), gates.select(1, t), recurrents.select(1, t),
                                                        state_before(k)},
                                                       {dinput.select(1, t), dproduct.select(1, t), direct}));
                      if (k == 0) break;
                      Tensor earlier = dh.select(1, time(k - 1));
                      ops::binary_(KESTREL_BINARY_ADD, earlier, earlier, direct);
                      ops::gemm_(earlier, dproduct.select(1, t), w->value, 1.0, 1.0);  // += dproduct W_hh
                    }
                    if (input->requires_grad) accumulate_grad(*input, dinput);
                    const Tensor rows = dproduct.reshape({-1, 3 * hidden});  // (N*T, 3H)
                    if (b && b->requires_grad) accumulate_grad(*b, ops::reduce(KESTREL_REDUCE_SUM, rows, {0}));
                    if (!w->requires_grad) return;
                    // dW_hh = dproduct^T H_start over all N*T rows: one GEMM with K = N*T.
                    const Tensor starts = start_states(outputs, h0, reverse).reshape({-1, hidden});  // (N*T, H)
                    accumulate_product(*w, rows.transpose(0, 1), starts);
                  });
}

}  // namespace kestrel::fn
