// What gemm.comp and gemm_coop.comp share: the operands' bindings, their strided loads and the store
// of C with its epilogue. The operands:
// tensors[0] = A (batch, M, K), tensors[1] = B (batch, K, N), tensors[2] = C (batch, M, N): all rank 3
// with arbitrary strides, so transposed and broadcast (stride-0 batch) operands need no copy.
// floats[0] = alpha, floats[1] = beta; beta == 0 ignores C's old contents (NaN there stays out).
// LINEAR (KESTREL_OP_LINEAR) stores C = act(A @ B + bias) instead, with alpha 1 and beta 0;
// tensors[3] = bias (rank 1, binding 4) when ints[1] != 0, ints[0] = kestrel_activation.
// The batch entry is gl_WorkGroupID.z. STORE_T is the stored element type of every operand, except
// that C_F32 keeps C in f32 (ABI 1.6: 16-bit operands into an f32 result, e.g. an f32 weight gradient
// accumulated with beta 1 under autocast, unrounded).
#ifdef LINEAR
#include "math.glsl"
#endif
#define T float
#ifndef STORE_T
#define STORE_T float
#endif
#ifdef C_F32
#define C_T float
#define C_LOAD(x) (x)
#define C_STORE(v) (v)
#else
#define C_T STORE_T
#define C_LOAD(x) LOAD(x)
#define C_STORE(v) STORE(v)
#endif
layout(std430, set = 0, binding = 1) readonly buffer A { STORE_T data[]; } a_buf;
layout(std430, set = 0, binding = 2) readonly buffer B { STORE_T data[]; } b_buf;
layout(std430, set = 0, binding = 3) buffer C { C_T data[]; } c_buf;
#ifdef LINEAR
layout(std430, set = 0, binding = 4) readonly buffer Bias { STORE_T data[]; } bias_buf;

float activate(int activation, float v) {
  if (activation == 1) return isnan(v) ? v : max(v, 0.0);  // relu keeping NaN (see unary.comp)
  if (activation == 2) return 0.5 * v * (1.0 + c_erf(v * 0.70710678118654752));  // exact gelu
  return v;
}
#endif

// Where element (row, k) of A and (k, col) of B are stored, through their strides.
uint a_index(uint row, uint k) {
  return P.tensors[0].offset + gl_WorkGroupID.z * STRIDE(0, 0) + row * STRIDE(0, 1) + k * STRIDE(0, 2);
}
uint b_index(uint k, uint col) {
  return P.tensors[1].offset + gl_WorkGroupID.z * STRIDE(1, 0) + k * STRIDE(1, 1) + col * STRIDE(1, 2);
}
float load_a(uint row, uint k) { return LOAD(a_buf.data[a_index(row, k)]); }
float load_b(uint k, uint col) { return LOAD(b_buf.data[b_index(k, col)]); }

// Fill tiles along each operand's unit stride (A row-major, B transposed), else along M or N.
bool a_along_k() { return STRIDE(0, 2) == 1u || STRIDE(0, 1) != 1u; }
bool b_along_n() { return STRIDE(1, 2) == 1u || STRIDE(1, 1) != 1u; }

// Stores element (row, col) of C (inside M x N) from its sum over K.
void store_c(uint row, uint col, float sum) {
  const uint c_at = P.tensors[2].offset + gl_WorkGroupID.z * STRIDE(2, 0) + row * STRIDE(2, 1) + col * STRIDE(2, 2);
#ifdef LINEAR
  float value = sum;
  if (PINT(1) != 0) value += LOAD(bias_buf.data[P.tensors[3].offset + col * STRIDE(3, 0)]);
  c_buf.data[c_at] = STORE(activate(PINT(0), value));
#else
  float value = PFLOAT(0) * sum;
  const float beta = PFLOAT(1);
  if (beta != 0.0) value += beta * C_LOAD(c_buf.data[c_at]);
  c_buf.data[c_at] = C_STORE(value);
#endif
}
