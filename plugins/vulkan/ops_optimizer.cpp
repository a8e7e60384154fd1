// Fused Adam/AdamW and SGD updates (shaders/optimizer.comp): one dispatch over the flat parameters,
// in place, f32. Scalars are prepared here exactly as the CPU plugin prepares them (in f32 where it
// uses T, in double for the bias corrections), so both backends round alike.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "vk_ops.hpp"

namespace kestrel_vk {

// adam: in0 param, in1 grad, in2 m, in3 v. sgd: in0 param, in1 grad [, in2 momentum buffer]. Then
// loss scaling's state on the device (1.5) when params.scaler says so: the shader reads it, and Adam's
// bias corrections, which depend on the updates made, are computed there in double (kFloat64Arithmetic);
// a device without it gets the engine's composed loss-scaled update.
bool supports_optimizer(const kestrel_op& op, uint32_t dtypes) {
  if (!kestrel::plugin_shapes::optimizer_fits(op) || !all_contiguous(op) || op.inputs[0].dtype != KESTREL_DTYPE_F32 ||
      !in_mask(dtypes, KESTREL_DTYPE_F32))
    return false;
  if (!kestrel::plugin_shapes::optimizer_has_scaler(op)) return true;
  if (op.kind == KESTREL_OP_SGD_UPDATE) return params_of<kestrel_sgd_params>(op, "sgd_update").step <= INT32_MAX;
  return (dtypes & kFloat64Arithmetic) != 0 && params_of<kestrel_adam_params>(op, "adam_update").step <= INT32_MAX;
}

namespace {

// A double's bits in two int slots (low word first), as the shader's param_double reads them.
void put_double(Params& params, int slot, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  params.ints[slot] = static_cast<int32_t>(static_cast<uint32_t>(bits));
  params.ints[slot + 1] = static_cast<int32_t>(static_cast<uint32_t>(bits >> 32));
}

}  // namespace

void launch_optimizer(kestrel_stream* stream, const kestrel_op& op) {
  Dispatch d;
  const int64_t n = numel(op.inputs[0]);
  const bool scaled = kestrel::plugin_shapes::optimizer_has_scaler(op);
  if (op.kind == KESTREL_OP_ADAM_UPDATE) {
    const auto& p = params_of<kestrel_adam_params>(op, "adam_update");
    if (p.step < 1) fail("adam_update: step counts from 1, got " + std::to_string(p.step));
    const double bias1 = 1.0 - std::pow(p.beta1, double(p.step));
    const double bias2 = 1.0 - std::pow(p.beta2, double(p.step));
    const float lr = float(p.lr), wd = float(p.weight_decay);
    d.shader = scaled ? "adam_update_scaled_f32" : "adam_update_f32";
    d.params.floats[0] = p.decoupled ? 1.0f - lr * wd : 1.0f;  // decay
    d.params.floats[1] = p.decoupled ? 0.0f : wd;              // l2
    d.params.floats[2] = float(p.grad_scale);
    d.params.floats[3] = float(p.beta1);
    d.params.floats[4] = float(p.beta2);
    d.params.floats[5] = float(p.eps);
    d.params.floats[6] = float(p.lr / bias1);
    d.params.floats[7] = float(1.0 / std::sqrt(bias2));
    d.params.ints[0] = p.zero_grad != 0;
    d.params.ints[4] = static_cast<int32_t>(p.step);
    put_double(d.params, 6, p.lr);
    put_double(d.params, 8, p.beta1);
    put_double(d.params, 10, p.beta2);
  } else {
    const auto& p = params_of<kestrel_sgd_params>(op, "sgd_update");
    d.shader = scaled ? "sgd_update_scaled_f32" : "sgd_update_f32";
    d.params.floats[0] = float(p.lr);
    d.params.floats[1] = float(p.momentum);
    d.params.floats[2] = float(p.dampening);
    d.params.floats[3] = float(p.weight_decay);
    d.params.floats[4] = float(p.grad_scale);
    d.params.ints[0] = p.zero_grad != 0;
    d.params.ints[1] = p.nesterov != 0;
    d.params.ints[2] = p.first_step != 0;
    d.params.ints[3] = op.num_inputs - (scaled ? 1 : 0) == 3;
    d.params.ints[4] = static_cast<int32_t>(p.step);
  }
  if (n == 0) return;
  const int tensors = op.num_inputs - (scaled ? 1 : 0);
  for (int i = 0; i < tensors; ++i) {
    d.params.tensors[i].offset = static_cast<uint32_t>(op.inputs[i].offset);
    d.buffers[i] = op.inputs[i].buffer;
  }
  if (scaled) {  // the binding after the update's own (adam 5, sgd 4: the momentum buffer's slot is kept)
    const kestrel_tensor& state = op.inputs[tensors];
    const int binding = op.kind == KESTREL_OP_ADAM_UPDATE ? 4 : 3;
    d.params.uints[1] = static_cast<uint32_t>(state.offset);
    d.buffers[binding] = state.buffer;
  }
  d.params.uints[0] = static_cast<uint32_t>(n);
  set_flat_grid(stream->context, d, static_cast<uint64_t>(n));
  run(stream, {d});
}

}  // namespace kestrel_vk
