#version 450
// Fused optimizer updates over the flat parameters, in place, f32 (KESTREL_OP_ADAM_UPDATE and
// KESTREL_OP_SGD_UPDATE). Same arithmetic, in the same order and precision, as the CPU plugin
// (plugins/cpu/ops_fused.cpp), which follows torch.optim. uints[0] = element count; every tensor is
// contiguous, tensors[t].offset locates it. ints[0] != 0 zeroes the gradient once it is read.
//   adam: bindings param, grad, m, v. floats: decay (AdamW's 1 - lr * wd, else 1), l2 (Adam's weight
//         decay, else 0), grad_scale, beta1, beta2, eps, step_size (lr / bias1), 1 / sqrt(bias2).
//   sgd:  bindings param, grad [, momentum buffer when ints[3] != 0]. floats: lr, momentum, dampening,
//         weight_decay, grad_scale; ints[1] = nesterov, ints[2] = first_step.
// SCALED (ABI 1.5): loss scaling's state [scale, clean_steps, skipped_steps, found_inf] on the device,
// the binding after the others (5 for adam, 4 for sgd), offset uints[1]; ints[4] = step (from 1). When
// found_inf != 0 nothing changes but the gradient's zeroing; otherwise the gradient is divided by scale
// and the updates made, step - skipped_steps, count: Adam's bias corrections are computed here, in
// double as the CPU computes them (so the device needs shaderFloat64), from lr, beta1 and beta2 as
// doubles in ints[6..11]; SGD's momentum starts where the updates made reach 1.
// kestrel-variant: adam_update_f32 -DADAM=1
// kestrel-variant: sgd_update_f32 -DSGD=1
// kestrel-variant: adam_update_scaled_f32 -DADAM=1 -DSCALED=1
// kestrel-variant: sgd_update_scaled_f32 -DSGD=1 -DSCALED=1
#include "common.glsl"
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) buffer Param { float data[]; } param_buf;
layout(std430, set = 0, binding = 2) buffer Grad { float data[]; } grad_buf;
layout(std430, set = 0, binding = 3) buffer M { float data[]; } m_buf;  // sgd: the momentum buffer
#ifdef ADAM
layout(std430, set = 0, binding = 4) buffer V { float data[]; } v_buf;
#define STATE_BINDING 5
#else
#define STATE_BINDING 4
#endif
#ifdef SCALED
layout(std430, set = 0, binding = STATE_BINDING) readonly buffer State { float data[]; } state_buf;
#endif

// What one invocation's elements are updated with: the host's scalars, or under loss scaling the ones
// the state gives.
struct Coefficients {
  bool skip;
  float grad_scale;
#ifdef ADAM
  float step_size, inv_bias2_sqrt;
#else
  bool first_step;
#endif
};

#if defined(SCALED) && defined(ADAM)
double param_double(int slot) { return packDouble2x32(uvec2(uint(PINT(slot)), uint(PINT(slot + 1)))); }

// base^exponent by squaring, in double: within a few units of the last place of C's pow, far below
// what survives the rounding of the coefficients to float.
double power(double base, int exponent) {
  double result = 1.0;
  for (; exponent > 0; exponent >>= 1) {
    if ((exponent & 1) != 0) result *= base;
    base *= base;
  }
  return result;
}
#endif

Coefficients coefficients() {
  Coefficients c;
#ifdef SCALED
  uint at = PUINT(1);  // [scale, clean_steps, skipped_steps, found_inf]
  c.skip = state_buf.data[at + 3u] != 0.0;
#ifdef ADAM
  c.grad_scale = float(1.0lf / double(state_buf.data[at]));
#else
  c.grad_scale = 1.0 / state_buf.data[at];  // exact for loss scaling's powers of two
#endif
  int made = PINT(4) - int(state_buf.data[at + 2u]);  // updates made, this one included
#ifdef ADAM
  double bias1 = 1.0 - power(param_double(8), made), bias2 = 1.0 - power(param_double(10), made);
  c.step_size = float(param_double(6) / bias1);
  c.inv_bias2_sqrt = float(1.0 / sqrt(bias2));
#else
  c.first_step = made == 1;
#endif
#else
  c.skip = false;
#ifdef ADAM
  c.grad_scale = PFLOAT(2);
  c.step_size = PFLOAT(6);
  c.inv_bias2_sqrt = PFLOAT(7);
#else
  c.grad_scale = PFLOAT(4);
  c.first_step = PINT(2) != 0;
#endif
#endif
  return c;
}

void element(uint i, Coefficients c) {
  uint pi = P.tensors[0].offset + i, gi = P.tensors[1].offset + i, mi = P.tensors[2].offset + i;
  if (c.skip) {
    if (PINT(0) != 0) grad_buf.data[gi] = 0.0;
    return;
  }
  float param = param_buf.data[pi];
#ifdef ADAM
  uint vi = P.tensors[3].offset + i;
  float decay = PFLOAT(0), l2 = PFLOAT(1), b1 = PFLOAT(3), b2 = PFLOAT(4), eps = PFLOAT(5);
  float x = param * decay;
  float g = grad_buf.data[gi] * c.grad_scale + l2 * param;
  float m = b1 * m_buf.data[mi] + (1.0 - b1) * g;
  float v = b2 * v_buf.data[vi] + (1.0 - b2) * g * g;
  m_buf.data[mi] = m;
  v_buf.data[vi] = v;
  param_buf.data[pi] = x - c.step_size * m / (sqrt(v) * c.inv_bias2_sqrt + eps);
#else
  float lr = PFLOAT(0), momentum = PFLOAT(1), dampening = PFLOAT(2), wd = PFLOAT(3);
  float d = grad_buf.data[gi] * c.grad_scale + wd * param;
  if (PINT(3) != 0 && momentum != 0.0) {
    float b = c.first_step ? d : momentum * m_buf.data[mi] + (1.0 - dampening) * d;
    m_buf.data[mi] = b;
    d = PINT(1) != 0 ? d + momentum * b : b;
  }
  param_buf.data[pi] = param - lr * d;
#endif
  if (PINT(0) != 0) grad_buf.data[gi] = 0.0;
}

void main() {
  Coefficients c = coefficients();
  for (uint i = flat_index(); i < PUINT(0); i += flat_stride()) element(i, c);
}
