// A recurrent layer as one op of the device's own (RECURRENT_LAYER, plugin ABI 1.15): for a backend whose
// library runs a whole layer in one call, cuDNN's RNN API on CUDA, which was 1.25x (LSTM) and 1.65x (GRU)
// faster than the fused-cell steps at lstm_generator's shape on an H200
// (bench/results/2026-11-27-h200-lt-packed-rnn-lossscale-vulkan.md). Forward leaves `saved`, bytes in the
// plugin's layout (cuDNN's reserve space and weight space), for backward. Devices without the op run the
// layer step by step (recurrent.cpp, lstm_sequence.cpp, gru_sequence.cpp).
#include "autocast.h"
#include "kestrel/ops.h"
#include "kestrel/plugin_struct_size.hpp"
#include "recurrent_steps.h"

namespace kestrel::fn {

namespace {

kestrel_recurrent_cell abi_cell(RecurrentCell cell) {
  switch (cell) {
    case RecurrentCell::rnn_tanh: return KESTREL_RECURRENT_RNN_TANH;
    case RecurrentCell::rnn_relu: return KESTREL_RECURRENT_RNN_RELU;
    case RecurrentCell::lstm: return KESTREL_RECURRENT_LSTM;
    case RecurrentCell::gru: return KESTREL_RECURRENT_GRU;
  }
  return KESTREL_RECURRENT_LSTM;
}

}  // namespace

std::optional<Var> device_recurrent_layer(const Var& x, const RecurrentWeights& w, RecurrentCell cell, bool reverse,
                                          const Tensor& h0, const Tensor& c0, RecurrentState* state) {
  // One direction from t = 0 with both biases, in one dtype; not under autocast, whose products are 16-bit.
  if (!ops::fused_ops_enabled() || reverse || !w.bias_ih.defined() || !w.bias_hh.defined() || autocasts(x) ||
      x.value().size(1) == 0 || !ops::keeps_saved_state(x.value().device()))
    return std::nullopt;
  const Tensor input = x.value().contiguous();  // (N, T, F)
  const DType dtype = input.dtype();
  const std::vector<Tensor> weights{w.weight_ih.value().contiguous(), w.weight_hh.value().contiguous(),
                                    w.bias_ih.value().contiguous(), w.bias_hh.value().contiguous()};
  for (const Tensor& t : weights)
    if (t.dtype() != dtype) return std::nullopt;
  const bool lstm = cell == RecurrentCell::lstm;
  const Device device = input.device();
  const int64_t batch = input.size(0), steps = input.size(1), hidden = weights[1].size(1);
  Tensor y = Tensor::empty({batch, steps, hidden}, dtype, device);           // every step's h
  Tensor h_last = Tensor::empty({batch, hidden}, dtype, device);             // (N, H)
  Tensor c_last = lstm ? Tensor::empty({batch, hidden}, dtype, device) : Tensor();
  std::vector<Tensor> initial{h0.contiguous()};                             // (N, H) each
  if (lstm) initial.push_back(c0.contiguous());
  for (const Tensor& t : initial)
    if (t.dtype() != dtype) return std::nullopt;
  std::vector<Tensor> inputs{input};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  inputs.insert(inputs.end(), initial.begin(), initial.end());
  std::vector<Tensor> outputs{y, h_last};
  if (lstm) outputs.push_back(c_last);

  auto params = abi_init<kestrel_recurrent_params>();
  params.cell = abi_cell(cell);
  const bool train = grad_enabled() && (x.requires_grad() || w.weight_ih.requires_grad() ||
                                        w.weight_hh.requires_grad() || w.bias_ih.requires_grad() ||
                                        w.bias_hh.requires_grad());
  if (!train) {  // inference: no saved output, nothing for backward
    // Sizing the saved output has the plugin build its plan for the layer (cuDNN's descriptors), which is
    // where a library rejects a layer it cannot run: the steps then run instead of the launch failing.
    std::vector<Tensor> sized = outputs;
    sized.push_back(Tensor::empty({0}, DType::u8, device));  // the training form's stand-in
    if (!ops::saved_bytes(device, ops::make_op(KESTREL_OP_RECURRENT_LAYER, &params, inputs, sized)) ||
        !ops::launch_if_supported(device, ops::make_op(KESTREL_OP_RECURRENT_LAYER, &params, inputs, outputs)))
      return std::nullopt;
    if (state) *state = {h_last, c_last};
    return Var(y);
  }
  // The saved output's size comes from the plugin; the descriptor asked about carries a stand-in.
  outputs.push_back(Tensor::empty({0}, DType::u8, device));
  const std::optional<uint64_t> bytes = ops::saved_bytes(device, ops::make_op(KESTREL_OP_RECURRENT_LAYER, &params, inputs, outputs));
  if (!bytes) return std::nullopt;
  const Tensor saved = Tensor::empty({int64_t(*bytes)}, DType::u8, device);
  outputs.back() = saved;
  // Backward's descriptor, forward's tensors standing in for the gradients (same shapes and dtypes).
  std::vector<Tensor> backward_inputs{y, input, y, weights[0], weights[1]};
  backward_inputs.insert(backward_inputs.end(), initial.begin(), initial.end());
  backward_inputs.push_back(saved);
  const std::vector<Tensor> grads_shape{input, weights[0], weights[1], weights[2], weights[3]};
  if (!ops::supports(device, ops::make_op(KESTREL_OP_RECURRENT_LAYER_BACKWARD, &params, backward_inputs, grads_shape)) ||
      !ops::launch_if_supported(device, ops::make_op(KESTREL_OP_RECURRENT_LAYER, &params, inputs, outputs)))
    return std::nullopt;
  if (state) *state = {h_last, c_last};

  return make_var(y, {x, w.weight_ih, w.weight_hh, w.bias_ih, w.bias_hh}, "recurrent_layer",
                  [x = x.node(), parameters = std::vector<std::shared_ptr<VarNode>>{w.weight_ih.node(), w.weight_hh.node(),
                                                                                    w.bias_ih.node(), w.bias_hh.node()},
                   backward_inputs, params](const Tensor& dy) {  // (N, T, H)
                    std::vector<Tensor> in = backward_inputs;
                    in[0] = dy.contiguous();
                    const Tensor& input = in[1];
                    Tensor dx = Tensor::empty(input.shape(), input.dtype(), input.device());  // (N, T, F)
                    // The weights' and biases' gradients straight into their storage where nothing is
                    // there yet to add to; the op writes them whole.
                    std::vector<GradDestination> destinations;
                    std::vector<Tensor> out{dx};
                    for (const auto& parameter : parameters) {
                      destinations.push_back(parameter->requires_grad
                                                 ? grad_destination(*parameter, parameter->value.dtype())
                                                 : GradDestination{Tensor::empty(parameter->value.shape(),
                                                                                 parameter->value.dtype(), input.device())});
                      out.push_back(destinations.back().tensor);
                    }
                    ops::launch(input.device(), ops::make_op(KESTREL_OP_RECURRENT_LAYER_BACKWARD, &params, in, out));
                    for (size_t i = 0; i < parameters.size(); ++i)
                      if (parameters[i]->requires_grad) land_grad(*parameters[i], destinations[i]);
                    if (x->requires_grad) accumulate_grad(*x, dx);
                  });
}

}  // namespace kestrel::fn
