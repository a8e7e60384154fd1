// The pieces Transformer layers are made of (transformer_layers.cpp): their parameters in torch's
// order and initialisation, the encoder and decoder blocks, dropout draws, and the keys and values
// carried while decoding. Engine-internal.
#pragma once
#include <fmt/format.h>

#include <string>
#include <vector>

#include "../export/onnx_ops.h"
#include "layer.h"

namespace kestrel::transformer {

// The parameters of the blocks, in torch's state_dict order and with its initialisation.
void attention_params(std::vector<ParamSpec>& p, const std::string& prefix, int64_t e, bool bias);
void linear_params(std::vector<ParamSpec>& p, const std::string& prefix, int64_t in, int64_t out, bool bias);
void norm_params(std::vector<ParamSpec>& p, const std::string& prefix, int64_t e, bool bias);

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

// What the blocks share: sizes, dropout, activation, norm placement (torch's block arguments).
struct BlockConfig {
  int64_t width, heads, feedforward;
  double dropout, eps;
  bool gelu, norm_first, bias;
  explicit BlockConfig(const Args& a);  // throws ShapeError unless nhead divides d_model
};

// A layer norm over the last axis with the next weight and bias of `p` (torch's LayerNorm); see
// fn::layer_norm for `feeds_product` (a pre-norm block's norms, whose results only go into products).
Var norm(const Var& x, Params& p, double eps, bool feeds_product = false);

// One use of dropout in training: the next range of the context's Philox stream.
Var drop(const Var& x, double p, LayerContext& c);

// What one attention masks: later positions (causal, with the (Tq, Tk) mask from the layer's constants)
// and padded keys (N, Tk) (a key_padding_mask layer's output: 1 marks padding), each when given.
struct Masking {
  bool causal = false;
  Tensor mask, key_padding;
};

// Attention options: dropout on the weights from the context's Philox stream (a range as large as the
// weights, taken only when drawn) and the masks.
fn::AttentionOptions attention_options(double dropout, LayerContext& c, const Masking& masking, int64_t weights);
// The number of attention weights of `heads` heads of queries x (N, Tq, E) over `keys` keys.
int64_t weight_count(const Var& x, int64_t heads, int64_t keys);

// Decoding: the keys, values and key-padding rows each attention of a layer carries (three tensors each
// in the context's carried list), taken out at the start of a call and put back at its end. None outside
// decoding.
std::vector<fn::AttentionCache> load_caches(const LayerContext& c, size_t count);
void store_caches(const LayerContext& c, const std::vector<fn::AttentionCache>& caches);
fn::AttentionCache* cache_at(std::vector<fn::AttentionCache>& caches, size_t k);  // nullptr outside decoding
int64_t keys_seen(const fn::AttentionCache* cache);

// A causal mask for this call's queries and keys (none for one query, which sees every key before it).
// Training and evaluation keep it per device and shape, so a captured step uploads nothing; decoding
// builds it each call, since its shapes change with every prompt and would pile up in the layer.
class AttentionLayer : public Layer {
 protected:
  // The key-padding mask input in[index] (N, T) when the node has one, else an undefined tensor.
  static Tensor key_padding(const std::vector<Var>& in, size_t index) {
    return in.size() > index ? in[index].value() : Tensor();
  }
  // Shape rule of a key-padding input: (N, T) over the T positions of `keys` (N, T, E).
  static void need_key_padding(const char* type, const std::vector<Shape>& in, size_t index, const Shape& keys) {
    if (in.size() > index && (in[index].size() != 2 || in[index][1] != keys[1]))
      shape_error(fmt::format("{}: input {} is the key-padding mask, (N, {}) over the keys' positions (a "
                              "key_padding_mask layer of the tokens), got {}",
                              type, index, keys[1], batch_shape_str(in[index])));
  }
  Tensor mask(bool causal, const Var& x, int64_t queries, int64_t keys, const LayerContext& c) const {
    if (!causal || queries == 1) return Tensor();
    const Tensor& v = x.value();
    if (c.carried) return fn::causal_mask(queries, keys, v.dtype(), v.device());
    return constant(fmt::format("mask {} {} {} {}", v.device().str(), dtype_name(v.dtype()), queries, keys),
                    [&] { return fn::causal_mask(queries, keys, v.dtype(), v.device()); });
  }
};


// One encoder block over x (N, T, E): self-attention and feed-forward, each with a residual, normed
// after (torch's default) or before (norm_first, as GPT-2). Parameters: self_attn.*, linear1, linear2,
// norm1, norm2.
Var encoder_block(const Var& x, Params& p, const BlockConfig& b, const Masking& masking, LayerContext& c,
                  fn::AttentionCache* cache);
void encoder_block_params(std::vector<ParamSpec>& p, const std::string& prefix, const BlockConfig& b);

// One decoder block: causal self-attention, attention over the memory (N, S, E), feed-forward.
// Parameters: self_attn.*, multihead_attn.*, linear1, linear2, norm1, norm2, norm3.
Var decoder_block(const Var& x, const Var& memory, Params& p, const BlockConfig& b, const Masking& self_masking,
                  const Masking& memory_masking, LayerContext& c, fn::AttentionCache* self_cache,
                  fn::AttentionCache* memory_cache);
void decoder_block_params(std::vector<ParamSpec>& p, const std::string& prefix, const BlockConfig& b);

// The blocks' ONNX forms in evaluation (no dropout), taking the parameters in the same order: x (N, T, E),
// memory (N, S, E), key_padding the name of an (N, T) or (N, S) key-padding mask ("": none).
std::string norm_onnx(onnx::Graph& g, const std::string& x, onnx::HostParams& p, const BlockConfig& b,
                      const std::string& hint);
std::string encoder_block_onnx(onnx::Graph& g, const std::string& x, onnx::HostParams& p, const BlockConfig& b,
                               bool causal, int64_t positions, const std::string& key_padding, const std::string& hint);
std::string decoder_block_onnx(onnx::Graph& g, const std::string& x, const std::string& memory, onnx::HostParams& p,
                               const BlockConfig& b, bool memory_causal, int64_t positions, int64_t memory_positions,
                               const std::string& memory_key_padding, const std::string& target_key_padding,
                               const std::string& hint);

}  // namespace kestrel::transformer
