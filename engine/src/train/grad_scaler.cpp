#include "grad_scaler.h"

#include <fmt/format.h>

#include "kestrel/error.h"
#include "kestrel/ops.h"

namespace kestrel {

namespace {
constexpr int kScale = 0, kClean = 1, kSkipped = 2, kFound = 3;  // plugin.h's scaler layout
// f32 counts are exact below 2^24.
constexpr double kLargestCount = double(1 << 24);
Tensor affine(const Tensor& x, double alpha, double beta) { return ops::unary(KESTREL_UNARY_AFFINE, x, alpha, beta); }
}  // namespace

GradScaler::GradScaler(const LossScaleConfig& config, const LossScaleState& resumed, const Device& device)
    : config_(config) {
  if (double(config_.growth_interval) >= kLargestCount)
    throw ConfigError(fmt::format("loss_scale.growth_interval: {} is too large; at most {}", config_.growth_interval,
                                  int64_t(kLargestCount) - 1));
  if (double(resumed.skipped_steps) >= kLargestCount)
    throw ConfigError(fmt::format("loss scaling: {} skipped steps cannot be counted on the device (at most {})",
                                  resumed.skipped_steps, int64_t(kLargestCount) - 1));
  const double scale = resumed.scale > 0 ? resumed.scale : config_.init_scale;
  state_ = Tensor::from_vector<float>({float(scale), float(resumed.clean_steps), float(resumed.skipped_steps), 0.0f},
                                      {4}, device);
  interval_ = Tensor::full({}, double(config_.growth_interval), DType::f32, device);
}

Tensor GradScaler::seed(double share) const {
  return ops::binary(KESTREL_BINARY_MUL, state_.select(0, kScale), Tensor::full({}, share, DType::f32, state_.device()));
}

void GradScaler::check(const Tensor& gradients) {
  Tensor found = state_.select(0, kFound);
  ops::copy_(found, ops::nonfinite_flag(gradients));
}

// With found f in {0, 1} and grow g = [clean + 1 == growth_interval], all exact in f32:
//   scale *= f ? backoff : (g ? growth : 1);  clean = (clean + 1) (1 - f) (1 - g);  skipped += f.
void GradScaler::update() {
  Tensor scale = state_.select(0, kScale), clean = state_.select(0, kClean), skipped = state_.select(0, kSkipped);
  const Tensor found = state_.select(0, kFound);
  const Tensor next = affine(clean, 1.0, 1.0), keep = affine(found, -1.0, 1.0);
  const Tensor grow = ops::binary(KESTREL_BINARY_EQ, next, interval_);
  const Tensor factor = ops::binary(KESTREL_BINARY_ADD, affine(found, config_.backoff_factor, 0.0),
                                    ops::binary(KESTREL_BINARY_MUL, keep, affine(grow, config_.growth_factor - 1.0, 1.0)));
  ops::binary_(KESTREL_BINARY_MUL, scale, scale, factor);
  ops::binary_(KESTREL_BINARY_MUL, clean, ops::binary(KESTREL_BINARY_MUL, next, keep), affine(grow, -1.0, 1.0));
  ops::binary_(KESTREL_BINARY_ADD, skipped, skipped, found);
}

LossScaleState GradScaler::read() const {
  const std::vector<float> s = state_.to_vector<float>();
  return {double(s[kScale]), int64_t(s[kClean]), int64_t(s[kSkipped])};
}

}  // namespace kestrel
