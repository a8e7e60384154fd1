#version 450
// The fused LSTM cell (KESTREL_OP_LSTM_CELL and _BACKWARD, ABI 1.7): one invocation per cell (row b,
// unit j) of an (N, H) state, the gate math the CPU plugin does (plugins/cpu/ops_lstm_cell.cpp) in f32,
// each result rounded once to its storage. Gates i, f, g, o are the four H-wide quarters of a 4H row.
// Tensors are rows with a stride (a time step's slice of a batch-first sequence): tensor k's element
// (b, j) is at ints[2k] + b * ints[2k + 1] + j. uints[0] = N * H, uints[1] = H.
//   forward:  bindings x, hh (N, 4H) the two products, c (N, H) -> h', c' (N, H), gates (N, 4H) after
//             their nonlinearities (kept for backward).
//   backward: bindings dh', dc' (N, H), gates (N, 4H), c, c' (N, H) -> dgates (N, 4H) of the gates'
//             inputs, dc (N, H).
// kestrel-variant: lstm_cell_f32 -DSTORE_T=float
// kestrel-variant: lstm_cell_f16 -DSTORE_T=float16_t
// kestrel-variant: lstm_cell_bf16 -DBF16=1
// kestrel-variant: lstm_cell_backward_f32 -DSTORE_T=float -DBACKWARD=1
// kestrel-variant: lstm_cell_backward_f16 -DSTORE_T=float16_t -DBACKWARD=1
// kestrel-variant: lstm_cell_backward_bf16 -DBF16=1 -DBACKWARD=1
#define T float
#include "common.glsl"
#include "math.glsl"
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) buffer B1 { STORE_T data[]; } t1;
layout(std430, set = 0, binding = 2) buffer B2 { STORE_T data[]; } t2;
layout(std430, set = 0, binding = 3) buffer B3 { STORE_T data[]; } t3;
layout(std430, set = 0, binding = 4) buffer B4 { STORE_T data[]; } t4;
layout(std430, set = 0, binding = 5) buffer B5 { STORE_T data[]; } t5;
layout(std430, set = 0, binding = 6) buffer B6 { STORE_T data[]; } t6;
#ifdef BACKWARD
layout(std430, set = 0, binding = 7) buffer B7 { STORE_T data[]; } t7;
#endif

// Tensor k's element (b, column).
uint at(int k, uint b, uint column) { return uint(PINT(2 * k)) + b * uint(PINT(2 * k + 1)) + column; }

float sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }

void cell(uint b, uint j, uint hidden) {
#ifndef BACKWARD
  float pre[4];
  for (uint k = 0u; k < 4u; ++k)
    pre[k] = LOAD(t1.data[at(0, b, k * hidden + j)]) + LOAD(t2.data[at(1, b, k * hidden + j)]);
  float i = sigmoid(pre[0]), f = sigmoid(pre[1]), g = c_tanh(pre[2]), o = sigmoid(pre[3]);
  float c_next = f * LOAD(t3.data[at(2, b, j)]) + i * g;
  t5.data[at(4, b, j)] = STORE(c_next);
  t4.data[at(3, b, j)] = STORE(o * c_tanh(c_next));
  t6.data[at(5, b, 0u * hidden + j)] = STORE(i);
  t6.data[at(5, b, 1u * hidden + j)] = STORE(f);
  t6.data[at(5, b, 2u * hidden + j)] = STORE(g);
  t6.data[at(5, b, 3u * hidden + j)] = STORE(o);
#else
  float i = LOAD(t3.data[at(2, b, 0u * hidden + j)]), f = LOAD(t3.data[at(2, b, 1u * hidden + j)]);
  float g = LOAD(t3.data[at(2, b, 2u * hidden + j)]), o = LOAD(t3.data[at(2, b, 3u * hidden + j)]);
  float grad_h = LOAD(t1.data[at(0, b, j)]), tanh_c = c_tanh(LOAD(t5.data[at(4, b, j)]));
  // dc_total = dc' + dh' * o * (1 - tanh(c')^2); the gates' input gradients di i(1-i), df f(1-f),
  // dg (1-g^2), do o(1-o) with di = dc_total g, df = dc_total c, dg = dc_total i, do = dh' tanh(c').
  float total = LOAD(t2.data[at(1, b, j)]) + grad_h * o * (1.0 - tanh_c * tanh_c);
  t6.data[at(5, b, 0u * hidden + j)] = STORE(total * g * i * (1.0 - i));
  t6.data[at(5, b, 1u * hidden + j)] = STORE(total * LOAD(t4.data[at(3, b, j)]) * f * (1.0 - f));
  t6.data[at(5, b, 2u * hidden + j)] = STORE(total * i * (1.0 - g * g));
  t6.data[at(5, b, 3u * hidden + j)] = STORE(grad_h * tanh_c * o * (1.0 - o));
  t7.data[at(6, b, j)] = STORE(total * f);
#endif
}

void main() {
  uint hidden = PUINT(1);
  for (uint n = flat_index(); n < PUINT(0); n += flat_stride()) cell(n / hidden, n % hidden, hidden);
}
