#include <fmt/format.h>

#include <cmath>

#include "kestrel/ops.h"
#include "kestrel/optim.h"
#include "../runtime/device_runtime.h"

namespace kestrel {

namespace {
Tensor affine(const Tensor& x, double alpha, double beta) { return ops::unary(KESTREL_UNARY_AFFINE, x, alpha, beta); }
void assign(Tensor& out, const Tensor& value) { ops::copy_(out, value); }
}  // namespace

Optimizer::Optimizer(OptimizerConfig config, Tensor parameters, Tensor gradients)
    : config_(std::move(config)), params_(std::move(parameters)), grads_(std::move(gradients)) {
  if (!(config_.lr >= 0)) throw InvalidArgument(fmt::format("optimizer lr must be >= 0, got {}", config_.lr));
  if (config_.type == OptimizerKind::sgd) {
    if (config_.momentum != 0.0) momentum_ = Tensor::zeros(params_.shape(), params_.dtype(), params_.device());
  } else {
    exp_avg_ = Tensor::zeros(params_.shape(), params_.dtype(), params_.device());
    exp_avg_sq_ = Tensor::zeros(params_.shape(), params_.dtype(), params_.device());
  }
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  if (config_.type == OptimizerKind::sgd) {
    if (momentum_.defined()) return {{"optimizer.momentum_buffer", momentum_}};
    return {};
  }
  return {{"optimizer.exp_avg", exp_avg_}, {"optimizer.exp_avg_sq", exp_avg_sq_}};
}

void Optimizer::step(double lr, double grad_scale) { update(lr, grad_scale, nullptr); }

void Optimizer::step(double lr, const Tensor& scaler) { update(lr, 1.0, &scaler); }

// The backend's fused update where it has one (reading a loss scaler's state itself, since plugin ABI
// 1.5), else the same rule composed from primitives, which must read the scaler's state on the host.
kestrel_op Optimizer::fused_op(double lr, double grad_scale, const Tensor* scaler, FusedParams& p) const {
  const bool adam = config_.type != OptimizerKind::sgd;
  p.adam = kestrel_adam_params{};
  p.sgd = kestrel_sgd_params{};
  kestrel_adam_params& a = p.adam;
  kestrel_sgd_params& s = p.sgd;
  set_abi_size(a);
  set_abi_size(s);
  a.lr = lr, a.beta1 = config_.beta1, a.beta2 = config_.beta2, a.eps = config_.eps;
  a.weight_decay = config_.weight_decay, a.grad_scale = grad_scale, a.step = steps_;
  a.decoupled = config_.type == OptimizerKind::adamw, a.scaler = scaler != nullptr;
  s.lr = lr, s.momentum = config_.momentum, s.dampening = config_.dampening;
  s.weight_decay = config_.weight_decay, s.grad_scale = grad_scale;
  s.nesterov = config_.nesterov, s.first_step = steps_ == 1, s.step = steps_, s.scaler = scaler != nullptr;
  kestrel_op op = ops::make_op(adam ? KESTREL_OP_ADAM_UPDATE : KESTREL_OP_SGD_UPDATE,
                               adam ? static_cast<const void*>(&a) : &s, {params_, grads_}, {});
  auto in = [&op](const Tensor& t) { op.inputs[op.num_inputs++] = t.descriptor(); };
  if (adam) in(exp_avg_), in(exp_avg_sq_);
  if (!adam && momentum_.defined()) in(momentum_);
  if (scaler) in(*scaler);
  return op;
}

bool Optimizer::fuses_scaled_update() const {
  if (!fuses_scaled_update_) {
    const Tensor probe = Tensor::zeros({4}, DType::f32, params_.device());  // a scaler's state, for its descriptor
    FusedParams p;
    fuses_scaled_update_ = params_.device().runtime().api().abi_minor >= 5 && ops::fused_ops_enabled() &&
                           ops::supports(params_.device(), fused_op(config_.lr, 1.0, &probe, p));
  }
  return *fuses_scaled_update_;
}

void Optimizer::update(double lr, double grad_scale, const Tensor* scaler) {
  ++steps_;
  const bool adam = config_.type != OptimizerKind::sgd;
  FusedParams p;
  const kestrel_op op = fused_op(lr, grad_scale, scaler, p);
  const bool abi_has_scaler = params_.device().runtime().api().abi_minor >= 5;
  last_step_fused_ = (!scaler || abi_has_scaler) && ops::launch_if_supported(params_.device(), op);
  if (last_step_fused_) return;
  Update u{lr, grad_scale, steps_};
  if (scaler) {
    const std::vector<float> state = scaler->to_vector<float>();  // [scale, clean, skipped, found_inf]
    if (state[3] != 0.0f) return;  // the gradients overflowed: this update is skipped
    u.grad_scale = 1.0 / double(state[0]);
    u.made -= int64_t(state[2]);
  }
  adam ? adam_composed(u) : sgd_composed(u);
}

// The same rule as the fused op, in primitives, for backends without it.
void Optimizer::adam_composed(const Update& u) {
  const double wd = config_.weight_decay, b1 = config_.beta1, b2 = config_.beta2, lr = u.lr;
  Tensor g = affine(grads_, u.grad_scale, 0.0);
  if (config_.type == OptimizerKind::adamw) {
    assign(params_, affine(params_, 1.0 - lr * wd, 0.0));
  } else if (wd != 0.0) {
    g = ops::binary(KESTREL_BINARY_ADD, g, affine(params_, wd, 0.0));
  }
  ops::binary_(KESTREL_BINARY_ADD, exp_avg_, affine(exp_avg_, b1, 0.0), affine(g, 1.0 - b1, 0.0));
  Tensor g2 = ops::unary(KESTREL_UNARY_SQUARE, g);
  ops::binary_(KESTREL_BINARY_ADD, exp_avg_sq_, affine(exp_avg_sq_, b2, 0.0), affine(g2, 1.0 - b2, 0.0));
  const double bias1 = 1.0 - std::pow(b1, double(u.made)), bias2 = 1.0 - std::pow(b2, double(u.made));
  Tensor denom = affine(ops::unary(KESTREL_UNARY_SQRT, exp_avg_sq_), 1.0 / std::sqrt(bias2), config_.eps);
  Tensor update = affine(ops::binary(KESTREL_BINARY_DIV, exp_avg_, denom), -lr / bias1, 0.0);
  ops::binary_(KESTREL_BINARY_ADD, params_, params_, update);
}

void Optimizer::sgd_composed(const Update& u) {
  Tensor d = affine(grads_, u.grad_scale, 0.0);
  if (config_.weight_decay != 0.0) d = ops::binary(KESTREL_BINARY_ADD, d, affine(params_, config_.weight_decay, 0.0));
  if (momentum_.defined()) {
    if (u.made == 1)
      assign(momentum_, d);
    else
      ops::binary_(KESTREL_BINARY_ADD, momentum_, affine(momentum_, config_.momentum, 0.0),
                   affine(d, 1.0 - config_.dampening, 0.0));
    d = config_.nesterov ? ops::binary(KESTREL_BINARY_ADD, d, affine(momentum_, config_.momentum, 0.0)) : momentum_;
  }
  ops::binary_(KESTREL_BINARY_ADD, params_, params_, affine(d, -u.lr, 0.0));
}

double scheduled_lr(const ScheduleConfig& schedule, double base_lr, int64_t step, int64_t total_steps, int64_t epoch) {
  switch (schedule.type) {
    case ScheduleKind::constant: return base_lr;
    case ScheduleKind::step:
      return base_lr * std::pow(schedule.gamma, double(epoch / std::max<int64_t>(1, schedule.step_size)));
    case ScheduleKind::cosine: {
      if (step < schedule.warmup_steps) return base_lr * double(step + 1) / double(schedule.warmup_steps);
      double span = double(std::max<int64_t>(1, total_steps - schedule.warmup_steps));
      double progress = std::min(1.0, double(step - schedule.warmup_steps) / span);
      return schedule.min_lr + 0.5 * (base_lr - schedule.min_lr) * (1.0 + std::cos(M_PI * progress));
    }
  }
  throw InvalidArgument(fmt::format("unknown schedule kind {}", static_cast<int>(schedule.type)));
}

}  // namespace kestrel
