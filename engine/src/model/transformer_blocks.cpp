// The blocks of Transformer layers, written in differentiable functions (backward beside each of them).
#include "transformer_blocks.h"

#include <cmath>

namespace kestrel::transformer {

namespace {

// Per-position layers over a (N, T, E) sequence.
Var linear3(const Var& x, const Var& weight, const Var& bias, kestrel_activation act = KESTREL_ACTIVATION_NONE) {
  const Shape& s = x.value().shape();
  return fn::reshape(fn::linear(fn::reshape(x, {s[0] * s[1], s[2]}), weight, bias, act), {s[0], s[1], weight.value().size(0)});
}

// linear2(dropout(activation(linear1(x)))); under autocast its result and activations are 16-bit.
Var feedforward(const Var& x, Params& p, const BlockConfig& b, LayerContext& c) {
  Var w1 = p.take(), b1 = p.take_bias(), w2 = p.take(), b2 = p.take_bias();
  Var hidden = drop(linear3(x, w1, b1, b.gelu ? KESTREL_ACTIVATION_GELU : KESTREL_ACTIVATION_RELU), b.dropout, c);
  return linear3(hidden, w2, b2);
}


}  // namespace

Var norm(const Var& x, Params& p, double eps, bool feeds_product) {
  Var weight = p.take(), bias = p.take_bias();
  return fn::layer_norm(x, weight, bias, 1, eps, feeds_product);
}

void attention_params(std::vector<ParamSpec>& p, const std::string& prefix, int64_t e, bool bias) {
  p.push_back({prefix + "in_proj_weight", {3 * e, e}, std::sqrt(6.0 / double(4 * e))});  // xavier_uniform_
  if (bias) p.push_back({prefix + "in_proj_bias", {3 * e}, 0, true, 0.0});
  p.push_back({prefix + "out_proj.weight", {e, e}, 1.0 / std::sqrt(double(e))});
  if (bias) p.push_back({prefix + "out_proj.bias", {e}, 0, true, 0.0});
}

void linear_params(std::vector<ParamSpec>& p, const std::string& prefix, int64_t in, int64_t out, bool bias) {
  const double bound = 1.0 / std::sqrt(double(in));
  p.push_back({prefix + "weight", {out, in}, bound});
  if (bias) p.push_back({prefix + "bias", {out}, bound});
}

void norm_params(std::vector<ParamSpec>& p, const std::string& prefix, int64_t e, bool bias) {
  p.push_back({prefix + "weight", {e}, 0, true, 1.0});
  if (bias) p.push_back({prefix + "bias", {e}, 0, true, 0.0});
}

BlockConfig::BlockConfig(const Args& a)
    : width(a.integer("d_model")),
      heads(a.integer("nhead")),
      feedforward(a.integer("dim_feedforward")),
      dropout(a.number("dropout")),
      eps(a.number("layer_norm_eps")),
      gelu(a.choice("activation") == "gelu"),
      norm_first(a.boolean("norm_first")),
      bias(a.boolean("bias")) {
  if (width % heads != 0) shape_error(fmt::format("d_model {} is not a multiple of nhead {}", width, heads));
}

Var drop(const Var& x, double p, LayerContext& c) {
  if (!c.training || p == 0) return x;
  const uint64_t offset = c.rng_offset;
  c.rng_offset += (static_cast<uint64_t>(x.value().numel()) + 3) / 4;
  return fn::dropout(x, p, true, c.seed, offset);
}

fn::AttentionOptions attention_options(double dropout, LayerContext& c, const Masking& masking, int64_t weights) {
  fn::AttentionOptions o;
  o.causal = masking.causal;
  o.mask = masking.mask;
  o.key_padding = masking.key_padding;
  o.dropout = dropout;
  o.training = c.training;
  o.seed = c.seed;
  o.offset = c.rng_offset;
  if (c.training && dropout > 0) c.rng_offset += (static_cast<uint64_t>(weights) + 3) / 4;
  return o;
}

// The number of attention weights of `heads` heads of queries x (N, Tq, E) over `keys` keys.
int64_t weight_count(const Var& x, int64_t heads, int64_t keys) { return x.value().size(0) * heads * x.value().size(1) * keys; }

std::vector<fn::AttentionCache> load_caches(const LayerContext& c, size_t count) {
  if (!c.carried) return {};
  c.carried->resize(3 * count);
  std::vector<fn::AttentionCache> caches(count);
  for (size_t k = 0; k < count; ++k)
    caches[k] = {(*c.carried)[3 * k], (*c.carried)[3 * k + 1], (*c.carried)[3 * k + 2]};
  return caches;
}
void store_caches(const LayerContext& c, const std::vector<fn::AttentionCache>& caches) {
  for (size_t k = 0; k < caches.size(); ++k) {
    (*c.carried)[3 * k] = caches[k].keys;
    (*c.carried)[3 * k + 1] = caches[k].values;
    (*c.carried)[3 * k + 2] = caches[k].key_padding;
  }
}
fn::AttentionCache* cache_at(std::vector<fn::AttentionCache>& caches, size_t k) {
  return caches.empty() ? nullptr : &caches[k];
}
int64_t keys_seen(const fn::AttentionCache* cache) { return cache && cache->keys.defined() ? cache->keys.size(1) : 0; }

Var encoder_block(const Var& x, Params& p, const BlockConfig& b, const Masking& masking, LayerContext& c,
                  fn::AttentionCache* cache) {
  fn::AttentionWeights attention = p.attention();
  // The feed-forward's and the norms' parameters come after the attention's, in torch's order.
  Params rest = p;
  rest.next += b.bias ? 4 : 2;  // linear1 and linear2
  auto self_attend = [&](const Var& in) {
    const int64_t keys = in.value().size(1) + keys_seen(cache);
    return drop(fn::multihead_attention(in, in, attention, b.heads,
                                        attention_options(b.dropout, c, masking, weight_count(in, b.heads, keys)),
                                        cache),
                b.dropout, c);
  };
  Params ff = p;
  Var out;
  if (b.norm_first) {  // the norms feed the attention's and the feed-forward's products alone
    out = fn::add(x, self_attend(norm(x, rest, b.eps, true)));
    out = fn::add(out, drop(feedforward(norm(out, rest, b.eps, true), ff, b, c), b.dropout, c));
  } else {
    out = norm(fn::add(x, self_attend(x)), rest, b.eps);
    out = norm(fn::add(out, drop(feedforward(out, ff, b, c), b.dropout, c)), rest, b.eps);
  }
  p.next = rest.next;
  return out;
}

std::string norm_onnx(onnx::Graph& g, const std::string& x, onnx::HostParams& p, const BlockConfig& b,
                      const std::string& hint) {
  const onnx::HostTensor& weight = p.take();
  return onnx::layer_norm(g, x, b.width, &weight, p.take_bias(), b.eps, hint);
}

namespace {

std::string feedforward_onnx(onnx::Graph& g, const std::string& x, onnx::HostParams& p, const BlockConfig& b,
                             const std::string& hint) {
  const onnx::HostTensor& w1 = p.take();
  const onnx::HostTensor* b1 = p.take_bias();
  const onnx::HostTensor& w2 = p.take();
  const onnx::HostTensor* b2 = p.take_bias();
  const std::string hidden =
      onnx::activation(g, onnx::linear(g, x, w1, b1, hint), b.gelu ? KESTREL_ACTIVATION_GELU : KESTREL_ACTIVATION_RELU, hint);
  return onnx::linear(g, hidden, w2, b2, hint);
}

}  // namespace

std::string encoder_block_onnx(onnx::Graph& g, const std::string& x, onnx::HostParams& p, const BlockConfig& b,
                               bool causal, int64_t positions, const std::string& key_padding, const std::string& hint) {
  const onnx::AttentionWeights attention = onnx::take_attention(p);
  onnx::HostParams ff = p, rest = p;  // as encoder_block: the norms' parameters after the feed-forward's
  rest.next += b.bias ? 4 : 2;
  auto self_attend = [&](const std::string& in) {
    return onnx::attention(g, in, in, attention, b.width, b.heads, positions, positions, causal, key_padding,
                           hint + "/self_attn");
  };
  std::string out;
  if (b.norm_first) {
    out = g.node("Add", {x, self_attend(norm_onnx(g, x, rest, b, hint + "/norm1"))}, hint);
    out = g.node("Add", {out, feedforward_onnx(g, norm_onnx(g, out, rest, b, hint + "/norm2"), ff, b, hint)}, hint);
  } else {
    out = norm_onnx(g, g.node("Add", {x, self_attend(x)}, hint), rest, b, hint + "/norm1");
    out = norm_onnx(g, g.node("Add", {out, feedforward_onnx(g, out, ff, b, hint)}, hint), rest, b, hint + "/norm2");
  }
  p.next = rest.next;
  return out;
}

void encoder_block_params(std::vector<ParamSpec>& p, const std::string& prefix, const BlockConfig& b) {
  attention_params(p, prefix + "self_attn.", b.width, b.bias);
  linear_params(p, prefix + "linear1.", b.width, b.feedforward, b.bias);
  linear_params(p, prefix + "linear2.", b.feedforward, b.width, b.bias);
  norm_params(p, prefix + "norm1.", b.width, b.bias);
  norm_params(p, prefix + "norm2.", b.width, b.bias);
}

// One decoder block: causal self-attention, attention over the memory (N, S, E), feed-forward.
// Parameters: self_attn.*, multihead_attn.*, linear1, linear2, norm1, norm2, norm3.
Var decoder_block(const Var& x, const Var& memory, Params& p, const BlockConfig& b, const Masking& self_masking,
                  const Masking& memory_masking, LayerContext& c, fn::AttentionCache* self_cache,
                  fn::AttentionCache* memory_cache) {
  fn::AttentionWeights self_weights = p.attention(), memory_weights = p.attention();
  Params ff = p;
  Params rest = p;
  rest.next += b.bias ? 4 : 2;
  auto self_attend = [&](const Var& in) {
    const int64_t keys = in.value().size(1) + keys_seen(self_cache);
    return drop(fn::multihead_attention(in, in, self_weights, b.heads,
                                        attention_options(b.dropout, c, self_masking, weight_count(in, b.heads, keys)),
                                        self_cache),
                b.dropout, c);
  };
  auto attend_memory = [&](const Var& in) {
    const int64_t keys = memory.value().size(1) + keys_seen(memory_cache);
    return drop(fn::multihead_attention(in, memory, memory_weights, b.heads,
                                        attention_options(b.dropout, c, memory_masking, weight_count(in, b.heads, keys)),
                                        memory_cache),
                b.dropout, c);
  };
  Var out;
  if (b.norm_first) {  // the norms feed the attentions' and the feed-forward's products alone
    out = fn::add(x, self_attend(norm(x, rest, b.eps, true)));
    out = fn::add(out, attend_memory(norm(out, rest, b.eps, true)));
    out = fn::add(out, drop(feedforward(norm(out, rest, b.eps, true), ff, b, c), b.dropout, c));
  } else {
    out = norm(fn::add(x, self_attend(x)), rest, b.eps);
    out = norm(fn::add(out, attend_memory(out)), rest, b.eps);
    out = norm(fn::add(out, drop(feedforward(out, ff, b, c), b.dropout, c)), rest, b.eps);
  }
  p.next = rest.next;
  return out;
}

std::string decoder_block_onnx(onnx::Graph& g, const std::string& x, const std::string& memory, onnx::HostParams& p,
                               const BlockConfig& b, bool memory_causal, int64_t positions, int64_t memory_positions,
                               const std::string& memory_key_padding, const std::string& target_key_padding,
                               const std::string& hint) {
  const onnx::AttentionWeights self_weights = onnx::take_attention(p), memory_weights = onnx::take_attention(p);
  onnx::HostParams ff = p, rest = p;
  rest.next += b.bias ? 4 : 2;
  auto self_attend = [&](const std::string& in) {  // causal, as torch's usual tgt_mask
    return onnx::attention(g, in, in, self_weights, b.width, b.heads, positions, positions, true, target_key_padding,
                           hint + "/self_attn");
  };
  auto attend_memory = [&](const std::string& in) {
    return onnx::attention(g, in, memory, memory_weights, b.width, b.heads, positions, memory_positions, memory_causal,
                           memory_key_padding, hint + "/multihead_attn");
  };
  std::string out;
  if (b.norm_first) {
    out = g.node("Add", {x, self_attend(norm_onnx(g, x, rest, b, hint + "/norm1"))}, hint);
    out = g.node("Add", {out, attend_memory(norm_onnx(g, out, rest, b, hint + "/norm2"))}, hint);
    out = g.node("Add", {out, feedforward_onnx(g, norm_onnx(g, out, rest, b, hint + "/norm3"), ff, b, hint)}, hint);
  } else {
    out = norm_onnx(g, g.node("Add", {x, self_attend(x)}, hint), rest, b, hint + "/norm1");
    out = norm_onnx(g, g.node("Add", {out, attend_memory(out)}, hint), rest, b, hint + "/norm2");
    out = norm_onnx(g, g.node("Add", {out, feedforward_onnx(g, out, ff, b, hint)}, hint), rest, b, hint + "/norm3");
  }
  p.next = rest.next;
  return out;
}

void decoder_block_params(std::vector<ParamSpec>& p, const std::string& prefix, const BlockConfig& b) {
  attention_params(p, prefix + "self_attn.", b.width, b.bias);
  attention_params(p, prefix + "multihead_attn.", b.width, b.bias);
  linear_params(p, prefix + "linear1.", b.width, b.feedforward, b.bias);
  linear_params(p, prefix + "linear2.", b.feedforward, b.width, b.bias);
  norm_params(p, prefix + "norm1.", b.width, b.bias);
  norm_params(p, prefix + "norm2.", b.width, b.bias);
  norm_params(p, prefix + "norm3.", b.width, b.bias);
}

}  // namespace kestrel::transformer
