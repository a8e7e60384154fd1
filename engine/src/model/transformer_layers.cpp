// Attention layers with torch.nn's names, arguments, parameter names and initialisation:
// multihead_attention (self-attention), positional_encoding (sinusoidal) and positional_embedding
// (learned), transformer_encoder_layer, transformer_decoder_layer and transformer (encoder-decoder).
// Kestrel's sequences are batch-first (N, T, d_model). `causal` (Kestrel's, where torch passes a mask
// per call) masks every position's view of later ones, which a language model needs; causal layers can
// decode step by step, carrying their keys and values (Model::decode).
#include <fmt/format.h>

#include <cmath>

#include "layer.h"

namespace kestrel {

namespace {

[[noreturn]] void shape_error(const std::string& message) { throw ShapeError(message); }

void need_width(const char* type, const Shape& in, int64_t width) {
  if (in.size() != 3 || in[2] != width)
    shape_error(fmt::format("{} expects a batch-first sequence (N, T, {}), got {}", type, width, batch_shape_str(in)));
}

// The parameters of the blocks, in torch's state_dict order and with its initialisation.
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

// The layer's parameters handed out in the order params() declared them.
struct Params {
  const std::vector<Var>& all;
  size_t next = 0;
  bool bias;
  Var take() { return all.at(next++); }
  Var take_bias() { return bias ? take() : Var(); }
  fn::AttentionWeights attention() {
    fn::AttentionWeights w;
    w.in_proj_weight = take();
    w.in_proj_bias = take_bias();
    w.out_proj_weight = take();
    w.out_proj_bias = take_bias();
    return w;
  }
};

// What the blocks share: sizes, dropout, activation, norm placement.
struct BlockConfig {
  int64_t width, heads, feedforward;
  double dropout, eps;
  bool gelu, norm_first, bias;

  explicit BlockConfig(const Args& a)
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
};

// One use of dropout in training: the next range of the Philox stream.
Var drop(const Var& x, double p, LayerContext& c) {
  if (!c.training || p == 0) return x;
  const uint64_t offset = c.rng_offset;
  c.rng_offset += (static_cast<uint64_t>(x.value().numel()) + 3) / 4;
  return fn::dropout(x, p, true, c.seed, offset);
}

// Per-position layers over a (N, T, E) sequence.
Var linear3(const Var& x, const Var& weight, const Var& bias, kestrel_activation act = KESTREL_ACTIVATION_NONE) {
  const Shape& s = x.value().shape();
  return fn::reshape(fn::linear(fn::reshape(x, {s[0] * s[1], s[2]}), weight, bias, act), {s[0], s[1], weight.value().size(0)});
}
Var norm(const Var& x, Params& p, double eps) {
  Var weight = p.take(), bias = p.take_bias();
  return fn::layer_norm(x, weight, bias, 1, eps);
}

// Attention options: dropout on the weights from the context's Philox stream (a range as large as the
// weights (N * heads, Tq, Tk), taken only when it is drawn), the mask from the layer's constants.
fn::AttentionOptions attention_options(double dropout, LayerContext& c, bool causal, const Tensor& mask,
                                       int64_t weights) {
  fn::AttentionOptions o;
  o.causal = causal;
  o.mask = mask;
  o.dropout = dropout;
  o.training = c.training;
  o.seed = c.seed;
  o.offset = c.rng_offset;
  if (c.training && dropout > 0) c.rng_offset += (static_cast<uint64_t>(weights) + 3) / 4;
  return o;
}

// The number of attention weights of `heads` heads of queries x (N, Tq, E) over `keys` keys.
int64_t weight_count(const Var& x, int64_t heads, int64_t keys) { return x.value().size(0) * heads * x.value().size(1) * keys; }

// linear2(dropout(activation(linear1(x))))
Var feedforward(const Var& x, Params& p, const BlockConfig& b, LayerContext& c) {
  Var w1 = p.take(), b1 = p.take_bias(), w2 = p.take(), b2 = p.take_bias();
  Var hidden = drop(linear3(x, w1, b1, b.gelu ? KESTREL_ACTIVATION_GELU : KESTREL_ACTIVATION_RELU), b.dropout, c);
  return linear3(hidden, w2, b2);
}

// Decoding: the keys and values each attention of a layer carries (two tensors each in the context's
// carried list), taken out at the start of a call and put back at its end. None outside decoding.
std::vector<fn::AttentionCache> load_caches(const LayerContext& c, size_t count) {
  if (!c.carried) return {};
  c.carried->resize(2 * count);
  std::vector<fn::AttentionCache> caches(count);
  for (size_t k = 0; k < count; ++k) caches[k] = {(*c.carried)[2 * k], (*c.carried)[2 * k + 1]};
  return caches;
}
void store_caches(const LayerContext& c, const std::vector<fn::AttentionCache>& caches) {
  for (size_t k = 0; k < caches.size(); ++k) {
    (*c.carried)[2 * k] = caches[k].keys;
    (*c.carried)[2 * k + 1] = caches[k].values;
  }
}
fn::AttentionCache* cache_at(std::vector<fn::AttentionCache>& caches, size_t k) {
  return caches.empty() ? nullptr : &caches[k];
}
int64_t keys_seen(const fn::AttentionCache* cache) { return cache && cache->keys.defined() ? cache->keys.size(1) : 0; }

// A causal mask for this call's queries and keys, kept per device and shape (none for one query, which
// sees every key before it).
class AttentionLayer : public Layer {
 protected:
  Tensor mask(bool causal, const Var& x, int64_t queries, int64_t keys) const {
    if (!causal || queries == 1) return Tensor();
    const Tensor& v = x.value();
    return constant(fmt::format("mask {} {} {} {}", v.device().str(), dtype_name(v.dtype()), queries, keys),
                    [&] { return fn::causal_mask(queries, keys, v.dtype(), v.device()); });
  }
};

// One encoder block over x (N, T, E): self-attention and feed-forward, each with a residual, normed
// after (torch's default) or before (norm_first, as GPT-2). Parameters: self_attn.*, linear1, linear2,
// norm1, norm2.
Var encoder_block(const Var& x, Params& p, const BlockConfig& b, bool causal, const Tensor& mask, LayerContext& c,
                  fn::AttentionCache* cache) {
  fn::AttentionWeights attention = p.attention();
  // The feed-forward's and the norms' parameters come after the attention's, in torch's order.
  Params rest = p;
  rest.next += b.bias ? 4 : 2;  // linear1 and linear2
  auto self_attend = [&](const Var& in) {
    const int64_t keys = in.value().size(1) + keys_seen(cache);
    return drop(fn::multihead_attention(in, in, attention, b.heads,
                                        attention_options(b.dropout, c, causal, mask, weight_count(in, b.heads, keys)),
                                        cache),
                b.dropout, c);
  };
  Params ff = p;
  Var out;
  if (b.norm_first) {
    out = fn::add(x, self_attend(norm(x, rest, b.eps)));
    out = fn::add(out, drop(feedforward(norm(out, rest, b.eps), ff, b, c), b.dropout, c));
  } else {
    out = norm(fn::add(x, self_attend(x)), rest, b.eps);
    out = norm(fn::add(out, drop(feedforward(out, ff, b, c), b.dropout, c)), rest, b.eps);
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
Var decoder_block(const Var& x, const Var& memory, Params& p, const BlockConfig& b, bool self_causal,
                  const Tensor& self_mask, bool memory_causal, const Tensor& memory_mask, LayerContext& c,
                  fn::AttentionCache* self_cache, fn::AttentionCache* memory_cache) {
  fn::AttentionWeights self_weights = p.attention(), memory_weights = p.attention();
  Params ff = p;
  Params rest = p;
  rest.next += b.bias ? 4 : 2;
  auto self_attend = [&](const Var& in) {
    const int64_t keys = in.value().size(1) + keys_seen(self_cache);
    return drop(fn::multihead_attention(in, in, self_weights, b.heads,
                                        attention_options(b.dropout, c, self_causal, self_mask,
                                                          weight_count(in, b.heads, keys)),
                                        self_cache),
                b.dropout, c);
  };
  auto attend_memory = [&](const Var& in) {
    const int64_t keys = memory.value().size(1) + keys_seen(memory_cache);
    return drop(fn::multihead_attention(in, memory, memory_weights, b.heads,
                                        attention_options(b.dropout, c, memory_causal, memory_mask,
                                                          weight_count(in, b.heads, keys)),
                                        memory_cache),
                b.dropout, c);
  };
  Var out;
  if (b.norm_first) {
    out = fn::add(x, self_attend(norm(x, rest, b.eps)));
    out = fn::add(out, attend_memory(norm(out, rest, b.eps)));
    out = fn::add(out, drop(feedforward(norm(out, rest, b.eps), ff, b, c), b.dropout, c));
  } else {
    out = norm(fn::add(x, self_attend(x)), rest, b.eps);
    out = norm(fn::add(out, attend_memory(out)), rest, b.eps);
    out = norm(fn::add(out, drop(feedforward(out, ff, b, c), b.dropout, c)), rest, b.eps);
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

// torch.nn.MultiheadAttention as self-attention: (N, T, E) -> (N, T, E).
class MultiheadAttention : public AttentionLayer {
 public:
  explicit MultiheadAttention(const Args& a)
      : width_(a.integer("embed_dim")), heads_(a.integer("num_heads")), dropout_(a.number("dropout")),
        bias_(a.boolean("bias")), causal_(a.boolean("causal")) {
    if (width_ % heads_ != 0) shape_error(fmt::format("embed_dim {} is not a multiple of num_heads {}", width_, heads_));
  }
  Shape infer(const std::vector<Shape>& in) const override {
    need_width("multihead_attention", in[0], width_);
    return in[0];
  }
  bool causal() const override { return causal_; }
  std::vector<ParamSpec> params(const std::vector<Shape>&) const override {
    std::vector<ParamSpec> p;
    attention_params(p, "", width_, bias_);
    return p;
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    Params p{c.params, 0, bias_};
    std::vector<fn::AttentionCache> caches = load_caches(c, 1);
    fn::AttentionCache* cache = cache_at(caches, 0);
    const int64_t queries = in[0].value().size(1), keys = queries + keys_seen(cache);
    fn::AttentionOptions o =
        attention_options(dropout_, c, causal_, mask(causal_, in[0], queries, keys), weight_count(in[0], heads_, keys));
    Var out = fn::multihead_attention(in[0], in[0], p.attention(), heads_, o, cache);
    if (cache) store_caches(c, caches);
    return out;
  }

 private:
  int64_t width_, heads_;
  double dropout_;
  bool bias_, causal_;
};

// A sequence plus a code for each position: sinusoidal (the PyTorch tutorial's PositionalEncoding, no
// parameters) or learned (a (max_len, E) table, N(0, 0.02) as GPT-2). Decoding continues at the
// positions already seen; a sequence past max_len is refused.
class PositionalEncoding : public Layer {
 public:
  PositionalEncoding(const Args& a, bool learned)
      : learned_(learned), max_len_(a.integer("max_len")), dropout_(a.number("dropout")),
        width_(learned ? a.integer("embedding_dim") : 0) {}
  Shape infer(const std::vector<Shape>& in) const override {
    const char* type = learned_ ? "positional_embedding" : "positional_encoding";
    if (in[0].size() != 3 || (learned_ && in[0][2] != width_))
      shape_error(fmt::format("{} expects a batch-first sequence (N, T, {}), got {}", type,
                              learned_ ? std::to_string(width_) : "features", batch_shape_str(in[0])));
    if (in[0][1] > max_len_)
      shape_error(fmt::format("{}: sequences of {} positions, but max_len is {}; raise max_len", type, in[0][1], max_len_));
    return in[0];
  }
  bool causal() const override { return true; }
  int64_t max_positions() const override { return max_len_; }
  std::vector<ParamSpec> params(const std::vector<Shape>&) const override {
    if (!learned_) return {};
    ParamSpec table{"weight", {max_len_, width_}};
    table.normal_std = 0.02;
    return {table};
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    const Tensor& x = in[0].value();  // (N, T, E)
    const int64_t steps = x.size(1), first = c.position;
    if (first + steps > max_len_)
      throw InvalidArgument(fmt::format("positions {} to {} are past the model's max_len {}: the model was built for "
                                        "sequences of at most {} (generate fewer tokens, or raise max_len and retrain)",
                                        first, first + steps - 1, max_len_, max_len_));
    Var codes;
    if (learned_) {
      codes = fn::slice(c.params[0], 0, first, first + steps);  // (T, E) rows of the table, with their gradient
    } else {
      const Tensor& table = constant(fmt::format("{} {} {}", x.device().str(), dtype_name(x.dtype()), x.size(2)),
                                     [&] { return sinusoids(x.size(2), x.dtype(), x.device()); });
      codes = Var(table.slice(0, first, first + steps));
    }
    return drop(fn::add(in[0], codes), dropout_, c);  // (N, T, E) + (T, E)
  }

 private:
  // pe[t, 2i] = sin(t / 10000^(2i/E)), pe[t, 2i+1] = cos(t / 10000^(2i/E))
  Tensor sinusoids(int64_t width, DType dtype, const Device& device) const {
    std::vector<float> table(static_cast<size_t>(max_len_ * width));
    for (int64_t t = 0; t < max_len_; ++t)
      for (int64_t i = 0; i < width; ++i) {
        const double angle = double(t) / std::pow(10000.0, double(i - i % 2) / double(width));
        table[t * width + i] = static_cast<float>(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    Tensor out = Tensor::from_vector(table, {max_len_, width}, device);
    return dtype == DType::f32 ? out : out.to(dtype);
  }
  bool learned_;
  int64_t max_len_;
  double dropout_;
  int64_t width_;
};

// torch.nn.TransformerEncoderLayer (batch_first); with causal, a decoder-only (GPT) block.
class EncoderLayer : public AttentionLayer {
 public:
  explicit EncoderLayer(const Args& a) : block_(a), causal_(a.boolean("causal")) {}
  Shape infer(const std::vector<Shape>& in) const override {
    need_width("transformer_encoder_layer", in[0], block_.width);
    return in[0];
  }
  bool causal() const override { return causal_; }
  std::vector<ParamSpec> params(const std::vector<Shape>&) const override {
    std::vector<ParamSpec> p;
    encoder_block_params(p, "", block_);
    return p;
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    Params p{c.params, 0, block_.bias};
    std::vector<fn::AttentionCache> caches = load_caches(c, 1);
    fn::AttentionCache* cache = cache_at(caches, 0);
    const int64_t queries = in[0].value().size(1), keys = queries + keys_seen(cache);
    Var out = encoder_block(in[0], p, block_, causal_, mask(causal_, in[0], queries, keys), c, cache);
    if (cache) store_caches(c, caches);
    return out;
  }

 private:
  BlockConfig block_;
  bool causal_;
};

// torch.nn.TransformerDecoderLayer: inputs (target (N, T, E), memory (N, S, E)). Its self-attention is
// causal (torch's usual tgt_mask); memory_causal also masks the memory (when it is the same sequence).
class DecoderLayer : public AttentionLayer {
 public:
  explicit DecoderLayer(const Args& a) : block_(a), memory_causal_(a.boolean("memory_causal")) {}
  int arity() const override { return 2; }
  Shape infer(const std::vector<Shape>& in) const override {
    need_width("transformer_decoder_layer", in[0], block_.width);
    need_width("transformer_decoder_layer (memory)", in[1], block_.width);
    if (memory_causal_ && in[1][1] != in[0][1])
      shape_error(fmt::format("transformer_decoder_layer: memory_causal needs as many memory positions as target "
                              "positions, got {} and {}",
                              batch_shape_str(in[1]), batch_shape_str(in[0])));
    return in[0];
  }
  bool causal() const override { return memory_causal_; }
  std::vector<ParamSpec> params(const std::vector<Shape>&) const override {
    std::vector<ParamSpec> p;
    decoder_block_params(p, "", block_);
    return p;
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    Params p{c.params, 0, block_.bias};
    std::vector<fn::AttentionCache> caches = load_caches(c, 2);
    fn::AttentionCache *self = cache_at(caches, 0), *memory = cache_at(caches, 1);
    const int64_t queries = in[0].value().size(1);
    const Tensor self_mask = mask(true, in[0], queries, queries + keys_seen(self));
    const Tensor memory_mask = mask(memory_causal_, in[0], queries, in[1].value().size(1) + keys_seen(memory));
    Var out = decoder_block(in[0], in[1], p, block_, true, self_mask, memory_causal_, memory_mask, c, self, memory);
    if (self) store_caches(c, caches);
    return out;
  }

 private:
  BlockConfig block_;
  bool memory_causal_;
};

// torch.nn.Transformer (batch_first): inputs (src (N, S, E), tgt (N, T, E)); encoder layers then a
// final norm, decoder layers over its output then a final norm. causal masks every attention (encoder,
// decoder and memory), so src = tgt = the same sequence makes a language model.
class Transformer : public AttentionLayer {
 public:
  explicit Transformer(const Args& a)
      : block_(a), encoders_(a.integer("num_encoder_layers")), decoders_(a.integer("num_decoder_layers")),
        causal_(a.boolean("causal")) {}
  int arity() const override { return 2; }
  Shape infer(const std::vector<Shape>& in) const override {
    need_width("transformer (src)", in[0], block_.width);
    need_width("transformer (tgt)", in[1], block_.width);
    if (causal_ && in[0][1] != in[1][1])
      shape_error(fmt::format("transformer: causal needs src and tgt of one length, got {} and {}",
                              batch_shape_str(in[0]), batch_shape_str(in[1])));
    return in[1];
  }
  bool causal() const override { return causal_; }
  std::vector<ParamSpec> params(const std::vector<Shape>&) const override {
    std::vector<ParamSpec> p;
    for (int64_t i = 0; i < encoders_; ++i) encoder_block_params(p, fmt::format("encoder.layers.{}.", i), block_);
    norm_params(p, "encoder.norm.", block_.width, block_.bias);
    for (int64_t i = 0; i < decoders_; ++i) decoder_block_params(p, fmt::format("decoder.layers.{}.", i), block_);
    norm_params(p, "decoder.norm.", block_.width, block_.bias);
    return p;
  }
  Var forward(const std::vector<Var>& in, LayerContext& c) const override {
    Params p{c.params, 0, block_.bias};
    const int64_t queries = in[1].value().size(1);
    std::vector<fn::AttentionCache> caches = load_caches(c, static_cast<size_t>(encoders_ + 2 * decoders_));
    size_t cache = 0;
    Var memory = in[0];
    for (int64_t i = 0; i < encoders_; ++i) {
      fn::AttentionCache* k = cache_at(caches, cache++);
      memory = encoder_block(memory, p, block_, causal_, mask(causal_, memory, memory.value().size(1),
                                                                memory.value().size(1) + keys_seen(k)),
                             c, k);
    }
    memory = norm(memory, p, block_.eps);
    Var out = in[1];
    for (int64_t i = 0; i < decoders_; ++i) {
      fn::AttentionCache *self = cache_at(caches, cache++), *cross = cache_at(caches, cache++);
      const Tensor self_mask = mask(true, out, queries, queries + keys_seen(self));
      const Tensor memory_mask = mask(causal_, out, queries, memory.value().size(1) + keys_seen(cross));
      out = decoder_block(out, memory, p, block_, true, self_mask, causal_, memory_mask, c, self, cross);
    }
    if (!caches.empty()) store_caches(c, caches);
    return norm(out, p, block_.eps);
  }

 private:
  BlockConfig block_;
  int64_t encoders_, decoders_;
  bool causal_;
};

template <class L>
std::unique_ptr<Layer> make(const Args& a) {
  return std::make_unique<L>(a);
}
template <bool learned>
std::unique_ptr<Layer> make_positional(const Args& a) {
  return std::make_unique<PositionalEncoding>(a, learned);
}

// torch.nn.TransformerEncoderLayer's and DecoderLayer's arguments (batch_first is always true here).
std::vector<ArgSpec> block_args(std::vector<ArgSpec> extra) {
  std::vector<ArgSpec> args{integer("d_model", 1, nullptr), integer("nhead", 1, nullptr),
                            integer("dim_feedforward", 1, 2048), number("dropout", 0, 1, 0.1, true),
                            choice("activation", {"relu", "gelu"}), number("layer_norm_eps", 0, 1, 1e-5),
                            boolean("norm_first", false), boolean("bias", true)};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

std::vector<LayerKind> attention_layer_kinds() {
  return {
      {"multihead_attention",
       {integer("embed_dim", 1, nullptr), integer("num_heads", 1, nullptr), number("dropout", 0, 1, 0.0, true),
        boolean("bias", true), boolean("causal", false)},
       make<MultiheadAttention>},
      {"positional_encoding", {integer("max_len", 1, 5000), number("dropout", 0, 1, 0.0, true)}, make_positional<false>},
      {"positional_embedding",
       {integer("max_len", 1, nullptr), integer("embedding_dim", 1, nullptr), number("dropout", 0, 1, 0.0, true)},
       make_positional<true>},
      {"transformer_encoder_layer", block_args({boolean("causal", false)}), make<EncoderLayer>},
      {"transformer_decoder_layer", block_args({boolean("memory_causal", false)}), make<DecoderLayer>},
      {"transformer",
       block_args({integer("num_encoder_layers", 0, 6, 1000), integer("num_decoder_layers", 1, 6, 1000),
                   boolean("causal", false)}),
       make<Transformer>},
  };
}

}  // namespace kestrel
