// The ONNX forms of Kestrel's functions in inference (see onnx_ops.h), each computing what its
// fn:: counterpart computes, in the same order where rounding could tell them apart.
#include "onnx_ops.h"

#include <fmt/format.h>

#include <cmath>

namespace kestrel::onnx {

namespace {

// Rows [first, first + count) of a matrix (or elements of a vector), named after it.
HostTensor rows(const HostTensor& t, int64_t first, int64_t count, const std::string& suffix) {
  const int64_t width = t.shape.size() > 1 ? t.shape[1] : 1;
  HostTensor out{t.name + suffix, t.shape, {}};
  out.shape[0] = count;
  out.values.assign(t.values.begin() + first * width, t.values.begin() + (first + count) * width);
  return out;
}

// (rows, cols) -> (cols, rows)
std::vector<float> transposed(const HostTensor& m) {
  const int64_t r = m.shape[0], c = m.shape[1];
  std::vector<float> out(m.values.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[j * r + i] = m.values[i * c + j];
  return out;
}

}  // namespace

std::string reshape(Graph& g, const std::string& x, const std::vector<int64_t>& shape, const std::string& hint) {
  // A 0 copies that dim of x (allowzero 0): the batch stays whatever size it is.
  return g.node("Reshape", {x, g.int64s(hint + "/shape", shape)}, hint);
}

std::string transpose(Graph& g, const std::string& x, const std::vector<int64_t>& perm, const std::string& hint) {
  return g.node("Transpose", {x}, hint, {ints("perm", perm)});
}

std::string linear(Graph& g, const std::string& x, const HostTensor& weight, const HostTensor* bias,
                   const std::string& hint) {
  // MatMul broadcasts over the leading axes, as fn::linear folds them into the batch.
  const std::string w = g.initializer(weight.name + ".transposed", {weight.shape[1], weight.shape[0]}, transposed(weight));
  const std::string product = g.node("MatMul", {x, w}, hint);
  return bias ? g.node("Add", {product, g.initializer(*bias)}, hint) : product;
}

std::string activation(Graph& g, const std::string& x, kestrel_activation act, const std::string& hint) {
  switch (act) {
    case KESTREL_ACTIVATION_RELU: return g.node("Relu", {x}, hint);
    case KESTREL_ACTIVATION_GELU: {
      // 0.5 x (1 + erf(x / sqrt 2)), torch's exact GELU
      const std::string erf = g.node("Erf", {g.node("Div", {x, g.scalar(hint + "/sqrt2", float(std::sqrt(2.0)))}, hint)}, hint);
      const std::string one_plus = g.node("Add", {erf, g.scalar(hint + "/one", 1.0f)}, hint);
      return g.node("Mul", {g.node("Mul", {x, one_plus}, hint), g.scalar(hint + "/half", 0.5f)}, hint);
    }
    case KESTREL_ACTIVATION_NONE: break;
  }
  return x;
}

std::string activation(Graph& g, const std::string& x, const std::string& type, const std::string& hint) {
  if (type == "relu") return activation(g, x, KESTREL_ACTIVATION_RELU, hint);
  if (type == "gelu") return activation(g, x, KESTREL_ACTIVATION_GELU, hint);
  if (type == "tanh") return g.node("Tanh", {x}, hint);
  return g.node("Sigmoid", {x}, hint);
}

std::string layer_norm(Graph& g, const std::string& x, int64_t features, const HostTensor* weight,
                       const HostTensor* bias, double eps, const std::string& hint) {
  const std::string scale = weight ? g.initializer(*weight)
                                   : g.initializer(hint + "/ones", {features}, std::vector<float>(size_t(features), 1.0f));
  std::vector<std::string> inputs{x, scale};
  if (bias) inputs.push_back(g.initializer(*bias));
  return g.node("LayerNormalization", inputs, hint, {attr("axis", -1), attr("epsilon", float(eps))});
}

AttentionWeights take_attention(HostParams& p) {
  AttentionWeights w;
  w.in_weight = &p.take();
  w.in_bias = p.take_bias();
  w.out_weight = &p.take();
  w.out_bias = p.take_bias();
  return w;
}

std::string attention(Graph& g, const std::string& query, const std::string& key_value, const AttentionWeights& w,
                      int64_t width, int64_t heads, int64_t queries, int64_t keys, bool causal,
                      const std::string& key_padding, const std::string& hint) {
  const int64_t depth = width / heads;
  // q, k, v through the three (E, E) blocks of the packed projection, each (N, T, E) -> (N, heads, T, D).
  auto project = [&](const std::string& x, int64_t block, const char* suffix, const std::vector<int64_t>& perm) {
    const HostTensor weight = rows(*w.in_weight, block * width, width, suffix);
    HostTensor bias;
    if (w.in_bias) bias = rows(*w.in_bias, block * width, width, suffix);
    const std::string p = linear(g, x, weight, w.in_bias ? &bias : nullptr, hint);
    return transpose(g, reshape(g, p, {0, 0, heads, depth}, hint), perm, hint);
  };
  const std::string q = project(query, 0, ".q", {0, 2, 1, 3});
  const std::string k = project(key_value, 1, ".k", {0, 2, 3, 1});  // (N, heads, D, S): already transposed
  const std::string v = project(key_value, 2, ".v", {0, 2, 1, 3});
  std::string scores =
      g.node("Mul", {g.node("MatMul", {q, k}, hint), g.scalar(hint + "/scale", float(1.0 / std::sqrt(double(depth))))},
             hint);  // (N, heads, T, S)
  if (causal && queries > 1) {
    std::vector<float> mask(size_t(queries * keys), 0.0f);
    const int64_t past = keys - queries;
    for (int64_t i = 0; i < queries; ++i)
      for (int64_t j = past + i + 1; j < keys; ++j) mask[i * keys + j] = -1e30f;
    scores = g.node("Add", {scores, g.initializer(hint + "/causal_mask", {queries, keys}, mask)}, hint);
  }
  if (!key_padding.empty()) {  // (N, S) -> (N, 1, 1, S), broadcast over the heads and queries
    const std::string blocked =
        g.node("Mul", {key_padding, g.scalar(hint + "/padded", float(KESTREL_KEY_PADDING_SCORE))}, hint);
    scores = g.node("Add", {scores, reshape(g, blocked, {0, 1, 1, keys}, hint)}, hint);
  }
  const std::string weights = g.node("Softmax", {scores}, hint, {attr("axis", -1)});
  const std::string context = g.node("MatMul", {weights, v}, hint);  // (N, heads, T, D)
  const std::string joined = reshape(g, transpose(g, context, {0, 2, 1, 3}, hint), {0, 0, width}, hint);
  return linear(g, joined, *w.out_weight, w.out_bias, hint);
}

std::string recurrent(Graph& g, const std::string& x, fn::RecurrentCell cell, int64_t hidden, int64_t layers,
                      int directions, bool bias, const std::vector<HostTensor>& params, const std::string& hint) {
  // torch's gate blocks in ONNX's order: LSTM (i, f, g, o) -> (i, o, f, c); GRU (r, z, n) -> (z, r, h).
  std::vector<int64_t> order{0};
  const char* op = "RNN";
  if (cell == fn::RecurrentCell::lstm) order = {0, 3, 1, 2}, op = "LSTM";
  if (cell == fn::RecurrentCell::gru) order = {1, 0, 2}, op = "GRU";
  auto reorder = [&](const HostTensor& t, std::vector<float>& out) {
    const int64_t block = hidden * (t.shape.size() > 1 ? t.shape[1] : 1);
    for (int64_t gate : order)
      out.insert(out.end(), t.values.begin() + gate * block, t.values.begin() + (gate + 1) * block);
  };
  const int64_t gates = int64_t(order.size()) * hidden;
  const size_t per_direction = bias ? 4 : 2;
  std::string sequence = transpose(g, x, {1, 0, 2}, hint);  // (T, N, F): ONNX's default layout
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<float> w, r, b;
    int64_t features = 0;
    for (int d = 0; d < directions; ++d) {
      const size_t first = size_t(l * directions + d) * per_direction;
      features = params[first].shape[1];
      reorder(params[first], w);
      reorder(params[first + 1], r);
    }
    for (int d = 0; d < directions && bias; ++d) {  // B: per direction, the input biases then the hidden ones
      const size_t first = size_t(l * directions + d) * per_direction;
      reorder(params[first + 2], b);
      reorder(params[first + 3], b);
    }
    const std::string layer = fmt::format("{}.l{}", hint, l);
    std::vector<std::string> inputs{sequence, g.initializer(layer + ".W", {directions, gates, features}, w),
                                    g.initializer(layer + ".R", {directions, gates, hidden}, r)};
    if (bias) inputs.push_back(g.initializer(layer + ".B", {directions, 2 * gates}, b));
    std::vector<Attribute> attributes{attr("hidden_size", hidden),
                                      attr("direction", std::string(directions == 2 ? "bidirectional" : "forward"))};
    if (cell == fn::RecurrentCell::gru) attributes.push_back(attr("linear_before_reset", 1));  // as torch
    if (cell == fn::RecurrentCell::rnn_tanh || cell == fn::RecurrentCell::rnn_relu)
      attributes.push_back(strings(
          "activations", std::vector<std::string>(size_t(directions), cell == fn::RecurrentCell::rnn_relu ? "Relu" : "Tanh")));
    const std::string y = g.node(op, inputs, layer, attributes);  // (T, directions, N, H)
    // (T, N, directions * H): each step's directions side by side, forward first, as torch concatenates.
    sequence = reshape(g, transpose(g, y, {0, 2, 1, 3}, layer), {0, 0, directions * hidden}, layer);
  }
  return transpose(g, sequence, {1, 0, 2}, hint);  // (N, T, H * directions)
}

}  // namespace kestrel::onnx
