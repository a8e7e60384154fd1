#include <fmt/format.h>

#include <cmath>

#include "kestrel/ops.h"
#include "kestrel/optim.h"

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

void Optimizer::launch_or_compose(const kestrel_op& op, void (Optimizer::*composed)(double, double), double lr,
                                  double grad_scale) {
  last_step_fused_ = ops::launch_if_supported(params_.device(), op);
  if (!last_step_fused_) (this->*composed)(lr, grad_scale);
}

void Optimizer::step(double lr, double grad_scale) {
  ++steps_;
  if (config_.type == OptimizerKind::sgd) {
    kestrel_sgd_params p{};
    set_abi_size(p);
    p.lr = lr, p.momentum = config_.momentum, p.dampening = config_.dampening;
    p.weight_decay = config_.weight_decay, p.grad_scale = grad_scale;
    p.nesterov = config_.nesterov, p.first_step = steps_ == 1;
    kestrel_op op = momentum_.defined() ? ops::make_op(KESTREL_OP_SGD_UPDATE, &p, {params_, grads_, momentum_}, {})
                                        : ops::make_op(KESTREL_OP_SGD_UPDATE, &p, {params_, grads_}, {});
    launch_or_compose(op, &Optimizer::sgd_composed, lr, grad_scale);
    return;
  }
  kestrel_adam_params p{};
  set_abi_size(p);
  p.lr = lr, p.beta1 = config_.beta1, p.beta2 = config_.beta2, p.eps = config_.eps;
  p.weight_decay = config_.weight_decay, p.grad_scale = grad_scale, p.step = steps_;
  p.decoupled = config_.type == OptimizerKind::adamw;
  launch_or_compose(ops::make_op(KESTREL_OP_ADAM_UPDATE, &p, {params_, grads_, exp_avg_, exp_avg_sq_}, {}),
                    &Optimizer::adam_composed, lr, grad_scale);
}

// The same rule as the fused op, in primitives, for backends without it.
void Optimizer::adam_composed(double lr, double grad_scale) {
  const double wd = config_.weight_decay, b1 = config_.beta1, b2 = config_.beta2;
  Tensor g = affine(grads_, grad_scale, 0.0);
  if (config_.type == OptimizerKind::adamw) {
    assign(params_, affine(params_, 1.0 - lr * wd, 0.0));
  } else if (wd != 0.0) {
    g = ops::binary(KESTREL_BINARY_ADD, g, affine(params_, wd, 0.0));
  }
  ops::binary_(KESTREL_BINARY_ADD, exp_avg_, affine(exp_avg_, b1, 0.0), affine(g, 1.0 - b1, 0.0));
  Tensor g2 = ops::unary(KESTREL_UNARY_SQUARE, g);
  ops::binary_(KESTREL_BINARY_ADD, exp_avg_sq_, affine(exp_avg_sq_, b2, 0.0), affine(g2, 1.0 - b2, 0.0));
  const double bias1 = 1.0 - std::pow(b1, double(steps_)), bias2 = 1.0 - std::pow(b2, double(steps_));
  Tensor denom = affine(ops::unary(KESTREL_UNARY_SQRT, exp_avg_sq_), 1.0 / std::sqrt(bias2), config_.eps);
  Tensor update = affine(ops::binary(KESTREL_BINARY_DIV, exp_avg_, denom), -lr / bias1, 0.0);
  ops::binary_(KESTREL_BINARY_ADD, params_, params_, update);
}

void Optimizer::sgd_composed(double lr, double grad_scale) {
  Tensor d = affine(grads_, grad_scale, 0.0);
  if (config_.weight_decay != 0.0) d = ops::binary(KESTREL_BINARY_ADD, d, affine(params_, config_.weight_decay, 0.0));
  if (momentum_.defined()) {
    if (steps_ == 1)
      assign(momentum_, d);
    else
      ops::binary_(KESTREL_BINARY_ADD, momentum_, affine(momentum_, config_.momentum, 0.0),
                   affine(d, 1.0 - config_.dampening, 0.0));
    d = config_.nesterov ? ops::binary(KESTREL_BINARY_ADD, d, affine(momentum_, config_.momentum, 0.0)) : momentum_;
  }
  ops::binary_(KESTREL_BINARY_ADD, params_, params_, affine(d, -lr, 0.0));
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
