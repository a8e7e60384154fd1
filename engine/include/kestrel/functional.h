// Differentiable operations on Vars: the layers and losses of a model. Each forward records the backward
// rule that sits beside it in engine/src/autograd/. Shapes in comments: N batch, C channels.
#pragma once
#include <cstdint>
#include <optional>

#include "kestrel/autograd.h"
#include "kestrel/ops.h"

namespace kestrel::fn {

// x: (N, in), weight: (out, in) as torch.nn.Linear, bias: (out) or undefined -> (N, out). (The linear
// layer applies it to the last axis of a higher-rank input by folding the others into N.)
// The activation is fused into the product where the backend offers it.
Var linear(const Var& x, const Var& weight, const Var& bias, kestrel_activation activation = KESTREL_ACTIVATION_NONE);
// x: (N, C, H, W), weight: (O, C, KH, KW), bias: (O) or undefined -> (N, O, OH, OW). Via im2col + GEMM.
Var conv2d(const Var& x, const Var& weight, const Var& bias, const ops::Window& window);
Var max_pool2d(const Var& x, const ops::Window& window);
Var avg_pool2d(const Var& x, const ops::Window& window);  // padding counts, as torch's default

// Batch normalisation over (N, H, W) per channel. In training it normalises with the batch statistics
// and updates running_mean/running_var (unbiased variance, like torch) with `momentum`; in evaluation it
// uses the running statistics.
Var batch_norm2d(const Var& x, const Var& weight, const Var& bias, Tensor& running_mean, Tensor& running_var,
                 bool training, double momentum, double eps);
// Layer normalisation over the last `normalized` axes of x (torch.nn.LayerNorm): weight and bias have
// those axes' shape, or are both undefined (elementwise_affine false). Same in training and inference.
Var layer_norm(const Var& x, const Var& weight, const Var& bias, int normalized, double eps);

// tokens: (N, ...) i64 ids in [0, V), weight: (V, D) -> (N, ..., D), the rows of weight (torch.nn.Embedding).
// The row padding_idx (when >= 0) receives no gradient.
Var embedding(const Tensor& tokens, const Var& weight, int64_t padding_idx = -1);

Var relu(const Var& x);
Var gelu(const Var& x);
Var tanh(const Var& x);
Var sigmoid(const Var& x);
// Zeroes each element with probability p and scales the rest by 1/(1-p); the mask is drawn from
// Philox (seed, offset), so it is bit-identical on every backend. Identity when !training or p == 0.
Var dropout(const Var& x, double p, bool training, uint64_t seed, uint64_t offset);
Var softmax(const Var& x);      // over the last axis
Var log_softmax(const Var& x);  // over the last axis

Var add(const Var& a, const Var& b);  // broadcasting
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);
Var reshape(const Var& x, const Shape& shape);
Var flatten(const Var& x);  // (N, ...) -> (N, prod(...))
Var sum(const Var& x);      // -> scalar
Var mean(const Var& x);     // -> scalar

// logits: (N, C) with labels (N), or per position (N, T, C) with labels (N, T); i64 labels -> the mean
// loss over samples (positions) as a scalar. Positions labelled ignore_index, when given, add nothing
// and are not counted (torch's ignore_index; all ignored gives NaN, as torch). Fused softmax +
// cross-entropy where offered.
Var cross_entropy(const Var& logits, const Tensor& labels, std::optional<int64_t> ignore_index = std::nullopt);
// mean((prediction - target)^2) -> scalar
Var mse_loss(const Var& prediction, const Tensor& target);

}  // namespace kestrel::fn
