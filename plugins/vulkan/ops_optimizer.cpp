// Fused Adam/AdamW and SGD updates (shaders/optimizer.comp): one dispatch over the flat parameters,
// in place, f32. Scalars are prepared here exactly as the CPU plugin prepares them (in f32 where it
// uses T, in double for the bias corrections), so both backends round alike.
#include <cmath>

#include "vk_ops.hpp"

namespace kestrel_vk {

// adam: in0 param, in1 grad, in2 m, in3 v. sgd: in0 param, in1 grad [, in2 momentum buffer]. Loss
// scaling's state on the device (1.5) is declined: the shader takes its scalars from the host, and the
// engine composes a loss-scaled update instead.
bool supports_optimizer(const kestrel_op& op, uint32_t dtypes) {
  return kestrel::plugin_shapes::optimizer_fits(op) && !kestrel::plugin_shapes::optimizer_has_scaler(op) &&
         all_contiguous(op) && op.inputs[0].dtype == KESTREL_DTYPE_F32 && in_mask(dtypes, KESTREL_DTYPE_F32);
}

void launch_optimizer(kestrel_stream* stream, const kestrel_op& op) {
  Dispatch d;
  const int64_t n = numel(op.inputs[0]);
  if (op.kind == KESTREL_OP_ADAM_UPDATE) {
    const auto& p = params_of<kestrel_adam_params>(op, "adam_update");
    if (p.step < 1) fail("adam_update: step counts from 1, got " + std::to_string(p.step));
    const double bias1 = 1.0 - std::pow(p.beta1, double(p.step));
    const double bias2 = 1.0 - std::pow(p.beta2, double(p.step));
    const float lr = float(p.lr), wd = float(p.weight_decay);
    d.shader = "adam_update_f32";
    d.params.floats[0] = p.decoupled ? 1.0f - lr * wd : 1.0f;  // decay
    d.params.floats[1] = p.decoupled ? 0.0f : wd;              // l2
    d.params.floats[2] = float(p.grad_scale);
    d.params.floats[3] = float(p.beta1);
    d.params.floats[4] = float(p.beta2);
    d.params.floats[5] = float(p.eps);
    d.params.floats[6] = float(p.lr / bias1);
    d.params.floats[7] = float(1.0 / std::sqrt(bias2));
    d.params.ints[0] = p.zero_grad != 0;
  } else {
    const auto& p = params_of<kestrel_sgd_params>(op, "sgd_update");
    d.shader = "sgd_update_f32";
    d.params.floats[0] = float(p.lr);
    d.params.floats[1] = float(p.momentum);
    d.params.floats[2] = float(p.dampening);
    d.params.floats[3] = float(p.weight_decay);
    d.params.floats[4] = float(p.grad_scale);
    d.params.ints[0] = p.zero_grad != 0;
    d.params.ints[1] = p.nesterov != 0;
    d.params.ints[2] = p.first_step != 0;
    d.params.ints[3] = op.num_inputs == 3;
  }
  if (n == 0) return;
  for (int i = 0; i < op.num_inputs; ++i) {
    d.params.tensors[i].offset = static_cast<uint32_t>(op.inputs[i].offset);
    d.buffers[i] = op.inputs[i].buffer;
  }
  d.params.uints[0] = static_cast<uint32_t>(n);
  set_flat_grid(stream->context, d, static_cast<uint64_t>(n));
  run(stream, {d});
}

}  // namespace kestrel_vk
