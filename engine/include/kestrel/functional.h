// Differentiable operations on Vars: the layers and losses of a model. Each forward records the backward
// rule that sits beside it in engine/src/autograd/. Shapes in comments: N batch, C channels.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>

#include "kestrel/autograd.h"
#include "kestrel/ops.h"

namespace kestrel::fn {

// Mixed precision (torch.autocast): while a scope is active on this thread, the products (linear,
// conv2d, matmul, attention) multiply in `dtype` (bf16 or f16) with f32 accumulation, their operands cast
// to it, and return results in `dtype`: the activations between products stay 16-bit, as under PyTorch's
// autocast. Ops that need f32 (softmax and log-softmax, layer and batch norm, losses, reductions, pooling,
// recurrent layers) widen a 16-bit input to f32 and return f32; activations and dropout run in the dtype
// they get; add, sub, mul and concat of two dtypes promote to the wider. Weights stay f32 (master
// weights): each product casts them, and their gradients come out of the backward GEMMs in f32 where the
// device multiplies 16-bit operands into f32 (plugin ABI 1.6). f32 (the default) turns it off.
class AutocastScope {
 public:
  explicit AutocastScope(DType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  DType previous_;
};
DType autocast_dtype();  // f32 outside any scope

// x in another dtype (a copy), its gradient cast back to x's dtype.
Var cast(const Var& x, DType dtype);

// x: (N, in), weight: (out, in) as torch.nn.Linear, bias: (out) or undefined -> (N, out). (The linear
// layer applies it to the last axis of a higher-rank input by folding the others into N.)
// The activation is fused into the product where the backend offers it.
Var linear(const Var& x, const Var& weight, const Var& bias, kestrel_activation activation = KESTREL_ACTIVATION_NONE);
// x: (N, C, H, W), weight: (O, C, KH, KW), bias: (O) or undefined -> (N, O, OH, OW); activation none or
// relu. The backend's fused convolution where it has one, else im2col + GEMM.
Var conv2d(const Var& x, const Var& weight, const Var& bias, const ops::Window& window,
           kestrel_activation activation = KESTREL_ACTIVATION_NONE);
Var max_pool2d(const Var& x, const ops::Window& window);
Var avg_pool2d(const Var& x, const ops::Window& window);  // padding counts, as torch's default

// Batch normalisation over (N, H, W) per channel. In training it normalises with the batch statistics
// and updates running_mean/running_var (unbiased variance, like torch) with `momentum`; in evaluation it
// uses the running statistics.
Var batch_norm2d(const Var& x, const Var& weight, const Var& bias, Tensor& running_mean, Tensor& running_var,
                 bool training, double momentum, double eps);
// Layer normalisation over the last `normalized` axes of x (torch.nn.LayerNorm): weight and bias have
// those axes' shape, or are undefined: both (elementwise_affine false) or the bias alone (bias false, as
// in a Transformer block built without biases). Same in training and inference. `feeds_product`: the
// result goes only into products (a pre-norm block's attention or feed-forward), so under autocast it
// comes out in the scope's 16-bit dtype, the same bits the product's cast would give, without an f32
// copy and a cast; its gradient comes back 16-bit, as torch.autocast's cast of the product's input
// gives it.
Var layer_norm(const Var& x, const Var& weight, const Var& bias, int normalized, double eps, bool feeds_product = false);

// tokens: (N, ...) i64 ids in [0, V), weight: (V, D) -> (N, ..., D), the rows of weight (torch.nn.Embedding).
// The row padding_idx (when >= 0) receives no gradient.
Var embedding(const Tensor& tokens, const Var& weight, int64_t padding_idx = -1);
// What an embedding's output is made of: the rows of `table` (V, D) that `tokens` (N, ...) pick, the row
// padding_idx (when >= 0) without gradient. A layer projecting such an output may project the table.
struct EmbeddedTokens {
  Tensor tokens;
  Var table;
  int64_t padding_idx = -1;
};
// linear(embedding(tokens, table, padding_idx), weight, bias) computed as the rows of the projected table
// (V, G): (N, ...) -> (N, ..., G) with V rows through the products instead of one per token, forward and
// backward. Worth it when V is well below the number of tokens (a character model's batch).
Var projected_embedding(const EmbeddedTokens& embedded, const Var& weight, const Var& bias);

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
Var permute(const Var& x, const std::vector<int>& dims);  // a view with its axes in the order `dims`
// a: (B, M, K), b: (B, K, N) -> (B, M, N), batched products (the GEMMs of attention).
Var matmul(const Var& a, const Var& b);
Var flatten(const Var& x);  // (N, ...) -> (N, prod(...))
Var sum(const Var& x);      // -> scalar
Var mean(const Var& x);     // -> scalar

// Pieces of a tensor and tensors put together, along `axis` (negative counts from the end). The pieces
// are views; their gradients are gathered into one buffer of x's shape, so taking T pieces of a
// (N, T, F) sequence costs one gradient of the sequence's size, not T.
std::vector<Var> unbind(const Var& x, int axis);             // x[..., i, ...] for each i, the axis removed
std::vector<Var> chunk(const Var& x, int axis, int count);   // `count` equal parts (the axis must divide)
Var select(const Var& x, int axis, int64_t index);           // one slice, the axis removed
Var slice(const Var& x, int axis, int64_t start, int64_t end);  // [start, end) along the axis
Var concat(const std::vector<Var>& parts, int axis);         // parts equal but along `axis`
Var stack(const std::vector<Var>& parts, int axis);          // equal parts along a new axis
Var mean_over(const Var& x, int axis);                       // the axis averaged away

// Recurrent layers over a batch-first sequence, as torch.nn.RNN/LSTM/GRU with batch_first=True and a
// zero initial state, composed from GEMMs and elementwise ops (so every backend runs them). Weights
// per layer and direction as torch: weight_ih (G*H, F), weight_hh (G*H, H), bias_ih and bias_hh (G*H)
// or undefined, with G = 1 (rnn), 4 (lstm: gates i, f, g, o) or 3 (gru: r, z, n).
enum class RecurrentCell { rnn_tanh, rnn_relu, lstm, gru };
// The gates a cell's weights stack: 1 (rnn), 4 (lstm) or 3 (gru).
int gate_count(RecurrentCell cell);
struct RecurrentWeights {
  Var weight_ih, weight_hh, bias_ih, bias_hh;
};
// The state a recurrent layer carries between calls when decoding step by step: h (N, H), and c (N, H)
// for the LSTM; undefined tensors mean zeros (torch's default initial state).
struct RecurrentState {
  Tensor h, c;
};
// x: (N, T, F) -> (N, T, H), one layer in one direction (`reverse` reads the sequence backwards and
// writes each output at its own position, as torch's reverse direction). With `state`, the steps start
// from it and leave the final state in it.
// `embedded`, when given, says what x is (an embedding's output), so the input projection may go
// through the table (projected_embedding) where that takes fewer products.
Var recurrent_layer(const Var& x, const RecurrentWeights& weights, RecurrentCell cell, bool reverse,
                    RecurrentState* state = nullptr, const EmbeddedTokens* embedded = nullptr);

// Scaled dot-product attention: softmax(q k^T / sqrt(D) + mask) v, composed from batched GEMMs and a
// softmax, with dropout on the weights in training. q: (B, Tq, D), k and v: (B, Tk, D) -> (B, Tq, D).
// causal: query i may see keys up to position (Tk - Tq) + i, so a query block that continues a cached
// prefix (Tk > Tq, decoding) sees the whole prefix and itself.
struct AttentionOptions {
  bool causal = false;
  // (Tq, Tk), added to the scores when defined (then `causal` is not applied again). With `causal` set it
  // must be causal_mask's: the fused attention op (plugin ABI 1.7) masks by itself and ignores it.
  Tensor mask;
  // (N, Tk) with B = N * heads: 1 where key j of sample n is padding, 0 where it is real (torch's
  // key_padding_mask, True = ignore). Padded keys get no weight from a query that sees a real key; one
  // that sees only padded keys (left padding under a causal mask) weighs those equally, never a later
  // position (torch gives NaN there).
  Tensor key_padding;
  double dropout = 0;  // on the attention weights, in training
  bool training = false;
  uint64_t seed = 0, offset = 0;  // Philox stream of the dropout mask
};
Var scaled_dot_product_attention(const Var& q, const Var& k, const Var& v, const AttentionOptions& options);
// The causal mask as an additive (queries, keys) tensor: 0 where query i may see key j (j <= keys -
// queries + i), a large negative number elsewhere (exp of it is exactly 0). Built on the host: layers
// keep it (Layer::constant) so a captured step does not upload it again.
Tensor causal_mask(int64_t queries, int64_t keys, DType dtype, const Device& device);

// torch.nn.MultiheadAttention (batch_first) over query (N, Tq, E) and key_value (N, Tk, E) (the same
// Var for self-attention): in_proj_weight (3E, E) and in_proj_bias (3E) project q, k, v; `heads`
// heads of E / heads; out_proj (E, E) and its bias join them -> (N, Tq, E). Biases may be undefined.
struct AttentionWeights {
  Var in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias;
};
// Keys and values of the positions a decoder has seen (B = N * heads): (B, T, D) each, undefined at first;
// with a key-padding mask, its (N, T) rows for those positions too.
struct AttentionCache {
  Tensor keys, values, key_padding;
};
// With `cache` (self-attention while decoding), the new keys and values (and the key-padding rows of
// the new positions, options.key_padding (N, Tk_new)) are appended to it and the queries attend to
// everything in it.
Var multihead_attention(const Var& query, const Var& key_value, const AttentionWeights& weights, int64_t heads,
                        const AttentionOptions& options, AttentionCache* cache = nullptr);

// Activation checkpointing (torch.utils.checkpoint): runs `body` on `inputs` without recording, so of
// its activations only the inputs are kept, and runs it again, recording, when backward reaches its
// output, then differentiates that run. `params` are the leaves body reads (their gradients come from
// the second run). body must compute the same values both times: it replays its random draws and keeps
// state such as running statistics from being updated twice; `recomputing` says which run it is.
using CheckpointBody = std::function<Var(const std::vector<Var>& inputs, bool recomputing)>;
Var checkpoint(const CheckpointBody& body, const std::vector<Var>& inputs, const std::vector<Var>& params);

// logits: (N, C) with labels (N), or per position (N, T, C) with labels (N, T); i64 labels -> the mean
// loss over samples (positions) as a scalar. Positions labelled ignore_index, when given, add nothing
// and are not counted (torch's ignore_index; all ignored gives NaN, as torch). Fused softmax +
// cross-entropy where offered.
Var cross_entropy(const Var& logits, const Tensor& labels, std::optional<int64_t> ignore_index = std::nullopt);
// mean((prediction - target)^2) -> scalar
Var mse_loss(const Var& prediction, const Tensor& target);

}  // namespace kestrel::fn
