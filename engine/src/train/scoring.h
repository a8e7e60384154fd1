// How a batch is scored, the same way in training steps and in evaluation. Engine-internal.
#pragma once
#include "kestrel/autograd.h"
#include "kestrel/config.h"

namespace kestrel {

// The config's loss, a scalar. output: (N, classes) logits for cross_entropy, (N, ...) predictions for
// mse; targets: (N,) i64 labels or predictions' shape f32.
Var batch_loss(LossKind kind, const Var& output, const Tensor& targets);

// The number of correct predictions, as an i64 scalar on the device (no sync). logits: (N, classes) or
// (N, T, classes); labels: (N,) or (N, T) i64.
Tensor correct_count(const Tensor& logits, const Tensor& labels);

}  // namespace kestrel
