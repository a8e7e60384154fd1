// Attention layers with torch.nn's names, arguments, parameter names and initialisation:
// multihead_attention (self-attention), positional_encoding (sinusoidal) and positional_embedding
// (learned), transformer_encoder_layer, transformer_decoder_layer and transformer (encoder-decoder).
// Kestrel's sequences are batch-first (N, T, d_model). `causal` (Kestrel's, where torch passes a mask
// per call) masks every position's view of later ones, which a language model needs; causal layers can
// decode step by step, carrying their keys and values (Model::decode). Where torch takes a
// key_padding_mask per call, these layers take an optional last input, the output of a key_padding_mask
// layer over the tokens, so padded positions get no attention.
#include <fmt/format.h>

#include <cmath>

#include "kestrel/ops.h"
#include "transformer_blocks.h"

namespace kestrel {

namespace {

using namespace transformer;


void need_width(const char* type, const Shape& in, int64_t width) {
  if (in.size() != 3 || in[2] != width)
    shape_error(fmt::format("{} expects a batch-first sequence (N, T, {}), got {}", type, width, batch_shape_str(in)));
}

// torch's key_padding_mask from the tokens: (N, T) i64 -> (N, T) f32, 1 where the token is padding_idx
// (the text categories pad their documents with id 0), 0 elsewhere. Each position's mask is its own
// token's, so it decodes step by step like any per-position layer.
class KeyPaddingMask : public Layer {
 public:
  explicit KeyPaddingMask(const Args& a) : padding_(a.integer("padding_idx")) {}
  DType input_dtype() const override { return DType::i64; }
  Shape infer(const std::vector<Shape>& in) const override {
    if (in[0].size() != 2)
      shape_error(fmt::format("key_padding_mask expects token ids (N, T), got {}", batch_shape_str(in[0])));
    return in[0];
  }
  bool causal() const override { return true; }
  Var forward(const std::vector<Var>& in, LayerContext&) const override {
    const Tensor& tokens = in[0].value();  // (N, T) i64
    const Tensor& padding = constant(fmt::format("padding {}", tokens.device().str()), [&] {
      return Tensor::full({}, double(padding_), DType::i64, tokens.device());
    });
    return Var(ops::binary(KESTREL_BINARY_EQ, tokens, padding).to(DType::f32));  // (N, T)
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    const std::string equal = g.node("Equal", {io.inputs[0], g.int64s(io.name + "/padding_idx", {padding_})}, io.name);
    return g.node("Cast", {equal}, io.name, {onnx::attr("to", 1)});  // TensorProto.FLOAT
  }

 private:
  int64_t padding_;
};

// The name of a node's key-padding input in[index] in an ONNX graph, "" when it has none.
std::string onnx_key_padding(const onnx::LayerIO& io, size_t index) {
  return io.inputs.size() > index ? io.inputs[index] : "";
}

// torch.nn.MultiheadAttention as self-attention: (N, T, E) [, key padding (N, T)] -> (N, T, E).
class MultiheadAttention : public AttentionLayer {
 public:
  explicit MultiheadAttention(const Args& a)
      : width_(a.integer("embed_dim")), heads_(a.integer("num_heads")), dropout_(a.number("dropout")),
        bias_(a.boolean("bias")), causal_(a.boolean("causal")) {
    if (width_ % heads_ != 0) shape_error(fmt::format("embed_dim {} is not a multiple of num_heads {}", width_, heads_));
  }
  int optional_inputs() const override { return 1; }
  Shape infer(const std::vector<Shape>& in) const override {
    need_width("multihead_attention", in[0], width_);
    need_key_padding("multihead_attention", in, 1, in[0]);
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
    fn::AttentionOptions o = attention_options(
        dropout_, c, {causal_, mask(causal_, in[0], queries, keys, c), key_padding(in, 1)}, weight_count(in[0], heads_, keys));
    Var out = fn::multihead_attention(in[0], in[0], p.attention(), heads_, o, cache);
    if (cache) store_caches(c, caches);
    return out;
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    onnx::HostParams p{io.params, 0, bias_};
    const int64_t positions = io.input_shapes[0][1];
    return onnx::attention(g, io.inputs[0], io.inputs[0], onnx::take_attention(p), width_, heads_, positions, positions,
                           causal_, onnx_key_padding(io, 1), io.name);
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
    // The sinusoids' (max_len, E) table is built whole, as a learned table of that size is a parameter:
    // held to the same 2^40 elements (beyond, its size would overflow).
    int64_t table = 0;
    if (!learned_ && (__builtin_mul_overflow(max_len_, in[0][2], &table) || table > (int64_t(1) << 40)))
      shape_error(fmt::format("{}: a table of max_len {} x {} features is more than 2^40 values; lower max_len to the "
                              "longest sequence the model will see",
                              type, max_len_, in[0][2]));
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
      const Tensor& table = constant(fmt::format("{} {} {}", x.device().str(), dtype_name(x.dtype()), x.size(2)), [&] {
        Tensor out = Tensor::from_vector(sinusoids(x.size(2)), {max_len_, x.size(2)}, x.device());
        return x.dtype() == DType::f32 ? out : out.to(x.dtype());
      });
      codes = Var(table.slice(0, first, first + steps));
    }
    return drop(fn::add(in[0], codes), dropout_, c);  // (N, T, E) + (T, E)
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    const int64_t steps = io.input_shapes[0][1], width = io.input_shapes[0][2];
    std::string codes;  // (T, E)
    if (learned_) {
      codes = g.node("Slice", {g.initializer(io.params[0]), g.int64s(io.name + "/starts", {0}),
                               g.int64s(io.name + "/ends", {steps}), g.int64s(io.name + "/axes", {0})},
                     io.name);
    } else {
      std::vector<float> table = sinusoids(width);
      table.resize(size_t(steps * width));
      codes = g.initializer(io.name + ".sinusoids", {steps, width}, table);
    }
    return g.node("Add", {io.inputs[0], codes}, io.name);
  }

 private:
  // pe[t, 2i] = sin(t / 10000^(2i/E)), pe[t, 2i+1] = cos(t / 10000^(2i/E))
  std::vector<float> sinusoids(int64_t width) const {
    std::vector<float> table(static_cast<size_t>(max_len_ * width));
    for (int64_t t = 0; t < max_len_; ++t)
      for (int64_t i = 0; i < width; ++i) {
        const double angle = double(t) / std::pow(10000.0, double(i - i % 2) / double(width));
        table[t * width + i] = static_cast<float>(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    return table;
  }
  bool learned_;
  int64_t max_len_;
  double dropout_;
  int64_t width_;
};

// torch.nn.TransformerEncoderLayer (batch_first): (N, T, E) [, key padding (N, T)]; with causal, a
// decoder-only (GPT) block.
class EncoderLayer : public AttentionLayer {
 public:
  explicit EncoderLayer(const Args& a) : block_(a), causal_(a.boolean("causal")) {}
  int optional_inputs() const override { return 1; }
  Shape infer(const std::vector<Shape>& in) const override {
    need_width("transformer_encoder_layer", in[0], block_.width);
    need_key_padding("transformer_encoder_layer", in, 1, in[0]);
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
    Var out = encoder_block(in[0], p, block_, {causal_, mask(causal_, in[0], queries, keys, c), key_padding(in, 1)}, c,
                            cache);
    if (cache) store_caches(c, caches);
    return out;
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    onnx::HostParams p{io.params, 0, block_.bias};
    return encoder_block_onnx(g, io.inputs[0], p, block_, causal_, io.input_shapes[0][1], onnx_key_padding(io, 1),
                              io.name);
  }

 private:
  BlockConfig block_;
  bool causal_;
};

// torch.nn.TransformerDecoderLayer: inputs (target (N, T, E), memory (N, S, E) [, the memory's key
// padding (N, S) [, the target's (N, T)]]: torch's memory_key_padding_mask and tgt_key_padding_mask). Its
// self-attention is causal (torch's usual tgt_mask); memory_causal also masks the memory (when it is the
// same sequence).
class DecoderLayer : public AttentionLayer {
 public:
  explicit DecoderLayer(const Args& a) : block_(a), memory_causal_(a.boolean("memory_causal")) {}
  int arity() const override { return 2; }
  int optional_inputs() const override { return 2; }
  Shape infer(const std::vector<Shape>& in) const override {
    need_width("transformer_decoder_layer", in[0], block_.width);
    need_width("transformer_decoder_layer (memory)", in[1], block_.width);
    need_key_padding("transformer_decoder_layer", in, 2, in[1]);
    need_key_padding("transformer_decoder_layer", in, 3, in[0]);
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
    const Masking self_masking{true, mask(true, in[0], queries, queries + keys_seen(self), c), key_padding(in, 3)};
    const Masking memory_masking{memory_causal_,
                                 mask(memory_causal_, in[0], queries, in[1].value().size(1) + keys_seen(memory), c),
                                 key_padding(in, 2)};
    Var out = decoder_block(in[0], in[1], p, block_, self_masking, memory_masking, c, self, memory);
    if (self) store_caches(c, caches);
    return out;
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    onnx::HostParams p{io.params, 0, block_.bias};
    return decoder_block_onnx(g, io.inputs[0], io.inputs[1], p, block_, memory_causal_, io.input_shapes[0][1],
                              io.input_shapes[1][1], onnx_key_padding(io, 2), onnx_key_padding(io, 3), io.name);
  }

 private:
  BlockConfig block_;
  bool memory_causal_;
};

// torch.nn.Transformer (batch_first): inputs (src (N, S, E), tgt (N, T, E) [, src's key padding (N, S),
// torch's src_key_padding_mask and memory_key_padding_mask in one [, tgt's (N, T), its
// tgt_key_padding_mask]]); encoder layers then a final norm,
// decoder layers over its output then a final norm. causal masks every attention (encoder, decoder and
// memory), so src = tgt = the same sequence makes a language model.
class Transformer : public AttentionLayer {
 public:
  explicit Transformer(const Args& a)
      : block_(a), encoders_(a.integer("num_encoder_layers")), decoders_(a.integer("num_decoder_layers")),
        causal_(a.boolean("causal")) {}
  int arity() const override { return 2; }
  int optional_inputs() const override { return 2; }
  Shape infer(const std::vector<Shape>& in) const override {
    need_width("transformer (src)", in[0], block_.width);
    need_width("transformer (tgt)", in[1], block_.width);
    need_key_padding("transformer", in, 2, in[0]);
    need_key_padding("transformer", in, 3, in[1]);
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
    const Tensor source_padding = key_padding(in, 2), target_padding = key_padding(in, 3);  // (N, S), (N, T)
    Var memory = in[0];
    for (int64_t i = 0; i < encoders_; ++i) {
      fn::AttentionCache* k = cache_at(caches, cache++);
      const int64_t sources = memory.value().size(1);
      memory = encoder_block(memory, p, block_,
                             {causal_, mask(causal_, memory, sources, sources + keys_seen(k), c), source_padding}, c, k);
    }
    memory = norm(memory, p, block_.eps);
    Var out = in[1];
    for (int64_t i = 0; i < decoders_; ++i) {
      fn::AttentionCache *self = cache_at(caches, cache++), *cross = cache_at(caches, cache++);
      const Masking self_masking{true, mask(true, out, queries, queries + keys_seen(self), c), target_padding};
      const Masking memory_masking{causal_, mask(causal_, out, queries, memory.value().size(1) + keys_seen(cross), c),
                                   source_padding};
      out = decoder_block(out, memory, p, block_, self_masking, memory_masking, c, self, cross);
    }
    if (!caches.empty()) store_caches(c, caches);
    return norm(out, p, block_.eps);
  }
  std::string to_onnx(onnx::Graph& g, const onnx::LayerIO& io) const override {
    onnx::HostParams p{io.params, 0, block_.bias};
    const int64_t sources = io.input_shapes[0][1], targets = io.input_shapes[1][1];
    std::string memory = io.inputs[0];
    for (int64_t i = 0; i < encoders_; ++i)
      memory = encoder_block_onnx(g, memory, p, block_, causal_, sources, onnx_key_padding(io, 2),
                                  fmt::format("{}/encoder.{}", io.name, i));
    memory = norm_onnx(g, memory, p, block_, io.name + "/encoder.norm");
    std::string out = io.inputs[1];
    for (int64_t i = 0; i < decoders_; ++i)
      out = decoder_block_onnx(g, out, memory, p, block_, causal_, targets, sources, onnx_key_padding(io, 2),
                               onnx_key_padding(io, 3), fmt::format("{}/decoder.{}", io.name, i));
    return norm_onnx(g, out, p, block_, io.name + "/decoder.norm");
  }

 private:
  BlockConfig block_;
  int64_t encoders_, decoders_;
  bool causal_;
};

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
      {"key_padding_mask", {integer("padding_idx", 0, 0)}, make_layer<KeyPaddingMask>},
      {"multihead_attention",
       {integer("embed_dim", 1, nullptr), integer("num_heads", 1, nullptr), number("dropout", 0, 1, 0.0, true),
        boolean("bias", true), boolean("causal", false)},
       make_layer<MultiheadAttention>},
      {"positional_encoding", {integer("max_len", 1, 5000), number("dropout", 0, 1, 0.0, true)}, make_positional<false>},
      {"positional_embedding",
       {integer("max_len", 1, nullptr), integer("embedding_dim", 1, nullptr), number("dropout", 0, 1, 0.0, true)},
       make_positional<true>},
      {"transformer_encoder_layer", block_args({boolean("causal", false)}), make_layer<EncoderLayer>},
      {"transformer_decoder_layer", block_args({boolean("memory_causal", false)}), make_layer<DecoderLayer>},
      {"transformer",
       block_args({integer("num_encoder_layers", 0, 6, 1000), integer("num_decoder_layers", 1, 6, 1000),
                   boolean("causal", false)}),
       make_layer<Transformer>},
  };
}

}  // namespace kestrel
