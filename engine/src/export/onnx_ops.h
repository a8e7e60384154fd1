// The ONNX forms of Kestrel's differentiable functions in inference, for layers' to_onnx(): each adds
// its nodes to the graph and returns the name of the value it computes. Engine-internal.
#pragma once
#include <string>
#include <vector>

#include "kestrel/functional.h"
#include "onnx_graph.h"

namespace kestrel::onnx {

// What a layer's export is given: its name, its inputs (value names and shapes, batch first, -1 the
// batch) and its parameters and buffers copied to the host, in the order params()/buffers() declare them.
struct LayerIO {
  std::string name;
  std::vector<std::string> inputs;
  std::vector<Shape> input_shapes;
  std::vector<HostTensor> params, buffers;
};

// A layer's parameters handed out in declaration order (bias-free layers get nullptr for each bias).
struct HostParams {
  const std::vector<HostTensor>& all;
  size_t next = 0;
  bool bias = true;
  const HostTensor& take() { return all.at(next++); }
  const HostTensor* take_bias() { return bias ? &all.at(next++) : nullptr; }
};

std::string reshape(Graph& g, const std::string& x, const std::vector<int64_t>& shape, const std::string& hint);
std::string transpose(Graph& g, const std::string& x, const std::vector<int64_t>& perm, const std::string& hint);

// x (..., in) -> (..., out) = x weight^T + bias; weight (out, in), bias (out) or nullptr.
std::string linear(Graph& g, const std::string& x, const HostTensor& weight, const HostTensor* bias,
                   const std::string& hint);
// relu, gelu (exact, through Erf: opset 17 has no Gelu), tanh, sigmoid; NONE passes x through.
std::string activation(Graph& g, const std::string& x, kestrel_activation act, const std::string& hint);
std::string activation(Graph& g, const std::string& x, const std::string& type, const std::string& hint);
// Over the last axis of `features`; weight and bias (features) or nullptr (no affine / no bias).
std::string layer_norm(Graph& g, const std::string& x, int64_t features, const HostTensor* weight,
                       const HostTensor* bias, double eps, const std::string& hint);

// torch.nn.MultiheadAttention's packed projections: in_proj (3E, E) and (3E), out_proj (E, E) and (E).
struct AttentionWeights {
  const HostTensor *in_weight, *in_bias, *out_weight, *out_bias;  // biases nullptr without bias
};
AttentionWeights take_attention(HostParams& p);
// query (N, T, E) attending over key_value (N, S, E) with `heads` heads, decomposed into MatMul, Softmax
// and a mask (T, S) of -1e30 above the diagonal when causal (as fn::causal_mask): every opset runs it.
// key_padding names an (N, S) mask, 1 on padded keys, which then get KESTREL_KEY_PADDING_SCORE (-1e29,
// the plugin ABI's: below any real key, above a causally masked one) ("": none).
std::string attention(Graph& g, const std::string& query, const std::string& key_value, const AttentionWeights& w,
                      int64_t width, int64_t heads, int64_t queries, int64_t keys, bool causal,
                      const std::string& key_padding, const std::string& hint);

// torch.nn.RNN/LSTM/GRU (batch-first, stacked, optionally bidirectional) as ONNX RNN/LSTM/GRU nodes, one
// per layer: x (N, T, F) -> (N, T, hidden * directions). `params` as Kestrel (and torch) order them:
// per layer, per direction, weight_ih, weight_hh, then bias_ih, bias_hh when `bias`.
std::string recurrent(Graph& g, const std::string& x, fn::RecurrentCell cell, int64_t hidden, int64_t layers, int directions,
                      bool bias, const std::vector<HostTensor>& params, const std::string& hint);

}  // namespace kestrel::onnx
