// Recurrent layers (torch.nn.RNN, LSTM, GRU) composed from primitives: one GEMM projects every step's
// input at once, then each step adds the hidden state's GEMM and runs the gate math elementwise, so
// backward is the autograd of those ops and every backend trains them with nothing of its own.
#include <fmt/format.h>

#include <memory>

#include "kestrel/functional.h"
#include "tensor_math.h"

namespace kestrel::fn {

namespace {

// The hidden-to-hidden products h_{t-1} W_hh^T of all steps, with one weight gradient for all of them.
// Composed step by step, the weight's gradient would be T products of (G*H, N) x (N, H), each with an
// inner size of only the batch; here each step's backward leaves its (N, G*H) output gradient in a
// buffer of all steps, and the weight's node makes dW = dR^T Hprev in one GEMM over all T * N rows, as
// cuDNN and PyTorch's fused RNNs do.
class HiddenProjection {
 public:
  // weight: (G*H, H); steps and batch size the buffers.
  HiddenProjection(const Var& weight, int64_t steps, int64_t batch) : weight_(weight), shared_(std::make_shared<Shared>()) {
    const Tensor& w = weight.value();
    shared_->batch = batch;
    // A pass-through of the weight whose backward turns the buffer into the weight's gradient. The steps'
    // backward passes mark it reached (its gradient is never read, only its being defined).
    node_ = make_var(w, {weight}, "recurrent_weight", [weight = weight.node(), shared = shared_](const Tensor&) {
      if (!weight->requires_grad || !shared->output_grads.defined()) return;
      // (G*H, T*N) x (T*N, H): transposed views, one GEMM.
      accumulate_grad(*weight, ops::matmul(shared->output_grads.transpose(0, 1), shared->inputs));
    });
    // Every step's h_{t-1}, kept only when the weight's gradient will be wanted.
    if (node_.requires_grad()) shared_->inputs = Tensor::empty({steps * batch, w.size(1)}, w.dtype(), w.device());
  }

  // h: (N, H), the state before step t -> (N, G*H).
  Var apply(const Var& h, int64_t t) {
    const Tensor& w = weight_.value();
    const int64_t batch = shared_->batch;
    if (shared_->inputs.defined()) {
      Tensor slot = shared_->inputs.slice(0, t * batch, (t + 1) * batch);
      ops::copy_(slot, h.value());
    }
    Tensor product = ops::matmul(h.value(), w.transpose(0, 1));
    return make_var(product, {h, node_}, "recurrent_product",
                    [h = h.node(), node = node_.node(), shared = shared_, t, batch](const Tensor& dy) {
                      if (h->requires_grad) accumulate_grad(*h, ops::matmul(dy, node->value));  // dh = dy W
                      if (!node->requires_grad) return;
                      if (!shared->output_grads.defined()) {
                        shared->output_grads = Tensor::zeros({shared->inputs.size(0), dy.size(1)}, dy.dtype(), dy.device());
                        node->grad = shared->output_grads;  // reached: its backward will run after every step's
                      }
                      Tensor rows = shared->output_grads.slice(0, t * batch, (t + 1) * batch);
                      ops::copy_(rows, dy);
                    });
  }

 private:
  struct Shared {
    Tensor inputs, output_grads;  // (T*N, H) and (T*N, G*H)
    int64_t batch = 0;
  };
  Var weight_, node_;
  std::shared_ptr<Shared> shared_;
};

int gate_count(RecurrentCell cell) {
  switch (cell) {
    case RecurrentCell::lstm: return 4;
    case RecurrentCell::gru: return 3;
    default: return 1;
  }
}

// One step of the cell. projected: (N, G*H), this step's input through weight_ih and bias_ih;
// h, c: (N, H), the state before the step (c only for the LSTM), replaced by the state after it.
void step(RecurrentCell cell, const Var& projected, const RecurrentWeights& w, HiddenProjection& hidden, int64_t t,
          Var& h, Var& c) {
  Var recurrent = hidden.apply(h, t);  // (N, G*H)
  if (w.bias_hh.defined()) recurrent = add(recurrent, w.bias_hh);
  switch (cell) {
    case RecurrentCell::rnn_tanh: h = tanh(add(projected, recurrent)); return;
    case RecurrentCell::rnn_relu: h = relu(add(projected, recurrent)); return;
    case RecurrentCell::lstm: {
      const std::vector<Var> gates = chunk(add(projected, recurrent), 1, 4);  // i, f, g, o: (N, H) each
      c = add(mul(sigmoid(gates[1]), c), mul(sigmoid(gates[0]), tanh(gates[2])));
      h = mul(sigmoid(gates[3]), tanh(c));
      return;
    }
    case RecurrentCell::gru: {
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

Var recurrent_layer(const Var& x, const RecurrentWeights& w, RecurrentCell cell, bool reverse, RecurrentState* state) {
  const Tensor& input = x.value();  // (N, T, F)
  const Shape& ih = w.weight_ih.value().shape();  // (G*H, F)
  const Shape& hh = w.weight_hh.value().shape();  // (G*H, H)
  if (input.rank() != 3 || ih.size() != 2 || hh.size() != 2 || ih[1] != input.size(2) || ih[0] != hh[0] ||
      hh[0] != gate_count(cell) * hh[1])
    throw InvalidArgument(fmt::format("recurrent layer: input {} with weight_ih {} and weight_hh {} do not fit",
                                      input.describe(), w.weight_ih.value().describe(), w.weight_hh.value().describe()));
  const int64_t batch = input.size(0), steps = input.size(1), hidden = hh[1];
  // Every step's input projection in one GEMM: (N*T, F) -> (N, T, G*H), then a view per step.
  const Var projected = reshape(linear(reshape(x, {batch * steps, ih[1]}), w.weight_ih, w.bias_ih), {batch, steps, ih[0]});
  const std::vector<Var> per_step = unbind(projected, 1);
  auto initial = [&](const Tensor& carried) {  // torch's default initial state is zeros
    return Var(carried.defined() ? carried : Tensor::zeros({batch, hidden}, input.dtype(), input.device()));
  };
  Var h = initial(state ? state->h : Tensor());
  Var c = cell == RecurrentCell::lstm ? initial(state ? state->c : Tensor()) : Var();
  std::vector<Var> outputs(static_cast<size_t>(steps));
  HiddenProjection state_products(w.weight_hh, steps, batch);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    step(cell, per_step[t], w, state_products, k, h, c);
    outputs[t] = h;
  }
  if (state) *state = {h.value(), c.defined() ? c.value() : Tensor()};
  return stack(outputs, 1);  // (N, T, H)
}

}  // namespace kestrel::fn
