// Recurrent layers (torch.nn.RNN, LSTM, GRU) composed from primitives: one GEMM projects every step's
// input at once, then each step adds the hidden state's GEMM and runs the gate math elementwise, so
// backward is the autograd of those ops and every backend trains them with nothing of its own. Where
// the device runs a whole layer as one op (plugin ABI 1.15; recurrent_layer_op.cpp), it does; where
// the device offers the LSTM's fused cell (plugin ABI 1.7) or the GRU's (1.9) both ways, the layer's
// steps run as one node (lstm_sequence.cpp, gru_sequence.cpp), or under autocast the cell alone replaces
// the gate math in each step. The hidden weights' gradients of RNN and LSTM layers come out of one GEMM
// for the whole sequence.
#include <fmt/format.h>

#include <optional>
#include <tuple>
#include <utility>

#include "autocast.h"
#include "kestrel/functional.h"
#include "recurrent_steps.h"
#include "tensor_math.h"
#include "weight_grad.h"

namespace kestrel::fn {

namespace {

// The LSTM_CELL op on projected and recurrent (N, 4H) and c (N, H): h' and c' as two pieces of one (N, 2H)
// node whose backward is LSTM_CELL_BACKWARD; nothing when the device lacks it.
std::optional<std::pair<Var, Var>> fused_lstm_cell(const Var& projected, const Var& recurrent, const Var& c) {
  const Tensor& cell = c.value();  // (N, H)
  if (!ops::fused_ops_enabled() || projected.value().dtype() != cell.dtype() || recurrent.value().dtype() != cell.dtype())
    return std::nullopt;
  const int64_t batch = cell.size(0), hidden = cell.size(1);
  Tensor hc = Tensor::empty({batch, 2 * hidden}, cell.dtype(), cell.device());  // [h' | c']
  Tensor gates = Tensor::empty({batch, 4 * hidden}, cell.dtype(), cell.device());
  const Tensor h_next = hc.slice(1, 0, hidden), c_next = hc.slice(1, hidden, 2 * hidden);
  const kestrel_op forward =
      ops::make_op(KESTREL_OP_LSTM_CELL, nullptr, {projected.value(), recurrent.value(), cell}, {h_next, c_next, gates});
  // Backward's descriptor, forward's tensors standing in for the gradients (same shapes and dtypes).
  const kestrel_op backward =
      ops::make_op(KESTREL_OP_LSTM_CELL_BACKWARD, nullptr, {h_next, c_next, gates, cell, c_next}, {gates, cell});
  if (!ops::supports(cell.device(), backward) || !ops::launch_if_supported(cell.device(), forward)) return std::nullopt;
  const Var joined = make_var(hc, {projected, recurrent, c}, "lstm_cell",
                              [projected = projected.node(), recurrent = recurrent.node(), c = c.node(), gates, c_next,
                               hidden](const Tensor& dhc) {
                                const Tensor grads = dhc.contiguous();  // (N, 2H): [dh' | dc']
                                Tensor dgates = Tensor::empty(gates.shape(), gates.dtype(), gates.device());
                                Tensor dc = Tensor::empty(c->value.shape(), c->value.dtype(), c->value.device());
                                ops::launch(gates.device(),
                                            ops::make_op(KESTREL_OP_LSTM_CELL_BACKWARD, nullptr,
                                                         {grads.slice(1, 0, hidden), grads.slice(1, hidden, 2 * hidden),
                                                          gates, c->value, c_next},
                                                         {dgates, dc}));
                                if (projected->requires_grad) accumulate_grad(*projected, dgates);
                                if (recurrent->requires_grad) accumulate_grad(*recurrent, dgates);
                                if (c->requires_grad) accumulate_grad(*c, dc);
                              });
  const std::vector<Var> parts = chunk(joined, 1, 2);
  return std::make_pair(parts[0], parts[1]);
}

// The GRU_CELL op on projected and recurrent (N, 3H) and h (N, H): h' (N, H) as one node whose backward is
// GRU_CELL_BACKWARD; nothing when the device lacks it.
std::optional<Var> fused_gru_cell(const Var& projected, const Var& recurrent, const Var& h) {
  const Tensor& state = h.value();  // (N, H)
  if (!ops::fused_ops_enabled() || projected.value().dtype() != state.dtype() ||
      recurrent.value().dtype() != state.dtype())
    return std::nullopt;
  const int64_t batch = state.size(0), hidden = state.size(1);
  Tensor h_next = Tensor::empty({batch, hidden}, state.dtype(), state.device());
  Tensor gates = Tensor::empty({batch, 3 * hidden}, state.dtype(), state.device());  // r, z, n
  const Tensor hidden_product = recurrent.value();                                   // (N, 3H): backward reads h_n
  const kestrel_op forward =
      ops::make_op(KESTREL_OP_GRU_CELL, nullptr, {projected.value(), hidden_product, state}, {h_next, gates});
  // Backward's descriptor, forward's tensors standing in for the gradients (same shapes and dtypes).
  const kestrel_op backward = ops::make_op(KESTREL_OP_GRU_CELL_BACKWARD, nullptr,
                                           {h_next, gates, hidden_product, state}, {gates, gates, h_next});
  if (!ops::supports(state.device(), backward) || !ops::launch_if_supported(state.device(), forward)) return std::nullopt;
  return make_var(h_next, {projected, recurrent, h}, "gru_cell",
                  [projected = projected.node(), recurrent = recurrent.node(), h = h.node(), gates, hidden_product,
                   state](const Tensor& dh_next) {
                    Tensor dx = Tensor::empty(gates.shape(), gates.dtype(), gates.device());
                    Tensor drec = Tensor::empty(gates.shape(), gates.dtype(), gates.device());
                    Tensor dh = Tensor::empty(state.shape(), state.dtype(), state.device());
                    ops::launch(gates.device(), ops::make_op(KESTREL_OP_GRU_CELL_BACKWARD, nullptr,
                                                             {dh_next.contiguous(), gates, hidden_product, state},
                                                             {dx, drec, dh}));
                    if (projected->requires_grad) accumulate_grad(*projected, dx);
                    if (recurrent->requires_grad) accumulate_grad(*recurrent, drec);
                    if (h->requires_grad) accumulate_grad(*h, dh);
                  });
}

// The states each step started from, (N, T, H): known once the steps have run.
struct StartStates {
  Tensor value;
};

// The identity on the steps' input projections (N, T, G*H) whose backward also gives weight_hh its
// gradient for the whole sequence: in RNN and LSTM cells a step's hidden product h W_hh^T is added to
// its projection before anything else, so both get the same gradient, and this node's backward runs
// after every step's. dW_hh = dP^T H_start: one GEMM with K = N*T instead of T products with K = N.
// The steps then use W_hh as a constant.
Var with_hidden_weight_grad(const Var& projected, const Var& weight_hh, std::shared_ptr<StartStates> starts) {
  return make_var(projected.value(), {projected, weight_hh}, "recurrent_hidden_weights",
                  [projected = projected.node(), weight = weight_hh.node(), starts](const Tensor& dp) {  // (N, T, G*H)
                    if (projected->requires_grad) accumulate_grad(*projected, dp);
                    const Tensor rows = dp.reshape({-1, dp.size(2)});                     // (N*T, G*H)
                    const Tensor h = starts->value.reshape({-1, starts->value.size(2)});  // (N*T, H)
                    accumulate_product(*weight, rows.transpose(0, 1), h);               // (G*H, H)
                  });
}

}  // namespace

Tensor start_states(const Tensor& outputs, const Tensor& h0, bool reverse) {
  const int64_t steps = outputs.size(1);
  Tensor starts = Tensor::empty(outputs.shape(), outputs.dtype(), outputs.device());
  Tensor first = starts.select(1, reverse ? steps - 1 : 0), rest = starts.slice(1, reverse ? 0 : 1, reverse ? steps - 1 : steps);
  ops::copy_(first, h0);
  ops::copy_(rest, outputs.slice(1, reverse ? 1 : 0, reverse ? steps : steps - 1));
  return starts;
}

namespace {

// One step of the cell. projected: (N, G*H), this step's input through weight_ih and bias_ih;
// h, c: (N, H), the state before the step (c only for the LSTM), replaced by the state after it.
void step(RecurrentCell cell, const Var& projected, const RecurrentWeights& w, Var& h, Var& c) {
  const Var recurrent = widened(linear(h, w.weight_hh, w.bias_hh));  // (N, G*H), f32 under autocast too
  switch (cell) {
    case RecurrentCell::rnn_tanh: h = tanh(add(projected, recurrent)); return;
    case RecurrentCell::rnn_relu: h = relu(add(projected, recurrent)); return;
    case RecurrentCell::lstm: {
      if (auto fused = fused_lstm_cell(projected, recurrent, c)) {
        std::tie(h, c) = *fused;
        return;
      }
      const std::vector<Var> gates = chunk(add(projected, recurrent), 1, 4);  // i, f, g, o: (N, H) each
      c = add(mul(sigmoid(gates[1]), c), mul(sigmoid(gates[0]), tanh(gates[2])));
      h = mul(sigmoid(gates[3]), tanh(c));
      return;
    }
    case RecurrentCell::gru: {
      if (auto fused = fused_gru_cell(projected, recurrent, h)) {
        h = *fused;
        return;
      }
      // torch's GRU: the reset gate scales the hidden part of the candidate, bias_hh included.
      const std::vector<Var> from_input = chunk(projected, 1, 3), from_state = chunk(recurrent, 1, 3);  // r, z, n
      const Var reset = sigmoid(add(from_input[0], from_state[0]));
      const Var update = sigmoid(add(from_input[1], from_state[1]));
      const Var candidate = tanh(add(from_input[2], mul(reset, from_state[2])));
      h = add(candidate, mul(update, sub(h, candidate)));  // (1 - z) * n + z * h
      return;
    }
  }
}

}  // namespace

int gate_count(RecurrentCell cell) {
  switch (cell) {
    case RecurrentCell::lstm: return 4;
    case RecurrentCell::gru: return 3;
    default: return 1;
  }
}

namespace {

// Every step's input projection (N, T, G*H): one GEMM over the N*T rows, or, when x is an embedding of
// at most a quarter as many rows as tokens, one over the table's rows (the embedding's gather and
// scatter then move the (N, T, G*H) rows, which costs less than the products it saves). Not under
// autocast: the projected table would be 16-bit, and its gradient summed per row in 16 bits.
Var input_projection(const Var& x, const Var& weight_ih, const Var& bias, const EmbeddedTokens* embedded) {
  const Tensor& input = x.value();  // (N, T, F)
  const int64_t batch = input.size(0), steps = input.size(1), features = input.size(2);
  const bool few_rows = embedded && embedded->table.value().size(0) * 4 <= batch * steps;  // V <= N*T / 4
  if (few_rows && embedded->tokens.shape() == Shape{batch, steps} && embedded->table.value().dtype() == input.dtype() &&
      !autocasts(x))
    return widened(projected_embedding(*embedded, weight_ih, bias));
  return reshape(widened(linear(reshape(x, {batch * steps, features}), weight_ih, bias)),
                 {batch, steps, weight_ih.value().size(0)});
}

}  // namespace

Var recurrent_layer(const Var& x_in, const RecurrentWeights& w, RecurrentCell cell, bool reverse, RecurrentState* state,
                    const EmbeddedTokens* embedded) {
  // Under autocast only the products run in 16 bits: the cell's gate math and its state stay f32.
  const Var x = widened(x_in);
  const Tensor& input = x.value();  // (N, T, F)
  const Shape& ih = w.weight_ih.value().shape();  // (G*H, F)
  const Shape& hh = w.weight_hh.value().shape();  // (G*H, H)
  if (input.rank() != 3 || ih.size() != 2 || hh.size() != 2 || ih[1] != input.size(2) || ih[0] != hh[0] ||
      hh[0] != gate_count(cell) * hh[1])
    throw InvalidArgument(fmt::format("recurrent layer: input {} with weight_ih {} and weight_hh {} do not fit",
                                      input.describe(), w.weight_ih.value().describe(), w.weight_hh.value().describe()));
  const int64_t batch = input.size(0), steps = input.size(1), hidden = hh[1];
  // RNN and LSTM cells add bias_hh to the projection before anything else, so it joins bias_ih there
  // (one bias gradient for both); GRU's reset gate scales it, so it stays in the steps.
  auto initial = [&](const Tensor& carried) {  // torch's default initial state is zeros
    return carried.defined() ? carried : Tensor::zeros({batch, hidden}, input.dtype(), input.device());
  };
  const Tensor h0 = initial(state ? state->h : Tensor());
  const Tensor c0 = cell == RecurrentCell::lstm ? initial(state ? state->c : Tensor()) : Tensor();
  if (auto whole = device_recurrent_layer(x, w, cell, reverse, h0, c0, state)) return *whole;
  const bool joined_biases = cell != RecurrentCell::gru && w.bias_hh.defined();
  const Var bias = !joined_biases ? w.bias_ih : w.bias_ih.defined() ? add(w.bias_ih, w.bias_hh) : w.bias_hh;
  Var projected = input_projection(x, w.weight_ih, bias, embedded);  // (N, T, G*H), a view per step
  if (cell == RecurrentCell::lstm)
    if (auto fused = fused_lstm_sequence(projected, w.weight_hh, h0, c0, reverse, state)) return *fused;
  if (cell == RecurrentCell::gru)
    if (auto fused = fused_gru_sequence(projected, w.weight_hh, w.bias_hh, h0, reverse, state)) return *fused;

  std::shared_ptr<StartStates> starts;
  RecurrentWeights per_step_weights = w;
  if (joined_biases) per_step_weights.bias_hh = Var();
  if (cell != RecurrentCell::gru && w.weight_hh.requires_grad() && steps > 0) {
    starts = std::make_shared<StartStates>();
    projected = with_hidden_weight_grad(projected, w.weight_hh, starts);
    per_step_weights.weight_hh = Var(w.weight_hh.value());
  }
  const std::vector<Var> per_step = unbind(projected, 1);
  Var h(h0), c = c0.defined() ? Var(c0) : Var();
  std::vector<Var> outputs(static_cast<size_t>(steps));
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    step(cell, per_step[t], per_step_weights, h, c);
    outputs[t] = h;
  }
  if (state) *state = {h.value(), c.defined() ? c.value() : Tensor()};
  Var sequence = stack(outputs, 1);  // (N, T, H)
  if (starts) starts->value = start_states(sequence.value(), h0, reverse);
  return sequence;
}

}  // namespace kestrel::fn
