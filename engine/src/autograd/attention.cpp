// Attention: the fused ATTENTION op where the device offers it (plugin ABI 1.7: the (T x T) weights are
// not kept for backward), else composed from batched GEMMs, a mask and a softmax, which every backend runs.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <memory>
#include <optional>

#include "autocast.h"
#include "kestrel/functional.h"
#include "tensor_math.h"

namespace kestrel::fn {

namespace {

// Added to a masked score: exp() of it is exactly 0 without an infinity in any op.
constexpr double kMasked = -1e30;
// Added to a padded key's score (plugin ABI 1.9's, so fused and composed attention agree): as good as
// kMasked against a real key, but above it, so a query that may see only padded keys (left padding under
// a causal mask) weighs those and never a later position.
constexpr double kPadded = KESTREL_KEY_PADDING_SCORE;

}  // namespace

Tensor causal_mask(int64_t queries, int64_t keys, DType dtype, const Device& device) {
  const int64_t past = keys - queries;
  std::vector<float> mask(static_cast<size_t>(queries * keys), 0.0f);  // f32: every backend holds it
  for (int64_t i = 0; i < queries; ++i)
    for (int64_t j = past + i + 1; j < keys; ++j) mask[i * keys + j] = static_cast<float>(kMasked);
  Tensor out = Tensor::from_vector(mask, {queries, keys}, device);
  return dtype == DType::f32 ? out : out.to(dtype);
}

namespace {

// (N, T, E) -> (N * heads, T, E / heads): each head's slice of the features as its own batch entry.
Var split_heads(const Var& x, int64_t heads) {
  const Shape& s = x.value().shape();
  const int64_t depth = s[2] / heads;
  return reshape(permute(reshape(x, {s[0], s[1], heads, depth}), {0, 2, 1, 3}), {s[0] * heads, s[1], depth});
}

// Part i (q, k, v) of a packed projection (N, T, 3E) as (N, heads, T, D) views; a (N, T, E) tensor is its
// part 0 of 1.
Tensor packed_heads(const Tensor& t, int64_t i, int64_t heads, int64_t parts = 3) {
  const int64_t width = t.size(2) / parts;
  return t.slice(2, i * width, (i + 1) * width).unflatten(2, {heads, width / heads}).permute({0, 2, 1, 3});
}

// Self-attention's packed projection qkv (N, T, 3E) as q, k and v of (N * heads, T, D) each. Forward
// copies each part once, from its columns straight into the heads' layout (split_heads on a chunk copies
// twice: the strided chunk, then its heads). Backward writes each part's gradient straight into its
// columns of one (N, T, 3E) gradient: no zero fill, and no addition unless a part's gradient comes twice.
std::vector<Var> split_packed_heads(const Var& qkv, int64_t heads) {
  const Shape& s = qkv.value().shape();
  const int64_t n = s[0], steps = s[1], depth = s[2] / 3 / heads;
  auto part = [heads](const Tensor& t, int64_t i) { return packed_heads(t, i, heads); };
  auto written = std::make_shared<std::array<bool, 3>>();  // which parts' columns the gradient holds
  Var whole = make_var(qkv.value(), {qkv}, "split_heads", [qkv = qkv.node(), written, part](const Tensor& dy) {
    for (int64_t i = 0; i < 3; ++i) {
      if ((*written)[size_t(i)]) continue;
      Tensor columns = part(dy, i);  // a part no gradient reached adds nothing
      ops::fill_(columns, 0.0);
    }
    written->fill(false);
    accumulate_grad(*qkv, dy);
  });
  std::vector<Var> out;
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor heads_major = part(qkv.value(), i).contiguous().view({n * heads, steps, depth});  // (N * heads, T, D)
    out.push_back(make_var(heads_major, {whole}, "split_heads",
                           [whole = whole.node(), written, part, i, n, heads](const Tensor& dy) {
                             // The buffer is this node's own (never another node's gradient): written in place.
                             if (!whole->grad.defined())
                               whole->grad = Tensor::empty(whole->value.shape(), dy.dtype(), dy.device());
                             Tensor columns = part(whole->grad, i);  // (N, heads, T, D) view
                             const Tensor g = dy.reshape({n, heads, dy.size(1), dy.size(2)});
                             bool& seen = (*written)[size_t(i)];
                             if (seen)
                               ops::binary_(KESTREL_BINARY_ADD, columns, columns, g);
                             else
                               ops::copy_(columns, g);
                             seen = true;
                           }));
  }
  return out;
}

// (N * heads, T, D) -> (N, T, heads * D)
Var join_heads(const Var& x, int64_t heads) {
  const Shape& s = x.value().shape();
  return reshape(permute(reshape(x, {s[0] / heads, heads, s[1], s[2]}), {0, 2, 1, 3}), {s[0] / heads, s[1], heads * s[2]});
}

// (N, T, E) through one (E, E) block of the input projection, as a GEMM over all positions.
Var project(const Var& x, const Var& weight, const Var& bias) {
  const Shape& s = x.value().shape();
  return reshape(linear(reshape(x, {s[0] * s[1], s[2]}), weight, bias), {s[0], s[1], weight.value().size(0)});
}

}  // namespace

namespace {

// An attention op's inputs, followed by the key-padding mask and the counter base where given (defined).
std::vector<Tensor> with_extras(std::vector<Tensor> inputs, const Tensor& padding, const Tensor& counter) {
  if (padding.defined()) inputs.push_back(padding);
  if (counter.defined()) inputs.push_back(counter);
  return inputs;
}

// The fused ops' parameters and extra inputs for these options, and the ops on given tensors (which point
// at `params`: they live no longer than this setup, and a backward closure holds a copy of its own).
struct FusedSetup {
  kestrel_attention_params params;
  Tensor padding;  // (N, Tk) with key padding
  Tensor counter;  // with dropout: the counter base (a captured step's, else zero), both ops' last input

  kestrel_op forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) const {
    return ops::make_op(KESTREL_OP_ATTENTION, &params, with_extras({q, k, v}, padding, counter), {out, lse});
  }
  kestrel_op backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                      const Tensor& lse, const std::vector<Tensor>& grads) const {
    return ops::make_op(KESTREL_OP_ATTENTION_BACKWARD, &params, with_extras({dout, q, k, v, out, lse}, padding, counter),
                        grads);
  }
  // Forward launched, where the device runs both ops on these tensors (backward asked with forward's tensors
  // standing in for the gradients: same shapes, dtypes and layouts).
  bool launch_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) const {
    const Device& device = q.device();
    return ops::supports(device, backward(out, q, k, v, out, lse, {q, k, v})) &&
           ops::launch_if_supported(device, forward(q, k, v, out, lse));
  }
};

FusedSetup fused_setup(const AttentionOptions& o, int64_t depth, DType dtype, const Device& device) {
  FusedSetup f{abi_init<kestrel_attention_params>(), Tensor(), Tensor()};
  f.params.scale = 1.0 / std::sqrt(double(depth));
  f.params.causal = o.causal ? 1 : 0;
  if (o.key_padding.defined()) {
    f.params.key_padding = 1;
    f.padding = o.key_padding.to(dtype).contiguous();
  }
  if (o.training && o.dropout > 0) {
    f.params.dropout = o.dropout;
    f.params.seed = o.seed;
    f.params.offset = o.offset;
    f.counter = ops::counter_base(device, f.params.offset);
    if (!f.counter.defined()) f.counter = Tensor::zeros({}, DType::i64, device);
  }
  return f;
}

// The fused op on q (B, Tq, D), k and v (B, Tk, D), or nothing when the device lacks it (forward or
// backward) or the options need the composed path (an explicit mask). Dropout on the weights goes into
// the op (plugin ABI 1.8) with the composed path's seed and offset, so both drop the same weights, and
// a key-padding mask (1.9) in the op's dtype; a device that cannot do either composes. Under autocast it runs in the
// scope's 16-bit dtype and returns its result in it, like the products it replaces.
std::optional<Var> fused_attention(const Var& q, const Var& k, const Var& v, const AttentionOptions& o) {
  if (!ops::fused_ops_enabled() || (o.mask.defined() && !o.causal)) return std::nullopt;
  const DType dtype = autocasts(q) ? autocast_dtype() : q.value().dtype();
  const Tensor q_in = q.value().to(dtype).contiguous(), k_in = k.value().to(dtype).contiguous(),
               v_in = v.value().to(dtype).contiguous();
  const Device& device = q_in.device();
  Tensor out = Tensor::empty(q_in.shape(), dtype, device);                                       // (B, Tq, D)
  Tensor log_sum_exp = Tensor::empty({q_in.size(0), q_in.size(1)}, math::statistics_dtype(dtype), device);  // (B, Tq)
  const FusedSetup setup = fused_setup(o, q_in.size(2), dtype, device);
  if (!setup.launch_forward(q_in, k_in, v_in, out, log_sum_exp)) return std::nullopt;
  return make_var(out, {q, k, v}, "attention",
                  [q = q.node(), k = k.node(), v = v.node(), q_in, k_in, v_in, out, log_sum_exp, setup](const Tensor& dy) {
                    const Tensor dout = dy.to(out.dtype()).contiguous();  // (B, Tq, D)
                    Tensor dq = Tensor::empty(q_in.shape(), q_in.dtype(), q_in.device());
                    Tensor dk = Tensor::empty(k_in.shape(), k_in.dtype(), k_in.device());
                    Tensor dv = Tensor::empty(v_in.shape(), v_in.dtype(), v_in.device());
                    ops::launch(q_in.device(), setup.backward(dout, q_in, k_in, v_in, out, log_sum_exp, {dq, dk, dv}));
                    if (q->requires_grad) accumulate_grad(*q, dq.to(q->value.dtype()));
                    if (k->requires_grad) accumulate_grad(*k, dk.to(k->value.dtype()));
                    if (v->requires_grad) accumulate_grad(*v, dv.to(v->value.dtype()));
                  });
}

// Self-attention over a packed projection qkv (N, T, 3E) through the fused ops on (N, heads, T, D) views of
// it (plugin ABI 1.13): the heads are read where the projection left them and the result written as (N, T,
// E) rows; backward writes dq, dk and dv into their columns of one (N, T, 3E) gradient. No copies to split
// or join heads. Nothing where the device takes no such views (or the options need the composed path).
std::optional<Var> packed_self_attention(const Var& qkv, int64_t heads, const AttentionOptions& o) {
  if (!ops::fused_ops_enabled() || (o.mask.defined() && !o.causal)) return std::nullopt;
  const DType dtype = autocasts(qkv) ? autocast_dtype() : qkv.value().dtype();
  const Tensor packed = qkv.value().to(dtype).contiguous();  // (N, T, 3E)
  const Device& device = packed.device();
  const int64_t n = packed.size(0), steps = packed.size(1), width = packed.size(2) / 3;
  Tensor out = Tensor::empty({n, steps, width}, dtype, device);                         // (N, T, E)
  const Tensor out_heads = packed_heads(out, 0, heads, 1);                               // (N, heads, T, D)
  Tensor log_sum_exp = Tensor::empty({n * heads, steps}, math::statistics_dtype(dtype), device);  // (B, T)
  const FusedSetup setup = fused_setup(o, width / heads, dtype, device);
  auto part = [heads](const Tensor& t, int64_t i) { return packed_heads(t, i, heads); };  // (N, heads, T, D)
  if (!setup.launch_forward(part(packed, 0), part(packed, 1), part(packed, 2), out_heads, log_sum_exp))
    return std::nullopt;
  return make_var(out, {qkv}, "attention",
                  [qkv = qkv.node(), packed, out_heads, log_sum_exp, setup, heads, part](const Tensor& dy) {
                    const Tensor dout = packed_heads(dy.to(packed.dtype()).contiguous(), 0, heads, 1);  // (N, heads, T, D)
                    Tensor grad = Tensor::empty(packed.shape(), packed.dtype(), packed.device());        // (N, T, 3E)
                    ops::launch(packed.device(),
                                setup.backward(dout, part(packed, 0), part(packed, 1), part(packed, 2), out_heads,
                                               log_sum_exp, {part(grad, 0), part(grad, 1), part(grad, 2)}));
                    accumulate_grad(*qkv, grad.to(qkv->value.dtype()));
                  });
}

// Batched GEMMs, the mask and a softmax, on q (B, Tq, D), k and v (B, Tk, D) checked by the caller.
Var composed_attention(const Var& q, const Var& k, const Var& v, const AttentionOptions& o) {
  const Tensor& query = q.value();
  const int64_t queries = query.size(1), keys = k.value().size(1);
  const Var scale(Tensor::full({}, 1.0 / std::sqrt(double(query.size(2))), query.dtype(), query.device()));
  Var scores = mul(matmul(q, permute(k, {0, 2, 1})), scale);  // (B, Tq, Tk)
  if (o.mask.defined()) {
    scores = add(scores, Var(o.mask));
  } else if (o.causal && keys > 1 && queries > 1) {  // one query continuing a prefix sees all of it
    scores = add(scores, Var(causal_mask(queries, keys, query.dtype(), query.device())));
  }
  if (o.key_padding.defined()) {  // (N, Tk) -> kPadded on each padded key's column of every head and query
    const int64_t samples = o.key_padding.size(0), heads = query.size(0) / samples;
    const Tensor blocked = ops::unary(KESTREL_UNARY_AFFINE, o.key_padding.to(query.dtype()), kPadded, 0.0);
    scores = reshape(add(reshape(scores, {samples, heads, queries, keys}), Var(blocked.reshape({samples, 1, 1, keys}))),
                     {samples * heads, queries, keys});
  }
  Var weights = softmax(scores);
  if (o.training && o.dropout > 0) weights = dropout(weights, o.dropout, true, o.seed, o.offset);
  return matmul(weights, v);  // (B, Tq, D)
}

}  // namespace

Var scaled_dot_product_attention(const Var& q, const Var& k, const Var& v, const AttentionOptions& o) {
  const Tensor& query = q.value();  // (B, Tq, D)
  if (query.rank() != 3 || k.value().rank() != 3 || v.value().shape() != k.value().shape() ||
      k.value().size(0) != query.size(0) || k.value().size(2) != query.size(2))
    throw InvalidArgument(fmt::format("attention: q {}, k {} and v {} must be (B, Tq, D), (B, Tk, D), (B, Tk, D)",
                                      query.describe(), k.value().describe(), v.value().describe()));
  const int64_t queries = query.size(1), keys = k.value().size(1);
  if (o.causal && keys < queries)
    throw InvalidArgument(fmt::format("attention: a causal mask needs at least as many keys ({}) as queries ({})", keys,
                                      queries));
  if (const Tensor& padding = o.key_padding; padding.defined() &&
      (padding.rank() != 2 || padding.size(1) != keys || padding.size(0) < 1 || query.size(0) % padding.size(0) != 0))
    throw InvalidArgument(fmt::format("attention: a key-padding mask {} must be (N, {}) for {} queries of N samples",
                                      padding.describe(), keys, query.describe()));
  if (std::optional<Var> fused = fused_attention(q, k, v, o)) return *fused;
  // 16-bit inputs under autocast are widened for the composed path: its scale and mask then apply in f32
  // (a mask's large negatives would overflow f16), and its products still run in the scope's dtype.
  const DType dtype = query.dtype();
  if (dtype != DType::f32 && dtype == autocast_dtype())
    return composed_attention(cast(q, DType::f32), cast(k, DType::f32), cast(v, DType::f32), o);  // 16-bit again
  return composed_attention(q, k, v, o);
}

Var multihead_attention(const Var& query, const Var& key_value, const AttentionWeights& w, int64_t heads,
                        const AttentionOptions& o, AttentionCache* cache) {
  const int64_t embed = query.value().size(2);
  if (query.value().rank() != 3 || key_value.value().rank() != 3 || key_value.value().size(2) != embed ||
      embed % heads != 0 || w.in_proj_weight.value().shape() != Shape{3 * embed, embed})
    throw InvalidArgument(fmt::format("multihead attention: query {} and key/value {} with in_proj_weight {} and {} heads",
                                      query.value().describe(), key_value.value().describe(),
                                      w.in_proj_weight.value().describe(), heads));
  // Under autocast the projections and the attention run in the scope's 16-bit dtype, and so does the result.
  const Var &in_proj_weight = w.in_proj_weight, &in_proj_bias = w.in_proj_bias, &q_in = query;
  Var q, k, v;
  if (key_value.node() == query.node()) {  // self-attention: one product with the packed (3E, E) weight
    const Var packed = project(q_in, in_proj_weight, in_proj_bias);  // (N, T, 3E)
    if (!cache)
      if (std::optional<Var> attended = packed_self_attention(packed, heads, o))
        return project(*attended, w.out_proj_weight, w.out_proj_bias);
    const std::vector<Var> qkv = split_packed_heads(packed, heads);
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  } else {  // q, k and v from the three (E, E) blocks of the packed projection, as torch packs them
    const Var& kv_in = key_value;
    const std::vector<Var> weight = chunk(in_proj_weight, 0, 3);
    const std::vector<Var> bias = in_proj_bias.defined() ? chunk(in_proj_bias, 0, 3) : std::vector<Var>(3);
    q = split_heads(project(q_in, weight[0], bias[0]), heads);
    k = split_heads(project(kv_in, weight[1], bias[1]), heads);
    v = split_heads(project(kv_in, weight[2], bias[2]), heads);
  }
  AttentionOptions options = o;
  if (cache) {  // decoding: the new positions join those seen before (no gradient flows here)
    if (cache->keys.defined()) {
      k = concat({Var(cache->keys), k}, 1);
      v = concat({Var(cache->values), v}, 1);
      if (o.key_padding.defined())
        options.key_padding = concat({Var(cache->key_padding), Var(o.key_padding)}, 1).value();  // (N, Tk)
    }
    cache->keys = k.value();
    cache->values = v.value();
    cache->key_padding = options.key_padding;
  }
  Var attended = join_heads(scaled_dot_product_attention(q, k, v, options), heads);  // (N, Tq, E)
  return project(attended, w.out_proj_weight, w.out_proj_bias);
}

}  // namespace kestrel::fn
