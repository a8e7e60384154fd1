#version 450
// Fused optimizer updates over the flat parameters, in place, f32 (KESTREL_OP_ADAM_UPDATE and
// KESTREL_OP_SGD_UPDATE). Same arithmetic, in the same order and precision, as the CPU plugin
// (plugins/cpu/ops_fused.cpp), which follows torch.optim. uints[0] = element count; every tensor is
// contiguous, tensors[t].offset locates it. ints[0] != 0 zeroes the gradient once it is read.
//   adam: bindings param, grad, m, v. floats: decay (AdamW's 1 - lr * wd, else 1), l2 (Adam's weight
//         decay, else 0), grad_scale, beta1, beta2, eps, step_size (lr / bias1), 1 / sqrt(bias2).
//   sgd:  bindings param, grad [, momentum buffer when ints[3] != 0]. floats: lr, momentum, dampening,
//         weight_decay, grad_scale; ints[1] = nesterov, ints[2] = first_step.
// kestrel-variant: adam_update_f32 -DADAM=1
// kestrel-variant: sgd_update_f32 -DSGD=1
#include "common.glsl"
layout(local_size_x = KESTREL_LOCAL_SIZE) in;
layout(std430, set = 0, binding = 1) buffer Param { float data[]; } param_buf;
layout(std430, set = 0, binding = 2) buffer Grad { float data[]; } grad_buf;
layout(std430, set = 0, binding = 3) buffer M { float data[]; } m_buf;  // sgd: the momentum buffer
#ifdef ADAM
layout(std430, set = 0, binding = 4) buffer V { float data[]; } v_buf;
#endif

void element(uint i) {
  uint pi = P.tensors[0].offset + i, gi = P.tensors[1].offset + i, mi = P.tensors[2].offset + i;
  float param = param_buf.data[pi];
#ifdef ADAM
  uint vi = P.tensors[3].offset + i;
  float decay = PFLOAT(0), l2 = PFLOAT(1), scale = PFLOAT(2), b1 = PFLOAT(3), b2 = PFLOAT(4), eps = PFLOAT(5);
  float step_size = PFLOAT(6), inv_bias2_sqrt = PFLOAT(7);
  float x = param * decay;
  float g = grad_buf.data[gi] * scale + l2 * param;
  float m = b1 * m_buf.data[mi] + (1.0 - b1) * g;
  float v = b2 * v_buf.data[vi] + (1.0 - b2) * g * g;
  m_buf.data[mi] = m;
  v_buf.data[vi] = v;
  param_buf.data[pi] = x - step_size * m / (sqrt(v) * inv_bias2_sqrt + eps);
#else
  float lr = PFLOAT(0), momentum = PFLOAT(1), dampening = PFLOAT(2), wd = PFLOAT(3), scale = PFLOAT(4);
  float d = grad_buf.data[gi] * scale + wd * param;
  if (PINT(3) != 0 && momentum != 0.0) {
    float b = PINT(2) != 0 ? d : momentum * m_buf.data[mi] + (1.0 - dampening) * d;
    m_buf.data[mi] = b;
    d = PINT(1) != 0 ? d + momentum * b : b;
  }
  param_buf.data[pi] = param - lr * d;
#endif
  if (PINT(0) != 0) grad_buf.data[gi] = 0.0;
}

void main() {
  for (uint i = flat_index(); i < PUINT(0); i += flat_stride()) element(i);
}
