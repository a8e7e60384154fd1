// Pieces of the recurrent layers shared by the composed steps (recurrent.cpp) and the fused sequences
// (lstm_sequence.cpp, gru_sequence.cpp), and the device's whole-layer op (recurrent_layer_op.cpp).
// Engine-internal.
#pragma once
#include <optional>

#include "kestrel/functional.h"

namespace kestrel::fn {

// Every step's starting state from the layer's outputs (N, T, H) and its initial state h0 (N, H):
// step t starts from output t - 1 (t + 1 when reversed), the first step from h0.
Tensor start_states(const Tensor& outputs, const Tensor& h0, bool reverse);

// A whole LSTM layer's steps as one autograd node. projected: (N, T, 4H), every step's input product
// with both biases added; weight_hh: (4H, H); h0, c0: (N, H), the state before the first step. Returns
// the outputs (N, T, H) and, with `state`, leaves the final (h, c) in it; nothing when the device lacks
// the fused cell either way or an autocast scope would lower the hidden product (the composed steps
// then run). weight_hh gets its gradient for the whole sequence from one GEMM.
std::optional<Var> fused_lstm_sequence(const Var& projected, const Var& weight_hh, const Tensor& h0, const Tensor& c0,
                                       bool reverse, RecurrentState* state);

// A whole GRU layer's steps as one autograd node, likewise. projected: (N, T, 3H), every step's input
// product with bias_ih added; weight_hh: (3H, H); bias_hh: (3H) or undefined; h0: (N, H). weight_hh and
// bias_hh get their gradients for the whole sequence from one GEMM and one sum.
std::optional<Var> fused_gru_sequence(const Var& projected, const Var& weight_hh, const Var& bias_hh, const Tensor& h0,
                                      bool reverse, RecurrentState* state);

// A whole layer as the device's RECURRENT_LAYER op (ABI 1.15) and its backward. x: (N, T, F); h0, c0:
// (N, H), the state before the first step (c0 only for the LSTM). Returns the outputs (N, T, H) and, with
// `state`, leaves the final state in it; nothing when the device lacks the op either way, the layer
// runs backwards, lacks a bias, or an autocast scope would lower its products.
std::optional<Var> device_recurrent_layer(const Var& x, const RecurrentWeights& w, RecurrentCell cell, bool reverse,
                                          const Tensor& h0, const Tensor& c0, RecurrentState* state);

}  // namespace kestrel::fn
