#version 450
// The fused GRU cell (KESTREL_OP_GRU_CELL and _BACKWARD, ABI 1.9): one invocation per cell (row b, unit
// j) of an (N, H) state, the gate math the CPU plugin does (plugins/cpu/ops_gru_cell.cpp) in f32, each
// result rounded once to its storage. Gates r, z, n are the three H-wide thirds of a 3H row (torch's
// order). Tensors are rows with a stride (a time step's slice of a batch-first sequence): tensor k's
// element (b, j) is at ints[2k] + b * ints[2k + 1] + j. uints[0] = N * H, uints[1] = H.
//   forward:  bindings x, hh (N, 3H) the two products, h (N, H) -> h' (N, H), gates (N, 3H) after their
//             nonlinearities (kept for backward).
//   backward: bindings dh' (N, H), gates, hh (N, 3H), h (N, H) -> the input product's and the state
//             product's gradients (N, 3H), dh through z * h (N, H).
// kestrel-variant: gru_cell_f32 -DSTORE_T=float
// kestrel-variant: gru_cell_f16 -DSTORE_T=float16_t
// kestrel-variant: gru_cell_bf16 -DBF16=1
// kestrel-variant: gru_cell_backward_f32 -DSTORE_T=float -DBACKWARD=1
// kestrel-variant: gru_cell_backward_f16 -DSTORE_T=float16_t -DBACKWARD=1
// kestrel-variant: gru_cell_backward_bf16 -DBF16=1 -DBACKWARD=1
#define T float
#include "common.glsl"
#include "math.glsl"
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) buffer B1 { STORE_T data[]; } t1;
layout(std430, set = 0, binding = 2) buffer B2 { STORE_T data[]; } t2;
layout(std430, set = 0, binding = 3) buffer B3 { STORE_T data[]; } t3;
layout(std430, set = 0, binding = 4) buffer B4 { STORE_T data[]; } t4;
layout(std430, set = 0, binding = 5) buffer B5 { STORE_T data[]; } t5;
#ifdef BACKWARD
layout(std430, set = 0, binding = 6) buffer B6 { STORE_T data[]; } t6;
layout(std430, set = 0, binding = 7) buffer B7 { STORE_T data[]; } t7;
#endif

// Tensor k's element (b, column).
uint at(int k, uint b, uint column) { return uint(PINT(2 * k)) + b * uint(PINT(2 * k + 1)) + column; }

float sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }

void cell(uint b, uint j, uint hidden) {
#ifndef BACKWARD
  float r = sigmoid(LOAD(t1.data[at(0, b, j)]) + LOAD(t2.data[at(1, b, j)]));
  float z = sigmoid(LOAD(t1.data[at(0, b, hidden + j)]) + LOAD(t2.data[at(1, b, hidden + j)]));
  float n = c_tanh(LOAD(t1.data[at(0, b, 2u * hidden + j)]) + r * LOAD(t2.data[at(1, b, 2u * hidden + j)]));
  t4.data[at(3, b, j)] = STORE(n + z * (LOAD(t3.data[at(2, b, j)]) - n));  // (1 - z) n + z h
  t5.data[at(4, b, j)] = STORE(r);
  t5.data[at(4, b, hidden + j)] = STORE(z);
  t5.data[at(4, b, 2u * hidden + j)] = STORE(n);
#else
  float r = LOAD(t2.data[at(1, b, j)]), z = LOAD(t2.data[at(1, b, hidden + j)]);
  float n = LOAD(t2.data[at(1, b, 2u * hidden + j)]), grad = LOAD(t1.data[at(0, b, j)]);
  // dn = dh' (1 - z) (1 - n^2), dr = dn h_n r (1 - r), dz = dh' (h - n) z (1 - z); the state product's n
  // block is scaled by r; dh = dh' z.
  float dn = grad * (1.0 - z) * (1.0 - n * n);
  float dr = dn * LOAD(t3.data[at(2, b, 2u * hidden + j)]) * r * (1.0 - r);
  float dz = grad * (LOAD(t4.data[at(3, b, j)]) - n) * z * (1.0 - z);
  t5.data[at(4, b, j)] = STORE(dr);
  t5.data[at(4, b, hidden + j)] = STORE(dz);
  t5.data[at(4, b, 2u * hidden + j)] = STORE(dn);
  t6.data[at(5, b, j)] = STORE(dr);
  t6.data[at(5, b, hidden + j)] = STORE(dz);
  t6.data[at(5, b, 2u * hidden + j)] = STORE(dn * r);
  t7.data[at(6, b, j)] = STORE(grad * z);
#endif
}

void main() {
  uint hidden = PUINT(1);
  for (uint n = flat_index(); n < PUINT(0); n += flat_stride()) cell(n / hidden, n % hidden, hidden);
}
